"""`gpudiag root-facts` (issue 33, item 1): as root, it writes the record the unprivileged service reads
(gpudiag/probe/root_facts/record.py, tested in tests/probe/root_facts/test_record.py) into the state directory the
units make, readable by the service's user; it refuses another user, and a state directory that is missing or a link."""

from __future__ import annotations

import os
import time

from gpudiag.cli import app as cli
from gpudiag.probe.network.rdma import read_network
from gpudiag.probe.root_facts import record as root_facts
from tests.support import rdma_tree

BOOT = "0f9a3c2e4b1d4e6f8a7b9c0d1e2f3a4b"  # as journald writes it
THIS_BOOT = "0f9a3c2e-4b1d-4e6f-8a7b-9c0d1e2f3a4b"  # as the kernel prints it


def _node(root):
    node = rdma_tree.hgx_h100_ib(root)
    node.tree.sys.write("proc/sys/kernel/random/boot_id", THIS_BOOT)
    return node


def test_root_facts_writes_the_record_for_the_service(tmp_path, capsys):
    _node(tmp_path / "root")
    state = tmp_path / "root/var/lib/gpudiag"
    state.mkdir(parents=True)
    assert cli.main(["root-facts", "--root", str(tmp_path / "root")]) == 0
    record = state / root_facts.FILE_NAME
    assert oct(record.stat().st_mode & 0o777) == "0o644"  # the service's user reads it
    facts, why = root_facts.load(state, BOOT)
    node_bridges = read_network(tmp_path / "root", time.monotonic() + 10).bridges
    assert why == "" and [b.pci_bus_id for b in facts.bridges] == [b.pci_bus_id for b in node_bridges]
    assert {b.acs_state for b in facts.bridges} == {"present"}
    assert "recorded the ACS control of" in capsys.readouterr().out


def test_root_facts_refuses_a_user_and_a_linked_or_missing_state_directory(tmp_path, capsys, monkeypatch):
    _node(tmp_path / "root")
    assert cli.main(["root-facts", "--root", str(tmp_path / "root")]) == 2  # no state directory: the unit makes it
    assert "StateDirectory" in capsys.readouterr().err
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    assert cli.main(["root-facts", "--root", str(tmp_path / "root"), "--state-dir", str(tmp_path / "link")]) == 2
    assert "symbolic link is refused" in capsys.readouterr().err
    assert not list((tmp_path / "elsewhere").iterdir())
    monkeypatch.setattr(os, "geteuid", lambda: 64101)
    assert cli.main(["root-facts", "--root", str(tmp_path / "root"), "--state-dir", str(tmp_path / "elsewhere")]) == 2
    assert "run it as root" in capsys.readouterr().err
