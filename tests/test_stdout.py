"""gpudiag/stdout.py, the one way commands write to standard output: whole, or Unwritable (exit 4, one line). The
commands end to end on a real full filesystem are in tests/e2e/test_output_whole.py."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys

import pytest

from gpudiag import stdout
from tests.support.paths import REPO


class _Raw(io.RawIOBase):
    """A raw stream that takes at most `room` bytes in all, then fails as a full disk does (ENOSPC); each write
    takes at most `step` bytes, as a raw FileIO under PYTHONUNBUFFERED does."""

    def __init__(self, room: int, step: int = 4096) -> None:
        self.room, self.step, self.data = room, step, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(self.data) >= self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken = bytes(b[:min(self.step, self.room - len(self.data))])
        self.data += taken
        return len(taken)


def _text_over(raw: io.RawIOBase) -> io.TextIOWrapper:
    return io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # what `python -u` makes sys.stdout


def test_a_partial_write_is_carried_on_until_every_byte_is_taken(monkeypatch):
    raw = _Raw(room=1 << 20, step=1000)
    monkeypatch.setattr(sys, "stdout", _text_over(raw))
    stdout.write("é" * 5000)  # 10,000 bytes in UTF-8, taken 1,000 at a time
    assert raw.data.decode() == "é" * 5000


def test_a_full_disk_after_part_of_the_report_is_unwritable_not_silence(monkeypatch):
    raw = _Raw(room=65536)
    monkeypatch.setattr(sys, "stdout", _text_over(raw))
    text = "x" * 179220
    assert sys.stdout.write(text) == len(text)  # Python's own answer: all of it, though 65,536 bytes went out
    raw.data.clear()
    with pytest.raises(stdout.Unwritable) as caught:
        stdout.write(text, "the report")
    assert str(caught.value) == "cannot write the report to standard output: No space left on device"


def test_a_stream_gathers_pieces_and_writes_them_whole(monkeypatch):
    raw = _Raw(room=1 << 20)
    monkeypatch.setattr(sys, "stdout", _text_over(raw))
    out = stdout.Stream("the fleet verdict")
    for _ in range(1000):
        out.write("0123456789" * 10)
    assert len(raw.data) >= 65536  # written as it grew, not held whole
    out.close()
    assert len(raw.data) == 100_000


def test_a_text_stream_without_a_binary_layer_takes_the_text(monkeypatch):
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stdout", captured)
    stdout.write("a report\n")
    stdout.finish()
    assert captured.getvalue() == "a report\n"


def test_finish_reports_what_the_last_close_reports(monkeypatch, tmp_path):
    """A filesystem that reports a failed write-back only when the file is closed (NFS): finish() closes a duplicate
    of descriptor 1, whose close runs that flush, and says so."""
    target = open(tmp_path / "out", "w")
    monkeypatch.setattr(sys, "stdout", target)
    real_close, real_dup, duplicates, failed = os.close, os.dup, [], []

    def close(fd):
        real_close(fd)
        if fd in duplicates:  # the duplicate's close: the one that runs the filesystem's flush
            duplicates.remove(fd)
            failed.append(fd)
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    target.write("a report\n")
    def dup(fd):
        copy = real_dup(fd)
        if fd == target.fileno():
            duplicates.append(copy)
        return copy

    monkeypatch.setattr(os, "dup", dup)
    monkeypatch.setattr(os, "close", close)
    try:
        with pytest.raises(stdout.Unwritable, match="cannot write the output to standard output: Input/output error"):
            stdout.finish()
    finally:
        monkeypatch.setattr(os, "close", real_close)
        monkeypatch.setattr(os, "dup", real_dup)
        target.close()
    assert len(failed) == 1
    assert (tmp_path / "out").read_text() == "a report\n"  # flushed first


def test_a_broken_pipe_passes_through_for_the_callers_exit_0():
    """`gpudiag profiles | true`: the reader left; no error line, exit 0, no "Exception ignored" at exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "gpudiag", "profiles"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
