"""What the network checks share: which RDMA devices are the GPU fabric's NICs, how a NIC is named in a result, what a
check says when the NICs were not read or there are none. The family's declaration (verdict rows, reference text,
settings) ends family.py.

A NIC is not a GPU: its results are node-level (`device` None) and name the NIC, its PCI function and port in the
message and in `observed` ({"nic": "mlx5_3", "pci_bus_id": "0000:5c:00.0", "port": 1, …}); the GPU–NIC results
are the GPU's. The rules of checks/common.py hold: what could not be read is unknown (never a pass), every non-pass
result says what was seen, what was expected and what to do.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from gpudiag.checks.common import failed, skipped, unknown
from gpudiag.expect.network_settings import NetworkSettings
from gpudiag.model import CheckResult, NodeSnapshot, ProbeError
from gpudiag.model.network import NetworkInfo, RdmaDevice, RdmaPort

NICS = "network.nics"
RATE = "network.rate"
ERRORS = "network.errors"
FLAPS = "network.flaps"
FIRMWARE = "network.firmware"
GPUDIRECT = "network.gpudirect"
AFFINITY = "topology.gpu_nic_affinity"

# PCI IDs → the names the vendors give the parts (pci.ids; the drivers' ID tables: mlx5 main.c mlx5_core_pci_table,
# bnxt.c bnxt_pci_tbl, ionic_bus_pci.c ionic_id_table).
NIC_MODELS = {
    "15b3:101b": "ConnectX-6", "15b3:101d": "ConnectX-6 Dx", "15b3:101e": "ConnectX VF",
    "15b3:1021": "ConnectX-7", "15b3:1023": "ConnectX-8", "15b3:a2d6": "BlueField-2", "15b3:a2dc": "BlueField-3",
    "14e4:1750": "BCM57508 (THOR)", "14e4:1760": "BCM57608 (THOR2)", "1dd8:1002": "Pensando (ionic)",
}


def pci_id(device: RdmaDevice) -> Optional[str]:
    """"15b3:1021" from the function's vendor and device IDs."""
    if not device.vendor_id or not device.device_id:
        return None
    return f"{device.vendor_id.removeprefix('0x')}:{device.device_id.removeprefix('0x')}".lower()


def model_of(device: RdmaDevice) -> str:
    """The NIC's model in words: the part's name, else what the driver calls it, else its PCI ID."""
    ident = pci_id(device)
    return NIC_MODELS.get(ident or "") or device.hca_type or ident or "unknown model"


def board_of(device: RdmaDevice) -> str:
    """What firmware is released for: mlx5's PSID (board_id), else the PCI ID (bnxt_re and ionic have no board_id)."""
    return device.board_id or pci_id(device) or device.hca_type or "unknown board"


def label(device: RdmaDevice, port: Optional[RdmaPort] = None) -> str:
    where = f" ({device.pci_bus_id})" if device.pci_bus_id else ""
    return f"{device.name}{where}" + (f" port {port.number}" if port is not None else "")


def ident(device: RdmaDevice, port: Optional[RdmaPort] = None) -> dict:
    """The NIC's identity as `observed` carries it."""
    facts = {"nic": device.name, "pci_bus_id": device.pci_bus_id, "model": model_of(device)}
    if port is not None:
        facts["port"] = port.number
    return facts


def confirm(device: RdmaDevice, port: Optional[RdmaPort] = None) -> str:
    """The commands that show what a check judged, for the operator to confirm it."""
    number = port.number if port is not None else 1
    if port is not None and port.link_layer == "Ethernet" and port.netdev is not None:
        return f"`rdma link show {device.name}/{number}` and `ethtool {port.netdev.name}`"
    return f"`ibstat {device.name} {number}` (or `rdma link show {device.name}/{number}`)"


def fabric_nics(info: NetworkInfo, settings: NetworkSettings) -> tuple[list[RdmaDevice], list[RdmaDevice]]:
    """(the GPU fabric's NICs, the other RDMA devices): by settings.nic_pci_ids, or all of them when it is empty."""
    if not settings.nic_pci_ids:
        return list(info.devices), []
    wanted = set(settings.nic_pci_ids)
    fabric = [d for d in info.devices if pci_id(d) in wanted]
    return fabric, [d for d in info.devices if pci_id(d) not in wanted]


def errors_of(device: RdmaDevice, *parts: str) -> list[ProbeError]:
    """The device's probe errors whose source names one of `parts` (a file name, "ports/1"); all with no parts."""
    return [e for e in device.errors if not parts or any(p in e.source for p in parts)]


def error_text(errors: Iterable[ProbeError]) -> list[str]:
    return [f"{e.source}: {e.kind.value}: {e.message}" for e in errors]


