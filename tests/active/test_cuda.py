"""The CUDA driver-API binding and the load tests over a fake libcuda.so.1 (ctypes.CDLL patched): error handling
(no library, no device, out of memory, a failing call, a JIT refusal) and each test's flow with deterministic
simulated timings."""

from __future__ import annotations

import dataclasses

import pytest

from gpudiag.active import run_active
from gpudiag.active.cuda import CudaRuntime
from gpudiag.active.runtime import GpuOutOfMemory, RuntimeUnavailable
from gpudiag.model import ErrorKind, PcieInfo
from tests.support.active import fast_options, idle_device, install_cuda, live_reader, sim_devices, snapshot_of
from tests.support.fakes import libcuda
from tests.support.fakes.gpu_sim import SimNode, patch_cdll


def test_missing_library_is_reported_on_every_requested_test(monkeypatch):
    patch_cdll(monkeypatch, {})
    with pytest.raises(RuntimeUnavailable) as raised:
        CudaRuntime()
    assert raised.value.kind == ErrorKind.NOT_FOUND and "libcuda.so.1" in str(raised.value)

    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("pcie", "memtest")))
    assert [e.source for e in results.errors] == ["cuda.load"]
    (device,) = results.devices
    for result in (device.h2d, device.d2h, device.memtest):
        assert (
            result.error.kind == ErrorKind.NOT_FOUND
            and "libcuda.so.1: cannot open shared object file" in result.error.message
        )
    assert device.stress is None  # not requested, so not claimed either


def test_no_device_and_fabric_manager_failures_say_what_to_check(monkeypatch):
    install_cuda(monkeypatch, sim_devices(1), init_result=libcuda.CUDA_ERROR_NO_DEVICE)
    with pytest.raises(RuntimeUnavailable) as raised:
        CudaRuntime()
    assert raised.value.kind == ErrorKind.NOT_FOUND and "CUDA_ERROR_NO_DEVICE" in str(raised.value)

    install_cuda(monkeypatch, sim_devices(1), init_result=libcuda.CUDA_ERROR_SYSTEM_NOT_READY)
    with pytest.raises(RuntimeUnavailable) as raised:
        CudaRuntime()
    assert "CUDA_ERROR_SYSTEM_NOT_READY (802)" in str(raised.value) and "nvidia-fabricmanager" in str(raised.value)


def test_out_of_memory_is_its_own_error_naming_the_call(monkeypatch):
    install_cuda(monkeypatch, sim_devices(1))
    runtime = CudaRuntime()
    runtime.use(0)
    with pytest.raises(GpuOutOfMemory) as raised:
        runtime.alloc(1024**3)
    assert raised.value.call == "cuMemAlloc_v2" and raised.value.error_name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert "out of memory" in str(raised.value) and "1073741824 bytes" in str(raised.value)
    runtime.close()


def test_a_failing_copy_fails_that_test_and_everything_is_still_freed(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    fake.fail("cuMemcpyDtoHAsync_v2", libcuda.CUDA_ERROR_ILLEGAL_ADDRESS)
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("pcie",)))
    (device,) = results.devices
    assert device.h2d.error is None and device.h2d.gb_per_second == 50.0
    assert device.d2h.gb_per_second is None
    assert device.d2h.error.source == "cuda.cuMemcpyDtoHAsync_v2"
    assert "CUDA_ERROR_ILLEGAL_ADDRESS (700)" in device.d2h.error.message
    assert fake.leaks() == {}


def test_a_symbol_missing_from_an_old_driver_is_named(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    fake.remove("cuMemAllocHost_v2")
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("pcie",)))
    error = results.devices[0].h2d.error
    assert error.source == "cuda.cuMemAllocHost_v2" and "SYMBOL_NOT_FOUND" in error.message
    assert fake.leaks() == {}


def test_host_copies_report_the_event_timed_rate_of_each_direction(monkeypatch):
    fake = install_cuda(monkeypatch, [d for d in sim_devices(1, h2d_gbps=53.5, d2h_gbps=26.0)])
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("pcie",), copy_repeats=4, copy_batches=3))
    device = results.devices[0]
    assert (device.h2d.gb_per_second, device.d2h.gb_per_second) == (53.5, 26.0)
    assert device.h2d.copies_timed == 12 and device.h2d.bytes_per_copy == 256 * 1024
    assert device.runtime == "cuda 12.4"
    assert fake.count("cuMemcpyHtoDAsync_v2") == 1 + 12  # one warm-up copy, then the timed ones
    assert fake.leaks() == {}


