"""The network family's metrics, found by this module's name (exporter/catalog.py): the RDMA NICs' series
(gpudiag_nic_*) from one snapshot's NetworkInfo: identity, port state and rate, and the ports' counters as `_total`.

Labels: every NIC series carries `nic` (the RDMA device, "mlx5_0") and `pci_bus_id` (its PCI function, empty for a
bond), every port series `port` too; identity (model, board, firmware, driver) sits only on gpudiag_nic_info, as GPU
identity sits on gpudiag_gpu_info. A value the NIC does not report has no series (never a 0).

The IBTA PortCounters are 4, 8 or 16 bits wide and stop at their top instead of wrapping (docs/network.md): exported
as counters they stop rising, so gpudiag_nic_port_pma_saturated says which one is there (rate() over it reads 0
while errors may go on). port_rcv_data / port_xmit_data count 4-octet words: they are exported as bytes.
"""

from __future__ import annotations

from gpudiag.checks.network.common import counter_width_bits, model_of, pci_id, saturated
from gpudiag.exporter import catalog
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.model import NodeSnapshot
from gpudiag.model.network import RdmaDevice, RdmaPort

NIC_LABELS = ("nic", "pci_bus_id")
PORT_LABELS = NIC_LABELS + ("port",)


def _spec(name: str, kind: str, help_text: str, labels: tuple[str, ...]) -> catalog.MetricSpec:
    assert name.startswith("gpudiag_nic_"), name  # the family's prefix; catalog.define checks the rest
    return catalog.define(name, kind, help_text, labels)


NIC_INFO = _spec("gpudiag_nic_info", "gauge", "An RDMA NIC and its identity; always 1.",
                 NIC_LABELS + ("model", "pci_id", "board_id", "firmware_version", "driver", "numa_node"))
PORT_INFO = _spec("gpudiag_nic_port_info", "gauge", "A NIC port, its link layer and (RoCE) netdev; always 1.",
                  PORT_LABELS + ("link_layer", "netdev"))
PORT_UP = _spec("gpudiag_nic_port_up", "gauge", "1 when the port is ACTIVE with its physical link up (LinkUp), else 0.",
                PORT_LABELS)
PORT_STATE = _spec("gpudiag_nic_port_state", "gauge",
                   "The port's logical state as the IBTA numbers it: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, "
                   "5 ACTIVE_DEFER.",
                   PORT_LABELS)
PORT_PHYS_STATE = _spec("gpudiag_nic_port_phys_state", "gauge",
                        "The port's physical state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, "
                        "5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.", PORT_LABELS)
PORT_RATE = _spec("gpudiag_nic_port_rate_bytes_per_second", "gauge",
                  "The rate the port trained at (400 Gb/s NDR: 5e10 bytes per second).", PORT_LABELS)
PORT_WIDTH = _spec("gpudiag_nic_port_width_lanes", "gauge", "The lanes the port trained with (4 on a 4X port).",
                   PORT_LABELS)
PORT_DATA = _spec("gpudiag_nic_port_data_bytes_total", "counter",
                  "Bytes received (direction=rx) and sent (tx): 4 x counters/port_rcv_data, port_xmit_data.",
                  PORT_LABELS + ("direction",))
PORT_COUNTER = _spec("gpudiag_nic_port_pma_total", "counter",
                     "A port's IBTA PortCounter (counters/<counter>: symbol_error, link_downed, port_rcv_errors, …), "
                     "since the counters were last cleared; the narrow ones stop at their top.",
                     PORT_LABELS + ("counter",))
PORT_COUNTER_SATURATED = _spec("gpudiag_nic_port_pma_saturated", "gauge",
                               "1 when a narrow PortCounter is at its top (4, 8 or 16 bits) and can rise no more, "
                               "else 0.", PORT_LABELS + ("counter",))
PORT_HW_COUNTER = _spec("gpudiag_nic_port_hw_total", "counter",
                        "A port's driver counter (hw_counters/<counter>: mlx5, bnxt_re and ionic name their own).",
                        PORT_LABELS + ("counter",))
NETDEV_CARRIER_CHANGES = _spec("gpudiag_nic_netdev_carrier_changes_total", "counter",
                               "Link up/down transitions of a RoCE port's netdev since boot.",
                               PORT_LABELS + ("netdev",))
NETDEV_SPEED = _spec("gpudiag_nic_netdev_speed_bytes_per_second", "gauge",
                     "The speed a RoCE port's netdev reports (ethtool's Speed).", PORT_LABELS + ("netdev",))
NICS = _spec("gpudiag_nic_devices", "gauge", "RDMA devices this node shows (0 when it has none).", ())
SPECS = (NIC_INFO, PORT_INFO, PORT_UP, PORT_STATE, PORT_PHYS_STATE, PORT_RATE, PORT_WIDTH, PORT_DATA, PORT_COUNTER,
         PORT_COUNTER_SATURATED, PORT_HW_COUNTER, NETDEV_CARRIER_CHANGES, NETDEV_SPEED, NICS)
_DATA = {"port_rcv_data": "rx", "port_xmit_data": "tx"}


def add(fs: MetricSet, snapshot: NodeSnapshot) -> None:
    """The NICs' series; nothing when the NICs were not read or could not be (gpudiag_nic_devices is absent then,
    so that "no NIC" and "not read" are told apart)."""
    info = snapshot.network
    if info is None or not info.readable:
        return
    fs.add(NICS, (), len(info.devices))
    for device in info.devices:
        add_nic(fs, device)


def add_nic(fs: MetricSet, device: RdmaDevice) -> None:
    ids = (device.name, device.pci_bus_id or "")
    fs.add(NIC_INFO, ids + (model_of(device), pci_id(device) or "", device.board_id or "", device.fw_ver or "",
                            device.driver or "", "" if device.numa_node is None else str(device.numa_node)), 1)
    for port in device.ports:
        _port(fs, ids + (str(port.number),), port)


def _port(fs: MetricSet, ids: tuple[str, ...], port: RdmaPort) -> None:
    fs.add(PORT_INFO, ids + (port.link_layer or "", port.netdev.name if port.netdev else ""), 1)
    if port.state is not None and port.phys_state is not None:
        fs.add(PORT_UP, ids, int(port.state in ("ACTIVE", "ACTIVE_DEFER") and port.phys_state == "LinkUp"))
    fs.add(PORT_STATE, ids, port.state_code)
    fs.add(PORT_PHYS_STATE, ids, port.phys_state_code)
    fs.add(PORT_RATE, ids, None if port.rate_gbps is None else port.rate_gbps * 1e9 / 8)
    fs.add(PORT_WIDTH, ids, port.width_lanes)
    for name, direction in _DATA.items():
        if name in port.counters:
            fs.add(PORT_DATA, ids + (direction,), port.counters[name] * 4)
    for name, value in sorted(port.counters.items()):
        if name in _DATA:
            continue
        fs.add(PORT_COUNTER, ids + (name,), value)
        if counter_width_bits(name) is not None:
            fs.add(PORT_COUNTER_SATURATED, ids + (name,), int(saturated(name, value)))
    for name, value in sorted(port.hw_counters.items()):
        fs.add(PORT_HW_COUNTER, ids + (name,), value)
    netdev = port.netdev
    if netdev is not None:
        fs.add(NETDEV_CARRIER_CHANGES, ids + (netdev.name,), netdev.carrier_changes)
        fs.add(NETDEV_SPEED, ids + (netdev.name,), None if netdev.speed_mbps is None else netdev.speed_mbps * 1e6 / 8)
