"""tools/mutate.py builds the mutants it promises, each a valid module differing from the original in one place, picks
the tests whose imports reach a target, and judges mutants honestly: on a small project of its own, a mutant a test
pins is killed (in the live functions, in a fresh process for a table, in a `python -m` subprocess), an equivalent
mutant survives, a mutant that hangs is killed by timeout, and a suite that fails unmutated stops it. (The full runs
over the judgement layer are measured by hand: README, Development.)"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # each test runs a mutation run of its own (tests/README.md)

_spec = importlib.util.spec_from_file_location("gpudiag_mutate_tool", REPO / "tools" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mutate  # dataclasses look their module up while the module runs
_spec.loader.exec_module(mutate)

TARGET = "gpudiag/checks/thermal.py"


def test_every_operator_kind_is_generated_for_the_thermal_checks():
    kinds = {m.description.split(" `")[0].split(" ")[0] for m in mutate.list_mutants(TARGET)}
    descriptions = {m.description for m in mutate.list_mutants(TARGET)}
    assert {"flip", "boundary", "condition", "early", "returns", "Status.FAIL"} <= kinds
    assert "flip `>=` → `<`" in descriptions and "boundary `>=` → `>`" in descriptions
    assert "`and` → `or`" in descriptions and "Status.WARN → Status.PASS" in descriptions


def test_each_mutant_compiles_and_changes_exactly_the_code_and_keeps_the_line_numbers():
    text = (REPO / TARGET).read_text()
    original = ast.dump(ast.parse(text))
    mutants = mutate.list_mutants(TARGET)
    sources = [mutate.mutated_source(m) for m in mutants]
    for m, source in zip(mutants, sources):
        assert ast.dump(ast.parse(source)) != original, m
        assert source.count("\n") == text.count("\n"), m  # the splice keeps every later line where it was
        changed = [i + 1 for i, (a, b) in enumerate(zip(text.splitlines(), source.splitlines())) if a != b]
        assert changed and changed[0] >= m.line - 1, m
    assert len(set(sources)) == len(sources)  # no two mutants alike


def test_docstrings_and_fstrings_are_not_mutated():
    lines = {m.line for m in mutate.list_mutants("gpudiag/checks/verdicts.py")}
    assert 1 not in lines  # the module docstring names every action


def test_each_site_knows_the_functions_around_it(tmp_path):
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        LIMIT = 3 if True else 4
        class C:
            FLAG = 1 < 2
            def method(self, x):
                def inner(y):
                    return y > x
                return inner
        def f(a=1 > 0):
            return a
        """))
    scopes = {(m.line, m.description.split(" ")[0]): m.scope for m in mutate.list_mutants("m.py", tmp_path)}
    assert scopes[(1, "condition")] == ()  # module level: runs at import
    assert scopes[(3, "flip")] == ()  # a class body runs at import too
    assert scopes[(6, "flip")] == ("C.method", "C.method.<locals>.inner")
    assert scopes[(7, "returns")] == ("C.method",)
    assert scopes[(8, "flip")] == ()  # a default argument is evaluated where the def is
    assert scopes[(9, "returns")] == ("f",)


def test_candidate_tests_follow_the_imports():
    tests = mutate.candidate_tests([TARGET])
    assert "tests/checks/test_thermal.py" in tests and "tests/checks/test_pinned_tables.py" in tests
    assert "tests/e2e/test_mutate_tool.py" not in tests and "tests/probe/kernel_log/test_reader.py" not in tests


_JUDGE = '''\
"""A judgement module in miniature."""

ACTIONS = {"hot": "drain", "warm": "watch"}  # a table: its mutants run at import, in a fresh process
if len(ACTIONS) != 2:  # flipped, the module no longer imports
    raise RuntimeError("two actions")


def verdict(value, limit=80):
    if value > limit:
        return "fail"
    return "pass"


def clamp(n):
    if n < 0:  # `<` -> `<=` is equivalent: at 0 both return 0
        return 0
    return n


def action(kind):
    return ACTIONS[kind]


def countdown(n):
    while n > 0:  # negated or flipped, countdown(0) never ends
        n -= 1
    return n


def cli_verdict(value):
    if value >= 10:  # only the `python -m pkg` test checks what this returns
        return "high"
    return "low"


class Gauge:
    @staticmethod
    def over(value):
        return value > 5
'''

