"""The layering of docs/architecture.md, for every package and root module of gpudiag: each imports only what
tests/layers.py LAYERS allows (lazy imports count too), no two of them import each other, no modules import each
other in a circle, and nothing above probe/ touches a vendor library. A new package fails here until it has its row
in LAYERS."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

PACKAGE = REPO / "gpudiag"
VENDOR_MODULES = {"pynvml", "amdsmi"}

from tests.layers import LAYERS
from tests.support.registries import BY_NAME


def unit_of(path: Path) -> str:
    """The package (or root module) a file belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["gpudiag", *parts])


SOURCES = sorted(PACKAGE.rglob("*.py"))
MODULES = {module_of(path): path for path in SOURCES}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(path: Path, type_checking: bool = True) -> set[str]:
    """The gpudiag modules a file imports, at any depth (lazy imports count too), and `vendor:NAME` for a vendor
    library. `from gpudiag.x import y` is gpudiag.x.y where y is a module, else gpudiag.x. With type_checking=False,
    leaving out what only a type checker imports (`if TYPE_CHECKING:`), which never runs."""
    found = set()
    tree = ast.parse(path.read_text())
    type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                 for stmt in block.body for n in ast.walk(stmt)} if not type_checking else set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                     for alias in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "gpudiag":
                while name not in MODULES and "." in name:  # `import gpudiag.x.y as z`, a name of a module
                    name = name.rpartition(".")[0]
                found.add(name)
            elif top in VENDOR_MODULES:
                found.add(f"vendor:{top}")
    return found


def unit_of_module(module: str) -> str:
    return "__init__" if module == "gpudiag" else module.split(".")[1]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layer_table(path):
    unit = unit_of(path)
    assert unit in LAYERS, f"{unit} has no row in tests/layers.py LAYERS: say what it may import"
    imported = {unit_of_module(m) for m in imported_modules(path) if not m.startswith("vendor:")} - {unit}
    assert imported <= LAYERS[unit], f"{unit} may not import {sorted(imported - LAYERS[unit])}"


def test_the_layer_table_has_no_cycle_and_names_only_what_exists():
    units = {unit_of(path) for path in SOURCES} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    assert set(LAYERS) == units, "LAYERS and the packages of gpudiag/ differ"
    for unit, allowed in LAYERS.items():
        assert allowed <= set(LAYERS) and unit not in allowed
        for other in allowed:
            assert unit not in LAYERS[other], f"{unit} and {other} may import each other"
    assert not _cycles({unit: set(allowed) for unit, allowed in LAYERS.items()})


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module → the modules it imports when it runs: by import statement, and by name where a registry imports the
    modules its index lists (tests/support/registries.py BY_NAME)."""
    graph = {module: {m for m in imported_modules(path, type_checking=False)
                      if not m.startswith("vendor:") and m != module}
             for module, path in MODULES.items()}
    for registry, targets in BY_NAME.items():
        graph[registry] |= targets
    return graph


def _calls_import_module(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
               for node in ast.walk(tree))


def test_every_import_by_name_is_a_registry_the_layering_sees():
    by_name = {module for module, path in MODULES.items() if _calls_import_module(path)}
    assert by_name == set(BY_NAME), "list the module's by-name imports in tests/support/registries.py BY_NAME"
    for registry, targets in BY_NAME.items():
        assert targets <= set(MODULES), f"{registry} imports by name what is not a module: {targets - set(MODULES)}"
        for target in targets:
            assert unit_of_module(target) == unit_of_module(registry) or unit_of_module(target) in LAYERS[
                unit_of_module(registry)], f"{registry} imports {target} by name across the layers"


def test_the_by_name_edges_close_no_circle_today():
    # The two circles the registries hid before issue 34 item 2: expect/ <-> expect/network_settings.py and
    # exporter/catalog.py -> metrics_network.py -> families.py -> catalog.py.
    graph = module_graph()
    assert "gpudiag.expect.network_settings" in graph["gpudiag.expect"]
    assert "gpudiag.exporter.metrics_network" in graph["gpudiag.exporter.metric_modules"]
    assert not any("gpudiag.expect" in component or "gpudiag.exporter.catalog" in component
                   for component in _cycles(graph))


def test_no_two_packages_import_each_other():
    imports: dict[str, set[str]] = {}
    for module, targets in module_graph().items():
        imports.setdefault(unit_of_module(module), set()).update(unit_of_module(t) for t in targets)
    pairs = sorted({tuple(sorted((a, b))) for a, targets in imports.items() for b in targets
                    if a != b and a in imports.get(b, set())})
    assert pairs == []


def test_no_modules_import_each_other_in_a_circle():
    assert _cycles(module_graph()) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_probe_layer_touches_vendor_libraries(path):
    vendor = {name for name in imported_modules(path) if name.startswith("vendor:")}
    if vendor:
        assert unit_of(path) == "probe", f"{path.name} imports {sorted(vendor)}"


def test_the_model_holds_the_probe_vocabulary_that_profiles_name():
    # Loading a profile imports no probe code (no psutil): the names it is checked against live in model/.
    from gpudiag.model import vocabulary
    from gpudiag.probe import host
    from gpudiag.probe.kernel_log import amdgpu as kernel_log_amdgpu

    assert vocabulary.AMDGPU_EVENT_KINDS == kernel_log_amdgpu.AMDGPU_EVENT_KINDS
    assert host.MODULES_OF_INTEREST is vocabulary.MODULES_OF_INTEREST
