"""AMD CPER records as plain data (issue 32, item 9): what the probe decoded from a GPU's Common Platform Error Records
(gpudiag/probe/amdsmi/cper.py) and the checks judge (gpudiag/checks/kernel_log/cper.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CperSection:
    kind: str  # "crashdump", "nonstandard", "boot", "processor" or "unknown"
    severity: str  # the section's own severity, as the record header's


@dataclass(frozen=True)
class CperRecord:
    """One CPER record: the header's severity ("fatal", "non-fatal-uncorrected", "corrected", "informational" or
    "unknown"), its record id, the notification type (CMC, MCE, PCIE, BOOT, ...), its sections, and the AMD Field
    IDs amdsmi found in it (empty where amdsmi did not decode them)."""
    severity: str
    record_id: str
    notify: str
    sections: tuple[CperSection, ...]
    afids: tuple[int, ...] = ()
