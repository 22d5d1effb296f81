"""kernel_log.*: what the GPU drivers logged since boot: NVIDIA Xids and amdgpu error events, per GPU.

Events are matched to GPUs by PCI bus ID (an Xid line omits the function; the scanner assumes ".0"). An event on a
bus ID the inventory does not know (a GPU that fell off the bus and was never enumerated) is reported node-level.
A PCIe hot-plug event (`pcieport <port>: pciehp: Slot(N): Link Down` / `Card not present`, AMD's "fell off the bus")
names the port: it fails the GPU whose upstream port that is; when no GPU on the bus is known below the port (a GPU
that is gone is no longer on the bus) it warns node-level, on a GPU node only, and inventory.* judges what is missing.

Only the drivers' own records reach this module (gpudiag/probe/kernel_log_events.py: driver prefix, kmsg facility
kernel). Records the scanner could not parse are skipped and counted, and a scan cut short (deadline, size cap) is
said in the message; with no finding in the part that was scanned, a cut-short scan is unknown, not a pass.
Events are judged per GPU even when the GPU no longer answers its library: that is when the log matters most.

A profile narrows the log to a window (Expectations.kernel_log_window_seconds: events stamped earlier than that
many seconds before the snapshot are ignored) and overrides verdicts per Xid code or amdgpu event kind. Each
finding carries what automation should do (verdicts.ACTIONS) and a fault code; a result takes the strongest action
of its findings and the code of its worst one.
"""

from __future__ import annotations

import dataclasses
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
from gpudiag.model import (
    STATUS_SEVERITY,
    CheckResult,
    DeviceSnapshot,
    KernelEvent,
    KernelLogInfo,
    NodeSnapshot,
    Status,
    Vendor,
)

# The kinds gpudiag/probe/kernel_log_events.py gives PCIe hot-plug events (the checks import no probe module; a test
# keeps the two in step).
PCIE_SLOT_EVENT_KINDS = ("slot_link_down", "slot_card_not_present")


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


def _scan_notes(log: KernelLogInfo) -> tuple[str, dict]:
    """What the reader could not do, for the message and `observed`: skipped records, a scan cut short."""
    notes, observed = [], {}
    if log.records_skipped:
        notes.append(f"{log.records_skipped} record(s) could not be parsed and were skipped")
        observed["records_skipped"] = log.records_skipped
    if log.incomplete:
        notes.append(f"scan incomplete: {log.incomplete}")
        observed["incomplete"] = log.incomplete
    return ("; ".join(notes), observed)


def _judge_events(check_id: str, device: Optional[DeviceSnapshot], where: str, events: list[KernelEvent],
                  finding: Callable[[KernelEvent], Optional[Finding]], log: KernelLogInfo) -> CheckResult:
    findings = [(e, f) for e in events if (f := finding(e)) is not None]
    counts = Counter(f.description for _, f in findings)
    notes, scan_observed = _scan_notes(log)
    observed = {"events": dict(counts), "last": findings[-1][0].message if findings else None, **scan_observed}
    if not findings:
        if log.incomplete:
            return unknown(check_id, device, f"{where}: no driver error events in the part of the log scanned, but "
                                             f"the {notes}", observed=observed, expected="no driver error events",
                           remediation="Run the check again with a longer --timeout, or pass a saved log with "
                                       "--kernel-log FILE (e.g. `journalctl -k -b > kern.log`).")
        note = f" ({len(events)} ignored by the profile)" if events else ""
        note += f" ({notes})" if notes else ""
        return passed(check_id, device, f"{where}: no driver error events since boot{note}",
                      observed=observed, expected="no driver error events")
    worst = max((f.severity for _, f in findings), key=STATUS_SEVERITY.__getitem__)
    # Actions for the worst findings first, each once; otherwise in log order (stable for golden outputs).
    ordered = sorted(dict.fromkeys(f for _, f in findings), key=lambda f: -STATUS_SEVERITY[f.severity])
    actions = list(dict.fromkeys(f.action for f in ordered))
    if device is not None:
        actions = [a.replace("<gpu>", str(device.index)) for a in actions]
    listing = ", ".join(f"{description} ×{n}" for description, n in counts.items())
    listing += f" ({notes})" if notes else ""
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
    log = snapshot.kernel_log
    results = [_judge_events(check_id, d, d.label, by_device.get(d.index, []), finding, log) for d in devices]
    for bus_id, orphaned in elsewhere.items():
        where = f"GPU at {bus_id} (not in the inventory)" if bus_id else "a GPU the log line does not name"
        if all(e.kind in PCIE_SLOT_EVENT_KINDS for e in orphaned):
            where = f"PCIe slot below port {bus_id} (no GPU on the bus is known below it)"
        results.append(_judge_events(check_id, None, where, orphaned, finding, log))
    return results


