"""The normalised view of one node that both sources produce and the judgement reads, and what it concludes.

Property values are strings in one format whatever the source (a report's `"Gen5 x16"`, Prometheus's generation
and width gauges both become `Gen5 x16`; a power limit is `700 W`), so that a fleet read from reports and one read
from Prometheus drift on the same things. A value a node does not report is absent, never guessed.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

FLEET_SCHEMA_VERSION = 1

# Node verdicts, worst first. `silent`: the node (or one of its GPUs) does not report a current collection;
# `drift`: it differs from the majority of its peers (same GPU model); `lag`: a load-test figure is below its peers'
# median; `unknown`: part of what would show it sound was not read (a query that failed, a report or value that
# could not be read), so it is not shown sound.
NODE_STATUSES = ("fail", "silent", "drift", "lag", "unknown", "warn", "pass")
NODE_SEVERITY = {status: len(NODE_STATUSES) - rank for rank, status in enumerate(NODE_STATUSES)}
UNSOUND = frozenset({"fail", "silent", "drift", "lag"})  # exit 1, as `unknown` is
# A finding's kind → the node status it makes. `unknown` is a check that could not decide (as gpudiag_check_ok
# reads it: not OK, so failing); `unread` is the fleet view not reading a part of the node; `conflict`, several
# reports claiming the node's hostname (the worst judged); `screening`, a GPU overdue for its idle-time screen;
# `unscreened`, one never screened yet (listed, changing nothing: fleet/screening.py).
KIND_STATUS = {"fail": "fail", "unknown": "fail", "silent": "silent", "drift": "drift", "lag": "lag",
               "unread": "unknown", "conflict": "warn", "screening": "warn", "unscreened": "pass"}

# What one node may hold, whatever its input says (docs/fleet.md, "Memory"): a node failing everything on a
# 64-device board has some 4,000 failing results; the first MAX_LISTED are listed, the rest counted (the node is
# drained either way, and `gpudiag check` on it lists them all). The same for GPUs that do not answer.
MAX_LISTED = 32
MAX_FAILURES = MAX_LISTED
MAX_GPUS = 64  # GPU indices per node: an MI300X board in CPX mode (8 x 8 partitions) is the largest gpudiag meets
MAX_NOTES = 20  # unread parts and warning check IDs named per node; more are counted
MAX_VALUE_CHARS = 256  # a property value (a version, a model name); longer is unreadable
MAX_TEXT_CHARS = 2000  # a failure's message or remediation, cut with an ellipsis

# Node-level properties (one value per node) and per-GPU ones (one per GPU), as drift compares them.
NODE_PROPERTIES = {
    "driver_version": "driver version",
    "runtime_version": "CUDA / ROCm runtime version",
    "gpu_count": "GPU count",
    "nic_port_rate_min": "slowest RDMA NIC port",  # network.rate: the lowest rate an up fabric port trained at
}
GPU_PROPERTIES = {
    "vbios_version": "VBIOS version",
    "pcie_slot_max": "PCIe link the slot allows",
    "power_limit": "power limit",
    "ecc_mode": "ECC mode",
    "partition_mode": "partition / MIG mode",
}
FIRMWARE_PREFIX = "firmware:"  # + component name: a per-GPU firmware version (reports only)
# + NIC board (PSID or PCI ID): the firmware versions the node's NICs of that board run, sorted and comma-joined
# (network.firmware; reports only): a node whose NIC firmware differs from its siblings' drifts on it.
NIC_FIRMWARE_PREFIX = "nic_firmware:"
MAX_NIC_BOARDS = 16  # NIC boards kept per node; a node has two or three

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
    # The results this one follows from, as the node's report names them (report/causes.py: "<check> <bus ID | GPU n
    # | node>"); None where the source does not say (Prometheus: fleet/consequences.py applies the rules it can).
    caused_by: Optional[list[str]] = None


@dataclass
class Unscreened:
    """A GPU no idle-time screen has proven lately (fleet/screening.py)."""
    gpu: Optional[int]
    pci_bus_id: Optional[str]
    never: bool  # no verified screen at all
    overdue: bool  # past its screening period
    detail: str = ""


@dataclass
class NodeFacts:
    """What is known of one node. Lists are bounded (MAX_FAILURES, MAX_NOTES, MAX_GPUS): what is over the bound is
    counted (`more_failures`, `more_unread`, `more_warnings`), so that memory grows with the fleet, not with what one
    node's input holds."""

    node: str  # a report's hostname, a Prometheus `instance`
    model: Optional[str] = None  # the GPU model most of its GPUs are
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # check IDs that warned
    silent: list[tuple[Optional[int], Optional[str], str]] = field(default_factory=list)  # (gpu, bus ID, why)
    properties: dict[str, str] = field(default_factory=dict)  # NODE_PROPERTIES
    gpu_properties: dict[int, dict[str, str]] = field(default_factory=dict)  # gpu index → GPU_PROPERTIES, firmware
    bus_ids: dict[int, str] = field(default_factory=dict)  # gpu index → PCI bus ID
    figures: dict[tuple[str, int], float] = field(default_factory=dict)  # (FIGURES key, gpu) → value (B/s, FLOP/s)
    unread: list[str] = field(default_factory=list)  # parts of the node not read, and why
    conflicts: list[str] = field(default_factory=list)  # other reports that claimed this hostname
    more_failures: Counter = field(default_factory=Counter)  # status → failures past MAX_FAILURES
    more_silent: int = 0  # silent GPUs past MAX_LISTED
    more_unread: int = 0
    more_warnings: int = 0
    gpus: set[int] = field(default_factory=set)  # the GPU indices facts are kept for (at most MAX_GPUS)
    unscreened: list[Unscreened] = field(default_factory=list)  # at most MAX_LISTED

    def gpu_property(self, gpu: int, name: str, value: object) -> None:
        if value is None or value == "" or not self.known_gpu(gpu):
            return
        text = str(value)
        if len(text) > MAX_VALUE_CHARS:
            self.add_unread(f"{name} of GPU {gpu}: a value of {len(text):,} characters")
            return
        self.gpu_properties.setdefault(gpu, {})[name] = text

    def known_gpu(self, gpu: int) -> bool:
        """Whether facts about GPU `gpu` are kept: the first MAX_GPUS indices seen; past them, the node is unread."""
        if gpu in self.gpus:
            return True
        if len(self.gpus) < MAX_GPUS:
            self.gpus.add(gpu)
            return True
        self.add_unread(f"GPUs past the first {MAX_GPUS}")
        return False

    def add_failure(self, failure: Failure) -> None:
        if len(self.failures) < MAX_FAILURES:
            failure.message, failure.remediation = cut(failure.message), cut(failure.remediation)
            self.failures.append(failure)
        else:
            self.more_failures[failure.status] += 1

    def add_silent(self, gpu: Optional[int], bus_id: Optional[str], why: str) -> None:
        if len(self.silent) < MAX_LISTED:
            self.silent.append((gpu, bus_id, why))
        else:
            self.more_silent += 1

    def add_unread(self, why: str) -> None:
        if why in self.unread:
            return
        if len(self.unread) < MAX_NOTES:
            self.unread.append(why)
        else:
            self.more_unread += 1

    def add_warning(self, check: str) -> None:
        if len(self.warnings) < MAX_NOTES:
            self.warnings.append(check)
        else:
            self.more_warnings += 1

    def figure(self, name: str, gpu: int, value: float, what: str) -> None:
        """A load-test figure; a non-finite one (NaN, an infinity) is unreadable: never compared with peers."""
        if not math.isfinite(value):
            self.add_unread(f"{what} of GPU {gpu} is not a finite number ({value}): not compared")
        elif self.known_gpu(gpu):
            self.figures[(name, gpu)] = value


def cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass
class NodeVerdict:
    """One node's status in the fleet view, with its findings."""
    node: str
    status: str  # NODE_STATUSES
    findings: list[dict]


@dataclass
class FleetVerdict:
    """The fleet view: its status, each node's, drift and outliers across nodes, and its source."""
    status: str  # "pass" | "warn" | "fail" | "unknown" (incomplete, nothing unsound found)
    nodes: list[NodeVerdict]
    drift: list[dict]
    outliers: list[dict]
    source: str
    warnings: list[str] = field(default_factory=list)  # about the source: partial answers, duplicate reports
    threshold: float = 0.05
    complete: bool = True  # every query answered in full


def finite(value: object) -> Optional[float]:
    """`value` as a finite float; None for anything else (absent, a string, a bool, NaN, an infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        return None
    return number if math.isfinite(number) else None


def pcie_link(generation: object, width: object) -> Optional[str]:
    """`Gen5 x16`, the one spelling of a link for both sources; None when either half is unknown or not finite."""
    generation, width = finite(generation), finite(width)
    if generation is None or width is None:
        return None
    return f"Gen{int(generation)} x{int(width)}"


def watts(value: object) -> Optional[str]:
    number = finite(value)
    return None if number is None else f"{number:g} W"


def ecc_mode(enabled: object) -> Optional[str]:
    if enabled is None or (isinstance(enabled, float) and not math.isfinite(enabled)):
        return None
    return "enabled" if enabled in (True, 1, "1", 1.0) else "disabled"
