"""Runs the screens of one batch of GPUs and gives each GPU back the moment a job wants it.

One worker process per GPU (worker.py). A reader thread polls the GPUs' process lists every `poll_seconds` (100 ms:
probe/screening/gpu_users.py) and the supervisor loop, as often, compares them with the screen's own processes: any
other process on a screened GPU is a job, and that GPU's worker is told to stop (SIGTERM). The worker ends at its next
launch boundary, frees its memory, releases its context and exits; one that has not exited `kill_after_seconds`
later is killed (SIGKILL: the driver frees what a dead process held). The screen counts as gone when its process has
exited *and* the process list no longer shows it, which is when its memory is free for the job.

The same stop, for every GPU at once, comes from `stop_requested()` (`gpudiag screen --stop`, a scheduler's
prolog), and, fail closed, from a process list that cannot be read for `unseen_seconds` (a job would not be seen),
a screen holding more memory than its bound, or one running past its time.

The screen's own processes are its workers and their children, by PID. The driver lists PIDs as the host's PID
namespace numbers them: run inside a container with a PID namespace of its own, `gpudiag screen` finds its worker
listed under a PID that names no process it can see. Then, and only then, the one such PID that appears on the
worker's GPU while the worker starts (within ADOPT_SECONDS, no other new process there) is taken for the worker
(logged). On a host every listed PID is visible and nothing is ever adopted: a job always preempts.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, TextIO

from gpudiag.active.screen.outcome import WANTED, fill_run
from gpudiag.model import ActiveResults, DeviceSnapshot, Vendor, from_dict, to_dict
from gpudiag.model.screen import ScreenRun
from gpudiag.probe.screening.gpu_users import GpuUse, UsageReader, own_processes, pid_visible

log = logging.getLogger(__name__)

WORKER = [sys.executable, "-m", "gpudiag.active.screen.worker"]
OVERHEAD_SECONDS = 120.0  # beyond the stress: starting, the HBM copy and the pattern test at a screen's sizes
ADOPT_SECONDS = 30.0  # a worker's context exists within this of its start (the JIT of the stress kernel included)


@dataclass
class Target:
    """A GPU to screen, as the probe read it when the screen was planned."""
    device: DeviceSnapshot  # as the probe read it when the screen was planned
    free_before_bytes: Optional[int] = None  # free memory then (vendor library), to measure the worker's context


@dataclass
class Settings:
    """How a screen runs: its load, its share of memory, and how it is watched and stopped."""
    stress_seconds: float = 30.0
    memory_fraction: float = 0.05
    tests: tuple[str, ...] = WANTED
    poll_seconds: float = 0.1
    kill_after_seconds: float = 1.5
    release_wait_seconds: float = 5.0
    unseen_seconds: float = 1.0
    worker: list[str] = field(default_factory=lambda: list(WORKER))
    progress: Optional[TextIO] = field(default_factory=lambda: sys.stderr)

    @property
    def deadline_seconds(self) -> float:
        return self.stress_seconds + OVERHEAD_SECONDS


@dataclass
class _Screen:
    """One screen's worker process and the files it is given and answers in."""
    target: Target
    proc: subprocess.Popen
    request: Path
    result: Path
    started_at: float  # wall clock
    began: float  # monotonic
    own: set[int] = field(default_factory=set)
    stop_at: Optional[float] = None
    stop_reason: Optional[str] = None
    stop_is_error: bool = False
    preempted_by: list[int] = field(default_factory=list)
    killed: bool = False
    exited_at: Optional[float] = None
    released_at: Optional[float] = None
    problem: Optional[str] = None
    unseen_since: Optional[float] = None
    peak_bytes: Optional[int] = None
    seen: bool = False  # its worker listed on the GPU under a PID this process can see
    alias: Optional[int] = None  # the PID the driver lists its worker under, from another PID namespace
    done: bool = False

    @property
    def bus_id(self) -> str:
        return self.target.device.pci_bus_id or ""


class _Watch:
    """The reader thread: the latest process lists and when they were read (monotonic)."""

    def __init__(self, reader: UsageReader, interval: float):
        self._reader, self._interval = reader, interval
        self._lock = threading.Lock()
        self.latest: tuple[float, dict[str, GpuUse]] = (float("-inf"), {})
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudiag-screen-watch", daemon=True)

    def start(self) -> "_Watch":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                uses = self._reader.read()
            except Exception as exc:  # noqa: BLE001 - an unreadable list is a stop, not a crash
                log.warning("reading the GPUs' process lists failed: %s", exc)
                uses = None
            if uses is not None:
                with self._lock:
                    self.latest = (time.monotonic(), uses)
            self._done.wait(self._interval)

    def snapshot(self) -> tuple[float, dict[str, GpuUse]]:
        with self._lock:
            return self.latest

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=2.0)  # a read hung in the driver is abandoned (daemon thread)


