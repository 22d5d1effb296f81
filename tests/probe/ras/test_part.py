"""Root's record of the AMD GPUs' CPER records, used by a process that may not read them (issue 32, item 9):
`gpudiag root-facts` reads them through amdsmi as root (gpudiag/probe/root_facts/gather.py), and the ras part
(gpudiag/probe/ras/part.py) gives them to each GPU whose own read answered NOT_SUPPORTED, as amdsmi answers a
reader who may not enter debugfs. The whole path as the shipped units run it: tests/e2e/test_as_deployed.py."""

from __future__ import annotations

import json
import time

import pytest

from gpudiag.checks import run_checks
from gpudiag.model import Status
from gpudiag.probe.collector import CollectOptions, collect
from gpudiag.probe.amdsmi.cper_entries import NOT_SUPPORTED, SOURCE
from gpudiag.probe.ras import part
from gpudiag.probe.root_facts import record
from gpudiag.probe.root_facts.gather import gather
from tests.probe.amdsmi.test_end_to_end import node_root
from tests.support.fakes import amd_node
from tests.support.fakes.fake_amdsmi import installed


@pytest.fixture
def node_with_a_fatal_record(tmp_path):
    node = amd_node.mi300x_node(2)
    amd_node.fatal_cper(node, 1, afids=(19,))
    root, kernel_log = node_root(tmp_path, node)
    state = tmp_path / "state"
    state.mkdir()
    return node, root, kernel_log, state


def write_roots_record(node, root, state) -> record.RootFacts:
    with installed(node):  # as root: the fake answers the ring
        facts = gather(root, time.monotonic() + 10)
    record.path_in(state).write_text(json.dumps(record.to_json(facts)))
    return facts


def judge_as_the_service(node, root, kernel_log, state, monkeypatch):
    monkeypatch.setattr(part.os, "geteuid", lambda: 990)  # the gpudiag user
    node.root = False  # amdsmi cannot stat the ring in debugfs: NOT_SUPPORTED
    with installed(node):
        snapshot = collect(CollectOptions(root=root, kernel_log_file=kernel_log, timeout_seconds=20,
                                          state_dir=state))
    return snapshot, {r.device.index: r for r in run_checks(snapshot, only=["ras.cper"])}


def test_root_records_the_rings_and_the_service_judges_them(node_with_a_fatal_record, monkeypatch):
    node, root, kernel_log, state = node_with_a_fatal_record
    facts = write_roots_record(node, root, state)
    assert sorted(facts.cper) == ["0000:05:00.0", "0000:26:00.0"] and facts.cper_problem == ""
    assert [r.afids for r in facts.cper["0000:26:00.0"].records] == [(19,)]

    snapshot, results = judge_as_the_service(node, root, kernel_log, state, monkeypatch)
    assert (results[1].status, results[1].fault_code, results[1].action) == (Status.FAIL, "GPUDIAG-CPER-AFID-19", "rma")
    assert results[0].status == Status.PASS and "recorded by root" in results[1].observed["source"]
    assert SOURCE not in snapshot.devices[1].unsupported


def test_without_roots_record_the_service_skips_and_says_why(node_with_a_fatal_record, monkeypatch):
    node, root, kernel_log, state = node_with_a_fatal_record
    _, results = judge_as_the_service(node, root, kernel_log, state, monkeypatch)
    assert {r.status for r in results.values()} == {Status.SKIP}
    message = results[1].message
    assert NOT_SUPPORTED in message and "root's record does not hold them (no record at" in message


def test_root_records_no_rings_where_amdsmi_is_not_usable(node_with_a_fatal_record):
    node, root, _, state = node_with_a_fatal_record
    node.library_present = False
    facts = write_roots_record(node, root, state)
    assert facts.cper is None and "amdsmi is not usable" in facts.cper_problem
