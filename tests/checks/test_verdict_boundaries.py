"""Boundaries of the judgements issue 16 found unpinned: the value that just passes and the one that just fails
(or warns), for thermal limits, the stress test, PCIe replays, retired pages and label escaping."""

from __future__ import annotations

import dataclasses

import pytest

from gpudiag.expect import Expectations
from gpudiag.exporter.catalog import MetricSpec
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.model import ErrorKind, ProbeError, Status
from tests.checks.active.test_family import healthy_active, node
from tests.support.snapshots import amd_mi300x_node, for_gpu, nvidia_h200_node, run

F, W, P = Status.FAIL, Status.WARN, Status.PASS

# ---------------------------------------------------------------------------------------------------------------
# thermal.temperature: slowdown 90, shutdown 95, max operating 87 (the H200 fixture's gpu sensor), margin 5


def _temperature(celsius: float, margin: float = 5.0, **limits) -> tuple[Status, str, str]:
    snap = nvidia_h200_node()
    sensor = snap.devices[0].temperatures["gpu"]
    sensor.current_celsius = celsius
    for name, value in limits.items():
        setattr(sensor, name, value)
    result = for_gpu(run(snap, "thermal.temperature", Expectations(thermal_warn_margin_celsius=margin)), 0)
    return result.status, result.action, result.message


@pytest.mark.parametrize("celsius, status", [(84.9, P), (85.0, W), (89.9, W), (90.0, F), (94.9, F), (95.0, F)])
def test_temperature_against_the_slowdown_limit_and_its_margin(celsius, status):
    got, action, message = _temperature(celsius)
    assert got == status
    assert action == {P: "none", W: "watch", F: "drain"}[status]
    if status == W:
        assert "within 5°C of its slowdown limit 90°C" in message


def test_the_message_lists_every_sensor_when_clear_and_only_the_offenders_otherwise():
    assert _temperature(47.0)[2].endswith(": gpu 47°C, memory 52°C")
    warm = _temperature(86.0)[2]
    assert "gpu 86°C within 5°C" in warm and "memory" not in warm


def test_shutdown_limit_fails_even_without_a_slowdown_limit():
    status, _, message = _temperature(95.0, slowdown_celsius=None, max_operating_celsius=None)
    assert status == F and "at/over its shutdown limit 95°C" in message
    assert _temperature(94.9, slowdown_celsius=None, max_operating_celsius=None)[0] == P


@pytest.mark.parametrize("celsius, status", [(86.9, P), (87.0, W), (88.9, W), (89.0, W), (90.0, F)])
def test_above_max_operating_temperature_warns_below_the_slowdown_margin(celsius, status):
    """Margin 1: the warning band below slowdown (89–90) leaves 87–89 to the max operating temperature."""
    got, _, message = _temperature(celsius, margin=1.0)
    assert got == status
    if celsius in (87.0, 88.9):
        assert f"{celsius:g}°C above its max operating temperature 87°C" in message


def test_max_operating_is_the_line_without_a_slowdown_limit():
    # NVIDIA memory sensors have no slowdown limit: reaching max operating fails, its margin warns.
    assert _temperature(87.0, slowdown_celsius=None, shutdown_celsius=None)[0] == F
    assert "max operating limit 87°C" in _temperature(87.0, slowdown_celsius=None, shutdown_celsius=None)[2]
    assert _temperature(82.0, slowdown_celsius=None, shutdown_celsius=None)[0] == W
    assert _temperature(81.9, slowdown_celsius=None, shutdown_celsius=None)[0] == P
    # A sensor without any limit is not judged at all (the memory sensor still is).
    unjudged = _temperature(99.0, slowdown_celsius=None, shutdown_celsius=None, max_operating_celsius=None)
    assert unjudged[0] == P and "gpu 99" not in unjudged[2] and "memory 52°C" in unjudged[2]


# ---------------------------------------------------------------------------------------------------------------
# active.stress: rated max SM clock 1980 MHz, fail ratio 0.5 → 990 MHz; gpu slowdown 87, margin 5