def _slot_events(snapshot: NodeSnapshot, vendor: Vendor) -> list[KernelEvent]:
    """The PCIe hot-plug events `vendor`'s check judges: those on the upstream port of one of its GPUs (given that
    GPU's bus ID and vendor), and — in the check of the node's first GPU vendor only, so that they are reported
    once — those on a port no GPU on the bus is known to sit below (vendor left None: node-level)."""
    node_vendor = next((v for v in (Vendor.AMD, Vendor.NVIDIA) if v in vendors_present(snapshot)), None)
    picked = []
    for event in snapshot.kernel_log.events:
        if event.kind not in PCIE_SLOT_EVENT_KINDS:
            continue
        gpu = next((p for p in snapshot.pci_gpus if p.upstream_pci_bus_id == event.pci_bus_id), None)
        if gpu is not None and gpu.vendor == vendor:
            picked.append(dataclasses.replace(event, vendor=vendor, pci_bus_id=gpu.pci_bus_id))
        elif gpu is None and vendor == node_vendor:
            picked.append(event)
    return picked


# pciehp: the slot's link went down or its card is gone. Below a GPU's own port, the GPU fell off the bus.
_SLOT_LOST = {
    "slot_link_down": "PCIe slot link down (the GPU fell off the bus)",
    "slot_card_not_present": "PCIe card no longer present (the GPU fell off the bus)",
}
_SLOT_ACTION = ("The GPU is gone from the PCIe bus: drain the node and power-cycle it (cold boot). Check pcie.aer, the "
                "riser/cable and the GPU's power; a GPU that falls off again is an RMA candidate.")


def _slot_finding(event: KernelEvent) -> Finding:
    if event.vendor is None:  # no GPU known below the port
        return Finding(Status.WARN, f"PCIe hot-plug slot lost its {'link' if event.kind == 'slot_link_down' else 'card'}",
                       "A hot-plug slot lost its link or card. If it held a GPU, that GPU has fallen off the bus: "
                       "see inventory.* for the GPU that is missing, drain the node and power-cycle it.",
                       "watch", "GPUDIAG-PCIE-SLOT-LOST")
    return Finding(Status.FAIL, _SLOT_LOST[event.kind], _SLOT_ACTION, "reboot", "GPUDIAG-PCIE-SLOT-LOST")


def _applies(snapshot: NodeSnapshot, vendor: Vendor, events: list[KernelEvent]) -> bool:
    return vendor in vendors_present(snapshot) or bool(events)


# "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." comes with (or, on some paths, instead of) Xid 79.
_FALLEN_OFF_BUS = Finding(Status.FAIL, "GPU has fallen off the bus (NVRM)", xid_catalog.action(79), "reboot",
                          "GPUDIAG-XID-79")


def xid(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "kernel_log.xid"
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.NVIDIA
              and (e.kind == "fallen_off_bus" or (e.kind == "xid" and e.code is not None))]
    events += _slot_events(snapshot, Vendor.NVIDIA)
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
        if event.kind in PCIE_SLOT_EVENT_KINDS:
            return _slot_finding(event)
        severity = xid_catalog.xid_severity(event.code, expect)
        if severity is None:
            return None
        return Finding(severity, xid_catalog.describe(event.code), xid_catalog.action(event.code),
                       xid_catalog.automation_action(event.code, severity), f"GPUDIAG-XID-{event.code}")

    return _per_gpu(snapshot, check_id, Vendor.NVIDIA, events, finding)


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
        return _slot_finding(event)
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
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.AMD] + _slot_events(snapshot, Vendor.AMD)
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
