"""`gpudiag screen`'s work (no typer here): one tick of the policy, and `--stop`.

A tick: take the run lock (one screen at a time per state directory), read what every GPU shows, remember who used
which GPU (the state), decide which GPUs to screen (gpudiag/active/screen/policy.py), screen them while watching their
process lists (supervisor.py), and record every run: the state file (<state dir>/screen/state.json, read by the
collector for the checks and metrics) and the screens' journal (<state dir>/screen/journal.jsonl, shown by `gpudiag
history`). `--stop` (a scheduler's prolog): ask a running screen to give its GPUs back, wait until it has, and mark
the GPUs used as of now, so that no screen starts on them before `screen_idle_after` has passed again.

Everything that touches the machine is passed in (the devices, the reader of the process lists, the function that
runs the screens, the clock), so that a week of ticks runs in a test with a clock the test holds.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from gpudiag.active.screen.policy import Plan, ScreenPolicy, mark_used, observe, plan, record_use
from gpudiag.active.screen.supervisor import Settings, Target, supervise
from gpudiag.fileio import PUBLIC, DocumentError, read_json, write_atomically
from gpudiag.model import DeviceSnapshot
from gpudiag.model.screen import FAILED, ERROR, SCREEN_DIR, STATE_NAME, ScreenRun, ScreenState
from gpudiag.model.screen_file import ScreenStateError, load_state, state_to_json
from gpudiag.service.journal import Journal, iso

log = logging.getLogger("gpudiag")

STOP_NAME, LOCK_NAME = "stop", "run.lock"
STOP_MAX_AGE_SECONDS = 3600.0  # a stop request older than this was left by a --stop that died: ignored
MAX_REASON_CHARS = 500  # of a journal entry's message (an entry is at most 4,096 bytes: service/journal.py)


@dataclass(frozen=True)
class ScreenPaths:
    """Where the screens keep their state, under the state directory."""
    directory: Path  # <state dir>/screen

    @classmethod
    def under(cls, state_dir: Path) -> "ScreenPaths":
        return cls(Path(state_dir) / SCREEN_DIR)

    @property
    def state(self) -> Path:
        return self.directory / STATE_NAME

    @property
    def lock(self) -> Path:
        return self.directory / LOCK_NAME

    @property
    def stop(self) -> Path:
        return self.directory / STOP_NAME


@dataclass
class TickReport:
    """What one tick of the screen timer planned and ran, or why it did nothing."""
    plan: Plan = field(default_factory=Plan)
    runs: list[ScreenRun] = field(default_factory=list)
    busy: Optional[str] = None  # another screen holds the lock
    held_back: Optional[str] = None  # a stop request stands: nothing started

    @property
    def exit_code(self) -> int:
        return 1 if any(r.outcome in (FAILED, ERROR) for r in self.runs) else 0


class RunLock:
    """One `gpudiag screen` at a time per state directory (flock; released when the process ends, however)."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: Optional[int] = None
        self.holder: Optional[str] = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except PermissionError:  # made by another user (root's --stop): a read-only descriptor locks as well
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or None
            os.close(fd)
            return False
        self.fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # read-only: the holder's pid is not shown, the lock holds all the same
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# -- the state ---------------------------------------------------------------------------------------------------

def load_or_start(paths: ScreenPaths) -> ScreenState:
    """The state; a new one when there is none, or when the file is damaged (set aside, as the journal does: the
    GPUs are then watched from now on and screened again, never assumed screened)."""
    try:
        return load_state(paths.state) or ScreenState()
    except ScreenStateError as exc:
        aside = paths.state.with_name(f"{STATE_NAME}.corrupt-{datetime.datetime.now():%Y%m%dT%H%M%S}")
        log.warning("%s; set aside as %s, the screens start again", exc, aside.name)
        try:
            os.replace(paths.state, aside)
        except OSError as error:
            log.warning("cannot set it aside: %s", error.strerror or error)
        return ScreenState()


def save(paths: ScreenPaths, state: ScreenState) -> None:
    paths.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomically(paths.state, state_to_json(state), PUBLIC)