def _stress(mutate, max_sm_mhz=1980, every_gpu=False):
    """GPU 0's active.stress result after `mutate` on its stress figures (on every GPU's with `every_gpu`, so that
    the slow-GPU comparison with its siblings does not decide)."""
    active = healthy_active()
    for device in active.devices if every_gpu else active.devices[:1]:
        mutate(device.stress)
    snap = node(active)
    snap.devices[0].clocks.max_sm_mhz = max_sm_mhz
    return for_gpu(run(snap, "active.stress"), 0)


def _clocks(*mhz):
    def set_clocks(stress):
        for sample, value in zip(stress.samples, mhz):
            sample.sm_clock_mhz = value
    return set_clocks


def test_healthy_stress_passes():
    result = _stress(lambda s: None)
    assert (result.status, result.action) == (P, "none") and "no hardware slowdown" in result.message


@pytest.mark.parametrize("low, status", [(990, P), (989, F)])
def test_stress_clock_drop_boundary_against_the_rated_max(low, status):
    result = _stress(_clocks(1980, 1755, low, 1755, 1755))
    assert result.status == status
    if status == F:
        assert "SM clock fell to 989 MHz of 1980 MHz" in result.message and result.action == "drain"


def test_stress_clock_drop_is_measured_against_the_rated_max_not_the_observed_peak():
    # Every sample at 980 MHz: half of the observed peak it is not, but it is under half the rated 1980 MHz.
    result = _stress(_clocks(980, 980, 980, 980, 980))
    assert result.status == F and "of 1980 MHz" in result.message
    assert result.expected["min_sm_clock_mhz"] == 990
    # Without a rated maximum the observed peak is the reference: steady 980 MHz is no collapse (on every GPU, so
    # that no sibling is faster: one GPU alone at 980 MHz is the slow GPU, pinned in test_active_power_stress).
    assert _stress(_clocks(980, 980, 980, 980, 980), max_sm_mhz=None, every_gpu=True).status == P
    collapsed = _stress(_clocks(1980, 980, 980, 980, 980), max_sm_mhz=None, every_gpu=True)
    assert collapsed.status == F and "SM clock fell to 980 MHz" in collapsed.message


def test_the_first_sample_before_the_clock_ramp_is_not_judged():
    assert _stress(_clocks(300, 1755, 1755, 1755, 1755)).status == P
    assert _stress(_clocks(1980, 1755, 1755, 1755, 300)).status == F


def test_stress_that_ended_early_warns():
    def ended_early(stress):
        stress.error = ProbeError("cuda.stress", ErrorKind.TIMEOUT, "interrupted after 12 s")
    result = _stress(ended_early)
    assert (result.status, result.action) == (W, "watch")
    assert "ended early: interrupted after 12 s" in result.message


@pytest.mark.parametrize("peak, status", [(81.9, P), (82.0, W), (86.9, W), (87.0, F)])
def test_stress_peak_temperature_against_slowdown_and_margin(peak, status):
    def heat(stress):
        stress.samples[2].temperature_celsius = peak
    result = _stress(heat)
    assert result.status == status
    if status == W:
        assert f"peak temperature {peak:g}°C within 5°C of its slowdown limit 87°C" in result.message


def test_stress_temperature_needs_both_a_sensor_and_sampled_temperatures():
    def unsampled(stress):
        for sample in stress.samples:
            sample.temperature_celsius = None
    result = _stress(unsampled)
    assert result.status == P and result.observed["max_temperature_celsius"] is None
    active = healthy_active()
    active.devices[0].stress.samples[2].temperature_celsius = 200.0
    snap = node(active)
    snap.devices[0].temperatures = {}  # no sensor limits to judge the peak against
    assert for_gpu(run(snap, "active.stress"), 0).status == P