def test_peer_matrix_enables_peer_access_and_measures_both_directions(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(2))
    results = run_active(snapshot_of(idle_device(0), idle_device(1)), fast_options(tests=("p2p",)))
    figures = {(p.src, p.dst): (p.p2p_enabled, p.copy.gb_per_second, p.bidirectional_gb_per_second)
               for p in results.peers}
    assert figures == {(0, 1): (True, 370.0, 730.0), (1, 0): (True, 360.0, None)}
    assert fake.node.peer_access == {(0, 1), (1, 0)}
    assert fake.leaks() == {}


def test_peer_copies_without_peer_access_are_measured_and_flagged(monkeypatch):
    devices = sim_devices(2)
    for device in devices:
        device.peer_gbps = {}
    install_cuda(monkeypatch, devices)
    results = run_active(snapshot_of(idle_device(0), idle_device(1)), fast_options(tests=("p2p",)))
    assert {(p.p2p_enabled, p.copy.gb_per_second) for p in results.peers} == {(False, 10.0)}


def test_memtest_covers_the_requested_share_of_free_memory_and_finds_no_error(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("memtest",), memtest_fraction=0.5,
                                                                  reader=live_reader(ecc_corrected=5)))
    memtest = results.devices[0].memtest
    free = 3 * 1024**2  # 4 MiB total less the simulated driver reservation
    assert memtest.error is None and memtest.free_bytes == free
    assert memtest.bytes_tested == free // 2
    assert (memtest.passes_completed, memtest.mismatched_words) == (2, 0)
    assert (memtest.ecc_corrected_before, memtest.ecc_corrected_after) == (5, 5)
    assert fake.count("cuLaunchKernel") == 2 * 2 * 2  # 2 passes x (fill + check) x 2 chunks of at most 1 MiB
    assert fake.leaks() == {}


def test_memtest_finds_a_stuck_bit_and_reports_where(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    cell = SimNode.base(0) + 1024**2 + 4 * 1000  # inside the tested chunks (the result slots come first, small)
    fake.node.devices[0].stuck_bits[cell] = 0x00000100
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("memtest",), memtest_passes=4))
    memtest = results.devices[0].memtest
    assert memtest.mismatched_words == 4  # the flipped bit shows in every pass
    assert memtest.first_error_address == cell
    assert memtest.flipped_bits_mask == 0x100
    assert fake.leaks() == {}


def test_memtest_halves_a_chunk_the_device_refuses(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1, refuse_once_above=1024**2))  # the 1.5 MiB chunk is refused
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("memtest",), memtest_chunk_bytes=2 * 1024**2,
                                                                  memtest_fraction=0.5))
    memtest = results.devices[0].memtest
    assert memtest.error is None and memtest.bytes_tested == 3 * 1024**2 // 2
    assert fake.count("cuLaunchKernel") == 2 * 2 * 2  # in two chunks of 0.75 MiB


def test_a_ptx_refused_by_the_jit_carries_the_jit_log(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    fake.jit_log = b"ptxas application ptx input, line 7; error   : Unknown symbol"
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("stress",)))
    error = results.devices[0].stress.error
    assert error.source == "cuda.cuModuleLoadDataEx" and "CUDA_ERROR_INVALID_PTX" in error.message
    assert "line 7; error   : Unknown symbol" in error.message
    # the stress on an sm_90 GPU loads the wgmma program, then (refused too) the mma.sync one
    assert b".entry gpudiag_wgmma_bf16(" in fake.loaded_ptx[0] and b".target sm_90a" in fake.loaded_ptx[0]
    assert b".entry gpudiag_mma_bf16(" in fake.loaded_ptx[1] and b".target sm_80" in fake.loaded_ptx[1]


