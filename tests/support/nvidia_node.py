"""A whole fake NVIDIA node for collector and CLI tests: the fake NVML library and a matching sysfs tree (the
same GPUs on the PCI bus, driver loaded, versions that agree), so that a healthy node really checks clean."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from gpudiag.model import normalize_pci_bus_id
from tests.support.fakes.fake_nvml import FakeNode
from tests.support.sysfs_tree import SysfsTree



def sysfs_for(node: FakeNode, root: Path, parents: Optional[dict[str, list[str]]] = None) -> SysfsTree:
    """`parents`: the bridges above a GPU (by its bus ID), root port first, as a real node's sysfs nests them
    (sys/devices/pci0000:00/<root port>/…/<GPU>): gpudiag learns a GPU's bridges from that path (probe/pci.py), so a
    PCIe error on a port reaches the GPUs below it. A GPU not named sits on the root complex itself."""
    tree = SysfsTree(root)
    for position, gpu in enumerate(node.gpus):
        first_cpu = 32 * position
        bus_id = normalize_pci_bus_id(gpu.bus_id)
        chain = [normalize_pci_bus_id(b) for b in (parents or {}).get(bus_id, [])]
        place = {"bridges": tuple(chain[:-1]), "upstream": (chain[-1], "32.0 GT/s PCIe", 16)} if chain else {}
        tree.add_pci_gpu(bus_id, local_cpulist=f"{first_cpu}-{first_cpu + 31}", numa_node=gpu.numa_node, **place)
    tree.add_module("nvidia", version=node.driver_version)
    tree.set_proc_nvidia_version(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {node.driver_version}  Tue Sep 24 10:00:00 UTC 2024\n"
    )
    tree.set_kernel_release("6.8.0-45-generic")
    tree.set_cmdline("BOOT_IMAGE=/vmlinuz ro quiet iommu=pt")
    tree.add_kmsg(["6,1,1000,-;Linux version 6.8.0-45-generic"])
    return tree
