"""contrib/slurm/gpudiag-screen.sh, the Slurm prolog and epilog of idle-time screening: what it asks gpudiag, that it
never fails (a failing prolog drains the node), that it is bounded in time, and, end to end over the fake node, that
the prolog stops a running screen before the job starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.screen import REPO, alive

SCRIPT = REPO / "contrib" / "slurm" / "gpudiag-screen.sh"


def stand_in(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "gpudiag"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


def run(tmp_path: Path, env: dict, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    logger = tmp_path / "bin" / "logger"
    logger.parent.mkdir(exist_ok=True)
    logger.write_text(f'#!/usr/bin/env bash\necho "$@" >> {tmp_path}/syslog\n')
    logger.chmod(0o755)
    base = {"PATH": f"{logger.parent}:{os.environ['PATH']}", "SLURM_JOB_ID": "42"}
    return subprocess.run(["bash", str(SCRIPT), *args], env={**base, **env}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_is_clean():
    assert subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("context,reason", [("prolog_slurmd", "slurm job 42 (prolog)"),
                                            ("epilog_slurmd", "slurm job 42 ended (epilog)")])
def test_prolog_and_epilog_stop_the_screens_of_the_whole_node(tmp_path, context, reason):
    gpudiag = stand_in(tmp_path, f'printf "%s\\n" "$@" > {tmp_path}/args\n')
    done = run(tmp_path, {"GPUDIAG": str(gpudiag), "SLURM_SCRIPT_CONTEXT": context, "SLURM_JOB_GPUS": "0,1"})
    assert done.returncode == 0
    assert (tmp_path / "args").read_text().splitlines() == ["screen", "--stop", "--reason", reason]


def test_per_gpu_on_shared_nodes_and_the_argument_where_slurm_sets_no_context(tmp_path):
    gpudiag = stand_in(tmp_path, f'printf "%s\\n" "$@" > {tmp_path}/args\n')
    done = run(tmp_path, {"GPUDIAG": str(gpudiag), "SLURM_JOB_GPUS": "2,3", "GPUDIAG_SCREEN_PER_GPU": "1"}, "prolog")
    assert done.returncode == 0
    assert (tmp_path / "args").read_text().splitlines()[-2:] == ["--gpu", "2,3"]


@pytest.mark.parametrize("body", ["exit 1\n", "exit 4\n", "exec sleep 30\n"])
def test_it_never_fails_and_says_why_in_syslog(tmp_path, body):
    gpudiag = stand_in(tmp_path, body)
    began = time.monotonic()
    done = run(tmp_path, {"GPUDIAG": str(gpudiag), "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
                          "GPUDIAG_SCREEN_TIMEOUT": "1"})
    assert done.returncode == 0 and time.monotonic() - began < 5
    assert "slurm job 42 (prolog): gpudiag screen --stop failed" in (tmp_path / "syslog").read_text()


def test_no_gpudiag_installed_does_not_fail_the_job(tmp_path):
    done = run(tmp_path, {"GPUDIAG": str(tmp_path / "missing"), "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"})
    assert done.returncode == 0 and (tmp_path / "syslog").exists()


def test_outside_a_prolog_or_epilog_it_does_nothing(tmp_path):
    gpudiag = stand_in(tmp_path, f"touch {tmp_path}/called\n")
    assert run(tmp_path, {"GPUDIAG": str(gpudiag)}).returncode == 0
    assert not (tmp_path / "called").exists()


@pytest.mark.slow
def test_the_prolog_stops_a_running_screen_before_the_job_starts(tmp_path):
    from tests.support.screen_node import fake_config
    from tests.support.screen import worker_env

    root, registry, state = tmp_path / "root", tmp_path / "registry", tmp_path / "state"
    env = worker_env(fake_config(registry, 1))
    node = [sys.executable, "-m", "tests.support.screen_node", str(root), str(registry), "1", "--"]
    gpudiag = stand_in(tmp_path, f'cd {REPO} && exec {" ".join(node)} "$@" --state-dir {state}\n')
    screen = subprocess.Popen([*node, "screen", "--root", str(root), "--state-dir", str(state), "--idle-after", "0s",
                               "--stress-seconds", "60"], cwd=REPO, env=env, stderr=subprocess.DEVNULL)
    listed = registry / "0000:19:00.0"
    try:
        deadline = time.monotonic() + 30
        while not (listed.exists() and any(alive(int(p)) for p in os.listdir(listed))):
            assert time.monotonic() < deadline, "the screen never started"
            time.sleep(0.05)
        done = run(tmp_path, {**env, "GPUDIAG": str(gpudiag), "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"})
        assert done.returncode == 0
        assert [p for p in os.listdir(listed) if alive(int(p))] == []  # the GPU is free when the prolog returns
        assert screen.wait(timeout=10) == 0
    finally:
        screen.kill()
    assert "slurm job 42 (prolog)" in (state / "screen" / "journal.jsonl").read_text()
