"""active.* judging: measured figures against what the link, the fabric and the device's own limits allow."""

from __future__ import annotations

import dataclasses

import pytest

from gpudiag.checks.active.family import CHECKS, active_checks
from gpudiag.checks.active.links import ActiveExpectations, pcie_raw_gb_per_second
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.model import (
    ActiveDevice,
    ActiveResults,
    ClockInfo,
    CopyBandwidth,
    DeviceSnapshot,
    ErrorKind,
    GpuLink,
    HbmBandwidth,
    MemtestResult,
    NodeSnapshot,
    PcieInfo,
    PeerBandwidth,
    PeerLink,
    ProbeError,
    Status,
    StressResult,
    TelemetrySample,
    TemperatureSensor,
    Vendor,
)

BUS = ("0000:18:00.0", "0000:2a:00.0")


def h200(index: int, generation: int = 5, width: int = 16) -> DeviceSnapshot:
    return DeviceSnapshot(
        index=index, vendor=Vendor.NVIDIA, source="nvml", pci_bus_id=BUS[index], name="NVIDIA H200",
        architecture="Hopper",
        pcie=PcieInfo(current_generation=1, current_width=16, max_generation=generation, max_width=width,
                      device_max_generation=5, device_max_width=16),
        clocks=ClockInfo(max_sm_mhz=1980),
        temperatures={"gpu": TemperatureSensor(current_celsius=35.0, slowdown_celsius=87.0, shutdown_celsius=92.0)},
        links=[GpuLink(index=i, kind="nvlink", up=True, version=4, remote_device_type="switch") for i in range(18)],
    )


def healthy_active() -> ActiveResults:
    def device(index: int) -> ActiveDevice:
        return ActiveDevice(
            index=index, pci_bus_id=BUS[index], runtime="cuda 12.4",
            h2d=CopyBandwidth(55.2, 256 << 20, 24), d2h=CopyBandwidth(54.8, 256 << 20, 24),
            memtest=MemtestResult(bytes_tested=126_000_000_000, free_bytes=140_000_000_000,
                                  total_bytes=143_771_000_000, passes_requested=4, passes_completed=4, seconds=1.9,
                                  ecc_corrected_before=0, ecc_corrected_after=0, ecc_uncorrected_before=0,
                                  ecc_uncorrected_after=0),
            stress=StressResult(seconds_requested=30, seconds=30.0, launches=600, fp32_tflops=61.3, samples=[
                TelemetrySample(seconds=float(t), sm_clock_mhz=1980 if t == 0 else 1755, temperature_celsius=58.0 + t,
                                power_watts=690.0, throttle_reasons=["sw_power_cap"]) for t in range(5)]),
            hbm=HbmBandwidth(bytes_per_copy=2 << 30, copies_timed=30, gb_per_second=2110.0 - index),
        )
    return ActiveResults(tests=["pcie", "p2p", "hbm", "memtest", "stress"], devices=[device(0), device(1)], peers=[
        PeerBandwidth(0, 1, True, CopyBandwidth(372.5, 256 << 20, 24), 741.0),
        PeerBandwidth(1, 0, True, CopyBandwidth(371.9, 256 << 20, 24))])


def node(active=None, generation: int = 5) -> NodeSnapshot:
    return NodeSnapshot(hostname="h200-1", devices=[h200(0, generation), h200(1, generation)],
                        peers=[PeerLink(gpu_a=0, gpu_b=1, path="nvlink", link_count=18)],
                        active=active if active is not None else healthy_active())


def by_check(results, check_id):
    return [r for r in results if r.check == check_id]


def test_a_healthy_h200_pair_passes_every_active_check():
    results = active_checks(node(), DEFAULT_EXPECTATIONS)
    assert {r.check for r in results} == {c.id for c in CHECKS}
    # this pair ran the FP32 kernel, which leaves nothing to verify (tests/active/test_verify.py has the tensor one)
    assert [(r.check, r.status) for r in results if r.status != Status.PASS] == [("active.compute", Status.SKIP)] * 2
    h2d = by_check(results, "active.pcie_h2d_bandwidth")[0]
    assert h2d.expected["gb_per_second"] == 53.6  # Gen5 x16: 63.0 GB/s raw x 0.85
    assert "Gen5 x16 link carries after protocol overhead (63.0 GB/s raw)" in h2d.message
    p2p = by_check(results, "active.p2p_bandwidth")[0]
    assert p2p.expected["gb_per_second"] == 360.0 and "18 NVLinks carry (450 GB/s per direction raw)" in p2p.message