def test_stress_runs_for_the_time_asked_and_samples_the_sensors(monkeypatch):
    # sm_75 has no BF16 mma.sync: the FP32 FMA kernel loads it
    fake = install_cuda(monkeypatch, sim_devices(1, fma_per_second=33e12, compute_capability=(7, 5)))
    results = run_active(snapshot_of(idle_device(0)),
                         fast_options(tests=("stress",), stress_seconds=0.3, reader=live_reader(["sw_power_cap"])))
    stress = results.devices[0].stress
    assert stress.error is None and stress.telemetry_error is None
    assert 0.3 <= stress.seconds < 1.0 and stress.launches > 2
    assert stress.fp32_tflops == stress.tflops == 66.0  # 2 FLOP per FMA at the simulated 33e12 FMA/s
    assert (stress.kernel, stress.precision) == ("gpudiag_fma", "fp32")
    assert len(stress.samples) >= 3 and stress.samples[0].seconds < stress.samples[-1].seconds
    sample = stress.samples[0]
    assert (sample.sm_clock_mhz, sample.temperature_celsius, sample.power_watts) == (1980, 61.0, 655.0)
    assert sample.throttle_reasons == ["sw_power_cap"]
    assert fake.leaks() == {}


def test_stress_without_a_reader_says_it_was_not_watched(monkeypatch):
    install_cuda(monkeypatch, sim_devices(1))
    stress = run_active(snapshot_of(idle_device(0)), fast_options(tests=("stress",))).devices[0].stress
    assert stress.samples == [] and "no telemetry reader" in stress.telemetry_error


def test_runtime_devices_are_matched_by_bus_id_not_by_order(monkeypatch):
    devices = sim_devices(2)
    install_cuda(monkeypatch, list(reversed(devices)))  # CUDA's fastest-first order differs from NVML's
    devices[0].h2d_gbps = 11.0
    results = run_active(snapshot_of(idle_device(0), idle_device(1)), fast_options(tests=("pcie",)))
    assert {d.index: d.h2d.gb_per_second for d in results.devices} == {0: 11.0, 1: 50.0}


def test_the_v2_elapsed_time_is_used_where_the_driver_exports_it(monkeypatch):
    class NewerDriver(libcuda.FakeCuda):  # CUDA 12.8+ drivers export cuEventElapsedTime_v2 beside the original
        c_cuEventElapsedTime_v2 = libcuda.FakeCuda.c_cuEventElapsedTime

    fake = NewerDriver(sim_devices(1))
    patch_cdll(monkeypatch, {"libcuda.so": fake})
    results = run_active(snapshot_of(idle_device(0)), fast_options(tests=("pcie",)))
    assert results.devices[0].h2d.gb_per_second == 50.0
    assert fake.count("cuEventElapsedTime_v2") == 4 and fake.count("cuEventElapsedTime") == 0


def test_the_link_is_read_while_the_host_copies_are_in_flight_and_the_best_reading_kept(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    seen = []

    def reader(device):
        # What NVML would answer: the first read still finds the link at its idle Gen1, later ones at Gen5.
        seen.append((fake.count("cuMemcpyHtoDAsync_v2"), fake.count("cuEventSynchronize")))
        generation = 1 if len(seen) == 1 else 5
        return dataclasses.replace(device, pcie=PcieInfo(current_generation=generation, current_width=16))

    options = fast_options(tests=("pcie",), copy_repeats=4, copy_batches=2, reader=reader)
    device = run_active(snapshot_of(idle_device(0)), options).devices[0]
    assert (device.h2d.link_generation, device.h2d.link_width) == (5, 16)
    assert (device.d2h.link_generation, device.d2h.link_width) == (5, 16)
    # First read: the warm-up copy and the first batch queued, the batch not yet waited for.
    assert seen[0] == (1 + 4, 0)
    assert len(seen) == 4  # one read per timed batch, each direction
    assert "GB/s, link under load Gen5 x16 (about " in options.progress.getvalue()


def test_without_a_reader_the_link_under_load_stays_unobserved(monkeypatch):
    install_cuda(monkeypatch, sim_devices(1))
    device = run_active(snapshot_of(idle_device(0)), fast_options(tests=("pcie",))).devices[0]
    assert device.h2d.gb_per_second is not None
    assert (device.h2d.link_generation, device.h2d.link_width) == (None, None)
