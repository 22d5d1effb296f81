"""What the kernel_log.* checks share: findings, the profile's window, events judged per GPU (or per NVSwitch, or
node-level), the lines of one event counted once, a log read only in part, and faults that come back across boots.

Events are matched to GPUs by PCI bus ID (an Xid line omits the function; the scanner assumes ".0"). An event on a
bus ID the inventory does not know (a GPU that fell off the bus and was never enumerated) is reported node-level.
A PCIe hot-plug event (`pcieport <port>: pciehp: Slot(N): Link Down` / `Card not present`, AMD's "fell off the bus")
names the port: it fails the GPU whose upstream port that is; when no GPU on the bus is known below the port (a GPU
that is gone is no longer on the bus) it warns node-level, on a GPU node only, and inventory.* judges what is missing.

One fault can print several lines: a misaligned load on the lab H200 printed two Xid 13 lines 2.5 ms apart, a
misaligned store three (tests/fixtures/h200/faults/); an SXid record is followed by its `Severity …` and `Data {…}`
dump. Counts are of events: Xid lines of one code on one GPU, each within SAME_EVENT_SECONDS of the one before and
of one process (or none named), are one event, and so are an Xid 79 and the "GPU has fallen off the bus." line
beside it; with no time on the lines, only lines next to each other in that GPU's events are. NVLink5 Xids
(144-150) name a link each: every line counts. An SXid's dump lines belong to the record before them.

A fault that resets, reboots or drains, seen on the same GPU in `kernel_log_repeat_boots` boots, escalates to rma
(the boots: the log's own where it spans boots, and snapshot.boot_history).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from datetime import datetime
from typing import Callable, NamedTuple, Optional

from gpudiag.checks.common import (
    device_for_bus_id,
    passed,
    physical_devices,
    unknown,
    vendors_present,
    verdict,
    warned,
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

# The kinds gpudiag/probe/kernel_log/events.py gives PCIe hot-plug events (the checks import no probe module; a test
# keeps the two in step).
PCIE_SLOT_EVENT_KINDS = ("slot_link_down", "slot_card_not_present")
SAME_EVENT_SECONDS = 0.1
SXID_DUMP_DETAILS = ("data", "data-fatal", "data-nonfatal")
_HARDWARE_ACTIONS = ("drain", "reset", "reboot")


class Finding(NamedTuple):
    severity: Status
    description: str
    action: str  # what the operator does, in words
    verdict: str = "watch"  # what automation does (verdicts.ACTIONS)
    fault_code: str = "GPUDIAG-KERNEL-LOG-EVENT"


FindingOf = Callable[[KernelEvent], Optional[Finding]]


def window_start(snapshot: NodeSnapshot, expect: Expectations) -> Optional[float]:
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


def in_window(event: KernelEvent, start: Optional[float]) -> bool:
    return start is None or event.timestamp_seconds is None or event.timestamp_seconds >= start


def unreadable_log(check_id: str, snapshot: NodeSnapshot) -> CheckResult:
    log = snapshot.kernel_log
    reason = f"{log.error.kind}: {log.error.message}" if log.error else "no reason recorded"
    return unknown(check_id, None, f"the kernel log ({log.source or 'not found'}) could not be read: {reason}",
                   observed={"source": log.source, "error": reason}, expected="kernel log readable",
                   remediation=("Run gpudiag as root (reading /dev/kmsg needs CAP_SYSLOG when "
                                "kernel.dmesg_restrict=1), or pass a saved log with --kernel-log FILE (e.g. "
                                "`journalctl -k -b > kern.log`)."))


class Unreadable(NamedTuple):
    """The unreadable lines one result answers for: how many, and the first."""
    lines: int
    first: Optional[str]


def scoped_unreadable(log: KernelLogInfo) -> bool:
    """Whether the log's unreadable lines are told apart by the GPU they name: not when nothing of it could be read
    (a compressed file, every line unreadable), which then belongs to every result."""
    return bool(log.unreadable_lines) and (bool(log.lines_scanned) or bool(log.unreadable_gpus))


def unreadable_for(log: KernelLogInfo, bus_id: Optional[str]) -> Unreadable:
    """The unreadable lines of the log one result answers for (issue 32, item 5): a GPU's (or an uninventoried bus
    ID's) are the lines that name it; the node-level result with no bus ID takes the lines that name no GPU."""
    if not scoped_unreadable(log):
        return Unreadable(log.unreadable_lines, log.first_unreadable)
    if bus_id is not None:
        return Unreadable(log.unreadable_gpus.get(bus_id, 0), log.unreadable_gpu_first.get(bus_id))
    return Unreadable(log.unreadable_lines - sum(log.unreadable_gpus.values()), log.unreadable_gpu_first.get(""))


