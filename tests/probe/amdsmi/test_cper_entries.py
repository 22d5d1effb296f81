"""AMD CPER records end to end (issue 32, item 9): a fake MI300X node whose libamd_smi.so hands out CPER records
built as AMD's own tests build them (tests/support/cper_records.py), read by the real amdsmi binding through ctypes,
collected by gpudiag/probe/amdsmi/cper_entries.py and judged by ras.cper in `gpudiag check --json`."""

from __future__ import annotations

import json

import pytest

from gpudiag.cli.app import main
from gpudiag.model import Status
from gpudiag.probe.amdsmi.cper_entries import NO_FUNCTION, NOT_SUPPORTED, SOURCE
from tests.probe.amdsmi.test_end_to_end import check_node, node_root, not_passing
from tests.support.cper_records import corrected_aca, fatal_crashdump
from tests.support.fakes import amd_node
from tests.support.fakes.amd_node import mi300x_node
from tests.support.fakes.fake_amdsmi import installed


def check_json(tmp_path, node, capfd, before=None) -> tuple[int, list[dict]]:
    root, kernel_log = node_root(tmp_path, node)
    with installed(node):
        if before is not None:
            before()
        code = main(["check", "--json", "--only", "ras", "--root", str(root), "--kernel-log", str(kernel_log)])
    report = json.loads(capfd.readouterr().out)
    return code, [r for r in report["results"] if r["check"] == "ras.cper"]


def by_gpu(results: list[dict]) -> dict:
    return {r["device"]["index"]: r for r in results}


def test_a_fatal_cper_record_fails_that_gpu_with_its_afids_fault_code(tmp_path, capfd):
    node = mi300x_node()
    amd_node.corrected_cper(node, 2)
    amd_node.fatal_cper(node, 2, afids=(30,), record_id="7:3")
    code, results = check_json(tmp_path, node, capfd)

    assert code == 1 and len(results) == 8
    gpu = by_gpu(results)
    assert (gpu[2]["status"], gpu[2]["fault_code"], gpu[2]["action"]) == ("fail", "GPUDIAG-CPER-AFID-30", "reset")
    assert all(r["status"] == "pass" for i, r in gpu.items() if i != 2)
    assert "AFID 30 (Device Internal Errors: All Others, Fatal)" in gpu[2]["message"]
    assert "record 7:3 at 2026-12-05 22:41:07" in gpu[2]["message"]
    assert gpu[2]["observed"]["fatal"] == 1 and gpu[2]["observed"]["corrected"] == 1


def test_hbm_at_the_bad_page_threshold_is_an_rma(tmp_path, capfd):
    node = mi300x_node(2)
    amd_node.fatal_cper(node, 0, afids=(19,))
    _, results = check_json(tmp_path, node, capfd)
    assert (by_gpu(results)[0]["fault_code"], by_gpu(results)[0]["action"]) == ("GPUDIAG-CPER-AFID-19", "rma")


def test_corrected_records_only_pass(tmp_path, capfd):
    node = mi300x_node(2)
    amd_node.corrected_cper(node, 1)
    code, results = check_json(tmp_path, node, capfd)
    assert code == 0 and [r["status"] for r in results] == ["pass", "pass"]
    assert "1 CPER record(s), none fatal" in by_gpu(results)[1]["message"]


def test_more_records_than_one_call_returns_are_all_read(tmp_path):
    """The binding asks for 20 records a call: the 23rd, fatal, comes with the second call, from the cursor."""
    node = mi300x_node(1)
    node.gpus[0].cper_records = [corrected_aca(f"1:{i}") for i in range(22)] + [fatal_crashdump("2:1")]
    snapshot, results = check_node(tmp_path, node)
    assert len(snapshot.devices[0].cper.records) == 23 and snapshot.devices[0].cper.complete
    assert ("ras.cper", Status.FAIL, 0) in not_passing(results)


