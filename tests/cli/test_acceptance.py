"""Node acceptance from the command line: --profile, -p, --baseline and `gpudiag baseline`, as automation sees
them (exit codes, one-line errors on stderr, clean stdout)."""

from __future__ import annotations

import json

import pytest

from gpudiag.model.recording import save_snapshot
from tests.cli.test_cli import run
from tests.support.acceptance_nodes import nvidia_h200_8x
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for
from tests.support.snapshots import amd_mi300x_node


@pytest.fixture
def h200_8x(tmp_path):
    path = tmp_path / "h200-8x.snapshot.json"
    save_snapshot(nvidia_h200_8x(), path)
    return path


def test_a_shipped_profile_passes_its_node_and_a_changed_one_fails(capsys, h200_8x):
    code, out, err = run(capsys, "check", "--replay", str(h200_8x), "--profile", "h200-8x", "--json")
    report = json.loads(out)
    assert code == 0 and report["status"] == "pass", err
    model = [r for r in report["results"] if r["check"] == "inventory.gpu_model"]
    assert len(model) == 8 and {r["status"] for r in model} == {"pass"}
    code, out, _ = run(capsys, "check", "--replay", str(h200_8x), "--profile", "h200-8x", "-p",
                       "expected_power_limit_watts=600", "--json", "--only", "power")
    report = json.loads(out)
    limits = [r for r in report["results"] if r["check"] == "power.limit"]
    assert code == 1 and {(r["status"], r["action"], r["fault_code"]) for r in limits} == {
        ("fail", "drain", "GPUDIAG-POWER-LIMIT-UNEXPECTED")}
    assert {r["check"].split(".")[0] for r in report["results"]} == {"power"}  # --only still selects


def test_skip_leaves_out_what_the_profile_would_fail(capsys, h200_8x):
    args = ("check", "--replay", str(h200_8x), "--profile", "mi300x-8x", "--no-color")
    assert run(capsys, *args)[0] == 1
    code, out, _ = run(capsys, *args, "--skip", "inventory,power,topology.links_up,host")
    assert code == 0 and "Verdict: PASS" in out


