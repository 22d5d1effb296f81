"""network.driver_errors: what the NIC drivers themselves say went wrong, from their kernel-log records (issue 32, items
6 and 7): a NIC the driver could not take, the faults they report in words a rule names, and an error-level record no
rule names.

- A probe failure (probe/network/kernel_log.py "nic_probe_failed": mlx5's `mlx5_load_one failed`, `handle_hca_cap
  failed`, the driver core's `probe of <bus> failed with error -N`) fails the NIC it names: the driver unwound all it
  had set up (mlx5/core/main.c init_one's error path), so the NIC has no netdev and no RDMA device and carries nothing
  — the network.* checks that read /sys/class/infiniband cannot even see it. Where the NIC is registered now (an RDMA
  device on that PCI function: the driver took it later, a rebind or a recovery) the old failure only warns.
- A fault the driver reports (health poll missed, a health syndrome at an error severity, PCI slot unavailable, a
  command timeout, a cable/module error, a fatal firmware reset, too little slot power: _FAULTS) warns: the record is of
  the past, and whether the NIC works now is network.nics's.
- A NIC driver's record at the error level or worse, by the record's own level, that no rule names ("nic_driver_error")
  warns "unrecognised NIC driver error" with its line: the next new wording shows in the checklist. The probe keeps
  at most gpudiag/probe/kernel_log/events.py MAX_UNRECOGNISED such records per scan (shared with the GPU drivers').

A record's origin is the record's own (events.py): only a kernel record whose message starts with the NIC driver's
prefix is read, never text inside another record or a user-space write. Results are node-level (a NIC is no GPU),
one per PCI function the records name (`observed.pci_bus_id`), one for records that name none; every NIC a driver
logged for is judged, fabric or not, since a NIC that failed to probe has no PCI ID the profile's nic_pci_ids could
be matched with.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import Check, failed, passed, skipped, unknown, warned
from gpudiag.checks.network.common import label, not_collected
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect.network_settings import settings_of
from gpudiag.model import CheckResult, KernelEvent, NodeSnapshot, Status
from gpudiag.model.network import RdmaDevice

DRIVER_ERRORS = "network.driver_errors"
_PROBE_FAILED, _UNRECOGNISED = "nic_probe_failed", "nic_driver_error"
# The faults the NIC drivers report in words a rule names (probe/network/kernel_log.py, docs/network.md cites each):
# events of the past, each a warning here; whether the NIC works now is network.nics's (its ports' state). Left out on
# purpose: link and module plug events (network.flaps), command failures (mlx5_cmd_out_err: a restricted PF refuses
# register reads all day, GPUd issue 1164), the PCIe bandwidth line (printed at the info level for any NIC in a
# narrower slot) and a non-fatal firmware reset (bnxt's planned ones, a firmware update).
_FAULTS = {
    "nic_health_compromised": "its firmware stopped answering the health poll (mlx5 poll_health: error state)",
    "nic_health_syndrome": "a firmware health syndrome at an error severity",
    "nic_pci_unavailable": "its PCI slot unavailable (mlx5 health)",
    "nic_command_timeout": "a firmware command that timed out",
    "nic_module_error": "a cable or module error",
    "nic_firmware_reset": "a fatal firmware reset",
    "nic_pcie_power_insufficient": "insufficient power on its PCIe slot",
}


def _fault(event: KernelEvent) -> bool:
    if event.kind == "nic_health_syndrome":  # print_health_info's severity is a syslog level: error (3) or worse
        return event.code is not None and event.code <= 3
    if event.kind == "nic_firmware_reset":
        return event.detail == "fatal"
    return event.kind in _FAULTS


_SHOWN = 3  # the first lines of a NIC's records in `observed`: a flood of one wording is one line in the checklist
_PROBE_CODE = "GPUDIAG-NETWORK-NIC-PROBE-FAILED"
_EXPECTED = "no NIC driver probe failure, fault or unrecognised error record"


def _registered(snapshot: NodeSnapshot, bus: Optional[str]) -> Optional[RdmaDevice]:
    """The RDMA device on that PCI function now, if the NICs were read and one is."""
    info = snapshot.network
    if bus is None or info is None or not info.readable:
        return None
    return next((d for d in info.devices if d.pci_bus_id == bus), None)


def _shown(text: str) -> str:
    return f"{text[:160]}{'…' if len(text) > 160 else ''}"


def _judge(bus: Optional[str], events: list[KernelEvent], snapshot: NodeSnapshot) -> CheckResult:
    device = _registered(snapshot, bus)
    where = label(device) if device is not None else (f"the NIC at {bus}" if bus else "a NIC driver (no device named)")
    probes = [e for e in events if e.kind == _PROBE_FAILED]
    others = [e for e in events if e.kind == _UNRECOGNISED]
    faults = [e for e in events if e.kind not in (_PROBE_FAILED, _UNRECOGNISED)]
    # `nic` names what a result is about (gpudiag/report/subject.py: a NIC, never "the GPU at" its bus): the RDMA device
    # where one is registered, else the driver whose records these are
    driver = events[0].message.split(" ", 1)[0].rstrip(":")
    observed = {"pci_bus_id": bus, "nic": device.name if device is not None else driver,
                "probe_failures": len(probes), "faults": len(faults), "unrecognised_errors": len(others),
                "records": [e.message[:300] for e in (probes or faults or others)[:_SHOWN]]}
    if others:
        observed["unrecognised_lines"] = [e.message[:300] for e in others[:_SHOWN]]
    cmd = f"`dmesg -T | grep -e '{bus}'`" if bus else "`dmesg -T -l err | grep -e mlx5 -e bnxt -e ionic`"
    if probes:
        steps = sorted({p.detail for p in probes if p.detail})
        errno = next((p.code for p in probes if p.code is not None), None)
        what = (f"{where}: its driver failed to take it ({', '.join(steps)} failed"
                f"{f' with error -{errno}' if errno is not None else ''}): {_shown(probes[0].message)}")
        bdf = bus or "<bdf>"
        advice = (f"A NIC whose probe failed has no driver: no interface, no RDMA device, no traffic. Read the records "
                  f"around it ({cmd}): error -22 in handle_hca_cap is a firmware the driver cannot configure (bring "
                  f"the NIC's firmware to the one the driver's release names: on mlx5 `mlxfwmanager -d {bdf} "
                  f"--query`), -12 or -28 the host out of memory or interrupt vectors, a wait for the firmware that "
                  f"timed out a NIC that did not come up (`mlxfwreset -d {bdf} reset`, or power-cycle the node). "
                  f"Rebind it after the fix (`echo {bdf} > /sys/bus/pci/drivers/{driver}/bind`); one that keeps "
                  f"failing on known-good firmware is an RMA case.")
        if device is not None:
            return with_verdict(warned(DRIVER_ERRORS, None, f"{what}; it is registered now ({device.name})",
                                       observed=observed, expected=_EXPECTED,
                                       remediation=f"The driver took the NIC later (a rebind or a recovery). {advice}"),
                                "watch", _PROBE_CODE)
        return failed(DRIVER_ERRORS, None, what, observed=observed, expected=_EXPECTED, remediation=advice)
    if faults:
        kinds = ", ".join(dict.fromkeys(_FAULTS[e.kind] for e in faults))
        return warned(DRIVER_ERRORS, None, f"{where}: its driver reported {kinds} ({len(faults)} record(s)): "
                                           f"{_shown(faults[0].message)}", observed=observed, expected=_EXPECTED,
                      remediation=(f"The records are of the past ({cmd}): check the NIC now with `ibstat`, `rdma link "
                                   f"show` and network.nics. A module error or too little slot power is the cable, "
                                   f"optic or slot (reseat, swap, check the riser's power); a health poll miss, a "
                                   f"command timeout or a fatal firmware reset is the NIC's firmware (`mlxfwmanager "
                                   f"-d {bus or '<bdf>'} --query`; update it, `mlxfwreset` or power-cycle if it "
                                   f"recurs); collect `devlink health show` (mlx5) before a reboot clears it."))
    return warned(DRIVER_ERRORS, None, f"{where}: unrecognised NIC driver error: {_shown(others[0].message)}",
                  observed=observed, expected=_EXPECTED,
                  remediation=(f"A NIC driver logged an error gpudiag has no rule for (observed.unrecognised_lines): "
                               f"read it with {cmd}, judge the NIC by hand (`ibstat`, `rdma link show`, "
                               f"`mlxlink -d <bdf>` on mlx5) and report the wording so that a rule can name it."))


def driver_errors(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    log = snapshot.kernel_log
    # A node without RDMA NICs (none registered, or none read) and without a NIC driver's record has nothing to judge:
    # the family's skip. With a record, the record is judged whatever sysfs shows (a NIC that failed has no RDMA device)
    early = not_collected(DRIVER_ERRORS, snapshot, settings_of(expect))
    nothing = early if early is not None and early[0].status == Status.SKIP else None
    if not log.readable:
        if nothing is not None or (log.source is None and log.error is None):
            return nothing or [skipped(DRIVER_ERRORS, None, "the kernel log was not read in this collection")]
        why = log.error.message if log.error is not None else "not readable"
        return [unknown(DRIVER_ERRORS, None, f"the kernel log could not be read ({why}): a NIC its driver could not "
                                             f"take cannot be seen", observed={"source": log.source, "error": why},
                        expected="the kernel log readable",
                        remediation="Run gpudiag as root or with CAP_SYSLOG (dmesg_restrict), or give it the log with "
                                    "--kernel-log FILE.")]
    by_bus: dict[Optional[str], list[KernelEvent]] = {}
    for event in log.nic_events:
        if event.kind in (_PROBE_FAILED, _UNRECOGNISED) or _fault(event):
            by_bus.setdefault(event.pci_bus_id, []).append(event)
    if not by_bus:
        return nothing or [passed(DRIVER_ERRORS, None, "no NIC driver probe failure or error record since boot",
                       observed={"pci_bus_id": None}, expected=_EXPECTED)]
    return [_judge(bus, events, snapshot) for bus, events in sorted(by_bus.items(), key=lambda i: i[0] or "")]


CHECKS = (Check(DRIVER_ERRORS, driver_errors, "no NIC driver failed to take its NIC, reported a fault or logged an "
                                              "error no rule names"),)
VERDICTS = {DRIVER_ERRORS: {Status.FAIL: ("drain", _PROBE_CODE),
                            Status.WARN: ("watch", "GPUDIAG-NETWORK-NIC-DRIVER-ERROR"),
                            Status.UNKNOWN: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")}}
REFERENCE = {DRIVER_ERRORS: (
    "the kernel log's NIC driver records (mlx5_core, bnxt_en, ionic): probe failures, the faults they report (health "
    "poll missed, health syndrome, slot unavailable, command timeout, module error, fatal firmware reset, slot power), "
    "and records at the error level (by their own level) that no rule names",
    "A probe failure: the NIC has no driver; fix its firmware (or the host's memory / IRQ shortage the error names), "
    "rebind or power-cycle, RMA a NIC that keeps failing. A fault: check the NIC now (`ibstat`), then its cable, slot "
    "or firmware as the record says. An unrecognised error: read it (`dmesg -T -l err`), judge the NIC by hand and "
    "report the wording.")}
