"""baseline.*: this node against a golden baseline (Expectations.baseline, from `gpudiag check --baseline FILE`).

Every drift fails and is named: which GPU (by PCI bus ID), which field, golden vs now. GPUs are matched by bus ID
and vendor; a GPU of the baseline that is missing here, or a baseline of another vendor or GPU count, is one clear
baseline.inventory failure and the other checks compare the GPUs the two have in common. A field the baseline
recorded as null was not reported on the golden node and is not compared; a field the golden node reported and
this one does not is a drift ("not reported").
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Optional

from gpudiag.expect.baseline import GpuBaseline, NodeBaseline, PeerBaseline
from gpudiag.checks.baseline_of import baseline_of
from gpudiag.checks.common import (
    VENDOR_NAMES,
    Check,
    device_for_bus_id,
    failed,
    passed,
    skipped,
    unknown,
    unreachable,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, NodeSnapshot, Status

NOT_REPORTED = "not reported"
_RERECORD = ("If the change was made on purpose across the fleet, record the baseline again on a known-good node "
             "(`gpudiag baseline --output FILE`).")


def _show(value: Any) -> str:
    return NOT_REPORTED if value is None else str(value)


def _list_change(golden: list[str], now: list[str]) -> str:
    missing, extra = Counter(golden) - Counter(now), Counter(now) - Counter(golden)
    parts = [f"{label} " + ", ".join(f"{item} ×{n}" for item, n in sorted(items.items()))
             for label, items in (("missing", missing), ("new", extra)) if items]
    return "; ".join(parts) or "same items, other order"


def _describe(name: str, golden: Any, now: Any) -> str:
    if isinstance(golden, list) and isinstance(now, list):
        return f"{name}: {_list_change(golden, now)} (golden {len(golden)}, now {len(now)})"
    return f"{name}: golden {_show(golden)}, now {_show(now)}"


def _drifts(golden: GpuBaseline, now: GpuBaseline, names: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """field → (golden, now) for each recorded field that differs; dicts compare per key of the golden one."""
    drifts: dict[str, tuple[Any, Any]] = {}
    for name in names:
        old, new = getattr(golden, name), getattr(now, name)
        if isinstance(old, dict):
            drifts.update({f"{name}.{key}": (value, new.get(key)) for key, value in old.items()
                           if new.get(key) != value})
        elif old is not None and old != new:
            drifts[name] = (old, new)
    return drifts


def _compared(golden: GpuBaseline, now: GpuBaseline, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(now, name) for name in names if getattr(golden, name) not in (None, {})}


def _judge_gpu(check_id: str, snapshot: NodeSnapshot, golden: GpuBaseline, now: GpuBaseline,
               names: tuple[str, ...], remediation: str) -> CheckResult:
    device = device_for_bus_id(snapshot, golden.pci_bus_id)
    where = device.label if device is not None else f"GPU at {golden.pci_bus_id}"
    if device is not None and not device.reachable:
        return unreachable(check_id, device)
    if device is None:
        return unknown(check_id, None, f"{where} is on the PCI bus but not enumerated by its library: its "
                                       f"{', '.join(names)} cannot be compared",
                       observed={"pci_bus_id": golden.pci_bus_id, "enumerated": False},
                       expected={"pci_bus_id": golden.pci_bus_id, "enumerated": True},
                       remediation="See inventory.gpus_visible for why the GPU is not enumerated.")
    drifts = _drifts(golden, now, names)
    if not drifts:
        return passed(check_id, device, f"{where} matches the baseline ({', '.join(names)})",
                      observed=_compared(golden, now, names), expected=_compared(golden, golden, names))
    listing = "; ".join(_describe(name, old, new) for name, (old, new) in drifts.items())
    return failed(check_id, device, f"{where} drifted from the baseline: {listing}",
                  observed={name: new for name, (_, new) in drifts.items()},
                  expected={name: old for name, (old, _) in drifts.items()},
                  remediation=f"{remediation} {_RERECORD}")


def _common_gpus(golden: NodeBaseline, now: NodeBaseline) -> list[tuple[GpuBaseline, GpuBaseline]]:
    here = {(g.pci_bus_id, g.vendor): g for g in now.gpus}
    return [(g, here[(g.pci_bus_id, g.vendor)]) for g in golden.gpus if (g.pci_bus_id, g.vendor) in here]


def _no_baseline(check_id: str) -> list[CheckResult]:
    return [skipped(check_id, None, "no baseline given (gpudiag check --baseline FILE)")]


def _other_vendor(check_id: str, golden: NodeBaseline, now: NodeBaseline) -> Optional[CheckResult]:
    """Node-wide facts of another vendor's node are not comparable: baseline.inventory already says why."""
    if golden.vendors == now.vendors:
        return None
    return skipped(check_id, None, f"the baseline is of a {_vendors(golden)} node, this one has {_vendors(now)} GPUs "
                                   f"(see baseline.inventory)")


