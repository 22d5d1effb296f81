"""network.errors and network.flaps: a NIC port's error counters as rates, and its link going down in the kernel log.

The counters are judged twice where they can be:
- since they were last cleared (boot, an HCA reset, `perfquery -R`): the count over the time since boot, the only
  figure a one-shot `gpudiag check` has. The denominator is the uptime, so a count older than this boot (counters
  not cleared at boot) reads as a higher rate, never a lower one;
- since the previous collection (NetworkInfo.previous, kept by a collector that reads again): the increase over the
  seconds between the two readings — the rate NVSentinel's NIC monitor judges (its defaults are the profile
  defaults: gpudiag/expect/network_settings.py).
The IBTA PortCounters are 4, 8 or 16 bits wide and stop at their top (docs/network.md): a counter there is "at
least" that, a rate from it a lower bound, and an increase past it cannot be seen; the result says so.

Flaps are the NIC drivers' link-down records in the kernel log (probe/network/kernel_log.py: mlx5e/bnxt/ionic "Link
down", ib_core's "Port: N Link DOWN") within the profile's window.
"""

from __future__ import annotations

from typing import Callable, Optional

from gpudiag.checks.common import Check, passed, skipped, unknown, verdict
from gpudiag.checks.fabric import uptime_seconds
from gpudiag.checks.network.common import (ERRORS, FLAPS, confirm, each_fabric_port, fabric_to_judge, ident, label,
                                           not_read, saturated)
from gpudiag.expect.network_settings import NetworkSettings, settings_of
from gpudiag.model import CheckResult, KernelEvent, NodeSnapshot, Status
from gpudiag.model.network import RdmaDevice, RdmaPort
from gpudiag.model.records import dataclass

_SEVERITY = {Status.PASS: 0, Status.WARN: 1, Status.UNKNOWN: 2, Status.FAIL: 3}


@dataclass(frozen=True)
class Rule:
    """How one counter is judged. `key` is its counters/ name, or "hw:<name>" for a hw_counter."""

    key: str
    what: str
    cause: str  # "phy" (the wire: cable, optic, switch port), "link" (the link went down), "flow" (credits,
    # congestion), "transport" (retries exhausted: a peer or path)
    fatal: bool = False  # any increase between two collections fails (NVSentinel: "Delta > 0")
    warn_per_second: Optional[Callable[[NetworkSettings], float]] = None
    fail_per_second: Optional[Callable[[NetworkSettings], float]] = None


# NVSentinel's NIC health monitor design (docs/nic-health-monitor/link-counter-detection.md, Appendix A) gives the
# fatal set and the rates; the hw_counters are mlx5's (drivers/infiniband/hw/mlx5/counters.c) and bnxt_re's
# (drivers/infiniband/hw/bnxt_re/hw_counters.c). local_ack_timeout_err's "> 1/sec" is NVSentinel's default, a
# constant here rather than a profile key.
RULES = (
    Rule("symbol_error", "symbol errors", "phy",
         warn_per_second=lambda s: s.nic_symbol_error_warn_per_hour / 3600.0,
         fail_per_second=lambda s: s.nic_symbol_error_fail_per_second),
    Rule("link_error_recovery", "link error recoveries (the link retrained)", "link",
         warn_per_second=lambda s: s.nic_link_error_recovery_warn_per_minute / 60.0),
    Rule("link_downed", "link downs", "link", fatal=True),
    Rule("port_rcv_errors", "receive errors", "phy", warn_per_second=lambda s: s.nic_port_rcv_errors_warn_per_second),
    Rule("port_rcv_remote_physical_errors", "receive errors from the remote end", "phy",
         warn_per_second=lambda s: s.nic_port_rcv_errors_warn_per_second),
    Rule("local_link_integrity_errors", "local link integrity errors", "phy", fatal=True),
    Rule("excessive_buffer_overrun_errors", "buffer overruns", "flow", fatal=True),
    Rule("port_xmit_discards", "transmit discards", "flow",
         warn_per_second=lambda s: s.nic_port_xmit_discards_warn_per_second),
    Rule("hw:rnr_nak_retry_err", "RNR NAK retries exhausted", "transport", fatal=True),
    Rule("hw:req_transport_retries_exceeded", "transport retries exhausted", "transport", fatal=True),
    Rule("hw:max_retry_exceeded", "retries exhausted", "transport", fatal=True),
    Rule("hw:local_ack_timeout_err", "local ACK timeouts", "transport", warn_per_second=lambda s: 1.0),
)
_ADVICE = {
    "phy": ("Errors on the wire: the suspects are the cable, the optic (transceiver) and the switch port. Reseat the "
            "cable at both ends, clean or swap the optic and cable with known-good ones, and look at the switch "
            "port's own counters; `mlxlink -d {bdf} -c` (mlx5) shows the BER and FEC counters per lane."),
    "link": ("The link went down or retrained: a cable or optic that loses contact, the switch port, or the switch "
             "rebooting. Reseat or swap the cable/optic and look at the switch's log for that port."),
    "flow": ("Packets were lost for want of buffer credits (InfiniBand) or PFC (RoCE): check the switch port's "
             "flow-control / QoS configuration and the link's health; on RoCE, PFC and ECN must be set on both the "
             "NIC and the switch."),
    "transport": ("Queue pairs gave up retrying: a peer that stopped answering, or a path with loss. Look at the "
                  "far end and the switches between, and at this port's link errors."),
}
_CLEAR = ("Once fixed, clear the port's counters so that new errors show (`perfquery -x -R -C {nic} -P {port}` on "
          "InfiniBand; a driver reload or reboot otherwise).")


