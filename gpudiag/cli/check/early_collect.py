"""A direct check's collection, made by a child process forked before the checks, the report and the expectations
are imported (gpudiag/cli/check/direct.py), so that the probe and the imports run on two CPUs at once.

A cold `gpudiag check --direct` spent 43.7 ms importing and then 63.3 ms probing, one after the other, on the lab
H100 (tests/fixtures/h100/recorded/lab-2026-12-06/check_vs_nvidia_smi.txt). A thread cannot overlap them: the probe
holds the GIL for much of its work (the kernel log's parsing, the model, the host), and with the collection on a
thread beside the imports the check took longer (184 ms against 173 ms, lab H100,
tests/fixtures/h100/recorded/lab-2026-12-06b/thread_overlap/). A child has its own interpreter: it opens NVML,
probes the node exactly as this process would, and sends the snapshot back pickled through a pipe (29 kB and 2 ms
for eight GPUs of the fake node).

Only the node this process runs on (`--root /`) is collected so: with --root the node is a recorded tree, with no
driver to wait for. The collection is the one the checks would ask for: a check with neither --only nor --skip
judges every optional probe part (tests/cli/check/test_forked_collection.py holds the two equal).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from pathlib import Path
from typing import Optional

from gpudiag import DEFAULT_DEADLINE_SECONDS

# How long past the probe's own deadline the parent waits for the child's answer before it gives up on it: the child
# bounds its collection itself (gpudiag/probe/deadline.py); this only catches a child that died or hung anyway.
GRACE_SECONDS = 5.0

# The child's own steps (label, time.perf_counter()), sent back with its answer for bench/check_vs_nvidia_smi.py's
# timeline of a cold check; the benchmark may add its own marks here (the collector's parts). perf_counter is
# CLOCK_MONOTONIC on Linux: one clock for the parent, the child and the benchmark.
CHILD_MARKS: list = []


class ChildFailed(RuntimeError):
    """The collecting child exited without an answer (killed, crashed in C) or did not answer in time."""


class ForkedCollection:
    """`collect()` of the whole node (level 1, every probe part) in a forked child; `snapshot()` waits for it and
    returns the snapshot, or raises what the collection raised (a usage problem, a failure) in this process.
    `close()` ends a child that is still running (this process leaves early: a bad --profile, Ctrl-C)."""

    def __init__(self, root: Path, timeout: Optional[float]):
        self.timeout = DEFAULT_DEADLINE_SECONDS if timeout is None else timeout
        self.nvml_window: list = []
        self.child_marks: list = []
        reading, writing = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            os.close(reading)
            _collect_and_send(writing, root, timeout)
        os.close(writing)
        self._reading: Optional[int] = reading

    def snapshot(self):
        try:
            data = self._read_answer()
            if not data:
                _, status = os.waitpid(self.pid, 0)
                self.pid = None
                raise ChildFailed(f"the probe's process ended without an answer ({_how_it_ended(status)})")
        finally:
            self.close()
        kind, value, window, self.child_marks = pickle.loads(data)
        self.nvml_window = window
        if kind == "raised":
            raise value
        return value

    def _read_answer(self) -> bytes:
        chunks = []
        until = time.monotonic() + self.timeout + GRACE_SECONDS
        while True:
            left = until - time.monotonic()
            if left <= 0 or not select.select([self._reading], [], [], left)[0]:
                raise ChildFailed(f"the probe's process did not answer within {self.timeout + GRACE_SECONDS:g} s")
            chunk = os.read(self._reading, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def close(self) -> None:
        if self._reading is None:
            return
        if self.pid is not None:
            try:
                if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        os.close(self._reading)
        self.pid = self._reading = None


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def _collect_and_send(writing: int, root: Path, timeout: Optional[float]) -> None:
    """The child: collect, pickle (snapshot or exception, and NVML's early-start window for the benchmark), write,
    and leave without the interpreter's teardown. Ctrl-C ends the parent's wait; the child just stops."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    CHILD_MARKS.append(("child: forked", time.perf_counter()))
    code = 0
    try:
        from gpudiag.probe.nvml.early import WINDOW, start_nvml_init

        start_nvml_init()  # beside the child's own imports of the probe (only where /dev/nvidiactl is)
        try:
            from gpudiag.cli.shared.node_collect import collect, start_logging

            start_logging(False)  # as the parent logs (GPUDIAG_DEBUG never reaches the fast path)
            CHILD_MARKS.append(("child: imported", time.perf_counter()))
            answer = ("snapshot", collect(root, None, timeout, 1, None), WINDOW, CHILD_MARKS)
        except BaseException as exc:  # noqa: BLE001 - raised again in the parent
            answer = ("raised", exc, WINDOW, CHILD_MARKS)
        CHILD_MARKS.append(("child: collected", time.perf_counter()))
        try:
            data = pickle.dumps(answer)
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception: its text still reaches the parent
            data = pickle.dumps(("raised", RuntimeError(f"{type(exc).__name__}: {exc}"), [], []))
        with os.fdopen(writing, "wb") as out:
            out.write(data)
    except BaseException:  # noqa: BLE001 - the parent reads no answer and says so
        code = 1
    os._exit(code)
