"""A fake NVIDIA node for end-to-end exporter runs: the fake libnvidia-ml (with its event API) plus a matching
sysfs/procfs tree and kernel log under a root directory.

Also a runnable script, for tests that need `gpudiag serve` as a real process (signals, exit codes):

    python -m tests.support.exporter_node ROOT GPUS [--hang SYMBOL] [--driver VERSION] [--downtrain GPU] [--name NAME]
                                  [--lose-while FILE] -- <serve arguments>

GPUS up to 8 are an HGX H200 board; more (the exporter benchmark's 64) sit on made-up buses. `--lose-while FILE`:
the last GPU is lost from the bus while FILE exists (the test makes and removes it), `--name` names it (a JSON
string).

It installs the fake and runs the CLI. Deliberately without the context manager's clean-up: a call hung in the
fake stays hung until the process exits, as a call hung in a real driver would.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from gpudiag.model import normalize_pci_bus_id
from tests.support.fakes import fake_nvml_events  # noqa: F401 - registers the event symbols with the fake library
from tests.support.fakes.fake_nvml import FakeGpu, FakeNode, installed
from tests.support.nvidia_node import sysfs_for
from tests.support.sysfs_tree import SysfsTree


def fake_node(count: int) -> FakeNode:
    """`count` H200s: those of an HGX board up to 8, beyond that on made-up buses (a new PCI domain every 32)."""
    if count <= 8:
        return FakeNode.hgx_h200(count)
    return FakeNode(gpus=[FakeGpu(bus_id=f"{i // 32:08X}:{0x10 + i % 32:02X}:00.0", minor_number=i,
                                  uuid=f"GPU-3f6e2a1b-8c4d-4e5f-9a0b-{i:012x}", serial=f"1654824{i:06d}")
                          for i in range(count)])


def fake_root(root: Path, node: FakeNode, kmsg: tuple[str, ...] = ()) -> SysfsTree:
    """The host view of `node` (tests.support.nvidia_node): its GPUs on the PCI bus, the nvidia module, a kernel log
    with `kmsg` records added."""
    tree = sysfs_for(node, root)
    if kmsg:
        tree.add_kmsg(kmsg)
    return tree


def xid_line(sequence: int, microseconds: int, bus_id: str, code: int) -> str:
    """A kmsg record of an Xid, as the driver writes it (docs/vendor-api.md §11: no function digit in the PCI tag)."""
    tag = normalize_pci_bus_id(bus_id)[:-2]
    return f"4,{sequence},{microseconds},-;NVRM: Xid (PCI:{tag}): {code}, pid=4242, name=python3, Ch 00000008"


def _lose_while(gpu: FakeGpu, flag: Path) -> None:
    def watch() -> None:
        while True:
            gpu.lost = flag.exists()
            time.sleep(0.02)

    threading.Thread(target=watch, name="lose-while", daemon=True).start()


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    own, serve_args = argv[:separator], argv[separator + 1:]
    root, gpus = Path(own[0]), int(own[1])
    node = fake_node(gpus)
    if "--hang" in own:
        node.gpus[-1].hang = own[own.index("--hang") + 1]
    if "--driver" in own:  # another driver release (a node the upgrade missed)
        node.driver_version = own[own.index("--driver") + 1]
    if "--downtrain" in own:  # that GPU's link trained at Gen4 in a Gen5 slot
        node.gpus[int(own[own.index("--downtrain") + 1])].pcie_downtrained(generation=4, width=16)
    if "--name" in own:  # what the driver calls it: text from outside, as hostile as any (JSON: a NUL fits)
        node.gpus[-1].name = json.loads(own[own.index("--name") + 1])
    if "--lose-while" in own:
        _lose_while(node.gpus[-1], Path(own[own.index("--lose-while") + 1]))
    if not (root / "sys").exists():  # a second serve over the same node (tests of two instances) finds it made
        fake_root(root, node)
    fake = installed(node)
    fake.__enter__()  # held in `fake` until the process exits: a collected generator would uninstall it
    from gpudiag.cli.app import main as gpudiag_main

    return gpudiag_main(["serve", "--root", str(root), *serve_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