def _value(port: RdmaPort, key: str) -> Optional[int]:
    if key.startswith("hw:"):
        return port.hw_counters.get(key[3:])
    return port.counters.get(key)


@dataclass
class Finding:
    """What a port's counters say: a status, its text, and the known cause on the wire (None: none known)."""
    status: Status
    text: str
    cause: Optional[str]  # a key of _ADVICE; None: nothing wrong on the wire is known (an unknown)
    advice: Optional[str] = None  # what to do about an unknown


_UNREAD_ADVICE = ("Read the counters named in `observed` by hand (`cat /sys/class/infiniband/{nic}/ports/{port}/"
                  "counters/*`): permission denied is a reader without rights (run gpudiag as root); an I/O error or "
                  "a value no kernel prints is a NIC whose driver or firmware stopped answering (`dmesg | grep -e "
                  "mlx5 -e bnxt -e ionic`; reset or reseat it).")
_CLOCK_ADVICE = ("Run gpudiag where the boot time is readable (/proc/stat btime), or from `gpudiag serve`, which "
                 "judges the rate between collections.")
MAX_NAMED = 3  # unreadable counters named in a message; the rest counted (all of them are in `observed`)


def _unread(port: RdmaPort) -> dict[str, str]:
    """The counters the rules judge that could not be read: "counters/<name>" (or the whole directory) → why."""
    found = {}
    for rule in RULES:
        directory = "hw_counters" if rule.key.startswith("hw:") else "counters"
        for key in (directory, f"{directory}/{rule.key.removeprefix('hw:')}"):
            if key in port.counters_unreadable:
                found[key] = port.counters_unreadable[key]
    return found


def _unread_finding(unread: dict[str, str]) -> Finding:
    named = [f"{key}{'/ could not be listed' if '/' not in key else ' could not be read'} ({why})"
             for key, why in list(unread.items())[:MAX_NAMED]]
    more = f"; and {len(unread) - MAX_NAMED} more counters" if len(unread) > MAX_NAMED else ""
    return Finding(Status.UNKNOWN, "; ".join(named) + more + ": their errors cannot be seen", None, _UNREAD_ADVICE)


def _rate_finding(rule: Rule, count: int, seconds: float, settings: NetworkSettings, since: str,
                  at_least: bool) -> Optional[Finding]:
    rate = count / seconds
    bound = "at least " if at_least else ""
    top = " (the counter's top: new ones cannot be seen)" if at_least else ""
    for status, threshold in ((Status.FAIL, rule.fail_per_second), (Status.WARN, rule.warn_per_second)):
        if threshold is not None and rate > threshold(settings):
            limit = threshold(settings)
            return Finding(status, f"{bound}{count:,} {rule.what}{top} {since} ({bound}{_per(rate)}, above "
                                   f"{_per(limit)})", rule.cause)
    return None


def _per(rate: float) -> str:
    """A rate in the unit that reads best: per second, minute or hour."""
    if rate >= 1:
        return f"{rate:.3g}/s"
    if rate * 60 >= 1:
        return f"{rate * 60:.3g}/min"
    return f"{rate * 3600:.3g}/h"


