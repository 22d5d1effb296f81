"""A snapshot reduced to what a golden baseline holds (gpudiag.expect.baseline): the same reduction makes the golden
file (`gpudiag baseline`) and the "now" side of every `baseline.*` comparison, so the two can only differ by the
node."""

from __future__ import annotations

from typing import Optional

from gpudiag.expect.baseline import GpuBaseline, NodeBaseline, PeerBaseline
from gpudiag.checks.common import PhysicalGpu, physical_devices, physical_gpus
from gpudiag.checks.pcie import LinkFacts
from gpudiag.model import NodeSnapshot


def _links(gpu: PhysicalGpu) -> tuple[Optional[int], Optional[list[str]]]:
    if gpu.device is None or not gpu.device.links:
        return None, None
    up = [link for link in gpu.device.links if link.up]
    return len(up), sorted(link.remote_pci_bus_id for link in up if link.remote_pci_bus_id)


def _partitions(snapshot: NodeSnapshot, gpu: PhysicalGpu) -> Optional[int]:
    """How many logical GPUs this physical GPU shows as; None where the GPU is not partitioned this way."""
    if gpu.device is None or gpu.device.physical_pci_bus_id is None:
        return None
    return sum(1 for d in snapshot.devices if d.physical_pci_bus_id == gpu.device.physical_pci_bus_id)


def _gpu(snapshot: NodeSnapshot, gpu: PhysicalGpu, bus_id: str) -> GpuBaseline:
    device, pci = gpu.device, gpu.pci
    # Capability, not the trained link: a GPU in a low power state downshifts (pcie_power); a baseline must not
    # record that.
    facts = LinkFacts.of(gpu)
    links_up, remotes = _links(gpu)
    vendor = device.vendor if device is not None else pci.vendor  # type: ignore[union-attr]
    numa = device.numa_node if device is not None and device.numa_node is not None else (pci.numa_node if pci else None)
    return GpuBaseline(
        pci_bus_id=bus_id, vendor=vendor, index=device.index if device else None,
        model=device.name if device else None,
        pcie_max_generation=facts.gpu_generation, pcie_max_width=facts.gpu_width,
        slot_max_generation=facts.slot_generation, slot_max_width=facts.slot_width,
        numa_node=numa, links_up=links_up, link_remotes=remotes,
        vbios_version=(device.vbios_version or None) if device else None,
        firmware_versions=dict(device.firmware_versions) if device else {},
        compute_partition=device.compute_partition if device else None,
        memory_partition=device.memory_partition if device else None,
        partitions=_partitions(snapshot, gpu),
        mig_enabled=device.mig_enabled if device else None,
    )


def _peers(snapshot: NodeSnapshot) -> list[PeerBaseline]:
    bus_of = {d.index: d.pci_bus_id for d in physical_devices(snapshot) if d.pci_bus_id}
    peers = []
    for peer in snapshot.peers:
        a, b = bus_of.get(peer.gpu_a), bus_of.get(peer.gpu_b)
        if a and b:  # pairs among logical partitions stand for no physical path of their own
            first, second = sorted((a, b))
            peers.append(PeerBaseline(first, second, peer.path, peer.link_count))
    return sorted(peers, key=lambda p: (p.pci_bus_id_a, p.pci_bus_id_b))


def baseline_of(snapshot: NodeSnapshot) -> NodeBaseline:
    gpus = [_gpu(snapshot, gpu, gpu.pci_bus_id) for gpu in physical_gpus(snapshot) if gpu.pci_bus_id]
    drivers = {b.name: b.driver_version for b in snapshot.backends if b.available and b.driver_version}
    return NodeBaseline(recorded_from=snapshot.hostname, recorded_at=snapshot.collected_at,
                        gpudiag_version=snapshot.gpudiag_version, driver_versions=drivers,
                        gpus=sorted(gpus, key=lambda g: g.pci_bus_id), peers=_peers(snapshot))
