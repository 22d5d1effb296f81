"""One `gpudiag check --format json` report (schema_version 1) → its node's facts, read result by result.

The report is read member by member (gpudiag.fleet.jsonstream) and each result reduced as it is read, so that a
report of 435,000 results costs what its node keeps (model.NodeFacts: at most MAX_FAILURES failures listed, the
rest counted), not a tree of 435,000 dicts. Every field is taken only with the type it should have: a result that
is not a check result, a number that is not finite, a value that is too long is unreadable (the node is then
`unknown`), never judged and never a crash.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Optional

from gpudiag.checks import DRIFT_FACTS
from gpudiag.fleet import screening
from gpudiag.fleet.jsonstream import Malformed, Reader
from gpudiag.fleet.model import (FIRMWARE_PREFIX, MAX_GPUS, MAX_NIC_BOARDS, MAX_VALUE_CHARS, NIC_FIRMWARE_PREFIX,
                                 Failure, NodeFacts, ecc_mode, finite, watts)

RESULT_MAX_CHARS = 1 << 20  # one result; gpudiag's largest (a kernel log's event counts) is a few KB
HEAD_MAX_CHARS = 1 << 20  # any other member (summary, versions)
HOSTNAME_MAX_CHARS = 253  # a DNS name
MAX_MODELS = 16  # distinct GPU models counted in one report
MAX_FIRMWARE = 64  # firmware components kept per GPU (an MI300X lists about 30)
MAX_CAUSES = 16  # causes read per result: inventory.gpu_count names every lost GPU; the first 16 tie it to them

# active.* check → the figure it measures, and how to read it from `observed` (scaled to B/s, FLOP/s)
_FIGURES = {
    "active.pcie_h2d_bandwidth": ("copy_h2d", "gb_per_second", 1e9),
    "active.pcie_d2h_bandwidth": ("copy_d2h", "gb_per_second", 1e9),
    "active.stress": ("stress_fp32", "fp32_tflops", 1e12),
}


class Unreadable(Exception):
    """The report cannot be read (cut short, not a report, another schema): its node is unknown. `hostname` is
    the report's own where it was read before the fault."""

    def __init__(self, reason: str, hostname: Optional[str] = None) -> None:
        super().__init__(reason)
        self.hostname = hostname


def read_report(reader: Reader, origin: str, max_chars: Optional[int] = None) -> tuple[NodeFacts, str]:
    """The report that comes next in `reader` (at most `max_chars` of text): its facts, and its `collected_at`."""
    start, head, facts = reader.offset, {}, _Facts()
    try:
        if reader.peek() != "{":
            raise Malformed("not a JSON object: not a gpudiag check report")
        results = False
        for key in reader.members():
            if key == "results":
                results = True
                for result in reader.values(RESULT_MAX_CHARS):
                    facts.add(result)
                    if max_chars is not None and reader.offset - start > max_chars:
                        raise Malformed(f"over {max_chars:,} characters")
            elif key in ("schema_version", "hostname", "collected_at"):
                head[key] = reader.value(HEAD_MAX_CHARS)
            else:
                reader.value(HEAD_MAX_CHARS)
    except Malformed as exc:
        raise Unreadable(f"not a readable report: {exc}", _hostname(head)) from None
    if not results:
        raise Unreadable("not a gpudiag check report (no results list)", _hostname(head))
    return _checked(head, facts, origin)


def node_facts(report: Any, origin: str) -> tuple[NodeFacts, str]:
    """The same from a report already parsed (a dict)."""
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise Unreadable("not a gpudiag check report (no results list)")
    facts = _Facts()
    for result in report["results"]:
        facts.add(result)
    return _checked(report, facts, origin)


def _hostname(head: dict) -> Optional[str]:
    hostname = head.get("hostname")
    if isinstance(hostname, str) and hostname.strip() and len(hostname.strip()) <= HOSTNAME_MAX_CHARS:
        return hostname.strip()
    return None


def _checked(head: dict, facts: "_Facts", origin: str) -> tuple[NodeFacts, str]:
    hostname = _hostname(head)
    if head.get("schema_version") != 1:
        version = head.get("schema_version")
        raise Unreadable(f"schema_version {repr(version)[:20]}, this gpudiag reads 1", hostname)
    if hostname is None:
        raise Unreadable("the report names no hostname (or not one of at most 253 characters)")
    collected_at = head.get("collected_at")
    return facts.done(hostname), collected_at if isinstance(collected_at, str) else ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _references(value: Any) -> list[str]:
    """A result's `caused_by` (report/causes.py references), what of it can be read: at most MAX_CAUSES of at most
    300 characters; anything else is no cause (the result then stands as a finding of its own: shown, not hidden)."""
    if not isinstance(value, list):
        return []
    return [ref for ref in value[:MAX_CAUSES] if isinstance(ref, str) and 0 < len(ref) <= 300]


