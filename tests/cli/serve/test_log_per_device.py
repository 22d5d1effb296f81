"""serve's log of changes, per device, through a real `gpudiag serve` over the fake HGX H200 with its eight ConnectX-7
(tests/support/alerting_nodes.py's fabric scenarios): issue 36 item 3. During one NIC port down, serve logged
`network.nics status=fail (mlx5_4)` and `status=pass (mlx5_5)` at every collection — 38 contradictory lines in 5
minutes, the last word "pass" — because it kept one state per node-level check; and a fault there at start was told
as `previous=pass`, a state never seen. The log now says each NIC port's change once and agrees with `gpudiag
history`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.alerting_nodes import FABRIC_NIC, FABRIC_NIC_BUS
from tests.support.log import parse_logfmt
from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # real processes over a whole fake node (tests/README.md)

COLLECTIONS = 8  # after the fault: the old log said it again (twice) at every one of them


def _serve(scenario: str, root: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.alerting_nodes", scenario, str(root), "--",
         "--listen", "127.0.0.1:0", "--interval", "1", "--timeout", "8"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("w"), env={**os.environ, "PYTHONPATH": str(REPO)})


def _changes(log: Path) -> list[dict]:
    lines = [dict(parse_logfmt(line)) for line in log.read_text().splitlines() if line.startswith("ts=")]
    return [line for line in lines if line.get("msg") == "check status changed"]


def _run(tmp_path: Path, scenario: str) -> tuple[list[dict], list[dict]]:
    """serve's check lines once the port has been down for COLLECTIONS collections, and `gpudiag history`'s entries."""
    root, log = tmp_path / "root", tmp_path / "serve.log"
    proc = _serve(scenario, root, log)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            told = [c for c in _changes(log) if c.get("check") == "network.nics"]
            if told:
                break
            time.sleep(0.3)
        assert told, log.read_text()
        time.sleep(COLLECTIONS)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    done = subprocess.run([sys.executable, "-m", "gpudiag", "history", "--root", str(root), "--format", "json"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    text = subprocess.run([sys.executable, "-m", "gpudiag", "history", "--root", str(root)],
                          capture_output=True, text=True, timeout=60, cwd=REPO).stdout
    assert f"NIC {FABRIC_NIC} ({FABRIC_NIC_BUS}) port 1" in text, text  # named as the checklist names it (item 4)
    return _changes(log), json.loads(done.stdout)["entries"]


def _agree(changes: list[dict], entries: list[dict]) -> None:
    nics = [c for c in changes if c.get("check") == "network.nics"]
    assert [(c["status"], c.get("nic"), c.get("port"), c.get("bus_id")) for c in nics] == [
        ("fail", FABRIC_NIC, "1", FABRIC_NIC_BUS)], nics
    begun = [(e["check"], e["status"], e.get("nic"), e.get("port")) for e in entries
             if e.get("kind") == "check" and e.get("event") == "begin"]
    assert begun == [("network.nics", "fail", FABRIC_NIC, 1)], entries
    assert not [e for e in entries if e.get("event") == "end"]  # history: still down, as the log says


def test_a_nic_port_going_down_is_one_line_naming_it_and_agrees_with_history(tmp_path):
    changes, entries = _run(tmp_path, "nvidia-nic-port-down-watched")
    _agree(changes, entries)
    assert changes[0].get("previous") == "pass"  # seen up at the first collection, then down


def test_a_port_down_at_start_is_told_without_a_previous_state_it_never_saw(tmp_path):
    changes, entries = _run(tmp_path, "nvidia-nic-port-down")
    _agree(changes, entries)
    assert "previous" not in changes[0], changes[0]
