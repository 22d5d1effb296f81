"""One deadline (issue 34, item 4): the default is said once (gpudiag.DEFAULT_DEADLINE_SECONDS), and a client of the
service never assumes the service's own: the service says it in its answers ("deadline_seconds", "collecting"), and
`gpudiag check` (through the service, and its fast path) waits for a collection still running that long rather than
probe the GPUs beside it (gpudiag.more_wait)."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from pathlib import Path

import pytest

import gpudiag
from gpudiag import DEFAULT_DEADLINE_SECONDS, more_wait
from gpudiag.cli.check import fastpath
from gpudiag.cli.check.through_service import DIRECT, SERVICE, obtain
from gpudiag.daemon.fresh import FreshCollections
from gpudiag.model import to_dict
from gpudiag.probe.collector import CollectOptions
from gpudiag.service.runtime import Service
from tests.daemon.test_fresh import Work
from tests.support.exporter import wait_for
from tests.support.service import stand_in
from tests.support.snapshots import nvidia_h200_node

# A service run with `serve --timeout 20`: its collection-wait is longer than the client's first wait.
STILL_RUNNING = {"ok": True, "fresh": False, "problem": "the collection still running after 11s (a hung call?)",
                 "deadline_seconds": 32.0, "collecting": True, "age_seconds": 12.0, "open": [],
                 "snapshot": to_dict(nvidia_h200_node())}
FRESH = {**STILL_RUNNING, "fresh": True, "problem": None, "age_seconds": 0.1}


def test_the_default_deadline_is_said_once():
    assert DEFAULT_DEADLINE_SECONDS == 10.0
    assert CollectOptions(root=Path("/")).timeout_seconds == DEFAULT_DEADLINE_SECONDS
    from gpudiag.cli.shared.options import LevelTimeoutOption, TimeoutOption

    assert f"(default {DEFAULT_DEADLINE_SECONDS:g}" in TimeoutOption.help
    assert f"(default {DEFAULT_DEADLINE_SECONDS:g};" in LevelTimeoutOption.help


def probe_counter():
    probed = []
    return probed, lambda: probed.append(1) or nvidia_h200_node()


def test_check_through_the_service_waits_out_the_service_s_own_deadline(tmp_path):
    path, requests = tmp_path / "s.sock", []
    server = stand_in(path, [STILL_RUNNING, FRESH], requests)
    probed, probe = probe_counter()
    snapshot, how, _ = obtain(tmp_path, path, None, 1, False, None, probe)
    server.join(5)
    # Before: the client waited its own guess (10 s + 1) and probed beside the service's running collection.
    assert how == SERVICE and probed == [] and snapshot.hostname == nvidia_h200_node().hostname
    assert [r["wait"] for r in requests] == [DEFAULT_DEADLINE_SECONDS + 1.0, 32.0]


@pytest.mark.parametrize("timeout,answer", [
    (5.0, STILL_RUNNING),  # the caller's own --timeout bounds the wait
    (None, {**STILL_RUNNING, "collecting": False}),  # nothing running to wait for: the last one overran
    (None, {k: v for k, v in STILL_RUNNING.items() if k not in ("deadline_seconds", "collecting")}),  # older service
])
def test_check_through_the_service_probes_directly_when_there_is_nothing_to_wait_for(tmp_path, timeout, answer):
    path, requests = tmp_path / "s.sock", []
    server = stand_in(path, [answer], requests)
    probed, probe = probe_counter()
    _, how, _ = obtain(tmp_path, path, timeout, 1, False, None, probe)
    server.join(5)
    assert how == DIRECT and probed == [1] and len(requests) == 1


def test_the_fast_path_waits_out_the_service_s_own_deadline(tmp_path, monkeypatch):
    path, requests = tmp_path / "s.sock", []
    stale = {"ok": False, "error": "the collection still running after 11s (a hung call?)", "fallback": "stale",
             "deadline_seconds": 32.0, "collecting": True}
    server = stand_in(path, [stale, {"ok": True, "exit": 0, "stdout": "judged by the service\n", "stderr": ""}],
                      requests)
    monkeypatch.setattr(fastpath, "_direct", lambda *a: pytest.fail("probed beside the service's collection"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = fastpath.main(["check", "--root", str(tmp_path), "--socket", str(path)])
    server.join(5)
    assert code == 0 and out.getvalue() == "judged by the service\n"
    assert [r["wait"] for r in requests] == [DEFAULT_DEADLINE_SECONDS + 1.0, 32.0]


@pytest.mark.parametrize("answer", [None, [], {"collecting": True}, {"collecting": "yes", "deadline_seconds": 5},
                                    {"collecting": True, "deadline_seconds": True},
                                    {"collecting": True, "deadline_seconds": 0},
                                    {"collecting": True, "deadline_seconds": float("nan")},
                                    {"collecting": True, "deadline_seconds": gpudiag.MAX_WAIT_SECONDS + 1}])
def test_an_answer_that_does_not_say_a_sane_deadline_is_not_waited_for(answer):
    assert more_wait(answer, None) is None


def test_the_service_says_its_own_deadline_and_whether_it_is_collecting(tmp_path):
    work = Work(0.0)
    collections = FreshCollections(work)
    service = Service(collections, tmp_path / "s.sock", None, collect_wait_seconds=32.0)
    try:
        collections.collect()  # one complete collection, over a second old (a check takes one at most 1 s old)
        time.sleep(1.1)
        work.release.clear()  # then one that hangs
        hung = threading.Thread(target=lambda: collections.get(0.0, 5.0), daemon=True)
        hung.start()
        wait_for(lambda: collections.running, timeout=2)
        snapshot = json.loads(service.handle({"op": "snapshot", "max_age": 0, "wait": 0.1}))
        top = json.loads(service.handle({"op": "top", "max_age": 0, "wait": 0.1}))
        check = json.loads(service.handle({"op": "check", "wait": 0.1}))
        status = service.handle({"op": "status"})
        for answer in (snapshot, top, check, status):
            assert answer["deadline_seconds"] == 32.0 and answer["collecting"] is True, answer
        assert snapshot["fresh"] is False and check["fallback"] == "stale"
        work.release.set()
        hung.join(5)
        wait_for(lambda: service.handle({"op": "status"})["collecting"] is False, timeout=2)
    finally:
        work.release.set()
        service.stop()
