"""Every result of the stress checked bit for bit, over the fake CUDA and HIP runtimes (tests/support/fakes/gpu_sim.py
runs the kernels' contract, gpudiag/active/ptx_parts.py): the block records compared, a faulty SM named, the
validation-only seams, identical GPUs compared, the verified HBM stream, what active.compute and the exporter say."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gpudiag.active import kernels, run_active, tensor_kernels, wgmma_ptx
from gpudiag.active.options import ActiveOptions, ValidationFault, validation_fault_from
from gpudiag.active.stress_verify import location_name
from gpudiag.checks.active.compute import COMPUTE, compute
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.exporter.textfile import render_textfile
from gpudiag.model import Status, Vendor
from tests.support.active import fast_options, idle_device, install_cuda, install_hip, sim_devices, snapshot_of
from tests.support.exporter import value
from tests.support.fakes.gpu_sim import SimDevice, SimNode


def stressed(monkeypatch, sims=None, **changes):
    sims = sims or sim_devices(2)
    fake = install_cuda(monkeypatch, sims)
    snapshot = snapshot_of(*(idle_device(i) for i in range(len(sims))))
    snapshot.active = run_active(snapshot, fast_options(tests=("stress",), stress_seconds=0.3, **changes))
    assert fake.leaks() == {}
    return snapshot, {r.device.index: r for r in compute(snapshot, DEFAULT_EXPECTATIONS)}, fake


def test_a_healthy_pair_is_verified_on_every_launch_and_agrees(monkeypatch):
    snapshot, results, fake = stressed(monkeypatch)
    for entry in snapshot.active.devices:
        check = entry.stress.verification
        assert entry.stress.kernel == tensor_kernels.WGMMA
        assert check.launches_verified == entry.stress.launches >= 2
        assert check.blocks_per_launch == 4 and check.signatures_per_block == 8  # one block an SM, 8 tensor warps
        assert (check.mismatched_blocks, check.stream_mismatches, check.hot_reference_matches) == (0, 0, True)
        assert check.reference_iterations == 4096 and check.reference_sample == 1.25
        assert check.stream_words_read > 0
    signatures = {e.stress.verification.reference_signature for e in snapshot.active.devices}
    assert len(signatures) == 1
    for result in results.values():
        assert result.status == Status.PASS, result.message
        assert "bit-identical, the reference launch the same cold and hot, the same as its 1 identical GPU(s)" in (
            result.message)
        assert result.observed["siblings"] == {"gpus_compared": 2, "agreeing": 2}


def test_a_faulty_sm_is_named_and_a_repeated_fault_is_an_rma(monkeypatch):
    sims = sim_devices(2)
    sims[1].faulty_sms = {2}
    snapshot, results, _ = stressed(monkeypatch, sims)
    assert results[0].status == Status.PASS
    bad = results[1]
    assert bad.status == Status.FAIL and (bad.action, bad.fault_code) == ("rma", "GPUDIAG-ACTIVE-COMPUTE-REPRODUCED")
    check = snapshot.active.devices[1].stress.verification
    assert [(s.location, s.raw, s.first_launch) for s in check.mismatched_sms] == [("SM 2", 2, 0)]
    assert check.mismatched_sms[0].launches == check.launches_verified + 1  # every steady launch and the hot reference
    assert f"on SM 2 ({check.launches_verified + 1} launches)" in bad.message
    assert "dcgmi diag -r 3" in bad.remediation and "RMA" in bad.remediation
    text = render_textfile(snapshot, [bad])
    gpu1 = {"gpu": "1"}
    assert value(text, "gpudiag_active_stress_mismatches", kind="tensor", **gpu1) == check.mismatched_blocks
    assert value(text, "gpudiag_active_stress_mismatches", kind="stream", **gpu1) == 0
    assert value(text, "gpudiag_active_stress_mismatch_sm_launches", sm="SM 2", **gpu1) == check.launches_verified + 1
    assert value(text, "gpudiag_active_stress_verified_launches", **gpu1) == check.launches_verified


def test_the_validation_flip_on_one_sm_fails_the_check_naming_that_sm(monkeypatch):
    snapshot, results, _ = stressed(monkeypatch, validation_fault=ValidationFault("sm", 3))
    for index, result in results.items():
        assert result.status == Status.FAIL and result.action == "drain", result.message
        assert "1 block result(s) differed from their siblings' in 1 of" in result.message
        assert "on SM 3 (1 launch)" in result.message
        assert "[validation only: bit 13 of one accumulator flipped on SM 3 in steady launch 1]" in result.message
        check = snapshot.active.devices[index].stress.verification
        assert [(s.location, s.first_launch) for s in check.mismatched_sms] == [("SM 3", 1)]
        assert check.hot_reference_matches is True  # the flip went into one launch only


def test_the_validation_flip_in_the_streamed_buffer_is_read_back(monkeypatch):
    snapshot, results, _ = stressed(monkeypatch, validation_fault=ValidationFault("stream"))
    for index, result in results.items():
        check = snapshot.active.devices[index].stress.verification
        assert result.status == Status.FAIL and result.fault_code == "GPUDIAG-ACTIVE-STREAM-MISMATCH"
        assert check.mismatched_blocks == 0 and check.stream_mismatches == 1
        assert check.stream_flipped_bits_mask == 1 << 7
        assert f"first at device address {check.stream_first_error_address:#x}" in result.message
        assert f"streamed word at device address {check.stream_first_error_address:#x}" in check.validation_fault


def test_a_bit_flipping_cell_in_the_streamed_memory_is_caught(monkeypatch):
    sims = sim_devices(1)
    # the streamed buffer is the stress's first device allocation (stress_tensor.TensorLoad), at the node's base;
    # the fake flips this bit on every write of the cell, as a weak cell that does not hold what it was given
    cell = SimNode.base(0) + 64
    sims[0].stuck_bits = {cell: 0x00010000}
    snapshot, results, fake = stressed(monkeypatch, sims)
    check = snapshot.active.devices[0].stress.verification
    assert check.stream_mismatches >= 1 and check.mismatched_blocks == 0
    assert (check.stream_first_error_address, check.stream_flipped_bits_mask) == (cell, 0x00010000)
    result = results[0]
    assert result.status == Status.FAIL and result.fault_code == "GPUDIAG-ACTIVE-STREAM-MISMATCH"
    assert f"streamed HBM read(s) returned other data than written (first at device address {cell:#x}" in (
        result.message)


def test_a_gpu_that_computes_other_bits_than_its_identical_siblings_fails(monkeypatch):
    sims = [SimDevice(f"0000:{bus}:00.0".upper()) for bus in ("3b", "5e", "86")]
    sims[2].faulty_sms = {0, 1, 2, 3}  # every SM of GPU 2 wrong the same way: its blocks agree with each other
    monkeypatch.setattr("tests.support.active.BUS_IDS", ("0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"))
    snapshot, results, _ = stressed(monkeypatch, sims)
    assert snapshot.active.devices[2].stress.verification.mismatched_blocks == 0
    assert [results[i].status for i in range(3)] == [Status.PASS, Status.PASS, Status.FAIL]
    assert "its reference result differs from that of 2 of its 2 identical GPU(s)" in results[2].message


def test_two_gpus_that_disagree_both_fail(monkeypatch):
    sims = sim_devices(2)
    sims[1].faulty_sms = {0, 1, 2, 3}
    _, results, _ = stressed(monkeypatch, sims)
    for result in results.values():
        assert result.status == Status.FAIL
        assert "its 2 identical GPUs share no reference result: one of them at least computes wrong" in result.message


def test_tensor_units_that_return_zero_fail_even_when_they_agree(monkeypatch):
    _, results, _ = stressed(monkeypatch, sim_devices(2, tensor_sample_bits=0))
    for result in results.values():
        assert result.status == Status.FAIL
        assert "the tensor cores returned 0.0 for a sum of BF16 products" in result.message


def test_the_sm90a_module_refused_falls_back_to_mma_sync_still_verified(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    fake.jit_log, fake.jit_refuses = b"ptxas fatal: unsupported target sm_90a", b".target sm_90a"
    snapshot = snapshot_of(idle_device(0))
    snapshot.active = run_active(snapshot, fast_options(tests=("stress",), stress_seconds=0.3))
    stress = snapshot.active.devices[0].stress
    assert stress.error is None and stress.kernel == tensor_kernels.MMA
    assert "gpudiag_wgmma_bf16 refused" in stress.kernel_fallback and "ran gpudiag_mma_bf16" in stress.kernel_fallback
    assert stress.verification.blocks_per_launch == 16 and stress.verification.signatures_per_block == 6
    (result,) = compute(snapshot, DEFAULT_EXPECTATIONS)
    assert result.status == Status.PASS, result.message


def test_the_fp32_kernel_is_not_verified_and_says_so(monkeypatch):
    _, results, _ = stressed(monkeypatch, sim_devices(2, compute_capability=(7, 5)))
    for result in results.values():
        assert result.status == Status.SKIP
        assert "the gpudiag_fma kernel (fp32) leaves no results to verify" in result.message


def test_the_mfma_kernel_names_the_xcc_and_cu(monkeypatch):
    sims = sim_devices(2, total_bytes=16 * 1024**2)
    where = (1 << 16) | 1  # the fake's AMD location of block 3: XCC 1, CU 1
    sims[1].faulty_sms = {where}
    install_hip(monkeypatch, sims)
    snapshot = snapshot_of(idle_device(0, Vendor.AMD, architecture="gfx942"),
                           idle_device(1, Vendor.AMD, architecture="gfx942"))
    snapshot.active = run_active(snapshot, fast_options(tests=("stress",), stress_seconds=0.3, stress_copy_warps=0))
    results = {r.device.index: r for r in compute(snapshot, DEFAULT_EXPECTATIONS)}
    assert results[0].status == Status.PASS, results[0].message
    assert results[1].status == Status.FAIL and "on XCC 1 SE 0 SH 0 CU 1 (" in results[1].message


def test_location_words_read_as_the_vendor_names_them():
    assert location_name("nvidia", 131) == "SM 131"
    # (XCC << 16) | HW_ID bits 14:8: SE_ID 14:13, SH_ID 12, CU_ID 11:8 (ROCm-Device-Libs smid.cl)
    assert location_name("amd", (3 << 16) | (2 << 5) | (1 << 4) | 11) == "XCC 3 SE 2 SH 1 CU 11"


@pytest.mark.parametrize("environ, fault", [
    ({}, None),
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_SM": "17"}, ValidationFault("sm", 17)),
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_SM": "0x10005"}, ValidationFault("sm", 0x10005)),
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_STREAM": "1"}, ValidationFault("stream")),
])
def test_the_validation_seams_are_read_from_the_environment(monkeypatch, environ, fault):
    assert validation_fault_from(environ) == fault
    for name in ("GPUDIAG_VALIDATION_ONLY_FLIP_SM", "GPUDIAG_VALIDATION_ONLY_FLIP_STREAM"):
        monkeypatch.delenv(name, raising=False)
    for name, text in environ.items():
        monkeypatch.setenv(name, text)
    assert ActiveOptions.for_level(2).validation_fault == fault


@pytest.mark.parametrize("environ, error", [
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_SM": "seventeen"}, "expected an SM number"),
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_SM": "-1"}, "expected an SM number"),
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_STREAM": "yes"}, "expected 1"),
    ({"GPUDIAG_VALIDATION_ONLY_FLIP_SM": "1", "GPUDIAG_VALIDATION_ONLY_FLIP_STREAM": "1"}, "not both"),
])
def test_a_bad_validation_seam_is_a_one_line_error(environ, error):
    with pytest.raises(ValueError, match=error) as raised:
        validation_fault_from(environ)
    assert "validation only" in str(raised.value) and "\n" not in str(raised.value)


def test_a_bad_validation_seam_ends_the_cli_with_a_usage_error(monkeypatch, capsys):
    from gpudiag.cli import app as cli
    from gpudiag.model import NodeSnapshot

    class Collector:
        def __init__(self, options):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def collect(self):
            return NodeSnapshot(hostname="n")

        reprobe = kernel_events = None

    monkeypatch.setattr("gpudiag.probe.collector.Collector", Collector)
    monkeypatch.setenv("GPUDIAG_VALIDATION_ONLY_FLIP_SM", "x")
    assert cli.main(["check", "--level", "2", "--json", "--direct"]) == 2
    assert "GPUDIAG_VALIDATION_ONLY_FLIP_SM='x': expected an SM number" in capsys.readouterr().err


def test_memtest_patterns_include_the_address_and_random_passes_and_find_a_stuck_bit(monkeypatch):
    devices = sim_devices(1, total_bytes=8 * 1024**2)
    install_cuda(monkeypatch, devices)
    cell = SimNode.base(0) + 1024**2 + 256
    devices[0].stuck_bits[cell] = 0x80000000
    options = fast_options(tests=("memtest",), memtest_passes=len(kernels.LEVEL2_PATTERNS),
                           memtest_patterns=kernels.LEVEL2_PATTERNS)
    memtest = run_active(snapshot_of(idle_device(0)), options).devices[0].memtest
    assert memtest.patterns == ["fixed 0x00000000", "fixed 0xffffffff", "fixed 0x55555555", "fixed 0xaaaaaaaa",
                                "address-in-address 0x00000000", "random 0x2545f491", "random 0x9e3779b9"]
    assert memtest.first_error_address == cell and memtest.flipped_bits_mask == 0x80000000
    assert memtest.mismatched_words >= 3  # half of the patterns hold that bit the other way, on average


def test_address_in_address_gives_equal_fixed_words_different_values():
    # the first words of two chunks hold the same fixed pattern (index 0 of each); their addresses differ, in the
    # high half too: here 4 GiB apart, the same low 32 bits
    a, b = 0x7F0000000000, 0x7F0100000000
    assert kernels.pattern_value(kernels.ADDRESS, 0, 0, a) != kernels.pattern_value(kernels.ADDRESS, 0, 0, b)
    assert kernels.pattern_value(kernels.RANDOM, 1, 0, a) != kernels.pattern_value(kernels.RANDOM, 2, 0, a)
    # the complement of an ADDRESS pattern is the pattern of the inverted seed (moving inversions use that)
    assert kernels.pattern_value(kernels.ADDRESS, 5, kernels.INVERTED, a) == (
        ~kernels.pattern_value(kernels.ADDRESS, 5, 0, a) & 0xFFFFFFFF)


def test_the_model_round_trips_the_verification():
    from gpudiag.model import ActiveResults, from_dict, to_dict

    raw = {
        "tests": ["stress"],
        "devices": [
            {
                "index": 0,
                "stress": {
                    "verification": {
                        "launches_verified": 3,
                        "mismatched_sms": [{"location": "SM 1", "raw": 1, "launches": 2, "first_launch": 0}],
                    }
                },
            }
        ],
    }
    results = from_dict(ActiveResults, raw)
    assert results.devices[0].stress.verification.mismatched_sms[0].location == "SM 1"
    assert to_dict(results)["devices"][0]["stress"]["verification"]["launches_verified"] == 3
    assert COMPUTE == "active.compute"


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="CUDA toolkit (ptxas) not installed")
def test_the_wgmma_ptx_assembles_for_sm90a_without_spills_and_fits_one_block_an_sm(tmp_path):
    source = tmp_path / "w.ptx"
    source.write_text(tensor_kernels.CUDA_WGMMA.text)
    cubin = tmp_path / "w.cubin"
    done = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(source), "-o", str(cubin)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in done.stderr
    assert "warning" not in done.stderr.lower()  # no wgmma serialisation (C7510) or ignored register cap
    registers = int(re.search(r"Used (\d+) registers", done.stderr)[1])
    assert registers * wgmma_ptx.BLOCK_THREADS <= 65536
    if shutil.which("cuobjdump") is not None:  # HGMMA in the SASS: the tensor path cuBLAS takes on Hopper
        sass = subprocess.run(["cuobjdump", "--dump-sass", str(cubin)], capture_output=True, text=True, timeout=60)
        if sass.returncode == 0:  # cuobjdump without nvdisasm beside it cannot dump
            assert sass.stdout.count("HGMMA.64x256x16.F32.BF16") == 6


def test_the_wgmma_ptx_asks_for_the_isa_and_target_it_needs():
    text = tensor_kernels.CUDA_WGMMA.text.lstrip()
    assert text.startswith(".version 8.0\n.target sm_90a")
    assert text.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 6  # 4 a loop, the sample's pair
    assert "fence.proxy.async.shared::cta" in text
