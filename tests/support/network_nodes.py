"""Node snapshots with their RDMA NICs, for the network checks: the fake sysfs trees of tests/support/rdma_tree*.py read
by the real probes (probe/pci.py, probe/network/rdma.py), around the healthy GPU snapshots of
tests/support/snapshots.py.

The error counters of GPUd's H100 recording are not those of a clean node: every port has
excessive_buffer_overrun_errors at 15 (the 4-bit counter's top) and port_rcv_errors 14, and mlx5_1 has link_downed at
255 (the 8-bit top). `clear_counters` zeroes the error counters of every port, as `perfquery -x -R` leaves them; the
"healthy" nodes are the recordings with their counters cleared, and tests/checks/network/test_family.py shows what the
checks say of the recording as it is.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

from gpudiag.model import KernelEvent, NodeSnapshot
from gpudiag.model.network import NetworkInfo
from gpudiag.probe.network.history import CounterHistory
from gpudiag.probe.network.kernel_log import nic_event
from gpudiag.probe.network.rdma import read_network
from gpudiag.probe.pci import probe_pci_gpus
from tests.support import rdma_tree
from tests.support.rdma_tree import Node
from tests.support.snapshots import amd_mi300x_node, nvidia_h200_node

ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "port_xmit_discards", "port_xmit_constraint_errors",
                  "port_rcv_constraint_errors", "VL15_dropped")
COLLECTED_AT = "2026-11-30T11:00:00Z"
UPTIME = 86400.0  # the snapshots are taken a day after boot


def clear_counters(node: Node) -> Node:
    for nic in node.nics:
        for name in ERROR_COUNTERS:
            if node.tree.port_file(nic.name, 1, f"counters/{name}").exists():
                node.tree.set_port(nic.name, 1, f"counters/{name}", "0")
    return node


def read(root: Path, history: Optional[CounterHistory] = None) -> NetworkInfo:
    info = read_network(root, time.monotonic() + 10, pci_gpus=probe_pci_gpus(root)[0])
    return history.carry(info) if history is not None else info


def snapshot(root: Path, *, amd: bool = False, info: Optional[NetworkInfo] = None,
             nic_log: tuple[str, ...] = ()) -> NodeSnapshot:
    """The node under `root`: its GPUs on the PCI bus (and as the vendor library lists them), its NICs, and the NIC
    kernel-log lines `nic_log` ("mlx5_core 0000:19:00.0 mlx5_0: Port: 1 Link DOWN"), each stamped a minute apart
    ending an hour before the snapshot."""
    pci_gpus, _ = probe_pci_gpus(root)
    base = amd_mi300x_node() if amd else nvidia_h200_node()
    template = base.devices[0]
    devices = [dataclasses.replace(template, index=i, pci_bus_id=p.pci_bus_id, uuid=f"GPU-{i:02d}",
                                   numa_node=p.numa_node) for i, p in enumerate(pci_gpus)]
    base.devices, base.pci_gpus, base.peers = devices, pci_gpus, []
    base.collected_at = COLLECTED_AT
    base.host.boot_time = datetime.fromisoformat(COLLECTED_AT.replace("Z", "+00:00")).timestamp() - UPTIME
    base.network = info if info is not None else read(root)
    events: list[KernelEvent] = []
    for number, line in enumerate(nic_log):
        event = nic_event(line, UPTIME - 3600 - 60 * (len(nic_log) - number))
        assert event is not None, line
        events.append(event)
    base.kernel_log.nic_events = events
    return base


def hgx_h100(root: Path, **kwargs) -> tuple[Node, NodeSnapshot]:
    """The healthy 8x ConnectX-7 InfiniBand node (counters cleared); `kwargs` go to rdma_tree.hgx_h100_ib."""
    node = clear_counters(rdma_tree.hgx_h100_ib(root, **kwargs))
    return node, snapshot(root)
