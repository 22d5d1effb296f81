"""The scripts under tools/ as modules, for the tests that check what they write (they are not a package)."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.support.paths import REPO

TOOLS = REPO / "tools"


def load_tool(name: str) -> ModuleType:
    """tools/NAME.py, imported afresh."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
