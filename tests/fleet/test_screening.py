"""`gpudiag fleet`'s never-screened and overdue GPUs (gpudiag/fleet/screening.py), from reports made by gpudiag's
own checks and JSON report, and from a stand-in Prometheus answering the exporter's series."""

from __future__ import annotations

import dataclasses
import json

from gpudiag.checks import run_checks
from gpudiag.report.json_report import report_dict
from tests.support.fleet import run
from tests.support.prometheus_stand_in import healthy, stand_in  # noqa: F401 - stand_in: a fixture
from tests.support.prometheus_stand_in import sample as _sample
from tests.support.prometheus_stand_in import success as _success
from tests.support.screen_records import DAY, NOW, never_verified, overdue, screened_node


# -- the fleet ----------------------------------------------------------------------------------------------------

def report_of(snapshot, hostname: str) -> dict:
    snapshot = dataclasses.replace(snapshot, hostname=hostname)
    return report_dict(snapshot, run_checks(snapshot, None))


def test_fleet_from_reports_lists_never_screened_and_overdue_gpus(capsys, tmp_path):
    never_new = never_verified(4)
    nodes = {"n1": screened_node(), "n2": screened_node(lambda s: (overdue(2, 9)(s), never_new(s)))}
    nodes["n2"].screening.state.gpus[4].first_seen = NOW - DAY  # never screened, not due for six days
    for name, snapshot in nodes.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(report_of(snapshot, name)))
    code, out, _ = run(capsys, str(tmp_path), "--json")
    found = {n["node"]: [(f["kind"], f["gpu"], f["screening"]) for f in n["findings"]
                         if f["check"] == "screen.coverage"] for n in json.loads(out)["nodes"]}
    assert found == {"n1": [], "n2": [("screening", 2, "overdue"), ("unscreened", 4, "never screened (not due yet)")]}
    code, text, _ = run(capsys, str(tmp_path))
    assert "NOT PROVEN BY A SCREEN LATELY (1 node(s))" in text
    assert "n2 GPU 2 (0000:4c:00.0): screen.coverage: overdue: overdue: last verified 9.0 d ago" in text


def test_fleet_from_prometheus_lists_never_screened_and_overdue_gpus(capsys, stand_in):
    def answers(promql, headers):
        if promql.startswith("up{"):
            return _success([_sample(1, instance="n1:9858"), _sample(1, instance="n2:9858")])
        if healthy(promql, "n1:9858"):
            return _success(healthy(promql, "n1:9858", "n2:9858"))
        if "gpudiag_screen_last_verified_timestamp_seconds" in promql:
            return _success([_sample(NOW - DAY, instance="n1:9858", gpu="0"),
                             _sample(NOW - 9 * DAY, instance="n2:9858", gpu="0")])
        if "gpudiag_screen_overdue_seconds" in promql:
            return _success([_sample(0, instance="n1:9858", gpu="0"), _sample(2 * DAY, instance="n2:9858", gpu="0"),
                             _sample(3 * DAY, instance="n2:9858", gpu="1"), _sample(0, instance="n2:9858", gpu="2")])
        return _success([])

    code, out, _ = run(capsys, "--prometheus", stand_in(answers).url, "--json")
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    found = {n: [(f["kind"], f["gpu"], f["screening"]) for f in node["findings"]] for n, node in nodes.items()}
    assert found == {"n1:9858": [], "n2:9858": [("screening", 0, "overdue"), ("screening", 1, "never screened"),
                                                ("unscreened", 2, "never screened (not due yet)")]}
    assert nodes["n2:9858"]["status"] == "warn" and nodes["n1:9858"]["status"] == "pass" and code == 0
