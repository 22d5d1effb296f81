"""`gpudiag fleet --prometheus` where it cannot see: a node is sound only on positive evidence (a recent complete
collection, no collector failing, check series present), what a failed, partial, hung or unreadable answer covers
is `unknown`, never pass, and no answer (NaN, malformed, trickling, huge) crashes it or holds it past --timeout.

Item by item of issue 24 (1, 2, 5, 6): a real Prometheus scraping a real `gpudiag serve` process whose first
collection hangs (a fake NVML call that never returns) and an in-process exporter whose collections overrun, and
the stand-in Prometheus (tests/support/prometheus_stand_in.py) for the answers a real one gives only when broken."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpudiag.checks import run_checks
from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import WebConfig
from tests.support.exporter import wait_for
from tests.support.fleet import run, statuses
from tests.support.prometheus_stand_in import healthy, sample, stand_in, success  # noqa: F401 - stand_in: a fixture
from tests.e2e.test_prometheus import needs_prometheus, query, start_prometheus, stop
from tests.support.paths import REPO
from tests.support.snapshots import nvidia_h200_node



# -- 1. positive evidence of health, from a real Prometheus ----------------------------------------------------


def _serve(root: Path, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.exporter_node", str(root), "2", *args],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc, re.search(r"serving https?://(\S+)/metrics", proc.stderr.readline()).group(1)


class _Overrunning:
    """A collect() that completes once, then hangs: every later cycle overruns, so the exporter drops its check
    series and keeps the last collection's timestamp (gpudiag.exporter.state)."""

    def __init__(self) -> None:
        self.release, self.calls = threading.Event(), 0

    def __call__(self):
        self.calls += 1
        if self.calls > 1:
            self.release.wait(60)
        return nvidia_h200_node()


@needs_prometheus
@pytest.mark.slow
def test_no_collection_yet_and_overrunning_collections_are_silent_not_pass(capsys, tmp_path):
    procs, prometheus, overrun = [], None, _Overrunning()
    exporter = ServeDaemon("127.0.0.1:0", WebConfig(), overrun, 0.3, 0.1, judge=run_checks, watcher_factory=None)
    try:
        healthy_proc, healthy_target = _serve(tmp_path / "healthy", "--", "--listen", "127.0.0.1:0", "--interval",
                                              "0.5", "--timeout", "2")
        # A GPU whose power reading never returns: the first collection waits out its 60 s deadline (issue 24: a
        # hung GPU made it take 10 s), while /healthz is 503 and no check series exist.
        hung_proc, hung_target = _serve(tmp_path / "hung", "--hang", "nvmlDeviceGetPowerUsage", "--", "--listen",
                                        "127.0.0.1:0", "--interval", "0.5", "--timeout", "60")
        procs += [healthy_proc, hung_proc]
        exporter.start()
        overrun_target = f"127.0.0.1:{exporter.address[1]}"
        targets = [healthy_target, hung_target, overrun_target]
        scrape = {"job_name": "gpudiag", "scrape_interval": "1s", "scrape_timeout": "1s",
                  "static_configs": [{"targets": targets}]}
        prometheus, api = start_prometheus(tmp_path, {"scrape_configs": [scrape]})

        def scraped_as_broken():
            try:
                checks = {s["metric"]["instance"] for s in query(api, "count by (instance) (gpudiag_check_ok)")}
                built = {s["metric"]["instance"] for s in query(api, "gpudiag_build_info")}
                overran = query(api, f'gpudiag_collector_success{{collector="collection",instance="{overrun_target}"}}'
                                     ' == 0 and on (instance) gpudiag_last_collection_timestamp_seconds')
            except OSError:
                return False  # Prometheus still starting
            return checks == {healthy_target} and hung_target in built and overran

        wait_for(scraped_as_broken, timeout=45, interval=0.3)
        code, out, err = run(capsys, "--prometheus", api, "--selector", '{job="gpudiag"}', "--json")
    finally:
        if prometheus is not None:
            stop(prometheus)
        for proc in procs:
            stop(proc)
        overrun.release.set()
        exporter.stop()
    assert code == 1, err
    verdict = json.loads(out)
    nodes = {n["node"]: n for n in verdict["nodes"]}
    assert {n: v["status"] for n, v in nodes.items()} == {healthy_target: "pass", hung_target: "silent",
                                                          overrun_target: "silent"}
    assert "no collection has completed yet" in nodes[hung_target]["findings"][0]["message"]
    (finding,) = nodes[overrun_target]["findings"]
    assert 'gpudiag_collector_success{collector="collection"} 0' in finding["message"] and finding["action"] == "drain"


