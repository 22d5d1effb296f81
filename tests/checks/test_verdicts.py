"""Automation verdicts: every result carries a stable action and fault code; the table stays in step with the
registry; the JSON report carries both after the remediation."""

import json
import re

import pytest

from gpudiag.checks import CHECK_IDS, run_checks
from gpudiag.checks.verdicts import ACTIONS, TABLE, assign, derived_code, strongest
from gpudiag.model import CheckResult, Status
from gpudiag.report.json_report import render_json
from tests.support.snapshots import nvidia_h200_node


def test_the_table_covers_the_registry_with_valid_actions_and_codes():
    assert set(TABLE) == set(CHECK_IDS), "add (or remove) the verdicts of new (or removed) checks"
    for check_id, verdicts in TABLE.items():
        for status, (action, code) in verdicts.items():
            assert status in (Status.FAIL, Status.WARN, Status.UNKNOWN), check_id
            assert action in ACTIONS and action != "none", (check_id, action)
            assert re.fullmatch(r"GPUDIAG-[A-Z0-9]+(-[A-Z0-9]+)*", code), code


def test_pass_and_skip_need_nothing_and_unlisted_statuses_get_defaults():
    assert (assign(CheckResult("pcie.aer", Status.PASS, "ok")).action, CheckResult("x", Status.PASS, "").fault_code) \
        == ("none", None)
    skipped = assign(CheckResult("pcie.aer", Status.SKIP, "no AER"))
    assert (skipped.action, skipped.fault_code) == ("none", None)
    unknown = assign(CheckResult("ecc.uncorrected", Status.UNKNOWN, "could not read"))
    assert (unknown.action, unknown.fault_code) == ("watch", "GPUDIAG-ECC-UNCORRECTED-UNKNOWN")
    failed = assign(CheckResult("pcie.link_generation", Status.FAIL, "Gen3"))
    assert (failed.action, failed.fault_code) == ("drain", "GPUDIAG-PCIE-DOWNTRAINED")
    own = CheckResult("pcie.aer", Status.FAIL, "x", action="rma", fault_code="GPUDIAG-OWN")
    assert (assign(own).action, own.fault_code) == ("rma", "GPUDIAG-OWN")
    assert derived_code("workload.cpu_starved", Status.FAIL) == "GPUDIAG-WORKLOAD-CPU-STARVED-FAIL"


def test_strongest_action_covers_the_others():
    assert strongest(["watch", "reset", "drain"]) == "reset"
    assert strongest(["rma", "reboot"]) == "rma"
    assert strongest([None]) == "none"


def test_every_result_of_a_run_has_a_verdict_and_the_json_carries_it():
    snap = nvidia_h200_node()
    snap.devices[1].pcie.current_width = snap.pci_gpus[1].current_link_width = 8
    snap.devices[0].reachable = False
    results = run_checks(snap)
    assert all(r.action in ACTIONS for r in results)
    assert all((r.fault_code is None) == (r.status in (Status.PASS, Status.SKIP)) for r in results)
    report = json.loads(render_json(snap, results))
    assert report["schema_version"] == 1
    width = next(r for r in report["results"] if r["check"] == "pcie.link_width" and r["device"]["index"] == 1)
    # the documented keys in their order, then those added within schema version 1 (issue 27: caused_by)
    assert list(width)[-4:] == ["remediation", "action", "fault_code", "caused_by"] and width["caused_by"] == []
    assert (width["status"], width["action"], width["fault_code"]) == ("fail", "drain", "GPUDIAG-PCIE-WIDTH-DEGRADED")
    lost = next(r for r in report["results"] if r["check"] == "ecc.mode" and r["device"]["index"] == 0)
    assert (lost["status"], lost["action"], lost["fault_code"]) == ("unknown", "reset", "GPUDIAG-GPU-UNREACHABLE")
    assert lost["caused_by"] == [f"inventory.gpus_visible {snap.devices[0].pci_bus_id}"]
    passing = next(r for r in report["results"] if r["status"] == "pass")
    assert (passing["action"], passing["fault_code"]) == ("none", None)


@pytest.mark.internal_error_expected
def test_a_check_that_raises_is_an_internal_error_to_watch(monkeypatch):
    import gpudiag.checks as checks
    from gpudiag.checks.common import Check

    def broken(snapshot, expect):
        raise KeyError("boom")

    monkeypatch.setattr(checks, "_BY_ID", {**checks._BY_ID})
    monkeypatch.setattr(checks, "REGISTRY", (Check("pcie.aer", broken, "broken"),))
    (result,) = checks.run_checks(nvidia_h200_node())
    assert (result.status, result.action, result.fault_code) == (Status.UNKNOWN, "watch", "GPUDIAG-INTERNAL-ERROR")
