"""The normalised view of one node that both sources produce and the judgement reads, and what it concludes.

Property values are strings in one format whatever the source (a report's `"Gen5 x16"`, Prometheus's generation
and width gauges both become `Gen5 x16`; a power limit is `700 W`), so that a fleet read from reports and one read
from Prometheus drift on the same things. A value a node does not report is absent, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

FLEET_SCHEMA_VERSION = 1

# Node verdicts, worst first. `silent`: the node (or one of its GPUs) does not report; `drift`: it differs from
# the majority of its peers (same GPU model); `lag`: a load-test figure is below its peers' median.
NODE_STATUSES = ("fail", "silent", "drift", "lag", "warn", "pass")
NODE_SEVERITY = {status: len(NODE_STATUSES) - rank for rank, status in enumerate(NODE_STATUSES)}
UNSOUND = frozenset({"fail", "silent", "drift", "lag"})  # exit 1

# Node-level properties (one value per node) and per-GPU ones (one per GPU), as drift compares them.
NODE_PROPERTIES = {
    "driver_version": "driver version",
    "runtime_version": "CUDA / ROCm runtime version",
    "gpu_count": "GPU count",
}
GPU_PROPERTIES = {
    "vbios_version": "VBIOS version",
    "pcie_slot_max": "PCIe link the slot allows",
    "power_limit": "power limit",
    "ecc_mode": "ECC mode",
    "partition_mode": "partition / MIG mode",
}
FIRMWARE_PREFIX = "firmware:"  # + component name: a per-GPU firmware version (reports only)

# Load-test figures compared across peers, per GPU: what each measures, higher is better.
FIGURES = {
    "copy_h2d": "host-to-GPU copy bandwidth",
    "copy_d2h": "GPU-to-host copy bandwidth",
    "p2p_min": "slowest GPU-to-GPU copy bandwidth",
    "stress_fp32": "FP32 throughput under stress",
}


class SourceError(Exception):
    """Bad input from the user (a report that is not one, a selector, an unreadable token file): exit 2."""


class NothingToJudge(Exception):
    """No node to judge: Prometheus unreachable, no gpudiag series, no reports (exit 3)."""


@dataclass
class Failure:
    """A check that failed (or could not decide) on a node, and what to do about it."""

    check: str
    status: str  # "fail" | "unknown"
    gpu: Optional[int] = None
    pci_bus_id: Optional[str] = None
    action: str = "drain"
    fault_code: Optional[str] = None
    message: str = ""
    remediation: str = ""


@dataclass
class NodeFacts:
    node: str  # a report's hostname, a Prometheus `instance`
    model: Optional[str] = None  # the GPU model most of its GPUs are
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # check IDs that warned
    silent: list[tuple[Optional[int], Optional[str], str]] = field(default_factory=list)  # (gpu, bus ID, why)
    properties: dict[str, str] = field(default_factory=dict)  # NODE_PROPERTIES
    gpu_properties: dict[int, dict[str, str]] = field(default_factory=dict)  # gpu index → GPU_PROPERTIES, firmware
    bus_ids: dict[int, str] = field(default_factory=dict)  # gpu index → PCI bus ID
    figures: dict[tuple[str, int], float] = field(default_factory=dict)  # (FIGURES key, gpu) → value (B/s, FLOP/s)

    def gpu_property(self, gpu: int, name: str, value: object) -> None:
        if value is not None and value != "":
            self.gpu_properties.setdefault(gpu, {})[name] = str(value)


@dataclass
class NodeVerdict:
    node: str
    status: str  # NODE_STATUSES
    findings: list[dict]


@dataclass
class FleetVerdict:
    status: str  # "pass" | "warn" | "fail" | "unknown" (incomplete, nothing unsound found)
    nodes: list[NodeVerdict]
    drift: list[dict]
    outliers: list[dict]
    source: str
    warnings: list[str] = field(default_factory=list)  # about the source: partial answers, duplicate reports
    threshold: float = 0.05
    complete: bool = True  # every query answered in full


def pcie_link(generation: object, width: object) -> Optional[str]:
    """`Gen5 x16`, the one spelling of a link for both sources; None when either half is unknown."""
    if generation is None or width is None:
        return None
    return f"Gen{int(float(generation))} x{int(float(width))}"


def watts(value: object) -> Optional[str]:
    return None if value is None else f"{float(value):g} W"


def ecc_mode(enabled: object) -> Optional[str]:
    if enabled is None:
        return None
    return "enabled" if enabled in (True, 1, "1", 1.0) else "disabled"
