"""The PCI side of an RDMA NIC: the function behind `/sys/class/infiniband/<dev>/device`, its link and NUMA node, the
bridges above it (and above the GPUs), and the ACS control of those bridges.

ACS lives in extended config space (offset >= 0x100). sysfs `config` gives an unprivileged reader only the first 64
bytes (drivers/pci/pci-sysfs.c pci_read_config: `size = 64` without CAP_SYS_ADMIN), so a non-root probe records the
ACS state as "unreadable" — never as "absent" or as disabled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from gpudiag.model import ErrorKind, PciBridge, PciGpu, RdmaDevice, normalize_pci_bus_id
from gpudiag.probe.pci import _upstream_ports as upstream_ports  # the same walk as the GPUs' (probe/pci.py)
from gpudiag.probe.network.files import MAX_CONFIG_BYTES, BoundedReader, Unsupported
from gpudiag.probe.network.formats import find_acs, parse_decimal
from gpudiag.probe.pcie_generation import generation_from_gts_text

MAX_BRIDGES = 256  # a host has a few dozen; a hostile tree cannot make the probe read thousands of config spaces
_UNPRIVILEGED_CONFIG_BYTES = 64


def fill_pci(reader: BoundedReader, device: RdmaDevice, function: Path) -> None:
    """The PCI facts of `device` from its function's directory (the real path `device` resolves to)."""
    try:
        device.pci_bus_id = normalize_pci_bus_id(function.name)
    except ValueError:
        reader.record(function, ErrorKind.ERROR, f"{device.name}: `device` is no PCI function ({function.name!r})")
        return
    device.vendor_id = _lower(reader.value(function / "vendor"))
    device.device_id = _lower(reader.value(function / "device"))
    driver = reader.link_target(function / "driver")
    device.driver = driver.name if driver is not None else None
    device.virtual_function = (function / "physfn").is_symlink()
    node = parse_decimal(reader.value(function / "numa_node") or "")
    device.numa_node = node if node is not None and node >= 0 else None  # -1: no affinity
    device.current_link_generation = generation_from_gts_text(reader.value(function / "current_link_speed"))
    device.max_link_generation = generation_from_gts_text(reader.value(function / "max_link_speed"))
    device.current_link_width = parse_decimal(reader.value(function / "current_link_width") or "")
    device.max_link_width = parse_decimal(reader.value(function / "max_link_width") or "")
    device.upstream_ports = upstream_ports(function)


def read_bridges(reader: BoundedReader, devices: list[RdmaDevice], gpus: Iterable[PciGpu]) -> tuple[list[PciBridge],
                                                                                                   Optional[str]]:
    """Every bridge on the NICs' and the GPUs' paths, once each, sorted by bus ID, with its ACS state; and why the
    list was cut short, if it was."""
    paths = [d.upstream_ports for d in devices] + [g.upstream_ports for g in gpus]
    root_ports = {path[-1] for path in paths if path}
    names = sorted({name for path in paths for name in path})
    cut = None
    if len(names) > MAX_BRIDGES:
        cut = f"{len(names)} bridges on the NIC and GPU paths: only the first {MAX_BRIDGES} were read"
        names = names[:MAX_BRIDGES]
    bridges = []
    for name in names:
        directory = reader.path(f"sys/bus/pci/devices/{name}")
        bridge = PciBridge(pci_bus_id=normalize_pci_bus_id(name), root_port=name in root_ports,
                           vendor_id=_lower(reader.value(directory / "vendor")),
                           device_id=_lower(reader.value(directory / "device")))
        _acs(reader, bridge, directory / "config")
        bridges.append(bridge)
    return bridges, cut


def _acs(reader: BoundedReader, bridge: PciBridge, config_path: Path) -> None:
    recorded = len(reader.errors)
    data = reader.raw(config_path, MAX_CONFIG_BYTES)
    if isinstance(data, Unsupported):
        reader.record(config_path, ErrorKind.ERROR, f"{reader.shown(config_path)} refused the read ({data.why})")
    if data is None or isinstance(data, Unsupported):
        failed = reader.errors[recorded:]  # a denied read is "unreadable", any other failure an "error"
        denied = not failed or all(e.kind == ErrorKind.NO_PERMISSION for e in failed)
        bridge.acs_state = "unreadable" if denied else "error"
        return
    bridge.config_bytes_read = len(data)
    if len(data) <= _UNPRIVILEGED_CONFIG_BYTES:
        bridge.acs_state = "unreadable"  # the first 64 bytes only: not root (no CAP_SYS_ADMIN)
        return
    if len(data) <= 0x100:
        bridge.acs_state = "absent"  # no extended config space at all (a conventional PCI bridge)
        return
    acs, problem = find_acs(data)
    if problem is not None:
        bridge.acs_state = "error"
        reader.record(config_path, ErrorKind.ERROR, f"{reader.shown(config_path)}: {problem}")
    else:
        bridge.acs_state, bridge.acs = ("present", acs) if acs is not None else ("absent", None)


def _lower(text: Optional[str]) -> Optional[str]:
    return text.lower() if text else None
