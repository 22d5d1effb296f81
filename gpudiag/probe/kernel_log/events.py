"""Kernel log records → `KernelEvent`s: which driver a message belongs to, and the records that span lines. The
line formats are read by formats.py, NVIDIA's messages by nvidia.py, amdgpu's by
amdgpu.py; the PCIe hot-plug messages are here. Parsing only: what an event means lives in gpudiag/checks/.

The log is hostile input (any local user can get text into it: a program's name in a segfault report, a write to
/dev/kmsg, `logger`), so the rules are:
- a driver event is recognised only when the message STARTS with the driver's own prefix (`NVRM: `,
  `nvidia-nvswitchN: SXid `, `amdgpu <bus id>: `, `[drm:… [amdgpu]] `, `pcieport <bus id>: pciehp: `), never from
  driver text inside another message;
- a record the log says came from user space (a kmsg or syslog facility other than the kernel's, `dmesg -x`'s or
  talosctl's facility word, a syslog/journal identifier or _TRANSPORT other than the kernel's) is never read:
  kernel/printk/printk.c devkmsg_write() gives every write from user space LOG_USER (1) unless it names another
  non-zero facility, so user space cannot forge facility 0. Plain dmesg text carries no origin: there only the prefix
  rule holds;
- every pattern is matched at a fixed place (re.match) or is of bounded length with no nested or overlapping
  quantifiers, so matching is linear in the line; lines are cut to MAX_RECORD_CHARS before any pattern sees them;
- digits are ASCII only (re.ASCII: `\\d` would take `٧٩` for 79) and every number is bounded in length, so int()
  never meets a 4,300-digit string (Python's int-string limit raises ValueError beyond it).
"""

from __future__ import annotations

import importlib
import re
from typing import Optional

from gpudiag.model import KernelEvent, Vendor, normalize_pci_bus_id
from gpudiag.probe.kernel_log.aer import aer_event
from gpudiag.probe.kernel_log.amdgpu import (AMDGPU_EVENT_KINDS, PageFaults, amdgpu_event, continued_event,
                                             opens_record)
from gpudiag.probe.kernel_log.amdgpu import known_record as known_amdgpu_record
from gpudiag.probe.kernel_log.formats import LogLine, split_line, wall_seconds
from gpudiag.probe.kernel_log.ghes import GhesRecords
from gpudiag.probe.kernel_log.index import RECORD_MODULES
from gpudiag.probe.kernel_log.nvidia import (BAR_INVALID_HEAD, NVIDIA_EVENT_KINDS, NvrmReader, nvidia_gpu_uuid,
                                             nvrm_event, probe_failed_event, sxid_event)
from gpudiag.probe.kernel_log.text import BUS_ID, DOMAIN, FLAGS, MAX_RECORD_CHARS, MalformedRecord
from gpudiag.probe.patterns import lazy_compile

__all__ = [
    "AMDGPU_EVENT_KINDS",
    "EventReader",
    "FAMILY_EVENT_KINDS",
    "FAMILY_MARKERS",
    "KEPT_IN",
    "LogLine",
    "MAX_RECORD_CHARS",
    "MalformedRecord",
    "NVIDIA_EVENT_KINDS",
    "PCIE_SLOT_EVENT_KINDS",
    "nvidia_gpu_uuid",
    "parse_event",
    "split_line",
]

# ---------------------------------------------------------------------------------------------------------------
# PCIe hot-plug (drivers/pci/hotplug/pciehp_ctrl.c, ctrl_info → pci_info on the port: "pcieport <port>: pciehp: …"):
# a slot whose link went down or whose card is gone. On AMD nodes this is how a GPU falling off the bus shows
# (node-scraper: "PCIe Link Down", "PCIe card no longer present"). "Link Down/Up ignored (recovered by DPC)" is not
# a loss, hence the whole message is matched. The bus ID is the port's; the checks find the GPU below it.

_PCIE_SLOT = lazy_compile(rf"pcieport ({BUS_ID}): pciehp: Slot\([^)]{{1,32}}\): (Link Down|Card not present)$", FLAGS)
_PCIE_SLOT_KINDS = {"link down": "slot_link_down", "card not present": "slot_card_not_present"}
PCIE_SLOT_EVENT_KINDS = tuple(_PCIE_SLOT_KINDS.values())


