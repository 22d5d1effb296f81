"""Healthy 8-GPU nodes of the SKUs gpudiag ships profiles for, grown from tests/support/snapshots.py's 2x H200 and 8x
MI300X: each builder returns a fresh snapshot for a test to break.

Each carries its fabric NICs, as the shipped profiles expect them (docs/acceptance.md, "The fabric NICs"), read by
the real probes from the NIC trees of tests/support/rdma_tree*.py laid out around the snapshot's GPUs: eight ConnectX-7
NDR HCAs (GPUd's recorded H100 node, counters cleared, plus its BlueField-3 front end) below the HGX GPUs' switches;
eight Broadcom THOR2 on the MI300X and MI325X nodes; eight Pensando Pollara 400 on the MI355X node. The GPUs' PCI
paths are the trees' (so that topology.gpu_nic_affinity sees each GPU's NIC below its switch)."""

from __future__ import annotations

import copy
import functools
import tempfile
import time
from pathlib import Path

from gpudiag.model import NodeSnapshot, PeerLink
from gpudiag.model.network import NetworkInfo
from gpudiag.probe.network.rdma import read_network
from gpudiag.probe.pci import probe_pci_gpus
from tests.support import rdma_tree, rdma_tree_amd
from tests.support.network_nodes import clear_counters
from tests.support.snapshots import GIB, amd_mi300x_node, nvidia_h200_node

H200_8X_BUS_IDS = ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
                   "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0")


_FABRICS = {
    "cx7": lambda root: rdma_tree.hgx_h100_ib(root, gpu_bus_ids=H200_8X_BUS_IDS),
    "thor2": rdma_tree_amd.mi300x_thor2,
    "pollara": rdma_tree_amd.mi355x_pollara,
}


@functools.lru_cache(maxsize=None)
def _fabric(kind: str) -> tuple[NetworkInfo, dict[str, tuple[list[str], str]]]:
    """The NICs of a `kind` node as the probe reads them from its tree, and each GPU's PCI path (its bridges, nearest
    first, and the port it hangs off). Read once; callers get copies."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clear_counters(_FABRICS[kind](root))
        gpus, _ = probe_pci_gpus(root)
        info = read_network(root, time.monotonic() + 10, gpus)
    return info, {g.pci_bus_id: (g.upstream_ports, g.upstream_pci_bus_id) for g in gpus}


def with_nics(snap: NodeSnapshot, kind: str) -> NodeSnapshot:
    info, paths = _fabric(kind)
    snap.network = copy.deepcopy(info)
    for pci in snap.pci_gpus:
        ports, upstream = paths[pci.pci_bus_id]
        pci.upstream_ports, pci.upstream_pci_bus_id = list(ports), upstream
    return snap


def nvidia_h200_8x() -> NodeSnapshot:
    """An HGX H200: eight copies of the fixture's GPU 0 at their own bus IDs, NVLink between every pair, a ConnectX-7
    below each GPU's switch."""
    snap = nvidia_h200_node()
    template, pci_template = snap.devices[0], snap.pci_gpus[0]
    snap.devices, snap.pci_gpus = [], []
    for index, bus_id in enumerate(H200_8X_BUS_IDS):
        device = copy.deepcopy(template)
        device.index, device.pci_bus_id, device.minor_number = index, bus_id, index
        device.uuid = f"GPU-5c1e2f3a-0000-4000-8000-00000000001{index}"
        device.numa_node = index // 4
        pci = copy.deepcopy(pci_template)
        pci.pci_bus_id, pci.numa_node = bus_id, index // 4
        pci.upstream_pci_bus_id = f"0000:{int(bus_id[5:7], 16) - 1:02x}:01.0"
        snap.devices.append(device)
        snap.pci_gpus.append(pci)
    snap.peers = [PeerLink(a, b, path="nvlink", p2p_read="ok", p2p_write="ok", p2p_nvlink="ok", p2p_atomics="ok",
                           link_count=18) for a in range(8) for b in range(a + 1, 8)]
    snap.backends[0].device_count = 8
    return with_nics(snap, "cx7")


def nvidia_h100_8x() -> NodeSnapshot:
    snap = nvidia_h200_8x()
    for device in snap.devices:
        device.name, device.memory.total_bytes = "NVIDIA H100 80GB HBM3", 80 * GIB
    return snap


def amd_mi300x_8x() -> NodeSnapshot:
    return with_nics(amd_mi300x_node(), "thor2")


def amd_mi355x_8x() -> NodeSnapshot:
    snap = amd_mi300x_node()
    for device in snap.devices:
        device.name, device.architecture, device.memory.total_bytes = "AMD Instinct MI355X", "gfx950", 288 * GIB
        device.power.limit_watts = device.power.default_limit_watts = device.power.max_limit_watts = 1400.0
    for pci in snap.pci_gpus:
        pci.bar_sizes_bytes[0] = 512 * GIB
    return with_nics(snap, "pollara")


def amd_mi325x_8x() -> NodeSnapshot:
    """The MI300X node's platform with MI325X OAMs (the MI325X profile expects no NICs: no source lists them)."""
    snap = amd_mi300x_8x()
    for device in snap.devices:
        device.name, device.memory.total_bytes = "AMD Instinct MI325X", 256 * GIB
        device.power.limit_watts = device.power.default_limit_watts = device.power.max_limit_watts = 1000.0
    return snap


# Shipped profile → the healthy node it describes.
NODES = {"h100-8x": nvidia_h100_8x, "h200-8x": nvidia_h200_8x, "mi300x-8x": amd_mi300x_8x, "mi325x-8x": amd_mi325x_8x,
         "mi355x-8x": amd_mi355x_8x}
