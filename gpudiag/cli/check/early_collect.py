"""A direct check's collection, made by three child processes forked before the checks, the report and the
expectations are imported (gpudiag/cli/check/direct.py): the probe runs on other CPUs while this process imports.

- The vendor child opens the GPUs' libraries and probes the host, the GPUs, their peers and processes.
- Two side children: one reads the kernel log (and earlier boots), the other every family's part.
- Where NVIDIA's driver is loaded, the NVML-ahead process, forked before them: NVML starts initialising on a thread
  of its own (gpudiag/probe/nvml/early.py) before the process imports anything but pynvml, and it makes the NVIDIA
  backend's reads, streaming them to the vendor child, whose backend is given them through a stand-in for pynvml
  instead of calling the driver (gpudiag/probe/nvml/ahead.py, ahead_answers.py, ahead_library.py): the vendor child
  neither imports pynvml nor opens NVML unless a read is missing. The ahead process answers nothing to this process,
  which kills it once the vendor child has answered and never waits for it. Without it, NVML starts initialising in
  the vendor child the moment it is forked.
Each sends its answer, pickled, to this process, which joins them into the snapshot one process would have made
(gpudiag/probe/split.py says how, and why apart: in one process the kernel log's parsing and the parts' imports held
the GIL while NVML's answers waited for it). This process imports the probe package for the join only once it has
imported the checks and the report and waits for the children anyway; the vendor child's interpreter does nothing
but its own part.

A cold `gpudiag check --direct` spent 43.7 ms importing and then 63.3 ms probing, one after the other, on the lab
H100 (tests/fixtures/h100/recorded/lab-2026-12-06/check_vs_nvidia_smi.txt). A thread cannot overlap them: the probe
holds the GIL for much of its work, and with the collection on a thread beside the imports the check took longer
(184 ms against 173 ms, lab H100, tests/fixtures/h100/recorded/lab-2026-12-06b/thread_overlap/).

Only the node this process runs on (`--root /`) is collected so: with --root the node is a recorded tree, with no
driver to wait for. The collection is the one the checks would ask for: a check with neither --only nor --skip
judges every optional probe part (tests/cli/check/test_forked_collection.py holds the two equal).

Nothing but os, time and _signal is imported here before the NVML-ahead process is forked: each import would delay
NVML's start. _signal is the C module under `signal`, whose own import builds its enums (2 ms, more than the rest of
this module's imports together); `signal` and `select` are imported where they are used, after the forks. The other
three children are forked once this process has imported what all three import (`_import_what_the_children_share`):
each of them otherwise imported it for itself, about 55 ms on the lab H100, before its own work began, while this
process imported the same modules for the join.
"""

from __future__ import annotations

import _signal
import os
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


def _vendor_part(root: str, timeout: "float | None", ahead: "int | None" = None) -> tuple:
    """In the vendor child: ("vendor", its part of the collection (no side parts), NVML's early-start window).
    `ahead`: the read end of the NVML-ahead process's pipe, where there is one."""
    from gpudiag.probe.nvml.early import WINDOW, start_nvml_init

    answers = None
    if ahead is None:
        start_nvml_init()  # beside the imports below (only where /dev/nvidiactl is)
    else:  # the ahead process opens NVML and reads it: this process neither imports pynvml nor opens the library
        from gpudiag.probe.nvml.ahead_answers import AheadAnswers

        answers = AheadAnswers(ahead)
        _mark("ahead reader started")
    options, stdout_to_stderr = _options(root, timeout)
    if answers is not None:
        from gpudiag.probe.nvml.ahead_library import AheadNvml
        from gpudiag.probe.nvml.backend import NvmlBackend

        options.nvml_backend = NvmlBackend(library=lambda: AheadNvml(answers))
    from gpudiag.probe.split import collect_vendor_part

    _mark("imported")
    with stdout_to_stderr():  # what a vendor library prints must not land in the report on stdout
        part = collect_vendor_part(options)
    if answers is not None:
        CHILD_MARKS.extend(answers.marks)
        _mark(f"{answers.made_here} NVML reads made here, {answers.taken} from the ahead process, pynvml "
              f"{'imported' if answers.library_here else 'not imported'} here")
    return "vendor", part, WINDOW


def _ahead_part(writing: int) -> None:
    """In the NVML-ahead process (gpudiag/probe/nvml/ahead.py): NVML's reads streamed to the vendor child. It writes
    nothing else (its stdout and stderr are /dev/null: a check's output ends with the check) and never returns."""
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    try:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        from gpudiag.probe.nvml.early import start_nvml_init

        start_nvml_init()  # first: the driver's initialisation beside every import of this process
        from gpudiag.probe.nvml.ahead import read_ahead

        read_ahead(writing, link_errors=True)  # as the forked collection asks: every probe part
    except BaseException:  # noqa: BLE001 - the vendor child makes what is missing itself
        pass
    os._exit(0)


