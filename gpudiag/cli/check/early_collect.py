"""A direct check's collection, made by three child processes forked before the checks, the report and the
expectations are imported (gpudiag/cli/check/direct.py): the probe runs on other CPUs while this process imports.

- The vendor child opens the GPUs' libraries and probes the host, the GPUs, their peers and processes; NVML starts
  initialising, and the GPUs' probes, on threads of their own the moment it is forked (gpudiag/probe/nvml/early.py,
  gpudiag/probe/nvml/prefetch.py).
- Two side children: one reads the kernel log (and earlier boots), the other every family's part.
The side children send their answers, pickled, to the vendor child, which joins them into the snapshot one process
would have made (gpudiag/probe/split.py says how, and why apart: in one process the kernel log's parsing and the
parts' imports held the GIL while NVML's answers waited for it) and sends that to this process. So this process
imports no probe code at all: the checks and the report only.

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


# -- in the children -----------------------------------------------------------------------------------------------


def _vendor_part(root: str, timeout: "float | None", sides: list) -> tuple:
    """In the vendor child: ("snapshot", the whole collection, NVML's early-start window): its own part joined with
    the side children's answers, read from `sides` ((what it collects, what a failure calls it, the pipe it answers
    on) each)."""
    from gpudiag.probe.nvml.early import WINDOW, start_nvml_init

    started = time.monotonic()
    start_nvml_init()  # beside the imports below (only where /dev/nvidiactl is)
    prefetched = None
    if _nvidia_driver_loaded():
        from gpudiag.probe.nvml.prefetch import PrefetchedNvml

        prefetched = PrefetchedNvml()  # NVML opened and the GPUs probed beside the imports below
        _mark("prefetch started")
    options, stdout_to_stderr = _options(root, timeout)
    options.nvml_backend = prefetched
    from gpudiag.probe.split import collect_vendor_part, join

    # the side children bound their own collections by the same deadline: this only catches one that died or hung
    answers = _SideAnswers(sides, started, started + options.timeout_seconds + GRACE_SECONDS / 2)
    _mark("imported")
    with stdout_to_stderr():  # what a vendor library prints must not land in the report on stdout
        snapshot = collect_vendor_part(options)
    return "snapshot", join(snapshot, answers.side_parts(options), options), WINDOW


def _nvidia_driver_loaded() -> bool:
    return os.path.exists("/dev/nvidiactl")


def _kernel_log_part(root: str, timeout: "float | None") -> tuple:
    """In a side child: ("side", the kernel log's outcome with earlier boots, no window)."""
    options, stdout_to_stderr = _options(root, timeout)
    from gpudiag.probe.split import KERNEL_LOG, collect_side_parts

    _mark("imported")
    with stdout_to_stderr():
        return "side", collect_side_parts(options, {KERNEL_LOG}), []


def _family_parts(root: str, timeout: "float | None") -> tuple:
    """In a side child: ("side", every family part's outcome, no window)."""
    options, stdout_to_stderr = _options(root, timeout)
    from gpudiag.probe.split import FAMILY_PARTS, collect_side_parts

    _mark("imported")
    with stdout_to_stderr():
        return "side", collect_side_parts(options, set(FAMILY_PARTS)), []


# The side children: what each collects (the kernel log, or the families' parts), what a failure calls it, what it
# runs. The kernel log's scan is the longest piece of Python work in a collection, the parts' imports the next:
# apart, each is done before the GPUs' probes (tests/fixtures/h100/recorded/lab-2026-12-06c/).
SIDES = (("kernel_log", "the kernel log's process", _kernel_log_part),
         ("families", "the families' parts' process", _family_parts))


def _options(root: str, timeout: "float | None"):
    from pathlib import Path

    from gpudiag.cli.shared.node_collect import collect_options, start_logging, stdout_to_stderr

    start_logging(False)  # as the parent logs (GPUDIAG_DEBUG never reaches the fast path)
    return collect_options(Path(root), None, timeout), stdout_to_stderr


class _SideAnswers:
    """In the vendor child: the side children's answers, read and unpickled on a thread as they come (while this
    child's collector waits on NVML), until each child has ended or `until` (monotonic) has passed."""

    def __init__(self, sides: list, started: float, until: float):
        import threading

        self._sides, self._started, self._until = sides, started, until
        self._answers: dict = {}  # what it collects -> (kind, value, window, marks); None: ended without one
        self._done = threading.Event()
        threading.Thread(target=self._read, name="side-answers", daemon=True).start()

    def _read(self) -> None:
        import importlib
        import pickle

        from gpudiag.probe.split import FAMILY_PARTS

        try:
            for module in FAMILY_PARTS.values():  # what the join calls (each part's store), imported meanwhile
                importlib.import_module(module)
            chunks = {fd: [] for _, _, fd in self._sides}
            names = {fd: collects for collects, _, fd in self._sides}
            while chunks:
                left = self._until - time.monotonic()
                if left <= 0:
                    return
                for fd in select.select(list(chunks), [], [], left)[0]:
                    chunk = os.read(fd, 1 << 20)
                    if chunk:
                        chunks[fd].append(chunk)
                        continue
                    data = b"".join(chunks.pop(fd))
                    self._answers[names[fd]] = pickle.loads(data) if data else None
        finally:
            self._done.set()

    def side_parts(self, options):
        """The side parts as one; a side child's failure (no answer, an answer that is an error, none in time)
        recorded as its parts' failure (fail closed: they are never read as clean)."""
        from gpudiag.probe.split import FAMILY_PARTS, KERNEL_LOG, SideParts, expected_side_parts

        self._done.wait(max(0.0, self._until - time.monotonic()))
        elapsed = time.monotonic() - self._started
        pieces = []
        for collects, name, _ in self._sides:
            names = expected_side_parts(options, {KERNEL_LOG} if collects == KERNEL_LOG else set(FAMILY_PARTS))
            if collects not in self._answers:
                pieces.append(SideParts.failed(names, name, True, elapsed))
                continue
            answer = self._answers[collects]
            if answer is None:
                pieces.append(SideParts.failed(names, f"{name} ended without an answer", False, elapsed))
                continue
            kind, value, _, marks = answer
            CHILD_MARKS.extend((f"{collects}: {label}", at) for label, at in marks)
            pieces.append(value if kind == "side" else SideParts.failed(
                names, f"{name}: {type(value).__name__}: {value}", False, elapsed))
        return SideParts.merged(pieces)


def _mark(step: str) -> None:
    CHILD_MARKS.append((f"child: {step}", time.perf_counter()))


def _answer(writing: int, work, args: tuple) -> None:
    """In a child: run `work(*args)`, pickle (its answer, or what it raised, and the child's marks), write, and leave
    without the interpreter's teardown. Ctrl-C ends the parent's wait; the child just stops."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    CHILD_MARKS[:] = []  # the parent's, if any, are not this child's
    _mark("forked")
    code = 0
    try:
        import pickle

        try:
            kind, value, window = work(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again in the parent
            kind, value, window = "raised", exc, []
        _mark("collected")
        try:
            data = pickle.dumps((kind, value, window, CHILD_MARKS))
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception: its text still reaches the parent
            data = pickle.dumps(("raised", RuntimeError(f"{type(exc).__name__}: {exc}"), [], []))
        with os.fdopen(writing, "wb") as out:
            out.write(data)
        # Nothing more is written: the parent's stdout and stderr are let go now, not when this process has been
        # torn down (closing NVML's device files takes the driver a few ms), so that a pipe reading the check's
        # output ends with the check.
        os.close(1)
        os.close(2)
    except BaseException:  # noqa: BLE001 - the reader gets no answer and says so
        code = 1
    os._exit(code)


def _fork(work, args: tuple, writing: int, pipes: list) -> int:
    """A child running `work(*args)` that answers on `writing`; of `pipes`, it keeps open only `writing` and the
    read ends its args name (every other write end closed there, so that each reader sees its writer's end)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        keep = {writing, *(fd for arg in args if isinstance(arg, list) for *_, fd in arg)}
        for fd in pipes:
            if fd not in keep:
                os.close(fd)
        _answer(writing, work, args)
    return pid


# -- in this process -----------------------------------------------------------------------------------------------


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


class ForkedCollection:
    """The whole node's collection (level 1, every probe part) in forked children; `snapshot()` waits for the vendor
    child's answer and returns its snapshot, or raises what its collection raised (a usage problem, a failure) in
    this process. `close()` ends children still running (this process leaves early: a bad --profile, Ctrl-C)."""

    def __init__(self, root: str, timeout: "float | None"):
        self.timeout = DEFAULT_DEADLINE_SECONDS if timeout is None else timeout
        self.nvml_window: list = []
        self.child_marks: list = []
        self.answered_at: "float | None" = None  # time.perf_counter() once the answer was read (the timeline's)
        self.started = time.monotonic()
        self.pids: list = []
        side_pipes = [os.pipe() for _ in SIDES]
        reading, writing = os.pipe()
        pipes = [reading, writing, *(fd for pair in side_pipes for fd in pair)]
        self._reading: "int | None" = reading
        try:
            sides = [(collects, name, read_end) for (collects, name, _), (read_end, _) in zip(SIDES, side_pipes)]
            self.pids.append(_fork(_vendor_part, (root, timeout, sides), writing, pipes))
            for (*_, work), (_, write_end) in zip(SIDES, side_pipes):
                self.pids.append(_fork(work, (root, timeout), write_end, pipes))
        except OSError:  # no process to be had (a limit on processes): those forked are ended, nothing is left open
            self.close()
            raise
        finally:
            for fd in pipes:
                if fd != reading:
                    os.close(fd)

    def snapshot(self):
        try:
            data = self._read_answer()
            if not data:
                raise ChildFailed(f"the probe's process ended without an answer ({self._how_it_ended()})")
            self.answered_at = time.perf_counter()
            import pickle

            kind, value, self.nvml_window, self.child_marks = pickle.loads(data)
            if kind == "raised":
                raise value
            return value
        finally:
            self.close()

    def _read_answer(self) -> bytes:
        chunks = []
        until = self.started + self.timeout + GRACE_SECONDS
        while True:
            left = until - time.monotonic()
            if left <= 0 or not select.select([self._reading], [], [], left)[0]:
                raise ChildFailed(f"the probe's process did not answer within {self.timeout + GRACE_SECONDS:g} s")
            chunk = os.read(self._reading, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def _how_it_ended(self) -> str:
        vendor = self.pids[0]
        _, status = os.waitpid(vendor, 0)
        self.pids[0] = None
        if os.WIFSIGNALED(status):
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"exit {os.waitstatus_to_exitcode(status)}"

    def close(self) -> None:
        """Every child reaped (killed first where it still runs), the pipe closed. A vendor child that has answered
        and is still exiting is reaped on a thread: its exit (NVML's device files closed) is not waited for."""
        for position, pid in enumerate(self.pids):
            if pid is None:
                continue
            self.pids[position] = None
            try:
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    continue
                if position == 0 and self.answered_at is not None:
                    import threading

                    threading.Thread(target=_reap, args=(pid,), name="reap-probe", daemon=True).start()
                    continue
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if self._reading is not None:
            os.close(self._reading)
            self._reading = None