def test_pcie_raw_rates_follow_the_encoding_of_each_generation():
    assert pcie_raw_gb_per_second(5, 16) == pytest.approx(63.015, abs=1e-3)
    assert pcie_raw_gb_per_second(4, 16) == pytest.approx(31.508, abs=1e-3)
    assert pcie_raw_gb_per_second(2, 16) == pytest.approx(8.0)  # 5 GT/s x 16 x 8b/10b
    assert pcie_raw_gb_per_second(9, 16) is None


def test_gen5_x16_moving_gen4_figures_fails_naming_the_gpu():
    active = healthy_active()
    active.devices[1].h2d = CopyBandwidth(26.1, 256 << 20, 24)
    (_, slow) = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.pcie_h2d_bandwidth")
    assert slow.status == Status.FAIL and slow.device.index == 1 and slow.device.pci_bus_id == BUS[1]
    assert slow.message.startswith("GPU 1 (0000:2a:00.0) host->device: 26.1 GB/s, 49% of the 53.6 GB/s")
    assert slow.expected["fail_below_gb_per_second"] == 37.5
    assert "riser" in slow.remediation


def test_a_gen4_slot_is_judged_against_gen4_and_a_middling_figure_warns():
    active = healthy_active()
    active.devices[0].d2h = CopyBandwidth(26.1, 256 << 20, 24)
    active.devices[1].d2h = CopyBandwidth(21.0, 256 << 20, 24)
    results = by_check(active_checks(node(active, generation=4), DEFAULT_EXPECTATIONS), "active.pcie_d2h_bandwidth")
    assert [r.status for r in results] == [Status.PASS, Status.WARN]  # 26.8 GB/s expected; 21.0 is 78% of it


def test_profile_can_pin_the_expected_figures():
    expect = dataclasses.replace(DEFAULT_EXPECTATIONS, active_h2d_expected_gbps=70.0, active_pcie_warn_ratio=0.9)
    (first, _) = by_check(active_checks(node(), expect), "active.pcie_h2d_bandwidth")
    assert first.status == Status.WARN and "of the 70 GB/s a node profile sets" in first.message
    limits = ActiveExpectations.of(expect)
    assert (limits.h2d_expected_gbps, limits.pcie_warn_ratio, limits.pcie_fail_ratio) == (70.0, 0.9, 0.7)


def test_a_slow_nvlink_pair_fails_and_missing_peer_access_says_fabric_manager():
    active = healthy_active()
    active.peers[0].copy = CopyBandwidth(180.0, 256 << 20, 24)
    active.peers[1].p2p_enabled = False
    active.peers[1].copy = CopyBandwidth(21.0, 256 << 20, 24)
    slow, staged = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert slow.status == Status.FAIL and slow.message.startswith("GPU 0 -> GPU 1: 180.0 GB/s, 50% of the 360 GB/s")
    assert staged.status == Status.FAIL and "no peer access" in staged.message
    assert "nvidia-fabricmanager" in staged.remediation


