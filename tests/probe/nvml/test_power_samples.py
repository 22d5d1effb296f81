"""The mean power since the previous probe, from the driver's power samples (gpudiag/probe/nvml/power_samples.py;
issue 36, item 1), over the fake libnvidia-ml's sample buffer: asked only by a backend that probes again and again,
none on the first probe, absent without an error where there is no newer sample or no buffer, a failure recorded
without failing the GPU."""

from __future__ import annotations

import pynvml
import pytest

from gpudiag.model import ErrorKind
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.backend import NvmlBackend
from gpudiag.probe.nvml.power_samples import covered_us
from tests.support.fakes.fake_nvml import FakeGpu, FakeNode, installed
from tests.support.nvidia_node import sysfs_for

SAMPLES = "nvmlDeviceGetSamples"


def _probes(gpu: FakeGpu, *between, power_samples: bool = True):
    """Probe the lone `gpu` once, then once more after each of `between` (a function changing the fake) has run;
    the snapshots and the fake library."""
    with installed(FakeNode(gpus=[gpu])) as lib:
        backend = NvmlBackend(power_samples=power_samples)
        backend.open(CallTracker())
        devices = [backend.probe_device(0, CallTracker())]
        for change in between:
            change()
            devices.append(backend.probe_device(0, CallTracker()))
        backend.close()
    return devices, lib


def test_the_second_probe_reports_the_mean_of_the_samples_since_the_first():
    gpu = FakeGpu().power_sampled(75_000, 76_000, 77_000)  # idle before the first probe
    (first, second, third), lib = _probes(
        gpu,
        lambda: gpu.power_sampled(195_000, 700_000, 706_000, 699_000),  # the load begins
        lambda: gpu.power_sampled(700_500, 701_500))
    assert (first.power.average_watts, first.power.average_seconds) == (None, None)
    assert second.power.average_watts == pytest.approx((195 + 700 + 706 + 699) / 4)
    assert second.power.average_seconds == pytest.approx(4 * 0.020)  # from the first probe's newest sample
    assert (third.power.average_watts, third.power.average_seconds) == (pytest.approx(701.0), pytest.approx(0.040))
    assert second.power.draw_watts == 74.312  # the driver's own reading stays beside it
    assert lib.calls[SAMPLES] == 2 * 3  # pynvml asks twice per read: the count, then the samples
    assert not first.errors and not second.errors and not third.errors


def test_the_first_probe_asks_for_the_whole_buffer_and_reports_no_mean():
    gpu = FakeGpu().power_sampled(*[80_000] * 120)
    (first,), lib = _probes(gpu)
    assert first.power.average_watts is None and first.power.average_seconds is None
    assert lib.calls[SAMPLES] == 2 and not first.errors


def test_no_sample_newer_than_the_last_is_no_mean_and_no_error():
    gpu = FakeGpu().power_sampled(80_000)
    (_, second), lib = _probes(gpu, lambda: None)  # NVML_ERROR_NOT_FOUND: nothing sampled since
    assert (second.power.average_watts, second.power.average_seconds) == (None, None)
    assert second.errors == [] and second.reachable and second.power.draw_watts == 74.312
    assert lib.calls[SAMPLES] == 3  # the second read stops at NOT_FOUND


def test_an_empty_buffer_at_the_first_probe_makes_the_next_one_a_first_probe():
    gpu = FakeGpu()
    (first, second, third), _ = _probes(gpu, lambda: gpu.power_sampled(300_000, 310_000),
                                        lambda: gpu.power_sampled(500_000))
    assert first.power.average_watts is None and second.power.average_watts is None  # no baseline until then
    assert third.power.average_watts == 500.0 and third.power.average_seconds == pytest.approx(0.020)
    assert not first.errors and not second.errors


@pytest.mark.parametrize("how", ["not_supported", "function_not_found"])
def test_a_gpu_or_driver_without_the_buffer_has_no_mean_and_no_error(how):
    gpu = FakeGpu().power_sampled(80_000)
    node = FakeNode(gpus=[gpu])
    if how == "not_supported":
        gpu.unsupported.add(SAMPLES)
    else:
        node.missing_symbols.add(SAMPLES)
    with installed(node):
        backend = NvmlBackend(power_samples=True)
        backend.open(CallTracker())
        devices = [backend.probe_device(0, CallTracker()) for _ in range(2)]
        gpu.power_sampled(90_000)
        devices.append(backend.probe_device(0, CallTracker()))
        backend.close()
    for device in devices:
        assert device.power.average_watts is None and device.power.average_seconds is None
        assert device.errors == [] and device.power.draw_watts == 74.312