_TESTS = '''\
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pkg.judge import Gauge, action, clamp, cli_verdict, countdown, verdict

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(601)"])
    yield proc
    proc.kill()
    proc.wait()


def test_verdict_fails_above_the_limit(server):
    assert verdict(81) == "fail" and verdict(80) == "pass"


def test_clamp():
    assert clamp(-3) == 0 and clamp(0) == 0 and clamp(4) == 4


def test_hot_drains():
    assert action("hot") == "drain"


def test_countdown_from_zero():
    assert countdown(0) == 0


def test_gauge():
    assert Gauge.over(9) and not Gauge.over(1)


def test_timing_that_the_trace_upsets():
    assert sys.gettrace() is None  # fails only under the traced run, like a timing test on a loaded machine


def test_the_cli_says_high_from_ten():
    cli_verdict(0)  # the line runs here too, so the trace ties it to this test; the answer checked is the CLI's
    out = subprocess.run([sys.executable, "-m", "pkg", "10"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    assert out.strip() == "high"
'''


def _project(root: Path, tests: str = _TESTS) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "judge.py").write_text(_JUDGE)
    (root / "pkg" / "__main__.py").write_text("import sys\nfrom pkg.judge import cli_verdict\n"
                                             "print(cli_verdict(int(sys.argv[1])))\n")
    (root / "tests").mkdir()
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "conftest.py").write_text("import pkg.judge  # noqa: F401 - as gpudiag's conftest imports the "
                                                "checks\n")
    (root / "tests" / "test_judge.py").write_text(tests)
    return root


def _at(fragment: str, description: str) -> tuple[int, str]:
    return next(i for i, line in enumerate(_JUDGE.splitlines(), 1) if fragment in line), description


def _leftovers() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"time.sleep(601)" in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            pass
    return found


def test_mutants_are_killed_where_a_test_pins_them_and_survive_where_none_can(tmp_path, capsys):
    root = _project(tmp_path / "proj")
    out = tmp_path / "mutants.json"
    assert mutate.main(["--root", str(root), "--files", "pkg/judge.py", "--tests", "tests/test_judge.py",
                        "--timeout", "3", "--workers", "2", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    got = {(r["line"], r["description"]): r["outcome"] for r in data["mutants"]}
    assert got[_at("if value > limit", "boundary `>` → `>=`")] == "killed"  # in the live function
    assert got[_at("if n < 0", "boundary `<` → `<=`")] == "survived"  # equivalent
    assert got[_at("ACTIONS =", 'action "drain" → "watch"')] == "killed"  # a table: fresh process
    assert got[_at("ACTIONS =", 'action "watch" → "none"')] == "survived"  # no test reads "warm"
    assert got[_at("if len(ACTIONS)", "flip `!=` → `==`")] == "killed"  # conftest.py no longer imports
    assert got[_at("while n > 0", "condition negated")] == "timeout"  # countdown(0) never returns
    assert got[_at("if value >= 10", "flip `>=` → `<`")] == "killed"  # only `python -m pkg` sees it: on disk too
    assert got[_at("return value > 5", "returns None")] == "killed"  # a staticmethod
    fresh = {(r["line"], r["description"]): r["fresh_process"] for r in data["mutants"]}
    assert fresh[_at("ACTIONS =", 'action "drain" → "watch"')]
    assert not fresh[_at("if value > limit", "boundary `>` → `>=`")]
    killers = {r["killed_by"] for r in data["mutants"] if r["outcome"] == "killed"}
    assert "tests/test_judge.py::test_hot_drains" in killers
    assert data["files"]["pkg/judge.py"]["mutants"] == len(data["mutants"])
    assert 0 < data["cpu_seconds"] and 0 < data["wall_seconds"]
    assert (root / "pkg" / "judge.py").read_text() == _JUDGE  # the project itself is never touched
    printed = capsys.readouterr().out
    assert f"pkg/judge.py:{_at('if n < 0', '')[0]} boundary `<` → `<=` [survived]" in printed
    assert "overall:" in printed
    assert "1 test(s) failed in the traced run; running them again untraced" in printed
    assert not _leftovers()  # the module fixture's server went down with every child, hung ones included


def test_lines_picks_the_mutants_of_those_lines(tmp_path, capsys):
    root = _project(tmp_path / "proj")
    line = _at("if n < 0", "")[0]
    assert (
        mutate.main(["--root", str(root), "--files", "pkg/judge.py", "--lines", f"pkg/judge.py:{line}", "--list"]) == 0
    )
    listed = capsys.readouterr().out.splitlines()
    assert listed and all(x.startswith(f"pkg/judge.py:{line} ") for x in listed)


def test_a_suite_that_fails_unmutated_stops_the_run(tmp_path):
    root = _project(tmp_path / "proj", _TESTS + "\n\ndef test_broken():\n    assert verdict(1) == 'fail'\n")
    with pytest.raises(SystemExit, match="unmutated tests do not pass"):
        mutate.main(["--root", str(root), "--files", "pkg/judge.py", "--tests", "tests/test_judge.py"])
