"""The service's journal on disk: survives a restart, a truncated or garbled file (set aside, not fatal), rotates
by size, and lives in memory when the state directory cannot be written."""

from __future__ import annotations

import json
import os
import stat
import time

from gpudiag.cli import app as cli
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


# -- issue 24, item 13: a bad byte costs one line; status recovers; group-readable; odd timestamps ---------------------


def history_json(directory, capsys) -> tuple[int, list]:
    """`gpudiag history` with no service answering: it reads the journal files itself."""
    code = cli.main(["history", "--socket", str(directory / "none.sock"), "--state-dir", str(directory),
                     "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, json.loads(out)["entries"] if code == 0 else []


def test_one_bad_byte_costs_one_line_not_the_file(tmp_path, capsys):
    journal = Journal(tmp_path).load()
    journal.append([entry(1), entry(2), entry(3)])
    data = (tmp_path / CURRENT).read_bytes()
    spoiled = data[:data.index(b"\n") + 5] + b"\xff" + data[data.index(b"\n") + 6:]  # one byte of line 2
    (tmp_path / CURRENT).write_bytes(spoiled)
    code, entries = history_json(tmp_path, capsys)  # `history` reading the file itself: the same whole lines
    assert (code, [e["n"] for e in entries]) == (0, [1, 3])
    again = Journal(tmp_path).load()
    assert [e["n"] for e in again.entries()] == [1, 3] and len(again.set_aside) == 1
    assert (tmp_path / again.set_aside[0]).read_bytes() == spoiled


def test_status_stops_reporting_a_write_failure_once_writes_recover(tmp_path, monkeypatch):
    import gpudiag.service.journal as module

    journal = Journal(tmp_path).load()
    real = module.write_atomically

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "write_atomically", full)
    journal.append([entry(1)])
    assert "No space left on device" in journal.problem
    monkeypatch.setattr(module, "write_atomically", real)
    journal.append([entry(2)])
    assert journal.problem is None
    assert [e["n"] for e in Journal(tmp_path).load().entries()] == [1, 2]


def test_journal_files_are_group_readable_under_the_units_umask(tmp_path):
    """docs/service.md: `gpudiag history` reads the files as a member of group gpudiag. Under the unit's
    UMask=0077 a creation mode of 0640 became 0600."""
    old = os.umask(0o077)
    try:
        journal = Journal(tmp_path, max_bytes=300).load()
        for n in range(4):
            journal.append([entry(n)])  # rotated too
    finally:
        os.umask(old)
    for name in (CURRENT, PREVIOUS):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640, name


def test_an_out_of_range_timestamp_is_shown_as_written(tmp_path, capsys, monkeypatch):
    """Year 1 at +01:00 is before the first moment Python can hold in UTC, and year 1 at UTC before the first
    it can show in New York: `history` exited 4 on either, showing nothing."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        (tmp_path / CURRENT).write_text(
            '{"time": "0001-01-01T00:00:00+01:00", "kind": "xid", "event": "event", "code": 13}\n'
            '{"time": "0001-01-01T00:30:00+00:00", "kind": "xid", "event": "event", "code": 31}\n'
            '{"time": "9999-12-31T23:59:59-05:00", "kind": "xid", "event": "event", "code": 43}\n'
            + json.dumps(entry(1)) + "\n")
        code, entries = history_json(tmp_path, capsys)
        # those that are no time in UTC (year 1 at +01:00, year 10000 in UTC) first, as written; then in time order
        assert code == 0 and [e.get("code") for e in entries] == [13, 43, 31, 79]
        code = cli.main(["history", "--socket", str(tmp_path / "none.sock"), "--state-dir", str(tmp_path)])
        out, err = capsys.readouterr()
        assert code == 0 and "Traceback" not in err
        assert "0001-01-01T00:00:00+01:00  node     Xid 13" in out
        assert "0001-01-01T00:30:00+00:00  node     Xid 31" in out
        assert "9999-12-31T23:59:59-05:00  node     Xid 43" in out and "Xid 79" in out
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
