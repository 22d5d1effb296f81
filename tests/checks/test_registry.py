"""The check registry: IDs, --only/--skip selection, the healthy baselines, isolation of a failing check, layering."""

import ast
import dataclasses
import logging
import re
from pathlib import Path

import pytest

import gpudiag.checks as checks
from gpudiag.checks import CHECK_IDS, FAMILIES, REGISTRY, resolve_selection, run_checks
from gpudiag.checks.common import Check
from gpudiag.model import Status
from tests.support.snapshots import amd_mi300x_node, cpx_partitioned, nvidia_h200_node

def test_ids_are_unique_dotted_and_in_the_declared_families():
    assert len(set(CHECK_IDS)) == len(CHECK_IDS)
    for check_id in CHECK_IDS:
        assert re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", check_id), check_id
    # The families are what the modules declare (gpudiag/checks/family.py), each once, its checks together.
    assert FAMILIES == tuple(family.name for family in checks.DECLARED)
    assert list(FAMILIES) == list(dict.fromkeys(c.family for c in REGISTRY))
    # active.* (load tests) and baseline.* (drift from a golden baseline) come after the passive checklist.
    assert FAMILIES[-2:] == ("active", "baseline")


def test_selection_by_family_and_by_id():
    assert [c.id for c in resolve_selection(only=["pcie"])] == [i for i in CHECK_IDS if i.startswith("pcie.")]
    assert [c.id for c in resolve_selection(only=["ecc.mode", "memory"])] == [
        i for i in CHECK_IDS if i == "ecc.mode" or i.startswith("memory.")]
    everything_but_pcie = [c.id for c in resolve_selection(skip=["pcie"])]
    assert not any(i.startswith("pcie.") for i in everything_but_pcie)
    assert len(everything_but_pcie) == len(CHECK_IDS) - sum(i.startswith("pcie.") for i in CHECK_IDS)
    assert [c.id for c in resolve_selection(only=["pcie"], skip=["pcie.aer"])] == [
        "pcie.link_generation", "pcie.link_width", "pcie.replay_errors", "pcie.link_recovery"]
    assert [c.id for c in resolve_selection()] == list(CHECK_IDS)


@pytest.mark.parametrize("only, skip", [(["pcie.link_speed"], []), ([], ["gpu"]), (["pcie", "nope"], [])])
def test_unknown_names_raise_a_clear_error(only, skip):
    with pytest.raises(ValueError) as caught:
        resolve_selection(only, skip)
    bad = next(n for n in only + skip if n not in CHECK_IDS and n not in FAMILIES)
    assert repr(bad) in str(caught.value)
    assert "families:" in str(caught.value)


def test_run_checks_honours_the_selection():
    results = run_checks(nvidia_h200_node(), only=["pcie.link_width"])
    assert {r.check for r in results} == {"pcie.link_width"}
    assert len(results) == 2


@pytest.mark.parametrize("build", [nvidia_h200_node, amd_mi300x_node, lambda: cpx_partitioned(amd_mi300x_node())])
def test_healthy_nodes_raise_no_alarm(build):
    results = run_checks(build())
    alarms = [(r.check, r.status, r.message) for r in results if r.status in (Status.FAIL, Status.WARN, Status.UNKNOWN)]
    assert alarms == []
    # Every check ran and answered something.
    assert {r.check for r in results} == set(CHECK_IDS)


def test_partitions_do_not_repeat_physical_checks():
    snap = cpx_partitioned(amd_mi300x_node())
    assert len(snap.devices) == 64
    results = run_checks(snap, only=["ecc.mode", "pcie.link_width", "workload.processes"])
    by_check = {check: [r for r in results if r.check == check] for check in ("ecc.mode", "pcie.link_width",
                                                                              "workload.processes")}
    assert len(by_check["ecc.mode"]) == 8
    assert len(by_check["pcie.link_width"]) == 8
    # Processes belong to a partition, so every partition is listed.
    assert len(by_check["workload.processes"]) == 64


@pytest.mark.internal_error_expected
def test_a_raising_check_becomes_unknown_and_the_run_goes_on(monkeypatch, caplog):
    def broken(snapshot, expect):
        raise KeyError("no such sensor")

    patched = tuple(dataclasses.replace(c, run=broken) if c.id == "thermal.temperature" else c for c in REGISTRY)
    monkeypatch.setattr(checks, "REGISTRY", patched)
    with caplog.at_level(logging.ERROR, logger="gpudiag.checks"):
        results = run_checks(nvidia_h200_node(), only=["thermal"])
    (crashed,) = [r for r in results if r.check == "thermal.temperature"]
    assert crashed.status == Status.UNKNOWN
    assert "internal error" in crashed.message and "KeyError" in crashed.message
    assert crashed.remediation
    assert [r.status for r in results if r.check == "thermal.throttle"] == [Status.PASS, Status.PASS]
    assert any(rec.exc_info for rec in caplog.records), "the traceback is logged"


def test_every_check_has_a_summary():
    assert all(isinstance(c, Check) and c.summary for c in REGISTRY)


# Layering: checks are pure functions of the snapshot (docs/architecture.md, "The flow").
_FORBIDDEN_MODULES = {"pynvml", "amdsmi", "os", "pathlib", "io", "glob", "shutil", "subprocess", "socket", "ctypes",
                      "psutil"}
_CHECKS_DIR = Path(checks.__file__).parent
_LAYER_FILES = sorted(_CHECKS_DIR.rglob("*.py")) + [_CHECKS_DIR.parent / "expect" / "__init__.py"]


@pytest.mark.parametrize("path", _LAYER_FILES,
                         ids=lambda p: str(p.relative_to(_CHECKS_DIR)) if _CHECKS_DIR in p.parents else p.name)
def test_checks_do_no_io_and_import_no_vendor_library(path):
    tree = ast.parse(path.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in ("open", "exec", "eval", "__import__"), f"{path.name} calls {node.func.id}()"
    top_level = {m.split(".")[0] for m in modules}
    assert not top_level & _FORBIDDEN_MODULES, f"{path.name} imports {top_level & _FORBIDDEN_MODULES}"
    assert not [m for m in modules if m.startswith("gpudiag.probe")], f"{path.name} imports the probe layer"


def test_every_optional_probe_part_has_the_checks_that_judge_it():
    from gpudiag.checks import REGISTRY, probe_parts_for, resolve_selection
    from gpudiag.probe.collector import PROBE_PARTS

    assert probe_parts_for(REGISTRY) == PROBE_PARTS  # the full checklist collects everything
    assert probe_parts_for(resolve_selection(["pcie"])) == frozenset()
    assert probe_parts_for(resolve_selection(["topology.link_errors", "kernel_log"])) == {"link_errors", "kernel_log"}
