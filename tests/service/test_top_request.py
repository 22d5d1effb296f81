"""The socket's `top` request (`gpudiag top` through the service): the latest collection's row per GPU and its
verdicts, as the service judged it; and `gpudiag top`'s sampler, which takes it from the service when one answers
and probes directly only when none does, or its collection did not finish."""

from __future__ import annotations

import json
import logging
import time

import pytest

from gpudiag.cli.top import source as top_source
from gpudiag.cli.top.source import SERVICE, Sampler
from gpudiag.model import CheckResult, Status
from gpudiag.report.live import live_view
from gpudiag.report.live_text import verdict_text
from gpudiag.service import socket_path
from tests.support.fakes.fake_nvml import installed
from tests.support.service import raw, running_service, stand_in
from tests.support.top_node import node_root, nvidia_node


def test_top_answers_the_latest_collection_s_rows_and_verdicts(tmp_path):
    node = nvidia_node(4, fault=1)
    node_root(tmp_path, "nvidia", node)
    with installed(node), running_service(tmp_path) as exporter:
        answer, _ = raw(socket_path(tmp_path), b'{"op": "top", "max_age": 0}\n')
        latest = exporter.collections.latest
    assert answer["ok"] is True and answer["fresh"] is True and answer["problem"] is None
    assert answer["collected_at"] == pytest.approx(latest.finished_at) and answer["age_seconds"] >= 0
    view = answer["view"]
    assert view["hostname"] and view["node"] == {} and view["nothing_probed"] is False
    assert [(r["index"], r["pci_bus_id"], r["verdict"]) for r in view["gpus"]] == [
        (0, "0000:19:00.0", {}), (1, "0000:3b:00.0", {"fail": ["pcie.link_generation"]}),
        (2, "0000:4c:00.0", {}), (3, "0000:5d:00.0", {})]
    gpu1 = view["gpus"][1]
    assert (gpu1["power_watts"], gpu1["power_limit_watts"], gpu1["pcie_generation"], gpu1["sm_clock_mhz"]) == (
        74.312, 700.0, 4, 345)


def test_top_s_power_is_the_mean_of_the_samples_since_the_service_s_previous_collection(tmp_path):
    node = nvidia_node(1)
    node.gpus[0].power_sampled(75_000)
    node_root(tmp_path, "nvidia", node)
    with installed(node), running_service(tmp_path, interval=600, power_samples=True):  # collects when asked
        node.gpus[0].power_sampled(650_000, 660_000, 670_000)
        time.sleep(0.1)  # older than the freshest collection the service makes on request (0.05 s)
        answer, _ = raw(socket_path(tmp_path), b'{"op": "top", "max_age": 0}\n')
        time.sleep(0.1)
        again, _ = raw(socket_path(tmp_path), b'{"op": "top", "max_age": 0}\n')  # nothing sampled since
    (gpu,) = answer["view"]["gpus"]
    assert (gpu["power_watts"], gpu["power_average_seconds"]) == (660.0, 0.06)
    (gpu,) = again["view"]["gpus"]
    assert (gpu["power_watts"], gpu["power_average_seconds"]) == (74.312, None)


@pytest.mark.parametrize("payload", [b'{"op": "top", "max_age": -1}\n', b'{"op": "top", "wait": "soon"}\n'])
def test_a_bad_top_request_is_a_protocol_error(tmp_path, payload):
    node = nvidia_node(1)
    node_root(tmp_path, "nvidia", node)
    with installed(node), running_service(tmp_path):
        answer, _ = raw(socket_path(tmp_path), payload)
    assert answer["ok"] is False and "expected a number" in answer["error"]


def test_the_sampler_takes_the_service_s_sample_and_opens_no_vendor_library(tmp_path, monkeypatch):
    node = nvidia_node(2, fault=0)
    node_root(tmp_path, "nvidia", node)

    def no_direct(*args):
        raise AssertionError("a second NVML client: top probed directly with the service answering")

    with installed(node), running_service(tmp_path) as exporter:
        monkeypatch.setattr(top_source, "_Direct", no_direct)
        sampler = Sampler(tmp_path, None, None, False, ["0"], 1.0)
        first, second = sampler.sample(), sampler.sample()
        latest = exporter.collections.latest.finished_at
    assert first.source == second.source == SERVICE and first.notes == []
    assert [(r["index"], r["verdict"]) for r in second.rows] == [(0, {"fail": ["pcie.link_generation"]})]
    assert second.taken_at == pytest.approx(latest)  # the time the values were read, not the time asked


