"""BY_NAME: every place gpudiag imports a module by its name (importlib), the registry's module -> where the names it
imports come from. tests/test_layering.py adds these edges to the import graph, so that a circle through a registry
(a family's module importing back the registry that finds it) shows as plainly as one through an import statement
(issue 34, item 2); a new importlib call that is not listed here fails there."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from tests.support.paths import REPO


def _listed(index: str, name: str) -> set[str]:
    """The module names an index module (written by tools/gen_registry_index.py) lists under `name`."""
    value = getattr(importlib.import_module(index), name)
    return set(value.values() if isinstance(value, dict) else value)


def _judged_by(path: Path, package: str) -> set[str]:
    """checks/active/family.py's `_judged_by(check, "module", "function")`: the modules it imports when they run."""
    tree = ast.parse(path.read_text())
    return {f"{package}.{call.args[1].value}" for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "_judged_by"
            and len(call.args) > 1 and isinstance(call.args[1], ast.Constant)}


# registry module -> how to read the modules it imports by name
REGISTRIES = {
    "gpudiag.checks": lambda: _listed("gpudiag.checks.index", "FAMILY_MODULES"),
    "gpudiag.probe.collector": lambda: _listed("gpudiag.probe.index", "FAMILY_PARTS"),
    # the split collection's join, and the forked check's parent importing them before the join
    "gpudiag.probe.split": lambda: _listed("gpudiag.probe.index", "FAMILY_PARTS"),
    "gpudiag.cli.check.early_collect": lambda: _listed("gpudiag.probe.index", "FAMILY_PARTS"),
    "gpudiag.expect": lambda: _listed("gpudiag.expect.index", "SETTINGS_MODULES"),
    "gpudiag.exporter.metric_modules": lambda: _listed("gpudiag.exporter.index", "METRIC_MODULES"),
    "gpudiag.probe.kernel_log.events": lambda: _listed("gpudiag.probe.kernel_log.index", "RECORD_MODULES"),
    "gpudiag.checks.active.family": lambda: _judged_by(REPO / "gpudiag/checks/active/family.py",
                                                       "gpudiag.checks.active"),
    # a vendor library, not a gpudiag module: no edge, listed so that every importlib call is accounted for
    "gpudiag.probe.amdsmi.backend": set,
}


def by_name() -> dict[str, set[str]]:
    """Registry module -> the gpudiag modules it imports by name."""
    return {module: set(read()) for module, read in REGISTRIES.items()}


BY_NAME = by_name()
