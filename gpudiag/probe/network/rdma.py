"""The node's RDMA NICs from sysfs: `read_network(root, until)` reads every device under root/sys/class/infiniband,
its ports and counters, the netdev of each RoCE port, the PCI path of each NIC (and the ACS control of the bridges on
the NICs' and GPUs' paths), and the host facts GPUDirect RDMA depends on. No ibstat, ibv_devinfo or vendor tool.

Bounded and fail-closed: at most MAX_DEVICES devices, MAX_PORTS ports each and MAX_COUNTERS / MAX_HW_COUNTERS
counters a port are read (what was left is counted and said in `incomplete`), every read goes through
files.BoundedReader, the deadline `until` (time.monotonic()) is looked at before each device and port, and nothing
raises: an unreadable file is a ProbeError on its device, an attribute the device does not offer is None.
File formats and their sources: docs/network.md; formats.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterable, Optional

from gpudiag.model import ErrorKind, NetDev, NetworkInfo, PciGpu, ProbeError, RdmaDevice, RdmaPort, normalize_pci_bus_id
from gpudiag.probe.host import read_boot_id
from gpudiag.probe.network.files import BoundedReader, Unsupported
from gpudiag.probe.network.formats import NO_PMA, parse_counter, parse_decimal, parse_guid, parse_hex, parse_rate, \
    parse_state
from gpudiag.probe.network.host import read_gpudirect_inputs
from gpudiag.probe.network.pci import fill_pci, read_bridges
from gpudiag.probe.root_facts import record as root_facts

# Far above any host (an HGX node has 8-12 RDMA devices of 1-2 ports; mlx5 hw_counters ~35, bnxt_re ~100), far below
# what would make a scrape slow: every counter read is a firmware query on mlx5.
MAX_DEVICES = 128
MAX_PORTS = 16
MAX_COUNTERS = 64
MAX_HW_COUNTERS = 256
MAX_NETDEVS = 16
_COUNTER_NAME = re.compile(r"[A-Za-z0-9_]{1,64}", re.ASCII)
_PORT_NAME = re.compile(r"[0-9]{1,3}", re.ASCII)
# A netdev name (IFNAMSIZ 16 with its NUL) as a path component: no "/", not "." or "..".
_IFNAME = re.compile(r"(?!\.\.?$)[A-Za-z0-9_.:@-]{1,15}", re.ASCII)


def read_network(root: Path = Path("/"), until: Optional[float] = None, pci_gpus: Optional[Iterable[PciGpu]] = None,
                 skip: Optional[set[str]] = None, state_dir: Optional[Path] = None) -> NetworkInfo:
    """The RDMA NICs under `root`. `pci_gpus`: the GPUs whose PCI paths' bridges get their ACS read too (None: found
    on the PCI bus here). `skip`: paths that refused a read before (EINVAL), kept by a caller that reads again so that
    a restricted PF's counters are not queried (and logged by mlx5) on every collection. `state_dir`: where to find
    root's record of the bridges' ACS control (probe/root_facts/record.py), for the bridges this process cannot
    read. Never raises."""
    info = NetworkInfo()
    reader = BoundedReader(Path(root), info.errors, skip)
    class_dir = reader.path("sys/class/infiniband")
    names, more = reader.names(class_dir, MAX_DEVICES)
    if names is None:
        if class_dir.exists():  # there, but could not be listed (recorded)
            info.class_present = True
        elif reader.path("sys/class").is_dir() or reader.path("sys/devices").is_dir():
            info.readable, info.class_present = True, False  # ib_core not loaded, or no RDMA devices
        else:  # no sysfs mounted (an empty /sys in a container), or a --root without one
            info.errors.append(ProbeError(source="sysfs:/sys", kind=ErrorKind.NOT_FOUND,
                                          message="no sysfs (neither /sys/class nor /sys/devices): the RDMA NICs were "
                                                  "not read"))
    else:
        info.readable, info.class_present, info.devices_skipped = True, True, more
        if more:
            info.incomplete = f"{len(names) + more} RDMA devices: only the first {MAX_DEVICES} were read"
        for number, name in enumerate(names):
            if until is not None and time.monotonic() > until:
                info.incomplete = f"the deadline passed after {number} of {len(names)} RDMA devices"
                info.devices_skipped += len(names) - number
                break
            info.devices.append(_device(Path(root), class_dir / name, reader.skip, until))
    info.host = read_gpudirect_inputs(reader)
    if pci_gpus is None:
        from gpudiag.probe.pci import probe_pci_gpus

        pci_gpus, _ = probe_pci_gpus(Path(root))  # its errors are the PCI probe's, recorded by the collector
    info.bridges, cut = read_bridges(reader, info.devices, pci_gpus)
    if any(b.acs_state == "unreadable" for b in info.bridges):
        _recorded_acs(info, state_dir, read_boot_id(Path(root)))
    if cut:
        info.incomplete = "; ".join(filter(None, (info.incomplete, cut)))
    return info


def _recorded_acs(info: NetworkInfo, state_dir: Optional[Path], boot_id: Optional[str]) -> None:
    """The ACS control root recorded, for the bridges whose extended config space this process may not read."""
    facts, why = root_facts.load(state_dir, boot_id)
    recorded, why = root_facts.acs_of(facts, why)
    if facts is not None and recorded:
        root_facts.fill_unreadable(info.bridges, recorded, facts.written_at)
    info.acs_record = why


def _device(root: Path, directory: Path, skip: set[str], until: Optional[float]) -> RdmaDevice:
    device = RdmaDevice(name=directory.name)
    reader = BoundedReader(root, device.errors, skip)
    device.fw_ver = reader.value(directory / "fw_ver")
    device.board_id = reader.value(directory / "board_id")
    device.hca_type = reader.value(directory / "hca_type")
    device.hw_rev = reader.value(directory / "hw_rev")
    node_type = _parsed(reader, directory / "node_type", parse_state)
    device.node_type = node_type[1] if node_type else None
    device.node_guid = _parsed(reader, directory / "node_guid", parse_guid)
    device.sys_image_guid = _parsed(reader, directory / "sys_image_guid", parse_guid)
    function = reader.link_target(directory / "device")
    if function is not None:
        fill_pci(reader, device, function)
    names, device.ports_skipped = reader.names(directory / "ports", MAX_PORTS)
    for name in names or []:
        if until is not None and time.monotonic() > until:
            reader.record(directory / "ports", ErrorKind.TIMEOUT,
                          f"{device.name}: the deadline passed before port {name} was read")
            break
        if not _PORT_NAME.fullmatch(name):
            reader.record(directory / "ports" / name, ErrorKind.ERROR, f"{device.name}: not a port number: {name!r}")
            continue
        device.ports.append(_port(reader, directory / "ports" / name, int(name), function))
    return device


def _port(reader: BoundedReader, directory: Path, number: int, function: Optional[Path]) -> RdmaPort:
    port = RdmaPort(number=number)
    state = _parsed(reader, directory / "state", parse_state)
    if state:
        port.state_code, port.state = state
    phys = _parsed(reader, directory / "phys_state", parse_state)
    if phys:
        port.phys_state_code, port.phys_state = phys
    port.rate_text = reader.value(directory / "rate")
    rate = _parsed(reader, directory / "rate", parse_rate, port.rate_text) if port.rate_text else None
    if rate:
        port.rate_gbps, port.width_lanes, port.speed = rate
        port.width = f"{port.width_lanes}X"
    port.link_layer = reader.value(directory / "link_layer")
    port.lid = _parsed(reader, directory / "lid", parse_hex)
    port.sm_lid = _parsed(reader, directory / "sm_lid", parse_hex)
    _counters(reader, directory / "counters", MAX_COUNTERS, port.counters, port.counters_unsupported)
    _counters(reader, directory / "hw_counters", MAX_HW_COUNTERS, port.hw_counters, port.hw_counters_unsupported)
    for words, field in (("port_rcv_data", "rcv_data_bytes"), ("port_xmit_data", "xmit_data_bytes")):
        if words in port.counters:  # "divided by 4 (lanes)": the ABI's words for 4-octet units
            setattr(port, field, port.counters[words] * 4)
    if port.link_layer == "Ethernet":
        port.netdev = _netdev(reader, directory, number, function)
    return port


def _counters(reader: BoundedReader, directory: Path, cap: int, values: dict[str, int], unsupported: list[str]) -> None:
    names, more = reader.names(directory, cap)
    if more:
        reader.record(directory, ErrorKind.ERROR, f"{reader.shown(directory)}: {more} more counters than the "
                                                  f"{cap} read")
    for name in names or []:
        if name == "lifespan":  # hw_counters' refresh period in ms (sysfs-class-infiniband), no counter
            continue
        path = directory / name
        if not _COUNTER_NAME.fullmatch(name):
            reader.record(path, ErrorKind.ERROR, f"unexpected counter name {name!r} in {reader.shown(directory)}")
            continue
        text = reader.attribute(path, remember=True)
        if isinstance(text, Unsupported) or text == NO_PMA:
            unsupported.append(name)
        elif text is not None:
            value = parse_counter(text)
            if value is None:
                reader.record(path, ErrorKind.ERROR, f"unexpected content in {reader.shown(path)}: {text[:64]!r}")
            else:
                values[name] = value


def _netdev(reader: BoundedReader, port_dir: Path, number: int, function: Optional[Path]) -> Optional[NetDev]:
    """The netdev of a RoCE port: the one its first GID entry names (the kernel's own pairing), else the PCI
    function's only netdev, or the one whose dev_port is the port's (ibdev2netdev's rule for multi-port functions)."""
    name, found_by = reader.value(port_dir / "gid_attrs" / "ndevs" / "0"), "gid_attrs"
    if name is None or not _IFNAME.fullmatch(name):
        name, found_by = None, "device/net"
        if function is not None:
            candidates = [n for n in reader.names(function / "net", MAX_NETDEVS)[0] or [] if _IFNAME.fullmatch(n)]
            if len(candidates) > 1:
                candidates = [n for n in candidates
                              if parse_decimal(reader.value(function / "net" / n / "dev_port") or "") == number - 1]
            name = candidates[0] if len(candidates) == 1 else None
    if name is None:
        return None
    net = reader.path(f"sys/class/net/{name}")
    netdev = NetDev(name=name, found_by=found_by, operstate=reader.value(net / "operstate"))
    carrier = reader.value(net / "carrier")
    netdev.carrier = {"1": True, "0": False}.get(carrier or "")
    netdev.carrier_changes = _parsed(reader, net / "carrier_changes", parse_counter)
    speed = _parsed(reader, net / "speed", parse_decimal)
    netdev.speed_mbps = speed if speed is not None and speed >= 0 else None  # -1: SPEED_UNKNOWN
    netdev.mtu_bytes = _parsed(reader, net / "mtu", parse_decimal)
    target = reader.link_target(net / "device")
    if target is not None:
        try:
            netdev.pci_bus_id = normalize_pci_bus_id(target.name)
        except ValueError:
            pass  # a virtual netdev's parent (a bond, an auxiliary device) is no PCI function
    return netdev


def _parsed(reader: BoundedReader, path: Path, parse, text: Optional[str] = None):
    """An attribute through `parse`; a value in no format the kernel prints is a recorded error, not a guess."""
    text = reader.value(path) if text is None else text
    if text is None:
        return None
    value = parse(text)
    if value is None:
        reader.record(path, ErrorKind.ERROR, f"unexpected content in {reader.shown(path)}: {text[:64]!r}")
    return value
