"""Which tests can see a mutant: the candidate test files, and per line the tests that ran it (one traced run)."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from mutation.sites import Mutant, body_lines


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
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
    if path.name == "index.py":  # a registry index (tools/gen_registry_index.py) names the modules its package
        # imports by name: each is an import of the package that reads the index
        names.update(node.value for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("gpudiag."))
    return frozenset(names)


def candidate_tests(targets: list[str], root: Path) -> list[str]:
    """Test files whose imports (through the package and the tests' helpers) reach a target module."""
    files = {module_name(p, root): p for p in [*root.glob("gpudiag/**/*.py"), *root.glob("tests/**/*.py")]}
    graph = {name: {i for i in _imports(p) if i in files} for name, p in files.items()}
    for name in list(graph):  # a package import runs its __init__, and a submodule import its parents
        parts = name.split(".")
        graph[name] |= {".".join(parts[:k]) for k in range(1, len(parts)) if ".".join(parts[:k]) in files}
        if files[name].name == "__init__.py" and "pkgutil" in _imports(files[name]):
            # a package that finds its modules by name (the check families, probe parts, metric modules:
            # docs/adding-a-check-family.md) imports them without naming them, its sub-packages' too
            graph[name] |= {other for other in files if other.startswith(name + ".")}
    reach = {module_name(root / t, root) for t in targets}
    changed = True
    while changed:  # the modules that reach a target: grown to a fixed point
        grown = {name for name, deps in graph.items() if name not in reach and deps & reach}
        reach |= grown
        changed = bool(grown)
    return sorted(str(p.relative_to(root)) for n, p in files.items()
                  if p.name.startswith("test_") and n.startswith("tests.") and n in reach)


@dataclass
class Coverage:
    seconds: dict[str, float]  # node ID → traced seconds
    lines: dict[str, dict[str, set[int]]]  # node ID → file → lines it ran
    at_import: dict[str, set[int]]  # file → lines run outside any test (imports, collection)
    root: Path

    @classmethod
    def load(cls, path: Path, root: Path) -> "Coverage":
        data = json.loads(path.read_text())
        return cls({t: info["seconds"] for t, info in data["tests"].items()},
                   {t: {f: set(ls) for f, ls in info["lines"].items()} for t, info in data["tests"].items()},
                   {f: set(ls) for f, ls in data["at_import"].items()}, root)

    def plan(self, mutant: Mutant) -> tuple[list[str], bool]:
        """The tests that can see the mutant, and whether it can be put into live functions ("hot"): it must sit
        in a function body that never ran at import. A line that runs at import (a table, a constant, a function
        called to build one) gets every test that ran any line of the file and every test of a test file that
        imports the module: what it changes is read later, by code no trace ties to the line."""
        rel = mutant.path
        if mutant.scope:
            body = body_lines(rel, self.root).get(mutant.scope[0], range(0))
            if not self.at_import.get(rel, set()) & set(body):
                return [t for t, files in self.lines.items() if mutant.line in files.get(rel, ())], True
        module = module_name(self.root / rel, self.root)
        importers = {f for f in {t.split("::")[0] for t in self.lines}
                     if any(i == module or i.startswith(module + ".") for i in _imports(self.root / f))}
        return [t for t, files in self.lines.items() if t.split("::")[0] in importers or rel in files], False
