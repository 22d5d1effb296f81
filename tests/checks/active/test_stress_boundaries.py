"""Boundaries of active.stress and active.hbm_bandwidth that mutation testing (issue 16) found unpinned: the value
that just passes and the one that just warns or fails, on the thresholds docs/checks.md documents (power 0.90 / 0.75
of the enforced limit over >= 3 steady samples, 5 % below the identical siblings' median, HBM copy 0.85 / 0.70 of
half the nominal bandwidth x 0.85), which GPUs count as siblings, and what the result says and advises."""

from __future__ import annotations

import pytest

from gpudiag.model import (
    ActiveDevice,
    ErrorKind,
    HbmBandwidth,
    ProbeError,
    Status,
    TelemetrySample,
    TemperatureSensor,
    Vendor,
)
from tests.checks.active.test_family import BUS, node
from tests.support.snapshots import for_gpu, node_level, run

F, W, P, U, S = Status.FAIL, Status.WARN, Status.PASS, Status.UNKNOWN, Status.SKIP
STRESS, HBM = "active.stress", "active.hbm_bandwidth"
NVIDIA_LOG, AMD_LOG = "dmesg -T | grep -i -e NVRM -e Xid", "dmesg -T | grep -i amdgpu"


def bf16(stress, watts=690.0, reasons=("sw_power_cap",), tflops=600.0, sm_mhz=1755, seconds=range(5)):
    """The tensor-core stress of a 700 W H200: one sample a second (the steady window of a 4 s run is t = 2, 3, 4)."""
    stress.precision, stress.kernel, stress.tflops, stress.fp32_tflops = "bf16", "gpudiag_mma_bf16", tflops, None
    stress.samples = [TelemetrySample(seconds=float(t), sm_clock_mhz=sm_mhz, temperature_celsius=60.0,
                                      power_watts=watts, throttle_reasons=list(reasons), power_limit_watts=700.0)
                      for t in seconds]


def stress_of(gpu0=None, gpu1=None, snap=None):
    """GPU 0's active.stress result with GPU 1 a healthy BF16 sibling at the cap, after `gpu0` / `gpu1` edit them."""
    snap = snap or node()
    for edit, device in ((gpu0, snap.active.devices[0]), (gpu1 or bf16, snap.active.devices[1])):
        if edit:
            edit(device.stress)
    return for_gpu(run(snap, STRESS), 0)


# --- power short of the limit -------------------------------------------------------------------------------------


@pytest.mark.parametrize("watts, status, percent", [
    (630.0, P, None),  # exactly 0.90 of 700 W: at the warning line, not under it
    (629.9, W, "90%"),
    (525.0, W, "75%"),  # exactly 0.75: still a warning
    (524.9, F, "75%"),
])
def test_steady_power_against_the_warn_and_fail_ratios(watts, status, percent):
    result = stress_of(lambda s: bf16(s, watts=watts, reasons=()))
    assert (result.status, result.action) == (status, {P: "none", W: "watch", F: "drain"}[status])
    if percent:
        assert (f"steady mean power {watts:g} W is {percent} of its 700 W limit and no throttle reason explains it"
                in result.message)
    else:
        assert "no hardware slowdown" in result.message
    assert result.expected["min_mean_power_watts"] == 630.0


@pytest.mark.parametrize("seconds, status", [(range(5), W), (range(4), P)])
def test_power_is_judged_on_three_steady_samples_not_two(seconds, status):
    # 0..4 s: the steady window starts at 2 s (half the run, under 3 s) and holds 3 samples; 0..3 s: 1.5 s, 2 samples.
    result = stress_of(lambda s: bf16(s, watts=600.0, reasons=(), seconds=seconds))
    assert result.status == status
    assert ("steady mean power 600 W is 86%" in result.message) == (status == W)


def test_the_fp32_kernel_is_not_judged_on_power_and_expects_no_minimum():
    def fp32_at_half_power(stress):
        for sample in stress.samples:
            sample.power_watts, sample.power_limit_watts, sample.throttle_reasons = 350.0, 700.0, []
    result = stress_of(fp32_at_half_power, gpu1=fp32_at_half_power)
    assert result.status == P and result.observed["precision"] == "fp32"
    assert result.expected["min_mean_power_watts"] is None


# --- the slow GPU -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tflops, status", [(570.0, P), (569.9, F)])
def test_throughput_boundary_against_the_siblings_median(tflops, status):
    result = stress_of(lambda s: bf16(s, tflops=tflops))  # 5 % below 600 is 570
    assert result.status == status
    if status == F:
        assert "slow GPU: 569.9 TFLOPS, 5.0% below the 600 of its 1 identical sibling(s)" in result.message
        assert result.action == "drain"


@pytest.mark.parametrize("mhz, status", [(1615, P), (1614, F)])
def test_capped_clock_boundary_against_the_siblings_median(mhz, status):
    result = stress_of(lambda s: bf16(s, sm_mhz=mhz), gpu1=lambda s: bf16(s, sm_mhz=1700))  # 0.95 x 1700 = 1615
    assert result.status == status
    if status == F:
        assert "slow GPU: 1614 MHz median SM clock under the cap, 5.1% below the 1700" in result.message


