"""Board constants (maximum clocks, temperature thresholds) read once per GPU by an NVML backend that stays open, as
the exporter's and the service's does (gpudiag/probe/nvml/constants.py), over the fake libnvidia-ml."""

from __future__ import annotations

import pynvml
import pytest

from gpudiag.model import ErrorKind
from gpudiag.probe.base import DeviceLost
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.backend import NvmlBackend
from gpudiag.probe.nvml.constants import BoardConstants
from tests.support.fakes.fake_nvml import FakeGpu, FakeNode, installed

MAX_CLOCK, THRESHOLD = "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetTemperatureThreshold"
SM = pynvml.NVML_CLOCK_SM
SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN


def _probe(backend: NvmlBackend):
    return backend.probe_device(0, CallTracker())


def test_an_open_backend_asks_the_constants_once_and_reports_them_every_time():
    node = FakeNode(gpus=[FakeGpu()])
    with installed(node) as lib:
        backend = NvmlBackend()
        backend.open(CallTracker())
        first, second = _probe(backend), _probe(backend)
        backend.close()
    assert (lib.calls[MAX_CLOCK], lib.calls[THRESHOLD]) == (3, 4)
    assert lib.calls["nvmlDeviceGetClockInfo"] == 6  # the current clocks are read every time
    for device in (first, second):
        assert (device.clocks.max_sm_mhz, device.clocks.max_memory_mhz) == (1980, 3201)
        gpu = device.temperatures["gpu"]
        assert (gpu.slowdown_celsius, gpu.shutdown_celsius, gpu.max_operating_celsius) == (89.0, 92.0, 87.0)
        assert device.temperatures["memory"].max_operating_celsius == 95.0


def test_another_gpu_at_the_same_index_is_read_afresh():
    gpu = FakeGpu()
    with installed(FakeNode(gpus=[gpu])) as lib:
        backend = NvmlBackend()
        backend.open(CallTracker())
        _probe(backend)
        gpu.uuid, gpu.max_clocks[SM], gpu.thresholds[SLOWDOWN] = "GPU-0d9c8b7a-0000-4000-8000-000000000001", 1755, 85
        swapped = _probe(backend)
        backend.close()
    assert (swapped.clocks.max_sm_mhz, swapped.temperatures["gpu"].slowdown_celsius) == (1755, 85.0)
    assert (lib.calls[MAX_CLOCK], lib.calls[THRESHOLD]) == (6, 8)


def test_two_gpus_reporting_one_uuid_each_get_their_own_values():
    node = FakeNode.hgx_h200(2)
    node.gpus[1].uuid = node.gpus[0].uuid  # a fault gpudiag reports; the clocks must still be each GPU's own
    node.gpus[1].max_clocks[SM] = 1755
    with installed(node) as lib:
        backend = NvmlBackend()
        backend.open(CallTracker())
        for _ in range(2):
            devices = [backend.probe_device(index, CallTracker()) for index in (0, 1)]
            assert [d.clocks.max_sm_mhz for d in devices] == [1980, 1755]
        backend.close()
    assert lib.calls[MAX_CLOCK] == 2 * 3


def _lost_at_once(gpu: FakeGpu, lost: bool) -> None:
    gpu.lost = lost  # every call, the handle's first: nothing of the GPU is read