def _pcie_slot_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    match = _PCIE_SLOT.match(message.rstrip())
    if not match:
        return None
    return KernelEvent(vendor=None, kind=_PCIE_SLOT_KINDS[match[2].lower()], message=message,
                       pci_bus_id=normalize_pci_bus_id(match[1]), timestamp_seconds=seconds)


# The record kinds families add (gpudiag/probe/<part>/kernel_log.py, found by name through index.py: this layer
# imports no family's module by its name): each says the prefixes its records start with, its kinds, its parser
# `parse(message, seconds)` and, optionally, the KernelLogInfo list its events are kept in (KEPT_IN).
_FAMILY_RECORDS = tuple(importlib.import_module(name) for name in RECORD_MODULES)
_FAMILY_PREFIXES = tuple(prefix for module in _FAMILY_RECORDS for prefix in module.PREFIXES)
FAMILY_MARKERS = tuple(sorted({prefix.strip() for prefix in _FAMILY_PREFIXES}))  # what reader.py looks for in a line
FAMILY_EVENT_KINDS = tuple(kind for module in _FAMILY_RECORDS for kind in module.EVENT_KINDS)
KEPT_IN = {kind: module.KEPT_IN for module in _FAMILY_RECORDS if getattr(module, "KEPT_IN", None)
           for kind in module.EVENT_KINDS}


def _family_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    for module in _FAMILY_RECORDS:
        if message.startswith(module.PREFIXES):
            return module.parse(message, seconds)
    return None


def parse_event(message: str, seconds: Optional[float] = None) -> Optional[KernelEvent]:
    """The GPU event a kernel message reports on its own, or None. `message` is the text after any line prefix; only
    a message that starts with a GPU driver's own prefix is read (see the module docstring). Raises MalformedRecord
    for a driver record with a number no driver prints."""
    message = message[:MAX_RECORD_CHARS]
    if message.startswith("NVRM: "):
        return nvrm_event(message, seconds)
    if message.startswith("nvidia-nvswitch"):
        return sxid_event(message, seconds)
    if message.startswith("pcieport "):
        return _pcie_slot_event(message, seconds) or aer_event(message, seconds)
    if message.startswith(("nvidia: probe of ", "amdgpu: probe of ")):
        return probe_failed_event(message, seconds)
    # the families' records (RDMA NICs: probe/network/kernel_log.py, kept apart in KernelLogInfo.nic_events)
    if message.startswith(_FAMILY_PREFIXES):
        return _family_event(message, seconds)
    return amdgpu_event(message, seconds)


# An error-level record of a GPU driver that no rule above recognises (issue 32, item 7): by the record's own level
# (LogLine.level, from its priority field; never its text), and only a record whose message starts with the driver's
# prefix. Kept as an event (a warning), at most MAX_UNRECOGNISED per scan: a flood of one new wording cannot grow
# memory, and the first ones say what it is.
UNRECOGNISED_KIND = "driver_error"
MAX_UNRECOGNISED = 64
_ERROR_LEVEL = 3  # KERN_ERR and worse
_UNRECOGNISED_BUS = lazy_compile(rf"(?:NVRM: GPU |NVRM: Xid \((?:PCI:)?|amdgpu )({DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}})"
                                 r"(\.[0-7])?", FLAGS)
# NVRM prints its load banner and a GPU's identity at the error level (nv_printf NV_DBG_ERRORS; the lab H200's
# tests/fixtures/h200x2/kmsg-sample.txt): they are banners, not errors.
_NVRM_BANNERS = ("NVRM: loading NVIDIA UNIX", "NVRM: GPU at PCI:", "NVRM: GPU Board Serial Number")
_AMDGPU_DRM = lazy_compile(r"\[drm:[a-z0-9_.]{1,96} \[amdgpu\]\] ", re.ASCII)


