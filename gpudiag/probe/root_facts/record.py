"""What only root can read, recorded by root for the unprivileged service and textfile timer (docs/service.md, "What
the service cannot read, and who reads it").

The shipped units run gpudiag as the `gpudiag` user with CAP_SYSLOG only. Two things a check needs are root's:

- the ACS control of the PCIe bridges between each GPU and its NIC (network.gpudirect): it lies in extended config
  space, and sysfs `config` gives a reader without CAP_SYS_ADMIN only the first 64 bytes (drivers/pci/pci-sysfs.c,
  pci_read_config);
- an AMD GPU's CPER records (ras.cper): amdsmi reads amdgpu's CPER ring from debugfs (amdgpu_ring_cper), which only
  root may enter (fs/debugfs/inode.c, mode 0700), and answers NOT_SUPPORTED to anyone else;
- the kernel records of earlier boots in the systemd journal (a fault that comes back after reboots: the
  kernel-log checks' boots count): journalctl lets only root and the groups systemd-journal, adm and wheel read the
  system journal (journalctl(1), "all users are granted access to their private per-user journals"), and shows any
  other user nothing, not an error.

`gpudiag root-facts` (the units' `ExecStartPre=+`, which systemd runs as root outside the sandbox) reads them and
writes them to the state directory as root-facts.json. The unprivileged probe uses the record where its own read
gave nothing: the ACS words when the record is from this boot and at most MAX_ACS_AGE_SECONDS old (the textfile
timer's run every 5 minutes refreshes it; config space is reprogrammed at boot and by `setpci`), the CPER records
under the same bound (new records come with any RAS event), the earlier boots' faults when it is from this boot
(they cannot change within it). Root itself never needs it: its own reads win.
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import field
from pathlib import Path
from typing import Optional

from gpudiag.fileio import DocumentError, read_json
from gpudiag.model import BootFault, PciBridge
from gpudiag.model.cper import CperLog
from gpudiag.model.records import dataclass
from gpudiag.model.serialize import SchemaError, from_dict, to_dict

FILE_NAME = "root-facts.json"
SCHEMA_VERSION = 1
MAX_BYTES = 1 << 20  # a node's bridges and ten boots' faults take a few KiB
# Six runs of gpudiag-check.timer (every 5 minutes) may fail before the record is too old to judge ACS by.
MAX_ACS_AGE_SECONDS = 30 * 60
# journalctl(1): the groups whose members read the whole system journal.
JOURNAL_GROUPS = ("systemd-journal", "adm", "wheel")


@dataclass
class JournalPart:
    """The systemd journal's earlier boots, as root's read_boot_history found them (faults, sources, problems)."""

    faults: list[BootFault] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class RootFacts:
    """What root's timer recorded for the service: PCIe bridges, earlier boots' faults, AMD CPER records."""
    schema_version: int = SCHEMA_VERSION
    written_at: str = ""  # ISO 8601 UTC
    boot_id: Optional[str] = None  # /proc/sys/kernel/random/boot_id as journald writes it (32 hex digits)
    bridges: list[PciBridge] = field(default_factory=list)
    journal: Optional[JournalPart] = None
    # AMD GPUs' CPER records by PCI bus ID, as root read them through amdsmi; None: not read (`cper_problem` says why,
    # or a record an older gpudiag wrote)
    cper: Optional[dict[str, CperLog]] = None
    cper_problem: str = ""

    def age_seconds(self, now: Optional[float] = None) -> Optional[float]:
        try:
            written = datetime.datetime.fromisoformat(self.written_at).timestamp()
        except ValueError:
            return None
        return (time.time() if now is None else now) - written


def path_in(state_dir: Path) -> Path:
    return Path(state_dir) / FILE_NAME


def load(state_dir: Optional[Path], boot_id: Optional[str]) -> tuple[Optional[RootFacts], str]:
    """The record of this boot in `state_dir`, or None and why not (one clause: "no record at …")."""
    if state_dir is None:
        return None, "no state directory to read a record from"
    path = path_in(state_dir)
    if not os.path.lexists(path):
        return None, f"no record at {path}"
    try:
        facts = from_dict(RootFacts, read_json(path, MAX_BYTES))
    except (DocumentError, SchemaError, TypeError, ValueError) as exc:
        return None, f"the record {path} is unusable ({exc})"
    if facts.schema_version != SCHEMA_VERSION:
        return None, f"the record {path} has schema version {facts.schema_version}, not {SCHEMA_VERSION}"
    if facts.age_seconds() is None:
        return None, f"the record {path} has no valid time"
    if facts.boot_id != boot_id:
        return None, f"the record {path} was written in another boot"
    return facts, ""


def _too_old(facts: RootFacts) -> Optional[str]:
    """Why the record is too old to judge by (ACS, CPER records), or None."""
    age = facts.age_seconds() or 0.0
    if age > MAX_ACS_AGE_SECONDS:
        return (f"the record root wrote is {_duration(age)} old (at most {MAX_ACS_AGE_SECONDS // 60} min is used: "
                f"gpudiag-check.timer refreshes it every 5 min)")
    return None


def _recorded_by_root(facts: RootFacts) -> str:
    return f"recorded by root {_duration(facts.age_seconds() or 0.0)} ago ({facts.written_at})"


def acs_of(facts: Optional[RootFacts], why: str) -> tuple[dict[str, PciBridge], str]:
    """The recorded bridges by bus ID, when the record is fresh enough to judge ACS by; else {} and why."""
    if facts is None:
        return {}, why
    old = _too_old(facts)
    if old is not None:
        return {}, old
    recorded = {b.pci_bus_id: b for b in facts.bridges if b.acs_state in ("present", "absent")}
    return recorded, _recorded_by_root(facts)


def cper_of(facts: Optional[RootFacts], why: str) -> tuple[dict[str, CperLog], str]:
    """The recorded CPER records by bus ID, when the record is fresh enough (as for ACS); else {} and why."""
    if facts is None:
        return {}, why
    old = _too_old(facts)
    if old is not None:
        return {}, old
    if facts.cper is None:
        return {}, f"root's record holds no CPER records ({facts.cper_problem or 'written by an older gpudiag'})"
    return facts.cper, _recorded_by_root(facts)


def fill_unreadable(bridges: list[PciBridge], recorded: dict[str, PciBridge], written_at: str) -> int:
    """Give each bridge this process could not read the state root recorded for it; how many were filled."""
    filled = 0
    for bridge in bridges:
        mine = recorded.get(bridge.pci_bus_id)
        if bridge.acs_state == "unreadable" and mine is not None:
            bridge.acs_state, bridge.acs, bridge.acs_recorded_at = mine.acs_state, mine.acs, written_at
            bridge.config_bytes_read = mine.config_bytes_read
            filled += 1
    return filled


def may_read_system_journal() -> bool:
    """Root, or a member of a group journalctl lets read the system journal."""
    if os.geteuid() == 0:
        return True
    import grp

    mine = set(os.getgroups()) | {os.getegid()}
    for name in JOURNAL_GROUPS:
        try:
            if grp.getgrnam(name).gr_gid in mine:
                return True
        except KeyError:
            continue
    return False


def to_json(facts: RootFacts) -> dict:
    return to_dict(facts)


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