_PERMISSION = "Run gpudiag as root (sysfs config space and some counters are root-only)."


def unreadable(check_id: str, what: str, errors: list[ProbeError], facts: dict) -> CheckResult:
    """`what` could not be read: unknown, naming the probe's errors."""
    kinds = {e.kind.value for e in errors}
    remediation = _PERMISSION if "no_permission" in kinds else (
        "Read the files named in `observed` by hand; a NIC whose sysfs files fail to read is often one whose driver "
        "or firmware stopped answering: check the kernel log (`dmesg | grep -e mlx5 -e bnxt -e ionic`).")
    return unknown(check_id, None, f"{what} could not be read", observed={**facts, "errors": error_text(errors)},
                   expected=f"{what} readable", remediation=remediation)


def not_collected(check_id: str, snapshot: NodeSnapshot, settings: NetworkSettings,
                  judges_count: bool = False) -> Optional[list[CheckResult]]:
    """The result when there is nothing to judge (the NICs were not read, could not be, or there are none), or None.
    With no RDMA device, the check skips, except the count check when the profile expects NICs (`judges_count`)."""
    info = snapshot.network
    expected = settings.expected_nics
    if info is None:
        message = "the RDMA NICs were not read (a snapshot recorded before gpudiag read them)"
        if judges_count and expected:
            return [unknown(check_id, None, message, observed={"network": None},
                            expected=f"at least {expected} RDMA NICs",
                            remediation="Collect again with this gpudiag (`gpudiag check`) to read the NICs.")]
        return [skipped(check_id, None, message)]
    if not info.readable:
        why = info.errors[0].message if info.errors else "sysfs unreadable"
        return [unknown(check_id, None, f"the RDMA NICs could not be read ({why})",
                        observed={"errors": error_text(info.errors)}, expected="/sys/class/infiniband readable",
                        remediation="Run gpudiag where /sys is mounted (a container needs the host's /sys) and as "
                                    "root; see `observed` for the failing read.")]
    if info.devices:
        return None
    if info.devices_skipped:  # devices beyond the cap or the deadline: none was read
        return [unknown(check_id, None, f"no RDMA device was read: {info.incomplete}",
                        observed={"devices_skipped": info.devices_skipped}, expected="the RDMA devices read",
                        remediation="Re-run with a longer --timeout.")]
    why = ("no /sys/class/infiniband: ib_core is not loaded, or the node has no RDMA NIC" if not info.class_present
           else "/sys/class/infiniband is empty: no RDMA device registered")
    if judges_count and expected:
        return [failed(check_id, None, f"no RDMA NIC on this node ({why}); the profile expects {expected}",
                       observed={"rdma_devices": 0, "class_present": info.class_present},
                       expected=f"at least {expected} RDMA NICs",
                       remediation=_no_rdma_advice(settings))]
    return [skipped(check_id, None, f"no RDMA device on this node ({why}): nothing to judge")]


# The RDMA driver of each fabric NIC vendor (ib_core loads with it): mlx5_ib (NVIDIA/Mellanox 15b3), bnxt_re
# (Broadcom 14e4), ionic_rdma (AMD Pensando 1dd8; tests/support/rdma_tree_amd.py).
_RDMA_DRIVERS = {"15b3": "mlx5_ib", "14e4": "bnxt_re", "1dd8": "ionic_rdma"}


def _no_rdma_advice(settings: NetworkSettings) -> str:
    """What to do on a node with no RDMA device where the profile expects NICs: are they on the PCI bus (the
    profile's PCI IDs), and is their RDMA driver loaded."""
    ids = list(settings.nic_pci_ids or ())
    listing = ", ".join(f"`lspci -nn -d {i}`" for i in ids) or "`lspci | grep -i -e infiniband -e ethernet`"
    drivers = sorted({_RDMA_DRIVERS[i.split(":")[0]] for i in ids if i.split(":")[0] in _RDMA_DRIVERS}) or \
        sorted(set(_RDMA_DRIVERS.values()))
    load = " or ".join(f"`modprobe {d}`" for d in drivers)
    return (f"First see whether the NICs are on the PCI bus: {listing}. If none is listed, they are missing from the "
            f"bus: reseat them and check their slots in the BIOS (in a VM they must be passed through, SR-IOV VFs). "
            f"If they are listed, their RDMA driver is not loaded (ib_core loads with it): {load}, then look for "
            f"firmware or link errors in `dmesg | grep -e mlx5 -e bnxt -e ionic`.")


