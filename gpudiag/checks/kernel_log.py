"""kernel_log.*: what the GPU drivers logged since boot: NVIDIA Xids, NVSwitch SXids and driver records
(kernel_log_nvidia.py), amdgpu error events (here), per GPU; the shared rules (which GPU, the window, one event's
lines counted once, repeats across boots, a log read only in part) are in kernel_log_common.py.

Only the drivers' own records reach these modules (gpudiag/probe/kernel_log_events.py: driver prefix, kmsg facility
kernel). Records the scanner could not parse are skipped and counted, and a scan cut short (deadline, size cap) is
said in the message; with no finding in the part that was scanned, a cut-short scan is unknown, and lines in a
format the scanner cannot read warn: neither is a pass. Events are judged per GPU even when the GPU no longer
answers its library: that is when the log matters most.

A profile narrows the log to a window (Expectations.kernel_log_window_seconds: events stamped earlier than that
many seconds before the snapshot are ignored) and overrides verdicts per Xid code or amdgpu event kind. Each
finding carries what automation should do (verdicts.ACTIONS) and a fault code; a result takes the strongest action
of its findings and the code of its worst one.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import Check, skipped
from gpudiag.checks.kernel_log_common import (
    PCIE_SLOT_EVENT_KINDS,
    Finding,
    Repeats,
    applies,
    in_window,
    per_gpu,
    slot_events,
    slot_finding,
    unreadable_log,
    window_start,
)
from gpudiag.checks.kernel_log_nvidia import sxid, xid
from gpudiag.checks.verdicts import strongest
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, KernelEvent, NodeSnapshot, Status, Vendor

__all__ = ["CHECKS", "PCIE_SLOT_EVENT_KINDS", "amdgpu_errors", "sxid", "xid"]


# amdgpu events, by the kinds gpudiag/probe/kernel_log_events.py gives them (line formats: docs/vendor-api.md §11).
_AMDGPU_RESET_FAILED = Finding(Status.FAIL, "GPU reset failed",
                               "The GPU is unusable until the node is power-cycled: drain it and cold-boot; if the "
                               "reset fails again, RMA the GPU.", "reboot")
_RING_TIMEOUT = ("A job hung on the GPU: check the job; timeouts across different jobs on this GPU point at the "
                 "hardware: run AGFHC/RVS on it.")
_AMDGPU_EVENTS = {
    "gpu_reset_failed": _AMDGPU_RESET_FAILED,
    "ras_uncorrectable": Finding(Status.FAIL, "uncorrectable RAS (ECC) errors",
                                 "Drain the GPU; check ecc.* and memory.bad_pages (`amd-smi metric --ecc`, `amd-smi "
                                 "bad-pages`); reset it (`amd-smi reset --gpureset -g <gpu>`) to retire the pages; "
                                 "RMA if bad pages approach the threshold.", "reset"),
    "init_failed": Finding(Status.FAIL, "GPU initialisation failed",
                           "amdgpu could not bring the GPU up: check for missing firmware (/lib/firmware/amdgpu) and "
                           "\"Above 4G Decoding\" in the BIOS; cold-boot; RMA if it persists.", "reboot"),
    "ras_deferred": Finding(Status.WARN, "deferred (poisoned) RAS errors",
                            "Poisoned data was consumed: see ecc.deferred and memory.bad_pages, and reset the GPU "
                            "(`amd-smi reset --gpureset -g <gpu>`) to retire the pages.", "reset"),
    "gpu_reset": Finding(Status.WARN, "GPU reset by the driver",
                         "The driver reset the GPU after a hang and killed its jobs: find the ring timeout or RAS "
                         "error before it; repeated resets mean drain and run AGFHC/RVS on the GPU."),
    "gpu_reset_succeeded": Finding(Status.WARN, "GPU reset by the driver (succeeded)",
                                   "The GPU recovered, but its jobs were killed: find the ring timeout or RAS error "
                                   "before the reset; repeated resets mean drain and run AGFHC/RVS on the GPU."),
    "ring_timeout": Finding(Status.WARN, "GPU ring (job queue) timeout", _RING_TIMEOUT),
    "ring_timeout_soft_recovered": Finding(Status.WARN, "GPU ring timeout (soft recovered)", _RING_TIMEOUT),
    # Fatal RAS (issue 15). amdgpu's own flow after each of these is a GPU reset (the whole XGMI hive for a fatal
    # interrupt, amdgpu_ras.c amdgpu_ras_global_ras_isr → amdgpu_ras_reset_gpu); "GPU reset failed" escalates above.
    "ras_fatal_error": Finding(Status.FAIL, "uncorrectable hardware error (fatal RAS interrupt)",
                               "amdgpu reset the GPU (with its XGMI hive) after a fatal uncorrectable error and killed "
                               "its jobs: drain it; check ecc.* and memory.bad_pages (`amd-smi metric --ecc`, `amd-smi "
                               "bad-pages`); if the reset failed, cold-boot; a GPU that repeats this is an RMA "
                               "candidate.", "reset"),
    "ras_poison_consumed": Finding(Status.FAIL, "poisoned data consumed (GPU reset flow started)",
                                   "A job read data the GPU had marked poisoned; amdgpu resets the GPU and retires "
                                   "the page. Drain the GPU, check memory.bad_pages and ecc.*, and reset it "
                                   "(`amd-smi reset --gpureset -g <gpu>`) if the driver's reset did not run.",
                                   "reset"),
    "aca_uncorrectable": Finding(Status.FAIL, "uncorrectable error in an ACA/MCA bank (UC bit set)",
                                 "The GPU logged an uncorrected hardware error (ACA bank STATUS UC bit). On an XGMI "
                                 "hive the dump appears on every GPU of the hive: find the GPU with the fatal error "
                                 "line; drain, check ecc.* and reset (`amd-smi reset --gpureset -g <gpu>`); repeated "
                                 "banks on one GPU → run AGFHC and RMA.", "reset"),
    "bad_pages_threshold": Finding(Status.FAIL, "retired (bad) pages reached the RMA threshold",
                                   "amdgpu marked the GPU for replacement (bad pages reached the threshold, the "
                                   "RAS table is flagged bad): drain it and RMA it (AMD Service Action Guide).",
                                   "rma"),
    "ras_records_exceed_threshold": Finding(Status.FAIL, "RAS bad-page records exceed the threshold",
                                            "The bad-page table on the GPU's EEPROM holds more records than the "
                                            "threshold: amdgpu flags the GPU for RMA (unless amdgpu.bad_page_"
                                            "threshold=-1/-2). Drain it and RMA it.", "rma"),
    "aca_deferred": Finding(Status.WARN, "deferred error in an ACA/MCA bank",
                            "Poisoned (deferred) data was logged: see ecc.deferred and memory.bad_pages, and reset "
                            "the GPU (`amd-smi reset --gpureset -g <gpu>`) to retire the pages.", "reset"),
    "ras_poison_created": Finding(Status.WARN, "poison created (uncorrectable error contained)",
                                  "An uncorrectable memory error was contained by poisoning (amdgpu: \"no user action "
                                  "is needed\"); the page is retired. Watch memory.bad_pages; a job that reads it "
                                  "triggers a reset."),
    "bad_pages_near_threshold": Finding(Status.WARN, "RAS bad-page records at 90% of the threshold",
                                        "The GPU is close to its bad-page RMA threshold: plan its replacement; see "
                                        "memory.bad_pages."),
    "ras_table_checksum": Finding(Status.WARN, "RAS bad-page table failed its checksum",
                                  "The bad-page table in the GPU's EEPROM could not be verified, so retired pages may "
                                  "not be reserved: check memory.bad_pages; reload amdgpu or reboot (newer kernels "
                                  "try to recover the table); if it persists, contact AMD support."),
    "page_fault": Finding(Status.WARN, "GPU page fault",
                          "Usually a job that used an invalid address (the log names the process): check the job."),
    "throttled": Finding(Status.WARN, "GPU throttled", "See thermal.* and power.* for the cause."),
}


def _amdgpu_finding(event: KernelEvent, expect: Expectations) -> Optional[Finding]:
    """The event's finding, with the profile's verdict for its kind (ignore > fail > warn > the table above)."""
    if event.kind in expect.amdgpu_ignore_kinds:
        return None
    if event.kind in PCIE_SLOT_EVENT_KINDS:
        return slot_finding(event)
    finding = _AMDGPU_EVENTS.get(event.kind) or Finding(
        Status.WARN, f"amdgpu {event.kind}", f"Unrecognised amdgpu event {event.kind!r}: read it with "
                                            f"`dmesg -T | grep -i amdgpu`.")
    finding = finding._replace(fault_code=f"GPUDIAG-AMDGPU-{event.kind.upper().replace('_', '-')}")
    if event.kind in expect.amdgpu_fail_kinds:
        return finding._replace(severity=Status.FAIL, verdict=strongest([finding.verdict, "drain"]))
    if event.kind in expect.amdgpu_warn_kinds:
        return finding._replace(severity=Status.WARN)
    return finding


def amdgpu_errors(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "kernel_log.amdgpu_errors"
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.AMD] + slot_events(snapshot, Vendor.AMD)
    if not applies(snapshot, Vendor.AMD, events):
        return [skipped(check_id, None, "no AMD GPU on this node")]
    if not snapshot.kernel_log.readable:
        return [unreadable_log(check_id, snapshot)]
    start = window_start(snapshot, expect)
    return per_gpu(snapshot, check_id, Vendor.AMD, events,
                   lambda event: _amdgpu_finding(event, expect) if in_window(event, start) else None,
                   Repeats(snapshot, expect))


CHECKS = (
    Check("kernel_log.xid", xid,
          "no critical NVIDIA Xid or driver failure (fallen off the bus, NVLink training, RmInitAdapter) since boot "
          "(application and unknown Xids warn)"),
    Check("kernel_log.sxid", sxid,
          "no fatal NVSwitch SXid since boot (non-fatal SXids warn)"),
    Check("kernel_log.amdgpu_errors", amdgpu_errors,
          "no amdgpu reset failures or uncorrectable RAS errors since boot (ring timeouts, resets, faults warn)"),
)