def _scan_notes(log: KernelLogInfo, unreadable: Optional[Unreadable] = None) -> tuple[str, dict]:
    """What the reader could not do, for the message and `observed`: skipped records, a scan cut short, lines in
    no format it reads (`unreadable`: those this result answers for; all of them when None)."""
    notes, observed = [], {}
    unreadable = unreadable or Unreadable(log.unreadable_lines, log.first_unreadable)
    if log.records_skipped:
        notes.append(f"{log.records_skipped} record(s) could not be parsed and were skipped")
        observed["records_skipped"] = log.records_skipped
    if log.incomplete:
        notes.append(f"scan incomplete: {log.incomplete}")
        observed["incomplete"] = log.incomplete
    if unreadable.lines:
        notes.append(f"{unreadable.lines} line(s) of {log.source or 'the log'} are in a format gpudiag cannot "
                     f"read (first: {unreadable.first})")
        observed["unreadable_lines"] = unreadable.lines
        observed["first_unreadable"] = unreadable.first
    return ("; ".join(notes), observed)


# -- the lines of one event -------------------------------------------------------------------------------------


def _close(a: KernelEvent, b: KernelEvent) -> Optional[bool]:
    """Whether two lines are close enough in time to be one event; None when the lines carry no common clock."""
    for x, y in ((a.timestamp_seconds, b.timestamp_seconds), (a.wall_time, b.wall_time)):
        if x is not None and y is not None:
            return abs(y - x) <= SAME_EVENT_SECONDS
    if a.timestamp_seconds is None and a.wall_time is None and b.timestamp_seconds is None and b.wall_time is None:
        return None
    return False


def _same_fault(a: KernelEvent, b: KernelEvent) -> bool:
    """Lines that report one fault in two ways: Xid 79 and "GPU has fallen off the bus." (nv.c prints both, GPUd's
    sxid README shows them 4 µs apart), or two Xid lines of one code."""
    off = ("fallen_off_bus",)
    key_a = off if a.kind == "fallen_off_bus" or (a.kind == "xid" and a.code == 79) else (a.kind, a.code)
    key_b = off if b.kind == "fallen_off_bus" or (b.kind == "xid" and b.code == 79) else (b.kind, b.code)
    # An NVLink5 Xid (144-150) names its link: each line is an event of its own.
    nvlink5 = a.kind == "xid" and a.code is not None and 144 <= a.code <= 150
    return key_a == key_b and not nvlink5


def distinct_events(events: list[KernelEvent]) -> list[list[KernelEvent]]:
    """The events of one GPU's (or switch's) lines, in log order, each a list of the lines it printed."""
    groups: list[list[KernelEvent]] = []
    last_sxid: dict[tuple, list[KernelEvent]] = {}
    for event in events:
        previous = groups[-1] if groups else None
        if event.kind == "sxid" and event.detail in SXID_DUMP_DETAILS:
            owner = last_sxid.get((event.pci_bus_id, event.code))
            if owner is not None and _close(owner[-1], event) is not False:
                owner.append(event)
                continue
        elif (event.kind in ("xid", "fallen_off_bus") and event.detail != "probe" and previous is not None
              and _same_fault(previous[-1], event) and previous[-1].boot == event.boot):
            close = _close(previous[-1], event)
            pids = {e.pid for e in previous if e.pid is not None}
            # Without a clock, two lines that both name the process are two events (a job's channels torn down one by
            # one, open-gpu-kernel-modules#1150); the lab's multi-line faults name it on one line at most.
            untimed_pair = close is None and event.pid is not None and previous[-1].pid is not None
            if close is not False and not untimed_pair and (event.pid is None or not pids or pids == {event.pid}):
                previous.append(event)
                continue
        groups.append([event])
        if event.kind == "sxid":
            last_sxid[(event.pci_bus_id, event.code)] = groups[-1]
    return groups


