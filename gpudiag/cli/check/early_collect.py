"""A direct check's collection, made by two child processes forked before the checks, the report and the
expectations are imported (gpudiag/cli/check/direct.py): the probe runs on other CPUs while this process imports.

- The vendor child opens the GPUs' libraries and probes the host, the GPUs, their peers and processes; NVML starts
  initialising on a thread of its own the moment it is forked (gpudiag/probe/nvml/early.py).
- The side child reads the kernel log (and earlier boots) and every family's part.
Each sends its answer back pickled through a pipe; this process joins the two into the snapshot one process would
have made (gpudiag/probe/split.py says how, and why two: in one child the kernel log's parsing and the parts'
imports held the GIL while NVML's answers waited for it).

A cold `gpudiag check --direct` spent 43.7 ms importing and then 63.3 ms probing, one after the other, on the lab
H100 (tests/fixtures/h100/recorded/lab-2026-12-06/check_vs_nvidia_smi.txt). A thread cannot overlap them: the probe
holds the GIL for much of its work, and with the collection on a thread beside the imports the check took longer
(184 ms against 173 ms, lab H100, tests/fixtures/h100/recorded/lab-2026-12-06b/thread_overlap/).

Only the node this process runs on (`--root /`) is collected so: with --root the node is a recorded tree, with no
driver to wait for. The collection is the one the checks would ask for: a check with neither --only nor --skip
judges every optional probe part (tests/cli/check/test_forked_collection.py holds the two equal).

Nothing but os, select, signal and time is imported here before the children are forked: each import would delay
both of them.
"""

from __future__ import annotations

import os
import select
import signal
import time

from gpudiag import DEFAULT_DEADLINE_SECONDS

# How long past the probe's own deadline this process waits for a child's answer before it gives up on it: the
# children bound their collections themselves (gpudiag/probe/deadline.py); this only catches one that died or hung.
GRACE_SECONDS = 5.0

# The children's own steps (label, time.perf_counter()), sent back with their answers for
# bench/check_vs_nvidia_smi.py's timeline of a cold check; the benchmark may add its own marks here (the collector's
# parts). perf_counter is CLOCK_MONOTONIC on Linux: one clock for this process, the children and the benchmark.
CHILD_MARKS: list = []


class ChildFailed(RuntimeError):
    """The vendor child exited without an answer (killed, crashed in C) or did not answer in time."""


def _vendor_part(root: str, timeout: "float | None") -> tuple:
    """In the vendor child: ("snapshot", the collection less its side parts, NVML's early-start window)."""
    from gpudiag.probe.nvml.early import WINDOW, start_nvml_init

    start_nvml_init()  # beside the imports below (only where /dev/nvidiactl is)
    prefetched = None
    if _nvidia_driver_loaded():
        from gpudiag.probe.nvml.prefetch import PrefetchedNvml

        prefetched = PrefetchedNvml()  # NVML opened and the GPUs probed beside the imports below
        _mark("prefetch started")
    options, stdout_to_stderr = _options(root, timeout)
    options.nvml_backend = prefetched
    from gpudiag.probe.split import collect_vendor_part

    _mark("imported")
    with stdout_to_stderr():  # what a vendor library prints must not land in the report on stdout
        return "snapshot", collect_vendor_part(options), WINDOW


def _nvidia_driver_loaded() -> bool:
    return os.path.exists("/dev/nvidiactl")


def _side_parts(root: str, timeout: "float | None") -> tuple:
    """In the side child: ("side", the kernel log's and the families' outcomes, no window)."""
    options, stdout_to_stderr = _options(root, timeout)
    from gpudiag.probe.split import collect_side_parts

    _mark("imported")
    with stdout_to_stderr():
        return "side", collect_side_parts(options), []


def _options(root: str, timeout: "float | None"):
    from pathlib import Path

    from gpudiag.cli.shared.node_collect import collect_options, start_logging, stdout_to_stderr

    start_logging(False)  # as the parent logs (GPUDIAG_DEBUG never reaches the fast path)
    return collect_options(Path(root), None, timeout), stdout_to_stderr


