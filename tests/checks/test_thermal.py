import dataclasses

import pytest

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, ProbeError, Status, TemperatureSensor
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


@pytest.mark.parametrize("celsius, status", [(80.0, Status.PASS), (86.0, Status.WARN), (88.0, Status.WARN),
                                             (90.0, Status.FAIL), (96.0, Status.FAIL)])
def test_nvidia_gpu_sensor_against_slowdown(celsius, status):
    # H200 limits in the fixture: max operating 87, slowdown 90, shutdown 95; warn margin 5.
    snap = nvidia_h200_node()
    snap.devices[0].temperatures["gpu"].current_celsius = celsius
    result = for_gpu(run(snap, "thermal.temperature"), 0)
    assert result.status == status
    assert result.observed["gpu"] == celsius
    if status != Status.PASS:
        assert_actionable(result, status)
        assert "airflow" in result.remediation and "nvidia-smi -q -i 0 -d TEMPERATURE" in result.remediation


def test_shutdown_and_max_operating_limits_are_named():
    snap = nvidia_h200_node()
    snap.devices[0].temperatures["gpu"].current_celsius = 95.0
    snap.devices[1].temperatures["memory"].current_celsius = 96.0  # memory has only a max operating limit (95)
    results = run(snap, "thermal.temperature")
    assert "shutdown" in for_gpu(results, 0).message
    memory = for_gpu(results, 1)
    assert memory.status == Status.FAIL and "memory 96°C" in memory.message and "max operating" in memory.message


def test_margin_is_an_expectation():
    snap = nvidia_h200_node()
    snap.devices[0].temperatures["gpu"].current_celsius = 86.0
    tight = dataclasses.replace(Expectations(), thermal_warn_margin_celsius=2.0)
    assert for_gpu(run(snap, "thermal.temperature", tight), 0).status == Status.PASS


def test_amd_sensors():
    snap = amd_mi300x_node()
    snap.devices[1].temperatures["hotspot"].current_celsius = 101.0
    snap.devices[2].temperatures["vram"].current_celsius = 106.0
    snap.devices[3].temperatures["hotspot"].current_celsius = 111.0
    results = run(snap, "thermal.temperature")
    assert for_gpu(results, 1).status == Status.WARN
    assert "hotspot 101°C within 5°C of its slowdown limit 105°C" in for_gpu(results, 1).message
    assert for_gpu(results, 2).status == Status.FAIL and "vram" in for_gpu(results, 2).message
    assert "shutdown" in for_gpu(results, 3).message
    assert "amd-smi metric --temperature -g 3" in for_gpu(results, 3).remediation


def test_sensors_without_limits_skip_and_missing_readings_are_unknown():
    snap = amd_mi300x_node()
    snap.devices[0].temperatures = {"edge": TemperatureSensor(40.0)}
    assert for_gpu(run(snap, "thermal.temperature"), 0).status == Status.SKIP
    snap.devices[0].temperatures = {}
    snap.devices[0].errors.append(ProbeError("amdsmi.amdsmi_get_temp_metric", ErrorKind.ERROR, "AMDSMI_STATUS_IO"))
    assert_actionable(for_gpu(run(snap, "thermal.temperature"), 0), Status.UNKNOWN)


@pytest.mark.parametrize("reasons, status", [
    (["hw_thermal_slowdown", "hw_slowdown"], Status.FAIL),
    (["sw_thermal_slowdown"], Status.WARN),
    (["prochot"], Status.FAIL),
    (["socket_thermal"], Status.WARN),
    (["sw_power_cap"], Status.PASS),
    (["hw_slowdown", "hw_power_brake"], Status.PASS),  # the power brake, reported by power.brake
])
def test_thermal_throttle_reasons(reasons, status):
    snap = nvidia_h200_node()
    snap.devices[0].clocks.throttle_reasons = reasons
    result = for_gpu(run(snap, "thermal.throttle"), 0)
    assert result.status == status
    assert result.observed == {"active_reasons": reasons}
    if status != Status.PASS:
        assert_actionable(result, status)


def test_throttle_reasons_unsupported_skip():
    snap = amd_mi300x_node()
    snap.devices[0].clocks.throttle_reasons = None
    assert for_gpu(run(snap, "thermal.throttle"), 0).status == Status.SKIP


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py) found unpinned.


def test_a_sensor_without_a_reading_is_left_out_and_the_others_judged():
    snap = nvidia_h200_node()
    snap.devices[0].temperatures["memory"].current_celsius = None
    result = for_gpu(run(snap, "thermal.temperature"), 0)
    assert result.status == Status.PASS
    assert result.message == "GPU 0 (0000:19:00.0): gpu 47°C"
    assert result.observed == {"gpu": 47.0, "memory": None}
    assert set(result.expected) == {"gpu"}


def test_expected_lists_only_the_sensors_that_have_limits():
    snap = amd_mi300x_node()  # hbm0 reports a temperature but no limits
    result = for_gpu(run(snap, "thermal.temperature"), 0)
    assert result.status == Status.PASS
    assert result.message == "GPU 0 (0000:05:00.0): hotspot 41°C, vram 36°C"
    assert result.expected == {
        "hotspot": {"slowdown": 105.0, "shutdown": 110.0, "max_operating": None, "warn_margin": 5.0},
        "vram": {"slowdown": 105.0, "shutdown": 110.0, "max_operating": None, "warn_margin": 5.0}}
    assert result.observed == {"hotspot": 41.0, "vram": 36.0, "hbm0": 35.0}