def gpu_check(check_id: str, summary: str, names: tuple[str, ...], remediation: str) -> Check:
    """A baseline check comparing `names` of every GPU the baseline and this node have in common."""

    def run(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
        if expect.baseline is None:
            return _no_baseline(check_id)
        pairs = _common_gpus(expect.baseline, baseline_of(snapshot))
        if not pairs:
            return [skipped(check_id, None, "no GPU of the baseline is on this node (see baseline.inventory)")]
        return [_judge_gpu(check_id, snapshot, golden, now, names, remediation) for golden, now in pairs]

    return Check(check_id, run, summary)


# ---------------------------------------------------------------------------------------------------------------
# Node-level comparisons


def _vendors(baseline: NodeBaseline) -> str:
    return "/".join(sorted(VENDOR_NAMES[v] for v in baseline.vendors)) or "no GPU"


def _inventory_node(golden: NodeBaseline, now: NodeBaseline) -> CheckResult:
    check_id = "baseline.inventory"
    golden_ids = {(g.pci_bus_id, g.vendor) for g in golden.gpus}
    now_ids = {(g.pci_bus_id, g.vendor) for g in now.gpus}
    observed = {"vendors": sorted(v.value for v in now.vendors), "gpu_count": len(now.gpus),
                "pci_bus_ids": sorted(b for b, _ in now_ids)}
    expected = {"vendors": sorted(v.value for v in golden.vendors), "gpu_count": len(golden.gpus),
                "pci_bus_ids": sorted(b for b, _ in golden_ids)}
    problems = []
    if golden.vendors != now.vendors:
        problems.append(f"the baseline is of a {_vendors(golden)} node, this node has {_vendors(now)} GPUs")
    if len(golden.gpus) != len(now.gpus):
        problems.append(f"GPU count: golden {len(golden.gpus)}, now {len(now.gpus)}")
    missing = sorted(b for b, _ in golden_ids - now_ids)
    extra = sorted(b for b, _ in now_ids - golden_ids)
    if missing:
        problems.append(f"GPU(s) of the baseline not on this node: {', '.join(missing)}")
    if extra:
        problems.append(f"GPU(s) not in the baseline: {', '.join(extra)}")
    if not problems:
        return passed(check_id, None, f"{len(now.gpus)} {_vendors(now)} GPU(s) at the baseline's bus IDs",
                      observed=observed, expected=expected)
    return failed(check_id, None, "; ".join(problems), observed=observed, expected=expected,
                  remediation=("Check that this node is compared with the baseline of its own SKU. Otherwise a GPU is "
                               "missing (see inventory.gpus_visible and inventory.gpu_count: reseat, check the BMC "
                               "inventory) or sits at another bus ID (a different slot, riser or BIOS PCIe "
                               f"enumeration setting). {_RERECORD}"))


def inventory(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "baseline.inventory"
    if expect.baseline is None:
        return _no_baseline(check_id)
    now = baseline_of(snapshot)
    models = [_judge_gpu(check_id, snapshot, golden, here, ("model",),
                         "This GPU is another model than the golden node's at the same bus ID: a wrong replacement "
                         "part, or the wrong baseline for this SKU.")
              for golden, here in _common_gpus(expect.baseline, now)]
    return [_inventory_node(expect.baseline, now)] + models


def _node_drift(check_id: str, what: str, golden: dict[str, Any], now: dict[str, Any],
                remediation: str, said: Optional[Callable[[dict, int], str]] = None) -> CheckResult:
    """One node-level result for `what`; `said` words the drifts ({key: (golden, now)}, keys compared), by
    default each key's own."""
    drifts = {key: (value, now.get(key)) for key, value in golden.items() if now.get(key) != value}
    if not drifts:
        return passed(check_id, None, f"{what} match the baseline ({len(golden)} compared)", observed=now,
                      expected=golden)
    listing = said(drifts, len(golden)) if said else "; ".join(f"{key}: {_change(old, new)}"
                                                                for key, (old, new) in drifts.items())
    return failed(check_id, None, f"{what} drifted from the baseline{' ' if said else ': '}{listing}",
                  observed={key: new for key, (_, new) in drifts.items()},
                  expected={key: old for key, (old, _) in drifts.items()}, remediation=f"{remediation} {_RERECORD}")


def driver(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "baseline.driver"
    if expect.baseline is None:
        return _no_baseline(check_id)
    if not expect.baseline.driver_versions:
        return [skipped(check_id, None, "the baseline recorded no driver version")]
    now = baseline_of(snapshot)
    mismatch = _other_vendor(check_id, expect.baseline, now)
    if mismatch:
        return [mismatch]
    return [_node_drift(check_id, "driver versions", expect.baseline.driver_versions, now.driver_versions,
                        "Install the golden node's driver version (the site's driver package) and reboot, or the "
                        "library named was not usable here: see driver.library.")]


PAIR = "<->"  # also written out in report/causes.py, which reads the pairs back


def _peer_key(peer: PeerBaseline) -> str:
    return f"{peer.pci_bus_id_a}{PAIR}{peer.pci_bus_id_b}"


def _peer_value(peer: PeerBaseline) -> str:
    return f"{peer.path}" + (f" ×{peer.link_count}" if peer.link_count is not None else "")


def _change(old: Any, new: Any) -> str:
    return f"golden {_show(old)}, now {_show(new)}"


def _pairs_said(drifts: dict[str, tuple[Any, Any]], compared: int) -> str:
    """The pairs that drifted, said by the GPU they share: a GPU lost or with its links down makes every pair with it
    drift alike (20 pairs of a lost GPU and one with its links down were 20 lines, issue 36 item 6). The GPU in the
    most drifted pairs is named first with them, and so on; a pair that shares its GPU with no other is named
    alone. Every pair is in observed/expected all the same."""
    left = dict(drifts)
    parts = []
    while left:
        ends = Counter(end for pair in left for end in pair.split(PAIR))
        gpu, count = min(ends.items(), key=lambda item: (-item[1], item[0]))
        if count < 2:
            break
        mine = {pair: left.pop(pair) for pair in list(left) if gpu in pair.split(PAIR)}
        changes = Counter(_change(old, new) for old, new in mine.values())
        said = "; ".join(change + (f" ({n} pair{'s' if n > 1 else ''})" if len(changes) > 1 else "")
                         for change, n in changes.items())
        parts.append(f"{gpu} with {len(mine)} GPU(s) ({said})")
    parts += [f"{pair}: {_change(old, new)}" for pair, (old, new) in left.items()]
    return f"on {len(drifts)} of {compared} pairs: " + "; ".join(parts)


def peers(snapshot: NodeSnapshot, golden_node: NodeBaseline) -> list[CheckResult]:
    check_id = "baseline.fabric"
    now_node = baseline_of(snapshot)
    mismatch = _other_vendor(check_id, golden_node, now_node)
    if mismatch:
        return [mismatch]
    now = {_peer_key(p): _peer_value(p) for p in now_node.peers}
    golden = {_peer_key(p): _peer_value(p) for p in golden_node.peers}
    return [_node_drift(check_id, "GPU peer paths", golden, now,
                        "GPU pairs now reach each other over another path than on the golden node (a link down, a "
                        "GPU moved, P2P disabled): see topology.links_up and topology.p2p.", _pairs_said)]


def _fabric_check() -> Check:
    per_gpu = gpu_check("baseline.fabric", "", ("links_up", "link_remotes"),
                        "Links are down or lead elsewhere than on the golden node: see topology.links_up; on NVSwitch "
                        "systems check nvidia-fabricmanager; reseat the GPU on the baseboard if a link stays down.")

    def run(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
        results = per_gpu.run(snapshot, expect)
        if expect.baseline is not None and expect.baseline.peers:
            results += peers(snapshot, expect.baseline)
        return results

    return Check("baseline.fabric", run, "NVLink/XGMI links per GPU and the GPU peer paths match the baseline")


CHECKS: tuple[Check, ...] = (
    Check("baseline.inventory", inventory, "the node has the baseline's GPU vendor, count, bus IDs and models"),
    gpu_check("baseline.pcie", "each GPU's PCIe capability (GPU and slot max generation/width) matches the baseline",
              ("pcie_max_generation", "pcie_max_width", "slot_max_generation", "slot_max_width"),
              "The GPU or its slot now supports less than on the golden node: a riser or retimer of another rating, a "
              "BIOS PCIe link-speed or bifurcation setting, or another GPU SKU. Compare `lspci -vvv -s <bus id> | grep "
              "LnkCap` for the GPU and its upstream port on both nodes."),
    gpu_check("baseline.numa", "each GPU's NUMA node matches the baseline", ("numa_node",),
              "The BIOS NUMA settings (NPS on AMD EPYC, SNC on Intel) differ from the golden node, or the firmware no "
              "longer reports the GPU's proximity: compare the BIOS settings and "
              "`cat /sys/bus/pci/devices/<bus id>/numa_node` on both nodes."),
    _fabric_check(),
    gpu_check("baseline.firmware", "each GPU's VBIOS and firmware versions match the baseline",
              ("vbios_version", "firmware_versions"),
              "Flash the golden node's firmware bundle onto this GPU (nvfwupd / the system vendor's HGX or OAM "
              "firmware package) so it behaves like its siblings."),
    Check("baseline.driver", driver, "the driver versions match the baseline"),
    gpu_check("baseline.partition", "each GPU's partition modes (AMD compute/memory, NVIDIA MIG) match the baseline",
              ("compute_partition", "memory_partition", "partitions", "mig_enabled"),
              "Set the golden node's partition mode (see inventory.partition_mode for the commands)."),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "baseline.inventory": {F: ("drain", "GPUDIAG-BASELINE-INVENTORY-DRIFT")},
    "baseline.pcie": {F: ("drain", "GPUDIAG-BASELINE-PCIE-DRIFT")},
    "baseline.numa": {F: ("drain", "GPUDIAG-BASELINE-NUMA-DRIFT")},
    "baseline.fabric": {F: ("drain", "GPUDIAG-BASELINE-FABRIC-DRIFT")},
    "baseline.firmware": {F: ("drain", "GPUDIAG-BASELINE-FIRMWARE-DRIFT")},
    "baseline.driver": {F: ("drain", "GPUDIAG-BASELINE-DRIVER-DRIFT")},
    "baseline.partition": {F: ("drain", "GPUDIAG-BASELINE-PARTITION-DRIFT")},
}
_REFERENCE = {
    "baseline.inventory": (
        "GPU vendor, count, bus IDs and models against the golden baseline",
        "A GPU missing or different from the golden node: check the build, the slots, and `lspci`."),
    "baseline.pcie": (
        "GPU and slot maximum PCIe generation and width against the baseline",
        "The GPU or slot now supports less than on the golden node: a riser or retimer of another rating, a BIOS "
        "setting, or another board revision."),
    "baseline.numa": (
        "each GPU's NUMA node against the baseline",
        "GPUs on other sockets than on the golden node: check the slots and the BIOS NUMA settings."),
    "baseline.fabric": (
        "NVLink / XGMI links per GPU and the GPU peer paths against the baseline",
        "Links or peer paths differ from the golden node: check the bridges, the NVSwitches and the fabric manager."),
    "baseline.firmware": (
        "each GPU's VBIOS and firmware versions against the baseline",
        "Flash the golden node's firmware versions."),
    "baseline.driver": (
        "driver versions against the baseline",
        "Install the golden node's driver version."),
    "baseline.partition": (
        "each GPU's partition modes (AMD compute/memory, NVIDIA MIG) against the baseline",
        "Set the golden node's partition mode (see inventory.partition_mode)."),
}
FAMILY = Family(
    "baseline", order=210, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    probe_parts={"peers": ("baseline.fabric",)},
    note="Judged only with `--baseline FILE` (a golden node written by `gpudiag baseline`); skipped otherwise.",
)
