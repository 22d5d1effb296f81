"""amdgpu kernel messages → `KernelEvent`s (the line formats and hostile-input rules: kernel_log_events.py).

A message is read only when it starts with the driver's own prefix:
- `amdgpu 0000:c1:00.0: ` — dev_err/dev_warn/dev_info (drivers/base/core.c prints "<driver> <device>: "), then the
  driver's own `amdgpu: ` (amdgpu.h: `#define dev_fmt(fmt) "amdgpu: " fmt`) on most lines; RAS_EVENT_LOG (amdgpu_ras.h)
  adds the RAS event id as `{N}` and the ACA dumps add HW_ERR `[Hardware Error]: ` (include/linux/printk.h);
  drm_err(dev, …) lines carry `[drm] *ERROR* ` after the device;
- `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ` — DRM_ERROR ("[drm:%ps] *ERROR* ", the function and its module);
- `amdgpu: ` — pr_err/pr_warn in the driver (pr_fmt), no device named.
A bare `[drm] ` line is not read: every DRM driver prints those.

The body after the prefix is matched from its start (re.match), each pattern of bounded length: linear time.
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import KernelEvent, Vendor, normalize_pci_bus_id
from gpudiag.probe.kernel_log_text import BUS_ID, MalformedRecord, bounded_int

_PREFIX = re.compile(
    rf"(?:amdgpu ({BUS_ID}): (?:amdgpu: )?|\[drm:[a-z0-9_]{{1,64}} \[amdgpu\]\] \*ERROR\* |amdgpu: )"
    r"(?:\[drm\] (?:\*ERROR\* )?)?"
    r"(?:\{[0-9]{1,20}\} ?)?"  # RAS event id (amdgpu_ras.h RAS_EVENT_LOG: "{%llu}")
    r"(?:\[Hardware [Ee]rror\]:? ?)?"  # HW_ERR; early ACA dumps printed "[Hardware error] "
    r"(?:socket: [0-9]{1,4}, die: [0-9]{1,4},? ?)?",  # amdgpu_ras.c / rascore per-die RAS counts
    re.ASCII,
)


def _p(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.ASCII)


# (kind, pattern matched at the start of the body, what its first group counts). First match decides; order
# matters where one message starts like another (soft recovery before plain timeout).
_PATTERNS: list[tuple[str, re.Pattern, Optional[str]]] = [
    # amdgpu_job.c, amdgpu_job_timedout()
    ("ring_timeout_soft_recovered", _p(r"ring [^ ]{1,64} timeout, but soft recovered"), None),
    ("ring_timeout", _p(r"ring [^ ]{1,64} timeout"), None),
    # amdgpu_device.c, amdgpu_device_gpu_recover() and the ASIC reset paths. "GPU reset end with ret = %d" is
    # printed only when the recovery returned an error.
    ("gpu_reset_succeeded", _p(r"GPU reset\(([0-9]+)\) succeeded!"), "resets"),
    ("gpu_reset_failed", _p(r"GPU reset\([0-9]{1,20}\) failed|Mode[12] reset failed|ASIC reset failed"), None),
    ("gpu_reset_failed", _p(r"GPU reset end with ret = -?[1-9]"), None),
    ("gpu_reset", _p(r"GPU reset begin!"), None),
    # amdgpu_ras.c amdgpu_ras_global_ras_isr(): the fatal-error interrupt, after which the driver resets the GPU
    # (the whole hive on XGMI). MI300X: "amdgpu 0000:68:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_
    # INTERRUPT) detected!" (ROCm/legacy-rocm-build#4021); the RAS manager of newer kernels (ras_mgr/
    # amdgpu_ras_sys.c) prints "{%llu} Uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!".
    ("ras_fatal_error", _p(r"[Uu]ncorrectable hardware error\([A-Z0-9_]{1,64}\) detected!"), None),
    # amdgpu_ras.c: "[{id}][socket: %d, die: %d, ]%ld [new ]uncorrectable hardware errors detected in [total in ]%s
    # block". The "in total" line repeats the running total after the "new" one: not a second event (issue 15).
    ("ras_counts", _p(r"([0-9]+) (?:new )?(uncorrectable|deferred|correctable) hardware errors detected in "
                      r"(total in )?"), "errors"),
    # RAS poison consumption summary per die, verbatim from issue 15: "socket: 0, die: 0, N new poison consumption
    # detected in <block> block" (node-scraper rates poison consumption an error).
    ("ras_poison_consumed", _p(r"([0-9]+) new poison consumption detected in (total in )?"), "errors"),
    # kfd_int_process_v9.c event_interrupt_poison_consumption_v9(): RAS_EVENT_LOG "poison is consumed by client %d,
    # kick off gpu reset flow" (newer kfd: "by source %d"); the reset follows. node-scraper: "RAS Poison Consumed".
    ("ras_poison_consumed", _p(r"poison is consumed by (?:client|source) [0-9]{1,10}, kick off gpu reset flow"),
     None),
    # amdgpu_ras.c amdgpu_ras_interrupt_poison_creation_handler(): "Poison is created" (earlier kernels added ", no
    # user action is needed."). node-scraper: "RAS Poison created".
    ("ras_poison_created", _p(r"Poison is created"), None),
    # amdgpu_mca.c / amdgpu_aca.c bank dumps: "aca entry[%02d].STATUS=0x%016llx" (MCA) and
    # "ACA[%02d/%02d].STATUS=0x%016llx" (ACA). Banks are dumped for corrected errors too, so the STATUS register
    # decides (see _aca_kind). node-scraper: "ACA Error".
    ("aca", _p(r"(?:aca entry\[[0-9]{1,3}\]|ACA\[[0-9]{1,3}/[0-9]{1,3}\])\.STATUS=0x([0-9a-fA-F]{1,16})\b"), None),
    # amdgpu_ras_eeprom.c amdgpu_ras_eeprom_update_header(): "Saved bad pages %d reaches threshold value %d"
    # (older "Saved bad pages(%d) reaches threshold value(%d)."): the GPU is marked for RMA (tbl_rai.rma_status).
    ("bad_pages_threshold", _p(r"Saved bad pages ?\(?([0-9]+)\)? reaches threshold value ?\(?[0-9]{1,20}\)?"),
     "pages"),
    # amdgpu_ras_eeprom.c amdgpu_ras_eeprom_check() / rascore ras_eeprom.c: "RAS records:%d exceed threshold:%d"
    # (then is_rma = true unless amdgpu.bad_page_threshold is -1/-2), and the 90 % early warning.
    ("ras_records_exceed_threshold", _p(r"RAS records:([0-9]+) exceed threshold:[0-9]{1,20}"), "pages"),
    ("bad_pages_near_threshold",
     _p(r"RAS records:([0-9]+) (?:exceeds 90% of|approaching) threshold:[0-9]{1,20}"), "pages"),
    # amdgpu_ras_eeprom.c: "RAS table incorrect checksum or error:%d" (also "RAS Table …"): the bad-page table in
    # the GPU's EEPROM could not be verified.
    ("ras_table_checksum", _p(r"RAS [Tt]able incorrect checksum or error:-?[0-9]{1,6}"), None),
    # gmc_v9_0.c / gmc_v10_0.c …: "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u[, for process %s pid %d
    # thread %s pid %d])" with the hub ("gfxhub0", "mmhub1" …) and "retry" / "no-retry".
    ("page_fault", _p(r"\[[a-z0-9]{0,16}hub[a-z0-9]{0,16}\] (?:(?:no-)?retry )?page fault"), None),
    # smu_v13_0_6_ppt.c: "WARN: GPU is throttled, expect performance decrease. %s." (reasons, e.g. "VR");
    # earlier kernels said "WARN: GPU thermal throttling temperature reached, …".
    ("throttled", _p(r"WARN: GPU (?:is throttled|thermal throttling temperature reached)"), None),
    ("init_failed", _p(r"Fatal error during GPU init"), None),
]
# How every body above starts: most amdgpu lines are chatter, and one test turns them away before the list is tried.
_ANY_BODY = _p(r"ring |GPU reset|Mode[12] reset|ASIC reset|[Uu]ncorrectable hardware|[0-9]|poison is|Poison is|aca entry"
               r"|ACA\[|Saved bad|RAS |\[[a-z0-9]{0,16}hub|WARN: GPU|Fatal error")
_PAGE_FAULT_PROCESS = re.compile(r"for process ([^ ]{0,64}) pid ([0-9]{1,10})\b", re.ASCII)
_RAS_COUNT_KINDS = {"uncorrectable": "ras_uncorrectable", "deferred": "ras_deferred"}

# MCA/ACA STATUS register (AMD64 Architecture Programmer's Manual vol. 2, MCA_STATUS; the same layout in
# amdgpu_aca.h ACA_REG__STATUS__*): bit 61 UC (uncorrected), bit 44 Deferred.
_MCA_STATUS_UC = 1 << 61
_MCA_STATUS_DEFERRED = 1 << 44

# Every `KernelEvent.kind` this module produces, for the checks that judge them.
AMDGPU_EVENT_KINDS = tuple(dict.fromkeys(
    [k for k, _, _ in _PATTERNS if k not in ("ras_counts", "aca")]
    + list(_RAS_COUNT_KINDS.values()) + ["aca_uncorrectable", "aca_deferred"]))


def _aca_kind(status_hex: str) -> Optional[str]:
    status = int(status_hex, 16)
    if status & _MCA_STATUS_UC:
        return "aca_uncorrectable"
    if status & _MCA_STATUS_DEFERRED:
        return "aca_deferred"
    return None  # a corrected error: the ECC counters (ecc.*) judge those


def amdgpu_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The amdgpu event `message` reports, or None. Raises MalformedRecord for a number no driver prints."""
    prefix = _PREFIX.match(message)
    if not prefix:
        return None
    body_at = prefix.end()
    if not _ANY_BODY.match(message, body_at):
        return None
    for kind, pattern, counted in _PATTERNS:
        match = pattern.match(message, body_at)
        if not match:
            continue
        count = bounded_int(match[1], kind) if counted else None
        if kind == "ras_counts":
            if match[3] or match[2] not in _RAS_COUNT_KINDS:  # a running total, or corrected errors
                return None
            kind = _RAS_COUNT_KINDS[match[2]]
        elif kind == "ras_poison_consumed" and counted and match[2]:
            return None
        elif kind == "aca":
            kind = _aca_kind(match[1])
            if kind is None:
                return None
        if counted == "errors" and not count:
            return None
        event = KernelEvent(
            vendor=Vendor.AMD,
            kind=kind,
            message=message,
            pci_bus_id=normalize_pci_bus_id(prefix[1]) if prefix[1] else None,
            timestamp_seconds=seconds,
            count=count,
        )
        if kind == "page_fault":
            process = _PAGE_FAULT_PROCESS.search(message, match.end())
            if process:
                event.pid = int(process[2])
                event.process = process[1] or None
        return event
    return None


__all__ = ["AMDGPU_EVENT_KINDS", "MalformedRecord", "amdgpu_event"]
