#!/usr/bin/env python3
"""Mutation testing for gpudiag's judgement layer: would the suite notice a wrong verdict?

Stdlib only (and pytest). For each target file it builds AST mutants, one change each:
- comparison flips (`<` ↔ `>=`, `>` ↔ `<=`, `==` ↔ `!=`, `in` ↔ `not in`, `is` ↔ `is not`) and boundary shifts
  (`<` → `<=`, `>` → `>=`, `<=` → `<`, `>=` → `>`);
- `and` ↔ `or`; a negated `if` / `while` / conditional-expression test;
- severity swaps (`Status.FAIL` → WARN, WARN → PASS, PASS → FAIL, UNKNOWN → PASS, SKIP → FAIL) and action
  swaps (the automation actions "watch", "drain", "reset", "reboot", "rma", "none" each replaced by a neighbour);
- early returns removed (an `if` whose body ends in `return` deleted) and returned values replaced by None.

Each mutant runs against the tests that executed its line: one traced run of the candidate tests (the test files
whose imports reach the target, or --tests) records which tests execute which lines, and must pass; a mutant on a
line no test runs survives as "not covered". Everything runs in private copies of the tree (the checkout is never
modified), one per worker: a worker is one pytest session that collects the tests once and forks a child per mutant,
which puts the mutated code into the live functions and runs the mutant's tests (tests that killed mutants of the
same file first, then fastest first) until one fails; a mutant that runs at import (tables, constants) gets a fresh
pytest process instead. A kill counts only when it reproduces (tools/mutation/worker.py); a test that runs past its
deadline counts as a kill by timeout, listed apart. It prints the score per file and every survivor with its line,
for reading: some survivors are equivalent mutants (no behaviour can tell them apart).

    python3 tools/mutate.py --workers 2 --json mutants.json
    python3 tools/mutate.py --files gpudiag/checks/thermal.py --tests tests/checks/test_thermal.py

A run's report is kept in reports/mutation/ (`python3 tools/mutate.py > reports/mutation/full.txt`); the equivalent
mutants, with their reasons, are documented in docs/mutation-equivalents.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import coverage, report, sites, worker  # noqa: E402
from mutation.report import Outcome  # noqa: E402
from mutation.sites import Mutant  # noqa: E402

del sys.path[0]

REPO = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
JUDGEMENT_LAYER = ("gpudiag/checks/**/*.py", "gpudiag/probe/kernel_log/events.py", "gpudiag/exporter/metric_set.py")
PYTEST_ARGS = ["-q", "-p", "no:cacheprovider", "-o", "addopts="]


def candidate_tests(targets: list[str], root: Path = REPO) -> list[str]:
    return coverage.candidate_tests(targets, root)


def list_mutants(path: str, root: Path = REPO) -> list[Mutant]:
    return sites.list_mutants(path, root)


def mutated_source(mutant: Mutant, root: Path = REPO) -> str:
    return sites.mutated_source(mutant, root)


def _copy_tree(root: Path, dest: Path) -> Path:
    """The project as a clone has it (git's tracked and not-ignored files, top-level entries copied whole), so that
    every test that runs in the checkout runs in the copy (bench/, .ci/ and the shipped links included)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".pytest_cache", "*.egg-info")
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, check=True).stdout.decode().split("\0")
        names = sorted({name.split("/")[0] for name in listed if name})
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: everything but caches
        names = sorted(p.name for p in root.iterdir() if p.name not in (".git", ".pytest_cache", "__pycache__"))
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = root / name
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dest / name, ignore=ignore, symlinks=True)
        elif src.exists() or src.is_symlink():
            shutil.copy2(src, dest / name, follow_symlinks=False)
    return dest


def _env(copy: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1", **extra}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _boot(copy: Path, tmp: Path, name: str, tests: list[str], env: dict[str, str], **popen) -> subprocess.Popen:
    """A pytest process in the copy with the worker plugin, as it was when this run began (tmp/tool: editing the
    tool during a run changes nothing). Its temporary directories stay short: tests put Unix sockets in them, and a
    socket's path may not exceed 107 bytes."""
    if not (tmp / "tool" / "mutation").exists():
        shutil.copytree(TOOLS / "mutation", tmp / "tool" / "mutation", ignore=shutil.ignore_patterns("__pycache__"))
    log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            worker.BOOT.format(tools=str(tmp / "tool")),
            *PYTEST_ARGS,
            "--basetemp",
            str(tmp / (name[0] + name.lstrip("abcdefghijklmnopqrstuvwxyz"))),
            *tests,
        ],
        cwd=copy,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **popen,
    )


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-40:])


