"""The service's journal on disk: survives a restart, a truncated or garbled file (set aside, not fatal), rotates
by size, and lives in memory when the state directory cannot be written."""

from __future__ import annotations

import os
import stat

from gpudiag.service.journal import CURRENT, PREVIOUS, Journal, parse_lines


def entry(n: int, **extra) -> dict:
    return {"time": f"2026-12-01T02:{n % 60:02d}:00+00:00", "kind": "xid", "event": "event", "code": 79, "n": n,
            **extra}


def test_entries_survive_a_restart_and_the_file_is_private(tmp_path):
    journal = Journal(tmp_path).load()
    journal.append([entry(1), entry(2)])
    again = Journal(tmp_path).load()
    assert [e["n"] for e in again.entries()] == [1, 2] and again.persistent and not again.set_aside
    assert stat.S_IMODE(os.stat(tmp_path / CURRENT).st_mode) & 0o007 == 0


def test_a_truncated_journal_is_set_aside_and_its_whole_lines_kept(tmp_path):
    journal = Journal(tmp_path).load()
    journal.append([entry(1), entry(2), entry(3)])
    text = (tmp_path / CURRENT).read_text()
    (tmp_path / CURRENT).write_text(text[: len(text) - 20])  # a crash mid-write of another tool, a full disk
    again = Journal(tmp_path).load()
    assert [e["n"] for e in again.entries()] == [1, 2]
    assert len(again.set_aside) == 1 and (tmp_path / again.set_aside[0]).exists()
    again.append([entry(4)])
    assert [e["n"] for e in Journal(tmp_path).load().entries()] == [1, 2, 4]


def test_garbage_and_oversized_journals_are_not_fatal(tmp_path):
    (tmp_path / CURRENT).write_bytes(b"\xff\xfe not utf-8\n")
    (tmp_path / PREVIOUS).write_text("[1, 2]\n{\"time\": 3}\n")
    journal = Journal(tmp_path, max_bytes=1024).load()
    assert journal.entries() == [] and len(journal.set_aside) == 2
    (tmp_path / CURRENT).write_text("x" * 5000)
    assert Journal(tmp_path, max_bytes=1024).load().entries() == []


def test_rotation_bounds_the_journal(tmp_path):
    journal = Journal(tmp_path, max_bytes=2000).load()
    for n in range(200):
        journal.append([entry(n, message="m" * 50)])
    sizes = [os.path.getsize(tmp_path / name) for name in (CURRENT, PREVIOUS)]
    assert all(size <= 2000 for size in sizes)
    kept = [e["n"] for e in Journal(tmp_path, max_bytes=2000).load().entries()]
    assert kept == list(range(kept[0], 200)) and kept[0] > 0  # the newest, in order, the oldest rotated away


def test_unwritable_state_directory_keeps_the_journal_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    journal = Journal(blocker / "state").load()
    journal.append([entry(1)])
    assert not journal.persistent and "memory only" in journal.problem and len(journal.entries()) == 1


def test_parse_lines_counts_what_is_not_an_entry():
    entries, bad = parse_lines('{"time": "t", "kind": "xid"}\nnot json\n{"kind": "x"}\n\n')
    assert len(entries) == 1 and bad == 2
