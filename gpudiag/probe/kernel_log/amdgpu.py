"""amdgpu kernel messages → `KernelEvent`s (the line formats and hostile-input rules: events.py).

A message is read only when it starts with the driver's own prefix:
- `amdgpu 0000:c1:00.0: ` — dev_err/dev_warn/dev_info (drivers/base/core.c prints "<driver> <device>: "), then the
  driver's own `amdgpu: ` (amdgpu.h: `#define dev_fmt(fmt) "amdgpu: " fmt`) on most lines; RAS_EVENT_LOG (amdgpu_ras.h)
  adds the RAS event id as `{N}` and the ACA dumps add HW_ERR `[Hardware Error]: ` (include/linux/printk.h);
  drm_err(dev, …) lines carry `[drm] *ERROR* ` after the device;
- `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ` — DRM_ERROR ("[drm:%ps] *ERROR* ", the function and its module;
  compiler clones print as `mes_v11_0_submit_pkt_and_poll_completion.constprop.0`);
- `amdgpu: ` — pr_err/pr_warn in the driver (pr_fmt), no device named.
A bare `[drm] ` line is not read: every DRM driver prints those. The one exception is amdgpu's own
`[drm] VRAM is lost due to GPU reset!`, matched whole (no GPU named: judged node-level).

The body after the prefix is matched from its start (re.match), each pattern of bounded length: linear time.
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import KernelEvent, Vendor, normalize_pci_bus_id
from gpudiag.probe.amdgpu.aca import ACA_KINDS, aca_kind
from gpudiag.probe.amdgpu.aca import describe as describe_status
from gpudiag.probe.kernel_log.text import BUS_ID, MalformedRecord, bounded_int
from gpudiag.probe.patterns import lazy_compile

_DRM_FUNCTION = r"[a-z0-9_.]{1,96}"  # %ps of a function: compiler clones add ".constprop.0", ".isra.0", ".part.0"
_PREFIX = lazy_compile(
    rf"(?:amdgpu ({BUS_ID}): (?:amdgpu: )?|\[drm:{_DRM_FUNCTION} \[amdgpu\]\] \*ERROR\* |amdgpu: )"
    # after the device: drm_err's "[drm] *ERROR* ", DRM_DEV_ERROR's "[drm:<function> [amdgpu]] *ERROR* " (without
    # " [amdgpu]" when amdgpu is built into the kernel)
    rf"(?:\[drm(?::{_DRM_FUNCTION}(?: \[amdgpu\])?)?\] (?:\*ERROR\* )?)?"
    r"(?:\{[0-9]{1,20}\} ?)?"  # RAS event id (amdgpu_ras.h RAS_EVENT_LOG: "{%llu}")
    r"(?:\[Hardware [Ee]rror\]:? ?)?"  # HW_ERR; early ACA dumps printed "[Hardware error] "
    r"(?:socket: [0-9]{1,4}, die: [0-9]{1,4},? ?)?",  # amdgpu_ras.c / rascore per-die RAS counts
    re.ASCII,
)
# amdgpu_device.c printed this with DRM_INFO (a bare "[drm] " line, no device) before it moved to dev_info: the
# whole message is matched, so no other DRM driver's line and no user text can pass for it.
_BARE_VRAM_LOST = lazy_compile(r"\[drm\] VRAM is lost due to GPU reset!\s*$", re.ASCII)


def _p(pattern: str) -> re.Pattern:
    return lazy_compile(pattern, re.ASCII)


# (kind, pattern matched at the start of the body, what its first group counts). First match decides; order
# matters where one message starts like another (soft recovery before plain timeout).
_PATTERNS: list[tuple[str, re.Pattern, Optional[str]]] = [
    # amdgpu_job.c, amdgpu_job_timedout()
    ("ring_timeout_soft_recovered", _p(r"ring [^ ]{1,64} timeout, but soft recovered"), None),
    ("ring_timeout", _p(r"ring [^ ]{1,64} timeout"), None),
    # amdgpu_device.c, amdgpu_device_gpu_recover() and the ASIC reset paths. "GPU reset end with ret = %d" is
    # printed only when the recovery returned an error.
    ("gpu_reset_succeeded", _p(r"GPU reset\(([0-9]+)\) succeeded!"), "resets"),
    ("gpu_reset_succeeded", _p(r"GPU reset succeeded, trying to resume"), None),
    ("gpu_reset_failed", _p(r"GPU reset\([0-9]{1,20}\) failed|Mode[12] reset failed|ASIC reset failed"
                            r"|GPU mode1 reset failed"), None),
    ("gpu_reset_failed", _p(r"GPU reset end with ret = -?[1-9]"), None),
    ("gpu_reset", _p(r"GPU reset begin!"), None),
    # soc15.c / nv.c / soc21.c *_asic_reset(): "MODE1 reset"; amdgpu_device.c amdgpu_device_mode1_reset(): "GPU mode1
    # reset" (older), "GPU smu mode1 reset" / "GPU psp mode1 reset". A mode-1 reset resets the whole ASIC: its jobs
    # are killed and VRAM is lost; after a fatal RAS error amdgpu resets every GPU of the XGMI hive this way
    # (amdgpu_ras_do_recovery → amdgpu_device_gpu_recover over the hive's device list).
    ("gpu_mode1_reset", _p(r"(?:MODE1 reset|GPU (?:(?:smu|psp) )?mode1 reset)\s*$"), None),
    # amdgpu_device.c amdgpu_device_reinit_after_reset() (dev_info; DRM_INFO in older kernels, see _BARE_VRAM_LOST).
    ("vram_lost", _p(r"VRAM is lost due to GPU reset!"), None),
    # amdkfd kfd_device_queue_manager.c: unmap_queues_cpsch() after the HWS did not preempt the queues; kfd_hws_hang()
    # then schedules a GPU reset. amdkfd_fence_wait_timeout(): "qcm fence wait loop timeout expired" (node-scraper:
    # "QCM fence timeout").
    ("cp_unrecoverable",
     _p(r"The cp might be in an unrecoverable state due to an unsuccessful queues preemption"), None),
    ("qcm_fence_timeout", _p(r"qcm fence wait loop timeout expired"), None),
    # mes_v11_0.c / mes_v12_0.c mes_*_submit_pkt_and_poll_completion(): "MES failed to response msg=%d" (DRM_ERROR,
    # behind "[drm:mes_v11_0_submit_pkt_and_poll_completion.constprop.0 [amdgpu]] *ERROR* "), newer "MES failed to
    # respond to msg=%s" / "MES(%d) failed to respond to msg=%s"; kfd remove_queue_mes(): "MES might be in
    # unrecoverable state, issue a GPU reset". The scheduler firmware stopped answering: the GPU is hung.
    ("mes_unresponsive", _p(r"MES(?:\([0-9]{1,3}\))? failed to respon(?:se|d to) msg=[A-Za-z0-9_]{1,32}"
                            r"|MES might be in unrecoverable state"), None),
    # amdgpu_device.c amdgpu_device_ip_check_soft_reset(): "IP block:%s is hung!" during recovery.
    ("ip_block_hung", _p(r"IP block:[A-Za-z0-9_]{1,32} is hung!"), None),
    # amdgpu_ring.c amdgpu_ring_reset_helper_end() and the per-IP ring resets: "Ring %s reset failed"; the driver
    # then escalates to a full GPU reset.
    ("ring_reset_failed", _p(r"[Rr]ing [^ ]{1,64} reset failed"), None),
    # amdgpu_ring.c amdgpu_ring_test_helper(): DRM_DEV_ERROR "ring %s test failed (%d)": the engine did not execute
    # a test packet at init or resume; the init/resume fails with it (decided by the ring, see _ring_test_kind).
    ("ring_test_failed", _p(r"ring ([^ ]{1,64}) test failed \(-?[0-9]{1,6}\)"), None),
    # umc_v12_0.c / amdgpu_umc.c: "Error Address(PA):0x%-10llx Row:0x%-4x Col:0x%-2x Bank:0x%x Channel:0x%x" for
    # each HBM page amdgpu retires after an uncorrectable or deferred error (node-scraper: "Error Address").
    ("umc_error_address", _p(r"Error Address\(PA\): ?0x[0-9a-fA-F]{1,16}\s{1,12}Row:0x[0-9a-fA-F]{1,8}\s{1,12}"
                             r"Col:0x[0-9a-fA-F]{1,8}\s{1,12}Bank:0x[0-9a-fA-F]{1,8}"), None),
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
    # decides, as the kernel decodes it (probe/amdgpu/aca.py). node-scraper: "ACA Error".
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
    # The SMU (the GPU's power-management firmware) did not answer the driver; the wait for its response timed out:
    # swsmu smu_cmn.c __smu_cmn_reg_print_error(), SMU_RESP_NONE: "SMU: I'm not done with your previous command:
    # SMN_C2PMSG_66:0x%08X SMN_C2PMSG_82:0x%08X" (older "… command!"); vega20_smumgr.c (powerplay, MI50):
    # "Failed to send message 0x%x, response 0x%x", the response register still 0; smu7_smumgr.c (Polaris):
    # "\n failed to send message %x ret is %d \n" and "\n last message was failed ret is %d\n", ret 0 (the
    # two-line record, read whole: continued_event below). A response other than none is the SMU's answer, not read.
    ("smu_unresponsive", _p(r"SMU: I'm not done with your previous command"
                            r"|Failed to send message 0x[0-9a-fA-F]{1,8}, response 0x0\b"
                            r"|(?:failed to send message [0-9a-fA-F]{1,8}|last message was failed) ret is 0\b"), None),
]
# How every body above starts: most amdgpu lines are chatter, and one test turns them away before the list is tried.
_ANY_BODY = _p(r"ring |GPU reset|Mode[12] reset|ASIC reset|[Uu]ncorrectable hardware|[0-9]|poison is|Poison is|aca "
               r"entry"
               r"|ACA\[|Saved bad|RAS |\[[a-z0-9]{0,16}hub|WARN: GPU|Fatal error|MODE1 |GPU (?:smu |psp )?mode1 "
               r"|VRAM is lost|The cp might|qcm fence|MES|IP block:|Ring |Error Address|SMU: I'm|Failed to send "
               r"|failed to send |last message was")
_PAGE_FAULT_PROCESS = lazy_compile(r"for process ([^ ]{0,64}) pid ([0-9]{1,10})\b", re.ASCII)
_RAS_COUNT_KINDS = {"uncorrectable": "ras_uncorrectable", "deferred": "ras_deferred"}

# amdgpu_ring_test_helper() names the ring: the video and JPEG engines' (vcn_dec_0, vcn_unified_0, jpeg_dec_0,
# uvd, vce) do not run compute or graphics work, so a failed test there is not a dead GPU.
_MULTIMEDIA_RING = lazy_compile(r"(?:vcn|jpeg|uvd|vce)", re.ASCII)

# Every `KernelEvent.kind` this module produces, for the checks that judge them; gpudiag/model/vocabulary.py holds the
# same tuple for those that must not import the probe (tests/test_layering.py keeps the two equal).
AMDGPU_EVENT_KINDS = tuple(dict.fromkeys(
    [k for k, _, _ in _PATTERNS if k not in ("ras_counts", "aca")]
    + list(_RAS_COUNT_KINDS.values()) + list(ACA_KINDS) + ["ring_test_failed_multimedia"]))


def _aca_event(status_hex: str) -> tuple[Optional[str], Optional[str]]:
    status = int(status_hex, 16)
    return aca_kind(status), describe_status(status)


def _ring_test_kind(ring: str) -> str:
    return "ring_test_failed_multimedia" if _MULTIMEDIA_RING.match(ring) else "ring_test_failed"


def amdgpu_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The amdgpu event `message` reports, or None. Raises MalformedRecord for a number no driver prints."""
    if _BARE_VRAM_LOST.match(message):
        return KernelEvent(vendor=Vendor.AMD, kind="vram_lost", message=message, timestamp_seconds=seconds)
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
        decoded = None
        if kind == "ras_counts":
            if match[3] or match[2] not in _RAS_COUNT_KINDS:  # a running total, or corrected errors
                return None
            kind = _RAS_COUNT_KINDS[match[2]]
        elif kind == "ras_poison_consumed" and counted and match[2]:
            return None
        elif kind == "aca":
            kind, decoded = _aca_event(match[1])
            if kind is None:
                return None
        elif kind == "ring_test_failed":
            kind, decoded = _ring_test_kind(match[1]), f"ring {match[1]}"
        if counted == "errors" and not count:
            return None
        event = KernelEvent(
            vendor=Vendor.AMD,
            kind=kind,
            message=message,
            pci_bus_id=normalize_pci_bus_id(prefix[1]) if prefix[1] else None,
            timestamp_seconds=seconds,
            count=count,
            decoded=decoded,
        )
        if kind == "page_fault":
            process = _PAGE_FAULT_PROCESS.search(message, match.end())
            if process:
                event.pid = int(process[2])
                event.process = process[1] or None
        return event
    return None


