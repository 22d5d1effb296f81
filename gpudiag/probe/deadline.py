"""Bounding vendor calls in time.

A call into a vendor library can hang inside the kernel driver (a GPU falling off the bus, a wedged GSP) and no
Python code can interrupt it. So each unit of work runs on a *daemon* thread and the caller waits for it only until
its deadline; a thread that misses it is abandoned (it may finish later or never), and being a daemon it cannot
keep the process alive. `ThreadPoolExecutor` is not used on purpose: its workers are joined at interpreter exit,
so one hung call would hang `gpudiag check` on the way out.
"""

from __future__ import annotations

import threading
import time
from dataclasses import field
from typing import Any, Callable, Generic, Optional, TypeVar

from gpudiag.model.records import dataclass

T = TypeVar("T")

# Threads that missed their deadline and may still be inside a vendor library. Backends consult it before
# shutting a library down: shutting NVML down under a thread hung inside it can hang too.
_abandoned_lock = threading.Lock()
_abandoned: set[threading.Thread] = set()


def abandoned_calls() -> int:
    with _abandoned_lock:
        for thread in [t for t in _abandoned if not t.is_alive()]:
            _abandoned.discard(thread)
        return len(_abandoned)


@dataclass
class CallTracker:
    """Names the vendor call a worker is in, so that a timeout can say which call hung."""

    current: Optional[str] = None
    completed: int = 0
    # A backend sets this to the DeviceSnapshot it is filling, as soon as it exists, so that a device whose probe
    # misses the deadline is still reported with whatever identity was read before the hang.
    partial: Any = None

    def enter(self, name: str) -> None:
        self.current = name

    def leave(self) -> None:
        self.current = None
        self.completed += 1


@dataclass
class Outcome(Generic[T]):
    """How a bounded call ended: its value or error, whether it finished, and how long it took."""
    done: bool  # False: the deadline passed first
    value: Optional[T] = None
    error: Optional[BaseException] = None
    elapsed_seconds: float = 0.0
    tracker: CallTracker = field(default_factory=CallTracker)
    # The worker thread: a caller that runs jobs repeatedly (the exporter) must not start a second job for a
    # device whose previous call is still hung.
    thread: Optional[threading.Thread] = field(default=None, repr=False, compare=False)
    started: bool = True  # False: the deadline passed before the job's turn came (run_in_turn)

    @property
    def still_running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class _Job(Generic[T]):
    def __init__(self, name: str, fn: Callable[[CallTracker], T]):
        self.tracker = CallTracker()
        self._fn = fn
        self._finished = threading.Event()
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, name=f"gpudiag-{name}", daemon=True)
        self.outcome: Outcome[T] = Outcome(done=False, tracker=self.tracker, thread=self.thread)

    def _run(self) -> None:
        try:
            self.outcome.value = self._fn(self.tracker)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller, never lost
            self.outcome.error = exc
        finally:
            self.outcome.elapsed_seconds = time.monotonic() - self.started
            self.outcome.done = True
            self._finished.set()

    def wait(self, until: float) -> bool:
        return self._finished.wait(max(0.0, until - time.monotonic()))


def start(fn: Callable[[CallTracker], T], name: str = "call") -> Callable[[float], Outcome[T]]:
    """Start one job now; the returned `wait(until)` gives its outcome, waiting at most until the monotonic time
    `until`. A job still running then is abandoned and comes back with `done=False`."""
    job = _Job(name, fn)
    job.thread.start()

    def wait(until: float) -> Outcome[T]:
        if job.wait(until):
            return job.outcome
        with _abandoned_lock:
            _abandoned.add(job.thread)
        # A copy: the abandoned thread may still write to its own outcome later.
        return Outcome(
            done=False,
            elapsed_seconds=time.monotonic() - job.started,
            tracker=CallTracker(job.tracker.current, job.tracker.completed, job.tracker.partial),
            thread=job.thread,
        )

    return wait


def run_all(jobs: dict[Any, Callable[[CallTracker], T]], timeout_seconds: float) -> dict[Any, Outcome[T]]:
    """Run every job concurrently; return when all are done or the shared deadline passes.

    Each job receives a CallTracker to name the call it is in. A job still running at the deadline comes back
    with `done=False`; its thread is abandoned. A finished job's exception is returned in `error`, never raised.
    """
    until = time.monotonic() + timeout_seconds
    waiters = {key: start(fn, str(key)) for key, fn in jobs.items()}
    return {key: wait(until) for key, wait in waiters.items()}


def run_in_turn(
    jobs: dict[Any, Callable[[CallTracker], T]], timeout_seconds: float, reserve_seconds: float = 0.5
) -> dict[Any, Outcome[T]]:
    """Run the jobs one after another, each on its own thread, within a shared deadline.

    Why not all at once: NVML serialises its calls (across threads, and in the driver across processes), so
    probing GPUs concurrently gains nothing and costs GIL and lock contention: one after the other was 175 ms
    against 224 ms on the lab's 2x H200 (tools/nvml_parallel.py). A job that overstays is abandoned and the next
    one starts: each job may use what is left of the deadline, less `reserve_seconds` for every job still to come
    (a healthy GPU is probed in about 0.1 s), so one hung device cannot starve the others. Jobs whose turn never
    came come back with `started=False`.
    """
    until = time.monotonic() + timeout_seconds
    keys = list(jobs)
    results: dict[Any, Outcome[T]] = {}
    for position, key in enumerate(keys):
        left = until - time.monotonic()
        if left <= 0:
            results[key] = Outcome(done=False, started=False)
            continue
        still_to_come = len(keys) - position - 1
        patience = max(min(left, reserve_seconds), left - still_to_come * reserve_seconds)
        results[key] = start(jobs[key], str(key))(time.monotonic() + patience)
    return results


def run_one(fn: Callable[[CallTracker], T], timeout_seconds: float, name: str = "call") -> Outcome[T]:
    return start(fn, name)(time.monotonic() + timeout_seconds)
