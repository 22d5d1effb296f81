"""`gpudiag` as a process of its own over a fake HGX H200 node whose GPUs' process lists are live
(tests/support/screen.py), with the fake screen worker in place of the real one, for the end-to-end screening tests
and the bench's --fake mode:

    python -m tests.support.screen_node ROOT REGISTRY GPUS -- <gpudiag arguments>

ROOT gets the node's sysfs tree (tests/nvidia_node.py), REGISTRY the processes each GPU lists: the fake workers
register themselves there while their context exists, and a test's "job" does the same with its own PID. The fake
workers read their configuration from GPUDIAG_TEST_SCREEN (tests/support/screen_worker.py); `fake_config` builds one
that matches this node.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpudiag.model import normalize_pci_bus_id
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.screen import WORKER, LiveProcesses

MIB = 1024**2


def fake_node(registry: Path, count: int) -> FakeNode:
    node = FakeNode.hgx_h200(count)
    for gpu in node.gpus:
        gpu.compute_processes = LiveProcesses(registry, normalize_pci_bus_id(gpu.bus_id))
    return node


def fake_config(registry: Path, count: int, **changes) -> dict:
    """The fake worker's configuration for this node: its GPUs as the CUDA runtime would name them, memory as NVML
    reports it (so that the worker's context measures what `context_bytes` says), small test buffers."""
    node = FakeNode.hgx_h200(count)
    config = {"vendor": "nvidia", "registry": str(registry), "context_bytes": 520 * MIB, "budget_cap_bytes": 4 * MIB,
              "devices": [{"pci_bus_id": normalize_pci_bus_id(g.bus_id).upper(), "total_bytes": g.memory_total,
                           "reserved_bytes": g.memory_reserved} for g in node.gpus]}
    config.update(changes)
    return config


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    (root, registry, count), args = argv[:separator], argv[separator + 1:]
    node = fake_node(Path(registry), int(count))
    if not (Path(root) / "sys").exists():  # one tree for the node, however many gpudiag runs look at it
        fake_root(Path(root), node)
    fake = installed(node)  # kept referenced: a collected context manager would restore pynvml's state
    fake.__enter__()  # held until the process exits (tests/exporter_node.py says why)
    from gpudiag.active.screen import supervisor

    supervisor.WORKER = list(WORKER)  # the fake worker over the fake runtime, in place of the real one
    from gpudiag.cli.app import main as gpudiag_main

    try:
        return gpudiag_main(args)
    finally:
        del fake


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