def journal_entry(run: ScreenRun) -> dict:
    """One journal line per screen (`gpudiag history`)."""
    entry = {"time": iso(datetime.datetime.fromtimestamp(run.finished_at, datetime.timezone.utc)), "kind": "screen",
             "event": run.outcome, "gpu": run.index, "pci_bus_id": run.pci_bus_id, "uuid": run.uuid,
             "duration_seconds": round(run.duration_seconds, 1), "tests": run.tests,
             "message": run.reason[:MAX_REASON_CHARS]}
    optional = {"sms": [s.location for s in run.mismatched_sms][:16], "preempted_by": run.preempted_by[:8],
                "yield_seconds": run.yield_seconds, "footprint_bytes": run.footprint_bytes,
                "memory_tested_bytes": run.memory_tested_bytes or None, "validation_fault": run.validation_fault}
    entry.update({key: value for key, value in optional.items() if value})
    return entry


# -- a tick ------------------------------------------------------------------------------------------------------

RunScreens = Callable[..., list[ScreenRun]]  # supervise(targets, settings, reader, stop_requested, clock)
OpenReader = Callable[[list[DeviceSnapshot]], object]  # the process-list reader for these GPUs


def tick(paths: ScreenPaths, policy: ScreenPolicy, settings: Settings, devices: list[DeviceSnapshot],
         open_reader: OpenReader, run_screens: RunScreens = supervise, clock: Callable[[], float] = time.time,
         now_requested: bool = False, selected: Optional[set[str]] = None) -> TickReport:
    """One run of the policy over `devices` (a fresh probe reading). `selected`: only these bus IDs may be screened
    (`--gpu`); every GPU's use is remembered whatever the selection."""
    lock = RunLock(paths.lock)
    if not lock.acquire():
        return TickReport(busy=f"another gpudiag screen runs (pid {lock.holder or '?'})")
    try:
        return _tick(paths, policy, settings, devices, open_reader, run_screens, clock, now_requested, selected)
    finally:
        lock.release()


def _tick(paths, policy, settings, devices, open_reader, run_screens, clock, now_requested, selected) -> TickReport:
    state = load_or_start(paths)
    now = clock()
    seen = [observe(d) for d in devices if d.pci_bus_id]
    record_use(state, seen, now)
    state.every_seconds, state.idle_after_seconds, state.max_gpus = (
        policy.every_seconds, policy.idle_after_seconds, policy.max_gpus)
    eligible = [s for s in seen if selected is None or s.pci_bus_id in selected]
    report = TickReport(plan=plan(state, eligible, policy, now, now_requested))
    state.updated_at = now
    save(paths, state)
    chosen = {d.pci_bus_id for d in report.plan.chosen}
    if not chosen:
        return report
    standing = stop_request(paths, clock)
    if standing is not None:
        report.held_back = f"a stop request stands ({standing.get('reason')}): no screen started"
        for decision in report.plan.chosen:
            decision.screen, decision.reason = False, report.held_back
        return report
    targets = [Target(d, _free_bytes(d)) for d in devices if d.pci_bus_id in chosen]
    try:
        reader = open_reader([t.device for t in targets])
    except Exception as exc:  # noqa: BLE001 - no watcher, no screen: a job would not be seen
        report.held_back = f"the GPUs' process lists cannot be watched ({type(exc).__name__}: {exc}): not screened"
        for decision in report.plan.chosen:
            decision.screen, decision.reason = False, report.held_back
        return report
    try:
        report.runs = run_screens(targets, settings, reader, lambda bus_id: _stop_reason(paths, bus_id, clock),
                                  clock)
    finally:
        reader.close()
    _record(paths, report.runs, clock)
    return report


def _record(paths: ScreenPaths, runs: list[ScreenRun], clock: Callable[[], float]) -> None:
    state = load_or_start(paths)  # as it is now: a --stop may have marked GPUs meanwhile (it waits for our lock,
    for run in runs:  # but a reader of an older gpudiag may not): what is on disk wins, the runs are added to it
        gpu = state.gpu(run.pci_bus_id)
        if gpu is None:
            continue
        gpu.record(run)
    state.updated_at = clock()
    save(paths, state)
    journal = Journal(paths.directory).load()
    journal.append(journal_entry(run) for run in runs)
    if journal.problem:
        log.warning("the screens' journal: %s", journal.problem)


