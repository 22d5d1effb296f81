"""NVML's reads made ahead (gpudiag/probe/nvml/ahead.py) and given to the collector's backend
(gpudiag/probe/nvml/ahead_answers.py): the collector gets the snapshot its own backend would have read, every read it
makes answered from the ahead side where the ahead side made it (the list of reads in step with the backend's), and
a GPU that hangs or is lost is reported as it always is (its call named, its identity kept), the reads the ahead side
cannot give made by the collector itself.

Here the ahead side runs on a thread of this process over the same fake library (in a check it is a process of its
own, forked first: tests/cli/check/test_forked_collection.py)."""

from __future__ import annotations

import os
import threading

import pytest

from gpudiag.model import ErrorKind
from gpudiag.model.serialize import to_dict
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.probe.nvml.ahead import read_ahead
from gpudiag.probe.nvml.ahead_answers import AheadAnswers, AheadNvml
from gpudiag.probe.nvml.backend import NvmlBackend
from tests.probe.test_split import _steady
from tests.support.fakes.fake_nvml import MiB, FakeGpu, FakeNode, installed
from tests.support.nvidia_node import sysfs_for


def _collect(tmp_path, node, timeout=5.0, backend=None):
    if not (tmp_path / "sys").exists():
        sysfs_for(node, tmp_path)
    options = CollectOptions(root=tmp_path, timeout_seconds=timeout, nvml_backend=backend)
    with Collector(options) as collector:
        return collector.collect()


def _ahead() -> AheadAnswers:
    """The ahead side's reads begun on a thread now, streamed through a pipe as the ahead process streams them."""
    reading, writing = os.pipe()

    def run():
        try:
            read_ahead(writing)
        finally:
            os.close(writing)

    threading.Thread(target=run, name="nvml-ahead", daemon=True).start()
    return AheadAnswers(reading)


def _backend(answers: AheadAnswers) -> NvmlBackend:
    return NvmlBackend(library=lambda nvml: AheadNvml(nvml, answers))


NODES = {
    "HGX H200, a row remap pending": lambda: FakeNode.hgx_h200(2),
    "one GPU without NVLink": lambda: FakeNode(gpus=[FakeGpu()]),
    "an older driver": lambda: FakeNode(
        gpus=[FakeGpu(memory_used=2048 * MiB, compute_processes=[(41, 10 * MiB)])],
        missing_symbols={"nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetCurrentClocksEventReasons",
                         "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3"}),
    "NVLinks down": lambda: FakeNode.hgx_h200(2),
}


@pytest.mark.parametrize("name", NODES)
def test_the_collector_gets_what_its_own_backend_reads_each_read_from_the_ahead_side(tmp_path, name):
    node = NODES[name]()
    if name.startswith("HGX"):
        node.gpus[1].remap_pending = True
    if name == "NVLinks down":
        node.gpus[0].nvlink_down(0, 3)
    with installed(node) as lib:
        alone = _collect(tmp_path, node)
        calls_alone = dict(lib.device_calls)
        lib.device_calls.clear()
        answers = _ahead()
        ahead = _collect(tmp_path, node, backend=_backend(answers))
        calls_ahead = dict(lib.device_calls)
    # the devices, not the host: the host is read anew each time (its load and memory move between the two)
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert answers.made_here == 0 and answers.taken > 20 * len(node.gpus)
    # each read made once, and none the backend would not make; each side takes its own handles
    handles = {key: 2 * count for key, count in calls_alone.items() if key[0].startswith("nvmlDeviceGetHandleBy")}
    assert calls_ahead == {**calls_alone, **handles}


def test_an_ahead_side_that_ends_without_a_read_leaves_every_read_to_the_collector(tmp_path):
    """As where the ahead process could not import pynvml, open the library, or was killed: its pipe ends."""
    node = FakeNode.hgx_h200(1)
    with installed(node) as lib:
        alone = _collect(tmp_path, node)
        calls_alone = dict(lib.device_calls)
        lib.device_calls.clear()
        reading, writing = os.pipe()
        os.close(writing)
        answers = AheadAnswers(reading)
        ahead = _collect(tmp_path, node, backend=_backend(answers))
        calls_ahead = dict(lib.device_calls)
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert answers.taken == 0 and answers.made_here > 20 and calls_ahead == calls_alone


def test_a_gpu_hung_in_the_ahead_side_is_named_and_the_next_one_is_read_by_the_collector(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].hang = "nvmlDeviceGetPowerUsage"
    with installed(node) as lib:
        answers = _ahead()
        snapshot = _collect(tmp_path, node, timeout=1.5, backend=_backend(answers))
        power_reads = lib.device_calls[("nvmlDeviceGetPowerUsage", 0)]
    hung, healthy = snapshot.devices
    assert not hung.reachable and hung.pci_bus_id == "0000:19:00.0"
    (error,) = hung.errors
    assert error.kind is ErrorKind.TIMEOUT and "nvmlDeviceGetPowerUsage" in error.message
    assert healthy.reachable and healthy.power.draw_watts is not None
    assert power_reads == 1  # the hung read was made once, on the ahead side; the collector did not make it again
    assert answers.made_here > 20  # GPU 1's reads: the ahead side never came to them


def test_a_lost_gpu_keeps_its_identity(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].lose_after_calls = 3
    with installed(node):
        answers = _ahead()
        snapshot = _collect(tmp_path, node, backend=_backend(answers))
    lost = snapshot.devices[0]
    assert not lost.reachable and lost.pci_bus_id == "0000:19:00.0"
    assert lost.errors[-1].kind is ErrorKind.GPU_LOST
    assert snapshot.devices[1].reachable and answers.taken > 20


def test_options_that_read_no_link_errors_get_a_backend_of_their_own(tmp_path):
    """The ahead process reads the NVLink error counters, as the forked check's collection (every probe part) asks."""
    from gpudiag.probe.collector import PROBE_PARTS
    from gpudiag.probe.vendor_backends import nvidia_backends

    node = FakeNode.hgx_h200(1)
    sysfs_for(node, tmp_path)
    given = NvmlBackend(link_errors=True)
    without = CollectOptions(root=tmp_path, parts=PROBE_PARTS - {"link_errors"}, nvml_backend=given)
    assert nvidia_backends(without)[0] is not given
    assert nvidia_backends(CollectOptions(root=tmp_path, nvml_backend=given))[0] is given
