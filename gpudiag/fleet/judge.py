"""The fleet verdict: pure functions of the nodes' normalised facts (fleet.model), whatever source they came from.

- fail:   a check failed or could not decide (unknown: not shown healthy, as gpudiag_check_ok reads it) on the node.
- silent: the node, or one of its GPUs, does not report a current collection (target down, no collection completed
          yet, stale, the last one overran, gpudiag_device_up 0, an empty report).
- unknown: part of what would show the node sound was not read (a query that failed, a report or a value that
          could not be read, no check results): not shown sound, so never pass.
- drift:  among nodes with GPUs of one model, the node (or GPU) has a value of a property that most of them do not
          (driver, runtime, VBIOS, firmware, GPU count, PCIe link, power limit, ECC, partition mode).
- lag:    a load-test figure of one of its GPUs is more than `threshold` below the median of the same GPU index on
          the nodes of its model (at least MIN_PEERS of them): the node that slows a synchronous job down.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Iterable, Optional

from gpudiag.checks import DRIFT_FACTS
from gpudiag.fleet import consequences, screening
from gpudiag.fleet.model import (FIGURES, FIRMWARE_PREFIX, GPU_PROPERTIES, KIND_STATUS, MAX_FAILURES, MAX_LISTED,
                                 NIC_FIRMWARE_PREFIX, NODE_PROPERTIES, NODE_SEVERITY, UNSOUND, FleetVerdict, NodeFacts,
                                 NodeVerdict)

MIN_PEERS = 3  # fewer nodes of a model have no meaningful median
UNKNOWN_MODEL = "unknown model"

_DRIFT_ADVICE = {
    "driver_version": "Install the driver the other nodes of this model run (or roll the upgrade out to all of "
                      "them), then reboot so that module and library agree; confirm with "
                      "`gpudiag check --only driver`.",
    "runtime_version": "Align the CUDA / ROCm runtime with the other nodes of this model (the driver package or the "
                       "ROCm release); confirm with `gpudiag check --only driver.library`.",
    "gpu_count": "A GPU is missing (off the bus, unbound or lost) or the node is not the model of its peers: "
                 "`gpudiag check --only inventory` on it; reseat or RMA the missing GPU.",
    "vbios_version": "Flash the VBIOS the other GPUs of this model run (the system vendor's firmware bundle, "
                     "nvfwupd / amdfwflash); confirm with `nvidia-smi -q | grep VBIOS` or `amd-smi static --vbios`.",
    "pcie_slot_max": "The slot allows a different PCIe link than on the peers: check the BIOS PCIe speed setting, "
                     "the riser and retimer of that slot (`lspci -vv`: LnkCap of the port above the GPU).",
    "power_limit": "Set the power limit its peers run (`nvidia-smi -pl` / `amd-smi set --power-cap`) or find why it "
                   "was changed (a site script, a BMC power cap).",
    "ecc_mode": "Set ECC as on its peers (`nvidia-smi -e 1`, then a GPU reset) and find what changed it.",
    "partition_mode": "Set the partition / MIG mode its peers run (`amd-smi set --compute-partition`, "
                      "`nvidia-smi -mig`), then reset the GPU.",
    "nic_port_rate_min": "A NIC port trained slower than on its peers: `gpudiag check --only network.rate` on the "
                         "node names it; the suspects are its cable or optic and the switch port.",
}
_NIC_FIRMWARE_ADVICE = ("Flash the NIC firmware its peers run (mlx5: `mlxfwmanager --query`, then the system "
                        "vendor's bundle; Broadcom: niccli) and reset the NIC or reboot; `gpudiag check --only "
                        "network.firmware` on the node names the NIC.")
# Drift that changes what a job computes or sees (driver, runtime, missing GPUs, ECC, partitions) keeps work off the
# node until aligned; a firmware, link-capability or power-limit difference is watched and fixed in a window.
_DRIFT_ACTION = {"driver_version": "drain", "runtime_version": "drain", "gpu_count": "drain", "ecc_mode": "reset",
                 "partition_mode": "reset"}
# The families' drift facts (Family.drift): their advice and the drifting node's action.
_DRIFT_ADVICE.update({fact.name: fact.advice for fact in DRIFT_FACTS.values()})
_DRIFT_ACTION.update({fact.name: fact.action for fact in DRIFT_FACTS.values() if fact.action != "watch"})
_FIRMWARE_ADVICE = ("Update the firmware component to the version the other GPUs of this model run (the system "
                    "vendor's firmware bundle); confirm with `gpudiag check --only firmware`.")
_LAG_ADVICE = {
    "copy_h2d": "Host copies slower than on its peers: check the PCIe link under load (`gpudiag check --level 2 "
                "--only pcie,active`), the CPU/NUMA binding and IOMMU mode, then reseat the GPU or its riser.",
    "p2p_min": "GPU-to-GPU copies slower than on its peers: check NVLink/XGMI links and errors (`gpudiag check "
               "--only topology`) and the fabric manager; a PCIe path instead of NVLink points at the fabric.",
    "stress_fp32": "Less compute under load than its peers: look for clocks held down by power or heat (`gpudiag "
                   "check --level 2 --only active.stress,thermal,power`): fans, airflow, power cap, PSU.",
}
_LAG_ADVICE["copy_d2h"] = _LAG_ADVICE["copy_h2d"]
_SILENT_ADVICE = {
    None: "Nothing from this node: check the exporter (`systemctl status gpudiag-exporter`, `curl "
          "http://NODE:9858/healthz`), the network path from Prometheus, and whether the node is up.",
    # From reports there is no exporter to check (issue 36, item 6): the run that should have written the report.
    "report": "No report from this node: check the job that runs `gpudiag check --json` there (did it run on this "
              "node, where did it write, what did its log say; an empty report is a gpudiag killed or crashed), and "
              "whether the node is up; `gpudiag check` on the node judges it now.",
    "gpu": "The GPU does not answer: `gpudiag check --only inventory` on the node; a GPU off the bus or lost needs "
           "a reboot, then an RMA if it stays gone.",
}
_UNREAD_ADVICE = ("Nothing shows this node sound: see SOURCE for what could not be read; rerun when Prometheus answers "
                  "in full, or run `gpudiag check` on the node.")
_CONFLICT_ADVICE = ("Several reports claim this hostname: two nodes may share it (a cloned image), or a run wrote "
                    "to two files. Give each node its own hostname and report file (`srun --output reports/%N.json`).")


def judge(nodes: Iterable[NodeFacts], threshold: float = 0.05, source: str = "",
          warnings: Optional[list[str]] = None, complete: bool = True, from_reports: bool = False) -> FleetVerdict:
    """The verdict on `nodes`. `complete` False (a query timed out, a partial answer, a report skipped) makes a
    fleet with no unsound node `unknown` rather than `pass`: what was not read was not shown sound. `from_reports`:
    the nodes are check reports (their silence is a report missing, not an exporter)."""
    nodes = sorted(nodes, key=lambda n: n.node)
    findings: dict[str, list[dict]] = {n.node: [] for n in nodes}
    for node in nodes:
        findings[node.node] += (_failures(node) + _silences(node, from_reports) + _unread(node) + _conflicts(node)
                                + screening.findings(node))
    drift = find_drift(nodes)
    for group in drift:
        for minority in group["minority"]:
            for member in minority["nodes"]:
                findings[member["node"]].append(_drift_finding(group, minority["value"], member))
    outliers = find_outliers(nodes, threshold)
    for outlier in outliers:
        findings[outlier["node"]].append(_lag_finding(outlier, threshold))
    for found in findings.values():
        consequences.link(found)  # each finding's caused_by: the report's, or the lost-GPU rule's (Prometheus)
    verdicts = []
    for node in nodes:
        statuses = [KIND_STATUS[f["kind"]] for f in findings[node.node]] + (["warn"] if node.warnings else [])
        verdicts.append(NodeVerdict(node.node, max(statuses or ["pass"], key=NODE_SEVERITY.__getitem__),
                                    findings[node.node]))
    if any(v.status in UNSOUND for v in verdicts):
        status = "fail"
    elif not complete or any(v.status == "unknown" for v in verdicts):
        status = "unknown"
    else:
        status = "warn" if any(v.status == "warn" for v in verdicts) else "pass"
    return FleetVerdict(status, verdicts, drift, outliers, source, list(warnings or []), threshold, complete)


def _failures(node: NodeFacts) -> list[dict]:
    listed = [{"kind": f.status, "check": f.check, "gpu": f.gpu,
               "pci_bus_id": f.pci_bus_id or node.bus_ids.get(f.gpu) if f.gpu is not None else f.pci_bus_id,
               "action": f.action, "fault_code": f.fault_code, "message": f.message, "remediation": f.remediation,
               "caused_by": f.caused_by}
              for f in node.failures]
    more = sum(node.more_failures.values())
    if more:  # one finding stands for them: the node is drained whatever they are
        kinds = ", ".join(f"{count:,} {status}" for status, count in sorted(node.more_failures.items()))
        listed.append({"kind": "fail" if node.more_failures.get("fail") else "unknown", "check": None, "gpu": None,
                       "pci_bus_id": None, "action": "drain", "fault_code": None, "more": more,
                       "message": f"and {more:,} more failing or undecided check results ({kinds}), not listed: "
                                  f"at most {MAX_FAILURES} a node",
                       "remediation": "`gpudiag check` on the node lists them all."})
    return listed


def _unread(node: NodeFacts) -> list[dict]:
    if not node.unread:
        return []
    more = f"; and {node.more_unread} more" if node.more_unread else ""
    return [{"kind": "unread", "check": None, "gpu": None, "pci_bus_id": None, "action": "watch", "fault_code": None,
             "message": "not shown sound: " + "; ".join(node.unread) + more, "remediation": _UNREAD_ADVICE}]


def _conflicts(node: NodeFacts) -> list[dict]:
    if not node.conflicts:
        return []
    return [{"kind": "conflict", "check": None, "gpu": None, "pci_bus_id": None, "action": "watch",
             "fault_code": None, "message": f"{len(node.conflicts) + 1} reports claim this hostname; judged the worst "
                                            f"of them ({'; '.join(node.conflicts)})", "remediation": _CONFLICT_ADVICE}]


def _silences(node: NodeFacts, from_reports: bool = False) -> list[dict]:
    listed = [
        {
            "kind": "silent",
            "check": None,
            "gpu": gpu,
            "pci_bus_id": bus_id or node.bus_ids.get(gpu),
            "action": "reboot" if gpu is not None or bus_id else "drain",
            "fault_code": None,
            "message": why,
            "remediation": _SILENT_ADVICE["gpu" if gpu is not None or bus_id else "report" if from_reports else None],
        }
        for gpu, bus_id, why in node.silent
    ]
    if node.more_silent:
        listed.append({"kind": "silent", "check": None, "gpu": None, "pci_bus_id": None, "action": "reboot",
                       "fault_code": None, "more": node.more_silent,
                       "message": f"and {node.more_silent:,} more GPUs that do not answer, not listed: at most "
                                  f"{MAX_LISTED} a node", "remediation": _SILENT_ADVICE["gpu"]})
    return listed


# -- drift ------------------------------------------------------------------------------------------------------


def _groups(nodes: list[NodeFacts]) -> dict[str, list[NodeFacts]]:
    groups: dict[str, list[NodeFacts]] = defaultdict(list)
    for node in nodes:
        if node.properties or node.gpu_properties:  # a node that said nothing has nothing to compare
            groups[node.model or UNKNOWN_MODEL].append(node)
    return groups


def find_drift(nodes: list[NodeFacts]) -> list[dict]:
    """One entry per (model, property) whose value differs across that model's nodes; the minority values are
    named with their nodes (and GPUs, for per-GPU properties). A tie has no expected value: every side is named."""
    drift = []
    for model, members in sorted(_groups(nodes).items()):
        if len(members) < 2:
            continue
        node_names = dict(NODE_PROPERTIES)
        node_names.update({fact.name: fact.description for fact in DRIFT_FACTS.values()})  # the families'
        node_names.update({n: f"{n[len(NIC_FIRMWARE_PREFIX):]} NIC firmware" for node in members
                           for n in node.properties if n.startswith(NIC_FIRMWARE_PREFIX)})
        for name, description in sorted(node_names.items(), key=lambda item: item[0] not in NODE_PROPERTIES):
            holders: dict[str, dict[str, Optional[list[int]]]] = defaultdict(dict)
            for node in members:
                if name in node.properties:
                    holders[node.properties[name]][node.node] = None
            drift += _drift_entry(model, name, description, holders, Counter({v: len(n) for v, n in holders.items()}))
        gpu_names = dict(GPU_PROPERTIES)
        gpu_names.update({n: f"{n[len(FIRMWARE_PREFIX):]} firmware version" for node in members
                          for props in node.gpu_properties.values() for n in props if n.startswith(FIRMWARE_PREFIX)})
        for name, description in gpu_names.items():
            holders = defaultdict(dict)
            counts: Counter = Counter()
            for node in members:
                for gpu, props in sorted(node.gpu_properties.items()):
                    if name in props:
                        holders[props[name]].setdefault(node.node, []).append(gpu)
                        counts[props[name]] += 1
            drift += _drift_entry(model, name, description, holders, counts)
    return drift


def _drift_entry(model: str, name: str, description: str, holders: dict[str, dict[str, Optional[list[int]]]],
                 counts: Counter) -> list[dict]:
    if len(counts) < 2:
        return []
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    tied = ranked[0][1] == ranked[1][1]
    expected = None if tied else ranked[0][0]
    minority = [{"value": value, "count": count,
                 "nodes": [{"node": node, "gpus": gpus} for node, gpus in sorted(holders[value].items())]}
                for value, count in ranked if value != expected]
    return [{"model": model, "property": name, "description": description, "expected": expected,
             "expected_count": 0 if tied else ranked[0][1], "minority": minority,
             "remediation": _FIRMWARE_ADVICE if name.startswith(FIRMWARE_PREFIX) else _NIC_FIRMWARE_ADVICE
             if name.startswith(NIC_FIRMWARE_PREFIX) else _DRIFT_ADVICE.get(name, "")}]


def _drift_finding(group: dict, value: str, member: dict) -> dict:
    gpus = member["gpus"]
    where = "" if gpus is None else f" on GPU {', '.join(map(str, gpus))}"
    unit = "" if gpus is None else " GPUs"
    peers = (f"{group['expected_count']}{unit} of its peers run {group['expected']}" if group["expected"] is not None
             else "its peers are split evenly")
    return {"kind": "drift", "check": None, "property": group["property"], "gpu": gpus[0] if gpus and len(gpus) == 1
            else None, "gpus": gpus, "pci_bus_id": None, "action": _DRIFT_ACTION.get(group["property"], "watch"),
            "fault_code": None,
            "message": f"{group['description']} {value}{where}; {peers} ({group['model']})",
            "remediation": group["remediation"]}


# -- outliers ---------------------------------------------------------------------------------------------------


def find_outliers(nodes: list[NodeFacts], threshold: float) -> list[dict]:
    """Per model, figure and GPU index: the nodes whose figure is more than `threshold` below the median."""
    samples: dict[tuple[str, str, int], list[tuple[float, NodeFacts]]] = defaultdict(list)
    for node in nodes:
        for (figure, gpu), value in node.figures.items():
            if math.isfinite(value):  # the sources keep no other; a NaN would make every median NaN
                samples[(node.model or UNKNOWN_MODEL, figure, gpu)].append((value, node))
    outliers = []
    for (model, figure, gpu), values in sorted(samples.items(), key=lambda item: item[0]):
        if len(values) < MIN_PEERS:
            continue
        median = statistics.median(v for v, _ in values)
        if median <= 0:
            continue
        for value, node in values:
            deficit = 1.0 - value / median
            if deficit > threshold + 1e-9:  # exactly at the threshold is not beyond it (floating point)
                outliers.append({"node": node.node, "gpu": gpu, "pci_bus_id": node.bus_ids.get(gpu), "model": model,
                                 "figure": figure, "description": FIGURES[figure], "value": value,
                                 "median": median, "peers": len(values), "deficit": round(deficit, 4)})
    outliers.sort(key=lambda o: (o["node"], o["gpu"], o["figure"]))
    return outliers


def _lag_finding(outlier: dict, threshold: float) -> dict:
    return {"kind": "lag", "check": None, "figure": outlier["figure"], "gpu": outlier["gpu"],
            "pci_bus_id": outlier["pci_bus_id"], "action": "watch", "fault_code": None,
            "message": f"{outlier['description']} {human_rate(outlier['figure'], outlier['value'])} is "
                       f"{outlier['deficit']:.1%} below the median {human_rate(outlier['figure'], outlier['median'])} "
                       f"of {outlier['peers']} {outlier['model']} nodes (threshold {threshold:.0%})",
            "remediation": _LAG_ADVICE[outlier["figure"]]}


def human_rate(figure: str, value: float) -> str:
    if figure == "stress_fp32":
        return f"{value / 1e12:.2f} TFLOP/s"
    return f"{value / 1e9:.2f} GB/s"
