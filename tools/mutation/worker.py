"""The pytest side of tools/mutate.py, run inside a private copy of the project (never the checkout itself).

Modes (MUTATE_MODE):
- trace: the candidate tests in their usual order, recording which target lines each test runs, how long it takes,
  and which target lines run outside any test (module import, collection); the exit status says whether the
  unmutated suite passes.
- serve: collects the candidate tests once, then takes mutants over a pipe (one JSON line each) and answers each with
  its outcome. A mutant inside a function runs in a forked child that swaps the live functions' code for the mutated
  code (every other module's references see it: they hold the same function objects); the mutated file is written
  into this worker's copy as well, so that tests which start `python -m gpudiag` see the same mutant. A mutant that
  runs at import (tables, constants) runs in a fresh `list`-mode pytest process instead, which imports the mutated
  file. A kill counts only when it is reproduced: the failing test alone passes without the mutant and fails with
  it, or else the same tests in the same order pass without it.
- list: runs the node IDs in MUTATE_LIST in that order, stopping at the first failure (a fresh process for a mutant
  that runs at import).

Every run reports progress on a pipe ("s I" as test I starts, "f I" when it fails, "p" when all passed, "e TEXT" on
an error), so that the serving process holds each test to its own deadline and kills the child's process group and
every process it left behind (this process is their subreaper) when one hangs.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

BOOT = ("import sys; sys.path.insert(0, {tools!r}); from mutation import worker; del sys.path[0]; "
        "sys.exit(worker.main(sys.argv[1:]))")
COLD_FIRST = 25  # a fresh process first collects only the files of this many tests (most kills come early)


def _send(fd: int, text: str) -> None:
    os.write(fd, text.encode())


def run_sequence(items: list, progress: int, plugin: "_Reports") -> None:
    """Runs the items in order with pytest's own protocol (fixtures, capture, teardown between modules) and exits
    the process: 1 at the first failed report (after tearing every fixture down), 0 when all passed."""
    for i, item in enumerate(items):
        _send(progress, f"s {i}\n")
        plugin.failed = False
        item.ihook.pytest_runtest_protocol(item=item, nextitem=items[i + 1] if i + 1 < len(items) else None)
        if plugin.failed:
            try:
                item.session._setupstate.teardown_exact(None)
            except BaseException:  # noqa: BLE001 - a fixture that cannot tear down must not hide the verdict
                pass
            _send(progress, f"f {i}\n")
            os._exit(1)
    _send(progress, "p\n")
    os._exit(0)


class _Reports:
    failed = False

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.failed = True


class Trace(_Reports):
    def __init__(self, root: Path, targets: list[str], out: Path) -> None:
        self.root, self.out = root, out
        names = {}
        for rel in targets:
            names[str(root / rel)] = rel
            names[os.path.realpath(root / rel)] = rel
        self.tests: dict[str, dict] = {}
        self.failures: list[str] = []
        self.at_import: set = set()
        current = [self.at_import]
        self.current = current

        def local(frame, event, arg):
            if event == "line":
                current[0].add((frame.f_code.co_filename, frame.f_lineno))
            return local

        def global_(frame, event, arg):
            if frame.f_code.co_filename in names:
                current[0].add((frame.f_code.co_filename, frame.f_lineno))
                return local
            return None

        self.names, self.hook = names, global_
        sys.settrace(global_)
        threading.settrace(global_)

    def _rel(self, lines: set) -> dict[str, list[int]]:
        out: dict[str, set] = {}
        for filename, line in lines:
            out.setdefault(self.names[filename], set()).add(line)
        return {rel: sorted(v) for rel, v in out.items()}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.current[0] = lines = set()
        # Again for every test: a test (or what it runs) may have replaced or cleared the tracer of this thread
        sys.settrace(self.hook)
        threading.settrace(self.hook)
        start = time.monotonic()
        yield
        self.tests[item.nodeid] = {"seconds": time.monotonic() - start, "lines": self._rel(lines)}
        if self.failed:
            self.failures.append(item.nodeid)
            self.failed = False
        self.current[0] = self.at_import

    def pytest_sessionfinish(self, session, exitstatus):
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        self.out.write_text(json.dumps({"tests": self.tests, "at_import": self._rel(self.at_import),
                                        "failures": self.failures, "exitstatus": int(exitstatus)}))


class ListRun(_Reports):
    def __init__(self, nodeids: list[str], progress: int) -> None:
        self.nodeids, self.progress = nodeids, progress

    def pytest_collectreport(self, report) -> None:
        # A test file that no longer imports under the mutant (the serving worker collected it without): its tests
        # fail, the first of them first.
        if report.failed:
            first = next((i for i, n in enumerate(self.nodeids) if n.split("::")[0] == report.nodeid), 0)
            _send(self.progress, f"s {first}\nf {first}\n")
            os._exit(1)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        items = {item.nodeid: item for item in session.items}
        missing = [n for n in self.nodeids if n not in items]
        if missing or session.testsfailed:
            _send(self.progress, f"e not collected: {missing[:3]} ({session.testsfailed} collection errors)\n")
            os._exit(3)
        run_sequence([items[n] for n in self.nodeids], self.progress, self)


class Serve(_Reports):
    def __init__(self, root: Path, tools: Path, requests: int, replies: int) -> None:
        self.root, self.tools, self.requests, self.replies = root, tools, requests, replies
        self.alone: dict[tuple[str, bool], bool] = {}  # (node ID, forked) → passes alone without the mutant
        self.error = ""

    # -- the loop ---------------------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        self.items = {item.nodeid: item for item in session.items}
        self.basetemp = session.config._tmp_path_factory.getbasetemp()  # made once: children number dirs in it
        self.args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--basetemp", f"{self.basetemp}-fresh"]
        self.live: dict[tuple[str, str], list] = {}
        for obj in gc.get_objects():
            if isinstance(obj, types.FunctionType):
                self.live.setdefault((obj.__code__.co_filename, obj.__code__.co_qualname), []).append(obj)
        self.caches = [o for o in gc.get_objects() if isinstance(o, functools._lru_cache_wrapper)]
        become_subreaper()
        gc.collect()
        gc.freeze()  # children then share the parent's pages instead of touching them in their first collection
        _send(self.replies, json.dumps({"ready": len(self.items), "errors": session.testsfailed}) + "\n")
        with os.fdopen(self.requests, "r") as requests:
            for line in requests:
                reply = self.handle(json.loads(line))
                _send(self.replies, json.dumps(reply) + "\n")
        return True

    def handle(self, req: dict) -> dict:
        target = self.root / req["path"]
        original = target.read_text()
        tests, deadlines, hot = req["tests"], req["deadlines"], req["hot"]
        mutant = (str(target), req["source"], req["scope"])
        try:
            self._disk(target, req["source"])
            status, i = self.run(tests, deadlines, mutant if hot else None, hot)
            if status == "cold":
                return {"outcome": "cold"}
            if status in ("passed", "error"):
                return {"outcome": "survived" if status == "passed" else "error", "ran": len(tests),
                        **({"error": self.error} if status == "error" else {})}
            test = tests[i]
            self._disk(target, original)
            alone = self._alone(test, deadlines[i], hot)
            if status == "timeout":
                return {"outcome": "timeout" if alone else "unclear", "by": test, "ran": i + 1}
            if alone and i == 0:
                return {"outcome": "killed", "by": test, "ran": 1}
            if alone:
                self._disk(target, req["source"])
                again, _ = self.run([test], deadlines[i:i + 1], mutant if hot else None, hot)
                self._disk(target, original)
                if again == "failed":
                    return {"outcome": "killed", "by": test, "ran": i + 1}
            control, _ = self.run(tests[:i + 1], deadlines[:i + 1], None, hot)
            return {"outcome": "killed" if control == "passed" else "unclear", "by": test, "ran": i + 1,
                    "context": True}
        finally:
            self._disk(target, original)

    def _alone(self, test: str, deadline: float, hot: bool) -> bool:
        """Whether the test passes alone without the mutant, run the way the mutant ran (forked or fresh)."""
        if (test, hot) not in self.alone:
            self.alone[test, hot] = self.run([test], [deadline], None, hot)[0] == "passed"
        return self.alone[test, hot]

    def _disk(self, target: Path, text: str) -> None:
        if target.read_text() != text:
            target.write_text(text)
        for stale in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            stale.unlink()

    # -- one run ----------------------------------------------------------------------------------------------
    def run(self, tests: list[str], deadlines: list[float], mutant, hot: bool) -> tuple[str, int]:
        """("passed" | "failed" | "timeout" | "error" | "cold", index of the failing test)."""
        if hot:
            return self._watch(self._fork(tests, mutant), deadlines, 0)
        offset = 0
        for chunk in ([tests[:COLD_FIRST], tests[COLD_FIRST:]] if len(tests) > 2 * COLD_FIRST else [tests]):
            status, i = self._watch(self._spawn(chunk), deadlines[offset:offset + len(chunk)], 30)
            if status != "passed":
                return status, offset + i
            offset += len(chunk)
        return "passed", 0

    def _fork(self, tests: list[str], mutant) -> tuple[int, int, object]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.setpgid(0, 0)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if mutant is not None and not self._apply(*mutant):
                    _send(w, "c\n")
                    os._exit(4)
                run_sequence([self.items[t] for t in tests], w, self)
            except BaseException as exc:  # noqa: BLE001
                _send(w, f"e {exc!r}\n".replace("\n", " ") + "\n")
            os._exit(3)
        os.close(w)
        return pid, r, None

    def _spawn(self, tests: list[str]) -> tuple[int, int, object]:
        r, w = os.pipe()
        files = list(dict.fromkeys(t.split("::")[0] for t in tests))
        env = {**os.environ, "MUTATE_MODE": "list", "MUTATE_LIST": json.dumps(tests), "MUTATE_PROGRESS": str(w)}
        proc = subprocess.Popen([sys.executable, "-c", BOOT.format(tools=str(self.tools)), *self.args, *files],
                                cwd=self.root, env=env, pass_fds=(w,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(w)
        return proc.pid, r, proc

    def _apply(self, filename: str, source: str, scope: list[str]) -> bool:
        """Puts the mutated code into the live functions of the scope chain; False when none is live (then the
        mutant needs a fresh process)."""
        code = compile(source, filename, "exec", dont_inherit=True)
        found: dict[str, list] = {}
        stack = [code]
        while stack:
            for const in stack.pop().co_consts:
                if isinstance(const, types.CodeType):
                    found.setdefault(const.co_qualname, []).append(const)
                    stack.append(const)
        swapped = []
        for qualname in scope:
            new = found.get(qualname, [])
            live = self.live.get((filename, qualname), [])
            if len(new) != 1 or len(live) > 1:
                return False  # two definitions of one name: which is which cannot be told
            for function in live:
                function.__code__ = new[0]
                swapped.append(function)
        for cache in self.caches:
            if getattr(cache, "__wrapped__", None) in swapped:
                cache.cache_clear()
        return bool(swapped)

    def _watch(self, started: tuple[int, int, object], deadlines: list[float], startup: float) -> tuple[str, int]:
        pid, fd, proc = started
        status, index, buffer = "error", 0, b""
        current, due = -1, time.monotonic() + startup + (deadlines[0] if deadlines else 10)
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], max(0.0, due - time.monotonic()))
                if not ready:
                    status, index = "timeout", max(current, 0)
                    break
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    kind, _, arg = line.decode().partition(" ")
                    if kind == "s":
                        current = int(arg)
                        due = time.monotonic() + deadlines[current] + (startup if current == 0 else 0)
                    elif kind in ("f", "p", "e", "c"):
                        self.error = arg if kind == "e" else ""
                        status = {"f": "failed", "p": "passed", "e": "error", "c": "cold"}[kind]
                        index = int(arg) if kind == "f" else 0
        finally:
            os.close(fd)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc is not None:
                proc.wait()
            else:
                os.waitpid(pid, 0)
            reap_orphans()
            for entry in self.basetemp.iterdir():  # each run's temporary files go with it
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()
        return status, index


def become_subreaper(on: bool = True) -> None:
    """Orphans of this process's descendants come back to it (PR_SET_CHILD_SUBREAPER), for reap_orphans."""
    ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)


