"""`gpudiag screen` end to end, as the timer and a Slurm prolog run it: real gpudiag processes over a fake HGX H200
(tests/support/screen_node.py) whose process lists are live, fake workers over the fake CUDA runtime, and "jobs" that
are real processes. A screen of idle GPUs is recorded (state, journal, history, textfile metrics, check); a job that
opens a GPU, or `gpudiag screen --stop`, preempts it within seconds and the run is recorded preempted; a GPU held by a
job is not screened; an injected (validation-only) SM flip fails the screen, names the SM and drains the node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.screen_node import fake_config
from tests.support.screen import REPO, alive, register, worker_env

pytestmark = pytest.mark.slow  # real processes (tests/README.md)

BUS0, BUS1 = "0000:19:00.0", "0000:3b:00.0"


class Node:
    def __init__(self, tmp: Path, gpus: int = 2, **config):
        self.root, self.registry, self.state = tmp / "root", tmp / "registry", tmp / "state"
        self.gpus = gpus
        self.env = worker_env(fake_config(self.registry, gpus, **config))

    def command(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.support.screen_node",
            str(self.root),
            str(self.registry),
            str(self.gpus),
            "--",
            *args,
        ]

    def run(self, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), cwd=REPO, env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.command(*args), cwd=REPO, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def screen(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run("screen", "--root", str(self.root), "--state-dir", str(self.state), *args, **kwargs)

    def listed(self, bus: str) -> list[int]:
        directory = self.registry / bus
        return [int(n) for n in os.listdir(directory) if n.isdigit() and alive(int(n))] if directory.exists() else []

    def state_json(self) -> dict:
        return json.loads((self.state / "screen" / "state.json").read_text())

    def journal(self) -> list[dict]:
        path = self.state / "screen" / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def wait_for(condition, timeout: float = 30.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(interval)
    raise AssertionError("timed out waiting")


def test_idle_gpus_are_screened_and_recorded_everywhere(tmp_path):
    node = Node(tmp_path)
    done = node.screen("--idle-after", "0s", "--max-gpus", "2", "--stress-seconds", "1", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [r["outcome"] for r in report["runs"]] == ["verified", "verified"], report
    gpus = {g["pci_bus_id"]: g for g in node.state_json()["gpus"]}
    assert gpus[BUS0]["last_verified"] and gpus[BUS1]["runs"] == {"verified": 1}
    assert [e["event"] for e in node.journal()] == ["verified", "verified"]

    history = node.run("history", "--root", str(node.root), "--state-dir", str(node.state), "--format", "json",
                       "--socket", str(tmp_path / "no.sock"))
    screens = [e for e in json.loads(history.stdout)["entries"] if e["kind"] == "screen"]
    assert [(e["gpu"], e["event"]) for e in screens] == [(0, "verified"), (1, "verified")]
    text = node.run("history", "--root", str(node.root), "--state-dir", str(node.state),
                    "--socket", str(tmp_path / "no.sock")).stdout
    assert "GPU 0    screen verified after" in text

    prom = tmp_path / "gpudiag.prom"
    textfile = node.run("textfile", "--root", str(node.root), "--state-dir", str(node.state), "-o", str(prom))
    assert textfile.returncode == 0
    metrics = prom.read_text()
    assert 'gpudiag_screen_last_verified_timestamp_seconds{gpu="0",' in metrics
    assert ('gpudiag_screen_last_result{gpu="1",uuid="GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a01",'
            'pci_bus_id="0000:3b:00.0",result="verified"} 1') in metrics
    assert "gpudiag_screen_every_seconds 604800" in metrics
    check = json.loads(node.run("check", "--only", "screen", "--root", str(node.root), "--state-dir",
                                str(node.state), "--json").stdout)
    assert {(r["check"], r["status"]) for r in check["results"]} == {("screen.coverage", "pass"),
                                                                     ("screen.result", "pass")}


def test_a_job_preempts_the_screen_and_the_run_is_recorded_preempted(tmp_path):
    node = Node(tmp_path, gpus=1)
    job = sleeper()
    screen = node.start("screen", "--root", str(node.root), "--state-dir", str(node.state), "--idle-after", "0s",
                        "--stress-seconds", "60", "--format", "json")
    try:
        wait_for(lambda: node.listed(BUS0))  # the screen's worker has its context on the GPU
        time.sleep(0.5)
        arrived = time.monotonic()
        register(node.registry, BUS0, job.pid, 40 * 1024**3)
        out, err = screen.communicate(timeout=30)
        gone = time.monotonic() - arrived
    finally:
        job.kill()
        screen.kill()
    assert screen.returncode == 0, err
    run = json.loads(out)["runs"][0]
    assert run["outcome"] == "preempted" and run["preempted_by"] == [job.pid]
    assert gone < 5.0 and run["yield_seconds"] < 2.0, (gone, run["yield_seconds"])
    assert node.listed(BUS0) == [job.pid]  # the worker's context is gone; the job's stays
    state = node.state_json()["gpus"][0]
    assert state["preemptions"] == 1 and state["last_verified"] is None and state["last_used"] is not None
    assert node.journal()[-1]["event"] == "preempted" and node.journal()[-1]["preempted_by"] == [job.pid]


def test_stop_for_a_slurm_prolog_gives_the_gpu_back_and_holds_screens_off(tmp_path):
    node = Node(tmp_path, gpus=1)
    screen = node.start("screen", "--root", str(node.root), "--state-dir", str(node.state), "--idle-after", "0s",
                        "--stress-seconds", "60")
    try:
        wait_for(lambda: node.listed(BUS0))
        time.sleep(0.3)
        began = time.monotonic()
        stop = node.run("screen", "--stop", "--state-dir", str(node.state), "--reason", "slurm job 4711")
        took = time.monotonic() - began
        screen.communicate(timeout=30)
    finally:
        screen.kill()
    assert stop.returncode == 0, stop.stderr
    assert "stopped the running screen" in stop.stdout and took < 5.0, (stop.stdout, took)
    assert node.listed(BUS0) == []
    assert node.journal()[-1]["event"] == "preempted" and "slurm job 4711" in node.journal()[-1]["message"]
    # The prolog marked the GPU used: the next tick (idle_after 10 min) leaves it alone.
    again = node.screen("--format", "json")
    decision = json.loads(again.stdout)["decisions"][0]
    assert decision["screen"] is False and decision["reason"].startswith("in use")
    assert not (node.state / "screen" / "stop").exists()


def test_stop_with_no_screen_running_answers_at_once(tmp_path):
    node = Node(tmp_path, gpus=1)
    stop = node.run("screen", "--stop", "--state-dir", str(node.state))
    assert stop.returncode == 0 and "no screen was running" in stop.stdout


def test_a_gpu_held_by_a_job_is_never_screened(tmp_path):
    node = Node(tmp_path, gpus=2)
    job = sleeper()
    try:
        register(node.registry, BUS1, job.pid, 20 * 1024**3)
        done = node.screen("--idle-after", "0s", "--max-gpus", "2", "--now", "--stress-seconds", "1",
                           "--format", "json")
    finally:
        job.kill()
    report = json.loads(done.stdout)
    decisions = {d["pci_bus_id"]: d for d in report["decisions"]}
    assert decisions[BUS1]["screen"] is False and f"pid {job.pid}" in decisions[BUS1]["reason"]
    assert [r["pci_bus_id"] for r in report["runs"]] == [BUS0]
    assert node.state_json()["gpus"][1]["runs"] == {}


def test_an_injected_sm_flip_fails_the_screen_names_the_sm_and_drains(tmp_path):
    node = Node(tmp_path, gpus=1)
    done = node.screen("--idle-after", "0s", "--stress-seconds", "1", "--format", "json",
                       env={"GPUDIAG_VALIDATION_ONLY_FLIP_SM": "3"})
    assert done.returncode == 1, done.stderr
    run = json.loads(done.stdout)["runs"][0]
    assert run["outcome"] == "failed" and "SM 3" in run["reason"]
    assert run["validation_fault"].startswith("validation only")
    check = node.run("check", "--only", "screen.result", "--root", str(node.root), "--state-dir", str(node.state),
                     "--json")
    assert check.returncode == 1
    (result,) = json.loads(check.stdout)["results"]
    assert (result["status"], result["action"], result["fault_code"]) == ("fail", "drain",
                                                                          "GPUDIAG-SCREEN-WRONG-RESULTS")
    assert "SM 3" in result["message"] and result["observed"]["mismatched_sms"] == ["SM 3"]
