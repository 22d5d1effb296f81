"""`gpudiag fleet REPORT...`: acceptance reports of a whole fleet (made from the real level-2 report of the lab's
H200, tests/support/fleet.py), judged: the failing, drifting and lagging nodes named, and nothing else."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.fleet import checks, fleet_report, on_gpu, run, write_fleet
from tests.support.paths import SCHEMAS

xmlschema = pytest.importorskip("xmlschema", reason="the xmlschema package validates JUnit output (test dependency)")
XSD = SCHEMAS / "junit-10.xsd"


def slow_copy(report: dict) -> None:  # GPU 1's host-to-GPU copies 15 % slower, as behind a marginal riser
    observed = on_gpu(report, "active.pcie_h2d_bandwidth", 1)["observed"]
    observed["gb_per_second"] = round(observed["gb_per_second"] * 0.85, 2)


def old_inforom(report: dict) -> None:  # one node missed the firmware update
    checks(report)["firmware.versions_consistent"][0]["observed"]["inforom_image"] = "G520.0282.02.01"


@pytest.fixture(scope="module")
def fleet64(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("reports")
    write_fleet(directory, 64, edits={"gpu-node-017": slow_copy, "gpu-node-042": old_inforom})
    return directory


def test_64_reports_name_the_slow_node_and_the_firmware_outlier_and_nothing_else(capsys, fleet64):
    code, out, err = run(capsys, str(fleet64), "--format", "json")
    assert code == 1 and err == ""
    verdict = json.loads(out)
    assert verdict["schema_version"] == 1 and verdict["status"] == "fail" and verdict["complete"] is True
    statuses = {n["node"]: n["status"] for n in verdict["nodes"]}
    assert len(statuses) == 64
    assert {n: s for n, s in statuses.items() if s != "pass"} == {"gpu-node-017": "lag", "gpu-node-042": "drift"}
    (outlier,) = verdict["outliers"]
    assert (outlier["node"], outlier["gpu"], outlier["pci_bus_id"], outlier["figure"]) == \
        ("gpu-node-017", 1, "0000:3b:00.0", "copy_h2d")
    assert 0.12 < outlier["deficit"] < 0.18 and outlier["peers"] == 64
    (drift,) = verdict["drift"]
    assert (drift["model"], drift["property"], drift["expected"], drift["expected_count"]) == \
        ("NVIDIA H200", "firmware:inforom_image", "G520.0282.02.02", 126)
    assert drift["minority"] == [{"value": "G520.0282.02.01", "count": 2,
                                  "nodes": [{"node": "gpu-node-042", "gpus": [0, 1]}]}]


def test_the_text_summary_names_them_with_what_to_do(capsys, fleet64):
    code, out, _ = run(capsys, str(fleet64))
    assert code == 1
    assert out.startswith("gpudiag fleet: FAIL: 64 node(s): 1 drift, 1 lag, 62 pass")
    assert "\nDRIFTING (1 node(s))\n  gpu-node-042 GPUs 0, 1: firmware:inforom_image" in out
    assert "\nLAGGING (1 node(s))\n  gpu-node-017 GPU 1 (0000:3b:00.0): copy_h2d: host-to-GPU copy bandwidth" in out
    assert "reseat the GPU or its riser" in out and "nvfwupd" not in out  # the lag's advice; firmware's own below
    assert "Update the firmware component" in out


def test_a_healthy_fleet_passes_with_exit_0(capsys, tmp_path):
    write_fleet(tmp_path, 8)
    code, out, err = run(capsys, str(tmp_path))
    assert (code, err) == (0, "")
    assert out == "gpudiag fleet: PASS: 8 node(s): 8 pass (8 report(s))\n"


def test_a_threshold_above_the_gap_lets_the_slow_node_pass(capsys, fleet64):
    verdict = json.loads(run(capsys, str(fleet64), "--json", "--threshold", "20")[1])
    assert verdict["outliers"] == [] and verdict["threshold"] == 0.2


def test_a_failing_check_names_node_gpu_bus_and_action(capsys, tmp_path):
    def downtrained(report: dict) -> None:
        result = on_gpu(report, "pcie.link_width", 1)
        result.update(status="fail", action="drain", fault_code="GPUDIAG-PCIE-WIDTH-DEGRADED",
                      message="GPU 1 link x8, expected x16", remediation="Reseat the GPU.")
        report["status"] = "fail"

    write_fleet(tmp_path, 4, edits={"gpu-node-002": downtrained})
    code, out, _ = run(capsys, str(tmp_path), "--json")
    assert code == 1
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert [n for n, v in nodes.items() if v["status"] != "pass"] == ["gpu-node-002"]
    (finding,) = nodes["gpu-node-002"]["findings"]
    assert {k: finding[k] for k in ("kind", "check", "gpu", "pci_bus_id", "action", "fault_code")} == {
        "kind": "fail", "check": "pcie.link_width", "gpu": 1, "pci_bus_id": "0000:3b:00.0", "action": "drain",
        "fault_code": "GPUDIAG-PCIE-WIDTH-DEGRADED"}
    text = run(capsys, str(tmp_path))[1]
    assert "FAILING (1 node(s))\n  gpu-node-002 GPU 1 (0000:3b:00.0): pcie.link_width: GPU 1 link x8" in text
    assert "-> drain\n      Reseat the GPU." in text


def test_a_driver_on_one_node_of_three_is_drift_named_with_its_node(capsys, tmp_path):
    def older_driver(report: dict) -> None:
        checks(report)["driver.library"][0]["observed"]["driver_version"] = "570.133.20"

    write_fleet(tmp_path, 3, edits={"gpu-node-001": older_driver})
    verdict = json.loads(run(capsys, str(tmp_path), "--json")[1])
    (drift,) = verdict["drift"]
    assert (drift["property"], drift["expected"], drift["minority"][0]["value"], drift["minority"][0]["nodes"]) == \
        ("driver_version", "580.159.04", "570.133.20", [{"node": "gpu-node-001", "gpus": None}])
    assert [f["action"] for f in verdict["nodes"][1]["findings"]] == ["drain"]


def test_junit_has_a_suite_per_node_and_validates(capsys, fleet64):
    code, out, _ = run(capsys, str(fleet64), "--format", "junit")
    assert code == 1
    xmlschema.XMLSchema(str(XSD)).validate(out)
    assert out.count("<testsuite ") == 64
    assert (
        'name="drift.firmware:inforom_image[GPUs 0, 1]"' in out and 'name="lag.copy_h2d[GPU 1 (0000:3b:00.0)]"' in out
    )
    assert '<testsuites name="gpudiag.fleet" tests="64" failures="2" errors="0"' in out


def test_a_stream_of_reports_on_standard_input(capsys, monkeypatch):
    reports = [fleet_report(f"n{i}", edit=slow_copy if i == 3 else None) for i in range(5)]
    # concatenated, pretty-printed and newline-delimited, as `cat`, `srun` or `jq -c` would give them
    stream = json.dumps(reports[0], indent=2) + json.dumps(reports[1]) + "\n" + "\n".join(map(json.dumps, reports[2:]))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stream.encode())))
    code, out, _ = run(capsys, "-", "--json")
    verdict = json.loads(out)
    assert code == 1 and len(verdict["nodes"]) == 5 and [o["node"] for o in verdict["outliers"]] == ["n3"]


def test_the_stream_reader_bounds_each_report(monkeypatch):
    from gpudiag.fleet import reports

    monkeypatch.setattr(reports, "REPORT_MAX_BYTES", 1000)
    monkeypatch.setattr(reports, "_CHUNK", 256)
    endless = io.BytesIO(b'{"schema_version": 1, "hostname": "big", "results": [' + b'"x",' * 10_000)
    (read,) = reports.read_stream(endless, "standard input")
    assert read.facts.node == "big" and "over 1,000 characters" in read.skipped
    assert read.facts.unread and read.facts.failures == []


def test_a_host_reported_twice_is_judged_by_its_worst_report_and_flagged(capsys, tmp_path):
    def failing(report: dict) -> None:
        on_gpu(report, "pcie.link_width", 1).update(status="fail", action="drain", message="GPU 1 link x8")

    # The failing report is the newer one, although its time sorts first as text (an offset of -02:00).
    (tmp_path / "a.json").write_text(json.dumps(dict(fleet_report("twice", edit=failing),
                                                     collected_at="2026-12-01T23:30:00-02:00")))
    (tmp_path / "b.json").write_text(json.dumps(dict(fleet_report("twice"), collected_at="2026-12-02T00:30:00+00:00")))
    code, out, err = run(capsys, str(tmp_path), "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["status"] == "fail"
    (node,) = verdict["nodes"]
    assert node["status"] == "fail" and [f["kind"] for f in node["findings"]] == ["fail", "conflict"]
    assert f"{tmp_path / 'b.json'}: pass, collected 2026-12-02T00:30:00+00:00" in node["findings"][1]["message"]
    assert verdict["warnings"] == [f"twice: 2 reports claim this hostname; judged the worst ({tmp_path / 'a.json'})"]
    assert "claim this hostname" in err
    # Alike reports: the newer one by time (a.json, 01:30 UTC) is judged, not the one whose text sorts last.
    (tmp_path / "a.json").write_text(json.dumps(dict(fleet_report("twice"), collected_at="2026-12-01T23:30:00-02:00")))
    code, out, _ = run(capsys, str(tmp_path), "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["nodes"][0]["status"] == "warn"  # the conflict is flagged, nothing failed
    assert verdict["warnings"] == [f"twice: 2 reports claim this hostname; judged the worst ({tmp_path / 'a.json'})"]


@pytest.mark.parametrize("content, fragment", [
    ("[1, 2]", "not a gpudiag check report"),
    ('{"schema_version": 2, "hostname": "x", "results": []}', "schema_version 2"),
    ('{"schema_version": 1, "results": []}', "names no hostname"),
    ("{not json", "not a readable report"),
    ('{"schema_version": 1, "hostname": "x", "results": [' + "[" * 100_000, "nested too deeply"),
])
def test_a_report_that_cannot_be_read_is_skipped_and_its_node_unknown(capsys, tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(capsys, str(path), "--json")
    verdict = json.loads(out)
    assert (code, verdict["status"], verdict["complete"]) == (1, "unknown", False)
    (node,) = verdict["nodes"]
    assert node["node"] in ("bad", "x") and node["status"] == "unknown"
    assert err.startswith("gpudiag: warning: incomplete: ") and err.count("\n") == 1, err
    assert fragment in err and str(path) in err


def test_a_path_that_is_not_there_is_a_usage_error(capsys, tmp_path):
    code, out, err = run(capsys, str(tmp_path / "missing.json"))
    assert (code, out) == (2, "") and "cannot read" in err and err.count("\n") == 1


def test_a_fifo_is_refused_not_waited_on(capsys, tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    code, _, err = run(capsys, str(fifo))
    assert code == 2 and "not a regular file" in err


@pytest.mark.parametrize("argv, fragment", [
    ((), "either --prometheus"),
    (("x.json", "--prometheus", "http://127.0.0.1:1"), "not both"),
    (("x.json", "--bearer-token-file", "t", "--selector", '{job="a"}'), "--bearer-token-file, --selector: only with"),
])
def test_usage(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "") and fragment in err and err.count("\n") == 1


def test_no_reports_is_nothing_to_judge_exit_3(capsys, tmp_path):
    code, out, err = run(capsys, str(tmp_path))
    assert (code, out) == (3, "") and "nothing to judge: no gpudiag reports found" in err


def test_hostile_names_and_messages_reach_no_terminal(capsys, tmp_path):
    def hostile(report: dict) -> None:
        result = on_gpu(report, "pcie.aer", 0)
        result.update(status="fail", message="bad \x1b[2J\x1b]0;owned\x07 line\nFAIL forged", action="drain")

    report = fleet_report("evil\x1b[31mhost", edit=hostile)
    (tmp_path / "evil.json").write_text(json.dumps(report))
    (tmp_path / "evil-again.json").write_text(json.dumps(report))  # a warning names the hostname on stderr
    code, out, err = run(capsys, str(tmp_path))
    assert code == 1 and "\x1b" not in out and "\x07" not in out and "\nFAIL forged" not in out
    assert "claim this hostname" in err and "\x1b" not in err
    junit = run(capsys, str(tmp_path), "--format", "junit")[1]
    xmlschema.XMLSchema(str(XSD)).validate(junit)


def test_an_empty_report_and_a_missing_one_are_silent_nodes(capsys, tmp_path):
    reports = tmp_path / "reports"
    write_fleet(reports, 3)
    (reports / "gpu-node-007.json").write_text("")  # srun --output reports/%N.json where gpudiag was killed
    (tmp_path / "nodes").write_text("# scontrol show hostnames\ngpu-node-000\ngpu-node-001\ngpu-node-002\n"
                                    "gpu-node-007\ngpu-node-009\n\n")
    code, out, err = run(capsys, str(reports), "--nodes", str(tmp_path / "nodes"), "--json")
    verdict = json.loads(out)
    statuses = {n["node"]: n["status"] for n in verdict["nodes"]}
    assert code == 1 and statuses == {"gpu-node-000": "pass", "gpu-node-001": "pass", "gpu-node-002": "pass",
                                      "gpu-node-007": "silent", "gpu-node-009": "silent"}
    messages = {n["node"]: n["findings"][0]["message"] for n in verdict["nodes"] if n["findings"]}
    assert "is empty" in messages["gpu-node-007"] and messages["gpu-node-009"] == "no report from this node"
    assert verdict["drift"] == []  # silent nodes are compared with nobody
    # From reports there is no exporter to check: the advice is about the run that should have written the report
    # (issue 36, item 6).
    advice = {n["node"]: n["findings"][0]["remediation"] for n in verdict["nodes"] if n["findings"]}
    assert all("exporter" not in a and "Prometheus" not in a and "gpudiag check --json" in a for a in advice.values())
    text = run(capsys, str(reports), "--nodes", str(tmp_path / "nodes"))[1]
    assert "exporter" not in text and "No report from this node" in text


@pytest.fixture(scope="module")
def lost_gpu_reports(tmp_path_factory) -> Path:
    """Two nodes' real `gpudiag check --json` reports of an 8x H200 whose GPU 4 fell off the bus (Xid 79 in the log),
    judged against the h200-8x profile (tests/support/checklist_scenarios.py)."""
    from tests.support.checklist_scenarios import gpu_lost_before_first_collection

    directory = tmp_path_factory.mktemp("lost")
    _, out = gpu_lost_before_first_collection("--json")
    for host in ("gpu-node-001", "gpu-node-002"):
        report = json.loads(out)
        report["hostname"] = host
        (directory / f"{host}.json").write_text(json.dumps(report))
    return directory


def test_a_lost_gpu_is_one_finding_with_what_follows_from_it_under_it(capsys, lost_gpu_reports):
    """The fleet view repeated a lost GPU three times a node (the GPU, its Xid 79, its 29 undecided checks), each with
    its full paragraph, with three different actions (issue 36, item 6); now once, with the report's action and what
    follows from it (the report's caused_by) in one line."""
    code, text, _ = run(capsys, str(lost_gpu_reports))
    lines = text.splitlines()
    node = [i for i, line in enumerate(lines) if line.startswith("  gpu-node-001")]
    assert [lines[i] for i in node] == ["  gpu-node-001 GPU 4 (0000:9b:00.0): inventory.gpus_visible: GPU 4 "
                                        "(0000:9b:00.0) is enumerated but no longer answers its driver -> reboot"]
    assert lines[node[0] + 2] == ("      because of it: FAIL inventory.gpu_count (node); FAIL kernel_log.xid; UNKN 29 "
                                  "checks (driver, inventory, pcie, ecc, memory, thermal, power, topology, firmware, "
                                  "host, workload)")
    assert text.count("Drain the node and power-cycle it") == 2  # the advice once a node
    assert "DRIFT" not in text  # the lost GPU's errors are no partition mode its peers lack

    verdict = json.loads(run(capsys, str(lost_gpu_reports), "--json")[1])
    findings = verdict["nodes"][0]["findings"]
    assert len(findings) == 32  # every one kept, each naming what it follows from
    causes = {f["check"]: f["caused_by"] for f in findings if f["kind"] == "fail"}
    assert causes == {"inventory.gpus_visible": [], "inventory.gpu_count": ["inventory.gpus_visible 0000:9b:00.0"],
                      "kernel_log.xid": ["inventory.gpus_visible 0000:9b:00.0"]}
    assert {f["action"] for f in findings} == {"reboot", "drain"}  # the count's own drain; the loss: reboot
    assert verdict["drift"] == []


def test_expected_names_match_short_names_and_extra_reports_are_told(capsys, tmp_path):
    write_fleet(tmp_path / "r", 2)
    report = fleet_report("gpu-node-001.cluster.example")
    (tmp_path / "r" / "gpu-node-001.json").write_text(json.dumps(report))  # the FQDN in place of the short name
    (tmp_path / "nodes").write_text("node/gpu-node-000\ngpu-node-001\n")
    write_fleet(tmp_path / "r2", 3)
    code, out, err = run(capsys, str(tmp_path / "r"), "--nodes", str(tmp_path / "nodes"), "--json")
    assert code == 0 and [n["status"] for n in json.loads(out)["nodes"]] == ["pass", "pass"]
    code, out, err = run(capsys, str(tmp_path / "r2"), "--nodes", str(tmp_path / "nodes"), "--json")
    assert code == 0 and json.loads(out)["warnings"] == ["gpu-node-002: a report from a node not in the expected list"]


def test_expected_nodes_only_with_reports(capsys, tmp_path):
    (tmp_path / "nodes").write_text("\n# nothing\n")
    code, _, err = run(capsys, str(tmp_path), "--nodes", str(tmp_path / "nodes"))
    assert code == 2 and "no hostname in it" in err
    code, _, err = run(capsys, "--prometheus", "http://127.0.0.1:9", "--nodes", str(tmp_path / "nodes"))
    assert code == 2 and "--nodes: only with reports" in err


def test_a_slow_peer_copy_and_a_slow_stress_are_named_per_gpu(capsys, tmp_path):
    def slow_link(report: dict) -> None:  # GPU 2 -> GPU 5 over a link that retrains: 20 % slower
        (result,) = [r for r in checks(report)["active.p2p_bandwidth"]
                     if r["device"]["index"] == 2 and r["observed"]["dst"] == 5]
        result["observed"]["gb_per_second"] = round(result["observed"]["gb_per_second"] * 0.8, 2)

    def hot_gpu(report: dict) -> None:  # GPU 7 held 10 % fewer FLOP/s under stress
        observed = on_gpu(report, "active.stress", 7)["observed"]
        observed["fp32_tflops"] = round(observed["fp32_tflops"] * 0.9, 2)

    write_fleet(tmp_path, 6, gpus=8, edits={"gpu-node-001": slow_link, "gpu-node-004": hot_gpu})
    code, out, _ = run(capsys, str(tmp_path), "--json")
    verdict = json.loads(out)
    assert code == 1
    assert [(o["node"], o["gpu"], o["pci_bus_id"], o["figure"]) for o in verdict["outliers"]] == [
        ("gpu-node-001", 2, "0000:4c:00.0", "p2p_min"), ("gpu-node-004", 7, "0000:db:00.0", "stress_fp32")]
    assert {n["node"]: n["status"] for n in verdict["nodes"] if n["status"] != "pass"} == {
        "gpu-node-001": "lag", "gpu-node-004": "lag"}