# -- 1. the same rules, answer by answer --------------------------------------------------------------------------


def _node(**answers):
    """One node `n1:9858`, up; `answers` replaces what it answers to a query (by a piece of its PromQL)."""
    def answer(promql, headers):
        if promql.startswith("up{"):
            return success([sample(1, instance="n1:9858")])
        for piece, result in answers.items():
            if piece in promql:
                return success(result)
        return success(healthy(promql, "n1:9858"))

    return answer


@pytest.mark.parametrize("answers, status, fragment", [
    ({}, "pass", None),
    ({"gpudiag_last_collection_timestamp_seconds": []}, "silent", "no collection has completed yet"),
    ({"gpudiag_last_collection_timestamp_seconds": [sample(900, instance="n1:9858")]}, "silent", "stale"),
    ({"gpudiag_collector_success": [sample(0, instance="n1:9858", collector="collection")],
      "count_values": []}, "silent", "did not complete"),
    ({"gpudiag_collector_success": [sample(0, instance="n1:9858", collector="checks")],
      "count_values": []}, "unknown", "checks did not complete"),
    ({"count_values": []}, "unknown", "no check results"),
    ({"gpudiag_last_collection_timestamp_seconds": [sample(math.nan, instance="n1:9858")]}, "unknown",
     "not a number"),
], ids=["sound", "no-collection-yet", "stale", "overrunning", "checks-failed", "no-check-series", "nan-age"])
def test_a_node_is_sound_only_with_a_recent_complete_collection_and_check_series(capsys, stand_in, answers,
                                                                                  status, fragment):
    code, out, _ = run(capsys, "--prometheus", stand_in(_node(**answers)).url, "--json")
    (node,) = json.loads(out)["nodes"]
    assert (node["status"], code) == (status, 0 if status == "pass" else 1)
    if fragment:
        assert fragment in node["findings"][0]["message"]


# -- 2. a failed query's nodes are unknown -------------------------------------------------------------------------


def _three_nodes(promql, headers):
    """n1 fails pcie.link_width on GPU 1 (when its check states are read); n2, n3 are sound."""
    names = ("n1:9858", "n2:9858", "n3:9858")
    if promql.startswith("up{"):
        return success([sample(1, instance=n) for n in names])
    if promql.startswith("gpudiag_check_ok"):
        return success([sample(0, instance="n1:9858", check="pcie.link_width", gpu="1")])
    return success(healthy(promql, *names, not_ok=("n1:9858",)))