# The later lines of records read above, printed at the record's level: the ACA/MCA bank dump after its header
# (amdgpu_aca.c / amdgpu_mca.c) and the page fault's status lines (gmc_v9_0.c: "VM_L2_PROTECTION_FAULT_STATUS:…",
# then indented or tab-led fields).
_DETAIL = _p(r"Accelerator Check Architecture events logged|(?:aca|mca) entry\[|ACA\[|MCA\["
             r"|(?:GC|MM)?VM_L2_PROTECTION_FAULT_|[ \t]")


# Records amdgpu prints at the error level on healthy GPUs: the Secure Display TA (a display content-protection
# feature) failing its query at boot, amdgpu_psp.c psp_securedisplay_initialize() and amdgpu_securedisplay.c
# psp_securedisplay_parse_resp_status(), both dev_err (kachick/dotfiles#970: "SECUREDISPLAY error log" on a healthy
# RDNA GPU); the GPU works without the feature.
_BENIGN = _p(r"(?:amdgpu )?(?:SECUREDISPLAY: query securedisplay TA failed\. ret 0x[0-9a-fA-F]{1,8}$"
             r"|Secure display: Generic Failure\.$)")


def known_record(message: str) -> bool:
    """Whether a rule above names the record, even one it passes over (corrected counts, running totals, a benign
    ACA bank, a benign record at the error level): such a record is not an unrecognised driver error (events.py,
    issue 32 item 7)."""
    if opens_record(message):  # the head of a two-line record: its text follows
        return True
    prefix = _PREFIX.match(message)
    if prefix is None:
        return False
    if _DETAIL.match(message, prefix.end()) or _BENIGN.match(message.rstrip(), prefix.end()):
        return True
    if not _ANY_BODY.match(message, prefix.end()):
        return False
    return any(pattern.match(message, prefix.end()) for _, pattern, _ in _PATTERNS)


