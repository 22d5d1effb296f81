"""`gpudiag fleet REPORT...` where a report cannot be read whole (issue 24, items 3, 6 and 7): a truncated file in
a directory, a stray line of a pod's stderr in `kubectl logs | gpudiag fleet -`, a NaN figure, malformed results,
a report of 435,000 failing results. Each is skipped or counted, its node unknown, the run incomplete; never an
abort of everybody's verdict, never a crash, never a pass."""

from __future__ import annotations

import io
import json
import math
import sys

import pytest

from gpudiag.fleet.model import MAX_FAILURES
from tests.support.fleet import fleet_report, on_gpu, run, statuses, write_fleet


# -- 3. one bad report is skipped and counted, not an abort -----------------------------------------------------


def test_one_truncated_report_in_a_directory_is_skipped_and_its_node_unknown(capsys, tmp_path):
    write_fleet(tmp_path, 4)
    whole = json.dumps(fleet_report("gpu-node-004"), indent=2)
    (tmp_path / "gpu-node-004.json").write_text(whole[:len(whole) // 2])  # the node went down mid-write
    code, out, err = run(capsys, str(tmp_path), "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["complete"]) == (1, "unknown", False)
    assert statuses(out) == {"gpu-node-000": "pass", "gpu-node-001": "pass", "gpu-node-002": "pass",
                             "gpu-node-003": "pass", "gpu-node-004": "unknown"}
    (finding,) = verdict["nodes"][4]["findings"]
    assert finding["kind"] == "unread" and "could not be read: not a readable report: cut short" in finding["message"]
    assert err.count("\n") == 1 and err.startswith(f"gpudiag: warning: incomplete: {tmp_path / 'gpu-node-004.json'}")


def test_a_stray_stderr_line_in_kubectl_logs_is_skipped_and_counted(capsys, monkeypatch):
    reports = [json.dumps(fleet_report(f"n{i}"), indent=2) for i in range(4)]
    # As `kubectl logs -l app=gpudiag-accept` prints a pod whose stderr was not kept out of its log, and a pod
    # killed mid-report (its report cut short; the next pod's report follows on a new line).
    stream = (reports[0] + "\n" + "gpudiag: warning: kernel log: 3 records skipped (ring buffer wrapped)\n"
              + reports[1] + "\n" + reports[2][:5000] + "\n" + reports[3] + "\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stream.encode())))
    code, out, err = run(capsys, "-", "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["complete"]) == (1, "unknown", False)
    assert statuses(out) == {"n0": "pass", "n1": "pass", "n2": "unknown", "n3": "pass"}
    assert verdict["warnings"][0] == ("incomplete: standard input (report 2): not a report: "
                                      "'gpudiag: warning: kernel log: 3 records skipped (ring buffer wrapped)'")
    assert verdict["warnings"][1].startswith("incomplete: standard input (report 4): not a readable report: ")
    assert len(verdict["warnings"]) == 2 and err.count("\n") == 2


def test_a_stream_of_only_noise_is_nothing_to_judge(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Error from server (NotFound): pods not found\n")))
    code, out, err = run(capsys, "-")
    assert (code, out) == (3, "") and "1 unreadable piece(s) of input skipped" in err and err.count("\n") == 1


# -- 6. non-finite values and malformed results -------------------------------------------------------------------


def test_a_nan_figure_is_not_compared_and_does_not_hide_a_node_27_percent_below(capsys, tmp_path):
    def nan_copy(report: dict) -> None:  # json.dumps writes NaN, and Python's json reads it back
        on_gpu(report, "active.pcie_h2d_bandwidth", 1)["observed"]["gb_per_second"] = math.nan

    def slow_copy(report: dict) -> None:
        observed = on_gpu(report, "active.pcie_h2d_bandwidth", 1)["observed"]
        observed["gb_per_second"] = round(observed["gb_per_second"] * 0.73, 2)

    # A NaN compares false with everything, so sorting for the median leaves it where it lands: here the median was
    # the slow node's own figure, and no node lagged.
    write_fleet(tmp_path, 5, edits={"gpu-node-001": nan_copy, "gpu-node-004": slow_copy})
    code, out, _ = run(capsys, str(tmp_path), "--json")
    verdict = json.loads(out)
    assert code == 1 and statuses(out) == {"gpu-node-000": "pass", "gpu-node-001": "unknown", "gpu-node-002": "pass",
                                           "gpu-node-003": "pass", "gpu-node-004": "lag"}
    (outlier,) = verdict["outliers"]
    assert (outlier["node"], outlier["gpu"], outlier["peers"]) == ("gpu-node-004", 1, 4) and outlier["deficit"] > 0.25
    assert "gb_per_second nan is not a finite number: not compared" in verdict["nodes"][1]["findings"][0]["message"]


def test_malformed_results_are_counted_never_a_crash(capsys, tmp_path):
    def malformed(report: dict) -> None:
        on_gpu(report, "power.limit", 1)["observed"]["limit_watts"] = math.inf
        report["results"] += ["pcie.aer", {"check": 7, "status": "fail"}, {"check": "pcie.aer", "device": "GPU 0"},
                              {"check": "power.limit", "status": "pass", "device": {"index": 0},
                               "observed": {"limit_watts": "700"}},
                              {"check": "pcie.link_width", "status": "exploded"}]

    write_fleet(tmp_path, 3, edits={"gpu-node-001": malformed})
    code, out, err = run(capsys, str(tmp_path), "--json")
    assert code == 1, err
    verdict = json.loads(out)
    assert statuses(out) == {"gpu-node-000": "pass", "gpu-node-001": "unknown", "gpu-node-002": "pass"}
    message = verdict["nodes"][1]["findings"][0]["message"]
    assert "4 result(s) that are not check results" in message and "power limit of GPU 1: inf" in message


# -- 7. what one node holds is bounded ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_report_of_435000_failing_results_lists_some_and_counts_the_rest(capsys, tmp_path):
    report = {"schema_version": 1, "hostname": "big", "collected_at": "2026-12-01T00:00:00+00:00",
              "results": [{"check": f"c{i}", "status": "fail" if i % 5 else "unknown"} for i in range(435_000)]}
    (tmp_path / "big.json").write_text(json.dumps(report, separators=(",", ":")))
    code, out, _ = run(capsys, str(tmp_path), "--json")
    (node,) = json.loads(out)["nodes"]
    assert code == 1 and node["status"] == "fail" and len(node["findings"]) == MAX_FAILURES + 1
    more = node["findings"][-1]
    assert more["more"] == 435_000 - MAX_FAILURES and more["action"] == "drain"
    assert more["message"].startswith(f"and {435_000 - MAX_FAILURES:,} more failing or undecided check results "
                                      f"(347,975 fail, 86,993 unknown)")
    text = run(capsys, str(tmp_path))[1]
    assert f"  big: more: and {435_000 - MAX_FAILURES:,} more failing" in text


@pytest.mark.slow
def test_no_field_of_any_type_crashes_the_reading_of_a_report():
    """Every field the fleet view reads, in turn replaced by a value of every other JSON type (and NaN, huge
    numbers, long strings): read without an exception, never judged sound where it could not be read."""
    from gpudiag.fleet.report_facts import node_facts

    odd = [None, True, 0, -1, 10**400, 1.5, math.nan, math.inf, "", "x" * 5000, [], [1, "a"], {}, {"a": {"b": []}}]
    template = fleet_report("odd", gpus=2)
    paths = [("hostname",), ("schema_version",), ("collected_at",)]
    for index, result in enumerate(template["results"]):
        paths += [("results", index, key) for key in ("check", "status", "device", "observed", "action",
                                                       "fault_code", "message")]
        paths += [("results", index, "device", key) for key in ("index", "pci_bus_id", "model")
                  if isinstance(result.get("device"), dict)]
        paths += [("results", index, "observed", key) for key in (result.get("observed") or {})
                  if isinstance(result.get("observed"), dict)]
    read = 0
    for path in paths:
        for value in odd:
            report = dict(template, results=list(template["results"]))  # only the result changed is copied
            if path[0] == "results":
                report["results"][path[1]] = json.loads(json.dumps(template["results"][path[1]]))
            target = report
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = value
            try:
                facts, _ = node_facts(report, "odd.json")
            except Exception as exc:  # noqa: BLE001 - only the reader's own refusal is allowed
                assert type(exc).__name__ == "Unreadable" and path[0] != "results", (path, value, exc)
                continue
            read += 1
            assert all(math.isfinite(v) for v in facts.figures.values()), (path, value)
    assert read > len(paths) * len(odd) * 0.9
