"""The diagnostic kernels' text: the PTX assembles for the GPUs it must run on (when the CUDA toolkit's ptxas is
installed, as on the development image), stays on an ISA version old drivers JIT, and agrees with the Python
contract (pattern, result slot) that the runner and the fakes rely on."""

from __future__ import annotations

import re
import shutil
import subprocess
import struct

import pytest

from gpudiag.active import kernels

PTXAS = shutil.which("ptxas")


@pytest.mark.skipif(PTXAS is None, reason="CUDA toolkit (ptxas) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_the_ptx_assembles_for_current_gpus(tmp_path, arch):
    source = tmp_path / "kernels.ptx"
    source.write_text(kernels.PTX)
    done = subprocess.run([PTXAS, f"-arch={arch}", "-v", str(source), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in kernels.NAMES:
        assert f"Compiling entry function '{name}' for '{arch}'" in done.stderr
    assert "spill" not in done.stderr.replace("0 bytes spill stores, 0 bytes spill loads", "")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="CUDA toolkit (nvcc) not installed")
def test_the_hip_source_is_valid_cuda_compatible_cpp(tmp_path):
    # No ROCm here: nvcc checks the HIP source's syntax and builtins (blockIdx, atomicMin on u64, fmaf), which HIP
    # shares with CUDA; hiprtc compiles the same text on AMD nodes.
    source = tmp_path / "kernels.cu"
    source.write_text(kernels.HIP_SOURCE)
    done = subprocess.run(["nvcc", "-arch=sm_90", "-c", str(source), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_ptx_targets_an_isa_every_cuda_11_driver_jits():
    version = re.search(r"^\.version (\d+)\.(\d+)$", kernels.PTX, re.M)
    assert version and (int(version[1]), int(version[2])) <= (7, 0)
    assert re.search(r"^\.target sm_52$", kernels.PTX, re.M)
    for name in kernels.NAMES:
        assert f".visible .entry {name}(" in kernels.PTX and f'extern "C" __global__ void {name}(' in kernels.HIP_SOURCE


def test_the_ptx_multiplier_is_the_patterns():
    signed = struct.unpack("<i", struct.pack("<I", kernels.PATTERN_MULTIPLIER))[0]
    assert kernels.PTX.count(f"mul.lo.s32 \t%r7, %r6, {signed};") == 3  # fill, check and invert
    assert "0x9E3779B1u" in kernels.HIP_SOURCE


def test_pattern_and_result_slot():
    assert kernels.pattern_word(0, 0xFFFFFFFF) == 0xFFFFFFFF
    assert kernels.pattern_word(1, 0) == kernels.PATTERN_MULTIPLIER
    assert kernels.pattern_word(2**32 + 1, 0) == kernels.PATTERN_MULTIPLIER  # the index is taken mod 2^32
    assert kernels.RESULT_SLOT_BYTES == 32
    assert kernels.parse_result_slot(kernels.RESULT_SLOT_INIT) == (0, -1, 0)
    written = struct.pack("<QQI", 3, 17, 0x101) + bytes(12)  # what gpudiag_check leaves at offsets 0, 8, 16
    assert kernels.parse_result_slot(written) == (3, 17, 0x101)
    assert kernels.grid_for(132) == 1056 and kernels.grid_for(None) == kernels.FALLBACK_GRID
