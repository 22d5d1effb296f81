"""tools/mutate.py builds the mutants it promises, each a valid module differing from the original in one place,
and picks the tests whose imports reach a target (the full runs are measured by hand: README, Development)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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


def test_each_mutant_compiles_and_changes_exactly_the_code():
    original = ast.dump(ast.parse((REPO / TARGET).read_text()))
    mutants = mutate.list_mutants(TARGET)
    sources = [mutate.mutated_source(m) for m in mutants]
    for m, source in zip(mutants, sources):
        assert ast.dump(ast.parse(source)) != original, m
    assert len(set(sources)) == len(sources)  # no two mutants alike


def test_docstrings_and_fstrings_are_not_mutated():
    lines = {m.line for m in mutate.list_mutants("gpudiag/checks/verdicts.py")}
    assert 1 not in lines  # the module docstring names every action


def test_candidate_tests_follow_the_imports():
    tests = mutate.candidate_tests([TARGET])
    assert "tests/test_checks_thermal.py" in tests and "tests/test_pinned_tables.py" in tests
    assert "tests/test_mutate_tool.py" not in tests and "tests/test_kernel_log.py" not in tests