def _worst(findings: list[Finding]) -> Optional[Finding]:
    return max(findings, key=lambda f: (STATUS_SEVERITY[f.severity], ACTION_RANK[f.verdict]), default=None)


# -- faults across boots ----------------------------------------------------------------------------------------


def fault_key(kind: str, code: Optional[int], detail: Optional[str] = None) -> tuple:
    """What makes two events the same fault across boots: a GPU off the bus however it was logged, an Xid or SXid by
    code (NVLink5 Xids 144-150 by their Fatal/Nonfatal word too)."""
    if kind == "fallen_off_bus" or (kind == "xid" and code == 79):
        return ("fallen_off_bus",)
    if kind == "xid" and code is not None and 144 <= code <= 150:
        return ("xid", code, detail)
    return (kind, code) if kind in ("xid", "sxid") else (kind,)


class Repeats:
    """The boots each fault was seen in on each bus ID: this log's (its events' `boot`, else the current boot) and
    the earlier ones the node recorded (snapshot.boot_history)."""

    def __init__(self, snapshot: NodeSnapshot, expect: Expectations):
        self.needed = expect.kernel_log_repeat_boots
        history = snapshot.boot_history
        self.current = (history.current_boot if history else None) or snapshot.host.boot_id or "this boot"
        self.cut_short = bool(history and history.cut_short)  # earlier boots may hold repeats not read
        self._earlier: dict[tuple, set[str]] = defaultdict(set)
        for fault in history.faults if history else []:
            if fault.boot != self.current:
                self._earlier[(fault.pci_bus_id, fault_key(fault.kind, fault.code, fault.detail))].add(fault.boot)

    def escalate(self, bus_id: Optional[str], judged: list[tuple[list[KernelEvent], Finding]]) -> list[Finding]:
        boots: dict[tuple, set[str]] = defaultdict(set)
        for group, found in judged:
            if found.severity == Status.FAIL and found.verdict in _HARDWARE_ACTIONS:
                first = group[0]
                key = fault_key(first.kind, first.code, first.detail)
                boots[key] |= {e.boot or self.current for e in group} | self._earlier.get((bus_id, key), set())
        out = []
        for group, found in judged:
            first = group[0]
            key = fault_key(first.kind, first.code, first.detail)
            seen = boots.get(key, set())
            repeatable = self.needed is not None and key in boots and not (first.kind == "xid" and first.code == 154)
            if repeatable and len(seen) >= self.needed:
                found = found._replace(
                    description=f"{found.description}, seen in {len(seen)} boots", verdict="rma",
                    action=(f"{found.action} It came back in {len(seen)} boots on this device, after the resets and "
                            f"reboots that should have cleared it: a hardware fault. Drain it and open an RMA "
                            f"(`nvidia-bug-report.sh` / `amd-smi` logs for the vendor)."))
            elif repeatable and self.cut_short:  # a hardware fault this history could have escalated
                found = found._replace(description=f"{found.description}, earlier boots not all read", action=(
                    f"{found.action} The records of earlier boots were not all read before the deadline: whether it "
                    f"came back after earlier reboots (a hardware fault: RMA) is not known. Run the check again "
                    f"with a longer --timeout."))
            out.append(found)
        return out


# -- judging ----------------------------------------------------------------------------------------------------


