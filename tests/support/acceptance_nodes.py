"""Healthy 8-GPU nodes of the SKUs gpudiag ships profiles for, grown from tests/support/snapshots.py's 2x H200 and 8x
MI300X: each builder returns a fresh snapshot for a test to break."""

from __future__ import annotations

import copy

from gpudiag.model import NodeSnapshot, PeerLink
from tests.support.snapshots import GIB, amd_mi300x_node, nvidia_h200_node

H200_8X_BUS_IDS = ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
                   "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0")


def nvidia_h200_8x() -> NodeSnapshot:
    """An HGX H200: eight copies of the fixture's GPU 0 at their own bus IDs, NVLink between every pair."""
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
    return snap


def nvidia_h100_8x() -> NodeSnapshot:
    snap = nvidia_h200_8x()
    for device in snap.devices:
        device.name, device.memory.total_bytes = "NVIDIA H100 80GB HBM3", 80 * GIB
    return snap


def amd_mi300x_8x() -> NodeSnapshot:
    return amd_mi300x_node()


def amd_mi355x_8x() -> NodeSnapshot:
    snap = amd_mi300x_node()
    for device in snap.devices:
        device.name, device.architecture, device.memory.total_bytes = "AMD Instinct MI355X", "gfx950", 288 * GIB
        device.power.limit_watts = device.power.default_limit_watts = device.power.max_limit_watts = 1400.0
    for pci in snap.pci_gpus:
        pci.bar_sizes_bytes[0] = 512 * GIB
    return snap


def amd_mi325x_8x() -> NodeSnapshot:
    snap = amd_mi300x_node()
    for device in snap.devices:
        device.name, device.memory.total_bytes = "AMD Instinct MI325X", 256 * GIB
        device.power.limit_watts = device.power.default_limit_watts = device.power.max_limit_watts = 1000.0
    return snap


# Shipped profile → the healthy node it describes.
NODES = {"h100-8x": nvidia_h100_8x, "h200-8x": nvidia_h200_8x, "mi300x-8x": amd_mi300x_8x, "mi325x-8x": amd_mi325x_8x,
         "mi355x-8x": amd_mi355x_8x}
