"""kernel_log.*: what the GPU drivers logged since boot: NVIDIA Xids, NVSwitch SXids and driver records
(nvidia.py), amdgpu error events (amdgpu.py), per GPU; the shared rules (which GPU, the window, one event's
lines counted once, repeats across boots, a log read only in part) are in common.py.

Only the drivers' own records reach these modules (gpudiag/probe/kernel_log/events.py: driver prefix, kmsg facility
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
from gpudiag.checks.family import Family
from gpudiag.checks.kernel_log.common import (
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
from gpudiag.checks.kernel_log import amdgpu as kernel_log_amdgpu
from gpudiag.checks.kernel_log.nvidia import nvidia_finding, sxid, sxid_finding, xid
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, KernelEvent, NodeSnapshot, Status, Vendor

__all__ = ["CHECKS", "PCIE_SLOT_EVENT_KINDS", "amdgpu_errors", "sxid", "xid"]


def amdgpu_errors(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "kernel_log.amdgpu_errors"
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.AMD] + slot_events(snapshot, Vendor.AMD)
    events += kernel_log_amdgpu.port_events(snapshot, Vendor.AMD)
    if not applies(snapshot, Vendor.AMD, events):
        return [skipped(check_id, None, "no AMD GPU on this node")]
    if not snapshot.kernel_log.readable:
        return [unreadable_log(check_id, snapshot)]
    start = window_start(snapshot, expect)
    causes = kernel_log_amdgpu.hive_causes(snapshot, events)  # keyed by the event objects in `events`

    def finding(event: KernelEvent) -> Optional[Finding]:
        if not in_window(event, start) or event.kind in expect.amdgpu_ignore_kinds:
            return None
        if event.kind in PCIE_SLOT_EVENT_KINDS:
            return slot_finding(event)
        return kernel_log_amdgpu.amdgpu_finding(event, expect, causes)

    return per_gpu(snapshot, check_id, Vendor.AMD, events, finding, Repeats(snapshot, expect))


def event_severity(event: KernelEvent, expect: Expectations) -> Optional[Status]:
    """The status one kernel-log event earns on its own, as the checks above judge it (None: the profile ignores
    it). The service's journal keeps fail-level events apart from rotation and counts the others."""
    if event.kind == "sxid":
        finding = sxid_finding(event)
    elif event.vendor == Vendor.AMD or event.kind in kernel_log_amdgpu.GHES_EVENT_KINDS:
        finding = (slot_finding(event) if event.kind in PCIE_SLOT_EVENT_KINDS
                   else kernel_log_amdgpu.amdgpu_finding(event, expect, {}))
    elif event.vendor == Vendor.NVIDIA or event.kind in PCIE_SLOT_EVENT_KINDS:
        finding = nvidia_finding(event, expect, {event.pci_bus_id: event})  # alone, an Xid 154 is its GPU's last
    else:
        return Status.FAIL  # an event no check above names: kept, not counted away
    return finding.severity if finding is not None else None


CHECKS = (
    Check("kernel_log.xid", xid,
          "no critical NVIDIA Xid or driver failure (fallen off the bus, NVLink training, RmInitAdapter) since boot "
          "(application and unknown Xids warn)"),
    Check("kernel_log.sxid", sxid,
          "no fatal NVSwitch SXid since boot (non-fatal SXids warn)"),
    Check("kernel_log.amdgpu_errors", amdgpu_errors,
          "no amdgpu reset failures or uncorrectable RAS errors since boot (ring timeouts, resets, faults warn)"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    # Per-finding verdicts come from the Xid catalog / amdgpu event table (family.py); these are the fallback.
    "kernel_log.xid": {F: ("drain", "GPUDIAG-XID"), W: ("watch", "GPUDIAG-XID"),
                       U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
    "kernel_log.sxid": {F: ("reboot", "GPUDIAG-SXID"), W: ("watch", "GPUDIAG-SXID"),
                        U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
    "kernel_log.amdgpu_errors": {F: ("drain", "GPUDIAG-AMDGPU-EVENT"), W: ("watch", "GPUDIAG-AMDGPU-EVENT"),
                                 U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
}
_REFERENCE = {
    "kernel_log.xid": (
        "NVIDIA Xid lines in the kernel log (/dev/kmsg or --kernel-log; every saved format, "
        "docs/kernel-log-formats.md), "
        "judged by the Xid catalog and what the line says (Xid 144-150 Fatal/Nonfatal, Xid 94's RST/D-RST, Xid 154's "
        "new action); the driver's fallen-off-the-bus, NVLink training, RmInitAdapter (a reset where its status is "
        "NV_ERR_RESET_REQUIRED), reset-required, GSP timeout and core dump, multicast-fabric (warn), invalid BAR and "
        "probe failure records; fatal native PCIe AER records on the GPU's link or a bridge above it; error-level "
        "driver records no rule names (warn); earlier boots' faults",
        "Follow the Xid's resolution bucket (the result names it): restart the application, reset the GPU, reboot, "
        "or RMA; confirm with `dmesg -T | grep -i xid`."),
    "kernel_log.sxid": (
        "NVSwitch SXid lines in the kernel log (`nvidia-nvswitchN: SXid (PCI:…): NNNNN, Fatal|Non-fatal, …`), judged "
        "by "
        "the line's own word and NVIDIA's Fabric Manager SXid tables",
        "A fatal SXid: drain the node and reboot it (the NVSwitches and GPUs must be reset together); an always-fatal "
        "one or one that recurs after reboots: hardware inspection of the baseboard. Non-fatal: watch."),
    "kernel_log.amdgpu_errors": (
        "amdgpu lines in the kernel log: ring timeouts, resets, RAS errors, page faults, slot loss, probe failures; "
        "fatal PCIe errors on the GPU's link (firmware-first APEI/GHES and native AER); error-level amdgpu records "
        "no rule names (warn)",
        "A failed reset or uncorrectable RAS error: drain, reset the GPU or reboot; ring timeouts and faults: "
        "find the job that caused them, and watch."),
}
_SETTINGS = {
    "kernel_log.xid": ("xid_fail_codes", "xid_warn_codes", "xid_ignore_codes", "kernel_log_window_seconds",
                       "kernel_log_repeat_boots"),
    "kernel_log.sxid": ("kernel_log_window_seconds", "kernel_log_repeat_boots"),
    "kernel_log.amdgpu_errors": ("amdgpu_fail_kinds", "amdgpu_warn_kinds", "amdgpu_ignore_kinds",
                                 "kernel_log_window_seconds"),
}
FAMILY = Family(
    "kernel_log", order=90, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
    probe_parts={"kernel_log": ("kernel_log.",)},
)
