"""The registry indexes (gpudiag/checks/index.py, gpudiag/probe/index.py, gpudiag/expect/index.py) are what
tools/gen_registry_index.py finds walking the packages: a family's modules are still found by their names, but the
walk happens when the tool runs, not at every start of a check (issue 36, item 9)."""

from __future__ import annotations

import sys

from gpudiag import checks, expect
from gpudiag.probe import collector
from tests.support.tools import load_tool


def tool():
    return load_tool("gen_registry_index")


def test_the_indexes_are_what_a_walk_of_the_packages_finds(capsys):
    assert tool().main(["--check"]) == 0, capsys.readouterr().err


def test_the_registry_reads_its_families_from_the_index():
    from gpudiag.checks.index import FAMILY_MODULES

    assert sorted({family.name for family in checks.DECLARED}) == sorted(
        {family.name for name in FAMILY_MODULES for family in _declared(sys.modules[name])})
    assert collector.FAMILY_PARTS == tool().probe_parts()
    assert [kind.__module__ for kind in expect.FAMILY_SETTINGS] == tool().settings_modules()


def _declared(module) -> tuple:
    return getattr(module, "FAMILIES", None) or (module.FAMILY,)


def test_a_new_family_module_is_found_and_a_helper_is_not(tmp_path, monkeypatch):
    package = tmp_path / "toy_checks"
    (package / "sub").mkdir(parents=True)
    for name, text in {"__init__.py": "", "declares.py": "FAMILY = 'toy'\n", "helper.py": "HELPS = 1\n",
                       "sub/__init__.py": "", "sub/family.py": "FAMILIES = ('a', 'b')\n"}.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tool().family_modules([str(package)], "toy_checks") == ["toy_checks.declares", "toy_checks.sub.family"]


def test_a_stale_index_is_found_and_rewritten(tmp_path, monkeypatch, capsys):
    gen = tool()
    index = tmp_path / "index.py"
    index.write_text(gen.checks_index().replace("'gpudiag.checks.pcie',\n", ""))  # a family left out
    monkeypatch.setattr(gen, "INDEXES", {index: gen.checks_index})
    monkeypatch.setattr(gen, "REPO", tmp_path)
    assert gen.main(["--check"]) == 1 and "stale: index.py" in capsys.readouterr().err
    assert gen.main([]) == 0 and index.read_text() == gen.checks_index()