def test_gpus_of_another_name_are_not_siblings():
    # An H100 beside an H200 is slower by design, not a straggler: each is judged alone.
    snap = node()
    snap.devices[1].name = "NVIDIA H100 80GB HBM3"
    bf16(snap.active.devices[0].stress, tflops=600.0)
    bf16(snap.active.devices[1].stress, tflops=400.0)
    results = run(snap, STRESS)
    for index in (0, 1):
        result = for_gpu(results, index)
        assert result.status == P, result.message
        assert result.observed["node_median"] == {"gpus": 1, "tflops": None, "sm_clock_median_mhz": None,
                                                  "mean_power_watts": None}


def test_a_sibling_running_the_other_kernel_is_not_compared():
    # GPU 1 ran the FP32 kernel (61.3 TFLOPS): a BF16 figure of 600 beside it says nothing about either GPU.
    result = stress_of(lambda s: bf16(s), gpu1=lambda s: None)
    assert result.status == P and result.observed["node_median"]["gpus"] == 1
    snap = node()
    bf16(snap.active.devices[0].stress)
    assert for_gpu(run(snap, STRESS), 1).status == P


# --- temperature sensor, figures and wording ------------------------------------------------------------------------


def test_the_peak_is_judged_against_the_gpu_sensor_not_the_first_listed():
    snap = node()
    snap.devices[0].temperatures = {
        "memory": TemperatureSensor(current_celsius=40.0, max_operating_celsius=95.0),
        "gpu": TemperatureSensor(current_celsius=35.0, slowdown_celsius=87.0, shutdown_celsius=92.0)}
    snap.active.devices[0].stress.samples[2].temperature_celsius = 88.0
    result = stress_of(snap=snap, gpu1=lambda s: None)
    assert result.status == F and "peak temperature 88°C at/over its slowdown limit 87°C" in result.message


def test_without_a_gpu_sensor_the_first_sensor_is_the_limit():
    snap = node()
    snap.devices[0].temperatures = {"hotspot": TemperatureSensor(current_celsius=40.0, slowdown_celsius=87.0)}
    snap.active.devices[0].stress.samples[2].temperature_celsius = 88.0
    result = stress_of(snap=snap, gpu1=lambda s: None)
    assert result.status == F and "peak temperature 88°C at/over its slowdown limit 87°C" in result.message


def test_observed_clock_and_power_ranges_skip_missing_readings():
    def gaps(stress):
        stress.samples[1].sm_clock_mhz = None
        stress.samples[3].power_watts = None
        stress.samples[4].power_watts = 701.5
    result = stress_of(gaps, gpu1=lambda s: None)
    assert result.observed["sm_clock_mhz"] == [1755, 1980]
    assert result.observed["max_power_watts"] == 701.5
    assert result.observed["samples"] == 5


def test_a_passing_stress_names_the_reasons_seen_only_when_there_were_some():
    capped = stress_of(gpu1=lambda s: None)
    assert capped.status == P
    assert capped.message.endswith("no hardware slowdown (reasons seen: sw_power_cap)")

    def unthrottled(stress):
        for sample in stress.samples:
            sample.throttle_reasons = []
    clear = stress_of(unthrottled, gpu1=unthrottled)
    assert clear.status == P and clear.message.endswith("°C; no hardware slowdown")


def test_expected_clock_floor_is_absent_without_any_clock_to_judge():
    assert stress_of(gpu1=lambda s: None).expected["min_sm_clock_mhz"] == 990

    def no_clocks(stress):
        for sample in stress.samples:
            sample.sm_clock_mhz = None
    snap = node()
    snap.devices[0].clocks.max_sm_mhz = None
    result = stress_of(no_clocks, gpu1=lambda s: None, snap=snap)
    assert result.status == P and result.expected["min_sm_clock_mhz"] is None
    assert result.observed["sm_clock_mhz"] is None


def test_a_failed_stress_says_what_to_check():
    def brake(stress):
        stress.samples[3].throttle_reasons = ["hw_power_brake"]
    result = stress_of(brake, gpu1=lambda s: None)
    assert result.status == F and "throttle reason hw_power_brake" in result.message
    assert result.remediation.startswith("A GPU that slows down, falls short of its power limit or lags its siblings")
    assert "check the PSUs and the BMC's power-capping events" in result.remediation
    assert f"Check the kernel log (`{NVIDIA_LOG}`)" in result.remediation and "nvidia-smi -r -i 0" in result.remediation


# --- results that are not judged on figures (checks/active/common.py) ----------------------------------------------


def _runtime_error(source, message):
    def never_launched(stress):
        stress.launches, stress.samples = 0, []
        stress.error = ProbeError(source, ErrorKind.ERROR, message)
    return never_launched


