#!/usr/bin/env python3
"""Mutation testing for gpudiag's judgement layer: would the suite notice a wrong verdict?

Stdlib only. For each target file it builds AST mutants, one change each:
- comparison flips (`<` ↔ `>=`, `>` ↔ `<=`, `==` ↔ `!=`, `in` ↔ `not in`, `is` ↔ `is not`) and boundary shifts
  (`<` → `<=`, `>` → `>=`, `<=` → `<`, `>=` → `>`);
- `and` ↔ `or`; a negated `if` / `while` / conditional-expression test;
- severity swaps (`Status.FAIL` → WARN, WARN → PASS, PASS → FAIL, UNKNOWN → PASS, SKIP → FAIL) and action
  swaps (the automation actions "watch", "drain", "reset", "reboot", "rma", "none" each replaced by a neighbour);
- early returns removed (an `if` whose body ends in `return` deleted) and returned values replaced by None.

Each mutant runs against the tests that executed its line: one traced run of the candidate tests (the test files
whose imports reach the target, or --tests) records which tests execute which lines; a mutant on a line no test
runs survives as "not covered". The tests run in a private copy of the tree (the worktree is never modified), fastest
first with -x, under a per-mutant timeout (a timeout counts as killed, listed apart). It prints the score per file and
every survivor with its line, for reading: some survivors are equivalent mutants (no behaviour can tell them apart).

    python3 tools/mutate.py --files gpudiag/checks/verdicts.py --max-mutants 40
    python3 tools/mutate.py --files gpudiag/checks/thermal.py --tests tests/test_checks_thermal.py
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parent.parent
JUDGEMENT_LAYER = ("gpudiag/checks/*.py", "gpudiag/probe/kernel_log_events.py", "gpudiag/exporter/families.py")

_COMPARE_FLIPS = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BOUNDARY = {ast.Lt: ast.LtE, ast.Gt: ast.GtE, ast.LtE: ast.Lt, ast.GtE: ast.Gt}
_SEVERITY_SWAPS = {"FAIL": "WARN", "WARN": "PASS", "PASS": "FAIL", "UNKNOWN": "PASS", "SKIP": "FAIL"}
_ACTION_SWAPS = {"none": "watch", "watch": "none", "drain": "watch", "reset": "drain", "reboot": "reset",
                 "rma": "reboot"}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
           ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


@dataclass(frozen=True)
class Mutant:
    path: str  # repository-relative
    index: int  # the index-th mutation site of this file, in visiting order
    line: int
    description: str


# ---------------------------------------------------------------------------------------------------------------
# Mutation sites

class _Sites(ast.NodeTransformer):
    """Visits every mutation site in order; applies the one numbered `apply` (or none, when listing)."""

    def __init__(self, apply: Optional[int] = None) -> None:
        self.apply = apply
        self.found: list[tuple[int, str]] = []  # (line, description) per site

    def _site(self, node: ast.AST, description: str) -> bool:
        self.found.append((getattr(node, "lineno", 0), description))
        return len(self.found) - 1 == self.apply

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            for table, kind in ((_COMPARE_FLIPS, "flip"), (_BOUNDARY, "boundary")):
                new = table.get(type(op))
                if new is not None and self._site(node, f"{kind} `{_SYMBOL[type(op)]}` → `{_SYMBOL[new]}`"):
                    node.ops[i] = new()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"`{'and' if isinstance(node.op, ast.And) else 'or'}` → "
                            f"`{'or' if other is ast.Or else 'and'}`"):
            node.op = other()
        return node

    def _negate(self, node: ast.AST) -> None:
        if self._site(node.test, "condition negated"):
            node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)

    def visit_If(self, node: ast.If) -> Optional[ast.AST]:
        self.generic_visit(node)
        self._negate(node)
        if node.body and isinstance(node.body[-1], ast.Return) and self._site(node, "early return removed"):
            return ast.Pass() if not node.orelse else node.orelse  # the guard and its return go; else stays
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        self.generic_visit(node)
        self._negate(node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        self._negate(node)
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            if self._site(node, "returns None"):
                node.value = ast.Constant(None)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "Status" and node.attr in _SEVERITY_SWAPS:
            new = _SEVERITY_SWAPS[node.attr]
            if self._site(node, f"Status.{node.attr} → Status.{new}"):
                node.attr = new
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and node.value in _ACTION_SWAPS:
            new = _ACTION_SWAPS[node.value]
            if self._site(node, f'action "{node.value}" → "{new}"'):
                return ast.copy_location(ast.Constant(new), node)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node  # f-string parts are text, not actions

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node  # docstrings
        return self.generic_visit(node)


def list_mutants(path: str) -> list[Mutant]:
    sites = _Sites()
    sites.visit(ast.parse((REPO / path).read_text()))
    return [Mutant(path, i, line, text) for i, (line, text) in enumerate(sites.found)]


def mutated_source(mutant: Mutant) -> str:
    tree = ast.parse((REPO / mutant.path).read_text())
    sites = _Sites(apply=mutant.index)
    tree = ast.fix_missing_locations(sites.visit(tree))
    return ast.unparse(tree) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Which tests run which lines

def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@lru_cache(maxsize=None)
def _imports(path: Path) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return frozenset(names)


def candidate_tests(targets: list[str]) -> list[str]:
    """Test files whose imports (through gpudiag and tests helpers) reach a target module."""
    files = {_module_name(p): p for p in [*REPO.glob("gpudiag/**/*.py"), *REPO.glob("tests/**/*.py")]}
    graph = {name: {i for i in _imports(p) if i in files} for name, p in files.items()}
    for name in list(graph):  # a package import runs its __init__, and a submodule import its parents
        parts = name.split(".")
        graph[name] |= {".".join(parts[:k]) for k in range(1, len(parts)) if ".".join(parts[:k]) in files}
    wanted = {_module_name(REPO / t) for t in targets}
    reach: dict[str, bool] = {}

    def reaches(name: str, stack: frozenset = frozenset()) -> bool:
        if name in reach:
            return reach[name]
        hit = name in wanted or any(reaches(dep, stack | {name}) for dep in graph[name] if dep not in stack)
        if not stack:
            reach[name] = hit
        return hit

    return sorted(str(p.relative_to(REPO)) for n, p in files.items()
                  if p.name.startswith("test_") and p.parent.name == "tests" and reaches(n))


_TRACE_PLUGIN = '''
import json, os, sys, threading, time
import pytest

_TARGETS = set(json.loads(os.environ["MUTATE_TARGETS"]))
_lines = {}
_current = None
_out = {}


def _local(frame, event, arg):
    if event == "line":
        _current.add((frame.f_code.co_filename, frame.f_lineno))
    return _local


def _global(frame, event, arg):
    if frame.f_code.co_filename in _TARGETS:
        _current.add((frame.f_code.co_filename, frame.f_lineno))
        return _local
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = set()
    sys.settrace(_global)
    threading.settrace(_global)
    start = time.monotonic()
    yield
    sys.settrace(None)
    threading.settrace(None)
    _out[item.nodeid] = {"seconds": time.monotonic() - start, "lines": sorted(_current)}


def pytest_sessionfinish(session):
    with open(os.environ["MUTATE_TRACE_OUT"], "w") as f:
        json.dump(_out, f)
'''


@lru_cache(maxsize=None)
def _function_lines(path: Path) -> frozenset[int]:
    """Lines inside function bodies; every other line runs once, when the module is imported."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)


