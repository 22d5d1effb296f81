"""tools/lab_as_deployed.py, the lab's measurement of the units' credentials on a real GPU node (issue 33, item 1), run
here on this machine's (GPU-less) node: it needs nothing but the standard library, and it finds an interpreter the
unit's user can run, copying this one and its standard library when it lies out of that user's reach (a pyenv under
/root, mode 0700, with its libpython), or says why none serves.

Needs root (to switch users) and setpriv; skips without them."""

from __future__ import annotations

import ast
import json
import os
import shutil
import sys

import pytest

from tests.support.tools import TOOLS, load_tool

pytestmark = pytest.mark.slow


def _unusable() -> str:
    if os.geteuid() != 0:
        return "switching users needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    return ""


needs_root = pytest.mark.skipif(bool(_unusable()), reason=_unusable() or "usable")


def test_the_tool_imports_the_standard_library_only():
    tree = ast.parse((TOOLS / "lab_as_deployed.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def _run(tool, tmp_path, monkeypatch) -> tuple[int, dict[str, str]]:
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    code = tool.main()
    return code, {p.name: p.read_text() for p in (tmp_path / "out").iterdir()}


@needs_root
def test_an_interpreter_out_of_the_users_reach_is_copied_and_both_runs_compared(tmp_path, monkeypatch):
    tool = load_tool("lab_as_deployed")
    unreachable = tmp_path / "private"  # as /root is: 0700, so `nobody` cannot run what lies below it
    unreachable.mkdir(mode=0o700)
    python = unreachable / "python3"
    python.symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setattr(tool, "_candidates", lambda: [str(python)])
    code, files = _run(tool, tmp_path, monkeypatch)
    assert code == 0, files
    assert files["process.txt"].startswith("interpreter: a copy of ") and "Permission denied" in files["process.txt"]
    assert "Uid:\t65534" in files["process.txt"] and "CapEff:\t0000000400000000" in files["process.txt"]  # SYSLOG
    root, unit = json.loads(files["root.json"]), json.loads(files["unit.json"])
    assert root["results"] and {r["check"] for r in root["results"]} == {r["check"] for r in unit["results"]}
    assert files["differences.txt"].strip()  # "none", or one line per difference


@needs_root
def test_without_an_interpreter_the_user_can_run_it_says_why_for_each(tmp_path, monkeypatch):
    tool = load_tool("lab_as_deployed")
    monkeypatch.setattr(tool, "_candidates", lambda: ["/nonexistent/python3"])

    def cannot(home):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tool, "copy_interpreter", cannot)
    code, files = _run(tool, tmp_path, monkeypatch)
    assert code == 3 and "root.json" not in files
    line = files["differences.txt"]
    assert line.startswith("not compared: no interpreter the unit's user can run")
    assert "/nonexistent/python3" in line and "No space left on device" in line


@needs_root
def test_an_interpreter_without_gpudiags_dependencies_is_said_before_any_user_is_tried(tmp_path, monkeypatch):
    tool = load_tool("lab_as_deployed")
    monkeypatch.setattr(tool, "PROBE", "import gpudiag_has_no_such_dependency")
    code, files = _run(tool, tmp_path, monkeypatch)
    assert code == 3 and "even as root" in files["differences.txt"]
    assert "No module named 'gpudiag_has_no_such_dependency'" in files["differences.txt"]
