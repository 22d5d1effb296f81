"""FreshCollections: one collection at a time for the poller and every socket client; a client never judges a
stale collection as fresh, and the hooks take the service path (nothing in them forces --direct)."""

from __future__ import annotations

import threading
import time

from gpudiag.daemon.fresh import FreshCollections
from gpudiag.daemon.poller import Collection
from gpudiag.model import CollectorRun, NodeSnapshot
from tests.support.paths import REPO

CONTRIB = REPO / "contrib"


class Work:
    def __init__(self, seconds: float = 0.05):
        self.calls = 0
        self.seconds = seconds
        self.release = threading.Event()
        self.release.set()

    def __call__(self) -> Collection:
        self.calls += 1
        time.sleep(self.seconds)
        self.release.wait()
        return Collection(NodeSnapshot(hostname=f"n{self.calls}"), [], CollectorRun("checks", True, 0.0), time.time())


def test_concurrent_callers_share_a_collection_and_a_fresh_one_is_reused():
    work = Work(0.2)
    fresh = FreshCollections(work)
    got = []
    threads = [threading.Thread(target=lambda: got.append(fresh.get(1.0, 5.0))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert work.calls == 1 and all(c is got[0][0] and problem is None for c, problem in got)
    assert fresh.get(1.0, 5.0)[0] is got[0][0] and work.calls == 1  # under a second old: no new collection
    assert fresh.get(0.0, 5.0)[0] is not got[0][0] and work.calls == 2


def test_a_collection_that_does_not_finish_is_reported_stale_not_waited_for():
    work = Work(0.0)
    fresh = FreshCollections(work)
    first, _ = fresh.get(1.0, 5.0)
    work.release.clear()  # the next collection hangs
    started = time.monotonic()
    latest, problem = fresh.get(0.0, 0.2)
    assert time.monotonic() - started < 1.0 and latest is first and "still running" in problem
    # a second caller joins the hung collection instead of starting another
    assert fresh.get(0.0, 0.1)[1] and work.calls == 2
    # one content with what is recent enough gets it at once, hung collection or not
    started = time.monotonic()
    assert fresh.get(60.0, 5.0) == (first, None) and time.monotonic() - started < 0.5
    work.release.set()


def test_a_failing_collection_is_an_error_for_its_callers_and_listeners_see_only_complete_ones():
    seen = []

    def broken() -> Collection:
        raise RuntimeError("boom")

    fresh = FreshCollections(broken)
    fresh.subscribe(seen.append)
    assert fresh.get(1.0, 5.0) == (None, "RuntimeError: boom") and seen == []


def test_the_hooks_never_force_a_direct_probe():
    for path in (CONTRIB / "gpudiag-healthcheck.sh", CONTRIB / "slurm" / "gpudiag.nhc",
                 CONTRIB / "kubernetes" / "node-problem-detector" / "gpudiag-monitor.json"):
        assert "--direct" not in path.read_text(), path
