"""The vocabulary every layer shares: statuses, vendors, probe errors, schema versions and PCI bus IDs."""

from __future__ import annotations

import enum
import re

from gpudiag.model.records import dataclass


SNAPSHOT_SCHEMA_VERSION = 1
REPORT_SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    UNKNOWN = "unknown"

    def __str__(self) -> str:  # so f-strings print "fail", not "Status.FAIL"
        return self.value


# How bad a status is, for the node verdict and for ordering the checklist (worst first).
STATUS_SEVERITY = {Status.FAIL: 4, Status.UNKNOWN: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


class Vendor(str, enum.Enum):
    NVIDIA = "nvidia"
    AMD = "amd"

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------------------------------------------------------
# Probe errors


class ErrorKind(str, enum.Enum):
    TIMEOUT = "timeout"  # the call did not return before its deadline
    GPU_LOST = "gpu_lost"  # the device fell off the bus / needs a reset
    NO_PERMISSION = "no_permission"
    NOT_FOUND = "not_found"  # library, device node or file missing
    ERROR = "error"  # anything else the backend reported

    def __str__(self) -> str:
        return self.value


@dataclass
class ProbeError:
    """A vendor call or read that failed: where, what kind of failure, and the message."""
    source: str  # what was being read, e.g. "nvml.nvmlDeviceGetEccMode" or "sysfs:/sys/bus/pci/devices/…/aer…"
    kind: ErrorKind
    message: str


# ---------------------------------------------------------------------------------------------------------------
# PCI bus ID normalisation (used by every probe)

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")


def normalize_pci_bus_id(raw: str) -> str:
    """`00000000:3B:00.0` (NVML), `0000:3b:00` (XID lines), `3b:00.0` → `0000:3b:00.0`."""
    match = _BUS_ID.match(raw.strip())
    if not match:
        raise ValueError(f"not a PCI bus ID: {raw!r}")
    domain, bus, dev, func = match.groups()
    domain_int = int(domain, 16) if domain else 0
    return f"{domain_int:04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{func or '0'}"