def trace(copy: Path, tmp: Path, targets: list[str], tests: list[str], root: Path,
          spare: frozenset[int] = frozenset()) -> coverage.Coverage:
    """The traced run of the unmutated tests. They must pass: a test that fails there is run again, untraced, in a
    fresh process (tracing slows every call, and timing tests can miss a deadline on a loaded machine); a failure
    that repeats stops the run."""
    out = tmp / "trace.json"
    started = time.monotonic()
    code = _boot(copy, tmp, "trace", tests, _env(copy, MUTATE_MODE="trace", MUTATE_TARGETS=json.dumps(targets),
                                                  MUTATE_TRACE_OUT=str(out))).wait()
    failures = json.loads(out.read_text())["failures"] if out.exists() else []
    if code != 0 and failures:
        print(f"{len(failures)} test(s) failed in the traced run; running them again untraced: "
              f"{', '.join(failures)}", flush=True)
        code = _boot(copy, tmp, "retry", failures, _env(copy, MUTATE_MODE="plain")).wait()
    worker.reap_orphans(spare)  # what a failed test's cleanup never stopped
    if code != 0:
        log = tmp / ("retry.log" if failures else "trace.log")
        sys.exit(f"mutate: the unmutated tests do not pass in the runner (pytest exit {code}); fix them first:\n"
                 f"{_tail(log)}")
    print(f"traced {len(tests)} test file(s) in {time.monotonic() - started:.0f} s", flush=True)
    return coverage.Coverage.load(out, root)


class Worker:
    def __init__(self, number: int, copy: Path, tmp: Path, tests: list[str]) -> None:
        req_r, self.requests = os.pipe()
        self.replies, rep_w = os.pipe()
        self.proc = _boot(copy, tmp, f"worker{number}", tests,
                          _env(copy, MUTATE_MODE="serve", MUTATE_FDS=f"{req_r},{rep_w}"), pass_fds=(req_r, rep_w))
        os.close(req_r)
        os.close(rep_w)
        self.log, self.buffer, self.job = tmp / f"worker{number}.log", b"", None
        self.ready = self.read()

    def read(self) -> Optional[dict]:
        while b"\n" not in self.buffer:
            chunk = os.read(self.replies, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, job, request: dict) -> None:
        self.job = job
        os.write(self.requests, (json.dumps(request) + "\n").encode())

    def stop(self) -> None:
        os.close(self.requests)
        self.requests = -1
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def run_all(jobs: list[tuple[Mutant, list[str], bool]], cov: coverage.Coverage, workers: list[Worker],
            root: Path, per_test: float) -> list[Outcome]:
    kills: dict[str, dict[str, int]] = {}
    outcomes: list[Outcome] = []
    queue = list(jobs)
    started: dict[int, float] = {}

    def request(mutant: Mutant, tests: list[str], hot: bool) -> dict:
        mine = kills.get(mutant.path, {})
        ordered = sorted(tests, key=lambda t: (-mine.get(t, 0), cov.seconds[t]))
        return {"path": mutant.path, "source": mutated_source(mutant, root), "scope": list(mutant.scope),
                "tests": ordered, "hot": hot,
                "deadlines": [per_test or 10 + 4 * cov.seconds[t] for t in ordered]}

    while queue or any(w.job for w in workers):
        for w in workers:
            if w.job is None and queue:
                job = queue.pop(0)
                started[id(w)] = time.monotonic()
                w.send(job, request(*job))
        busy = {w.replies: w for w in workers if w.job}
        ready, _, _ = select.select(list(busy), [], [])
        for fd in ready:
            w = busy[fd]
            (mutant, tests, hot), reply = w.job, w.read()
            w.job = None
            if reply is None:
                sys.exit(f"mutate: a worker died on {mutant.path}:{mutant.line}:\n{_tail(w.log)}")
            if reply["outcome"] == "cold":  # no live function holds the code: a fresh process imports it
                queue.insert(0, (mutant, tests, False))
                continue
            o = Outcome(mutant, reply["outcome"], len(tests), reply.get("ran", 0), time.monotonic() - started[id(w)],
                        reply.get("by"), not hot, reply.get("error", ""))
            if o.result == "killed" and o.by:
                kills.setdefault(mutant.path, {}).setdefault(o.by, 0)
                kills[mutant.path][o.by] += 1
            outcomes.append(o)
            print(report.progress_line(o), flush=True)
    return outcomes