@pytest.mark.parametrize("kind, source, message, status", [
    (ErrorKind.TIMEOUT, "active", "deadline reached", Status.UNKNOWN),  # not run to the end: no verdict on the GPU
    (ErrorKind.NOT_FOUND, "cuda.load", "libcuda.so.1 could not be loaded", Status.UNKNOWN),
    (ErrorKind.ERROR, "cuda.cuModuleLoadDataEx", "CUDA_ERROR_NO_BINARY_FOR_GPU", Status.UNKNOWN),
    (ErrorKind.ERROR, "cuda.cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED", F),  # the GPU failed under load
])
def test_a_stress_that_never_launched_is_unknown_for_setup_and_fails_for_runtime_errors(kind, source, message, status):
    def never_launched(stress):
        stress.launches, stress.samples = 0, []
        stress.error = ProbeError(source, kind, message)
    result = _stress(never_launched)
    assert result.status == status and message in result.message
    if status == F:
        assert "dmesg -T | grep -i -e NVRM -e Xid" in result.remediation and result.action == "drain"


# ---------------------------------------------------------------------------------------------------------------
# pcie.replay_errors: warn above 100 replays, or on any rollover of the counter


def _replays(count, rollovers, index=0):
    snap = nvidia_h200_node()
    snap.devices[index].pcie.replay_count = count
    snap.devices[index].pcie.replay_rollover_count = rollovers
    return for_gpu(run(snap, "pcie.replay_errors"), index)


@pytest.mark.parametrize("count, rollovers, status", [
    (100, 0, P), (101, 0, W), (0, 1, W), (5, 2, W), (0, None, P), (101, None, W)])
def test_replay_count_and_rollover(count, rollovers, status):
    result = _replays(count, rollovers)
    assert result.status == status
    assert result.action == ("watch" if status == W else "none")
    assert result.observed["replay_rollover_count"] == rollovers


def test_replay_threshold_follows_the_profile():
    snap = nvidia_h200_node()
    snap.devices[0].pcie.replay_count = 11
    strict = Expectations(pcie_replay_warn_count=10)
    assert for_gpu(run(snap, "pcie.replay_errors", strict), 0).status == W
    assert for_gpu(run(snap, "pcie.replay_errors", dataclasses.replace(strict, pcie_replay_warn_count=11)),
                   0).status == P


# ---------------------------------------------------------------------------------------------------------------
# memory.retired_pages: warn at 15, fail at 60 (single + double bit), either counter alone counts


def _retired(single, double, pending=False):
    snap = nvidia_h200_node()
    health = snap.devices[0].memory_health
    health.retired_pages_single_bit, health.retired_pages_double_bit = single, double
    health.retired_pages_pending = pending
    return for_gpu(run(snap, "memory.retired_pages"), 0)


@pytest.mark.parametrize("single, double, status, total", [
    (14, None, P, 14), (15, None, W, 15), (None, 14, P, 14), (None, 15, W, 15),
    (None, 59, W, 59), (None, 60, F, 60), (60, None, F, 60), (7, 8, W, 15), (30, 30, F, 60), (0, 0, P, 0)])
def test_retired_pages_with_one_or_both_counters(single, double, status, total):
    result = _retired(single, double)
    assert result.status == status
    assert result.observed["total"] == total
    assert result.action == {P: "none", W: "watch", F: "rma"}[status]


def test_a_pending_retirement_fails_to_reset_below_the_limits():
    result = _retired(None, 1, pending=True)
    assert (result.status, result.action, result.fault_code) == (F, "reset", "GPUDIAG-MEMORY-RETIREMENT-PENDING")
    assert _retired(None, 60, pending=True).action == "rma"  # the limit outranks the pending reset


def test_no_retirement_counters_is_not_a_pass():
    result = _retired(None, None)
    assert result.status in (Status.SKIP, Status.UNKNOWN) and result.status != P


# ---------------------------------------------------------------------------------------------------------------
# Exposition: label values escaped per the text format (\\ → \\\\, " → \\", newline → \\n), each on its own

SPEC = MetricSpec("gpudiag_test_info", "gauge", "a test", ("model",))