def judge_events(check_id: str, device: Optional[DeviceSnapshot], where: str, events: list[KernelEvent],
                 finding: FindingOf, log: KernelLogInfo, repeats: Optional[Repeats] = None,
                 bus_id: Optional[str] = None, observed_extra: Optional[dict] = None,
                 unreadable: Optional[Unreadable] = None) -> CheckResult:
    groups = distinct_events(events)
    judged = [(g, f) for g in groups if (f := _worst([x for e in g if (x := finding(e)) is not None])) is not None]
    findings = repeats.escalate(bus_id, judged) if repeats is not None else [f for _, f in judged]
    counts = Counter(f.description for f in findings)
    notes, scan_observed = _scan_notes(log, unreadable)
    observed = {**(observed_extra or {}), "events": dict(counts),
                "last": judged[-1][0][-1].message if judged else None, **scan_observed}
    lines = sum(len(g) for g, _ in judged)
    if lines != len(judged):
        observed["lines"] = lines
    if not findings:
        if log.incomplete:
            return unknown(check_id, device, f"{where}: no driver error events in the part of the log scanned, but "
                                             f"the {notes}", observed=observed, expected="no driver error events",
                           remediation="Run the check again with a longer --timeout, or pass a saved log with "
                                       "--kernel-log FILE (e.g. `journalctl -k -b > kern.log`).")
        note = f" ({len(events)} ignored by the profile)" if events else ""
        if (unreadable or Unreadable(log.unreadable_lines, None)).lines:
            return warned(check_id, device, f"{where}: no driver error events in the lines gpudiag could read, but "
                                            f"{notes}", observed=observed, expected="a kernel log gpudiag can read",
                          remediation="Hand over the log as `dmesg`, `dmesg -x --time-format iso`, `journalctl -k -b` "
                                      "or /dev/kmsg (docs/kernel-log-formats.md lists the formats gpudiag reads).")
        note += f" ({notes})" if notes else ""
        return passed(check_id, device, f"{where}: no driver error events since boot{note}",
                      observed=observed, expected="no driver error events")
    worst = max((f.severity for f in findings), key=STATUS_SEVERITY.__getitem__)
    # Actions for the worst findings first, each once; otherwise in log order (stable for golden outputs).
    ordered = sorted(dict.fromkeys(findings), key=lambda f: (-STATUS_SEVERITY[f.severity], -ACTION_RANK[f.verdict]))
    actions = list(dict.fromkeys(f.action for f in ordered))
    if device is not None:
        actions = [a.replace("<gpu>", str(device.index)) for a in actions]
    listing = ", ".join(f"{description} ×{n}" for description, n in counts.items())
    unrecognised = [e.message for g, _ in judged for e in g if e.kind == UNRECOGNISED_KIND]
    if unrecognised:  # the first few lines only: a flood of one wording is one line in the checklist
        text = unrecognised[0]
        listing += f" (first unrecognised line: {text[:160]}{'…' if len(text) > 160 else ''})"
        observed["unrecognised_lines"] = [m[:300] for m in unrecognised[:SHOWN_UNRECOGNISED]]
    listing += f" ({notes})" if notes else ""
    result = verdict(check_id, worst, device, f"{where}: {len(findings)} driver error event(s) since boot: {listing}",
                     observed=observed, expected="no driver error events", remediation=" ".join(actions))
    decisive = _worst(findings)
    return with_verdict(result, strongest([f.verdict for f in findings]), decisive.fault_code)


