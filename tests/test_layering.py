"""The layering of docs/architecture.md: imports run downward only (cli → report | exporter → checks → probe → model),
and nothing above probe/ touches a vendor library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpudiag"
VENDOR_MODULES = {"pynvml", "amdsmi"}

# What each layer may import from gpudiag. Shared leaf helpers (model, fileio) are allowed everywhere.
ALLOWED = {
    "model": {"model"},
    "probe": {"model", "probe", "fileio"},
    "active": {"model", "probe", "active"},  # load tests: probe-level code that drives the vendor runtimes
    "checks": {"model", "checks", "expect", "baseline"},
    "expect": {"model", "expect", "baseline"},
    "baseline": {"model", "baseline", "fileio"},  # golden node facts: data an expectation is checked against
    "report": {"model", "report", "checks", "expect", "exitcodes"},
    "recording": {"model", "fileio", "recording"},
}


def layer_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def gpudiag_imports(path: Path) -> set[str]:
    """The top-level gpudiag layers a module imports (at any depth: lazy imports count too)."""
    layers = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names if node.module == "gpudiag"]
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpudiag" and len(parts) > 1:
                layers.add(parts[1])
            elif parts[0] in VENDOR_MODULES:
                layers.add(f"vendor:{parts[0]}")
    return layers


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if layer_of(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_downward_only(path):
    layer = layer_of(path)
    imported = {name for name in gpudiag_imports(path) if not name.startswith("vendor:")}
    allowed = ALLOWED[layer] | {"__version__"}
    assert imported <= allowed, f"{layer} may not import {sorted(imported - allowed)}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_probe_layer_touches_vendor_libraries(path):
    vendor = {name for name in gpudiag_imports(path) if name.startswith("vendor:")}
    if vendor:
        assert layer_of(path) == "probe", f"{path.name} imports {sorted(vendor)}"
