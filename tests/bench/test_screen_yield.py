"""bench/screen_yield.py's logic, run with --fake over the tests' fake node and a stand-in job (the lab runs it for
real): every part runs, is written to $OUT and summarised; the trials measure a yield and an allocation each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # a minute: real gpudiag processes over the fake node


def test_the_bench_runs_every_part_over_the_fakes_and_says_what_it_measured(tmp_path):
    done = subprocess.run([sys.executable, "bench/screen_yield.py", "--fake", "--trials", "3", "--pairs", "1",
                           "--budget", "240"], cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(REPO)})
    results = json.loads((tmp_path / "screen_yield.json").read_text())
    parts = results["parts"]
    assert results["errors"] == {}, results["errors"]
    assert parts["a"]["goal"] and parts["a"]["outcome"] == "verified"
    assert "gpudiag_screen_last_verified_timestamp_seconds" in parts["a"]["metrics_series"]
    import tarfile

    with tarfile.open(tmp_path / "screen-bench.tar.gz") as packed:
        names = packed.getnames()
    for name in ("screen.json", "state.json", "journal.jsonl", "history.txt", "gpudiag.prom", "check.json"):
        assert f"a/{name}" in names, name
    assert "trials/trial-1-screen.json" in names and not (tmp_path / "a").exists()
    assert parts["e"]["goal"] and parts["e"]["runs"] == 0
    assert parts["d"]["goal"] and parts["d"]["mismatched_sms"] == ["SM 2"]
    assert parts["d"]["check"]["action"] == "drain"
    trials = parts["b"]["trials"]
    assert len(trials) == 3 and all(t["alloc_ok"] and t["screen_outcome"] == "preempted" for t in trials)
    assert all(0 < t["yield_seconds"] < 5 for t in trials)
    assert parts["b"]["p99_seconds"] == max(t["yield_seconds"] for t in trials)
    assert not parts["b"]["goal"]  # fewer than ten trials measure nothing the issue asks for
    assert parts["c"]["ratio"] is not None and len(parts["c"]["idle_tflops"]) == 1
    assert "b. yield over 3 trial(s)" in done.stdout and (tmp_path / "summary.txt").exists()
    assert done.returncode == 1  # every part ran; not every goal holds with 3 trials and the fake's shared GPU