# -- records of several lines -------------------------------------------------------------------------------------

# smu7_smumgr.c and ci_smumgr.c print their SMU failures with pr_info("\n failed to send message %x ret is %d \n"):
# one record of two lines, the driver's prefix (pr_fmt "amdgpu: ") alone on the first (ishitatsuyuki/acominer#9, an
# RX 480). Such a head opens the record, and its next line is read as its body: for the SMU's failures only.
_EMPTY_HEAD = _p(rf"(?:amdgpu {BUS_ID}:(?: amdgpu:)?|amdgpu:) ?$")


def opens_record(message: str) -> bool:
    """Whether an amdgpu record's first line is its prefix alone: its text follows after the newline."""
    return message[:6] == "amdgpu" and len(message) < 40 and _EMPTY_HEAD.match(message) is not None


def continued_event(head: str, piece: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The SMU failure the next line of a record `head` opened states (see opens_record), read as that record's body."""
    body = piece.strip(" \t")
    event = amdgpu_event(f"{head.rstrip()} {body}", seconds)
    return event if event is not None and event.kind == "smu_unresponsive" else None


# gmc_v9_0.c and its kin print a page fault as several records, each with the GPU's prefix: the header "[gfxhub] page
# fault (…)", the process, "  in page starting at address 0x… from IH client …", on MI300 "  cookie node_id N fault
# from die …", "VM_L2_PROTECTION_FAULT_STATUS:0x…" and its fields.
_FAULT_LINE = _p(r"\s{0,8}(?:in page starting at address 0x[0-9a-fA-F]{1,16} from |(?:GC|MM)?VM_L2_PROTECTION_FAULT_"
                 r"STATUS:0x[0-9a-fA-F]{1,8}|cookie node_id [0-9]{1,4} fault from die )")
_MAX_OPEN_FAULTS = 256


class PageFaults:
    """The lines of one page fault, each on the GPU its own prefix names. GPUs that fault at once interleave their
    lines (sgl-project/sglang#10195, eight MI300X): a line belongs to its own GPU's fault, never to another GPU's
    header. A GPU's header opens its fault and that GPU's later fault lines are part of it; a fault line of a GPU with
    no fault open (its header cut off, or quoted without it) stands for the fault itself; any other record of the GPU
    closes its fault."""

    def __init__(self) -> None:
        self._open: set[str] = set()  # the bus IDs with a fault open
        self._bus: dict[str, str] = {}  # a prefix's bus ID as printed → normalized (a scan sees few GPUs)

    def feed(self, message: str, event: Optional[KernelEvent], seconds: Optional[float]) -> Optional[KernelEvent]:
        """`event`: what the record states on its own (amdgpu_event); returns the event the record stands for."""
        if event is not None:
            if event.kind == "page_fault" and event.pci_bus_id is not None and len(self._open) < _MAX_OPEN_FAULTS:
                self._open.add(event.pci_bus_id)
            elif self._open:
                self._open.discard(event.pci_bus_id)
            return event
        prefix = _PREFIX.match(message)
        if prefix is None or prefix[1] is None:
            return None
        if _FAULT_LINE.match(message, prefix.end()):
            bus = self._normalized(prefix[1])
            if bus in self._open:
                return None
            if len(self._open) < _MAX_OPEN_FAULTS:
                self._open.add(bus)
            return KernelEvent(vendor=Vendor.AMD, kind="page_fault", message=message, pci_bus_id=bus,
                               timestamp_seconds=seconds)
        if self._open and not _DETAIL.match(message, prefix.end()):
            self._open.discard(self._normalized(prefix[1]))
        return None

    def _normalized(self, printed: str) -> str:
        bus = self._bus.get(printed)
        if bus is None:
            if len(self._bus) >= _MAX_OPEN_FAULTS:
                self._bus.clear()
            bus = self._bus[printed] = normalize_pci_bus_id(printed)
        return bus


__all__ = ["AMDGPU_EVENT_KINDS", "MalformedRecord", "PageFaults", "amdgpu_event", "continued_event", "known_record",
           "opens_record"]
