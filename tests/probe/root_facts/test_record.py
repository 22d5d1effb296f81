"""What only root can read, recorded by root for the unprivileged service (issue 33, item 1;
gpudiag/probe/root_facts/): the bridges' ACS control and the systemd journal's earlier boots, used by a process that
cannot read them only when the record is this boot's (and, for ACS, fresh), never in place of what the process reads
itself. The command that writes the record: tests/cli/test_root_facts.py."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest

from gpudiag.checks import run_checks
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.model import Status
from gpudiag.probe.kernel_log import boot_history
from gpudiag.probe.kernel_log.boot_history import read_boot_history
from gpudiag.probe.network.rdma import read_network
from gpudiag.probe.root_facts import record as root_facts
from gpudiag.probe.root_facts.gather import gather
from tests.support import rdma_tree
from tests.support.fakes import journalctl
from tests.support.network_nodes import snapshot

BOOT = "0f9a3c2e4b1d4e6f8a7b9c0d1e2f3a4b"  # as journald writes it
THIS_BOOT = "0f9a3c2e-4b1d-4e6f-8a7b-9c0d1e2f3a4b"  # as the kernel prints it
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _node(root: Path) -> rdma_tree.Node:
    node = rdma_tree.hgx_h100_ib(root)
    node.tree.sys.write("proc/sys/kernel/random/boot_id", THIS_BOOT)
    return node


def _as_a_user_reads_it(node: rdma_tree.Node) -> None:
    """What a reader without CAP_SYS_ADMIN gets of every bridge's config space: its first 64 bytes."""
    node.tree.set_acs(node.root_ports, node.switch_ports, size=64)


def _record(root: Path, state: Path, **changes) -> dict:
    state.mkdir(parents=True, exist_ok=True)
    facts = gather(root, time.monotonic() + 10)
    data = root_facts.to_json(facts)
    data.update(changes)
    (state / root_facts.FILE_NAME).write_text(json.dumps(data))
    return data


def _gpudirect(root: Path, state: Path) -> list:
    snap = snapshot(root)
    snap.network = read_network(root, time.monotonic() + 10, snap.pci_gpus, state_dir=state)
    return run_checks(snap, DEFAULT_EXPECTATIONS, only=["network.gpudirect"])


def test_a_user_without_a_record_is_unknown_and_told_who_records_it(tmp_path):
    node = _node(tmp_path / "root")
    _as_a_user_reads_it(node)
    results = _gpudirect(tmp_path / "root", tmp_path / "state")
    (unknown,) = [r for r in results if r.status == Status.UNKNOWN]
    assert "no record at" in unknown.message and "gpudiag root-facts" in unknown.remediation


def test_roots_record_gives_a_user_the_verdict_root_reads(tmp_path):
    node = _node(tmp_path / "root")
    root_results = _gpudirect(tmp_path / "root", tmp_path / "state")  # root reads the bridges itself: no record used
    assert {r.status for r in root_results} == {Status.PASS}
    assert not any("recorded" in r.message for r in root_results)
    _record(tmp_path / "root", tmp_path / "state")
    _as_a_user_reads_it(node)
    info = read_network(tmp_path / "root", time.monotonic() + 10, state_dir=tmp_path / "state")
    assert {b.acs_state for b in info.bridges} == {"present"} and all(b.acs_recorded_at for b in info.bridges)
    results = _gpudirect(tmp_path / "root", tmp_path / "state")
    assert [(r.check, r.status, r.device and r.device.pci_bus_id) for r in results] == \
        [(r.check, r.status, r.device and r.device.pci_bus_id) for r in root_results]
    assert all("as root recorded it at" in r.message for r in results if r.device is not None)


def test_a_redirect_root_recorded_warns_the_user_too(tmp_path):
    node = _node(tmp_path / "root")
    pair = node.pairs[0]
    for port in (pair.switch_up, pair.gpu_down, pair.nic_down):
        node.tree.set_config(port, rdma_tree.config_space(0x1000, 0xC030, rdma_tree.ACS_CTRL_REDIRECT))
    _record(tmp_path / "root", tmp_path / "state")
    for port in (pair.switch_up, pair.gpu_down, pair.nic_down):
        node.tree.set_config(port, rdma_tree.config_space(0x1000, 0xC030, rdma_tree.ACS_CTRL_REDIRECT, size=64))
    (warned,) = [r for r in _gpudirect(tmp_path / "root", tmp_path / "state") if r.status == Status.WARN]
    assert "ReqRedir" in warned.message and "as root recorded it" in warned.message