def _free_bytes(device: DeviceSnapshot) -> Optional[int]:
    memory = device.memory
    if memory.total_bytes is None or memory.used_bytes is None:
        return None
    return memory.total_bytes - memory.used_bytes - (memory.reserved_bytes or 0)


# -- stop requests -----------------------------------------------------------------------------------------------

def stop_request(paths: ScreenPaths, clock: Callable[[], float] = time.time) -> Optional[dict]:
    """The standing stop request ({"time", "reason", "gpus": [bus IDs] or None}), or None. A request older than
    STOP_MAX_AGE_SECONDS, or one that is not a request, is no request."""
    try:
        request = read_json(paths.stop, 4096)
    except DocumentError:
        return None
    if not isinstance(request, dict) or not isinstance(request.get("time"), (int, float)):
        return None
    return request if clock() - request["time"] < STOP_MAX_AGE_SECONDS else None


def _stop_reason(paths: ScreenPaths, bus_id: str, clock: Callable[[], float]) -> Optional[str]:
    request = stop_request(paths, clock)
    if request is None:
        return None
    gpus = request.get("gpus")
    if isinstance(gpus, list) and bus_id not in gpus:
        return None
    return str(request.get("reason") or "gpudiag screen --stop")[:200]


@dataclass
class StopReport:
    """What `gpudiag screen stop` found and did."""
    was_running: bool
    stopped: bool
    seconds: float
    marked: list[str] = field(default_factory=list)
    message: str = ""


def request_stop(paths: ScreenPaths, reason: str, gpus: Optional[list[str]], wait_seconds: float = 4.5,
                 clock: Callable[[], float] = time.time, kill: Callable[[int], None] = lambda pid: os.kill(
                     pid, signal.SIGKILL)) -> StopReport:
    """Stop a running screen (of `gpus`, or of every GPU) and mark the GPUs used now. Returns once the screen's run
    has ended (its workers gone, their memory freed) or `wait_seconds` have passed; then the screen's own process is
    killed as a last resort (its workers die with it: worker.py), which loses that run's record but frees the GPU."""
    began = time.monotonic()
    paths.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomically(paths.stop, json.dumps({"time": clock(), "reason": reason, "gpus": gpus, "pid": os.getpid()}),
                     PUBLIC)
    lock = RunLock(paths.lock)
    was_running = False
    try:
        while not lock.acquire():
            was_running = True
            if time.monotonic() - began > wait_seconds:
                if not _last_resort(lock, kill):
                    return StopReport(True, False, time.monotonic() - began,
                                      message=f"the screen (pid {lock.holder or '?'}) did not stop within "
                                              f"{wait_seconds:g} s")
                began_kill = time.monotonic()
                while not lock.acquire():
                    if time.monotonic() - began_kill > 2.0:
                        return StopReport(True, False, time.monotonic() - began,
                                          message=f"the screen (pid {lock.holder or '?'}) was killed but still "
                                                  f"holds its lock")
                    time.sleep(0.05)
                break
            time.sleep(0.05)
        state = load_or_start(paths)
        marked = list(gpus) if gpus else [g.pci_bus_id for g in state.gpus]
        mark_used(state, marked, clock())
        save(paths, state)
        try:
            paths.stop.unlink()
        except FileNotFoundError:
            pass
        return StopReport(was_running, True, time.monotonic() - began, marked)
    finally:
        lock.release()


def _last_resort(lock: RunLock, kill: Callable[[int], None]) -> bool:
    """Kill the lock's holder, once its command line shows that it is a `gpudiag screen` (the pid in the lock file
    could be stale where the holder could not write it: never kill a stranger)."""
    from gpudiag.probe.screening.gpu_users import process_command

    holder = lock.holder
    if not holder or not holder.isdigit():
        return False
    command = process_command(int(holder)) or []
    if "screen" not in command or not any("gpudiag" in part for part in command):
        log.warning("the screen's lock is held by pid %s, which is not a gpudiag screen: not killed", holder)
        return False
    try:
        kill(int(holder))
    except OSError as exc:
        log.warning("cannot kill the screen (pid %s): %s", holder, exc.strerror or exc)
        return False
    log.warning("the screen (pid %s) did not stop in time: killed", holder)
    return True
