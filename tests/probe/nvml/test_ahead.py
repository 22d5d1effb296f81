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

import pynvml
import pytest

from gpudiag.model import ErrorKind
from gpudiag.model.serialize import to_dict
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.probe.nvml.ahead import read_ahead
from gpudiag.probe.nvml.ahead_answers import AheadAnswers
from gpudiag.probe.nvml.ahead_library import AheadNvml
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
    return NvmlBackend(library=lambda: AheadNvml(answers))


def _ended() -> AheadAnswers:
    """An ahead side that ended before its first frame: every read is the collector's own."""
    reading, writing = os.pipe()
    os.close(writing)
    return AheadAnswers(reading)


def _both_ways(tmp_path, node, answers_of=_ahead) -> tuple:
    """The node collected by the backend alone, then over `answers_of()`: (the first snapshot, the device calls it
    made, the second snapshot, the device calls it made, the answers)."""
    with installed(node) as lib:
        alone = _collect(tmp_path, node)
        calls_alone = dict(lib.device_calls)
        lib.device_calls.clear()
        answers = answers_of()
        ahead = _collect(tmp_path, node, backend=_backend(answers))
        return alone, calls_alone, ahead, dict(lib.device_calls), answers


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
    alone, calls_alone, ahead, calls_ahead, answers = _both_ways(tmp_path, node)
    # the devices, not the host: the host is read anew each time (its load and memory move between the two)
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert answers.made_here == 0 and answers.taken > 20 * len(node.gpus)
    assert not answers.library_here  # the collector's side neither imported pynvml nor opened the library
    # each read made once (the handles too), and none the backend would not make
    assert calls_ahead == calls_alone


def test_an_ahead_side_that_ends_without_a_read_leaves_every_read_to_the_collector(tmp_path):
    """As where the ahead process could not import pynvml, open the library, or was killed: its pipe ends."""
    alone, calls_alone, ahead, calls_ahead, answers = _both_ways(tmp_path, FakeNode.hgx_h200(1), _ended)
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert answers.taken == 0 and answers.made_here > 20 and calls_ahead == calls_alone
    assert answers.library_here  # the collector's side imported pynvml and opened the library itself


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


def test_errors_come_with_pynvmls_code_and_text_whichever_side_made_the_read(tmp_path):
    node = FakeNode.hgx_h200(1)
    node.gpus[0].failures = {"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION,
                             "nvmlDeviceGetSramEccErrorStatus": pynvml.NVML_ERROR_TIMEOUT}
    with installed(node):
        alone = _collect(tmp_path, node)
        answered = _ahead()
        ahead = _collect(tmp_path, node, backend=_backend(answered))
        ended = _ended()
        here = _collect(tmp_path, node, backend=_backend(ended))
    assert answered.made_here == 0 and not answered.library_here
    assert ended.taken == 0 and ended.library_here
    errors = [(e.source, e.kind, e.message) for e in alone.devices[0].errors]
    assert {source for source, *_ in errors} == {"nvml.nvmlDeviceGetPowerUsage", "nvml.nvmlDeviceGetSramEccErrorStatus"}
    assert any("Insufficient Permissions" in message for *_, message in errors)  # pynvml's text for the code
    for snapshot in (ahead, here):
        assert [(e.source, e.kind, e.message) for e in snapshot.devices[0].errors] == errors


def test_a_library_that_will_not_open_is_reported_as_the_backend_reports_it(tmp_path):
    node = FakeNode.hgx_h200(1)
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with installed(node):
        alone = _collect(tmp_path, node)
        answers = _ahead()
        ahead = _collect(tmp_path, node, backend=_backend(answers))
    (expected,) = [b.error for b in alone.backends if b.name == "nvml"]
    (found,) = [b.error for b in ahead.backends if b.name == "nvml"]
    assert expected is not None and "driver is not running" in expected.message
    assert (found.source, found.kind, found.message) == (expected.source, expected.kind, expected.message)
    assert answers.made_here == 0 and not answers.library_here


def test_a_read_whose_answer_cannot_be_sent_is_made_by_the_collector(tmp_path, monkeypatch):
    """The ahead side sends None for a value it cannot make plain (a pointer in it): the collector makes that read
    itself, through pynvml, with the GPU's real handle; the rest still come from the ahead side."""
    from gpudiag.probe.nvml import ahead as ahead_module
    from gpudiag.probe.nvml.frames import Unsendable, plain

    def no_pci_info(value):
        if isinstance(value, pynvml.nvmlPciInfo_t):
            raise Unsendable("as a struct with a pointer in it")
        return plain(value)

    monkeypatch.setattr(ahead_module, "plain", no_pci_info)
    alone, calls_alone, ahead, calls_ahead, answers = _both_ways(tmp_path, FakeNode.hgx_h200(2))
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert answers.library_here and answers.made_here >= 2 and answers.taken > 20 * 2
    pci_reads = [key for key in calls_alone if key[0].startswith("nvmlDeviceGetPciInfo")]
    assert pci_reads and all(calls_ahead[key] == 2 * calls_alone[key] for key in pci_reads)  # made on both sides