@pytest.mark.parametrize("change,why", [
    ({"written_at": "31 min ago"}, "31 min old"),
    ({"boot_id": "aa" * 16}, "written in another boot"),
    ({"schema_version": 2}, "schema version 2"),
    ({"bridges": "all clear"}, "unusable"),
    ({"written_at": "yesterday"}, "no valid time"),
])
def test_a_record_too_old_of_another_boot_or_broken_is_not_used(tmp_path, change, why):
    node = _node(tmp_path / "root")
    if change.get("written_at") == "31 min ago":  # taken now, not when the parameters were collected
        change = {"written_at": (datetime.datetime.now(datetime.timezone.utc)
                                 - datetime.timedelta(minutes=31)).isoformat(timespec="seconds")}
    _record(tmp_path / "root", tmp_path / "state", **change)
    _as_a_user_reads_it(node)
    info = read_network(tmp_path / "root", time.monotonic() + 10, state_dir=tmp_path / "state")
    assert {b.acs_state for b in info.bridges} == {"unreadable"} and why in info.acs_record
    (unknown,) = [r for r in _gpudirect(tmp_path / "root", tmp_path / "state") if r.status == Status.UNKNOWN]
    assert why in unknown.message


def test_a_record_that_is_not_json_is_not_used(tmp_path):
    node = _node(tmp_path / "root")
    _as_a_user_reads_it(node)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / root_facts.FILE_NAME).write_bytes(b"\xff{not json")
    info = read_network(tmp_path / "root", time.monotonic() + 10, state_dir=tmp_path / "state")
    assert {b.acs_state for b in info.bridges} == {"unreadable"} and "unusable" in info.acs_record


# -- the systemd journal's earlier boots ----------------------------------------------------------------------------


def _journal(tmp_path: Path, calls: Path) -> str:
    program = journalctl.write(tmp_path / "journalctl-real", tmp_path / "journal.json",
                               {"b1" * 16: [XID_79], "b2" * 16: [XID_79]}, BOOT)
    counting = tmp_path / "journalctl"
    counting.write_text(f"#!/bin/sh\necho x >> {calls}\nexec {program} \"$@\"\n")
    counting.chmod(0o755)
    return str(counting)


def test_a_user_who_may_not_read_the_system_journal_takes_roots_record(tmp_path, monkeypatch):
    program = _journal(tmp_path, tmp_path / "calls")
    root = tmp_path / "root"
    root.mkdir()
    facts = gather(root, time.monotonic() + 10, journalctl=program)
    facts.boot_id = BOOT  # this tree has no boot_id: the record is of the boot the reader is in
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / root_facts.FILE_NAME).write_text(json.dumps(root_facts.to_json(facts)))
    root_view = read_boot_history(Path("/"), None, BOOT, None, time.monotonic() + 5, journalctl=program)
    monkeypatch.setattr(root_facts, "may_read_system_journal", lambda: False)
    (tmp_path / "calls").unlink()
    user_view = read_boot_history(Path("/"), tmp_path / "state", BOOT, None, time.monotonic() + 5, journalctl=program)
    assert not (tmp_path / "calls").exists()  # the record, not journalctl, which would show this user nothing
    assert user_view.faults == root_view.faults and len(user_view.faults) == 2
    assert user_view.sources == [f"journalctl: 2 of 2 earlier boot(s) read (as root recorded it at {facts.written_at})"]


def test_without_a_record_a_user_is_told_the_system_journal_may_be_hidden(tmp_path, monkeypatch):
    program = _journal(tmp_path, tmp_path / "calls")
    monkeypatch.setattr(root_facts, "may_read_system_journal", lambda: False)
    history = read_boot_history(Path("/"), tmp_path / "state", BOOT, None, time.monotonic() + 5, journalctl=program)
    assert any("this user may read only its own journal" in p and "no record at" in p for p in history.problems)


def test_the_journal_is_read_once_a_boot_and_the_bridges_every_time(tmp_path):
    program = _journal(tmp_path, tmp_path / "calls")
    node = _node(tmp_path / "root")
    first = gather(tmp_path / "root", time.monotonic() + 10, journalctl=program)
    calls = (tmp_path / "calls").read_text().count("x")
    assert calls == 3 and len(first.journal.faults) == 2  # --list-boots and the two boots
    _as_a_user_reads_it(node)  # the bridges change (here: as a user would read them): read again
    second = gather(tmp_path / "root", time.monotonic() + 10, first, journalctl=program)
    assert (tmp_path / "calls").read_text().count("x") == calls and second.journal == first.journal
    assert {b.acs_state for b in second.bridges} == {"unreadable"}
    first.boot_id = "bb" * 16  # a record of another boot: the journal is read again
    gather(tmp_path / "root", time.monotonic() + 10, first, journalctl=program)
    assert (tmp_path / "calls").read_text().count("x") == 2 * calls


def test_the_service_reads_the_record_through_its_own_probe_options(tmp_path):
    """network_part hands the collection's state directory to the NIC probe (the service's --state-dir)."""
    from gpudiag.probe.collector import CollectOptions, Collector

    node = _node(tmp_path / "root")
    _record(tmp_path / "root", tmp_path / "state")
    _as_a_user_reads_it(node)
    options = CollectOptions(root=tmp_path / "root", timeout_seconds=10, parts=frozenset({"network"}),
                             state_dir=tmp_path / "state")
    with Collector(options) as collector:
        snap = collector.collect()
    assert {b.acs_state for b in snap.network.bridges} == {"present"}
    assert boot_history.root_facts is root_facts  # one module, patched alike by the tests above
