"""The journal under a flood an unprivileged user can raise (issue 24, item 10): any user who can run a CUDA kernel
can make the driver log Xid 31 (an MMU fault in their own context) — 2-3 a second from an unprivileged loop on the
lab H200 — and 3,000-4,000 of them pushed an Xid 48 and every "failing since" out of `gpudiag history`. Here the
service runs over the fake node with a small journal (16 KiB a generation) and takes 3,000 Xid 31 records, real
kmsg records of the driver's format (tests/support/exporter_node.py xid_line), in batches as the collections would see
them at that rate."""

from __future__ import annotations

import json
import os

import pytest

from gpudiag.cli import app as cli
from gpudiag.service import state_dir
from gpudiag.service.journal import CURRENT, PREVIOUS
from tests.support.exporter import wait_for
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.service import running_service

MAX_BYTES = 16 * 1024
FLOOD, BATCH = 3000, 150


def history(capsys, root) -> list[dict]:
    assert cli.main(["history", "--root", str(root), "--format", "json"]) == 0
    return json.loads(capsys.readouterr()[0])["entries"]


def absorbed(exporter, events: int) -> None:
    """Until the journal has seen a collection with `events` kernel-log events: one that had them, then one more
    (the journal is told of a collection before the next one starts)."""
    wait_for(lambda: len(exporter.collections.latest.snapshot.kernel_log.events) >= events, timeout=20)
    had = exporter.collections.latest
    wait_for(lambda: exporter.collections.latest is not had, timeout=20)


@pytest.mark.slow
def test_a_flood_of_xid_31_neither_flushes_an_xid_48_nor_a_failing_since(tmp_path, capsys):
    node = FakeNode.hgx_h200(2)
    bus = [gpu.bus_id for gpu in node.gpus]
    tree = fake_root(tmp_path, node, kmsg=(xid_line(1, 1_000_000, bus[0], 48),))
    node.gpus[1].pcie_generation = 4  # pcie.link_generation fails on GPU 1: an episode that stays open
    with installed(node), running_service(tmp_path, interval=0.1, journal_max_bytes=MAX_BYTES) as exporter:
        journal = exporter.service.journal

        def journaled(predicate) -> bool:
            return any(predicate(e) for e in journal.entries())

        wait_for(lambda: journaled(lambda e: e.get("code") == 48)
                 and journaled(lambda e: e.get("check") == "pcie.link_generation"), timeout=10)
        sequence = 2
        for start in range(0, FLOOD, BATCH):
            lines = []
            for n in range(start, start + BATCH):
                lines.append(xid_line(sequence, 2_000_000 + n * 400_000, bus[n % 2], 31))
                sequence += 1
            tree.add_kmsg(lines)
            absorbed(exporter, sequence - 1)
        status = exporter.service.handle({"op": "status"})
    entries = history(capsys, tmp_path)  # the service stopped: from the files, as after a crash
    assert [e.get("level") for e in entries if e.get("code") == 48] == ["fail"]
    begun = [e for e in entries if e.get("check") == "pcie.link_generation" and e["event"] == "begin"]
    assert begun and begun[0]["gpu"] == 1
    # every Xid 31 accounted for: per GPU one entry of its own, the rest counted in one `repeat` entry
    xid31 = [e for e in entries if e.get("code") == 31]
    assert sorted((e["event"], e["gpu"]) for e in xid31) == [("event", 0), ("event", 1), ("repeat", 0), ("repeat", 1)]
    assert sum(e["count"] for e in xid31 if e["event"] == "repeat") == FLOOD - 2
    assert status["journal"]["problem"] is None
    assert cli.main(["history", "--root", str(tmp_path), "--gpu", "0"]) == 0
    text = capsys.readouterr()[0]
    assert text.count("Xid 31") == 2 and f"Xid 31 ×{FLOOD // 2 - 1} more, to " in text and "Xid 48" in text
    directory = state_dir(tmp_path)
    assert all(os.path.getsize(directory / name) <= MAX_BYTES for name in (CURRENT, PREVIOUS)
               if (directory / name).exists())
    # restarted over the same ring buffer: the failing check is still failing since its first sighting, and the
    # Xid 31s counted before are not counted again
    with installed(node), running_service(tmp_path, interval=0.1, journal_max_bytes=MAX_BYTES) as exporter:
        wait_for(lambda: exporter.collections.latest is not None, timeout=10)
        since = [e["first_seen"] for e in exporter.service.keeper.open_checks()
                 if e["check"] == "pcie.link_generation"]
    assert since == [begun[0]["first_seen"]]
    again = [e for e in history(capsys, tmp_path) if e.get("code") == 31]
    assert sum(e["count"] for e in again if e["event"] == "repeat") + sum(e["event"] == "event" for e in again) \
        == FLOOD