def children() -> set[int]:
    me, found = os.getpid(), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def reap_orphans(spare: frozenset[int] = frozenset()) -> None:
    """Kills and reaps what finished children left running (servers, subprocesses), which as subreaper this process
    inherited; `spare` are children it had before."""
    for _ in range(50):
        orphans = children() - spare
        if not orphans:
            return
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def main(args: list[str]) -> int:
    mode = os.environ["MUTATE_MODE"]
    root = Path.cwd()
    sys.dont_write_bytecode = True
    # The tests expect a terminal session's signals: under nohup or as a background job (`… &`) SIGHUP and SIGINT
    # arrive ignored, every process started from here would inherit that, and a Ctrl-C or SIGHUP test would fail.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if mode == "plain":
        return pytest.main(args)
    if mode == "trace":
        plugin: object = Trace(root, json.loads(os.environ["MUTATE_TARGETS"]), Path(os.environ["MUTATE_TRACE_OUT"]))
    elif mode == "list":
        plugin = ListRun(json.loads(os.environ["MUTATE_LIST"]), int(os.environ["MUTATE_PROGRESS"]))
        pytest.main(args, plugins=[plugin])
        # Back here, no test ran: the session stopped before them (a conftest or plugin that no longer imports under
        # the mutant), so the first test fails; the serving worker confirms that it passes without the mutant.
        _send(plugin.progress, "s 0\nf 0\n")
        return 1
    else:
        requests, replies = (int(x) for x in os.environ["MUTATE_FDS"].split(","))
        plugin = Serve(root, Path(__file__).resolve().parent.parent, requests, replies)
    return pytest.main(args, plugins=[plugin])

