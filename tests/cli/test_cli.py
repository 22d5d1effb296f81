"""The command line as automation sees it: exit codes, clean stdout, JSON shape, replay, golden outputs."""

from __future__ import annotations

import json
import os
import re

import pytest

from gpudiag.cli import app as cli
from gpudiag.model import NodeSnapshot
from gpudiag.model.recording import load_snapshot, save_snapshot
from tests.support.fakes.fake_nvml import FakeNode, installed, library_missing
from tests.support.nvidia_node import sysfs_for
from tests.support.paths import FIXTURES, GOLDEN

RECORDED = {"h200x2": FIXTURES / "h200x2" / "snapshot.json", "h200": FIXTURES / "h200" / "snapshot.json"}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def healthy(tmp_path):
    node = FakeNode.hgx_h200(2)
    sysfs_for(node, tmp_path)
    return node, tmp_path


# -- exit codes --------------------------------------------------------------------------------------------------


def test_healthy_node_exits_0(capsys, healthy):
    node, root = healthy
    with installed(node):
        code, out, _ = run(capsys, "check", "--root", str(root), "--no-color")
    assert code == 0
    assert "Verdict: PASS" in out


def test_a_failed_check_exits_1_and_leads_the_checklist(capsys, healthy):
    node, root = healthy
    node.gpus[1].remap_pending = True
    with installed(node):
        code, out, _ = run(capsys, "check", "--root", str(root), "--no-color")
    assert code == 1
    lines = out.splitlines()
    assert lines[2].startswith("Verdict: FAIL")
    assert re.match(r"FAIL  memory\.row_remap_pending  GPU 1 0000:3b:00\.0", lines[4])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "--bogus"], "No such option: --bogus"),
        (["check", "--format", "xml"], "--format"),
        (["check", "--only", "pcie.nonsense"], "pcie.nonsense"),
        (["check", "--replay", "{missing}/snapshot.json"], "{missing}/snapshot.json: cannot read"),
        (["check", "--kernel-log", "{missing}/dmesg.txt"], "--kernel-log {missing}/dmesg.txt: no such file"),
        (["check", "--root", "{missing}"], "--root {missing}: no sys/ directory"),
        (["nonsense"], "No such command"),
        (["check", "--replay", str(RECORDED["h200x2"]), "--level", "2"], "cannot be load-tested"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, tmp_path, argv, message):
    missing = str(tmp_path / "missing")  # never a fixed path such as /nonexistent: a machine may have it
    argv, message = [arg.replace("{missing}", missing) for arg in argv], message.replace("{missing}", missing)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("gpudiag: error:") and message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "content", ["{not json", '{"schema_version": 99}', '{"schema_version": 1, "devices": 3}', "[]"]
)
def test_a_bad_recording_exits_2_naming_the_file(capsys, tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(capsys, "check", "--replay", str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"gpudiag: error: {path}:") and len(err.strip().splitlines()) == 1


def test_nothing_probed_exits_3(capsys, tmp_path):
    (tmp_path / "sys").mkdir()  # an empty machine: no GPU on the bus, no usable library
    with library_missing():
        code, out, err = run(capsys, "check", "--root", str(tmp_path), "--json")
    assert code == 3
    assert json.loads(out)["status"] in ("fail", "unknown")
    assert "nothing could be probed" in err


def test_an_internal_error_exits_4_without_a_traceback(capsys, monkeypatch):
    import gpudiag.report

    def broken(*args, **kwargs):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(gpudiag.report, "render", broken)
    code, out, err = run(capsys, "check", "--replay", str(RECORDED["h200x2"]))
    assert code == 4 and out == ""
    assert "internal error: RuntimeError: renderer exploded" in err and "Traceback" not in err


# -- stdout is data only ----------------------------------------------------------------------------------------


def test_what_a_library_prints_while_probing_never_reaches_stdout(capfd, healthy, monkeypatch):
    node, root = healthy
    from gpudiag.probe.nvml.backend import NvmlBackend

    original_open = NvmlBackend.open

    def chatty_open(self, tracker):
        print("library chatter from Python")
        os.write(1, b"library chatter from C\n")
        return original_open(self, tracker)

    monkeypatch.setattr(NvmlBackend, "open", chatty_open)
    with installed(node):
        code = cli.main(["check", "--root", str(root), "--json"])
    out, err = capfd.readouterr()
    assert code == 0
    report = json.loads(out)  # stdout is exactly the JSON report
    assert report["status"] == "pass"
    assert "library chatter from Python" in err and "library chatter from C" in err


# -- JSON, replay -----------------------------------------------------------------------------------------------


def test_json_report_follows_the_documented_schema(capsys, healthy):
    node, root = healthy
    node.gpus[0].pcie_downtrained(generation=4, width=8)
    node.gpus[0].clock_event_reasons = 0  # busy: not an idle downshift
    node.gpus[0].utilization = (95, 40)
    with installed(node):
        code, out, _ = run(capsys, "check", "--root", str(root), "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["schema_version"] == 1 and report["status"] == "fail"
    assert set(report) >= {"schema_version", "hostname", "status", "results"}
    for result in report["results"]:
        assert set(result) >= {"check", "status", "device", "observed", "expected", "message", "remediation"}
        assert result["status"] in {"pass", "warn", "fail", "skip", "unknown"}
        if result["device"] is not None:
            assert set(result["device"]) >= {"index", "uuid", "pci_bus_id", "vendor", "model"}
            assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", result["device"]["pci_bus_id"])
        if result["status"] in ("fail", "warn", "unknown"):
            assert result["message"] and result["remediation"]
    width = [r for r in report["results"] if r["check"] == "pcie.link_width" and r["status"] == "fail"]
    assert width and width[0]["device"]["pci_bus_id"] == "0000:19:00.0"


def test_a_snapshot_replays_to_the_same_results(capsys, healthy, tmp_path):
    node, root = healthy
    node.gpus[1].thermal_slowdown()
    recording = tmp_path / "node.json"
    with installed(node):
        assert run(capsys, "snapshot", "--root", str(root), "--output", str(recording))[0] == 0
        live_code, live_out, _ = run(capsys, "check", "--root", str(root), "--json")
    replay_code, replay_out, _ = run(capsys, "check", "--replay", str(recording), "--json")
    live, replayed = json.loads(live_out), json.loads(replay_out)
    assert replay_code == live_code == 1
    simplify = lambda report: [
        (r["check"], r["status"], r["device"] and r["device"]["index"]) for r in report["results"]
    ]
    # workload.cpu_starved judges host CPU load, which differs between the two runs; everything else must match.
    assert [r for r in simplify(replayed) if r[0] != "workload.cpu_starved"] == \
        [r for r in simplify(live) if r[0] != "workload.cpu_starved"]


def test_recordings_round_trip_exactly(tmp_path):
    snapshot = load_snapshot(RECORDED["h200x2"])
    save_snapshot(snapshot, tmp_path / "again.json")
    assert load_snapshot(tmp_path / "again.json") == snapshot
    assert isinstance(snapshot, NodeSnapshot) and len(snapshot.devices) == 2


# -- the recorded lab nodes and golden outputs ------------------------------------------------------------------


def test_recorded_h200x2_node_is_healthy_in_every_family(capsys):
    code, out, _ = run(capsys, "check", "--replay", str(RECORDED["h200x2"]), "--json")
    report = json.loads(out)
    assert code == 0 and report["status"] == "pass"
    by_check = {}
    for r in report["results"]:
        by_check.setdefault(r["check"], []).append(r)
    links = by_check["topology.links_up"]
    assert [r["device"]["index"] for r in links] == [0, 1] and all(r["status"] == "pass" for r in links)
    assert all(r["status"] == "pass" for r in by_check["pcie.link_generation"] + by_check["pcie.link_width"])
    assert all(r["status"] == "pass" for r in by_check["ecc.mode"] + by_check["memory.row_remap_pending"])


@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("fmt, suffix", [("text", "txt"), ("json", "json"), ("junit", "xml")])
def test_golden_outputs_of_the_recorded_lab_nodes(capsys, name, fmt, suffix):
    if not RECORDED[name].exists():
        pytest.skip(f"{name} was not recorded")
    code, out, _ = run(capsys, "check", "--replay", str(RECORDED[name]), "--format", fmt, "--no-color", "--verbose")
    golden = GOLDEN / f"{name}.check.{suffix}"
    if os.environ.get("GPUDIAG_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(out)
    assert out == golden.read_text(), f"output differs from {golden} (GPUDIAG_UPDATE_GOLDEN=1 rewrites it)"


def test_a_narrow_selection_pays_only_for_what_it_judges(capsys, healthy):
    node, root = healthy
    with installed(node) as lib:
        code, out, _ = run(capsys, "check", "--root", str(root), "--only", "pcie", "--json")
        narrow_calls = lib.calls["nvmlDeviceGetNvLinkErrorCounter"]
        run(capsys, "check", "--root", str(root), "--json")
    assert code == 0 and {r["check"].split(".")[0] for r in json.loads(out)["results"]} == {"pcie"}
    assert narrow_calls == 0 and lib.calls["nvmlDeviceGetNvLinkErrorCounter"] == 2 * 18 * 4