def per_gpu(snapshot: NodeSnapshot, check_id: str, vendor: Vendor, events: list[KernelEvent], finding: FindingOf,
            repeats: Optional[Repeats] = None) -> list[CheckResult]:
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
    results = [judge_events(check_id, d, d.label, by_device.get(d.index, []), finding, log, repeats, d.pci_bus_id,
                            unreadable=unreadable_for(log, d.pci_bus_id)) for d in devices]
    # Unreadable lines that name a GPU not in the inventory, or none: node-level, never spread over the GPUs.
    if scoped_unreadable(log):
        known = {d.pci_bus_id for d in physical_devices(snapshot)}
        for bus_id in log.unreadable_gpus:
            if bus_id not in known:
                elsewhere.setdefault(bus_id, [])
        if unreadable_for(log, None).lines:
            elsewhere.setdefault(None, [])
    for bus_id, orphaned in elsewhere.items():
        where = f"GPU at {bus_id} (not in the inventory)" if bus_id else "a GPU the log line does not name"
        if orphaned and all(e.kind in PCIE_SLOT_EVENT_KINDS for e in orphaned):
            where = f"PCIe slot below port {bus_id} (no GPU on the bus is known below it)"
        results.append(judge_events(check_id, None, where, orphaned, finding, log, repeats, bus_id,
                                    observed_extra={"pci_bus_id": bus_id},
                                    unreadable=unreadable_for(log, bus_id)))
    return results


def slot_events(snapshot: NodeSnapshot, vendor: Vendor) -> list[KernelEvent]:
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


def slot_finding(event: KernelEvent) -> Finding:
    if event.vendor is None:  # no GPU known below the port
        return Finding(Status.WARN, "PCIe hot-plug slot lost its "
                                    f"{'link' if event.kind == 'slot_link_down' else 'card'}",
                       "A hot-plug slot lost its link or card. If it held a GPU, that GPU has fallen off the bus: "
                       "see inventory.* for the GPU that is missing, drain the node and power-cycle it.",
                       "watch", "GPUDIAG-PCIE-SLOT-LOST")
    return Finding(Status.FAIL, _SLOT_LOST[event.kind], _SLOT_ACTION, "reboot", "GPUDIAG-PCIE-SLOT-LOST")


# Native PCIe AER records (gpudiag/probe/kernel_log/aer.py; the checks import no probe module, a test keeps the two
# in step), placed on the GPUs at or below the bus ID they name (amdgpu.port_events), issue 32, item 6.
AER_EVENT_KINDS = ("aer_fatal", "aer_recovery_failed", "aer_surprise_down")
_AER_ACTION = ("The kernel's AER driver saw a fatal PCIe error on the GPU's link or a bridge above it: the GPU is "
               "likely gone until a power cycle. Drain the node and cold-boot it; check pcie.aer, reseat the GPU and "
               "its riser/retimer; RMA what fails again.")
AER_FINDINGS = {
    "aer_fatal": Finding(Status.FAIL, "fatal PCIe error on the GPU's link (AER)", _AER_ACTION, "reboot",
                         "GPUDIAG-PCIE-AER-FATAL"),
    "aer_recovery_failed": Finding(Status.FAIL, "PCIe error recovery failed above the GPU (AER)", _AER_ACTION,
                                   "reboot", "GPUDIAG-PCIE-AER-RECOVERY-FAILED"),
    "aer_surprise_down": Finding(Status.FAIL, "PCIe Surprise Down: the GPU's link went down (AER)", _AER_ACTION,
                                 "reboot", "GPUDIAG-PCIE-AER-SURPRISE-DOWN"),
}


# An error-level driver record no rule names (gpudiag/probe/kernel_log/events.py UNRECOGNISED_KIND): a warning that
# shows its first lines, so that a new wording reaches the checklist (issue 32, item 7).
UNRECOGNISED_KIND = "driver_error"
SHOWN_UNRECOGNISED = 3
UNRECOGNISED = Finding(
    Status.WARN, "unrecognised driver error",
    "The driver logged an error-level record gpudiag has no rule for (the line is in the message and "
    "observed.unrecognised_lines): read it with `dmesg -T -l err`, judge the GPU by hand, and report the wording so "
    "that a rule can name it.", "watch", "GPUDIAG-KERNEL-LOG-UNRECOGNISED")


def aer_finding(event: KernelEvent) -> Finding:
    found = AER_FINDINGS[event.kind]
    return found._replace(description=f"{found.description}: {event.decoded}") if event.decoded else found


def applies(snapshot: NodeSnapshot, vendor: Vendor, events: list[KernelEvent]) -> bool:
    return vendor in vendors_present(snapshot) or bool(events)