def test_an_amdsmi_without_the_call_is_a_skip_that_says_so(tmp_path, capfd):
    node = mi300x_node(2)
    amd_node.fatal_cper(node, 0)

    def older_amdsmi():  # amdsmi before 6.4 (docs/vendor-api.md §12)
        import amdsmi
        del amdsmi.amdsmi_get_gpu_cper_entries

    code, results = check_json(tmp_path, node, capfd, before=older_amdsmi)
    assert code == 0 and [r["status"] for r in results] == ["skip", "skip"]
    assert NO_FUNCTION in results[0]["message"]


@pytest.mark.parametrize("why", ["not root", "kernel without the ring"])
def test_not_supported_is_a_skip_with_the_reason(tmp_path, capfd, why):
    node = mi300x_node(2)
    amd_node.fatal_cper(node, 0)
    if why == "not root":
        node.root = False  # debugfs (0700 root) cannot be entered: the library cannot stat the ring
    else:
        node.gpus[0].cper_records = node.gpus[1].cper_records = None
    code, results = check_json(tmp_path, node, capfd)
    assert code == 0 and [r["status"] for r in results] == ["skip", "skip"]
    assert NOT_SUPPORTED in results[0]["message"]


def test_a_failing_call_is_unknown_never_a_pass(tmp_path, capfd):
    node = mi300x_node(2)
    node.failing_calls["amdsmi_get_gpu_cper_entries"] = 12  # AMDSMI_STATUS_IO
    code, results = check_json(tmp_path, node, capfd)
    assert [r["status"] for r in results] == ["unknown", "unknown"]
    assert SOURCE in json.dumps(results[0]["observed"]) and results[0]["fault_code"] == "GPUDIAG-CPER-UNREADABLE"


def test_the_records_survive_a_recording_and_older_recordings_load(tmp_path):
    """`gpudiag snapshot` / `check --replay`: the records round-trip (tuples included: model/serialize.py), and a
    snapshot recorded before gpudiag read CPER (no `cper` key) still loads, its GPUs skipped by ras.cper."""
    from gpudiag.checks import run_checks
    from gpudiag.model.recording import load_snapshot, save_snapshot, snapshot_json

    node = mi300x_node(2)
    amd_node.fatal_cper(node, 1, afids=(19,))
    snapshot, _ = check_node(tmp_path, node)
    save_snapshot(snapshot, tmp_path / "now.json")
    replayed = load_snapshot(tmp_path / "now.json")
    assert replayed.devices[1].cper == snapshot.devices[1].cper and replayed.devices[1].cper.records[0].afids == (19,)
    (fatal,) = [r for r in run_checks(replayed, only=["ras.cper"]) if r.status == Status.FAIL]
    assert (fatal.device.index, fatal.fault_code) == (1, "GPUDIAG-CPER-AFID-19")

    older = json.loads(snapshot_json(snapshot))
    for device in older["devices"]:
        del device["cper"]
        device["unsupported"].pop(SOURCE, None)
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert {r.status for r in run_checks(load_snapshot(tmp_path / "older.json"), only=["ras.cper"])} == {Status.SKIP}


@pytest.mark.parametrize("fatal_first, status", [(False, Status.UNKNOWN), (True, Status.FAIL)])
def test_a_read_that_fails_after_its_first_call_is_kept_and_never_a_pass(tmp_path, fatal_first, status):
    """20 records come with the first call, the second fails: what was read stands (a fatal record still fails the
    GPU), and with nothing worse in it the GPU is unknown, not a pass: the rest might hold a fatal record."""
    node = mi300x_node(1)
    node.gpus[0].cper_records = [corrected_aca(f"1:{i}") for i in range(25)]
    if fatal_first:
        node.gpus[0].cper_records[3] = fatal_crashdump("1:3")
    node.failing_calls["amdsmi_get_gpu_cper_entries"] = [None, 12]  # AMDSMI_STATUS_IO on the second call
    snapshot, results = check_node(tmp_path, node)
    log = snapshot.devices[0].cper
    assert (len(log.records), log.complete) == (20, False) and "after 20 record(s)" in log.problems[-1]
    (result,) = [r for r in results if r.check == "ras.cper"]
    assert result.status == status