def _since_boot(rule: Rule, name: str, value: int, uptime: Optional[float],
                settings: NetworkSettings) -> Optional[Finding]:
    if value == 0:
        return None
    at_least = saturated(name, value)
    top = " (the counter's top)" if at_least else ""
    if rule.fatal:
        bound = "at least " if at_least else ""
        return Finding(Status.WARN, f"{bound}{value:,} {rule.what}{top} since the counters were cleared", rule.cause)
    if uptime is None or uptime <= 0:
        return Finding(Status.UNKNOWN, f"{value:,} {rule.what} since the counters were cleared, at a rate that "
                                       f"cannot be told (the time since boot is unknown)", rule.cause, _CLOCK_ADVICE)
    finding = _rate_finding(rule, value, uptime, settings, "since boot", at_least)
    if finding is None and at_least:
        return Finding(Status.WARN, f"{rule.what} at {value:,}, the counter's top: new ones cannot be seen",
                       rule.cause)
    return finding


def _since_previous(rule: Rule, name: str, value: int, before: Optional[int], seconds: float,
                    settings: NetworkSettings) -> Optional[Finding]:
    if before is None:
        return None
    if saturated(name, value) and saturated(name, before):
        return None  # stuck at its top: the since-boot finding says so
    increase = value - before if value >= before else value  # cleared in between: all of it is new
    if increase <= 0:
        return None
    since = f"in the {seconds:.0f} s since the last collection"
    if rule.fatal:
        return Finding(Status.FAIL, f"{increase:,} new {rule.what} {since}", rule.cause)
    return _rate_finding(rule, increase, seconds, settings, since, False)


def _judge_port(device: RdmaDevice, port: RdmaPort, snapshot: NodeSnapshot, settings: NetworkSettings) -> CheckResult:
    where = label(device, port)
    previous = snapshot.network.previous
    before = previous.of(device.name, port.number) if previous is not None else None
    uptime = uptime_seconds(snapshot)
    findings: list[Finding] = []
    read: dict[str, int] = {}
    for rule in RULES:
        value = _value(port, rule.key)
        if value is None:
            continue
        name = rule.key.removeprefix("hw:")
        read[rule.key] = value
        for finding in (_since_boot(rule, name, value, uptime, settings),
                        _since_previous(rule, name, value, before.get(rule.key) if before else None,
                                        previous.seconds_before if previous else 0.0, settings)):
            if finding is not None:
                findings.append(finding)
    carrier = _carrier_finding(port, before, previous.seconds_before if previous else 0.0)
    if carrier is not None:
        findings.append(carrier)
    unread = _unread(port)
    if unread:
        findings.append(_unread_finding(unread))
    elif not read:
        refused = port.counters_unsupported or port.hw_counters_unsupported
        if refused:
            return skipped(ERRORS, None, f"{where}: its error counters refuse to be read (a PF the firmware "
                                         f"restricts: {', '.join(refused[:4])})")
        return skipped(ERRORS, None, f"{where}: {device.driver or 'its driver'} exposes no link error counter in "
                                     f"sysfs (counters/ absent or empty)")
    observed = {**ident(device, port), "counters": read,
                "seconds_since_boot": None if uptime is None else round(uptime)}
    if unread:
        observed["unreadable"] = unread
    if previous is not None:
        observed["seconds_since_previous"] = round(previous.seconds_before, 1)
    expected = (f"no link downs, buffer overruns or integrity errors; symbol errors <= "
                f"{settings.nic_symbol_error_warn_per_hour:g}/h, link recoveries <= "
                f"{settings.nic_link_error_recovery_warn_per_minute:g}/min")
    if not findings:
        return passed(ERRORS, None, f"{where}: no link errors" + (" since the last collection" if before else ""),
                      observed=observed, expected=expected)
    status = max((f.status for f in findings), key=_SEVERITY.__getitem__)
    advice = [a.format(nic=device.name, port=port.number) for a in dict.fromkeys(f.advice for f in findings) if a]
    causes = [c for c in dict.fromkeys(f.cause for f in findings) if c]
    remediation = " ".join(advice + [_ADVICE[c].format(bdf=device.pci_bus_id or "<bdf>") for c in causes])
    if causes:
        remediation += f" Confirm with `perfquery -x -C {device.name} -P {port.number}` or `cat " \
                       f"/sys/class/infiniband/{device.name}/ports/{port.number}/counters/*`. " + \
                       _CLEAR.format(nic=device.name, port=port.number)
    message = f"{where}: " + "; ".join(f.text for f in findings)
    if status == Status.UNKNOWN:
        return unknown(ERRORS, None, message, observed=observed, expected=expected, remediation=remediation)
    return verdict(ERRORS, status, None, message, observed=observed, expected=expected, remediation=remediation)


