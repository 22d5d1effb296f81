"""Bounded calls: run_in_turn runs jobs one after another and abandons the one that overstays."""

from __future__ import annotations

import threading
import time

from gpudiag.probe.deadline import run_all, run_in_turn


def test_jobs_in_turn_never_overlap_and_all_finish():
    running, overlaps, order = [], [], []
    lock = threading.Lock()

    def job(name):
        def work(tracker):
            with lock:
                running.append(name)
                overlaps.append(len(running) > 1)
            time.sleep(0.02)
            with lock:
                running.remove(name)
                order.append(name)
            return name
        return work

    outcomes = run_in_turn({name: job(name) for name in "abcd"}, timeout_seconds=5)
    assert [o.value for o in outcomes.values()] == list("abcd") and order == list("abcd")
    assert not any(overlaps)


def test_a_hung_job_is_abandoned_and_keeps_a_reserve_for_the_rest():
    release = threading.Event()

    def hang(tracker):
        tracker.enter("nvmlDeviceGetPowerUsage")
        release.wait(10)

    try:
        started = time.monotonic()
        outcomes = run_in_turn({"hung": hang, "next": lambda t: "ok", "last": lambda t: "ok"}, timeout_seconds=2,
                               reserve_seconds=0.3)
        elapsed = time.monotonic() - started
    finally:
        release.set()
    hung = outcomes["hung"]
    assert not hung.done and hung.started and hung.tracker.current == "nvmlDeviceGetPowerUsage"
    assert 1.2 < hung.elapsed_seconds < 1.6  # 2 s less the reserve of 0.3 s for each of the two jobs after it
    assert outcomes["next"].value == "ok" and outcomes["last"].value == "ok"
    assert elapsed < 2.0


def test_jobs_whose_turn_never_came_say_so():
    release = threading.Event()
    try:
        outcomes = run_in_turn({"hung": lambda t: release.wait(10), "never": lambda t: "ok"}, timeout_seconds=0.3,
                               reserve_seconds=0.5)
    finally:
        release.set()
    assert not outcomes["hung"].done
    assert not outcomes["never"].done and not outcomes["never"].started


def test_run_all_returns_exceptions_instead_of_raising():
    def boom(tracker):
        raise RuntimeError("driver said no")

    outcome = run_all({"x": boom}, timeout_seconds=1)["x"]
    assert outcome.done and isinstance(outcome.error, RuntimeError)
