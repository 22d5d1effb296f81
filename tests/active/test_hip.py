"""The HIP binding over a fake libamdhip64.so and libhiprtc.so (ctypes.CDLL patched): the same load tests as on
CUDA, with HIP's conventions and the kernels compiled at run time by hiprtc."""

from __future__ import annotations

import pytest

from gpudiag.active import run_active
from gpudiag.active.hip import HipRuntime
from gpudiag.active.runtime import GpuOutOfMemory, RuntimeUnavailable
from gpudiag.model import ErrorKind, Vendor
from tests.support.active import fast_options, idle_device, install_hip, live_reader, sim_devices, snapshot_of
from tests.support.fakes import libamdhip
from tests.support.fakes.gpu_sim import SimNode, patch_cdll


def amd(index: int, **changes):
    return idle_device(index, Vendor.AMD, **changes)


def test_missing_hip_runtime_is_reported_with_every_name_tried(monkeypatch):
    patch_cdll(monkeypatch, {})
    with pytest.raises(RuntimeUnavailable) as raised:
        HipRuntime()
    assert raised.value.kind == ErrorKind.NOT_FOUND
    assert "libamdhip64.so.6" in str(raised.value) and "/opt/rocm/lib/libamdhip64.so" in str(raised.value)
    results = run_active(snapshot_of(amd(0)), fast_options(tests=("stress",)))
    assert results.devices[0].stress.error.source == "hip.load"


def test_no_hip_device(monkeypatch):
    install_hip(monkeypatch, sim_devices(1), init_result=libamdhip.hipErrorNoDevice)
    with pytest.raises(RuntimeUnavailable, match="hipErrorNoDevice"):
        HipRuntime()


def test_out_of_memory_names_hip_error(monkeypatch):
    install_hip(monkeypatch, sim_devices(1))
    runtime = HipRuntime()
    runtime.use(0)
    with pytest.raises(GpuOutOfMemory) as raised:
        runtime.alloc(1024**3)
    assert (raised.value.call, raised.value.error_name) == ("hipMalloc", "hipErrorOutOfMemory")


def test_copies_pairs_memtest_and_stress_run_on_hip(monkeypatch):
    # 8 MiB: without a multiprocessor count HIP launches kernels.FALLBACK_GRID blocks (a 4 MiB stress buffer)
    hip, hiprtc = install_hip(monkeypatch, sim_devices(2, h2d_gbps=55.0, d2h_gbps=54.0, total_bytes=8 * 1024**2))
    cell = SimNode.base(1) + 1024**2 + 64
    hip.node.devices[1].stuck_bits[cell] = 0x80000000
    results = run_active(snapshot_of(amd(0), amd(1)), fast_options(tests=("pcie", "p2p", "memtest", "stress"),
                                                                   reader=live_reader(["ppt_power"])))
    first, second = results.devices
    assert first.runtime == "hip 6.2"
    assert (first.h2d.gb_per_second, first.d2h.gb_per_second) == (55.0, 54.0)
    assert {(p.src, p.dst): p.copy.gb_per_second for p in results.peers} == {(0, 1): 370.0, (1, 0): 360.0}
    assert first.memtest.mismatched_words == 0 and first.memtest.passes_completed == 2
    assert second.memtest.mismatched_words == 2 and second.memtest.first_error_address == cell
    assert second.memtest.flipped_bits_mask == 0x80000000
    assert first.stress.error is None and first.stress.samples[0].throttle_reasons == ["ppt_power"]
    assert hip.leaks() == {}
    assert hiprtc.count("hiprtcCompileProgram") == 1  # compiled once, loaded on each GPU
    assert hip.count("hipModuleLoadData") == 4  # memtest and stress on two GPUs
    assert first.stress.precision == "fp32"  # no gfx target known: the FMA kernel


def test_a_hiprtc_compile_error_carries_the_compiler_log(monkeypatch):
    hip, hiprtc = install_hip(monkeypatch, sim_devices(1))
    monkeypatch.setattr("gpudiag.active.kernels.HIP_SOURCE", "extern \"C\" __global__ void gpudiag_fill(int x) {}")
    stress = run_active(snapshot_of(amd(0)), fast_options(tests=("stress",))).devices[0].stress
    assert stress.error.source == "hiprtc.hiprtcCompileProgram"
    assert "HIPRTC_ERROR_COMPILATION" in stress.error.message
    assert "kernels missing: gpudiag_check, gpudiag_fma" in stress.error.message
    assert hip.leaks() == {} and hiprtc.count("hiprtcDestroyProgram") == 1


def test_missing_hiprtc_still_lets_the_copy_tests_run(monkeypatch):
    hip = libamdhip.FakeHip(sim_devices(1))
    patch_cdll(monkeypatch, {"libamdhip64.so": hip})
    results = run_active(snapshot_of(amd(0)), fast_options(tests=("pcie", "stress")))
    device = results.devices[0]
    assert device.h2d.gb_per_second == 50.0
    assert device.stress.error.source == "hiprtc.load" and device.stress.error.kind == ErrorKind.NOT_FOUND
    assert hip.leaks() == {}
