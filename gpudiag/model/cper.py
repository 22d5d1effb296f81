"""AMD CPER records as plain data (issue 32, item 9): what the probe decoded from a GPU's Common Platform Error Records
(gpudiag/probe/amdsmi/cper.py) and the checks judge (gpudiag/checks/ras/family.py, gpudiag/checks/ras/cper.py)."""

from __future__ import annotations

from dataclasses import field

from gpudiag.model.records import dataclass


@dataclass(frozen=True)
class CperSection:
    """One section of a CPER record: its kind and its own severity."""
    kind: str  # "crashdump", "nonstandard", "boot", "processor" or "unknown"
    severity: str  # the section's own severity, as the record header's


@dataclass(frozen=True)
class CperRecord:
    """One CPER record: the header's severity ("fatal", "non-fatal-uncorrected", "corrected", "informational" or
    "unknown"), its record id, the notification type (CMC, MCE, PCIE, BOOT, ...), its sections, the AMD Field
    IDs amdsmi found in it (empty where amdsmi did not decode them), and when the firmware stamped it
    ("2025-06-01 12:00:00", as the header's timestamp says; "" where the header says it is not valid)."""
    severity: str
    record_id: str
    notify: str
    sections: tuple[CperSection, ...]
    afids: tuple[int, ...] = ()
    timestamp: str = ""


@dataclass
class CperLog:
    """A GPU's CPER records as amdsmi handed them out (amdsmi_get_gpu_cper_entries, every severity), oldest first.
    `problems`: records gpudiag could not decode, each with why (a hostile or truncated record is named, never read
    past). `complete` is False when the read stopped early (a later call failed, or more records than gpudiag reads):
    what is missing might be worse than what is here."""
    records: list[CperRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    complete: bool = True
    # Where the records came from when not from this process's own read: root's record ("recorded by root 2 min ago
    # (…)", gpudiag/probe/ras/part.py); "" when read here.
    source: str = ""