@pytest.mark.parametrize("value, escaped", [
    ("plain", "plain"), ('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ('\\"\n', '\\\\\\"\\n'),
    ("\\n", "\\\\n")])
def test_label_value_escaping(value, escaped):
    metrics = MetricSet()
    metrics.add(SPEC, (value,), 1)
    assert metrics.exposition().decode().splitlines()[2] == f'gpudiag_test_info{{model="{escaped}"}} 1'


@pytest.mark.parametrize("value, text", [
    (2.0, "2"), (2.5, "2.5"), (-3.0, "-3"), (999_999_999_999_999.0, "999999999999999"),
    (1e15, "1000000000000000.0"), (float("nan"), "NaN"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"),
    (True, "1"), (False, "0"), (7, "7")])
def test_sample_values_in_the_text_format(value, text):
    """Integral floats print as integers below 1e15 (exactly representable), the rest as Python's repr."""
    metrics = MetricSet()
    metrics.add(SPEC, ("x",), value)
    assert metrics.exposition().decode().splitlines()[2] == f'gpudiag_test_info{{model="x"}} {text}'


def test_none_adds_no_series_and_no_family():
    metrics = MetricSet()
    metrics.add(SPEC, ("x",), None)
    assert metrics.names() == [] and metrics.exposition() == b""
    other = MetricSpec("gpudiag_test_other", "counter", "b\\c", ())
    metrics.add(other, (), 3)
    metrics.add(SPEC, ("y",), 1)
    assert metrics.names() == ["gpudiag_test_other", "gpudiag_test_info"]
    assert metrics.exposition().decode().splitlines()[:3] == [
        "# HELP gpudiag_test_other b\\\\c", "# TYPE gpudiag_test_other counter", "gpudiag_test_other 3"]
    with pytest.raises(ValueError):
        metrics.add(SPEC, ("a", "b"), 1)


# ---------------------------------------------------------------------------------------------------------------
# memory.bad_pages (AMD): the profile's max_bad_pages is the most accepted; the device threshold 128 fails when
# reached, 90 % of it (115.2) warns


def _bad_pages(reserved, expect=None):
    snap = amd_mi300x_node()
    health = snap.devices[0].memory_health
    health.bad_pages_reserved, health.bad_pages_pending, health.bad_pages_unreservable = reserved, 0, 0
    health.bad_page_threshold = 128
    result = for_gpu(run(snap, "memory.bad_pages", expect), 0)
    return result.status, result.action


@pytest.mark.parametrize("reserved, status", [(115, P), (116, W), (127, W), (128, F)])
def test_bad_pages_against_the_device_threshold(reserved, status):
    assert _bad_pages(reserved)[0] == status


@pytest.mark.parametrize("reserved, status", [(3, P), (4, F)])
def test_bad_pages_against_the_profiles_maximum(reserved, status):
    assert _bad_pages(reserved, Expectations(max_bad_pages=3)) == (status, "rma" if status == F else "none")


# ---------------------------------------------------------------------------------------------------------------
# ecc.sram: the lifetime count alone carries the errors (they happened before the driver last loaded)


def test_sram_errors_from_an_earlier_driver_session_still_fail():
    from gpudiag.model import DriverHealth

    snap = nvidia_h200_node()
    snap.devices[0].driver_health = DriverHealth(sram_volatile_uncorrected=0, sram_aggregate_uncorrected=3,
                                                 sram_threshold_exceeded=False, unrepairable_memory=False,
                                                 recovery_action="none")
    result = for_gpu(run(snap, "ecc.sram"), 0)
    assert (result.status, result.action) == (F, "rma")
    # and the volatile count alone, should the lifetime one not carry them yet: either counter fails the GPU
    snap.devices[0].driver_health.sram_aggregate_uncorrected = 0
    snap.devices[0].driver_health.sram_volatile_uncorrected = 2
    assert for_gpu(run(snap, "ecc.sram"), 0).status == F
    snap.devices[0].driver_health.sram_volatile_uncorrected = 0
    assert for_gpu(run(snap, "ecc.sram"), 0).status == P