@pytest.mark.parametrize("answer, says", [
    ({"ok": True, "fresh": False, "problem": "the collection still running after 11s (a hung call?)",
      "collected_at": 1.0, "view": {"gpus": [{"index": 0, "pci_bus_id": "0000:19:00.0", "verdict": {}}]}},
     "the service's collection did not finish (the collection still running after 11s"),
    ({"ok": False, "error": "expected {\"op\": one of snapshot, history, status, check}"},
     "did not answer top (expected {\"op\": one of snapshot"),
])
def test_a_stale_or_older_service_makes_that_sample_direct_and_says_so_once(tmp_path, caplog, answer, says):
    node = nvidia_node(1)
    node_root(tmp_path, "nvidia", node)
    path = tmp_path / "stand-in.sock"
    server = stand_in(path, [answer, answer])
    with installed(node), caplog.at_level(logging.WARNING, logger="gpudiag"):
        sampler = Sampler(tmp_path, path, 2.0, False, None, 1.0)
        try:
            samples = [sampler.sample(), sampler.sample()]
        finally:
            sampler.close()
    server.join(5)
    assert [s.source for s in samples] == ["direct", "direct"]
    assert samples[0].rows[0]["power_watts"] == 74.312  # read here: never the stale collection's values
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and says in warnings[0]


def test_with_nobody_listening_top_probes_directly_without_a_word(tmp_path, caplog):
    node = nvidia_node(1)
    node_root(tmp_path, "nvidia", node)
    with installed(node), caplog.at_level(logging.INFO, logger="gpudiag"):
        sampler = Sampler(tmp_path, None, 2.0, False, None, 1.0)
        try:
            sample = sampler.sample()
        finally:
            sampler.close()
    assert sample.source == "direct" and sample.rows[0]["verdict"] == {}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_where_the_checks_did_not_run_every_verdict_is_unjudged_never_ok(tmp_path):
    from gpudiag.probe.collector import CollectOptions, collect

    node = nvidia_node(2)
    node_root(tmp_path, "nvidia", node)
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path, timeout_seconds=5))
    view = live_view(snapshot, [], judged=False)  # the service's checks raised: no results at all
    assert [verdict_text(row) for row in view["gpus"]] == ["unjudged", "unjudged"]
    assert view["node"] is None and verdict_text({"verdict": view["node"]}) == "unjudged"
    judged = live_view(snapshot, [], judged=True)
    assert [verdict_text(row) for row in judged["gpus"]] == ["ok", "ok"]


def test_the_verdict_orders_worst_first_and_names_each_check_once(tmp_path):
    from gpudiag.model import DeviceRef, Vendor
    from gpudiag.model.device import DeviceSnapshot
    from gpudiag.model.node import NodeSnapshot

    device = DeviceSnapshot(index=0, vendor=Vendor.NVIDIA, source="nvml", pci_bus_id="0000:19:00.0")
    ref = DeviceRef.of(device)
    results = [CheckResult("thermal.temperature", Status.WARN, "warm", ref),
               CheckResult("kernel_log.xid", Status.FAIL, "Xid 48", ref),
               CheckResult("kernel_log.xid", Status.FAIL, "Xid 48 again", ref),
               CheckResult("ecc.volatile", Status.UNKNOWN, "not read", ref),
               CheckResult("host.iommu", Status.WARN, "node-level", None),
               CheckResult("pcie.link_width", Status.PASS, "x16", ref)]
    view = live_view(NodeSnapshot(devices=[device]), results)
    assert verdict_text(view["gpus"][0]) == "fail:kernel_log.xid;unknown:ecc.volatile;warn:thermal.temperature"
    assert view["node"] == {"warn": ["host.iommu"]}


def test_the_view_is_made_once_per_collection_however_many_ask(tmp_path, monkeypatch):
    import gpudiag.report.live as live

    made = []
    real = live.live_view
    monkeypatch.setattr(live, "live_view", lambda *args, **kwargs: made.append(1) or real(*args, **kwargs))
    node = nvidia_node(2)
    node_root(tmp_path, "nvidia", node)
    with installed(node), running_service(tmp_path, interval=60.0):
        answers = [raw(socket_path(tmp_path), b'{"op": "top", "max_age": 60}\n')[0] for _ in range(5)]
    assert len({json.dumps(a["view"], sort_keys=True) for a in answers}) == 1 and len(made) == 1
