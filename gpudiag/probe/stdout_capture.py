"""Keeping vendor-library chatter off gpudiag's stdout, which carries data (JSON, the checklist, metrics).

`import amdsmi` without libamd_smi.so prints two lines with Python's print() (docs/vendor-api.md §0), and a C library
loaded by dlopen may print with printf() from its constructors. `contextlib.redirect_stdout` only catches the
former: C code writes to file descriptor 1 directly. So both are redirected: `sys.stdout` to a buffer and fd 1 to
a temporary file, with libc's stdio buffer flushed before fd 1 is put back (otherwise a buffered printf would
reach the real stdout later).

Both redirections are process-wide, so this wraps only short, non-blocking work such as an import (dlopen); never
a call that can hang in a driver: a thread abandoned at its deadline would leave fd 1 pointing at the sink for
the rest of the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import tempfile
from typing import Iterator

from gpudiag.model.records import dataclass


@dataclass
class Captured:
    """What a vendor library wrote to stdout while captured."""
    text: str = ""


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)  # fflush(NULL) flushes every open C stream
    except (OSError, AttributeError, TypeError):  # not glibc/musl, or libc not loadable: nothing to flush
        pass


@contextlib.contextmanager
def capture_stdout() -> Iterator[Captured]:
    """Everything written to stdout inside the block, by Python or by C, ends up in the yielded `.text`."""
    captured = Captured()
    python_buffer = io.StringIO()
    sys.stdout.flush()
    try:
        saved_fd = os.dup(1)
    except OSError:  # fd 1 closed (detached daemon): only the Python level can be caught
        with contextlib.redirect_stdout(python_buffer):
            try:
                yield captured
            finally:
                captured.text = python_buffer.getvalue()
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            with contextlib.redirect_stdout(python_buffer):
                yield captured
        finally:
            _flush_c_stdio()
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
            sink.seek(0)
            captured.text = python_buffer.getvalue() + sink.read().decode("utf-8", errors="replace")