@dataclass
class Coverage:
    by_test: dict[str, dict] = field(default_factory=dict)

    def tests_for(self, repo_path: str, copy: Path, line: int) -> list[str]:
        """The tests that ran the line. A module-level line (a table, a constant) runs at import, outside any test:
        it gets every test that ran any line of the file, and every test in a test file that imports the module."""
        target = str(copy / repo_path)
        module = _module_name(REPO / repo_path)
        importers = {f for f in {t.split("::")[0] for t in self.by_test}
                     if any(i == module or i.startswith(module + ".") for i in _imports(REPO / f))}
        if line in _function_lines(REPO / repo_path):
            hits = [t for t, info in self.by_test.items() if [target, line] in info["lines"]]
        else:
            hits = [t for t, info in self.by_test.items()
                    if t.split("::")[0] in importers or any(f == target for f, _ in info["lines"])]
        # The module's own tests first, then fastest first: with -x a killed mutant ends early.
        return sorted(hits, key=lambda t: (t.split("::")[0] not in importers, self.by_test[t]["seconds"]))


def _env(copy: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1", **extra}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(copy: Path, args: list[str], env: dict[str, str], timeout: float) -> tuple[Optional[int], float]:
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header",
                             "-o", "addopts=", *args], cwd=copy, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=timeout), time.monotonic() - start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None, time.monotonic() - start


def trace(copy: Path, targets: list[str], tests: list[str]) -> Coverage:
    (copy / "_mutate_trace.py").write_text(_TRACE_PLUGIN)
    out = copy / "_mutate_trace.json"
    env = _env(copy, MUTATE_TARGETS=json.dumps([str(copy / t) for t in targets]), MUTATE_TRACE_OUT=str(out))
    code, seconds = _pytest(copy, ["-p", "_mutate_trace", *tests], env, timeout=3600)
    if code != 0:
        sys.exit(f"mutate: the unmutated tests do not pass (pytest exit {code}); fix them first")
    print(f"traced {len(tests)} test file(s) in {seconds:.0f} s", flush=True)
    data = json.loads(out.read_text())
    return Coverage({test: {"seconds": info["seconds"], "lines": [list(x) for x in info["lines"]]}
                     for test, info in data.items()})


# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    mutant: Mutant
    result: str  # killed | timeout | survived | not covered
    tests: int
    seconds: float


def run_mutant(copy: Path, mutant: Mutant, coverage: Coverage, timeout: float) -> Outcome:
    target = copy / mutant.path
    tests = coverage.tests_for(mutant.path, copy, mutant.line)
    if not tests:
        return Outcome(mutant, "not covered", 0, 0.0)
    original = target.read_text()
    try:
        target.write_text(mutated_source(mutant))
        for stale in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            stale.unlink()
        code, seconds = _pytest(copy, tests, _env(copy), timeout)
    finally:
        target.write_text(original)
    result = "timeout" if code is None else "survived" if code == 0 else "killed"
    return Outcome(mutant, result, len(tests), seconds)


def _copy_tree(dest: Path) -> Path:
    """The project as a clone has it (git's tracked and not-ignored files, top-level entries copied whole), so that
    every test that runs in the checkout runs in the copy (bench/, .ci/ and the shipped links included)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".pytest_cache", "*.egg-info")
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True).stdout.decode().split("\0")
        names = sorted({name.split("/")[0] for name in listed if name})
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what the project is made of
        names = ["gpudiag", "tests", "tools", "bench", "monitoring", "contrib", "systemd", "docs", ".ci",
                 "README.md", "pyproject.toml"]
    for name in names:
        src = REPO / name
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dest / name, ignore=ignore, symlinks=True)
        elif src.exists():
            shutil.copy2(src, dest / name, follow_symlinks=False)
    return dest


def _expand(patterns: list[str]) -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(str(p.relative_to(REPO)) for p in REPO.glob(pattern)) if any(c in pattern for c in "*?[") \
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
    parser.add_argument("--timeout", type=float, default=0, help="seconds per mutant (default: 3x the traced "
                                                                 "run time of its tests + 10 s)")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    args = parser.parse_args(argv)

    targets = _expand(args.files)
    for t in targets:
        if not (REPO / t).is_file():
            parser.error(f"no such file: {t}")
    mutants: dict[str, list[Mutant]] = {}
    for t in targets:
        every = list_mutants(t)
        if args.max_mutants and len(every) > args.max_mutants:
            every = sorted(random.Random(args.seed).sample(every, args.max_mutants), key=lambda m: m.index)
        mutants[t] = every
    if args.list:
        for t, ms in mutants.items():
            for m in ms:
                print(f"{t}:{m.line} #{m.index} {m.description}")
        return 0

    tests = args.tests or candidate_tests(targets)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpudiag-mutate-") as tmp:
        copy = _copy_tree(Path(tmp))
        coverage = trace(copy, targets, tests)
        outcomes: list[Outcome] = []
        for t, ms in mutants.items():
            for m in ms:
                budget = args.timeout or 10 + 3 * sum(coverage.by_test[x]["seconds"]
                                                      for x in coverage.tests_for(t, copy, m.line))
                outcome = run_mutant(copy, m, coverage, budget)
                outcomes.append(outcome)
                print(f"  {t}:{m.line} {m.description}: {outcome.result} ({outcome.tests} tests, "
                      f"{outcome.seconds:.1f} s)", flush=True)

    print(f"\nmutation score ({len(outcomes)} mutants, {time.monotonic() - started:.0f} s; timeouts count as killed)")
    total_killed = 0
    for t in mutants:
        mine = [o for o in outcomes if o.mutant.path == t]
        killed = sum(o.result in ("killed", "timeout") for o in mine)
        total_killed += killed
        score = 100 * killed / len(mine) if mine else 100.0
        print(f"  {t}: {score:.1f} % ({killed}/{len(mine)} killed, "
              f"{sum(o.result == 'timeout' for o in mine)} by timeout)")
    if outcomes:
        print(f"  overall: {100 * total_killed / len(outcomes):.1f} % ({total_killed}/{len(outcomes)})")
    survivors = [o for o in outcomes if o.result in ("survived", "not covered")]
    if survivors:
        print("\nsurvivors (equivalent mutants among them need a reason, the rest a test):")
        for o in survivors:
            source = (REPO / o.mutant.path).read_text().splitlines()[o.mutant.line - 1].strip()
            print(f"  {o.mutant.path}:{o.mutant.line} {o.mutant.description} [{o.result}]  {source[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
