"""Collection on an interval, in the background, so that a scrape never waits on a GPU.

A scrape only renders the last collection. The Collector bounds itself (per-device deadlines); the poller adds a
second bound around the whole cycle, so that even a hang the Collector did not foresee cannot freeze the exporter:
a cycle that overruns is abandoned on its daemon thread, reported (`gpudiag_collections_total{outcome="overrun"}`,
`gpudiag_collector_success{collector="collection"} 0`), and no new cycle starts while it is still running, since
the vendor libraries it holds may not be safe to enter twice.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from gpudiag.daemon.follower import KernelLogFollower
from gpudiag.model import CheckResult, CollectorRun, KernelEvent, NodeSnapshot
from gpudiag.probe import deadline

log = logging.getLogger(__name__)

COMPLETE, OVERRUN, ERROR = "complete", "overrun", "error"
OUTCOMES = (COMPLETE, OVERRUN, ERROR)


@dataclass(frozen=True)
class Collection:
    """One complete collection and what the checks made of it."""

    snapshot: NodeSnapshot
    results: list[CheckResult]
    checks_run: CollectorRun
    finished_at: float  # Unix time
    # The kernel-log events new since the collection before (gpudiag/daemon/follower.py: one follower for the
    # exporter and the service journal). None where no follower ran, or the log was not read; `log_baseline`: this
    # is the first read, whose events were all logged before the daemon started.
    new_events: Optional[tuple[KernelEvent, ...]] = None
    log_baseline: bool = False


@dataclass(frozen=True)
class Cycle:
    """How one cycle went. `collection` is None unless the outcome is COMPLETE."""

    outcome: str
    duration_seconds: float
    collection: Optional[Collection] = None
    error: Optional[str] = None

    @property
    def run(self) -> CollectorRun:
        return CollectorRun("collection", self.outcome == COMPLETE, round(self.duration_seconds, 4), self.error)


def collect_and_judge(collect: Callable[[], NodeSnapshot], judge: Callable[[NodeSnapshot], list[CheckResult]],
                      follower: Optional[KernelLogFollower] = None) -> Collection:
    snapshot = collect()
    started = time.monotonic()
    try:
        results, error = judge(snapshot), None
    except Exception as exc:  # noqa: BLE001 - a failing check must not take the measurements down with it
        log.exception("running the checks failed", extra={"bound": ("checks failed",)})
        results, error = [], f"{type(exc).__name__}: {exc}"
    checks_run = CollectorRun("checks", error is None, round(time.monotonic() - started, 4), error)
    new_events, baseline = None, False
    if follower is not None and snapshot.kernel_log.readable:
        baseline = not follower.started
        new_events = tuple(follower.new_events(snapshot.kernel_log.events, snapshot.kernel_log.last_seq))
    return Collection(snapshot, results, checks_run, time.time(), new_events, baseline)


class Poller:
    def __init__(
        self,
        work: Callable[[], Collection],
        on_cycle: Callable[[Cycle], None],
        interval_seconds: float,
        deadline_seconds: float,
    ):
        self._work = work
        self._on_cycle = on_cycle
        self._interval = interval_seconds
        self._deadline = deadline_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpudiag-poller", daemon=True)
        self._running: Optional[deadline.Outcome] = None  # an overrunning cycle, still on its thread
        self._running_since = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Returns at once: a cycle hung in a vendor library is not waited for (its thread is a daemon)."""
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _loop(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            try:
                self._on_cycle(self.run_cycle())
            except Exception:  # noqa: BLE001 - the loop must outlive a bug in one cycle
                log.exception("collection cycle failed", extra={"bound": ("cycle failed",)})
            next_due += self._interval
            now = time.monotonic()
            if next_due < now:  # a slow cycle: skip the missed slots rather than run back to back
                next_due = now + self._interval
            self._stop.wait(next_due - now)

    def run_cycle(self) -> Cycle:
        if self._running is not None and self._running.still_running:
            elapsed = time.monotonic() - self._running_since
            where = self._running.tracker.current or "the collector"
            return Cycle(OVERRUN, elapsed, error=f"the previous collection is still running (in {where})")
        self._running = None
        started = time.monotonic()
        outcome = deadline.run_one(lambda tracker: self._work(), self._deadline, "collection")
        duration = time.monotonic() - started
        if not outcome.done:
            self._running, self._running_since = outcome, started
            # (debug: gpudiag/cli/serve/changes.py tells the overrun once, not once a cycle)
            log.debug("collection overran its %.1fs deadline; its thread is abandoned", self._deadline)
            return Cycle(OVERRUN, duration, error=f"no result within {self._deadline:.1f}s")
        if outcome.error is not None:
            log.debug("collection failed: %s", outcome.error, exc_info=outcome.error)  # told as the overrun is
            return Cycle(ERROR, duration, error=f"{type(outcome.error).__name__}: {outcome.error}")
        return Cycle(COMPLETE, duration, collection=outcome.value)
