"""Standard output written whole, or an error that says it was not (docs/architecture.md: exit 4 is "output that
could not be written whole"); a leaf every layer may use, and cheap to import (os and sys only: the fast path of
`gpudiag check` uses it).

Python's own stdout can lose part of a report without a word. Under PYTHONUNBUFFERED=1 (`python -u`, common in
container images) sys.stdout's binary layer is an unbuffered FileIO whose write() may write only part of what it was
given, and TextIOWrapper drops the count it returns: `check --json > file` on a full filesystem wrote 65,536 of
179,220 bytes and exited 0 (issue 36, item 5). With a buffered stdout the error surfaced as an "internal error"
instead, or at the interpreter's exit as "Exception ignored" and exit 120. So every command that writes a report
or data to stdout writes it here: encoded once, handed to the binary layer until every byte is taken, flushed, and
any error but a broken pipe raised as Unwritable (one line, exit 4). `finish()` checks the last flush, and the close
where a filesystem reports its write errors only then.
"""

from __future__ import annotations

import os
import sys

_CHUNK = 1 << 16  # Stream's buffer: a fleet's JSON is written piece by piece, not held whole


class ReaderLeft(Exception):
    """The reader closed its end of the pipe (`gpudiag check | head -1`): nothing is wrong, the exit is 0. Not an
    OSError, so that click does not turn it into its own exit 1 on the way up."""


class Unwritable(Exception):
    """Standard output refused what was written (a full disk, an I/O error, a closed descriptor): the message is
    one line naming what could not be written and why."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"cannot write {what} to standard output: {why}")


def write(text: str, what: str = "the report") -> None:
    """`text` to standard output, whole: Unwritable if any of it could not be written; ReaderLeft when the reader
    left early (a broken pipe), for the caller's exit 0."""
    stream = sys.stdout
    if stream is None:  # started with descriptor 1 closed (`gpudiag check >&-`): print() would drop it silently
        raise Unwritable(what, "standard output is closed")
    buffer = getattr(stream, "buffer", None)
    try:
        if buffer is None:  # a text stream without a binary layer (a test's io.StringIO): it takes text whole
            stream.write(text)
            stream.flush()
            return
        stream.flush()  # what was printed before goes first
        view = memoryview(text.encode(stream.encoding or "utf-8", stream.errors or "strict"))
        while view:
            written = buffer.write(view)  # a raw FileIO (unbuffered stdout) may take only part of it
            if written is None:  # a non-blocking descriptor that is full right now
                _wait_writable(stream)
                continue
            view = view[written:]
        buffer.flush()
    except OSError as exc:
        raise _failure(exc, what) from None


def finish(what: str = "the output") -> None:
    """At a command's end: flush what print() left in stdout's buffer, and close a duplicate of its descriptor,
    which runs the filesystem's flush as the last close would (NFS reports a failed write-back there, not at the
    write) while stdout itself stays open for the interpreter's exit. Unwritable on failure, ReaderLeft as `write`."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        stream.flush()
    except OSError as exc:
        raise _failure(exc, what) from None
    except ValueError:  # closed already
        return
    try:
        fd = stream.fileno()
        duplicate = os.dup(fd)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture) or none open
        return
    try:
        os.close(duplicate)
    except OSError as exc:
        raise _failure(exc, what) from None


class Stream:
    """A text stream for writers that write piece by piece (json.dump): pieces gathered to 64 KiB and written with
    `write`; `close()` writes the rest. Unwritable as `write`."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._pieces: list[str] = []
        self._size = 0

    def write(self, piece: str) -> int:
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size >= _CHUNK:
            self.flush()
        return len(piece)

    def flush(self) -> None:
        text, self._pieces, self._size = "".join(self._pieces), [], 0
        if text:
            write(text, self.what)

    def close(self) -> None:
        self.flush()


def _failure(exc: OSError, what: str) -> Exception:
    """What a failed write or flush raises: ReaderLeft for a broken pipe, else Unwritable; stdout discarded."""
    _discard()
    return ReaderLeft() if isinstance(exc, BrokenPipeError) else Unwritable(what, exc.strerror or str(exc))


def _wait_writable(stream) -> None:
    import select

    select.select([], [stream.fileno()], [])


def _discard() -> None:
    """Point descriptor 1 at /dev/null: whatever stdout still holds is dropped (the error says so) instead of
    failing again at the interpreter's exit, which would print "Exception ignored" and exit 120."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)