def _nvidia_driver_loaded() -> bool:
    return os.path.exists("/dev/nvidiactl")


def _side_part(root: str, timeout: "float | None", collects: str) -> tuple:
    """In a side child: ("side", the outcomes of the side parts it collects (split.side_parts_of), no window)."""
    options, stdout_to_stderr = _options(root, timeout)
    from gpudiag.probe.split import collect_side_parts, side_parts_of

    _mark("imported")
    with stdout_to_stderr():
        return "side", collect_side_parts(options, side_parts_of(collects)), []


# The children: what each collects, what a failure calls it, what it runs. The vendor child's answer is the check's
# (none: the check fails); a side child's failure fails its own parts only. The kernel log's scan is the longest
# piece of Python work in a collection, the parts' imports the next: apart, each is done before the GPUs' probes,
# and the vendor child's interpreter is left to NVML (tests/fixtures/h100/recorded/lab-2026-12-06c/).
VENDOR = "vendor"
CHILDREN = ((VENDOR, "the probe's process", _vendor_part),
            ("kernel_log", "the kernel log's process", _side_part),
            ("families", "the families' parts' process", _side_part))


def _options(root: str, timeout: "float | None"):
    from pathlib import Path

    from gpudiag.cli.shared.node_collect import collect_options, start_logging, stdout_to_stderr

    start_logging(False)  # as the parent logs (GPUDIAG_DEBUG never reaches the fast path)
    return collect_options(Path(root), None, timeout), stdout_to_stderr


def _mark(step: str) -> None:
    CHILD_MARKS.append((f"child: {step}", time.perf_counter()))


def _answer(writing: int, work, args: tuple) -> None:
    """In a child: run `work(*args)`, pickle (its answer, or what it raised, and the child's marks), write, and leave
    without the interpreter's teardown. Ctrl-C ends the parent's wait; the child just stops."""
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
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


def _fork(run, keep: tuple, pipes: list) -> int:
    """A child that runs `run()` (which never returns); of `pipes`, every end but `keep` is closed there."""
    pid = os.fork()
    if pid == 0:  # the child
        for fd in pipes:
            if fd not in keep:
                os.close(fd)
        run()
    return pid


# -- in this process -----------------------------------------------------------------------------------------------


def _import_what_the_children_share() -> None:
    """Imported once, here, before the children are forked, which inherit them: the options, the model, the collector
    and the join, which this process needs for the join anyway, and the host's reader, which each child reads some of
    the host with. Each child would import them again before its own work
    (tests/cli/check/test_forked_collection.py holds them to it)."""
    import gpudiag.cli.shared.node_collect  # noqa: F401
    import gpudiag.probe.host  # noqa: F401
    import gpudiag.probe.split  # noqa: F401


def _answered(answer) -> bool:
    """Whether a child's answer is one (not None: it ended without one; not "raised": its collection failed)."""
    return answer is not None and answer[0] != "raised"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


