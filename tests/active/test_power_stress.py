"""The power stress end to end over the fake CUDA and HIP libraries: the kernel each GPU gets (tensor cores where it
has them, the MFMA program built for its gfx target), the figures it records, and the active.stress verdicts the
node then gets — power short of the limit, thermal throttling, the slow GPU, ECC errors during the load."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

import pytest

from gpudiag.active import run_active
from gpudiag.active import tensor_kernels
from gpudiag.checks.active.stress import STRESS, stress as judge_stress
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.model import ClockInfo, EccInfo, KernelEvent, PowerInfo, Status, TemperatureSensor, Vendor
from tests.support.active import fast_options, idle_device, install_cuda, install_hip, sim_devices, snapshot_of


def reader(power=None, reasons=None, sm_mhz=None, temperature=None, ecc=None):
    """Live sensors per GPU index: `power[i]` W drawn of a 700 W limit, its throttle reasons, SM clock, temperature
    and (corrected, uncorrected) ECC counters; the ECC pair is read as `before` on the first read, `after` later."""
    reads: dict[int, int] = {}

    def read(device):
        i = device.index
        reads[i] = reads.get(i, 0) + 1
        corrected, uncorrected = (ecc or {}).get(i, (3, 0)) if reads[i] > 1 else (3, 0)
        return dataclasses.replace(
            device,
            clocks=ClockInfo(sm_mhz=(sm_mhz or {}).get(i, 1650), max_sm_mhz=1980,
                             throttle_reasons=list((reasons or {}).get(i, ["sw_power_cap"]))),
            temperatures={"gpu": TemperatureSensor(current_celsius=(temperature or {}).get(i, 55.0),
                                                   slowdown_celsius=87.0, shutdown_celsius=92.0)},
            power=PowerInfo(draw_watts=(power or {}).get(i, 692.0), limit_watts=700.0),
            ecc=EccInfo(enabled=True, volatile_corrected=corrected, volatile_uncorrected=uncorrected))
    return read


def run(monkeypatch, sim=None, kernel_events=None, **sensors):
    fake = install_cuda(monkeypatch, sim or sim_devices(2))
    snapshot = snapshot_of(idle_device(0, temperatures={"gpu": TemperatureSensor(35.0, 87.0, 92.0)}),
                           idle_device(1, temperatures={"gpu": TemperatureSensor(35.0, 87.0, 92.0)}))
    snapshot.active = run_active(snapshot, fast_options(tests=("stress",), stress_seconds=0.5,
                                                        sample_interval_seconds=0.04, reader=reader(**sensors),
                                                        kernel_events=kernel_events))
    assert fake.leaks() == {}
    return snapshot, {r.device.index: r for r in judge_stress(snapshot, DEFAULT_EXPECTATIONS)}, fake


def test_a_healthy_pair_at_the_power_cap_passes_with_its_figures(monkeypatch):
    snapshot, results, fake = run(monkeypatch)
    stress = snapshot.active.devices[0].stress
    assert (stress.kernel, stress.precision, stress.tflops) == ("gpudiag_wgmma_bf16", "bf16", 600.0)
    assert stress.stream_gb_per_second == 1500.0  # the streaming warps' bytes, read back from the device counter
    assert set(fake.node.copy_warps) == {4}  # stress_copy_warps 2 → all four warps of the wgmma kernel's third group
    assert stress.samples[0].power_limit_watts == 700.0
    for result in results.values():
        assert result.status == Status.PASS, result.message
        observed = result.observed
        assert observed["mean_power_watts"] == 692.0 and observed["power_limit_watts"] == 700.0
        assert observed["sm_clock_under_load_mhz"] == {"min": 1650, "median": 1650}
        assert observed["tflops"] == 600.0 and observed["precision"] == "bf16"
        assert observed["throttle_reasons"] == ["sw_power_cap"]
        assert observed["node_median"]["tflops"] == 600.0
    assert "600.0 (node median 600) BF16 TFLOPS, steady 692 W of 700 W (99%)" in results[0].message


def test_power_short_of_the_limit_with_no_reason_fails(monkeypatch):
    # GPU 1 runs at its top clock without reaching the cap: GPU 0, capped at 1650 MHz, is not the slow one
    _, results, _ = run(monkeypatch, power={1: 480.0}, reasons={1: []}, sm_mhz={1: 1980})
    assert results[0].status == Status.PASS
    assert results[1].status == Status.FAIL
    assert "steady mean power 480 W is 69% of its 700 W limit and no throttle reason explains it" in results[1].message
    assert results[1].expected["min_mean_power_watts"] == 630.0


def test_power_a_little_short_warns(monkeypatch):
    _, results, _ = run(monkeypatch, power={1: 600.0}, reasons={1: []})
    assert results[1].status == Status.WARN and "86% of its 700 W limit" in results[1].message


def test_thermal_throttling_fails_and_explains_the_low_power(monkeypatch):
    _, results, _ = run(monkeypatch, power={0: 520.0}, reasons={0: ["sw_power_cap", "hw_thermal_slowdown"]},
                     temperature={0: 88.0})
    assert results[0].status == Status.FAIL
    assert "throttle reason hw_thermal_slowdown" in results[0].message
    assert "no throttle reason explains" not in results[0].message
    assert results[1].status == Status.PASS


def test_the_slow_gpu_fails_with_its_figures_beside_its_siblings(monkeypatch):
    sim = sim_devices(2)
    sim[1].tensor_flops = 540e12  # 10 % slower than its sibling
    _, results, _ = run(monkeypatch, sim=sim, sm_mhz={1: 1500})
    assert results[0].status == Status.PASS
    slow = results[1]
    assert slow.status == Status.FAIL
    assert "slow GPU: 540 TFLOPS, 10.0% below the 600 of its 1 identical sibling(s)" in slow.message
    assert (
        "slow GPU: 1500 MHz median SM clock under the cap, 9.1% below the 1650 of its 1 identical sibling(s)"
        in slow.message
    )
    assert slow.observed["node_median"] == {"gpus": 2, "tflops": 600.0, "sm_clock_median_mhz": 1650,
                                            "mean_power_watts": 692.0}


def test_a_gpu_within_the_threshold_of_its_siblings_passes(monkeypatch):
    sim = sim_devices(2)
    sim[1].tensor_flops = 582e12  # 3 % slower: within the default 5 %
    _, results, _ = run(monkeypatch, sim=sim)
    assert [r.status for r in results.values()] == [Status.PASS, Status.PASS]


def test_ecc_errors_during_the_stress(monkeypatch):
    _, results, _ = run(monkeypatch, ecc={0: (3, 2), 1: (5, 0)})
    assert results[0].status == Status.FAIL and "2 uncorrectable ECC errors during the stress" in results[0].message
    assert results[1].status == Status.WARN and "2 corrected ECC errors during the stress" in results[1].message
    assert results[0].observed["ecc_uncorrected"] == [0, 2]


def test_an_xid_logged_during_the_stress_fails_that_gpu_only(monkeypatch):
    old = KernelEvent(Vendor.NVIDIA, "xid", "NVRM: Xid (PCI:0000:3b:00): 13, old", "0000:3b:00.0", 13,
                      timestamp_seconds=10.0)
    new = KernelEvent(Vendor.NVIDIA, "xid", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus",
                      "0000:3b:00.0", 79, timestamp_seconds=500.0)
    reads = iter([[old], [old, new]])
    snapshot, results, fake = run(monkeypatch, kernel_events=lambda: next(reads))
    assert results[0].status == Status.FAIL
    assert "1 kernel-log event(s) of this GPU during the stress, first: xid 79: NVRM: Xid" in results[0].message
    assert results[1].status == Status.PASS and snapshot.active.devices[1].stress.kernel_events == []


def test_an_unreadable_kernel_log_leaves_the_events_unwatched(monkeypatch):
    snapshot, results, fake = run(monkeypatch, kernel_events=lambda: None)
    assert snapshot.active.devices[0].stress.kernel_events is None and results[0].status == Status.PASS


def test_a_gpu_without_bf16_mma_gets_the_fp32_kernel_and_no_power_verdict(monkeypatch):
    _, results, _ = run(monkeypatch, sim=sim_devices(2, compute_capability=(7, 0)), power={0: 300.0, 1: 300.0},
                     reasons={0: [], 1: []})
    for result in results.values():
        assert result.observed["precision"] == "fp32" and result.status == Status.PASS, result.message


@pytest.mark.slow
def test_hip_selects_the_mfma_program_for_gfx942_and_gfx950(monkeypatch):
    hip, hiprtc = install_hip(monkeypatch, sim_devices(2, total_bytes=128 * 1024**2))  # HIP's fallback grid
    snapshot = snapshot_of(idle_device(0, Vendor.AMD, architecture="gfx942"),
                           idle_device(1, Vendor.AMD, architecture="gfx950"))
    results = run_active(snapshot, fast_options(tests=("stress",)))
    for device, arch in zip(results.devices, ("gfx942", "gfx950")):
        assert device.stress.error is None
        assert (device.stress.kernel, device.stress.precision) == (tensor_kernels.MFMA, "bf16")
        assert (f"--offload-arch={arch}",) in hiprtc.options
    mfma = [src for src in hip.compiled.values() if b"__builtin_amdgcn_mfma_f32_32x32x8bf16_1k" in src]
    assert len(mfma) == 1  # one source for both targets (the fake's code object is its hash); the fill kernel beside
    assert {name for name in hip._functions_by_handle.values()} == {tensor_kernels.MFMA, "gpudiag_fill"}
    # one of the four wavefronts of a block streams (the share of two warps of eight on NVIDIA)
    # (a little under the fake's 1500 GB/s: the GPU time also holds the copies of the block records)
    assert results.devices[0].stress.stream_gb_per_second == pytest.approx(1500.0, rel=0.01)
    assert set(hip.node.copy_warps) == {1}
    assert hip.leaks() == {}


def test_hip_keeps_the_fma_kernel_elsewhere(monkeypatch):
    hip, hiprtc = install_hip(monkeypatch, sim_devices(1))
    snapshot = snapshot_of(idle_device(0, Vendor.AMD, architecture="gfx90a"))
    stress = run_active(snapshot, fast_options(tests=("stress",))).devices[0].stress
    assert (stress.kernel, stress.precision) == ("gpudiag_fma", "fp32") and hiprtc.options == [()]
    assert tensor_kernels.stress_kernel("amd", "gfx942:sramecc+:xnack-", None, 16).kernel == tensor_kernels.MFMA


def test_judged_results_carry_the_check_id(monkeypatch):
    _, results, _ = run(monkeypatch)
    assert {r.check for r in results.values()} == {STRESS}


def test_the_collector_rescans_the_kernel_log_for_the_stress(tmp_path):
    from gpudiag.probe.collector import CollectOptions, Collector

    log = tmp_path / "dmesg.txt"
    log.write_text("[  812.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    events = Collector(CollectOptions(kernel_log_file=log)).kernel_events()
    assert [(e.kind, e.code, e.pci_bus_id) for e in events] == [("xid", 79, "0000:3b:00.0")]
    assert Collector(CollectOptions(read_kernel_log=False)).kernel_events() is None


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="CUDA toolkit (ptxas) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
@pytest.mark.parametrize("program", [tensor_kernels.CUDA_MMA, tensor_kernels.CUDA_COPY], ids=lambda p: p.name)
def test_the_tensor_and_copy_ptx_assemble_without_spills(tmp_path, arch, program):
    source = tmp_path / "k.ptx"
    source.write_text(program.text)
    done = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(source), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"Compiling entry function '{program.kernels[0]}' for '{arch}'" in done.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in done.stderr
    registers = int(re.search(r"Used (\d+) registers", done.stderr)[1])
    # every block of the grid resident at once (MMA_KERNEL.blocks_per_multiprocessor, hbm.COPY_BLOCKS_PER_...):
    # 4 blocks × 256 threads must fit the 64K registers of an SM
    assert 4 * 256 * registers <= 65536


def test_the_mma_ptx_stays_on_an_isa_version_cuda_11_drivers_jit():
    assert tensor_kernels.MMA_PTX.lstrip().startswith(".version 7.0\n.target sm_80")
    assert tensor_kernels.COPY_PTX.lstrip().startswith(".version 7.0\n.target sm_52")
    # the loop body, and the sample between the parts of a launch (+A·B read out, then −A·B)
    assert tensor_kernels.MMA_PTX.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == (
        tensor_kernels.MMA_PER_ITERATION + tensor_kernels.EXTRA_MMA // 4)
