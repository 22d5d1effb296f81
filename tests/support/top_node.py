"""Fake nodes for `gpudiag top`'s tests, and a runnable script that runs a gpudiag command over one, for the tests
that need a real process (a terminal under tmux, a pipe):

    python -m tests.support.top_node ROOT nvidia|amd GPUS [--fault GPU] [--no-library] -- <gpudiag arguments>

`--fault GPU` puts one fault on that GPU that the checks fail: on NVIDIA its PCIe link trained at Gen4 x16 in a
Gen5 slot (pcie.link_generation), on AMD its hotspot over the critical limit (thermal.temperature). `--no-library`
installs no fake at all: the process finds no vendor library, so whatever GPU values it shows came through the
service's socket. The fake stays installed until the process exits (as in tests/exporter_node.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode


def nvidia_node(gpus: int, fault: Optional[int] = None) -> FakeNode:
    """An HGX H200 node of `gpus` GPUs; `fault`: that GPU's link trained at Gen4 in its Gen5 slot."""
    node = FakeNode.hgx_h200(gpus)
    if fault is not None:
        node.gpus[fault].pcie_downtrained(4, 16)
    return node


def amd_node_of(gpus: int, fault: Optional[int] = None):
    """An MI300X node of `gpus` GPUs; `fault`: that GPU's hotspot over its critical limit."""
    from tests.support.fakes import amd_node

    node = amd_node.mi300x_node(gpus)
    if fault is not None:
        amd_node.hotspot_over_critical(node, fault)
    return node


def node_root(root: Path, vendor: str, node) -> None:
    """The host's view of `node` under `root`: the GPUs on the PCI bus, the driver (NVIDIA: a kernel log too)."""
    if vendor == "nvidia":
        fake_root(root, node)
        return
    from tests.support.fakes.amdgpu_sysfs_tree import add_amdgpu_node
    from tests.support.sysfs_tree import SysfsTree

    tree = SysfsTree(root)
    add_amdgpu_node(tree, node)
    tree.add_numa_nodes(2)


def installed_fake(vendor: str, node):
    if vendor == "amd":
        from tests.support.fakes.fake_amdsmi import installed
    else:
        from tests.support.fakes.fake_nvml import installed
    return installed(node)


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    own, command = argv[:separator], argv[separator + 1:]
    root, vendor, gpus = Path(own[0]), own[1], int(own[2])
    fault = int(own[own.index("--fault") + 1]) if "--fault" in own else None
    node = (amd_node_of if vendor == "amd" else nvidia_node)(gpus, fault)
    if not (root / "sys").exists():  # a service over the same node (tests.support.exporter_node) may have made it
        node_root(root, vendor, node)
    if "--no-library" in own:  # neither library loads, even on a machine that has them
        from tests.support.fakes.amd_node import mi300x_node
        from tests.support.fakes.fake_amdsmi import installed as amd_installed
        from tests.support.fakes.fake_nvml import library_missing

        absent = mi300x_node(1)
        absent.library_present = False
        fakes = [library_missing(), amd_installed(absent)]
    else:
        fakes = [installed_fake(vendor, node)]
    for fake in fakes:
        fake.__enter__()  # held until the process exits
    from gpudiag.cli.app import main as gpudiag_main

    return gpudiag_main([*command, "--root", str(root)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
