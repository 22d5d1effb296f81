"""Kernel log lines → `KernelEvent`s: the line formats the log comes in, and the GPU driver messages worth
reporting. Parsing only: what an XID means and how bad it is lives in gpudiag/checks/.

Line formats (`split_line`), each reduced to (seconds since boot or None, message):
- /dev/kmsg records `<prio>,<seq>,<usec>,<flags>[,…];<message>` with continuation lines ` KEY=value` (dictionary
  properties, skipped); the kernel escapes non-printable bytes as `\\xNN` (Documentation/ABI/testing/dev-kmsg);
- `dmesg`: `[   12.345678] message` (also with `dmesg -x`'s `kern  :err   : ` in front);
- `dmesg -T`: `[Mon Nov 30 11:08:44 2026] message` (wall clock only: no seconds since boot);
- `journalctl -k` / syslog: `Nov 30 11:08:44 host kernel: message` or `2026-11-30T11:08:44+0000 host kernel: …`,
  possibly followed by a `[   12.345678] ` stamp (rsyslog's kern.log), and `journalctl -o short-monotonic`'s
  `[   12.345678] host kernel: message`;
- anything else is a bare message.

Driver messages (vendor-api.md §11; kernel and open-gpu-kernel-modules sources cited below).
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import KernelEvent, Vendor, normalize_pci_bus_id

# ---------------------------------------------------------------------------------------------------------------
# Line formats

_KMSG_RECORD = re.compile(r"^(\d+),(\d+),(?P<usec>\d+),[^;]*;(?P<message>.*)$")
_KMSG_PROPERTY = re.compile(r"^ [A-Z0-9_]+=")  # e.g. " SUBSYSTEM=pci", " DEVICE=+pci:0000:3b:00.0"
_KMSG_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_SYSLOG_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+) \S+ kernel: (?P<message>.*)$"
)
_DMESG_LEVEL_PREFIX = re.compile(r"^[a-z]+ *:[a-z]+ *: ")
_DMESG_MONOTONIC = re.compile(r"^\[ *(?P<seconds>\d+\.\d+)\] ?(?P<message>.*)$")
_DMESG_WALL_CLOCK = re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}\] ?(?P<message>.*)$")
_HOST_KERNEL_TAG = re.compile(r"^\S+ kernel: ")


def split_line(line: str) -> Optional[tuple[Optional[float], str]]:
    """One log line → `(seconds_since_boot, message)`; None for a kmsg continuation (dictionary) line."""
    line = line.rstrip("\r\n")
    if _KMSG_PROPERTY.match(line):
        return None
    record = _KMSG_RECORD.match(line)
    if record:
        return int(record["usec"]) / 1e6, _unescape_kmsg(record["message"])

    message, seconds, wall_clock = line, None, None
    syslog = _SYSLOG_PREFIX.match(message)
    if syslog:
        message = syslog["message"]
    message = _DMESG_LEVEL_PREFIX.sub("", message, count=1)
    stamped = _DMESG_MONOTONIC.match(message)
    if stamped:
        seconds, message = float(stamped["seconds"]), stamped["message"]
    else:
        wall_clock = _DMESG_WALL_CLOCK.match(message)
        if wall_clock:
            message = wall_clock["message"]
    if (stamped or wall_clock) and not syslog:
        message = _HOST_KERNEL_TAG.sub("", message, count=1)
    return seconds, message


def _unescape_kmsg(message: str) -> str:
    if "\\x" not in message or not message.isascii():
        return message
    raw = _KMSG_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), message)
    return raw.encode("latin-1").decode("utf-8", errors="replace")  # escaped bytes may be UTF-8 sequences


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA (open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid / _krcLogUuidOnce)
#   NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s
# The PCI tag has no function digit. An unknown process prints pid='<unknown>', name=<unknown>; older drivers
# print pid=… without name=, and some paths (Xid 79) print neither.

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})[^)]*\): (?P<code>\d+),\s*(?P<rest>.*)", re.I
)
_XID_PROCESS = re.compile(r"^(?:pid=(?P<pid>'?<unknown>'?|\d+),\s*)?(?:name=(?P<name>[^,]*),\s*)?")
_NVIDIA_UUID = re.compile(
    r"NVRM: GPU at PCI:(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}): (?P<uuid>GPU-[0-9a-f-]+)", re.I
)
# NV_DEV_PRINTF: "NVRM: GPU %04x:%02x:%02x.%x: GPU has fallen off the bus." (kernel-open/common/inc/nv.h).
_FALLEN_OFF = re.compile(r"NVRM: .*fallen off the bus", re.I)
_ANY_PCI = re.compile(r"\b([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-7])?)\b", re.I)


def nvidia_gpu_uuid(message: str) -> Optional[tuple[str, str]]:
    """`NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>` (logged once per GPU before its first Xid) → (bus ID, UUID)."""
    match = _NVIDIA_UUID.search(message)
    return (normalize_pci_bus_id(match["pci"]), match["uuid"]) if match else None


def _nvidia_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    xid = _XID.search(message)
    if xid:
        process = _XID_PROCESS.match(xid["rest"])
        pid, name = process["pid"], process["name"]
        return KernelEvent(
            vendor=Vendor.NVIDIA,
            kind="xid",
            message=message,
            pci_bus_id=normalize_pci_bus_id(xid["pci"]),
            code=int(xid["code"]),
            pid=int(pid) if pid and pid.isdigit() else None,
            process=name.strip() if name and name.strip() not in ("", "<unknown>") else None,
            timestamp_seconds=seconds,
        )
    if _FALLEN_OFF.search(message):
        pci = _ANY_PCI.search(message)
        return KernelEvent(
            vendor=Vendor.NVIDIA,
            kind="fallen_off_bus",
            message=message,
            pci_bus_id=normalize_pci_bus_id(pci.group(1)) if pci else None,
            timestamp_seconds=seconds,
        )
    return None


# ---------------------------------------------------------------------------------------------------------------
# amdgpu. dev_*() lines carry "amdgpu 0000:c1:00.0: amdgpu: "; older DRM_ERROR lines only
# "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* " and so no bus ID.

_AMDGPU_DEVICE = re.compile(r"\bamdgpu (?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): ", re.I)
_AMDGPU_ANYWHERE = re.compile(r"\bamdgpu\b")
_PAGE_FAULT_PROCESS = re.compile(r"for process (?P<name>\S*) pid (?P<pid>\d+)")

# (kind, pattern, what a captured number is) — the first pattern that matches decides; order matters where one
# message contains another's words (soft recovery before plain timeout).
_AMDGPU_PATTERNS: list[tuple[str, re.Pattern, Optional[str]]] = [
    # amdgpu_job.c, amdgpu_job_timedout()
    ("ring_timeout_soft_recovered", re.compile(r"ring \S+ timeout, but soft recovered"), None),
    ("ring_timeout", re.compile(r"ring \S+ timeout"), None),
    # amdgpu_device.c, amdgpu_device_gpu_recover() and the ASIC reset paths. "GPU reset end with ret = %d" is
    # printed only when the recovery returned an error.
    ("gpu_reset_succeeded", re.compile(r"GPU reset\((\d+)\) succeeded!"), "resets"),
    ("gpu_reset_failed", re.compile(r"GPU reset\(\d+\) failed|Mode[12] reset failed|ASIC reset failed"), None),
    ("gpu_reset_failed", re.compile(r"GPU reset end with ret = -?[1-9]"), None),
    ("gpu_reset", re.compile(r"GPU reset begin!"), None),
    # amdgpu_ras.c: "[{event id}][socket: %d, die: %d, ]%ld [new ]uncorrectable hardware errors detected in
    # [total in ]%s block". A count of 0 is no event; so is the all-clear "no uncorrectable …" form.
    ("ras_uncorrectable", re.compile(r"\b(\d+) (?:new )?uncorrectable hardware errors detected in"), "errors"),
    ("ras_deferred", re.compile(r"\b(\d+) (?:new )?deferred hardware errors detected in"), "errors"),
    # gmc_v9_0.c / gmc_v10_0.c …: "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u[, for process %s pid %d
    # thread %s pid %d])" with the hub ("gfxhub0", "mmhub1" …) and "retry" / "no-retry".
    ("page_fault", re.compile(r"\[\w*hub\w*\] (?:(?:no-)?retry )?page fault"), None),
    # smu_v13_0_6_ppt.c: "WARN: GPU is throttled, expect performance decrease. %s." (reasons, e.g. "VR");
    # earlier kernels said "WARN: GPU thermal throttling temperature reached, …".
    ("throttled", re.compile(r"WARN: GPU (?:is throttled|thermal throttling temperature reached)"), None),
    ("init_failed", re.compile(r"Fatal error during GPU init"), None),
]


# Every `KernelEvent.kind` this module produces, for the checks that judge them.
NVIDIA_EVENT_KINDS = ("xid", "fallen_off_bus")
AMDGPU_EVENT_KINDS = tuple(dict.fromkeys(kind for kind, _, _ in _AMDGPU_PATTERNS))


def _amdgpu_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    if not _AMDGPU_ANYWHERE.search(message):
        return None
    for kind, pattern, counted in _AMDGPU_PATTERNS:
        match = pattern.search(message)
        if not match:
            continue
        count = int(match.group(1)) if counted else None
        if counted == "errors" and not count:
            return None
        device = _AMDGPU_DEVICE.search(message)
        event = KernelEvent(
            vendor=Vendor.AMD,
            kind=kind,
            message=message,
            pci_bus_id=normalize_pci_bus_id(device["pci"]) if device else None,
            timestamp_seconds=seconds,
            count=count,
        )
        if kind == "page_fault":
            process = _PAGE_FAULT_PROCESS.search(message)
            if process:
                event.pid = int(process["pid"])
                event.process = process["name"] or None
        return event
    return None


def parse_event(message: str, seconds: Optional[float] = None) -> Optional[KernelEvent]:
    """The GPU event a log message reports, or None. `message` is the text after any line prefix."""
    if "NVRM" in message:
        return _nvidia_event(message, seconds)
    return _amdgpu_event(message, seconds)