def test_a_runtime_error_on_an_amd_gpu_points_at_the_amdgpu_log():
    snap = node()
    snap.devices[0].vendor, snap.devices[0].name = Vendor.AMD, "AMD Instinct MI300X"
    result = stress_of(_runtime_error("hip.hipLaunchKernel", "hipErrorLaunchFailure"), gpu1=lambda s: None, snap=snap)
    assert result.status == F and "failed under load: hipErrorLaunchFailure" in result.message
    assert f"Check the kernel log (`{AMD_LOG}`)" in result.remediation
    assert "amd-smi reset --gpureset -g 0" in result.remediation and "NVRM" not in result.remediation


def test_a_runtime_error_on_an_nvidia_gpu_points_at_the_xid_log():
    result = stress_of(_runtime_error("cuda.cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED"), gpu1=lambda s: None)
    assert result.status == F and "failed under load: CUDA_ERROR_LAUNCH_FAILED" in result.message
    assert f"Check the kernel log (`{NVIDIA_LOG}`)" in result.remediation and "amdgpu" not in result.remediation


def test_a_test_that_was_not_requested_is_skipped_once():
    snap = node()
    snap.active.tests = ["pcie", "p2p", "hbm", "memtest"]
    results = run(snap, STRESS)
    assert [(r.status, r.device, r.message) for r in results] == [
        (S, None, "the stress load test was not requested")]


@pytest.mark.parametrize("errors, why", [
    ([], "no GPU to test"),
    ([ProbeError("cuda.load", ErrorKind.NOT_FOUND, "libcuda.so.1 could not be loaded"),
      ProbeError("active", ErrorKind.ERROR, "no idle GPU")], "libcuda.so.1 could not be loaded; no idle GPU"),
])
def test_no_gpu_load_tested_is_one_skip_with_the_reason(errors, why):
    snap = node()
    snap.active.devices, snap.active.errors = [], errors
    for check in (STRESS, HBM):
        results = run(snap, check)
        assert [(r.status, r.device) for r in results] == [(S, None)]
        assert node_level(results)[0].message == f"no GPU was load-tested: {why}"


# --- HBM copy bandwidth: H200, 4,800 GB/s nominal → 2,400 copied x 0.85 = 2,040 GB/s expected --------------------


def hbm_of(gb0, gb1=None):
    """GPU 0's active.hbm_bandwidth result at `gb0` GB/s with GPU 1 at `gb1` (the same figure by default)."""
    snap = node()
    snap.active.devices[0].hbm.gb_per_second = gb0
    snap.active.devices[1].hbm.gb_per_second = gb0 if gb1 is None else gb1
    return for_gpu(run(snap, HBM), 0)


@pytest.mark.parametrize("gb, status, percent", [
    (1734.0, P, None),  # exactly 0.85 x 2040
    (1733.9, W, "85%"),
    (1600.0, W, "78%"),
    (1428.0, W, "70%"),  # exactly 0.70 x 2040: still a warning
    (1427.9, F, "70%"),
])
def test_hbm_copy_against_the_warn_and_fail_ratios(gb, status, percent):
    result = hbm_of(gb)
    assert (result.status, result.action) == (status, {P: "none", W: "watch", F: "drain"}[status])
    assert result.expected["expected_copy_gb_per_second"] == 2040.0
    if percent:
        assert result.message.endswith(f"; {percent} of the 2040 GB/s a healthy copy reaches (4800 GB/s nominal)")
        assert "HBM temperature and throttle reasons" in result.remediation
    else:
        assert result.message.endswith("85% of the 2040 GB/s expected from 4800 GB/s nominal, node median 1734 GB/s")
        assert result.remediation == ""


@pytest.mark.parametrize("gb, status", [(1900.0, P), (1899.9, W)])
def test_hbm_copy_against_the_siblings_median(gb, status):
    result = hbm_of(gb, gb1=2000.0)  # 5 % below 2000 is 1900; both well above the 0.85 x 2040 line
    assert result.status == status
    if status == W:
        assert result.message.endswith("; 5.0% below its siblings' median of 2000 GB/s")


@pytest.mark.parametrize("source, message, status, said", [
    ("cuda.cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED", F, "failed under load: CUDA_ERROR_LAUNCH_FAILED"),
    ("cuda.cuModuleLoadDataEx", "CUDA_ERROR_NO_BINARY_FOR_GPU", U,
     ": the HBM copy test could not run: CUDA_ERROR_NO_BINARY_FOR_GPU"),
])
def test_an_hbm_copy_that_ended_with_an_error_is_not_judged_on_a_figure(source, message, status, said):
    snap = node()
    snap.active.devices[0].hbm = HbmBandwidth(error=ProbeError(source, ErrorKind.ERROR, message))
    result = for_gpu(run(snap, HBM), 0)
    assert result.status == status
    assert result.message == f"GPU 0 ({BUS[0]})" + (" " if status == F else "") + said
    assert result.observed == {"error": f"{source}: {message}"}


def test_a_skipped_gpu_is_skipped_with_the_reason():
    snap = node()
    snap.active.devices[0] = ActiveDevice(index=0, pci_bus_id=BUS[0], skipped="busy with another job, not disturbed")
    result = for_gpu(run(snap, HBM), 0)
    assert (result.status, result.message) == (S, f"GPU 0 ({BUS[0]}) was not load-tested: busy with another job, "
                                                  "not disturbed")
