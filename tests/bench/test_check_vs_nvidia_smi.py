"""bench/check_vs_nvidia_smi.py, the lab's figure for issue 36 item 9, run at a tiny size: over the tests' fake NVIDIA
node (the breakdown's steps and probe parts come from a check that probed), and as on the lab with a stand-in
`nvidia-smi` on PATH (the user's own command, `python -m gpudiag check --direct`, beside it; the ratio printed and
written under $OUT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.slow

BENCH = str(REPO / "bench" / "check_vs_nvidia_smi.py")
STEPS = ["interpreter start", "bench set-up", "fast path", "imports", "probe", "judge, render, write", "exit"]


def run_bench(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, BENCH, "--no-compile", "--runs", "2", "--breakdown-runs", "1", *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def test_over_the_fake_node_every_step_of_the_breakdown_is_measured(tmp_path):
    done = run_bench(["--fake", "1", "--out", str(tmp_path)], {**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "check_vs_nvidia_smi.json").read_text())
    assert found["ratio"] is None and set(found["figures"]) == {"gpudiag check --direct", "python -c pass"}
    assert found["figures"]["gpudiag check --direct"]["exit_codes"] == [0]  # the fake node is healthy
    steps = found["breakdown"]["steps_median_ms"]
    assert list(steps) == STEPS and all(value > 0 for value in steps.values())
    assert {"host", "open:nvml", "nvml", "kernel_log"} <= set(found["breakdown"]["probe_parts_median_ms"])
    imports = found["breakdown"]["imports"]
    assert "gpudiag.checks" in imports["by_package_ms"] and imports["modules"] > 20
    assert "tests.support.fakes.fake_nvml" not in imports["top_modules_ms"]  # the fake's own imports are left out
    assert (tmp_path / "check_vs_nvidia_smi.txt").read_text().startswith("over the tests' fake 1-GPU")


def test_on_a_node_it_times_the_users_command_beside_nvidia_smi_and_prints_the_ratio(tmp_path):
    stand_in = tmp_path / "bin" / "nvidia-smi"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\necho '==============NVSMI LOG=============='\n")
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}", "OUT": str(out)}
    done = run_bench([], env)
    assert done.returncode == 0, done.stderr
    found = json.loads((out / "check_vs_nvidia_smi.json").read_text())
    assert found["command"] == [sys.executable, "-m", "gpudiag", "check", "--direct"]
    assert set(found["figures"]) == {"gpudiag check --direct", "nvidia-smi -q", "python -c pass"}
    fig = found["figures"]["nvidia-smi -q"]
    assert fig["runs"] == 2 and fig["exit_codes"] == [0] and fig["median_ms"] <= fig["p90_ms"] <= fig["max_ms"]
    assert found["ratio"] == pytest.approx(found["figures"]["gpudiag check --direct"]["median_ms"] / fig["median_ms"],
                                           abs=1e-3)
    assert "ratio gpudiag check --direct / nvidia-smi -q = " in done.stdout
    # no NVIDIA driver here: no early NVML start, said so; the check still probed the host and the kernel log
    assert found["breakdown"]["early_nvml_median_ms"] == {} and "none in the probing process" in done.stdout
    # every program the check started (journalctl, where this machine has it) is timed again on its own
    assert set(found["breakdown"]["programs"]) == {" ".join(s["argv"]) for s in found["breakdown"]["spawned"]}


def test_a_compared_check_runs_in_the_same_rounds_and_its_ratios_are_printed(tmp_path):
    """--compare: the code before a change, timed in the same interleaved rounds as the check."""
    stand_in = tmp_path / "bin" / "nvidia-smi"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\necho '==============NVSMI LOG=============='\n")
    stand_in.chmod(0o755)
    before = tmp_path / "before" / "gpudiag"
    before.parent.mkdir()
    before.write_text(f"#!/bin/sh\nexec {sys.executable} -m gpudiag \"$@\"\n")
    before.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
           "PYTHONPATH": str(REPO)}
    done = run_bench(["--compare", str(before)], env)
    assert done.returncode == 0, done.stderr
    found = json.loads((out / "check_vs_nvidia_smi.json").read_text())
    compared = found["figures"]["--compare's check"]
    # the same check as the tree's (on this machine without GPUs both exit alike: nothing probed)
    assert compared["runs"] == 2 and compared["exit_codes"] == found["figures"]["gpudiag check --direct"]["exit_codes"]
    assert len(found["samples_ms"]["--compare's check"]) == 2
    line = next(line for line in done.stdout.splitlines() if line.startswith("compared in the same rounds"))
    ratio = found["figures"]["gpudiag check --direct"]["median_ms"] / compared["median_ms"]
    assert f"gpudiag check --direct / it = {ratio:.3f}" in line
