"""Every node the tests' fakes build with one fault, and the three noisy cases issue 27 measured, as `gpudiag check`
prints them: what tests/report/test_checklist_budget.py holds to the line budget (docs/checklist.md) and
bench/checklist_lines.py counts.

- SINGLE_FAULT: the single-fault nodes of tests/support/alerting_nodes.py, both vendors (a two-GPU node with one
  fault on GPU 1), and its two healthy nodes.
- ISSUE_CASES: `check --level 2` on an 8x H200 node where libcuda.so.1 is missing (NVML answers, the CUDA driver
  library is not there: a container given only the `utility` capability); an 8x H200 node whose GPU 4 was lost
  before the first collection (NVML_ERROR_GPU_IS_LOST from the first call, Xid 79 in the log), judged against the
  h200-8x profile as the Slurm hook judges it; an 8x H200 node judged against the h100-8x profile.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import tempfile
from pathlib import Path
from typing import Callable, Iterator
from unittest import mock

from tests.support import alerting_nodes, fabric_nodes
from tests.support.exporter_node import xid_line
from tests.support.fakes.fake_nvml import FakeNode

TIMEOUT = "3"  # the probe deadline: a hung GPU's checklist waits for it
SINGLE_FAULT = [s.name for s in alerting_nodes.SCENARIOS]
LOST_GPU = 4


def _check(root: str, *argv: str) -> tuple[int, str]:
    from gpudiag.cli.app import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", "--root", root, "--direct", "--no-color", "--timeout", TIMEOUT, *argv])
    return code, out.getvalue()


@contextlib.contextmanager
def _nvidia(node: FakeNode, kmsg: tuple[str, ...] = ()) -> Iterator[tuple[str, object]]:
    """`node` installed as the NVML library, with its host tree (nvidia_uvm loaded, as the profiles require) and its
    eight ConnectX-7 below the GPUs' switches (tests/support/fabric_nodes.py: the HGX profiles expect them)."""
    from tests.support.fakes.fake_nvml import installed

    with tempfile.TemporaryDirectory() as tmp:
        fabric_nodes.with_nics(Path(tmp), node).tree.sys.add_kmsg(kmsg)
        with installed(node) as lib:
            yield tmp, lib


def single_fault(name: str, *argv: str) -> tuple[int, str]:
    scenario = alerting_nodes.BY_NAME[name]
    if scenario.vendor == "nvidia":
        from tests.support.fakes.fake_nvml import installed
    else:
        from tests.support.fakes.fake_amdsmi import installed
    with tempfile.TemporaryDirectory() as tmp:
        node, tree = alerting_nodes.build(scenario, Path(tmp))
        with installed(node) as lib:
            if scenario.live is not None:  # a fault the exporter would watch arrive: here it is there already
                scenario.live(node, tree, lib)
            return _check(tmp, *argv)


def _without_libcuda(name: str, *args: object, **kwargs: object) -> ctypes.CDLL:
    """ctypes.CDLL on a node without the CUDA driver library (the dynamic loader's own words)."""
    if "libcuda" in str(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")
    return _REAL_CDLL(name, *args, **kwargs)


_REAL_CDLL = ctypes.CDLL


def level2_without_libcuda(*argv: str) -> tuple[int, str]:
    with _nvidia(FakeNode.hgx_h200(8)) as (root, _), mock.patch.object(ctypes, "CDLL", _without_libcuda):
        return _check(root, "--level", "2", *argv)


def gpu_lost_before_first_collection(*argv: str) -> tuple[int, str]:
    node = FakeNode.hgx_h200(8)
    node.gpus[LOST_GPU].lost = True
    with _nvidia(node, kmsg=(xid_line(2, 41_000_000, node.gpus[LOST_GPU].bus_id, 79),)) as (root, _):
        return _check(root, "--profile", "h200-8x", *argv)


def profile_mismatch(*argv: str) -> tuple[int, str]:
    with _nvidia(FakeNode.hgx_h200(8)) as (root, _):
        return _check(root, "--profile", "h100-8x", *argv)


ISSUE_CASES: dict[str, Callable[..., tuple[int, str]]] = {
    "level2-without-libcuda": level2_without_libcuda,
    "gpu-lost-before-first-collection": gpu_lost_before_first_collection,
    "profile-mismatch": profile_mismatch,
}


def checklist(name: str, *argv: str) -> tuple[int, str]:
    """(exit code, the checklist) of a scenario by name, with `argv` added to `gpudiag check`."""
    if name in ISSUE_CASES:
        return ISSUE_CASES[name](*argv)
    return single_fault(name, *argv)


ALL = [*SINGLE_FAULT, *ISSUE_CASES]