def _expand(patterns: list[str], root: Path) -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(str(p.relative_to(root)) for p in root.glob(pattern)) if any(c in pattern for c in "*?[") \
            else [pattern]
        out.extend(m for m in matches if m not in out)
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", default=list(JUDGEMENT_LAYER),
                        help="files (or globs) to mutate, relative to the repository; default: the judgement layer")
    parser.add_argument("--tests", nargs="+", help="test files to trace and run (default: those whose imports "
                                                   "reach the target files)")
    parser.add_argument("--max-mutants", type=int, default=0, help="at most this many mutants per file, sampled "
                                                                   "evenly with --seed (0: all)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--lines", nargs="+", metavar="FILE:LINE", help="only the mutants on these lines (to check "
                                                                        "survivors again after a new test)")
    parser.add_argument("--timeout", type=float, default=0, help="seconds one test may run under a mutant before "
                        "it counts as hung (default: 10 s + 4x its traced time)")
    parser.add_argument("--workers", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--json", type=Path, help="also write every mutant and its outcome to this file")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)  # the tool's own tests
    args = parser.parse_args(argv)
    root = args.root.resolve()

    targets = _expand(args.files, root)
    for t in targets:
        if not (root / t).is_file():
            parser.error(f"no such file: {t}")
    mutants: dict[str, list[Mutant]] = {}
    for t in targets:
        every = list_mutants(t, root)
        if args.lines:
            every = [m for m in every if f"{t}:{m.line}" in args.lines]
        if args.max_mutants and len(every) > args.max_mutants:
            every = sorted(random.Random(args.seed).sample(every, args.max_mutants), key=lambda m: m.index)
        mutants[t] = every
    if args.list:
        for t, ms in mutants.items():
            for m in ms:
                print(f"{t}:{m.line} #{m.index} {m.description}")
        return 0

    tests = args.tests or coverage.candidate_tests(targets, root)
    started = time.monotonic()
    workers: list[Worker] = []
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = usage.ru_utime + usage.ru_stime
    spare = frozenset(worker.children())  # not ours to kill (main() may run inside another program)
    worker.become_subreaper()
    # The tests build sysfs trees by the thousand: in memory (tmpfs) that costs a fraction of a disk's time.
    shm = Path("/dev/shm")
    try:
        with tempfile.TemporaryDirectory(prefix="mut-", dir=shm if os.access(shm, os.W_OK) else None) as tmp_name:
            tmp = Path(tmp_name)
            copies = [_copy_tree(root, tmp / f"copy{k}") for k in range(max(1, args.workers))]
            cov = trace(copies[0], tmp, targets, tests, root, spare)
            outcomes, jobs = [], []
            for m in (m for ms in mutants.values() for m in ms):
                covering, hot = cov.plan(m)
                if covering:
                    jobs.append((m, covering, hot))
                else:
                    outcomes.append(Outcome(m, "not covered", 0))
            for k, copy in enumerate(copies):
                workers.append(Worker(k, copy, tmp, tests))
                if not workers[-1].ready:
                    sys.exit(f"mutate: worker {k} did not start:\n{_tail(workers[-1].log)}")
            outcomes += run_all(jobs, cov, workers, root, args.timeout)
            for w in workers:
                w.stop()
    finally:
        for w in workers:
            w.kill()
        worker.reap_orphans(spare)
        worker.become_subreaper(False)
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process the run started, forked children included
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    report.print_report(outcomes, targets, wall, cpu, len(workers), root)
    if args.json:
        report.write_json(args.json, outcomes, targets, wall, cpu, len(workers), root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
