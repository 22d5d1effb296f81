"""kernel_log.*: what the GPU drivers logged since boot: NVIDIA Xids and amdgpu error events, per GPU.

Events are matched to GPUs by PCI bus ID (an Xid line omits the function; the scanner assumes ".0"). An event on a
bus ID the inventory does not know (a GPU that fell off the bus and was never enumerated) is reported node-level.
Events are judged per GPU even when the GPU no longer answers its library: that is when the log matters most.

A profile narrows the log to a window (Expectations.kernel_log_window_seconds: events stamped earlier than that
many seconds before the snapshot are ignored) and overrides verdicts per Xid code or amdgpu event kind. Each
finding carries what automation should do (verdicts.ACTIONS) and a fault code; a result takes the strongest action
of its findings and the code of its worst one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Callable, NamedTuple, Optional

from gpudiag.checks import xid_catalog
from gpudiag.checks.common import (
    Check,
    device_for_bus_id,
    passed,
    physical_devices,
    skipped,
    unknown,
    vendors_present,
    verdict,
)
from gpudiag.checks.verdicts import ACTION_RANK, strongest, with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import STATUS_SEVERITY, CheckResult, DeviceSnapshot, KernelEvent, NodeSnapshot, Status, Vendor


class Finding(NamedTuple):
    severity: Status
    description: str
    action: str  # what the operator does, in words
    verdict: str = "watch"  # what automation does (verdicts.ACTIONS)
    fault_code: str = "GPUDIAG-KERNEL-LOG-EVENT"


def _window_start(snapshot: NodeSnapshot, expect: Expectations) -> Optional[float]:
    """The since-boot second before which events are ignored, or None to judge them all (no window configured, or
    the boot time or collection time unknown: then nothing is left out rather than guessed)."""
    window = expect.kernel_log_window_seconds
    if window is None or snapshot.host.boot_time is None or not snapshot.collected_at:
        return None
    try:
        collected = datetime.fromisoformat(snapshot.collected_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return collected - snapshot.host.boot_time - window


def _in_window(event: KernelEvent, start: Optional[float]) -> bool:
    return start is None or event.timestamp_seconds is None or event.timestamp_seconds >= start


def _unreadable(check_id: str, snapshot: NodeSnapshot) -> CheckResult:
    log = snapshot.kernel_log
    reason = f"{log.error.kind}: {log.error.message}" if log.error else "no reason recorded"
    return unknown(check_id, None, f"the kernel log ({log.source or 'not found'}) could not be read: {reason}",
                   observed={"source": log.source, "error": reason}, expected="kernel log readable",
                   remediation=("Run gpudiag as root (reading /dev/kmsg needs CAP_SYSLOG when "
                                "kernel.dmesg_restrict=1), or pass a saved log with --kernel-log FILE (e.g. "
                                "`journalctl -k -b > kern.log`)."))


def _judge_events(check_id: str, device: Optional[DeviceSnapshot], where: str, events: list[KernelEvent],
                  finding: Callable[[KernelEvent], Optional[Finding]]) -> CheckResult:
    findings = [(e, f) for e in events if (f := finding(e)) is not None]
    counts = Counter(f.description for _, f in findings)
    observed = {"events": dict(counts), "last": findings[-1][0].message if findings else None}
    if not findings:
        note = f" ({len(events)} ignored by the profile)" if events else ""
        return passed(check_id, device, f"{where}: no driver error events since boot{note}",
                      observed=observed, expected="no driver error events")
    worst = max((f.severity for _, f in findings), key=STATUS_SEVERITY.__getitem__)
    # Actions for the worst findings first, each once; otherwise in log order (stable for golden outputs).
    ordered = sorted(dict.fromkeys(f for _, f in findings), key=lambda f: -STATUS_SEVERITY[f.severity])
    actions = list(dict.fromkeys(f.action for f in ordered))
    if device is not None:
        actions = [a.replace("<gpu>", str(device.index)) for a in actions]
    listing = ", ".join(f"{description} ×{n}" for description, n in counts.items())
    result = verdict(check_id, worst, device, f"{where}: {len(findings)} driver error event(s) since boot: {listing}",
                     observed=observed, expected="no driver error events", remediation=" ".join(actions))
    decisive = max((f for _, f in findings), key=lambda f: (STATUS_SEVERITY[f.severity], ACTION_RANK[f.verdict]))
    return with_verdict(result, strongest([f.verdict for _, f in findings]), decisive.fault_code)


def _per_gpu(snapshot: NodeSnapshot, check_id: str, vendor: Vendor, events: list[KernelEvent],
             finding: Callable[[KernelEvent], Optional[Finding]]) -> list[CheckResult]:
    devices = [d for d in physical_devices(snapshot) if d.vendor == vendor]
    by_device: dict[int, list[KernelEvent]] = defaultdict(list)
    elsewhere: dict[Optional[str], list[KernelEvent]] = defaultdict(list)
    for event in events:
        device = device_for_bus_id(snapshot, event.pci_bus_id)
        if device is not None and device.vendor == vendor:
            by_device[device.index].append(event)
        else:
            elsewhere[event.pci_bus_id].append(event)
    results = [_judge_events(check_id, d, d.label, by_device.get(d.index, []), finding) for d in devices]
    for bus_id, orphaned in elsewhere.items():
        where = f"GPU at {bus_id} (not in the inventory)" if bus_id else "a GPU the log line does not name"
        results.append(_judge_events(check_id, None, where, orphaned, finding))
    return results


def _applies(snapshot: NodeSnapshot, vendor: Vendor, events: list[KernelEvent]) -> bool:
    return vendor in vendors_present(snapshot) or bool(events)


# "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." comes with (or, on some paths, instead of) Xid 79.
_FALLEN_OFF_BUS = Finding(Status.FAIL, "GPU has fallen off the bus (NVRM)", xid_catalog.action(79), "reboot",
                          "GPUDIAG-XID-79")


def xid(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "kernel_log.xid"
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.NVIDIA
              and (e.kind == "fallen_off_bus" or (e.kind == "xid" and e.code is not None))]
    if not _applies(snapshot, Vendor.NVIDIA, events):
        return [skipped(check_id, None, "no NVIDIA GPU on this node")]
    if not snapshot.kernel_log.readable:
        return [_unreadable(check_id, snapshot)]

    start = _window_start(snapshot, expect)

    def finding(event: KernelEvent) -> Optional[Finding]:
        if not _in_window(event, start):
            return None
        if event.kind == "fallen_off_bus":
            return _FALLEN_OFF_BUS
        severity = xid_catalog.xid_severity(event.code, expect)
        if severity is None:
            return None
        return Finding(severity, xid_catalog.describe(event.code), xid_catalog.action(event.code),
                       xid_catalog.automation_action(event.code, severity), f"GPUDIAG-XID-{event.code}")

    return _per_gpu(snapshot, check_id, Vendor.NVIDIA, events, finding)


# amdgpu events, by the kinds gpudiag/probe/kernel_log_events.py gives them (line formats: vendor-api.md §11).
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
    "page_fault": Finding(Status.WARN, "GPU page fault",
                          "Usually a job that used an invalid address (the log names the process): check the job."),
    "throttled": Finding(Status.WARN, "GPU throttled", "See thermal.* and power.* for the cause."),
}


def _amdgpu_finding(event: KernelEvent, expect: Expectations) -> Optional[Finding]:
    """The event's finding, with the profile's verdict for its kind (ignore > fail > warn > the table above)."""
    if event.kind in expect.amdgpu_ignore_kinds:
        return None
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
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.AMD]
    if not _applies(snapshot, Vendor.AMD, events):
        return [skipped(check_id, None, "no AMD GPU on this node")]
    if not snapshot.kernel_log.readable:
        return [_unreadable(check_id, snapshot)]
    start = _window_start(snapshot, expect)
    return _per_gpu(snapshot, check_id, Vendor.AMD, events,
                    lambda event: _amdgpu_finding(event, expect) if _in_window(event, start) else None)


CHECKS = (
    Check("kernel_log.xid", xid,
          "no critical NVIDIA Xid or fallen-off-the-bus since boot (application and unknown Xids warn)"),
    Check("kernel_log.amdgpu_errors", amdgpu_errors,
          "no amdgpu reset failures or uncorrectable RAS errors since boot (ring timeouts, resets, faults warn)"),
)
