"""The screen's supervisor end to end over the fakes (docs/screening.md "How it yields"): a real worker process per GPU
over the fake CUDA / HIP runtimes, the real NVML bindings over the fake NVML (or KFD's sysfs tree) for the process
lists, and jobs that are real processes appearing in those lists. What a screen found (verified, failed and where),
that a job stops it and gets the GPU within the poll + the stop + the exit, that a worker that ignores the stop is
killed, and that a screen over its memory bound or blind to its GPU's users is stopped."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpudiag.active.screen.supervisor import Settings, Target, supervise
from gpudiag.model import MemoryUsage, Vendor
from gpudiag.model.screen import ERROR, FAILED, PREEMPTED, VERIFIED
from gpudiag.probe.screening.gpu_users import KfdUsage, NvmlUsage
from tests.support.active import idle_device
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.paths import REPO
from tests.support.screen import CONFIG_ENV, WORKER, LiveProcesses, alive, kfd_open, kfd_tree, register

pytestmark = pytest.mark.slow  # worker processes: a second or more each (tests/README.md)

BUS = "0000:19:00.0"  # FakeNode.hgx_h200's first GPU
GIB = 1024**3
TOTAL = 80 * GIB


def nvidia_target() -> Target:
    device = idle_device(0, pci_bus_id=BUS, uuid="GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a00",
                         memory=MemoryUsage(total_bytes=TOTAL, used_bytes=0, reserved_bytes=0))
    return Target(device, free_before_bytes=TOTAL - 512 * 1024**2)


def config(registry: Path, **changes) -> dict:
    base = {"vendor": "nvidia", "registry": str(registry), "context_bytes": 600 * 1024**2,
            "budget_cap_bytes": 4 * 1024**2,
            "devices": [{"pci_bus_id": BUS.upper(), "total_bytes": TOTAL, "reserved_bytes": 512 * 1024**2}]}
    base.update(changes)
    return base


def settings(**changes) -> Settings:
    base = dict(stress_seconds=1.0, memory_fraction=0.05, progress=io.StringIO())
    base.update(changes)
    return Settings(**base)


@pytest.fixture
def nvidia(tmp_path, monkeypatch):
    """The fake NVML whose GPU 0 lists the processes of the registry; returns a function to run a screen."""
    registry = tmp_path / "registry"
    node = FakeNode.hgx_h200(1)
    node.gpus[0].compute_processes = LiveProcesses(registry, BUS)

    def run(cfg: dict, during=None, screen_settings: Settings | None = None, stop=lambda bus: None):
        monkeypatch.setenv(CONFIG_ENV, json.dumps(cfg))
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        chosen = screen_settings or settings()
        chosen.worker = list(WORKER)
        with installed(node):
            reader = NvmlUsage([BUS])
            if during is not None:
                threading.Thread(target=during, daemon=True).start()
            try:
                return supervise([nvidia_target()], chosen, reader, stop)[0], chosen
            finally:
                reader.close()

    run.registry = registry
    return run


def listed(registry: Path) -> list[int]:
    """The real PIDs of the processes registered on the GPU (dead or alive)."""
    directory = registry / BUS
    return [int(n.rpartition("@")[2]) for n in os.listdir(directory)] if directory.exists() else []


def test_an_idle_gpu_is_screened_and_verified(nvidia):
    run, chosen = nvidia(config(nvidia.registry))
    assert run.outcome == VERIFIED, run.reason
    assert run.tests == ["hbm", "memtest", "stress"]
    assert run.launches_verified > 0 and run.mismatched_blocks == 0
    assert run.memory_tested_bytes > 0 and run.memory_patterns
    assert run.footprint_bytes is not None and run.footprint_bytes >= 600 * 1024**2  # the context, as NVML showed it
    assert run.footprint_limit_bytes is not None and run.footprint_bytes <= int(TOTAL * 0.05)
    assert run.yield_seconds is None and run.preempted_by == []
    assert "screen verified" in chosen.progress.getvalue()


def test_a_faulty_sm_fails_the_screen_and_is_named(nvidia):
    cfg = config(nvidia.registry)
    cfg["devices"][0]["faulty_sms"] = [2]
    run, _ = nvidia(cfg)
    assert run.outcome == FAILED
    assert [s.location for s in run.mismatched_sms] == ["SM 2"] and "SM 2" in run.reason


def test_a_job_that_opens_the_gpu_stops_the_screen_and_gets_it_within_a_second(nvidia):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen: dict = {}

    def job_arrives():
        deadline = time.monotonic() + 20
        while not listed(nvidia.registry) and time.monotonic() < deadline:  # the screen's worker has its context
            time.sleep(0.02)
        time.sleep(0.3)
        seen["job_at"] = time.monotonic()
        register(nvidia.registry, BUS, job.pid, 30 * GIB)  # the job's context appears in NVML's list

    try:
        started = time.monotonic()
        run, _ = nvidia(config(nvidia.registry), during=job_arrives, screen_settings=settings(stress_seconds=30.0))
        ended = time.monotonic()
    finally:
        job.kill()
        job.wait()
    assert run.outcome == PREEMPTED, run.reason
    assert run.preempted_by == [job.pid] and f"pid {job.pid}" in run.reason
    assert run.yield_seconds is not None and run.yield_seconds < 1.5, run.yield_seconds
    assert ended - seen["job_at"] < 2.0, "the supervisor returned long after the job came"
    assert ended - started < 20, "a 30 s stress was not cut short"
    assert [pid for pid in listed(nvidia.registry) if pid != job.pid and alive(pid)] == [], "the screen stayed"


def test_a_worker_that_ignores_the_stop_is_killed_and_the_gpu_still_freed(nvidia):
    cfg = config(nvidia.registry, ignore_stop=True)

    def stop_soon(bus_id: str):
        return "gpudiag screen --stop (job 4711)" if time.monotonic() - began > 1.5 else None

    began = time.monotonic()
    run, chosen = nvidia(cfg, screen_settings=settings(stress_seconds=30.0, kill_after_seconds=0.5), stop=stop_soon)
    assert run.outcome == PREEMPTED and "job 4711" in run.reason
    assert "killed" in chosen.progress.getvalue()
    assert time.monotonic() - began < 10


def test_a_screen_over_its_memory_bound_is_stopped_as_an_error(nvidia):
    run, _ = nvidia(config(nvidia.registry, context_bytes=5 * GIB), screen_settings=settings(stress_seconds=30.0))
    assert run.outcome == ERROR and "over its bound" in run.reason


def test_a_process_list_that_cannot_be_read_stops_the_screen(nvidia, monkeypatch):
    def blind(self):
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    monkeypatch.setattr(NvmlUsage, "read", blind)
    run, _ = nvidia(config(nvidia.registry), screen_settings=settings(stress_seconds=30.0))
    assert run.outcome == ERROR and "could not be read" in run.reason


def test_amd_a_job_in_kfds_process_list_stops_the_screen(tmp_path, monkeypatch):
    bus = "0000:26:00.0"
    kfd_tree(tmp_path, {bus: 40123})
    cfg = {"vendor": "amd", "kfd_root": str(tmp_path), "gpu_ids": {bus: 40123}, "context_bytes": 300 * 1024**2,
           "budget_cap_bytes": 4 * 1024**2,
           "devices": [{"pci_bus_id": bus.upper(), "total_bytes": 192 * GIB, "reserved_bytes": 0}]}
    monkeypatch.setenv(CONFIG_ENV, json.dumps(cfg))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    device = idle_device(0, vendor=Vendor.AMD, pci_bus_id=bus, architecture="gfx942",
                         memory=MemoryUsage(total_bytes=192 * GIB, used_bytes=0, reserved_bytes=0))
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def job_arrives():
        proc = tmp_path / "sys/class/kfd/kfd/proc"
        deadline = time.monotonic() + 20
        while not any(proc.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        kfd_open(tmp_path, job.pid, 40123, 8 * GIB)

    threading.Thread(target=job_arrives, daemon=True).start()
    try:
        chosen = settings(stress_seconds=30.0, worker=list(WORKER))
        run = supervise([Target(device, 192 * GIB)], chosen, KfdUsage([bus], tmp_path))[0]
    finally:
        job.kill()
        job.wait()
    assert run.outcome == PREEMPTED and run.preempted_by == [job.pid], run.reason
    assert run.yield_seconds is not None and run.yield_seconds < 1.5


def test_in_a_pid_namespace_its_worker_listed_under_a_host_pid_is_taken_for_its_own(nvidia):
    """gpudiag in a container: the driver lists the worker under a PID no process here has. The screen takes it for
    its worker (the one new PID while the worker starts) and runs to its end, and a job of this namespace still
    preempts it."""
    run, chosen = nvidia(config(nvidia.registry, foreign_pid=True))
    assert run.outcome == VERIFIED, run.reason
    assert run.footprint_bytes is not None and run.footprint_bytes >= 600 * 1024**2  # the adopted PID's memory
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def job_arrives():
        deadline = time.monotonic() + 20
        while not listed(nvidia.registry) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        register(nvidia.registry, BUS, job.pid, 30 * GIB)

    try:
        run, _ = nvidia(config(nvidia.registry, foreign_pid=True), during=job_arrives,
                        screen_settings=settings(stress_seconds=30.0))
    finally:
        job.kill()
        job.wait()
    assert run.outcome == PREEMPTED and run.preempted_by == [job.pid], run.reason
    assert run.yield_seconds is not None and run.yield_seconds < 1.5
