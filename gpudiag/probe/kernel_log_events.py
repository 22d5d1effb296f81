"""Kernel log lines → `KernelEvent`s: the line formats the log comes in, and the NVIDIA driver messages worth
reporting (the amdgpu ones live in kernel_log_amdgpu.py). Parsing only: what an Xid means and how bad it is lives in
gpudiag/checks/.

Line formats (`split_line`), each reduced to a `LogLine` (seconds since boot or None, message, from the kernel?):
- /dev/kmsg records `<prio>,<seq>,<usec>,<flags>[,…];<message>` with continuation lines ` KEY=value` (dictionary
  properties, skipped); the kernel escapes non-printable bytes as `\\xNN` (Documentation/ABI/testing/dev-kmsg);
- `dmesg`: `[   12.345678] message` (also with `dmesg -x`'s `kern  :err   : ` in front);
- `dmesg -T`: `[Mon Nov 30 11:08:44 2026] message` (wall clock only: no seconds since boot);
- `journalctl -k` / syslog: `Nov 30 11:08:44 host kernel: message` or `2026-11-30T11:08:44+0000 host kernel: …`,
  possibly followed by a `[   12.345678] ` stamp (rsyslog's kern.log), and `journalctl -o short-monotonic`'s
  `[   12.345678] host kernel: message`;
- anything else is a bare message.

The log is hostile input (any local user can get text into it: a program's name in a segfault report, a write to
/dev/kmsg, `logger`), so the rules are:
- a driver event is recognised only when the message STARTS with the driver's own prefix (`NVRM: `, `amdgpu
  <bus id>: `, `[drm:… [amdgpu]] `, `pcieport <bus id>: pciehp: `), never from driver text inside another message;
- a /dev/kmsg record counts only when its facility (prio >> 3) is 0, the kernel's: kernel/printk/printk.c
  devkmsg_write() gives every write from user space LOG_USER (1) unless it names another non-zero facility, so user
  space cannot forge facility 0. `dmesg -x` output names the facility too (`kern`); other saved text has none, and
  there only the prefix rule holds;
- every pattern is matched at a fixed place (re.match) or is of bounded length with no nested or overlapping
  quantifiers, so matching is linear in the line; lines are cut to MAX_RECORD_CHARS before any pattern sees them;
- digits are ASCII only (re.ASCII: `\\d` would take `٧٩` for 79) and every number is bounded in length, so int()
  never meets a 4,300-digit string (Python's int-string limit raises ValueError beyond it).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from gpudiag.model import KernelEvent, Vendor, normalize_pci_bus_id
from gpudiag.probe.kernel_log_amdgpu import AMDGPU_EVENT_KINDS, amdgpu_event
from gpudiag.probe.kernel_log_text import BUS_ID, DOMAIN, FLAGS, MAX_RECORD_CHARS, MalformedRecord, bounded_int

__all__ = ["AMDGPU_EVENT_KINDS", "LogLine", "MAX_RECORD_CHARS", "MalformedRecord", "NVIDIA_EVENT_KINDS",
           "PCIE_SLOT_EVENT_KINDS", "nvidia_gpu_uuid", "parse_event", "split_line"]

# ---------------------------------------------------------------------------------------------------------------
# Line formats


class LogLine(NamedTuple):
    seconds: Optional[float]  # since boot, when the line says
    message: str
    kernel: bool = True  # False: a record the kernel says came from user space (kmsg facility, dmesg -x)


# Numbers unbounded here (anchored, so still linear) so that a record with an absurd one is counted as malformed.
_KMSG_RECORD = re.compile(r"([0-9]+),([0-9]+),([0-9]+),[^;]{0,64};", re.ASCII)
_KMSG_PROPERTY = re.compile(r" [A-Z0-9_]{1,64}=", re.ASCII)  # e.g. " SUBSYSTEM=pci", " DEVICE=+pci:0000:3b:00.0"
_KMSG_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})", re.ASCII)
_SYSLOG_PREFIX = re.compile(
    r"(?:[A-Z][a-z]{2} {1,2}[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[^ ]{1,40}) [^ ]{1,255} kernel: ", re.ASCII)
_DMESG_LEVEL_PREFIX = re.compile(r"([a-z]{1,8}) {0,8}:[a-z]{1,8} {0,8}: ", re.ASCII)
_DMESG_MONOTONIC = re.compile(r"\[ {0,16}([0-9]{1,12}\.[0-9]{1,9})\] ?", re.ASCII)
_DMESG_WALL_CLOCK = re.compile(
    r"\[[A-Z][a-z]{2} [A-Z][a-z]{2} {1,2}[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}\] ?", re.ASCII)
_HOST_KERNEL_TAG = re.compile(r"[^ ]{1,255} kernel: ", re.ASCII)


def split_line(line: str) -> Optional[LogLine]:
    """One log line → `LogLine`; None for a kmsg continuation (dictionary) line. Raises MalformedRecord for a
    kmsg record whose header holds a number the kernel cannot have written."""
    line = line[:MAX_RECORD_CHARS].rstrip("\r\n")
    if _KMSG_PROPERTY.match(line):
        return None
    record = _KMSG_RECORD.match(line)
    if record:
        facility = bounded_int(record[1], "kmsg priority", 10) >> 3  # syslog priority = facility * 8 + level
        bounded_int(record[2], "kmsg sequence number")
        microseconds = bounded_int(record[3], "kmsg timestamp")
        return LogLine(microseconds / 1e6, _unescape_kmsg(line[record.end():]), facility == 0)

    message, seconds, wall_clock, kernel = line, None, None, True
    syslog = _SYSLOG_PREFIX.match(message)
    if syslog:
        message = message[syslog.end():]
    level = _DMESG_LEVEL_PREFIX.match(message)
    if level:
        message, kernel = message[level.end():], level[1] == "kern"
    stamped = _DMESG_MONOTONIC.match(message)
    if stamped:
        seconds, message = float(stamped[1]), message[stamped.end():]
    else:
        wall_clock = _DMESG_WALL_CLOCK.match(message)
        if wall_clock:
            message = message[wall_clock.end():]
    if (stamped or wall_clock) and not syslog:
        tag = _HOST_KERNEL_TAG.match(message)
        if tag:
            message = message[tag.end():]
    return LogLine(seconds, message, kernel)


def _unescape_kmsg(message: str) -> str:
    if "\\x" not in message or not message.isascii():
        return message
    raw = _KMSG_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), message)
    return raw.encode("latin-1").decode("utf-8", errors="replace")  # escaped bytes may be UTF-8 sequences


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA (open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid / _krcLogUuidOnce)
#   NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s
# The PCI tag has no function digit. An unknown process prints pid='<unknown>', name=<unknown>; older drivers
# print pid=… without name=, and some paths (Xid 79) print neither. Every NVRM line starts with "NVRM: "
# (kernel-open/common/inc/nv-linux.h, NV_PRINTF → nv_printf with the "NVRM: " prefix).

_XID = re.compile(
    rf"NVRM: Xid \(PCI:({DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}})(?: GPU-I:[0-9]{{1,3}}(?: GPU-CI:[0-9]{{1,3}})?)?\): "
    r"([0-9]+), {0,4}", FLAGS)
_XID_PROCESS = re.compile(r"(?:pid=('?<unknown>'?|[0-9]+), {0,4})?(?:name=([^,]{0,256}), {0,4})?", FLAGS)
_NVIDIA_UUID = re.compile(
    rf"NVRM: GPU at PCI:({DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}}): (GPU-[0-9a-f-]{{36}})", FLAGS)
# NV_DEV_PRINTF(NV_DBG_ERRORS, nv, "GPU has fallen off the bus.\n") (kernel-open/nvidia/nv.c) → "NVRM: GPU
# %04x:%02x:%02x.%x: GPU has fallen off the bus.". Matched whole from the start: other NVRM lines carry text a user
# chooses (the client version in "NVRM: API mismatch: the client has the version %s, …" comes from an ioctl any
# user can make), so "fallen off the bus" anywhere in an NVRM line proves nothing.
_FALLEN_OFF = re.compile(rf"NVRM: GPU ({BUS_ID}): GPU has fallen off the bus", FLAGS)

NVIDIA_EVENT_KINDS = ("xid", "fallen_off_bus")


def nvidia_gpu_uuid(message: str) -> Optional[tuple[str, str]]:
    """`NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>` (logged once per GPU before its first Xid) → (bus ID, UUID)."""
    match = _NVIDIA_UUID.match(message)
    return (normalize_pci_bus_id(match[1]), match[2]) if match else None


def _nvidia_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    xid = _XID.match(message)
    if xid:
        process = _XID_PROCESS.match(message, xid.end())
        pid, name = process[1], process[2]
        return KernelEvent(
            vendor=Vendor.NVIDIA,
            kind="xid",
            message=message,
            pci_bus_id=normalize_pci_bus_id(xid[1]),
            code=bounded_int(xid[2], "Xid", 6),
            # A pid no kernel prints (pid_max is at most 2^22) is dropped, not the Xid it came with.
            pid=int(pid) if pid and pid.isdigit() and len(pid) <= 10 else None,
            process=name.strip() if name and name.strip() not in ("", "<unknown>") else None,
            timestamp_seconds=seconds,
        )
    fallen = _FALLEN_OFF.match(message)
    if fallen:
        return KernelEvent(vendor=Vendor.NVIDIA, kind="fallen_off_bus", message=message,
                           pci_bus_id=normalize_pci_bus_id(fallen[1]), timestamp_seconds=seconds)
    return None


# ---------------------------------------------------------------------------------------------------------------
# PCIe hot-plug (drivers/pci/hotplug/pciehp_ctrl.c, ctrl_info → pci_info on the port: "pcieport <port>: pciehp: …"):
# a slot whose link went down or whose card is gone. On AMD nodes this is how a GPU falling off the bus shows
# (node-scraper: "PCIe Link Down", "PCIe card no longer present"). "Link Down/Up ignored (recovered by DPC)" is not
# a loss, hence the whole message is matched. The bus ID is the port's; the checks find the GPU below it.

_PCIE_SLOT = re.compile(rf"pcieport ({BUS_ID}): pciehp: Slot\([^)]{{1,32}}\): (Link Down|Card not present)$", FLAGS)
_PCIE_SLOT_KINDS = {"link down": "slot_link_down", "card not present": "slot_card_not_present"}
PCIE_SLOT_EVENT_KINDS = tuple(_PCIE_SLOT_KINDS.values())


def _pcie_slot_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    match = _PCIE_SLOT.match(message.rstrip())
    if not match:
        return None
    return KernelEvent(vendor=None, kind=_PCIE_SLOT_KINDS[match[2].lower()], message=message,
                       pci_bus_id=normalize_pci_bus_id(match[1]), timestamp_seconds=seconds)


def parse_event(message: str, seconds: Optional[float] = None) -> Optional[KernelEvent]:
    """The GPU event a kernel message reports, or None. `message` is the text after any line prefix; only a message
    that starts with a GPU driver's own prefix is read (see the module docstring). Raises MalformedRecord for a
    driver record with a number no driver prints."""
    message = message[:MAX_RECORD_CHARS]
    if message.startswith("NVRM: "):
        return _nvidia_event(message, seconds)
    if message.startswith("pcieport "):
        return _pcie_slot_event(message, seconds)
    return amdgpu_event(message, seconds)