def test_a_pcie_peer_path_is_only_warned_about():
    snapshot = node()
    snapshot.peers = [PeerLink(gpu_a=0, gpu_b=1, path="phb")]
    snapshot.active.peers[0].copy = CopyBandwidth(20.0, 256 << 20, 24)
    first, _ = by_check(active_checks(snapshot, DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert first.status == Status.WARN and "PCIe path carries" in first.message


def test_memtest_mismatches_fail_with_address_and_bits():
    active = healthy_active()
    active.devices[0].memtest.mismatched_words = 4
    active.devices[0].memtest.first_error_address = 0x7F0000104000
    active.devices[0].memtest.flipped_bits_mask = 0x100
    first, second = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.memtest")
    assert first.status == Status.FAIL and "4 words read back wrong" in first.message
    assert "0x7f0000104000" in first.message and "0x00000100" in first.message
    assert second.status == Status.PASS and "no mismatch in 126.0 GB of 143.8 GB in 4 passes" in second.message


@pytest.mark.parametrize("field, after, status", [("ecc_uncorrected_after", 2, Status.FAIL),
                                                  ("ecc_corrected_after", 7, Status.WARN)])
def test_ecc_counters_rising_during_the_memtest(field, after, status):
    active = healthy_active()
    setattr(active.devices[0].memtest, field, after)
    (first, _) = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.memtest")
    assert first.status == status and f"{after} " in first.message


@pytest.mark.parametrize("reason, status", [("hw_thermal_slowdown", Status.FAIL), ("hw_power_brake", Status.FAIL),
                                            ("sw_thermal_slowdown", Status.WARN), ("sw_power_cap", Status.PASS)])
def test_stress_throttle_reasons(reason, status):
    active = healthy_active()
    active.devices[0].stress.samples[3].throttle_reasons = [reason]
    (first, _) = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.stress")
    assert first.status == status
    if status != Status.PASS:
        assert f"throttle reason {reason}" in first.message


def test_stress_clock_collapse_and_heat_fail():
    active = healthy_active()
    active.devices[0].stress.samples[2].sm_clock_mhz = 615
    active.devices[1].stress.samples[4].temperature_celsius = 88.0
    collapsed, hot = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.stress")
    assert collapsed.status == Status.FAIL and "SM clock fell to 615 MHz of 1980 MHz" in collapsed.message
    assert hot.status == Status.FAIL and "peak temperature 88°C at/over its slowdown limit 87°C" in hot.message


def test_an_unwatched_stress_is_unknown():
    active = healthy_active()
    active.devices[0].stress.samples = []
    active.devices[0].stress.telemetry_error = "no telemetry reader: clocks were not watched"
    (first, _) = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.stress")
    assert first.status == Status.UNKNOWN and "not watched" in first.message


def test_skipped_busy_gpus_skip_and_setup_errors_are_unknown_not_failures():
    active = healthy_active()
    active.devices[0] = ActiveDevice(index=0, pci_bus_id=BUS[0], skipped="busy with another job, not disturbed")
    missing = ProbeError("cuda.load", ErrorKind.NOT_FOUND, "libcuda.so.1 could not be loaded")
    active.devices[1].memtest = MemtestResult(passes_requested=4, error=missing)
    active.devices[1].stress = StressResult(error=ProbeError("cuda.cuLaunchKernel", ErrorKind.ERROR,
                                                             "cuLaunchKernel failed: CUDA_ERROR_ECC_UNCORRECTABLE"))
    results = active_checks(node(active), DEFAULT_EXPECTATIONS)
    assert {r.status for r in results if r.device and r.device.index == 0 and r.check != "active.p2p_bandwidth"} \
        == {Status.SKIP}
    assert by_check(results, "active.memtest")[1].status == Status.UNKNOWN
    stress = by_check(results, "active.stress")[1]
    assert stress.status == Status.FAIL and "CUDA_ERROR_ECC_UNCORRECTABLE" in stress.message


def _untested(error: ProbeError, vendor: Vendor = Vendor.NVIDIA) -> list:
    """Every load test of both GPUs carrying `error`, as active/runner._fail_untested leaves them."""
    active = healthy_active()
    for entry in active.devices:
        entry.h2d = entry.d2h = CopyBandwidth(error=error)
        entry.hbm, entry.memtest = HbmBandwidth(error=error), MemtestResult(passes_requested=4, error=error)
        entry.stress = StressResult(seconds_requested=30, error=error)
    snapshot = node(active)
    for device in snapshot.devices:
        device.vendor = vendor
    results = active_checks(snapshot, DEFAULT_EXPECTATIONS)
    return [r for r in results if r.status == Status.UNKNOWN]


def test_a_missing_runtime_library_says_what_to_install_and_not_to_give_more_time():
    """Issue 27: `check --level 2` without libcuda.so.1 advised --timeout on every load test of every GPU."""
    nvidia = _untested(ProbeError("cuda.load", ErrorKind.NOT_FOUND, "libcuda.so.1 (the NVIDIA driver's user-space "
                                  "library) could not be loaded (libcuda.so.1: cannot open shared object file)"))
    assert len(nvidia) == 12  # h2d, d2h, hbm, memtest, stress, compute on 2 GPUs
    assert {r.message.split(": ", 1)[1] for r in nvidia} == {
        "the load tests could not run: libcuda.so.1 (the NVIDIA driver's user-space library) could not be loaded "
        "(libcuda.so.1: cannot open shared object file)"}
    assert {r.expected for r in nvidia} == {"the GPU runtime loads and initialises"}
    (advice,) = {r.remediation for r in nvidia}
    assert "--timeout" not in advice and "more time" not in advice
    assert "libnvidia-compute-<branch>" in advice and "libcuda1" in advice and "nvidia-driver-cuda-libs" in advice
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in advice and "ldconfig -p | grep libcuda.so.1" in advice
    amd = _untested(ProbeError("hip.load", ErrorKind.NOT_FOUND, "libamdhip64.so (ROCm's HIP runtime) could not be "
                               "loaded"), Vendor.AMD)
    (advice,) = {r.remediation for r in amd}
    assert "hip-runtime-amd" in advice and "--timeout" not in advice and "/opt/rocm/lib" in advice


@pytest.mark.parametrize("error, says, never", [
    (ProbeError("active", ErrorKind.TIMEOUT, "stopped early: deadline reached"), "--timeout", "install"),
    (ProbeError("cuda.cuModuleLoadDataEx", ErrorKind.ERROR, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
     "must match the kernel driver", "--timeout"),
    (ProbeError("cuda.cuInit", ErrorKind.NOT_FOUND, "the CUDA driver sees no device"),
     "must match the kernel driver", "--timeout"),
])
def test_a_test_that_could_not_run_gets_the_remedy_of_its_cause(error, says, never):
    results = _untested(error)
    assert results and all(says in r.remediation and never not in r.remediation for r in results)
    runtime_wide = error.source == "cuda.cuInit"  # every test of the GPU stopped by it: one wording
    assert all(("the load tests could not run" in r.message) == runtime_wide for r in results)


def test_a_test_that_never_finished_is_unknown_with_the_run_error():
    active = healthy_active()
    active.devices[1].stress = None
    active.errors = [ProbeError("active", ErrorKind.TIMEOUT, "stuck in cuda.cuEventSynchronize")]
    (_, second) = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.stress")
    assert second.status == Status.UNKNOWN and "stuck in cuda.cuEventSynchronize" in second.message


def test_without_load_tests_each_check_says_so_once():
    results = active_checks(dataclasses.replace(node(), active=None), DEFAULT_EXPECTATIONS)
    assert [(r.status, r.device) for r in results] == [(Status.SKIP, None)] * len(CHECKS)
    assert "gpudiag check --level 2" in results[0].message


def test_every_active_threshold_can_be_set_in_the_profile():
    profile_keys = {f.name for f in dataclasses.fields(DEFAULT_EXPECTATIONS)}
    assert {f"active_{f.name}" for f in dataclasses.fields(ActiveExpectations)} <= profile_keys


# --- boundaries and branches the mutation run found unpinned (issue 16) -----------------------------------------


@pytest.mark.parametrize("check", ["active.pcie_h2d_bandwidth", "active.p2p_bandwidth"])
@pytest.mark.parametrize("gbps, status", [(85.0, Status.PASS), (84.9, Status.WARN), (70.0, Status.WARN),
                                          (69.9, Status.FAIL)])
def test_copy_verdict_at_the_warn_and_fail_ratios(check, gbps, status):
    # ActiveExpectations: warn *below* 0.85 of the achievable figure, fail *below* 0.70 (as_expected names them
    # warn_below_/fail_below_): a figure exactly at a ratio gets the better verdict. The pair is an NVLink pair, so
    # below 0.70 it fails too (a PCIe peer path would only warn).
    expect = dataclasses.replace(DEFAULT_EXPECTATIONS, active_h2d_expected_gbps=100.0, active_p2p_expected_gbps=100.0)
    active = healthy_active()
    if check == "active.p2p_bandwidth":
        active.peers[0].copy = CopyBandwidth(gbps, 256 << 20, 24)
        what = "GPU 0 -> GPU 1"
    else:
        active.devices[0].h2d = CopyBandwidth(gbps, 256 << 20, 24)
        what = "GPU 0 (0000:18:00.0) host->device"
    first = by_check(active_checks(node(active), expect), check)[0]
    assert first.status == status
    basis = "a node profile sets" if check == "active.pcie_h2d_bandwidth" else "node profile sets"
    assert first.message == f"{what}: {gbps} GB/s, {gbps / 100:.0%} of the 100 GB/s {basis}"
    assert (first.expected["warn_below_gb_per_second"], first.expected["fail_below_gb_per_second"]) == (85.0, 70.0)


def test_a_host_copy_that_failed_under_load_fails_and_one_that_could_not_run_is_unknown():
    active = healthy_active()
    active.devices[0].h2d = CopyBandwidth(error=ProbeError("cuda.cuMemcpyHtoDAsync", ErrorKind.ERROR,
                                                           "cuMemcpyHtoDAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS"))
    active.devices[1].d2h = CopyBandwidth(error=ProbeError("active", ErrorKind.TIMEOUT, "deadline reached"))
    results = active_checks(node(active), DEFAULT_EXPECTATIONS)
    (h2d, _) = by_check(results, "active.pcie_h2d_bandwidth")
    (_, d2h) = by_check(results, "active.pcie_d2h_bandwidth")
    assert (h2d.status, h2d.message) == (Status.FAIL, "GPU 0 (0000:18:00.0) failed under load: cuMemcpyHtoDAsync "
                                                      "failed: CUDA_ERROR_ILLEGAL_ADDRESS")
    assert (d2h.status, d2h.message) == (Status.UNKNOWN, "GPU 1 (0000:2a:00.0): the device->host copy test could not "
                                                         "run: deadline reached")


def test_a_link_of_unknown_width_is_not_judged_but_its_figure_is_kept():
    snapshot = node()
    snapshot.devices[0].pcie = PcieInfo(max_generation=5, device_max_generation=5)  # generation known, width not
    (first, second) = by_check(active_checks(snapshot, DEFAULT_EXPECTATIONS), "active.pcie_h2d_bandwidth")
    assert first.status == Status.PASS and first.expected is None
    assert first.message == "GPU 0 (0000:18:00.0) host->device: 55.2 GB/s (link generation/width unknown: not judged)"
    assert first.observed == {"gb_per_second": 55.2, "bytes_per_copy": 256 << 20}
    assert second.expected["gb_per_second"] == 53.6  # the other GPU's link is known: judged as usual


def test_p2p_says_why_it_was_not_judged():
    not_requested = healthy_active()
    not_requested.tests = ["pcie"]
    assert [(r.status, r.message) for r in by_check(active_checks(node(not_requested), DEFAULT_EXPECTATIONS),
                                                     "active.p2p_bandwidth")] == [
        (Status.SKIP, "the p2p load test was not requested")]
    not_run = [(r.status, r.message) for r in by_check(
        active_checks(dataclasses.replace(node(), active=None), DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")]
    assert not_run == [(Status.SKIP, "load tests were not run (gpudiag check --level 2 runs them)")]


def test_p2p_without_a_measured_pair_skips_once_saying_why():
    one_gpu = healthy_active()
    one_gpu.peers = []
    one_gpu.devices[1] = ActiveDevice(index=1, pci_bus_id=BUS[1], skipped="busy with another job, not disturbed")
    results = by_check(active_checks(node(one_gpu), DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert [(r.status, r.device, r.message) for r in results] == [
        (Status.SKIP, None, "no GPU pair was measured: 1 GPU(s) load-tested, two are needed")]
    failed_run = healthy_active()
    failed_run.peers = []
    failed_run.errors = [ProbeError("cuda.cuCtxEnablePeerAccess", ErrorKind.ERROR, "peer access setup failed")]
    results = by_check(active_checks(node(failed_run), DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert [(r.status, r.message) for r in results] == [
        (Status.SKIP, "no GPU pair was measured: peer access setup failed")]


def test_a_peer_copy_that_could_not_run_is_unknown():
    active = healthy_active()
    active.peers[1].copy = CopyBandwidth(error=ProbeError("active", ErrorKind.TIMEOUT, "deadline reached"))
    first, second = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert first.status == Status.PASS
    assert (second.status, second.device.index) == (Status.UNKNOWN, 1)
    assert second.message == "GPU 1 (0000:2a:00.0): the GPU 1 -> GPU 0 copy test could not run: deadline reached"


def test_a_pcie_peer_path_without_link_data_is_not_judged():
    snapshot = node()
    snapshot.peers = [PeerLink(gpu_a=0, gpu_b=1, path="phb")]
    snapshot.devices[1].pcie = PcieInfo()  # one end's link unknown: the path's figure cannot be derived
    snapshot.active.peers[0].copy = CopyBandwidth(20.0, 256 << 20, 24)
    first, _ = by_check(active_checks(snapshot, DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert (first.status, first.expected) == (Status.PASS, None)
    assert first.message == "GPU 0 -> GPU 1: 20.0 GB/s (no NVLink/XGMI or link data: not judged)"


def test_nvlink5_on_blackwell_carries_50_gb_per_second_a_link():
    # NVIDIA's data sheets: B200 has 18 NVLink 5 links, 1.8 TB/s both ways (50 GB/s a link a direction).
    snapshot = node()
    for device in snapshot.devices:
        device.name, device.architecture = "NVIDIA B200", "Blackwell"
    first, _ = by_check(active_checks(snapshot, DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert first.expected["gb_per_second"] == 720.0  # 18 x 50 x 0.8
    assert first.status == Status.FAIL  # 372.5 GB/s is Hopper's figure: 52 % of Blackwell's
    assert "of the 720 GB/s 18 NVLinks carry (900 GB/s per direction raw)" in first.message


def test_a_memtest_that_ended_early_warns_with_the_reason():
    active = healthy_active()
    memtest = active.devices[0].memtest
    memtest.passes_completed = 2
    memtest.error = ProbeError("active", ErrorKind.TIMEOUT, "deadline reached after 2 of 4 passes")
    (first, second) = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.memtest")
    assert first.status == Status.WARN
    assert first.message == ("GPU 0 (0000:18:00.0): no mismatch in 126.0 GB of 143.8 GB in 2 passes, 1.9 s, but the "
                             "test ended early: deadline reached after 2 of 4 passes")
    assert "--timeout" in first.remediation
    assert second.status == Status.PASS


def test_a_memtest_pass_says_whether_ecc_was_read_again():
    active = healthy_active()
    active.devices[1].memtest.ecc_corrected_after = None
    active.devices[1].memtest.ecc_uncorrected_after = None
    first, second = by_check(active_checks(node(active), DEFAULT_EXPECTATIONS), "active.memtest")
    assert (first.status, second.status) == (Status.PASS, Status.PASS)
    assert first.message == "GPU 0 (0000:18:00.0): no mismatch in 126.0 GB of 143.8 GB in 4 passes, 1.9 s; ECC " \
                            "counters unchanged"
    assert second.message == "GPU 1 (0000:2a:00.0): no mismatch in 126.0 GB of 143.8 GB in 4 passes, 1.9 s; ECC " \
                             "not re-read"


@pytest.mark.parametrize("links, expected, basis", [
    (1, 51.2, "1 XGMI link carries (64 GB/s per direction raw)"),
    (2, 102.4, "2 XGMI links carry (128 GB/s per direction raw)")])
def test_an_xgmi_pair_is_judged_per_link(links, expected, basis):
    # MI300X: 64 GB/s a direction per Infinity Fabric link (AMD data sheet); one pair uses its direct link(s).
    snapshot = node()
    snapshot.peers = [PeerLink(gpu_a=0, gpu_b=1, path="xgmi", link_count=links)]
    snapshot.active.peers[0].copy = CopyBandwidth(48.0, 256 << 20, 24)
    first, _ = by_check(active_checks(snapshot, DEFAULT_EXPECTATIONS), "active.p2p_bandwidth")
    assert first.expected["gb_per_second"] == expected
    assert first.message == f"GPU 0 -> GPU 1: 48.0 GB/s, {48.0 / expected:.0%} of the {expected:g} GB/s {basis}"
    assert first.status == (Status.PASS if links == 1 else Status.FAIL)  # 94 % / 47 %