def _carrier_finding(port: RdmaPort, before: Optional[dict], seconds: float) -> Optional[Finding]:
    """A RoCE port's netdev losing carrier between collections: NVSentinel's "carrier_changes > 2/interval" (each
    down-and-up is two changes; bring-up at boot counts too, so the count since boot is not judged)."""
    netdev = port.netdev
    if netdev is None or netdev.carrier_changes is None or before is None or "netdev:carrier_changes" not in before:
        return None
    increase = netdev.carrier_changes - before["netdev:carrier_changes"]
    if increase > 2:
        return Finding(Status.WARN, f"{netdev.name} changed carrier {increase} times in the {seconds:.0f} s since "
                                    f"the last collection", "link")
    return None


def errors(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    return each_fabric_port(ERRORS, snapshot, settings, lambda d, p, _fabric: _judge_port(d, p, snapshot, settings))


# -- network.flaps ----------------------------------------------------------------------------------------------


def _is_down(event: KernelEvent) -> bool:
    return event.kind == "nic_link_down" or (event.kind == "nic_port_state" and event.detail == "DOWN")


def _concerns(event: KernelEvent, device: RdmaDevice) -> bool:
    """The record names the NIC: its PCI function, the RDMA device, or one of its ports' netdevs."""
    if device.pci_bus_id is not None and event.pci_bus_id == device.pci_bus_id:
        return True
    names = {device.name} | {p.netdev.name for p in device.ports if p.netdev is not None}
    return event.decoded in names


def flaps(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    fabric, nothing = fabric_to_judge(FLAPS, snapshot, settings)
    if nothing is not None:
        return nothing
    log = snapshot.kernel_log
    if not log.readable:
        if log.source is None and log.error is None:
            return [skipped(FLAPS, None, "the kernel log was not read in this collection")]
        why = log.error.message if log.error is not None else "not readable"
        return [unknown(FLAPS, None, f"the kernel log could not be read ({why}): link flaps cannot be seen",
                               observed={"source": log.source, "error": why},
                               expected="the kernel log readable",
                               remediation="Run gpudiag as root or in the adm group (dmesg_restrict), or give it "
                                           "the log with --kernel-log FILE.")]
    uptime = uptime_seconds(snapshot)
    window = settings.nic_flap_window_seconds
    since = None if uptime is None else uptime - window
    downs = [e for e in log.nic_events if _is_down(e)
             and (since is None or e.timestamp_seconds is None or e.timestamp_seconds >= since)]
    span = f"in the last {window / 3600:g} h" if uptime is not None else "since boot (time since boot unknown)"
    results = []
    for device in fabric:
        mine = [e for e in downs if _concerns(e, device)]
        observed = {**ident(device), "link_downs": len(mine), "window_seconds": window,
                    "records": [e.message[:200] for e in mine[:5]]}
        expected = f"fewer than {settings.nic_flap_fail_count} link downs {span}, none to pass"
        if not mine:
            results.append(passed(FLAPS, None, f"{label(device)}: no link-down record {span}", observed=observed,
                                  expected=expected))
            continue
        status = Status.FAIL if len(mine) >= settings.nic_flap_fail_count else Status.WARN
        results.append(verdict(
            FLAPS, status, None, f"{label(device)}: its link went down {len(mine)} time(s) {span}",
            observed=observed, expected=expected,
            remediation=(f"A flapping link breaks the jobs that use it each time. {_ADVICE['link']} Look at the "
                         f"records (`dmesg -T | grep -e '{device.name}' -e '{device.pci_bus_id or device.name}'`) "
                         f"and the switch's log for the port. Confirm the port is up now with {confirm(device)}.")))
    return results + not_read(FLAPS, snapshot.network)


CHECKS = (
    Check(ERRORS, errors, "NIC port error counters (symbol errors, link downs, recoveries, overruns) below their "
                          "rates, since boot and since the last collection"),
    Check(FLAPS, flaps, "no NIC link went down in the kernel log within the window"),
)