def unrecognised_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The record as an unrecognised GPU driver error, when it starts with a GPU driver's prefix (else None)."""
    if message.startswith(("NVRM: ", "nvidia-nvswitch", "nvidia: ", "nvidia ")):
        if message.startswith(_NVRM_BANNERS):
            return None
        vendor = Vendor.NVIDIA
    elif message.startswith(("amdgpu ", "amdgpu: ")) or (message.startswith("[drm:") and _AMDGPU_DRM.match(message)):
        if known_amdgpu_record(message):
            return None
        vendor = Vendor.AMD
    else:
        return None
    bus = _UNRECOGNISED_BUS.match(message)
    return KernelEvent(vendor=vendor, kind=UNRECOGNISED_KIND, message=message, timestamp_seconds=seconds,
                       pci_bus_id=normalize_pci_bus_id(bus[1] + (bus[2] or ".0")) if bus else None)


class EventReader:
    """The events of a stream of `LogLine`s, in order. A message that holds several lines of one record (kmsg's
    \\x0a, rsyslog's #012, a journal MESSAGE) is read line by line, and NVRM records that span lines are put together
    (nvidia.NvrmReader), and so are amdgpu's (amdgpu.PageFaults, amdgpu.opens_record). Each event takes its line's
    wall clock and boot."""

    def __init__(self) -> None:
        self._nvrm = NvrmReader()
        self._ghes = GhesRecords()  # APEI/GHES records span lines too (ghes.py)
        self._unrecognised = 0
        self._opened = False  # the record fed last began a multi-line NVRM message: its later lines may finish it
        self._amdgpu_head: Optional[str] = None  # the record fed last is amdgpu's prefix alone: its text follows
        self._faults = PageFaults()  # amdgpu's page faults print several records, GPUs' interleaved

    @property
    def awaits_more(self) -> bool:
        """Whether the record fed last opened a multi-line driver record that its later lines may finish."""
        return self._opened or self._amdgpu_head is not None

    def _event(self, message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        event = parse_event(message, seconds) or self._ghes.feed(message, seconds)
        return self._faults.feed(message, event, seconds) if message.startswith("amdgpu ") else event

    def feed(self, line: LogLine) -> list[KernelEvent]:
        message = line.message
        self._opened = message.startswith(("NVRM: The NVIDIA GPU ", BAR_INVALID_HEAD))
        self._amdgpu_head = message if opens_record(message) else None
        if "\n" not in message and not message.startswith("NVRM: "):  # the common case: one line, not NVRM
            event = self._event(message, line.seconds)
            if event is None and line.level is not None and line.level <= _ERROR_LEVEL:
                event = self._unrecognised_error(message, line.seconds)
            if event is None:
                return []
            if line.wall_time is not None or line.boot is not None:
                event.wall_time, event.boot = wall_seconds(line.wall_time), line.boot
            event.seq = line.seq
            return [event]
        head, *rest = message.split("\n")
        head = head[:MAX_RECORD_CHARS]
        self._amdgpu_head = head if opens_record(head) else None
        if head.startswith("NVRM: "):
            event = self._nvrm.feed(head, line.seconds)
        else:
            event = self._event(head, line.seconds)
        if event is None and line.level is not None and line.level <= _ERROR_LEVEL and not self._nvrm.pending:
            event = self._unrecognised_error(head, line.seconds)  # the record's first line: its driver's own words
        events = [] if event is None else [event]
        for piece in rest:  # the rest of this one record: never a record of its own (issue 32, item 1)
            event = self.continue_record(piece, line.seconds)
            if event is not None:
                events.append(event)
        for event in events:
            if line.wall_time is not None or line.boot is not None:
                event.wall_time, event.boot = wall_seconds(line.wall_time), line.boot
            event.seq = line.seq
        return events

    def _unrecognised_error(self, message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        if self._unrecognised >= MAX_UNRECOGNISED:
            return None
        event = unrecognised_event(message, seconds)
        self._unrecognised += event is not None
        return event

    def continue_record(self, piece: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        """A later line of the record fed last (after a newline in it, or dmesg's and journalctl's indented
        continuation line): read only as part of a multi-line driver record that record opened (the NVRM probe-time
        "fallen off the bus" message, the invalid-BAR message, amdgpu's two-line SMU failures); anything else in it
        is that record's text, whoever wrote it."""
        if self._amdgpu_head is not None:  # amdgpu's two-line SMU records: their one later line is their text
            head, self._amdgpu_head = self._amdgpu_head, None
            return continued_event(head, piece, seconds)
        if not self._opened:
            return None
        return self._nvrm.continue_record(piece.strip(" \t")[:MAX_RECORD_CHARS], seconds)