def _lost_after_identity(gpu: FakeGpu, lost: bool) -> None:
    if lost:
        gpu.failures["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_GPU_IS_LOST  # the batch after identity
    else:
        del gpu.failures["nvmlDeviceGetFieldValues"]


@pytest.mark.parametrize("lose", [_lost_at_once, _lost_after_identity])
def test_a_gpu_that_was_lost_is_read_afresh_when_it_answers_again(lose):
    gpu = FakeGpu()
    with installed(FakeNode(gpus=[gpu])) as lib:
        backend = NvmlBackend()
        backend.open(CallTracker())
        _probe(backend)
        lose(gpu, True)
        with pytest.raises(DeviceLost):
            _probe(backend)
        lose(gpu, False)
        gpu.max_clocks[SM] = 1830  # back from a reset, reflashed
        back = _probe(backend)
        backend.close()
    assert back.clocks.max_sm_mhz == 1830
    assert lib.calls[MAX_CLOCK] == 6


def test_a_reopened_library_reads_them_again():
    with installed(FakeNode(gpus=[FakeGpu()])) as lib:
        backend = NvmlBackend()
        for _ in range(2):
            backend.open(CallTracker())
            _probe(backend)
            backend.close()
    assert lib.calls[MAX_CLOCK] == 6


def test_a_failed_call_is_asked_and_reported_again_at_every_probe():
    gpu = FakeGpu(failures={MAX_CLOCK: pynvml.NVML_ERROR_NO_PERMISSION})
    with installed(FakeNode(gpus=[gpu])) as lib:
        backend = NvmlBackend()
        backend.open(CallTracker())
        probes = [_probe(backend), _probe(backend)]
        backend.close()
    assert lib.calls[MAX_CLOCK] == 6
    for device in probes:
        assert device.clocks.max_sm_mhz is None
        failed = [e for e in device.errors if e.source == f"nvml.{MAX_CLOCK}"]
        assert len(failed) == 3 and {e.kind for e in failed} == {ErrorKind.NO_PERMISSION}


# -- the cache alone, with a recording stand-in for NvmlCall and a clock of the test's own ----------------------


class RecordingCall:
    def __init__(self, answers: dict):
        self.answers, self.asked = answers, []

    def __call__(self, function, handle, *args):
        self.asked.append((function, handle, *args))
        return self.answers.get((function, *args))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_value_is_asked_again_once_it_is_max_age_old():
    clock, call = Clock(), RecordingCall({(MAX_CLOCK, SM): 1980})
    constants = BoardConstants(clock)
    assert constants.read(call, 0, "GPU-a", MAX_CLOCK, "handle-1", SM) == 1980
    clock.now += BoardConstants.MAX_AGE_SECONDS - 1
    call.answers[(MAX_CLOCK, SM)] = 1755
    assert constants.read(call, 0, "GPU-a", MAX_CLOCK, "handle-2", SM) == 1980  # a new handle, the same GPU
    clock.now += 1
    assert constants.read(call, 0, "GPU-a", MAX_CLOCK, "handle-2", SM) == 1755
    assert len(call.asked) == 2


def test_only_the_constant_calls_of_a_gpu_with_a_uuid_are_kept():
    call = RecordingCall({(MAX_CLOCK, SM): 1980, ("nvmlDeviceGetClockInfo", SM): 345})
    constants = BoardConstants(Clock())
    for _ in range(2):
        constants.read(call, 0, "GPU-a", "nvmlDeviceGetClockInfo", "h", SM)
        constants.read(call, 0, None, MAX_CLOCK, "h", SM)
        constants.read(call, 0, "", MAX_CLOCK, "h", SM)
    assert len(call.asked) == 6


def test_forgetting_one_gpu_keeps_the_others():
    call = RecordingCall({(MAX_CLOCK, SM): 1980})
    constants = BoardConstants(Clock())
    for index, uuid in ((0, "GPU-a"), (1, "GPU-b")):
        constants.read(call, index, uuid, MAX_CLOCK, f"h{index}", SM)
    constants.forget(0)
    for index, uuid in ((0, "GPU-a"), (1, "GPU-b")):
        constants.read(call, index, uuid, MAX_CLOCK, f"h{index}", SM)
    assert call.asked == [(MAX_CLOCK, "h0", SM), (MAX_CLOCK, "h1", SM), (MAX_CLOCK, "h0", SM)]


def test_a_driver_inventing_uuids_cannot_grow_it_without_bound():
    call = RecordingCall({(MAX_CLOCK, SM): 1980})
    constants = BoardConstants(Clock())
    for number in range(3 * BoardConstants.MAX_ENTRIES):
        assert constants.read(call, 0, f"GPU-{number}", MAX_CLOCK, "h", SM) == 1980
        assert len(constants._kept) <= BoardConstants.MAX_ENTRIES