def _label(value: Any, limit: int = 64) -> Optional[str]:
    return value if isinstance(value, str) and value and len(value) <= limit else None


class _Facts:
    """A NodeFacts being built from results, one at a time."""

    def __init__(self) -> None:
        self.facts = NodeFacts(node="")
        self.models: Counter = Counter()
        self.unreadable = 0
        self.nic_rate_min: Optional[float] = None  # Gb/s, the slowest up fabric port (network.rate)

    def done(self, hostname: str) -> NodeFacts:
        facts = self.facts
        facts.node = hostname
        facts.model = min(self.models, key=lambda m: (-self.models[m], m)) if self.models else None
        if "gpu_count" not in facts.properties and facts.gpus:
            facts.properties["gpu_count"] = str(len(facts.gpus))
        if self.nic_rate_min is not None:
            facts.properties["nic_port_rate_min"] = f"{self.nic_rate_min:g} Gb/s"
        if self.unreadable:
            facts.add_unread(f"{self.unreadable:,} result(s) that are not check results")
        return facts

    def add(self, result: Any) -> None:
        device = result.get("device") if isinstance(result, dict) else None
        if (not isinstance(result, dict) or _label(result.get("check"), 200) is None
                or not (device is None or isinstance(device, dict))):
            self.unreadable += 1
            return
        gpu = device.get("index") if device is not None else None
        gpu = gpu if isinstance(gpu, int) and not isinstance(gpu, bool) and gpu >= 0 else None
        bus_id = _label(device.get("pci_bus_id")) if device is not None else None
        if gpu is not None and self.facts.known_gpu(gpu):
            if bus_id is not None:
                self.facts.bus_ids[gpu] = bus_id
            model = _label(device.get("model"), MAX_VALUE_CHARS)
            if model is not None and (model in self.models or len(self.models) < MAX_MODELS):
                self.models[model] += 1
        self._judged(result, gpu, bus_id)
        screening.from_report(self.facts, result, gpu, bus_id)
        if result.get("status") == "unknown":
            return  # a check that could not judge: its observed value is why, not the property (a lost GPU's errors)
        try:
            self._properties(result, gpu)
        except (RecursionError, ValueError, TypeError) as exc:  # json.dumps of an observed nested too deep
            self.facts.add_unread(f"{result['check']}: its observed values cannot be read ({type(exc).__name__})")

    def _judged(self, result: dict, gpu: Optional[int], bus_id: Optional[str]) -> None:
        status = result.get("status")
        if status in ("fail", "unknown"):
            self.facts.add_failure(Failure(
                check=result["check"], status=status, gpu=gpu, pci_bus_id=bus_id,
                action=_label(result.get("action")) or ("drain" if status == "fail" else "watch"),
                fault_code=_label(result.get("fault_code"), 200),
                message=_text(result.get("message")), remediation=_text(result.get("remediation")),
                caused_by=_references(result.get("caused_by"))))
        elif status == "warn":
            self.facts.add_warning(result["check"])
        elif status not in ("pass", "skip"):
            self.unreadable += 1  # a status gpudiag does not write: not judged, and not shown sound

    def _properties(self, result: dict, gpu: Optional[int]) -> None:
        facts = self.facts
        check, observed, status = result["check"], result.get("observed"), result.get("status")
        if not isinstance(observed, dict):
            return
        if check in DRIFT_FACTS:  # a property a family declared (Family.drift)
            self._drift_fact(check, observed)
        elif check == "driver.library":
            for name in ("driver_version", "runtime_version"):
                value = observed.get(name)
                if isinstance(value, str) and value:
                    if len(value) > MAX_VALUE_CHARS:
                        facts.add_unread(f"{name}: a value of {len(value):,} characters")
                    else:
                        facts.properties[name] = value
            count = observed.get("device_count")
            if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MAX_GPUS:
                facts.properties["gpu_count"] = str(count)
        elif check == "firmware.vbios_consistent":  # {version: [GPU indices]}
            for version, members in observed.items():
                for index in members if isinstance(members, list) else ():
                    if isinstance(index, int) and not isinstance(index, bool):
                        facts.gpu_property(index, "vbios_version", version)
        elif check == "firmware.versions_consistent" and status == "pass":  # {component: version}, alike on every GPU
            components = [(c, v) for c, v in observed.items() if isinstance(v, str) and len(c) <= 64][:MAX_FIRMWARE]
            for index in sorted(facts.bus_ids):
                for component, version in components:
                    facts.gpu_property(index, FIRMWARE_PREFIX + component, version)
        elif check == "network.firmware":  # {"board": …, "versions": {version: [NIC names]}}
            self._nic_firmware(observed)
        elif check == "network.rate":
            raw = observed.get("rate_gbps")
            rate = finite(raw)
            if raw is not None and rate is None:
                facts.add_unread(f"network.rate: rate_gbps {str(raw)[:20]} is not a finite number")
            elif rate is not None:
                self.nic_rate_min = rate if self.nic_rate_min is None else min(self.nic_rate_min, rate)
        elif gpu is None:
            return
        elif check == "pcie.link_generation":
            # The slot's maximum: what the platform allows (BIOS setting, riser, retimer). The GPU's own maximum is its
            # model's, and the exporter does not always have it (sysfs vs NVML), so it is not compared.
            slot_max = observed.get("slot_max")
            facts.gpu_property(gpu, "pcie_slot_max", slot_max if isinstance(slot_max, str) else None)
        elif check == "power.limit":
            limit = observed.get("limit_watts")
            if limit is not None and finite(limit) is None:
                facts.add_unread(f"power limit of GPU {gpu}: {str(limit)[:20]} is not a finite number")
            facts.gpu_property(gpu, "power_limit", watts(limit))
        elif check == "ecc.mode":
            facts.gpu_property(gpu, "ecc_mode", ecc_mode(observed.get("enabled")))
        elif check == "inventory.partition_mode":
            facts.gpu_property(gpu, "partition_mode", json.dumps(observed, sort_keys=True))
        elif check == "active.p2p_bandwidth":
            value = self._number(observed, "gb_per_second", 1e9, check, gpu)
            if value is not None and facts.known_gpu(gpu):
                key = ("p2p_min", gpu)
                facts.figures[key] = min(value, facts.figures.get(key, value))
        elif check in _FIGURES:
            figure, name, scale = _FIGURES[check]
            value = self._number(observed, name, scale, check, gpu)
            if value is not None:
                facts.figure(figure, gpu, value, check)

    def _drift_fact(self, check: str, observed: dict) -> None:
        fact = DRIFT_FACTS[check]
        value = fact.read(observed)
        if value is None:
            return
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
            self.facts.add_unread(f"{check}: {fact.name} is not a value of at most {MAX_VALUE_CHARS} characters")
        else:
            self.facts.properties[fact.name] = value

    def _nic_firmware(self, observed: dict) -> None:
        """The firmware versions one board's NICs run, as a node property (a node-level comparison: which NIC runs
        which is the node's own check's to say)."""
        board, versions = observed.get("board"), observed.get("versions")
        if not isinstance(board, str) or not board or len(board) > 64 or not isinstance(versions, dict):
            return
        name = NIC_FIRMWARE_PREFIX + board
        boards = [n for n in self.facts.properties if n.startswith(NIC_FIRMWARE_PREFIX)]
        if name not in boards and len(boards) >= MAX_NIC_BOARDS:
            self.facts.add_unread(f"NIC boards past the first {MAX_NIC_BOARDS}")
            return
        known = set(self.facts.properties.get(name, "").split(",")) - {""}
        value = ",".join(sorted(known | {v for v in versions if isinstance(v, str) and v}))
        if len(value) > MAX_VALUE_CHARS:
            self.facts.add_unread(f"{name}: a value of {len(value):,} characters")
        elif value:
            self.facts.properties[name] = value

    def _number(self, observed: dict, name: str, scale: float, check: str, gpu: int) -> Optional[float]:
        """observed[name] x scale as a finite number; absent is None, anything else unreadable (never compared)."""
        raw = observed.get(name)
        value = finite(raw)
        value = None if value is None else finite(value * scale)
        if raw is not None and value is None:
            self.facts.add_unread(f"{check} on GPU {gpu}: {name} {str(raw)[:20]} is not a finite number: not compared")
        return value