_BROKEN = {
    "http-500": (500, {"status": "error", "errorType": "internal", "error": "query processing failed"}),
    "cut-short": (200, b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"n1:98'),
    "not-json": (200, b"<html>502 Bad Gateway</html>"),
    "error-status": (200, {"status": "error", "errorType": "timeout", "error": "query timed out in expression"}),
}


@pytest.mark.parametrize("how", sorted(_BROKEN))
def test_a_query_that_fails_leaves_every_node_it_covers_unknown_never_pass(capsys, stand_in, how):
    def broken(promql, headers):  # the one pass over every node's check states
        if promql.startswith("count_values"):
            return _BROKEN[how]
        return _three_nodes(promql, headers)

    code, out, err = run(capsys, "--prometheus", stand_in(broken).url, "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["complete"]) == (1, "unknown", False)
    assert statuses(out) == {"n1:9858": "unknown", "n2:9858": "unknown", "n3:9858": "unknown"}  # n1's failure unseen
    finding = verdict["nodes"][0]["findings"][0]
    assert finding["kind"] == "unread" and "its check results: not read (" in finding["message"]
    junit = run(capsys, "--prometheus", stand_in(broken).url, "--format", "junit")[1]
    suites = ET.fromstring(junit).findall("testsuite")
    assert len(suites) == 3 and all(s.get("errors") == "1" and s.find("testcase/error") is not None for s in suites)
    text = run(capsys, "--prometheus", stand_in(broken).url)[1]
    assert text.startswith("gpudiag fleet: UNKNOWN INCOMPLETE (see SOURCE): 3 node(s): 3 unknown")
    assert "\nNOT SHOWN SOUND (3 node(s))\n  n1:9858: unread: not shown sound: its check results: not read" in text
    # The same fleet answered in full: n1 fails, the others pass.
    assert statuses(run(capsys, "--prometheus", stand_in(_three_nodes).url, "--json")[1]) == {
        "n1:9858": "fail", "n2:9858": "pass", "n3:9858": "pass"}


def test_the_failing_checks_of_the_nodes_with_one_unread_leave_those_nodes_unknown(capsys, stand_in):
    """The nodes whose check states were all 1 were shown sound by the pass over them; the node that had one
    that is not was to be asked which, and that answer failed: it is unknown, not pass."""
    def broken(promql, headers):
        if promql.startswith("gpudiag_check_ok"):
            assert 'instance=~"n1:9858"' in promql  # asked of the node with a check that is not OK only
            return _BROKEN["http-500"]
        return _three_nodes(promql, headers)

    code, out, _ = run(capsys, "--prometheus", stand_in(broken).url, "--json")
    assert code == 1 and statuses(out) == {"n1:9858": "unknown", "n2:9858": "pass", "n3:9858": "pass"}
    assert "its failing checks: not read (HTTP 500" in json.loads(out)["nodes"][0]["findings"][0]["message"]


# -- 5. the deadline covers the body --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_prometheus_trickling_a_byte_a_second_is_given_up_on_at_the_deadline(stand_in):
    server = stand_in(_three_nodes, trickle=1.0)
    server.trickle_if = "gpudiag_check_ok{"  # that answer comes a byte a second: ~200 s in all
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gpudiag", "fleet", "--prometheus", server.url, "--timeout", "3",
                           "--json"], capture_output=True, text=True, timeout=30, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    elapsed = time.monotonic() - started
    assert done.returncode == 1 and elapsed < 10, (elapsed, done.stderr)
    verdict = json.loads(done.stdout)
    assert verdict["complete"] is False and statuses(done.stdout)["n1:9858"] == "unknown"
    assert any("its check results: not read (no complete answer within" in f["message"]
               for f in verdict["nodes"][0]["findings"])


# -- 6. NaN and malformed samples are unreadable, never judged, never a crash ---------------------------------------

_MALFORMED = b"".join([
    b'{"status":"success","data":{"resultType":"vector","result":[',
    b'"not an object",',
    b'{"metric":"n1","value":[1,"0"]},',
    b'{"metric":{"instance":"n2:9858","check":"pcie.aer","gpu":"0"},"value":"0"},',
    b'{"metric":{"instance":"n3:9858","check":["x"],"gpu":"0"},"value":[1,"0"]},',
    b'{"metric":{"instance":"n4:9858","check":"pcie.aer","gpu":"0"},"value":[1,"NaN"]}',
    b"]}}",
])


def test_nan_and_malformed_samples_make_their_nodes_unknown_not_a_crash(capsys, stand_in):
    names = ("n1:9858", "n2:9858", "n3:9858", "n4:9858", "n5:9858")

    def answers(promql, headers):
        if promql.startswith("up{"):
            return success([sample(1, instance=n) for n in names])
        if promql.startswith("gpudiag_check_ok"):
            return 200, _MALFORMED
        if "pcie_link_generation" in promql:  # int(float("NaN")) raised ValueError: exit 4
            return success([sample(math.nan, instance="n5:9858", gpu="0", kind="max")])
        if "gpudiag_node_gpus" in promql:
            return success([sample(math.inf, instance="n5:9858")])
        return success(healthy(promql, *names, not_ok=names[:4]))

    code, out, err = run(capsys, "--prometheus", stand_in(answers).url, "--json")
    assert code == 1, err
    verdict = json.loads(out)
    assert statuses(out) == dict.fromkeys(names, "unknown")  # two entries name no node: nobody is shown sound
    nodes = {n["node"]: n["findings"][0]["message"] for n in verdict["nodes"]}
    assert "samples that name no node could not be read" in nodes["n1:9858"]
    assert "its failing checks: 1 sample(s) could not be read" in nodes["n2:9858"]
    assert "gpudiag_check_ok is nan" in nodes["n4:9858"]
    assert "PCIe link generation of GPU 0 is not a finite number (nan)" in nodes["n5:9858"]
    assert "GPU count: inf is not a GPU count" in nodes["n5:9858"]


def test_a_nan_figure_is_not_compared_and_does_not_hide_a_slow_peer(capsys, stand_in):
    # In this order a NaN made statistics.median NaN, and the node 27 % below its peers passed.
    rates = {"n1:9858": 55.4e9, "n2:9858": 55.1e9, "n3:9858": math.nan, "n4:9858": 55.6e9, "n5:9858": 40.3e9}

    def answers(promql, headers):
        if promql.startswith("up{"):
            return success([sample(1, instance=n) for n in rates])
        if "gpudiag_gpu_info" in promql:
            return success([sample(1, instance=n, gpu="0", model="NVIDIA H200") for n in rates])
        if "copy_bandwidth" in promql:
            return success([sample(rate, instance=n, gpu="0", direction="h2d") for n, rate in rates.items()])
        return success(healthy(promql, *rates))

    code, out, _ = run(capsys, "--prometheus", stand_in(answers).url, "--json")
    verdict = json.loads(out)
    assert code == 1 and statuses(out) == {"n1:9858": "pass", "n2:9858": "pass", "n3:9858": "unknown",
                                           "n4:9858": "pass", "n5:9858": "lag"}
    (outlier,) = verdict["outliers"]
    assert (outlier["node"], outlier["peers"], round(outlier["deficit"], 2)) == ("n5:9858", 4, 0.27)


@pytest.mark.slow
def test_no_sample_of_any_shape_crashes_the_reading_of_an_answer(capsys, stand_in):
    """Each field of a sample in turn of every JSON type, through every query: never an exception (exit 4), never
    a node shown sound that sent one."""
    odd = [None, True, 0, 1.5, "", "x" * 5000, [], [1], [1, 2, 3], {}, {"instance": 1}, "NaN"]
    cases = [("metric", v) for v in odd] + [("value", v) for v in odd] + [("value", [1, v]) for v in odd] + \
            [("instance", v) for v in odd] + [("gpu", v) for v in odd] + [("entry", v) for v in odd]

    def answers_with(field, bad):
        def answer(promql, headers):
            if promql.startswith("up{"):
                return success([sample(1, instance="n1:9858"), sample(1, instance="n2:9858")])
            good = sample(0, instance="n2:9858", gpu="0", check="pcie.aer", collector="collection", kind="max",
                          direction="h2d", model="M", runtime_version="13.0")
            if field == "entry":
                good = bad
            elif field in ("metric", "value"):
                good[field] = bad
            else:
                good["metric"][field] = bad
            return success(healthy(promql, "n1:9858", "n2:9858") + [good])
        return answer

    for field, bad in cases:
        code, out, err = run(capsys, "--prometheus", stand_in(answers_with(field, bad)).url, "--json")
        if field == "instance" and isinstance(bad, str) and 0 < len(bad) <= 1024:
            assert code in (0, 1) and statuses(out)["n1:9858"] == "pass"  # a sample of a node not in the fleet
            continue
        assert code == 1 and "internal error" not in err, (field, bad, err)
        assert statuses(out)["n2:9858"] != "pass", (field, bad)


def test_a_selector_picking_more_targets_than_one_run_judges_is_a_usage_error(capsys, stand_in, monkeypatch):
    from gpudiag.fleet import prometheus

    monkeypatch.setattr(prometheus, "MAX_NODES", 3)
    many = stand_in(lambda q, h: success([sample(1, instance=f"n{i}:9858") for i in range(4)]))
    code, out, err = run(capsys, "--prometheus", many.url)
    assert (code, out) == (2, "") and "more than 3 targets" in err and err.count("\n") == 1