def each_fabric_port(check_id: str, snapshot: NodeSnapshot, settings: NetworkSettings,
                     judge: Callable[[RdmaDevice, RdmaPort, list[RdmaDevice]], CheckResult]) -> list[CheckResult]:
    """judge(device, port, fabric) for every port of every fabric NIC, or the results that say why there is none;
    and what was left unread (not_read)."""
    fabric, nothing = fabric_to_judge(check_id, snapshot, settings)
    if nothing is not None:
        return nothing
    return [judge(device, port, fabric) for device in fabric for port in device.ports] + \
        not_read(check_id, snapshot.network)


def fabric_to_judge(check_id: str, snapshot: NodeSnapshot, settings: NetworkSettings
                    ) -> tuple[list[RdmaDevice], Optional[list[CheckResult]]]:
    """(the fabric NICs, None), or ([], the results that say why there is nothing to judge). No fabric NIC among
    those read is unknown where some were not read or not placed on the PCI bus (they may be the fabric's)."""
    early = not_collected(check_id, snapshot, settings)
    if early is not None:
        return [], early
    fabric, _ = fabric_nics(snapshot.network, settings)
    if not fabric:
        lost = not_read(check_id, snapshot.network)
        nowhere = unlocated(snapshot.network)
        if nowhere:
            lost.append(unknown(check_id, None, f"no fabric NIC among the RDMA devices read, and the PCI function of "
                                                f"{located_text(nowhere)}: they may be the fabric's",
                                observed={"unlocated": {d.name: d.pci_unreadable for d in nowhere}},
                                expected="every RDMA device's PCI function readable", remediation=UNLOCATED_ADVICE))
        return [], lost or [skipped(check_id, None, "no fabric NIC on this node: nothing to judge")]
    return fabric, None


def not_read(check_id: str, info: NetworkInfo) -> list[CheckResult]:
    """One unknown naming the RDMA devices and ports the probe left unread (its caps, its deadline), so that a port
    among them is not taken for judged; none when everything was read (issue 33, item 4)."""
    ports = {d.name: d.ports_skipped for d in info.devices if d.ports_skipped}
    if not info.devices_skipped and not ports:
        return []
    parts = []
    if info.devices_skipped:
        parts.append(f"{info.devices_skipped} RDMA device(s) were not read ({info.incomplete})")
    if ports:
        parts.append(f"{sum(ports.values())} port(s) of {', '.join(sorted(ports)[:4])}"
                     f"{' …' if len(ports) > 4 else ''} were past the probe's cap")
    return [unknown(check_id, None, "; ".join(parts) + ": they are not judged",
                    observed={"devices_read": len(info.devices), "devices_skipped": info.devices_skipped,
                              "ports_skipped": ports, "incomplete": info.incomplete},
                    expected="every RDMA device and port read",
                    remediation="Re-run with a longer --timeout. `ls /sys/class/infiniband | wc -l` counts the RDMA "
                                "devices: each SR-IOV virtual function is one, so VFs that are not in use can be "
                                "removed (`echo 0 > /sys/bus/pci/devices/<PF>/sriov_numvfs`).")]


def unlocated(info: NetworkInfo) -> list[RdmaDevice]:
    """The RDMA devices whose PCI function could not be found (RdmaDevice.pci_unreadable)."""
    return [d for d in info.devices if d.pci_unreadable]


def located_text(devices: list[RdmaDevice]) -> str:
    """"mlx5_0 could not be read (why)", for a message; several named, the first why given."""
    names = ", ".join(d.name for d in devices[:4]) + (" …" if len(devices) > 4 else "")
    return f"{names} could not be read ({devices[0].pci_unreadable})"


UNLOCATED_ADVICE = ("Look at the NIC's `device` link (`ls -l /sys/class/infiniband/<nic>/device`): unreadable is a "
                    "reader without rights (run gpudiag as root); a link to nothing is a NIC whose PCI function went "
                    "away (`dmesg | grep -e mlx5 -e bnxt -e ionic`, `lspci -nn -d 15b3:`): reseat or reset it.")


def counter_width_bits(name: str) -> Optional[int]:
    """The width of an IBTA PortCounters field as the kernel reads it (drivers/infiniband/core/sysfs.c
    PORT_PMA_ATTR(name, counter, width, offset)); None for the 64-bit extended ones and hw_counters."""
    return _WIDTHS.get(name)


_WIDTHS = {"symbol_error": 16, "port_rcv_errors": 16, "port_rcv_remote_physical_errors": 16,
           "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16, "VL15_dropped": 16,
           "link_error_recovery": 8, "link_downed": 8, "port_rcv_constraint_errors": 8,
           "port_xmit_constraint_errors": 8, "local_link_integrity_errors": 4, "excessive_buffer_overrun_errors": 4}


def saturated(name: str, value: int) -> bool:
    """The counter is at its top: the PortCounters stop there ("at least"), they do not wrap."""
    width = counter_width_bits(name)
    return width is not None and value >= (1 << width) - 1
