"""`--level 3`, the soak: the options it sets, the CLI that reaches them, the deadline that fits them, and the
moving-inversions memory test over the fake CUDA library."""

from __future__ import annotations


import pytest

from gpudiag.active import ActiveOptions, run_active
from gpudiag.active import kernels
from gpudiag.active.options import default_deadline
from gpudiag.cli import app as cli
from gpudiag.model import NodeSnapshot
from tests.support.active import fast_options, idle_device, install_cuda, sim_devices, snapshot_of
from tests.support.fakes.gpu_sim import SimNode
from tests.support.paths import FIXTURES

RECORDED = FIXTURES / "h200" / "snapshot.json"


def test_level_3_is_the_soak_and_level_2_stays_short():
    soak, short = ActiveOptions.for_level(3), ActiveOptions.for_level(2)
    assert (soak.stress_seconds, soak.memtest_passes, soak.memtest_inversions, soak.memtest_fraction) == (
        600.0, 12, True, 0.95)
    assert soak.memtest_patterns == kernels.LEVEL3_PATTERNS
    # level 2: the four fixed patterns, address-in-address and two random ones
    assert (short.stress_seconds, short.memtest_passes, short.memtest_inversions) == (30.0, 7, False)
    assert [mode for mode, _ in short.memtest_patterns] == [kernels.FIXED] * 4 + [kernels.ADDRESS] + [
        kernels.RANDOM
    ] * 2
    assert ActiveOptions.for_level(3, 120.0).stress_seconds == 120.0
    assert default_deadline(2, None) == 600.0 and default_deadline(3, None) == 900.0
    assert default_deadline(3, 1800.0) == 2100.0  # a longer soak gets a deadline it fits in


def test_moving_inversions_find_a_stuck_bit_and_cover_every_seed(monkeypatch):
    devices = sim_devices(1, total_bytes=8 * 1024**2)
    fake = install_cuda(monkeypatch, devices)
    cell = SimNode.base(0) + 1024**2 + 128
    devices[0].stuck_bits[cell] = 0x00000001
    options = fast_options(tests=("memtest",), memtest_passes=len(kernels.SEEDS), memtest_inversions=True,
                           memtest_patterns=kernels.LEVEL3_PATTERNS[:len(kernels.SEEDS)])
    memtest = run_active(snapshot_of(idle_device(0)), options).devices[0].memtest
    assert memtest.passes_completed == 8 and memtest.error is None
    # each pass verifies the cell three times (two inversions and the final check); a bit stuck by the writes
    # shows in every verification where the written value had it the other way
    assert memtest.mismatched_words >= 8 and memtest.first_error_address == cell
    assert memtest.flipped_bits_mask == 0x00000001
    chunks = -(-memtest.bytes_tested // options.memtest_chunk_bytes)
    assert fake.count("cuLaunchKernel") == 8 * 4 * chunks  # fill, invert, invert back, check: every chunk
    assert "8 passes with moving inversions" in options.progress.getvalue()
    assert fake.leaks() == {}


def test_without_inversions_the_kernel_is_not_used(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    run_active(snapshot_of(idle_device(0)), fast_options(tests=("memtest",)))
    assert fake.count("cuLaunchKernel") == 2 * 2 * 3  # 2 passes × (fill + check) × 3 chunks of 1 MiB


def test_the_cli_takes_level_3_and_the_stress_seconds(monkeypatch, capsys):
    seen = {}

    def collect(root, kernel_log, timeout, level=1, parts=None, stress_seconds=None):
        seen.update(level=level, stress_seconds=stress_seconds)
        return NodeSnapshot(hostname="n")

    monkeypatch.setattr("gpudiag.cli.shared.node_collect.collect", collect)
    cli.main(["check", "--level", "3", "--stress-seconds", "45", "--json"])
    assert seen == {"level": 3, "stress_seconds": 45.0}
    assert cli.main(["check", "--level", "4"]) == 2
    assert cli.main(["check", "--level", "3", "--replay", str(RECORDED)]) == 2
    assert "cannot be load-tested" in capsys.readouterr().err


@pytest.mark.parametrize("level, stress_seconds", [(2, None), (3, 20.0)])
def test_level_options_reach_run_active(monkeypatch, level, stress_seconds):
    options = ActiveOptions.for_level(level, stress_seconds, deadline_seconds=5.0)
    assert options.deadline_seconds == 5.0
    assert options.stress_seconds == (stress_seconds or 30.0)