@pytest.mark.parametrize("argv, message", [
    (["--profile", "h300-8x"], "profile h300-8x: not a shipped profile (h100-8x, h200-8x,"),
    (["--profile", "{missing}.toml"], "profile {missing}.toml: no such file, and not a shipped profile (h100-8x,"),
    (["-p", "expected_gpu_cont=8"], "-p expected_gpu_cont: unknown setting; did you mean expected_gpu_count"),
    (["-p", "expected_gpu_count=eight"], "-p expected_gpu_count: 'eight' is not an integer"),
    (["--profile", "h200-8x", "-p", "retired_pages_fail_count=3"],
     "-p (with retired_pages_warn_count from the profile or the default): 15 is above retired_pages_fail_count (3)"),
    (["--baseline", "{missing}/golden.json"], "baseline {missing}/golden.json: cannot read: No such file"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(capsys, tmp_path, h200_8x, argv, message):
    missing = str(tmp_path / "missing")  # never a fixed path such as /nonexistent: a machine may have it
    argv, message = [arg.replace("{missing}", missing) for arg in argv], message.replace("{missing}", missing)
    code, out, err = run(capsys, "check", "--replay", str(h200_8x), *argv)
    assert code == 2 and out == ""
    assert err == f"gpudiag: error: {err.removeprefix('gpudiag: error: ').rstrip()}\n"  # exactly one line
    assert err.startswith(f"gpudiag: error: {message}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("text, message", [
    ("expected_gpu_count = [8\n", "TOML syntax error"),
    ('expected_gpu_count = "8"\n', "expected_gpu_count: expected an integer, got str '8'"),
    ("retired_pages_warn_count = 70\n", "retired_pages_warn_count: 70 is above retired_pages_fail_count (60)"),
    ("expected_gpu_counts = 8\n", "expected_gpu_counts: unknown setting; did you mean expected_gpu_count"),
])
def test_bad_profile_files_through_the_cli(capsys, tmp_path, h200_8x, text, message):
    profile = tmp_path / "site.toml"
    profile.write_text(text)
    code, out, err = run(capsys, "check", "--replay", str(h200_8x), "--profile", str(profile))
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(f"gpudiag: error: profile {profile}: {message}"), err


def test_a_malformed_baseline_file_through_the_cli(capsys, tmp_path, h200_8x):
    golden = tmp_path / "golden.json"
    golden.write_text('{"kind": "gpudiag-baseline", "schema_version": 1, "gpus": [{"pci_bus_id": 7}]}')
    code, out, err = run(capsys, "check", "--replay", str(h200_8x), "--baseline", str(golden))
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(f"gpudiag: error: baseline {golden}: gpus[0]") and "pci_bus_id" in err


def test_baseline_from_a_recording_then_check_siblings(capsys, tmp_path, h200_8x):
    golden = tmp_path / "golden.json"
    code, out, err = run(capsys, "baseline", "--replay", str(h200_8x), "--output", str(golden))
    assert (code, out) == (0, "") and json.loads(golden.read_text())["kind"] == "gpudiag-baseline"
    code, out, _ = run(capsys, "check", "--replay", str(h200_8x), "--baseline", str(golden), "--json")
    assert code == 0 and json.loads(out)["status"] == "pass"

    sibling = nvidia_h200_8x()
    sibling.devices[6].vbios_version = "96.00.A5.00.1A"
    sibling.pci_gpus[2].upstream_max_link_width = 8
    save_snapshot(sibling, tmp_path / "sibling.json")
    code, out, _ = run(capsys, "check", "--replay", str(tmp_path / "sibling.json"), "--baseline", str(golden),
                       "--json", "--only", "baseline")
    drifts = [r for r in json.loads(out)["results"] if r["status"] == "fail"]
    assert code == 1
    assert [(r["check"], r["device"]["pci_bus_id"], r["expected"], r["observed"]) for r in drifts] == [
        ("baseline.pcie", "0000:4c:00.0", {"slot_max_width": 16}, {"slot_max_width": 8}),
        ("baseline.firmware", "0000:cb:00.0", {"vbios_version": "96.00.9F.00.01"}, {"vbios_version": "96.00.A5.00.1A"}),
    ]

    save_snapshot(amd_mi300x_node(), tmp_path / "amd.json")
    code, out, _ = run(capsys, "check", "--replay", str(tmp_path / "amd.json"), "--baseline", str(golden), "--json")
    inventory = [r for r in json.loads(out)["results"] if r["check"] == "baseline.inventory"]
    assert code == 1 and [r["status"] for r in inventory] == ["fail"]
    assert inventory[0]["message"].startswith("the baseline is of a NVIDIA node, this node has AMD GPUs")


def test_baseline_to_stdout_and_of_a_live_node(capsys, tmp_path):
    node = FakeNode.hgx_h200(2)
    sysfs_for(node, tmp_path)
    with installed(node):
        code, out, err = run(capsys, "baseline", "--root", str(tmp_path))
    golden = json.loads(out)
    assert code == 0 and [g["pci_bus_id"] for g in golden["gpus"]] == [g.bus_id.lower()[-12:] for g in node.gpus]
    assert {g["vbios_version"] for g in golden["gpus"]} == {"96.00.A5.00.01"}
    (tmp_path / "golden.json").write_text(out)
    node.gpus[1].vbios = "96.00.A5.00.02"
    with installed(node):
        code, out, _ = run(capsys, "check", "--root", str(tmp_path), "--baseline", str(tmp_path / "golden.json"),
                           "--only", "baseline", "--json")
    (drift,) = [r for r in json.loads(out)["results"] if r["status"] == "fail"]
    assert code == 1 and drift["check"] == "baseline.firmware" and drift["device"]["index"] == 1
    assert "vbios_version: golden 96.00.A5.00.01, now 96.00.A5.00.02" in drift["message"]


def test_baseline_of_a_node_with_nothing_to_record_exits_3(capsys, tmp_path):
    from gpudiag.model import NodeSnapshot
    save_snapshot(NodeSnapshot(hostname="cpu-only"), tmp_path / "empty.json")
    code, out, err = run(capsys, "baseline", "--replay", str(tmp_path / "empty.json"), "-o", str(tmp_path / "b.json"))
    assert (code, out) == (3, "") and "nothing could be probed" in err
    assert not (tmp_path / "b.json").exists()