class ForkedCollection:
    """The whole node's collection (level 1, every probe part) in forked children; `snapshot()` waits for their
    answers and returns the joined snapshot, or raises what the vendor child's collection raised (a usage problem, a
    failure) in this process. `close()` ends children still running (this process leaves early: a bad --profile,
    Ctrl-C)."""

    def __init__(self, root: str, timeout: "float | None"):
        self.root, self.timeout_given = root, timeout
        self.timeout = DEFAULT_DEADLINE_SECONDS if timeout is None else timeout
        self.nvml_window: list = []
        self.child_marks: list = []
        self.answered_at: "float | None" = None  # time.perf_counter() once the vendor child's answer was read
        self.started = time.monotonic()
        self.pids: list = []
        self.ahead_pid: "int | None" = None  # the NVML-ahead process, where NVIDIA's driver is loaded
        self._reading: dict = {}  # what a child collects -> the read end of its pipe, until closed
        ahead = os.pipe() if _nvidia_driver_loaded() else ()  # the ahead process's (read end, write end)
        pipes: list = list(ahead)  # with each child's (read end, write end), in CHILDREN's order
        try:
            for _ in CHILDREN:
                pipes.extend(os.pipe())
            if ahead:  # first: the driver's reads are the longest chain
                self.ahead_pid = _fork(lambda: _ahead_part(ahead[1]), (ahead[1],), pipes)
            _import_what_the_children_share()
            offset = len(ahead)
            for position, (collects, _, work) in enumerate(CHILDREN):
                writing = pipes[offset + 2 * position + 1]
                if collects == VENDOR:
                    args, keep = (root, timeout, ahead[0] if ahead else None), (writing, *ahead[:1])
                else:
                    args, keep = (root, timeout, collects), (writing,)
                self.pids.append(_fork(lambda w=writing, f=work, a=args: _answer(w, f, a), keep, pipes))
        except Exception:  # no pipe or process to be had (a limit), a module that would not import: those forked are
            # ended, nothing is left open
            for fd in pipes:
                os.close(fd)
            self.close()
            raise
        for fd in ahead:
            os.close(fd)
        for position, (collects, _, _) in enumerate(CHILDREN):
            os.close(pipes[offset + 2 * position + 1])
            self._reading[collects] = pipes[offset + 2 * position]

    def snapshot(self):
        """The vendor child's part joined with the side children's, as one process collects it
        (gpudiag/probe/split.py); a side child's failure (no answer, an answer that is an error, none in time)
        recorded as its parts' failure (fail closed: they are never read as clean)."""
        try:
            options = self._ready_to_join()
            answers = self._read_answers()
            if VENDOR not in answers:
                raise ChildFailed(f"the probe's process did not answer within {self.timeout + GRACE_SECONDS:g} s")
            if answers[VENDOR] is None:
                raise ChildFailed(f"the probe's process ended without an answer ({self._how_it_ended()})")
            self.answered_at = time.perf_counter()
            kind, value, self.nvml_window, marks = answers[VENDOR]
            self.child_marks.extend(marks)
            if kind == "raised":
                raise value
            from gpudiag.probe.split import join

            options = options or self._options()  # (raises what the vendor child's options did not)
            return join(value, self._side_parts(answers, options), options)
        finally:
            self.close()

    def _ready_to_join(self):
        """What the join needs, imported while the children collect (this process waits for them anyway): the probe
        package, each family part's module (the join calls its store), the collection's options; None for options
        this process cannot make (the vendor child's answer then says why)."""
        import importlib

        from gpudiag.probe.split import FAMILY_PARTS

        for module in FAMILY_PARTS.values():
            importlib.import_module(module)
        try:
            return self._options()
        except Exception:  # noqa: BLE001 - a usage problem the vendor child reports as its own answer
            return None

    def _options(self):
        from pathlib import Path

        from gpudiag.cli.shared.node_collect import collect_options

        return collect_options(Path(self.root), None, self.timeout_given)

    def _read_answers(self) -> dict:
        """Each child's answer, unpickled as it comes (None: the child ended without one), until the vendor child
        has answered and the side children have too or their time is up; a child missing from it gave none in time.
        The children bound their collections by the deadline themselves: this only catches one that died or hung."""
        import pickle
        import select

        chunks = {fd: [] for fd in self._reading.values()}
        collects = {fd: name for name, fd in self._reading.items()}
        answers: dict = {}
        sides_until = self.started + self.timeout + GRACE_SECONDS / 2
        until = self.started + self.timeout + GRACE_SECONDS
        while chunks:
            now = time.monotonic()
            if VENDOR in answers and (now >= sides_until or not _answered(answers[VENDOR])):
                break  # the sides' time is up, or the check fails without them
            left = (sides_until if VENDOR in answers else until) - now
            ready = select.select(list(chunks), [], [], left)[0] if left > 0 else []
            if not ready:
                break
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    chunks[fd].append(chunk)
                    continue
                data = b"".join(chunks.pop(fd))
                answers[collects[fd]] = pickle.loads(data) if data else None
        return answers

    def _side_parts(self, answers: dict, options):
        from gpudiag.probe.split import SideParts, expected_side_parts, side_parts_of

        elapsed = time.monotonic() - self.started
        pieces = []
        for collects, name, _ in CHILDREN[1:]:
            names = expected_side_parts(options, side_parts_of(collects))
            if collects not in answers:
                pieces.append(SideParts.failed(names, name, True, elapsed))
                continue
            if answers[collects] is None:
                pieces.append(SideParts.failed(names, f"{name} ended without an answer", False, elapsed))
                continue
            kind, value, _, marks = answers[collects]
            self.child_marks.extend((label.replace("child:", f"{collects}:", 1), at) for label, at in marks)
            pieces.append(value if kind == "side" else SideParts.failed(
                names, f"{name}: {type(value).__name__}: {value}", False, elapsed))
        return SideParts.merged(pieces)

    def _how_it_ended(self) -> str:
        vendor = self.pids[0]
        _, status = os.waitpid(vendor, 0)
        self.pids[0] = None
        if os.WIFSIGNALED(status):
            import signal

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
                os.kill(pid, _signal.SIGKILL)
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if self.ahead_pid is not None:  # done or not, it is not waited for (a call may still be in the driver)
            pid, self.ahead_pid = self.ahead_pid, None
            try:
                os.kill(pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
            import threading

            threading.Thread(target=_reap, args=(pid,), name="reap-ahead", daemon=True).start()
        for fd in self._reading.values():
            os.close(fd)
        self._reading = {}