class _Child:
    """One forked child running `work(root, timeout)`; its answer, pickled, arrives through `fd`."""

    def __init__(self, work, root: str, timeout: "float | None"):
        reading, writing = os.pipe()
        self.name = work.__name__.strip("_").replace("_", " ")
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            os.close(reading)
            _answer(writing, work, root, timeout)
        os.close(writing)
        self.fd = reading
        self.chunks: list = []
        self.ended = False  # its end of the pipe closed: the answer is whole (or absent)

    def read(self) -> None:
        chunk = os.read(self.fd, 1 << 20)
        if chunk:
            self.chunks.append(chunk)
        else:
            self.ended = True

    def answer(self) -> "tuple | None":
        """The unpickled answer, or None where the child ended without one (then it is reaped here)."""
        if not self.chunks:
            _, status = os.waitpid(self.pid, 0)
            self.pid = None
            self.how_it_ended = _how_it_ended(status)
            return None
        import pickle

        return pickle.loads(b"".join(self.chunks))

    def close(self) -> None:
        if self.pid is not None:
            try:
                if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ForkedCollection:
    """The whole node's collection (level 1, every probe part) in two forked children; `snapshot()` waits for them
    and returns the joined snapshot, or raises what the vendor child's collection raised (a usage problem, a
    failure) in this process. `close()` ends children still running (this process leaves early: a bad --profile,
    Ctrl-C)."""

    def __init__(self, root: str, timeout: "float | None"):
        self.root, self.given_timeout = root, timeout
        self.timeout = DEFAULT_DEADLINE_SECONDS if timeout is None else timeout
        self.nvml_window: list = []
        self.child_marks: list = []
        self.started = time.monotonic()
        self.vendor = _Child(_vendor_part, root, timeout)
        try:
            self.side = _Child(_side_parts, root, timeout)
        except OSError:
            self.vendor.close()
            raise

    @property
    def pids(self) -> list:
        return [child.pid for child in (self.vendor, self.side) if child.pid is not None]

    def snapshot(self):
        try:
            options = self._ready_to_join()  # while the children still collect
            self._read_answers()
            vendor = self.vendor.answer() if self.vendor.ended else None
            if not self.vendor.ended:
                raise ChildFailed(f"the probe's process did not answer within {self.timeout + GRACE_SECONDS:g} s")
            if vendor is None:
                raise ChildFailed(f"the probe's process ended without an answer ({self.vendor.how_it_ended})")
            kind, value, self.nvml_window, marks = vendor
            self.child_marks = list(marks)
            if kind == "raised":
                raise value
            return self._joined(value, options)
        finally:
            self.close()

    def _ready_to_join(self):
        """The options both children collected with, and every module the join imports (the families' parts, whose
        `store` it calls), imported now: the children are still collecting."""
        import importlib
        from pathlib import Path

        from gpudiag.cli.shared.node_collect import UsageProblem, collect_options
        from gpudiag.probe.split import FAMILY_PARTS

        for module in FAMILY_PARTS.values():
            importlib.import_module(module)
        try:
            return collect_options(Path(self.root), None, self.given_timeout)
        except UsageProblem:
            return None  # the vendor child meets it too, and its answer says so

    def _read_answers(self) -> None:
        """Both answers, read as they come (the side child's usually first, and unpickled while the vendor child still
        probes), until both children have ended or the deadline and its grace have passed."""
        until = self.started + self.timeout + GRACE_SECONDS
        while True:
            waiting = [child for child in (self.vendor, self.side) if not child.ended]
            left = until - time.monotonic()
            if not waiting or left <= 0:
                return
            ready, _, _ = select.select([child.fd for child in waiting], [], [], left)
            for child in waiting:
                if child.fd in ready:
                    child.read()
                    if child is self.side and child.ended:
                        self._side_answer = child.answer()

    def _joined(self, snapshot, options):
        from gpudiag.probe.split import SideParts, join

        elapsed = time.monotonic() - self.started
        if not self.side.ended:
            side = SideParts.failed(options, "the kernel log's and the parts' process", True, elapsed)
        else:
            answer = getattr(self, "_side_answer", None)
            if answer is None:
                why = f"the kernel log's and the parts' process ended without an answer ({self.side.how_it_ended})"
                side = SideParts.failed(options, why, False, elapsed)
            else:
                kind, value, _, marks = answer
                self.child_marks += [(f"side: {label}", at) for label, at in marks]
                side = value if kind == "side" else SideParts.failed(
                    options, f"{type(value).__name__}: {value}", False, elapsed)
        return join(snapshot, side, options)

    def close(self) -> None:
        for child in (self.vendor, self.side):
            child.close()


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def _mark(step: str) -> None:
    CHILD_MARKS.append((f"child: {step}", time.perf_counter()))


def _answer(writing: int, work, root: str, timeout: "float | None") -> None:
    """In a child: run `work`, pickle (its answer, or what it raised, and the child's marks), write, and leave
    without the interpreter's teardown. Ctrl-C ends the parent's wait; the child just stops."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    CHILD_MARKS[:] = []  # the parent's, if any, are not this child's
    _mark("forked")
    code = 0
    try:
        import pickle

        try:
            kind, value, window = work(root, timeout)
        except BaseException as exc:  # noqa: BLE001 - raised again in the parent
            kind, value, window = "raised", exc, []
        _mark("collected")
        try:
            data = pickle.dumps((kind, value, window, CHILD_MARKS))
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception: its text still reaches the parent
            data = pickle.dumps(("raised", RuntimeError(f"{type(exc).__name__}: {exc}"), [], []))
        with os.fdopen(writing, "wb") as out:
            out.write(data)
    except BaseException:  # noqa: BLE001 - the parent reads no answer and says so
        code = 1
    os._exit(code)