def test_a_failing_read_is_recorded_and_the_gpu_still_reported():
    gpu = FakeGpu().power_sampled(80_000)
    gpu.failures[SAMPLES] = pynvml.NVML_ERROR_NO_PERMISSION
    (first, second), _ = _probes(gpu, lambda: gpu.power_sampled(90_000))
    for device in (first, second):
        assert device.reachable and device.power.average_watts is None and device.power.draw_watts == 74.312
        (error,) = device.errors
        assert error.source == "nvml.nvmlDeviceGetSamples" and error.kind is ErrorKind.NO_PERMISSION


def test_a_one_shot_backend_makes_no_samples_call():
    gpu = FakeGpu().power_sampled(80_000)
    (first, second), lib = _probes(gpu, lambda: gpu.power_sampled(90_000), power_samples=False)
    assert lib.calls[SAMPLES] == 0
    assert first.power.average_watts is None and second.power.average_watts is None


def test_samples_of_another_value_type_are_read_from_its_member():
    gpu = FakeGpu(power_sample_type=pynvml.NVML_VALUE_TYPE_DOUBLE).power_sampled(80_000)
    (_, second), _ = _probes(gpu, lambda: gpu.power_sampled(412_500, 413_500))
    assert second.power.average_watts == pytest.approx(413.0)


def test_a_buffer_that_ran_over_between_probes_covers_only_what_it_held():
    gpu = FakeGpu().power_sampled(80_000)

    def fifteen_seconds_later():  # the driver kept its last 120 samples (2.4 s) of the 15 s since
        gpu.power_sampled(*[600_000] * 750)
        del gpu.power_samples[:-120]

    (_, second), _ = _probes(gpu, fifteen_seconds_later)
    assert second.power.average_watts == 600.0
    assert second.power.average_seconds == pytest.approx(120 * 0.020)
    assert covered_us(1_000, [1_020, 1_040, 1_060]) == 60  # no gap: from the last one seen
    assert covered_us(1_000, [9_020, 9_040, 9_060]) == 60  # a gap: the held samples' own span
    assert covered_us(1_000, [9_000]) == 8_000  # one sample: nothing to tell a gap by


def test_another_gpu_at_the_same_index_starts_afresh():
    gpu = FakeGpu().power_sampled(80_000)

    def swapped():
        gpu.uuid = "GPU-0d9c8b7a-0000-4000-8000-000000000001"
        gpu.power_sampled(90_000)

    (_, second), _ = _probes(gpu, swapped)
    assert second.power.average_watts is None


def test_a_collector_that_asks_for_them_reports_the_mean_from_its_second_collection(tmp_path):
    node = FakeNode.hgx_h200(2)
    for gpu in node.gpus:
        gpu.power_sampled(80_000)
    sysfs_for(node, tmp_path)
    with installed(node) as lib:
        with Collector(CollectOptions(root=tmp_path, power_samples=True)) as collector:
            first = collector.collect()
            node.gpus[0].power_sampled(650_000, 660_000)
            node.gpus[1].power_sampled(100_000)
            second = collector.collect()
        samples_calls = lib.calls[SAMPLES]
        lib.calls.clear()
        with Collector(CollectOptions(root=tmp_path)) as one_shot:  # what `gpudiag check` builds
            checked = one_shot.collect()
    assert [d.power.average_watts for d in first.devices] == [None, None]
    assert [d.power.average_watts for d in second.devices] == [655.0, 100.0]
    assert [d.power.average_seconds for d in second.devices] == [pytest.approx(0.04), pytest.approx(0.02)]
    assert samples_calls == 2 * 2 + 2 * 2
    assert lib.calls[SAMPLES] == 0 and [d.power.average_watts for d in checked.devices] == [None, None]


def test_a_backend_given_is_not_used_where_the_options_ask_for_power_samples(tmp_path):
    from gpudiag.probe.nvml.backend import NvmlBackend
    from gpudiag.probe.vendor_backends import nvidia_backends

    node = FakeNode.hgx_h200(1)
    sysfs_for(node, tmp_path)
    with installed(node):
        given = NvmlBackend()
        (chosen,) = nvidia_backends(CollectOptions(root=tmp_path, nvml_backend=given, power_samples=True))
        assert chosen is not given and chosen.power_samples
        assert nvidia_backends(CollectOptions(root=tmp_path, nvml_backend=given))[0] is given
