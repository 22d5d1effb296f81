"""network.nics, network.rate, network.firmware: the node's RDMA NICs are there, their ports are up at the rate they
should train at, and NICs of one board run one firmware.

An HGX H100/H200 node carries eight 400 Gb/s ConnectX-7, one per GPU; when one port trains at 200 Gb/s or stays
down, every job that spans nodes runs at that node's pace. What a port must be comes from the profile
(gpudiag/expect/network_settings.py) or, without one, from its siblings: a port down or slow beside ports of the
same model that are up at full rate fails; a port no sibling has up either (an unused second port) is not judged.
Sources of the files and their formats: docs/network.md.

The family's declaration ends this module: its checks (these, counters.py's, affinity.py's network.gpudirect and
driver.py's network.driver_errors, which declares its own rows), verdict rows, reference text, settings and probe parts.
topology.gpu_nic_affinity is judged in affinity.py, but the topology family declares it (checks/topology.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Optional

from gpudiag.checks.common import Check, failed, passed, skipped, unknown, warned
from gpudiag.checks.family import Family
from gpudiag.checks.network import affinity as network_affinity, counters as network_counters, driver as nic_driver
from gpudiag.checks.network.common import (ERRORS, FIRMWARE, FLAPS, GPUDIRECT, NICS, RATE, UNLOCATED_ADVICE, board_of,
                                           confirm, each_fabric_port, error_text, errors_of, fabric_nics, ident,
                                           label, located_text, model_of, not_collected, not_read, pci_id, unlocated,
                                           unreadable)
from gpudiag.expect.network_settings import NetworkSettings, settings_of
from gpudiag.model import CheckResult, NodeSnapshot, Status
from gpudiag.model.network import RdmaDevice, RdmaPort

_UP = ("ACTIVE", "ACTIVE_DEFER")


def _is_up(port: RdmaPort) -> bool:
    return port.state in _UP and port.phys_state == "LinkUp"


def _profile_names_ports(settings: NetworkSettings) -> bool:
    """Whether the profile says which NICs and ports carry the GPU fabric (then every such port must be up)."""
    return bool(settings.expected_nics or settings.expected_nic_ports or settings.nic_pci_ids)


# -- network.nics -----------------------------------------------------------------------------------------------


def _count(fabric: list[RdmaDevice], others: list[RdmaDevice], settings: NetworkSettings,
           incomplete: Optional[str], unlocated_ones: list[RdmaDevice]) -> CheckResult:
    expected = settings.expected_nics
    which = f" ({', '.join(settings.nic_pci_ids)})" if settings.nic_pci_ids else ""
    observed = {"fabric_nics": [d.name for d in fabric], "other_rdma_devices": [d.name for d in others],
                "models": dict(Counter(model_of(d) for d in fabric))}
    wanted = f"at least {expected} fabric NICs{which}"
    if len(fabric) >= expected:
        return passed(NICS, None, f"{len(fabric)} fabric NICs{which}, {expected} expected", observed=observed,
                      expected=wanted)
    if incomplete:
        return unknown(NICS, None, f"{len(fabric)} fabric NICs read of {expected} expected, and the read was cut "
                                   f"short ({incomplete})", observed=observed, expected=wanted,
                       remediation="Re-run with a longer --timeout to read every RDMA device.")
    nowhere = [d for d in unlocated_ones if d not in fabric]
    if nowhere:  # their PCI IDs are unknown: they may be the missing fabric NICs
        return unknown(NICS, None, f"{len(fabric)} fabric NICs{which} of {expected} expected, and the PCI function "
                                   f"of {located_text(nowhere)}: they may be the missing ones",
                       observed={**observed, "unlocated": {d.name: d.pci_unreadable for d in nowhere}},
                       expected=wanted, remediation=UNLOCATED_ADVICE)
    return failed(NICS, None, f"{len(fabric)} fabric NICs{which} of {expected} expected", observed=observed,
                  expected=wanted,
                  remediation=("A NIC is missing from /sys/class/infiniband: compare `lspci -nn | grep -i -e "
                               "infiniband -e ethernet -e mellanox` with `ls /sys/class/infiniband`. On the bus but "
                               "not registered: its RDMA driver did not bind (`dmesg | grep -e mlx5 -e bnxt -e "
                               "ionic`; reload it or update its firmware). Not on the bus: reseat the NIC or its "
                               "riser/cable, check its slot's power and BIOS setting; a NIC that stays gone is an "
                               "RMA case."))


def _down(device: RdmaDevice, port: RdmaPort, siblings_up: bool, required: bool) -> CheckResult:
    observed = {**ident(device, port), "state": port.state, "phys_state": port.phys_state,
                "link_layer": port.link_layer}
    if port.netdev is not None:
        observed.update(netdev=port.netdev.name, operstate=port.netdev.operstate)
    expected = "state ACTIVE, phys_state LinkUp"
    where = label(device, port)
    if port.phys_state == "LinkUp":  # the wire is up: the fabric has not configured the port
        what = f"{where} has a physical link but is {port.state} (not ACTIVE)"
        advice = ("The link trained but the port was not brought up: on InfiniBand the subnet manager has not "
                  "configured it (check opensm/UFM is running and sees this port: `sminfo`, `ibstat`'s SM lid); on "
                  "RoCE the interface is down (`ip link set {if} up`).").replace(
            "{if}", port.netdev.name if port.netdev else "<interface>")
    elif port.phys_state == "Disabled":
        what = f"{where} is disabled (phys_state Disabled)"
        advice = ("The port was disabled (by an operator, the NIC or the switch): enable it on the switch and on the "
                  "host (`ibportstate <lid> <port> enable` on InfiniBand, `ip link set <if> up` on RoCE), then look "
                  "at why it was disabled (the switch's port log, a cable the switch rejected).")
    else:
        what = f"{where} has no link (state {port.state}, phys_state {port.phys_state})"
        advice = ("No link with the switch: the suspects are the cable, the optic (transceiver) and the switch port. "
                  "Check the switch port is up and enabled, reseat the cable at both ends, then swap the cable or "
                  "optic with a known-good one; `mlxlink -d <bdf> -m` (mlx5) shows the module and what it sees.")
    remediation = f"{advice} Confirm with {confirm(device, port)}."
    if required:
        return failed(NICS, None, what, observed=observed, expected=expected, remediation=remediation)
    if siblings_up:
        return failed(NICS, None, f"{what}, while the same port of its sibling {model_of(device)} NICs is up",
                      observed=observed, expected=expected, remediation=remediation)
    return warned(NICS, None, f"{what}, and no port of it is up", observed=observed, expected=expected,
                  remediation=f"If this NIC is meant to carry traffic: {remediation} If it is unused, name the fabric "
                              f"NICs in the profile (nic_pci_ids) so that it is not judged.")


def _judge_nic(device: RdmaDevice, fabric: list[RdmaDevice], settings: NetworkSettings) -> list[CheckResult]:
    required_ports = settings.expected_nic_ports or tuple(p.number for p in device.ports)
    if not device.ports:
        errors = errors_of(device, "ports")
        if errors:
            return [unreadable(NICS, f"the ports of {label(device)}", errors, ident(device))]
        if settings.expected_nic_ports:
            required_ports = settings.expected_nic_ports
        else:
            return [unknown(NICS, None, f"{label(device)} lists no port", observed=ident(device),
                            expected="at least one port",
                            remediation=f"Look at /sys/class/infiniband/{device.name}/ports and the kernel log: an "
                                        f"RDMA device without ports did not finish registering.")]
    by_number = {p.number: p for p in device.ports}
    siblings = [d for d in fabric if d is not device and pci_id(d) == pci_id(device)]
    results = []
    for number in required_ports:
        port = by_number.get(number)
        if port is None:
            results.append(failed(NICS, None, f"{label(device)} has no port {number}",
                                  observed={**ident(device), "ports": sorted(by_number)},
                                  expected=f"port {number} present",
                                  remediation=f"The profile expects port {number} on each fabric NIC: check that "
                                              f"this is the NIC model it names (and its port mode: `mlxconfig -d "
                                              f"<bdf> q`), or fix expected_nic_ports."))
            continue
        if port.state is None or port.phys_state is None:
            errors = errors_of(device, f"ports/{number}/")
            results.append(unreadable(NICS, f"the state of {label(device, port)}", errors, ident(device, port)))
            continue
        if _is_up(port):
            results.append(_up(device, port, settings))
            continue
        siblings_up = any(_is_up(p) for d in siblings for p in d.ports if p.number == number)
        any_up = any(_is_up(p) for p in device.ports)
        if not _profile_names_ports(settings) and not siblings_up and any_up:
            results.append(skipped(NICS, None, f"{label(device, port)} is {port.state}, as on every sibling: an "
                                               f"unused port (name the ports in the profile, expected_nic_ports, "
                                               f"to judge it)"))
            continue
        results.append(_down(device, port, siblings_up, _profile_names_ports(settings)))
    return results


def _up(device: RdmaDevice, port: RdmaPort, settings: NetworkSettings) -> CheckResult:
    observed = {**ident(device, port), "state": port.state, "phys_state": port.phys_state,
                "link_layer": port.link_layer}
    layer = settings.expected_nic_link_layer
    if layer is not None and port.link_layer != layer:
        return failed(NICS, None, f"{label(device, port)} runs {port.link_layer}, the profile expects {layer}",
                      observed=observed, expected=f"ACTIVE, LinkUp, {layer}",
                      remediation=(f"The port's link type is set in the NIC's firmware: on mlx5 `mlxconfig -d "
                                   f"{device.pci_bus_id or '<bdf>'} set LINK_TYPE_P{port.number}="
                                   f"{1 if layer == 'InfiniBand' else 2}` and a firmware reset or reboot; or fix "
                                   f"expected_nic_link_layer in the profile."))
    if port.netdev is not None and port.netdev.operstate is None:  # gone from /sys/class/net, or unreadable
        name = port.netdev.name
        errors = errors_of(device, f"/sys/class/net/{name}")
        why = errors[0].message if errors else f"/sys/class/net/{name}/operstate is absent"
        return unknown(NICS, None, f"{label(device, port)} is ACTIVE but the state of its interface {name} cannot be "
                                   f"read ({why}): the port is not taken as up",
                       observed={**observed, "netdev": name, "errors": error_text(errors)},
                       expected="the RoCE port's interface readable and up",
                       remediation=(f"Look for the interface: `ip -br link` and `rdma link show {device.name}/"
                                    f"{port.number}` (its netdev). One renamed or removed after the RDMA device "
                                    f"registered (udev, a bond taking it) leaves the port without traffic; a container "
                                    f"without the host's /sys/class/net cannot see it (run gpudiag on the host)."))
    if port.netdev is not None and port.netdev.operstate != "up":
        return failed(NICS, None, f"{label(device, port)} is ACTIVE but its interface {port.netdev.name} is "
                                  f"{port.netdev.operstate}", observed={**observed, "operstate": port.netdev.operstate},
                      expected="the RoCE port's interface up",
                      remediation=f"Bring the interface up (`ip link set {port.netdev.name} up`) and check its "
                                  f"network configuration; RoCE traffic needs it. Confirm with "
                                  f"{confirm(device, port)}.")
    return passed(NICS, None, f"{label(device, port)}: ACTIVE, LinkUp ({port.link_layer})", observed=observed,
                  expected="state ACTIVE, phys_state LinkUp")


def nics(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    early = not_collected(NICS, snapshot, settings, judges_count=True)
    if early is not None:
        return early
    info = snapshot.network
    fabric, others = fabric_nics(info, settings)
    results = []
    if settings.expected_nics:
        results.append(_count(fabric, others, settings, info.incomplete, unlocated(info)))
    elif not fabric:
        results.append(skipped(NICS, None, f"none of the {len(others)} RDMA devices is a fabric NIC "
                                           f"({', '.join(settings.nic_pci_ids)}): nothing to judge"))
    for device in fabric:
        results += _judge_nic(device, fabric, settings)
    return results + not_read(NICS, info)


# -- network.rate -----------------------------------------------------------------------------------------------


def _sibling_rate(device: RdmaDevice, fabric: list[RdmaDevice], port: RdmaPort) -> tuple[Optional[float], int]:
    """The fastest up port of the same model and link layer on this node, and how many such ports there are."""
    rates = [p.rate_gbps for d in fabric if pci_id(d) == pci_id(device) for p in d.ports
             if _is_up(p) and p.link_layer == port.link_layer and p.rate_gbps is not None]
    return (max(rates) if rates else None), len(rates)


def _judge_rate(device: RdmaDevice, port: RdmaPort, fabric: list[RdmaDevice],
                settings: NetworkSettings) -> CheckResult:
    where = label(device, port)
    if not _is_up(port):
        return skipped(RATE, None, f"{where} is not up ({port.state}): no rate to judge (network.nics judges it)")
    if port.rate_gbps is None:
        errors = errors_of(device, f"ports/{port.number}/rate")
        if errors:
            return unreadable(RATE, f"the rate of {where}", errors, ident(device, port))
        return unknown(RATE, None, f"{where} is up but reports no rate", observed=ident(device, port),
                       expected="a rate in /sys/class/infiniband/.../rate",
                       remediation=f"Read it with {confirm(device, port)}; report the file's content to gpudiag.")
    observed = {**ident(device, port), "rate": port.rate_text, "rate_gbps": port.rate_gbps, "width": port.width,
                "speed": port.speed}
    if port.netdev is not None and port.netdev.speed_mbps is not None:
        observed["netdev_speed_mbps"] = port.netdev.speed_mbps
    target, peers = settings.expected_nic_rate_gbps, 0
    source = "the profile"
    if target is None:
        target, peers = _sibling_rate(device, fabric, port)
        source = f"the fastest of its {peers} sibling {model_of(device)} ports"
        if peers < 2:
            return skipped(RATE, None, f"{where} at {port.rate_text}: no expected rate (expected_nic_rate_gbps) "
                                       f"and no sibling of its model to compare with")
    expected = f"at least {target:g} Gb/s ({source})"
    if port.rate_gbps >= target:
        return passed(RATE, None, f"{where} at {port.rate_text}", observed=observed, expected=expected)
    lanes = ""
    if port.width_lanes is not None and port.width_lanes < 4 and port.rate_gbps * 4 / port.width_lanes >= target:
        lanes = f": {port.width_lanes} of 4 lanes trained"  # the per-lane speed is right, lanes are missing
    return failed(RATE, None, f"{where} trained at {port.rate_text}, {expected}{lanes}", observed=observed,
                  expected=expected,
                  remediation=(f"A port below its rate slows every job that crosses it to its pace. The suspects are "
                               f"the cable or optic (a lane that does not train: reseat both ends, clean or swap "
                               f"them) and the switch port (its speed setting, a port forced to a lower rate, or "
                               f"its own fault: try another switch port). `mlxlink -d {device.pci_bus_id or '<bdf>'} "
                               f"--show_module --show_eye` (mlx5) shows per-lane state. Confirm with "
                               f"{confirm(device, port)} (Rate) after the fix."))


def rate(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    return each_fabric_port(RATE, snapshot, settings, lambda d, p, fabric: _judge_rate(d, p, fabric, settings))


# -- network.firmware -------------------------------------------------------------------------------------------


def _update_advice(device: RdmaDevice) -> str:
    bdf = device.pci_bus_id or "<bdf>"
    if (device.vendor_id or "") == "0x15b3":
        return (f"Flash the firmware its siblings run from the system vendor's bundle (`mlxfwmanager -d {bdf} "
                f"--query` shows it; `mlxfwmanager -u` updates), then reset the NIC's firmware (`mlxfwreset -d {bdf} "
                f"reset`) or reboot.")
    if (device.vendor_id or "") == "0x14e4":
        return (f"Flash the firmware its siblings run with Broadcom's niccli (`niccli -dev {bdf} install "
                f"<package>`), then reboot.")
    return "Flash the firmware its siblings run with the NIC vendor's tool, then reboot."


def _firmware_group(board: str, devices: list[RdmaDevice], must: Optional[str], model: str) -> list[CheckResult]:
    """One board's NICs: against the profile's version where it names one, else against each other."""
    name = board if model in (board, "unknown model") else f"{model} ({board})"
    versions = {d.name: d.fw_ver for d in devices if d.fw_ver is not None}
    results = []
    for device in devices:
        if device.fw_ver is None:
            errors = errors_of(device, "fw_ver")
            results.append(unreadable(FIRMWARE, f"the firmware version of {label(device)}", errors, ident(device))
                           if errors else skipped(FIRMWARE, None, f"{label(device)} reports no firmware version"))
    if not versions:
        return results
    counts = Counter(versions.values())
    observed = {"board": board, "versions": {v: sorted(n for n, x in versions.items() if x == v) for v in counts}}
    if must is not None:
        wrong = [d for d in devices if d.fw_ver is not None and d.fw_ver != must]
        for device in wrong:
            results.append(failed(FIRMWARE, None, f"{label(device)} runs firmware {device.fw_ver}, the profile "
                                                  f"expects {must} for {name}",
                                  observed={**ident(device), "fw_ver": device.fw_ver, **observed},
                                  expected=f"{must} on every {name} NIC", remediation=_update_advice(device)))
        if not wrong:
            results.append(passed(FIRMWARE, None, f"{len(versions)} {name} NIC(s) run firmware {must}",
                                  observed=observed, expected=f"{must} on every {name} NIC"))
        return results
    if len(counts) == 1:
        return results + [passed(FIRMWARE, None, f"{len(versions)} {name} NIC(s) run one firmware, "
                                                 f"{next(iter(counts))}", observed=observed,
                                 expected=f"one firmware version per board ({board})")]
    ranked = counts.most_common()
    majority = ranked[0][0] if ranked[0][1] > ranked[1][1] else None
    for device in devices:
        if device.fw_ver is None or device.fw_ver == majority:
            continue
        peers = (f"{counts[majority]} of its {len(versions)} {name} siblings run {majority}" if majority
                 else f"its {len(versions)} {name} siblings are split: " + ", ".join(f"{v} on {c}" for v, c in ranked))
        results.append(warned(FIRMWARE, None, f"{label(device)} runs firmware {device.fw_ver}; {peers}",
                              observed={**ident(device), "fw_ver": device.fw_ver, **observed},
                              expected=f"one firmware version per board ({board})",
                              remediation=_update_advice(device)))
    return results


def firmware(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    early = not_collected(FIRMWARE, snapshot, settings)
    if early is not None:
        return early
    groups: dict[str, list[RdmaDevice]] = defaultdict(list)
    for device in snapshot.network.devices:
        groups[board_of(device)].append(device)
    must = settings.firmware()
    return [r for board, devices in sorted(groups.items())
            for r in _firmware_group(board, devices, must.get(board), model_of(devices[0]))] + \
        not_read(FIRMWARE, snapshot.network)


CHECKS = (
    Check(NICS, nics, "the RDMA NICs the profile expects are there and their ports ACTIVE / LinkUp"),
    Check(RATE, rate, "each up NIC port trained at its expected rate (the profile's, or its siblings')"),
    Check(FIRMWARE, firmware, "NICs of one board run one firmware version (and the profile's, where it names one)"),
)

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN
_UNREADABLE = ("watch", "GPUDIAG-NETWORK-UNREADABLE")
# A NIC that is missing, down or slow keeps jobs that span nodes from running at the pace of the rest: drain. Counts
# and firmware are watched. Fault codes are part of the JSON contract: never rename one.
_VERDICTS = {
    NICS: {F: ("drain", "GPUDIAG-NETWORK-NIC-DOWN"), W: ("watch", "GPUDIAG-NETWORK-NIC-DOWN"), U: _UNREADABLE},
    RATE: {F: ("drain", "GPUDIAG-NETWORK-RATE-DEGRADED"), U: _UNREADABLE},
    ERRORS: {F: ("drain", "GPUDIAG-NETWORK-LINK-ERRORS"), W: ("watch", "GPUDIAG-NETWORK-LINK-ERRORS"), U: _UNREADABLE},
    FLAPS: {F: ("drain", "GPUDIAG-NETWORK-LINK-FLAPPING"), W: ("watch", "GPUDIAG-NETWORK-LINK-FLAP"),
            U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
    FIRMWARE: {F: ("drain", "GPUDIAG-NETWORK-FIRMWARE-UNEXPECTED"), W: ("watch", "GPUDIAG-NETWORK-FIRMWARE-MISMATCH"),
               U: _UNREADABLE},
    GPUDIRECT: {F: ("drain", "GPUDIAG-NETWORK-GPUDIRECT-UNAVAILABLE"), W: ("watch", "GPUDIAG-NETWORK-ACS-REDIRECT"),
                U: _UNREADABLE},
}
_REFERENCE = {
    NICS: ("the RDMA devices under /sys/class/infiniband (the fabric NICs: nic_pci_ids), each port's state and "
           "phys_state, a RoCE port's netdev operstate",
           "A NIC missing: reseat it, check `lspci` and that mlx5_ib / bnxt_re / ionic is loaded. A port down: "
           "Polling is the cable, optic or switch port (check the switch port, reseat or swap the cable / optic); "
           "INIT / ARMED is no subnet manager: drain until it is up. `ibstat` / `ibv_devinfo` show each port's "
           "state after the fix."),
    RATE: ("each up port's rate and width (ports/N/rate) against expected_nic_rate_gbps or its siblings'",
           "A port below its rate (400G at 200G: lanes lost): reseat or replace the cable / optic, then the "
           "switch port; drain, since every job spanning nodes runs at the slowest port's pace. `ibstat` shows "
           "the rate and width the port trained at; `mlxlink -d <bdf>` (mlx5) the lanes and the module."),
    ERRORS: ("the ports' PortCounters and hw_counters, as rates since they were cleared and since the previous "
             "collection",
             "Rising symbol errors or link downs: clean or replace the cable / optic, check the switch port's "
             "counters (`perfquery` on InfiniBand); clear the counters after the fix so that new errors show."),
    FLAPS: ("the kernel log's NIC link-down records within nic_flap_window_seconds",
            "A flapping port: replace the cable / optic, check the switch port and its log; drain while it flaps. "
            "`dmesg -T | grep -i -e mlx5 -e bnxt -e ionic` shows the link-down records."),
    FIRMWARE: ("each NIC's fw_ver, per board (PSID) against its siblings and expected_nic_firmware",
               "Update the odd NIC to the fleet's firmware (mlxfwmanager / mstflint, bnxtnvm, the vendor's tool) and "
               "reset it or reboot."),
    GPUDIRECT: ("the peer-memory module (nvidia_peermem) or dma-buf support, and ACS redirect on the bridges "
                "between each GPU and its NIC",
                "Load nvidia_peermem (`modprobe nvidia_peermem`, and at boot) or use the open kernel modules with "
                "dma-buf; on AMD, the ROCm peer-memory path. Disable ACS redirect on the switches between GPU and "
                "NIC (BIOS, or setpci on bare metal)."),
}
_FABRIC = ("nic_pci_ids",)
_SETTINGS = {
    NICS: _FABRIC + ("expected_nics", "expected_nic_ports", "expected_nic_link_layer"),
    RATE: _FABRIC + ("expected_nics", "expected_nic_rate_gbps"),
    ERRORS: _FABRIC + ("expected_nics", "nic_symbol_error_warn_per_hour", "nic_symbol_error_fail_per_second",
                       "nic_link_error_recovery_warn_per_minute", "nic_port_rcv_errors_warn_per_second",
                       "nic_port_xmit_discards_warn_per_second"),
    FLAPS: _FABRIC + ("expected_nics", "nic_flap_window_seconds", "nic_flap_fail_count"),
    FIRMWARE: _FABRIC + ("expected_nics", "expected_nic_firmware"),
    GPUDIRECT: _FABRIC + ("expected_nics", "gpudirect_path", "gpu_nic_pairs"),
}
FAMILY = Family(
    "network", order=75, checks=CHECKS + network_counters.CHECKS + network_affinity.CHECKS + nic_driver.CHECKS,
    verdicts={**_VERDICTS, **nic_driver.VERDICTS}, reference={**_REFERENCE, **nic_driver.REFERENCE}, settings=_SETTINGS,
    # network.flaps and network.driver_errors read the kernel log's NIC records
    probe_parts={"network": ("network.",), "kernel_log": ("network.flaps", "network.driver_errors")},
    note="The RDMA NICs beside the GPUs (InfiniBand / RoCE): docs/network.md.",
)
