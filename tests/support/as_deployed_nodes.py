"""Every fake node the tests build, by name, for judging each one as the shipped units run gpudiag and as root
(tests/e2e/test_as_deployed.py): the single-fault nodes of both vendors (tests/support/alerting_nodes.py), the 8-GPU
cases of tests/support/checklist_scenarios.py, the nodes with their fabric NICs (tests/support/fabric_nodes.py,
tests/support/rdma_tree*.py) with the NIC faults of tests/probe/network/test_end_to_end.py, and the AMD variants of
tests/support/fakes/amd_node.py (other parts, SR-IOV, partitions, the amdgpu sysfs backend without libamd_smi.so).

A node is two things: its tree (written once, as root, under a root directory) and its fake vendor library (a Python
object the gpudiag process installs over pynvml/amdsmi). `make(root)` writes the tree and returns the library's node;
`make(None)` only returns the node, for the process that runs gpudiag over a tree another process wrote.

Also a runnable script, for running gpudiag over one such node as a process of its own (as any user):

    python -m tests.support.as_deployed_nodes NODE ROOT -- <gpudiag arguments>

It installs the node's fake library (and reports the other vendor's library missing, so that no library of the test
machine's own is found), makes the probe read the node's own fake systemd journal where it has one, and runs the
CLI. libamd_smi.so reads the bad-page threshold and the CPER records from debugfs, which only root
may enter (fs/debugfs/inode.c DEBUGFS_DEFAULT_MODE 0700): the fake answers it only where ROOT/sys/kernel/debug can be
entered by this process (tests/support/as_deployed.py gives the tree that directory with the kernel's mode).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tests.support import alerting_nodes, fabric_nodes, rdma_tree
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes import amd_node, journalctl
from tests.support.fakes.fake_nvml import FakeNode

NVIDIA, AMD = "nvidia", "amd"
JOURNALCTL = "usr/bin/journalctl"  # a node's fake journalctl, under its root (the probe runs none under --root)


@dataclass(frozen=True)
class DeployedNode:
    name: str
    vendor: str  # whose fake library serves the GPUs
    make: Callable[[Optional[Path]], object]  # (root or None) -> the fake library's node; with a root, the tree too
    args: tuple[str, ...] = ()  # what the node is judged against (a profile, -p overrides)


# -- the single-fault nodes and the 8-GPU cases ------------------------------------------------------------------


def _alerting(scenario: alerting_nodes.Scenario) -> DeployedNode:
    def make(root: Optional[Path]):
        return alerting_nodes.build(scenario, root)[0] if root is not None else alerting_nodes.node_of(scenario)

    return DeployedNode(scenario.name, scenario.vendor, make)


def _hgx8(lost: Optional[int] = None) -> Callable[[Optional[Path]], object]:
    """tests/support/checklist_scenarios.py's 8x H200 (nvidia_uvm loaded, its NICs: as the profiles require); `lost`:
    that GPU fell off the bus before the first collection, with its Xid 79 in the log."""

    def make(root: Optional[Path]):
        node = FakeNode.hgx_h200(8)
        kmsg = ()
        if lost is not None:
            node.gpus[lost].lost = True
            kmsg = (xid_line(2, 41_000_000, node.gpus[lost].bus_id, 79),)
        if root is not None:
            fabric_nodes.with_nics(root, node).tree.sys.add_kmsg(kmsg)
        return node

    return make


THIS_BOOT = "0f9a3c2e-4b1d-4e6f-8a7b-9c0d1e2f3a4b"  # /proc/sys/kernel/random/boot_id as the kernel prints it
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _xid79_in_three_boots(root: Optional[Path]):
    """GPU 1 fell off the bus in this boot (its Xid 79 in the log, NVML still answering) and in the two boots before,
    which only the systemd journal remembers (tests/support/fakes/journalctl.py: journald's modes): a fault that came
    back after the reboots that should have cleared it, rma for whoever reads the journal
    (tests/probe/kernel_log/test_boot_history.py)."""
    node = FakeNode.hgx_h200(2)
    if root is not None:
        tree = fake_root(root, node, kmsg=(xid_line(2, 41_000_000, node.gpus[1].bus_id, 79),))
        tree.write("proc/sys/kernel/random/boot_id", THIS_BOOT)
        journalctl.write(root / JOURNALCTL, root / "var/log/journal/5c1e2f3a00004000800000000000001a/system.json",
                         {"b1" * 16: [XID_79], "b2" * 16: [XID_79]}, THIS_BOOT.replace("-", ""), journald_modes=True)
    return node


# -- the nodes with their fabric NICs -----------------------------------------------------------------------------


def _h200(fault: Optional[Callable[[rdma_tree.Node], None]] = None, roce: bool = False, **ib):
    def make(root: Optional[Path]):
        node, fabric = fabric_nodes.hgx_h200(root, roce=roce, **ib)
        if fabric is not None and fault is not None:
            fault(fabric)
        return node

    return make


def _acs_redirect_on_switch(fabric: rdma_tree.Node) -> None:
    """The switch between GPU 0 and mlx5_0 with ACS redirect on (its three ports): root reads a warning there."""
    pair = fabric.pairs[0]
    for port in (pair.switch_up, pair.gpu_down, pair.nic_down):
        fabric.tree.set_config(port, rdma_tree.config_space(0x1000, 0xC030, rdma_tree.ACS_CTRL_REDIRECT))


def _roce_interface_down(fabric: rdma_tree.Node) -> None:
    """mlx5_4's port ACTIVE but its interface administratively down: network.nics fails it (operstate)."""
    nic = fabric.pairs[4].nic
    (ifname,) = nic.netdevs
    for name, text in (("operstate", "down"), ("carrier", "0")):
        path = fabric.tree.sys.path(f"sys/class/net/{ifname}/{name}")
        path.write_text(text + "\n")


def _amd_fabric(builder) -> Callable[[Optional[Path]], object]:
    return lambda root: builder(root)[0]


# -- the AMD variants ---------------------------------------------------------------------------------------------


def _amd(base: Callable[[], amd_node.FakeAmdNode], *knobs: Callable[[amd_node.FakeAmdNode], None]):
    def make(root: Optional[Path]):
        node = base()
        for knob in knobs:
            knob(node)
        if root is not None:
            alerting_nodes.amd_tree(root, node)
        return node

    return make


def _without_libamd_smi(node: amd_node.FakeAmdNode) -> None:
    node.library_present = False  # the amdgpu sysfs backend judges the node


NODES: dict[str, DeployedNode] = {n.name: n for n in [
    *(_alerting(s) for s in alerting_nodes.SCENARIOS),
    DeployedNode("nvidia-8x-gpu-lost", NVIDIA, _hgx8(lost=4), ("--profile", "h200-8x")),
    DeployedNode("nvidia-8x-profile-mismatch", NVIDIA, _hgx8(), ("--profile", "h100-8x")),
    # Its earlier boots come from a fake journalctl, a Python program run three times within the collection's
    # deadline: on a loaded 2-core CI machine that took past the 3 s the other nodes are given (CI of e1827c1: root
    # judged fail/reboot, the history cut short), so this node's deadline is its own (the last --timeout wins).
    DeployedNode("nvidia-xid79-in-three-boots", NVIDIA, _xid79_in_three_boots, ("--timeout", "30")),
    DeployedNode("h200-ib", NVIDIA, _h200(), ("--profile", "h200-8x")),
    DeployedNode("h200-ib-acs-redirect", NVIDIA, _h200(_acs_redirect_on_switch)),
    DeployedNode("h200-ib-port-down", NVIDIA, _h200(lambda n: rdma_tree.port_down(n, "mlx5_4"))),
    DeployedNode("h200-ib-half-rate", NVIDIA, _h200(lambda n: rdma_tree.half_rate(n, "mlx5_4"))),
    DeployedNode("h200-ib-link-errors", NVIDIA,
                 _h200(lambda n: rdma_tree.link_errors(n, "mlx5_4", link_downed=4, symbol_error=65535)),
                 ("-p", "nic_symbol_error_fail_per_second=0.001")),
    DeployedNode("h200-ib-firmware-outlier", NVIDIA, _h200(lambda n: rdma_tree.firmware(n, "mlx5_4", "28.39.1002"))),
    DeployedNode("h200-ib-nic-elsewhere", NVIDIA, _h200(nic_elsewhere=3)),
    DeployedNode("h200-ib-no-peermem", NVIDIA, _h200(peermem=False)),
    DeployedNode("h200-roce", NVIDIA, _h200(roce=True)),
    DeployedNode("h200-roce-interface-down", NVIDIA, _h200(_roce_interface_down, roce=True)),
    DeployedNode("mi300x-thor2", AMD, _amd_fabric(fabric_nodes.mi300x_thor2), ("--profile", "mi300x-8x")),
    DeployedNode("mi355x-pollara", AMD, _amd_fabric(fabric_nodes.mi355x_pollara)),
    DeployedNode("mi325x", AMD, _amd(lambda: amd_node.mi325x_node(2))),
    DeployedNode("mi355x", AMD, _amd(lambda: amd_node.mi355x_node(2))),
    DeployedNode("mi250x", AMD, _amd(amd_node.mi250x_node)),
    DeployedNode("mi300x-vf", AMD, _amd(lambda: amd_node.vf_guest(amd_node.mi300x_node(2)))),
    DeployedNode("mi300x-cpx", AMD, _amd(lambda: amd_node.mi300x_node(2), amd_node.cpx_mode)),
    DeployedNode("mi300x-in-tree-amdgpu", AMD, _amd(lambda: amd_node.mi300x_node(2), amd_node.in_tree_amdgpu)),
    DeployedNode("mi300x-ras-inaccessible", AMD,
                 _amd(lambda: amd_node.mi300x_node(2), lambda n: amd_node.ras_inaccessible(n, 1))),
    # A fatal CPER record (issue 32, item 9): amdsmi reads the ring from debugfs, root's alone; root-facts records it.
    DeployedNode("mi300x-fatal-cper", AMD,
                 _amd(lambda: amd_node.mi300x_node(2), lambda n: amd_node.fatal_cper(n, 1, afids=(19,)))),
    DeployedNode("mi300x-sysfs-backend", AMD, _amd(lambda: amd_node.mi300x_node(2), _without_libamd_smi)),
    DeployedNode("mi300x-sysfs-backend-faults", AMD,
                 _amd(lambda: amd_node.mi300x_node(2), _without_libamd_smi,
                      lambda n: amd_node.uncorrectable_ecc(n, 1), lambda n: amd_node.pending_bad_pages(n, 0))),
]}


def debugfs_enterable(root: Path) -> bool:
    """Whether this process may enter ROOT/sys/kernel/debug (what libamd_smi needs to read the bad-page threshold)."""
    return os.access(root / "sys/kernel/debug", os.R_OK | os.X_OK)


_INSTALLED: list = []


def install(spec: DeployedNode, root: Path) -> object:
    """Install the node's fake library (and the other vendor's as missing) for the rest of the process: deliberately
    without the context managers' clean-up, as tests/support/exporter_node.py explains (a hung call stays hung)."""
    from tests.support.fakes import fake_nvml_events  # noqa: F401 - registers the event symbols with the fake library
    from tests.support.fakes import fake_amdsmi, fake_nvml

    node = spec.make(None)
    if spec.vendor == NVIDIA:
        fakes = [fake_nvml.installed(node), fake_amdsmi.installed(amd_node.FakeAmdNode(gpus=[], library_present=False))]
    else:
        node.root = debugfs_enterable(root)
        fakes = [fake_nvml.library_missing(), fake_amdsmi.installed(node)]
    for fake in fakes:
        fake.__enter__()
    # Held for the rest of the process: a generator-based context manager nothing refers to is collected at once,
    # and collecting it runs its clean-up (GeneratorExit): the fake library was uninstalled before gpudiag ran.
    _INSTALLED.extend(fakes)
    if (root / JOURNALCTL).exists():
        _journalctl_of_the_node(str(root / JOURNALCTL))
    return node


def _journalctl_of_the_node(program: str) -> None:
    """The probe runs no journalctl under --root (a test tree has no journal): here it runs the node's own."""
    from gpudiag.probe.kernel_log import boot_history

    real = boot_history.read_boot_history

    def with_the_nodes_journal(root, state_dir, current_boot, boot_time, until, journalctl=None):
        return real(root, state_dir, current_boot, boot_time, until, journalctl or program)

    boot_history.read_boot_history = with_the_nodes_journal


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    (name, root), gpudiag_args = argv[:separator], argv[separator + 1:]
    install(NODES[name], Path(root))
    from gpudiag.cli.app import main as gpudiag_main

    return gpudiag_main(gpudiag_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
