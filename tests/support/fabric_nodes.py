"""Whole fake nodes with their GPU fabric NICs: the fake vendor library's GPUs (tests/fakes) placed on the PCI layout of
tests/support/rdma_tree*.py's NIC trees, so that NVML/amdsmi, the PCI bus and /sys/class/infiniband describe the same
node.

- hgx_h200: 8 H200s at the GPU bus IDs of the bare-metal HGX H200 of nccl-tests issue 256 (rdma_tree.HGX_GPUS), each
  with its 400 Gb/s ConnectX-7 below the same PCIe switch — InfiniBand (GPUd's recorded HCAs, counters cleared) or
  RoCE (rdma_tree.h200_roce) — and the nvidia host tree of tests/support/nvidia_node.py (module, /proc version, kernel
  log). The driver is the one the NIC tree's nvidia_peermem and /proc/driver/nvidia/version name (580.65.06).
- mi300x_thor2 / mi355x_pollara: the fake amdsmi MI300X / MI355X nodes (tests/support/fakes/amd_node.py) whose OAMs sit
  where rdma_tree_amd.py puts them, each beside its Broadcom THOR2 / Pensando Pollara 400 NIC, with amdgpu's sysfs.

Each builder returns the fake library's node and writes the tree when given a root; `node_only` callers (a process
that only installs the fake over a tree another process wrote) pass root=None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tests.support import rdma_tree, rdma_tree_amd
from tests.support.fakes.amd_node import FakeAmdNode, mi300x_node, mi355x_node
from gpudiag.model import normalize_pci_bus_id
from tests.support.fakes.fake_nvml import FakeNode
from tests.support.network_nodes import clear_counters

NVIDIA_DRIVER = "580.65.06"  # the NIC trees' nvidia_peermem and /proc/driver/nvidia/version (rdma_tree.hgx_h100_ib)


def _nvml_bus_id(bdf: str) -> str:
    """0000:18:00.0 as NVML prints it: 00000000:18:00.0 (docs/vendor-api.md §1)."""
    return f"0000{bdf.upper()}"


def hgx_h200_node() -> FakeNode:
    node = FakeNode.hgx_h200(8, driver_version=NVIDIA_DRIVER, nvml_version=f"12.{NVIDIA_DRIVER}")
    for gpu, bdf in zip(node.gpus, rdma_tree.HGX_GPUS):
        gpu.bus_id = _nvml_bus_id(bdf)
    return node


def hgx_h200(root: Optional[Path], *, roce: bool = False, **ib) -> tuple[FakeNode, Optional[rdma_tree.Node]]:
    """The fake HGX H200 and (with a root) its tree: 8 GPU/NIC pairs below 8 switches, the BlueField-3 front end on
    the InfiniBand variant; `ib` goes to rdma_tree.hgx_h100_ib (peermem=False, nic_elsewhere=3, ...)."""
    node = hgx_h200_node()
    return node, (with_nics(root, node, roce=roce, **ib) if root is not None else None)


def with_nics(root: Path, node: FakeNode, *, roce: bool = False, **ib) -> rdma_tree.Node:
    """The tree of a fake NVIDIA node whose GPUs each have their NIC below their switch: on the recorded board's
    layout where the GPUs are at its bus IDs (hgx_h200_node), else placed by rdma_tree.constructed_layout (InfiniBand
    only), and the nvidia host tree (module and /proc version of the node's driver, nvidia_uvm, kernel log)."""
    bus_ids = tuple(normalize_pci_bus_id(gpu.bus_id) for gpu in node.gpus)
    if bus_ids != rdma_tree.HGX_GPUS:
        assert not roce, "the RoCE tree is laid out on the recorded board only"
        ib["gpu_bus_ids"] = bus_ids
    tree = clear_counters(rdma_tree.h200_roce(root) if roce else rdma_tree.hgx_h100_ib(root, **ib))
    host = tree.tree.sys
    host.set_proc_nvidia_version(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {node.driver_version}  "
                                 "Release Build  (dvs-builder@U16-I3-B03-4-3)  Mon Jul 28 23:00:00 UTC 2025\n")
    host.set_kernel_release("6.8.0-60-generic")
    host.write("sys/module/nvidia/version", node.driver_version)  # the NIC trees list the module, without one
    if "nvidia_peermem" in host.path("proc/modules").read_text():
        host.write("sys/module/nvidia_peermem/version", node.driver_version)
    host.add_module("nvidia_uvm")
    host.set_cmdline("BOOT_IMAGE=/vmlinuz ro quiet iommu=pt")
    host.add_kmsg(["6,1,1000,-;Linux version 6.8.0-60-generic"])
    for position, gpu in enumerate(node.gpus):  # the GPUs' CPU lists, which the NIC tree leaves out: NVML's
        cpus = sorted(gpu.cpus)
        host.write(f"sys/bus/pci/devices/{bus_ids[position]}/local_cpulist", f"{cpus[0]}-{cpus[-1]}")
    return tree


def _amd_on_fabric(node: FakeAmdNode, pairs: list) -> FakeAmdNode:
    """The OAMs below the switches of the NIC tree's pairs (same bus IDs: rdma_tree_amd.MI300X_GPUS)."""
    by_bdf = {p.gpu: p for p in pairs}
    for gpu in node.gpus:
        pair = by_bdf[gpu.bdf]
        gpu.upstream_port, gpu.bridges = pair.gpu_down, (pair.root_port, pair.switch_up)
    return node


def amd_with_nics(root: Optional[Path], node: FakeAmdNode, builder) -> tuple[FakeAmdNode, Optional[rdma_tree.Node]]:
    """`node`'s OAMs (amdgpu's sysfs, tests/support/fakes/amdgpu_sysfs_tree.py) and `builder`'s NICs (rdma_tree_amd)."""
    from tests.support.alerting_nodes import amd_tree

    # rdma_tree_amd's layout is a function of the GPU bus IDs alone (amd_pair)
    _amd_on_fabric(node, [rdma_tree_amd.amd_pair(gpu, None) for gpu in rdma_tree_amd.MI300X_GPUS])
    if root is None:
        return node, None
    amd_tree(root, node)
    return node, clear_counters(builder(root, gpus=False))


def mi300x_thor2(root: Optional[Path]) -> tuple[FakeAmdNode, Optional[rdma_tree.Node]]:
    return amd_with_nics(root, mi300x_node(), rdma_tree_amd.mi300x_thor2)


def mi355x_pollara(root: Optional[Path]) -> tuple[FakeAmdNode, Optional[rdma_tree.Node]]:
    return amd_with_nics(root, mi355x_node(), rdma_tree_amd.mi355x_pollara)