def supervise(targets: list[Target], settings: Settings, reader: UsageReader,
              stop_requested: Callable[[str], Optional[str]] = lambda bus_id: None,
              clock: Callable[[], float] = time.time) -> list[ScreenRun]:
    """Screen every target at once and return one ScreenRun each; never raises for a GPU's problem.
    `stop_requested(bus_id)`: why the screen of that GPU must stop now (`gpudiag screen --stop`), or None."""
    workdir = Path(tempfile.mkdtemp(prefix="gpudiag-screen-"))
    watch = _Watch(reader, settings.poll_seconds).start()
    screens: list[_Screen] = []
    try:
        for number, target in enumerate(targets):
            screens.append(_start(target, settings, workdir, number, clock))
        _loop(screens, settings, watch, stop_requested)
        return [_finish(s, settings, clock) for s in screens]
    finally:
        for screen in screens:  # an exception above must not leave a worker on a GPU
            if screen.proc.poll() is None:
                screen.proc.kill()
                screen.proc.wait(timeout=10)
        watch.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _start(target: Target, settings: Settings, workdir: Path, number: int, clock: Callable[[], float]) -> _Screen:
    device = target.device
    request, result = workdir / f"request-{number}.json", workdir / f"result-{number}.json"
    request.write_text(json.dumps({
        "device": to_dict(device), "tests": list(settings.tests), "stress_seconds": settings.stress_seconds,
        "memory_fraction": settings.memory_fraction, "free_before_bytes": target.free_before_bytes,
        "deadline_seconds": settings.deadline_seconds, "parent_pid": os.getpid()}))
    env = dict(os.environ)
    if device.vendor == Vendor.NVIDIA and device.uuid:
        env["CUDA_VISIBLE_DEVICES"] = device.uuid  # its context, its JIT cache and its sight: this GPU only
    proc = subprocess.Popen([*settings.worker, str(request), str(result)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, env=env, close_fds=True)
    _say(settings, f"GPU {device.index} ({device.pci_bus_id}): screen started (worker pid {proc.pid})")
    return _Screen(target, proc, request, result, clock(), time.monotonic(), own={proc.pid})


def _loop(screens: list[_Screen], settings: Settings, watch: _Watch,
          stop_requested: Callable[[str], Optional[str]]) -> None:
    while not all(s.done for s in screens):
        now = time.monotonic()
        read_at, uses = watch.snapshot()
        for screen in screens:
            if screen.proc.poll() is None:
                screen.own |= own_processes(screen.proc.pid)
        ours = set().union(*(s.own for s in screens))  # on AMD a worker shows on every GPU it can see
        for screen in screens:
            if not screen.done:
                external = stop_requested(screen.bus_id) if screen.stop_reason is None else None
                _step(screen, settings, now, read_at, uses.get(screen.bus_id), ours, external)
        time.sleep(settings.poll_seconds)


def _step(screen: _Screen, settings: Settings, now: float, read_at: float, use: Optional[GpuUse], ours: set[int],
          external: Optional[str]) -> None:
    if screen.exited_at is None and screen.proc.poll() is not None:
        screen.exited_at = now
    fresh = use is not None and use.pids is not None and read_at >= screen.began
    if fresh:
        _adopt(screen, use, ours, now)
        screen.unseen_since = None
        held = sum(use.memory_bytes.get(pid, 0) for pid in use.pids if pid in ours)
        if any(pid in screen.own for pid in use.pids):
            screen.peak_bytes = max(screen.peak_bytes or 0, held)
    elif screen.unseen_since is None:
        screen.unseen_since = now
    if screen.stop_reason is None and screen.exited_at is None:
        _should_stop(screen, settings, now, use if fresh else None, ours, external)
    if screen.stop_at is not None and screen.exited_at is None and not screen.killed \
            and now - screen.stop_at > settings.kill_after_seconds:
        screen.proc.kill()
        screen.killed = True
        _say(settings, f"GPU {screen.target.device.index}: the screen did not stop within "
                       f"{settings.kill_after_seconds:g} s: killed")
    if screen.exited_at is not None:
        if fresh and read_at > screen.exited_at and not any(pid in screen.own for pid in use.pids):
            screen.released_at, screen.done = now, True
        elif now - screen.exited_at > settings.release_wait_seconds:
            screen.problem = (f"its process exited but the GPU's process list still showed it "
                              f"{settings.release_wait_seconds:g} s later")
            screen.done = True


def _adopt(screen: _Screen, use: GpuUse, ours: set[int], now: float) -> None:
    """The worker listed under another namespace's PID (module docstring): adopted once, while it starts."""
    screen.seen = screen.seen or any(pid in screen.own for pid in use.pids)
    if screen.seen or screen.alias is not None or now - screen.began > ADOPT_SECONDS or screen.exited_at is not None:
        return
    new = [pid for pid in use.pids if pid not in ours]
    if len(new) == 1 and not pid_visible(new[0]):
        screen.alias = new[0]
        screen.own.add(new[0])
        ours.add(new[0])
        log.warning("GPU %s: the driver lists pid %d, which is no process here (a PID namespace of its own): taken "
                    "for the screen's worker (pid %d)", screen.bus_id, new[0], screen.proc.pid)


def _should_stop(screen: _Screen, settings: Settings, now: float, use: Optional[GpuUse], ours: set[int],
                 external: Optional[str]) -> None:
    limit = int((screen.target.device.memory.total_bytes or 0) * settings.memory_fraction) or None
    if external:
        _stop(screen, now, external)
    elif use is not None and [pid for pid in use.pids if pid not in ours]:
        jobs = [pid for pid in use.pids if pid not in ours]
        screen.preempted_by = jobs
        _stop(screen, now, f"a job opened the GPU (pid {', '.join(map(str, jobs[:4]))})")
    elif screen.unseen_since is not None and now - screen.unseen_since > settings.unseen_seconds:
        _stop(screen, now, f"the GPU's process list could not be read for {settings.unseen_seconds:g} s: a job "
                           f"would not have been seen", error=True)
    elif limit is not None and (screen.peak_bytes or 0) > limit:
        _stop(screen, now, f"it held {screen.peak_bytes / 2**20:.0f} MiB of GPU memory, over its bound of "
                           f"{limit / 2**20:.0f} MiB", error=True)
    elif now - screen.began > settings.deadline_seconds:
        _stop(screen, now, f"it ran past {settings.deadline_seconds:g} s", error=True)


def _stop(screen: _Screen, now: float, reason: str, error: bool = False) -> None:
    screen.stop_at, screen.stop_reason, screen.stop_is_error = now, reason, error
    try:
        screen.proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:  # it exited meanwhile
        pass


def _finish(screen: _Screen, settings: Settings, clock: Callable[[], float]) -> ScreenRun:
    device = screen.target.device
    run = ScreenRun(device.pci_bus_id or "", screen.started_at, clock(), "error", uuid=device.uuid,
                    index=device.index, preempted_by=screen.preempted_by, footprint_bytes=screen.peak_bytes)
    answer = _answer(screen)
    results, problem = None, screen.problem
    if answer is not None:
        problem = answer.get("problem") or problem
        if answer.get("results") is not None:
            results = from_dict(ActiveResults, answer["results"])
        run.footprint_limit_bytes = (answer.get("footprint") or {}).get("limit_bytes")
    elif screen.killed:
        problem = problem or f"killed: it did not stop within {settings.kill_after_seconds:g} s of being asked"
    else:
        problem = problem or f"the worker exited ({screen.proc.returncode}) without results"
    if screen.stop_at is not None and screen.released_at is not None:
        run.yield_seconds = round(screen.released_at - screen.stop_at, 3)
    tests = tuple(answer.get("tests") or ()) if answer else ()
    preempted = screen.stop_reason if screen.stop_reason and not screen.stop_is_error else None
    if screen.stop_is_error:
        problem = screen.stop_reason
    fill_run(run, results, tests, preempted, problem)
    _say(settings, f"GPU {device.index}: screen {run.outcome}: {run.reason}"
                   f"{f' (gone {run.yield_seconds:.2f} s after the stop)' if run.yield_seconds is not None else ''}")
    return run


def _answer(screen: _Screen) -> Optional[dict]:
    try:
        return json.loads(screen.result.read_text())
    except (OSError, ValueError):
        return None


def _say(settings: Settings, message: str) -> None:
    if settings.progress is not None:
        settings.progress.write(f"gpudiag: screen: {message}\n")
        settings.progress.flush()
