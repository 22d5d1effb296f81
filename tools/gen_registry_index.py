#!/usr/bin/env python3
"""Write the registry indexes: the modules that gpudiag finds by their names (docs/adding-a-check-family.md), listed
once here instead of found by walking the packages at every start of a `gpudiag check` (issue 36, item 9).

- gpudiag/checks/index.py: the modules of gpudiag.checks (sub-packages included) that declare a check family
  (FAMILY or FAMILIES), in the order a walk of the package finds them. A check run imports these and what they
  import: a module that declares nothing (the load tests' judging, checks/active/copies.py) is imported only by the
  code that uses it.
- gpudiag/probe/index.py: the probe parts families add, a sub-package of gpudiag.probe with a module part.py.
- gpudiag/expect/index.py: the families' profile settings, the modules <family>_settings.py of gpudiag.expect.
- gpudiag/exporter/index.py: the families' metric modules, metrics_<family>.py of gpudiag.exporter.
- gpudiag/probe/kernel_log/index.py: the kernel-log record kinds families add, a module kernel_log.py beside a probe
  part (gpudiag/probe/<part>/kernel_log.py), found by the event reader (issue 34, item 2).

    python3 tools/gen_registry_index.py           # rewrite them
    python3 tools/gen_registry_index.py --check   # exit 1 naming the stale ones (tests/test_registry_index.py)
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HEADER = "# Written by tools/gen_registry_index.py from the package's modules: do not edit, run it again.\n"


def family_modules(path: Optional[list[str]] = None, package: str = "gpudiag.checks") -> list[str]:
    """The modules of the package (gpudiag.checks) that declare a family, in walk order (importing each to look)."""
    if path is None:
        path = importlib.import_module(package).__path__
    found = []
    for info in pkgutil.walk_packages(path, f"{package}."):
        module = importlib.import_module(info.name)
        if getattr(module, "FAMILIES", None) or hasattr(module, "FAMILY"):
            found.append(info.name)
    return found


def probe_parts(path: Optional[list[str]] = None, package: str = "gpudiag.probe") -> dict[str, str]:
    """Part name -> module: each sub-package of the package (gpudiag.probe) with a module part.py (nothing imported
    but the package itself)."""
    if path is None:
        path = importlib.import_module(package).__path__
    return {info.name: f"{package}.{info.name}.part" for info in pkgutil.iter_modules(path)
            if info.ispkg and any(sub.name == "part" for sub in
                                  pkgutil.iter_modules([os.path.join(info.module_finder.path, info.name)]))}


def settings_modules() -> list[str]:
    """The modules <family>_settings.py of gpudiag.expect, in name order."""
    import gpudiag.expect as package

    return sorted(f"gpudiag.expect.{info.name}" for info in pkgutil.iter_modules(package.__path__)
                  if info.name.endswith("_settings"))


def metric_modules(path: Optional[list[str]] = None, package: str = "gpudiag.exporter") -> list[str]:
    """The modules metrics_<family>.py of the package (gpudiag.exporter), in name order (none imported)."""
    if path is None:
        path = [str(REPO / "gpudiag" / "exporter")]
    return sorted(f"{package}.{info.name}" for info in pkgutil.iter_modules(path) if info.name.startswith("metrics_"))


def record_modules(path: Optional[list[str]] = None, package: str = "gpudiag.probe") -> list[str]:
    """The modules kernel_log.py of the package's sub-packages (gpudiag/probe/<part>/kernel_log.py), in name order:
    the kernel-log record kinds a family adds (the kernel_log sub-package itself is the reader, not one of them)."""
    if path is None:
        path = [str(REPO / "gpudiag" / "probe")]
    return sorted(f"{package}.{info.name}.kernel_log" for info in pkgutil.iter_modules(path)
                  if info.ispkg and info.name != "kernel_log"
                  and (Path(info.module_finder.path) / info.name / "kernel_log.py").exists())


def _tuple(name: str, items: list[str]) -> str:
    return f"{name} = (\n" + "".join(f"    {item!r},\n" for item in items) + ")\n"


def checks_index() -> str:
    return ('"""The modules of gpudiag.checks that declare a check family, for the registry (__init__.py) to import '
            'by\n'
            'name: written by tools/gen_registry_index.py, checked current by tests/test_registry_index.py."""\n\n'
            + HEADER + _tuple("FAMILY_MODULES", family_modules()))


def probe_index() -> str:
    parts = "".join(f"    {name!r}: {module!r},\n" for name, module in probe_parts().items())
    return ('"""The probe parts families add (a sub-package of gpudiag.probe with a module part.py), for the '
            'collector\n'
            '(collector.py) to import by name: written by tools/gen_registry_index.py, checked current by\n'
            'tests/test_registry_index.py."""\n\n' + HEADER + "FAMILY_PARTS = {\n" + parts + "}\n")


def expect_index() -> str:
    return ('"""The families\' profile settings (the modules <family>_settings.py of gpudiag.expect), for __init__.py '
            'to\n'
            'import by name: written by tools/gen_registry_index.py, checked current by '
            'tests/test_registry_index.py."""\n'
            "\n" + HEADER + _tuple("SETTINGS_MODULES", settings_modules()))


def exporter_index() -> str:
    return ('"""The families\' metric modules (metrics_<family>.py of gpudiag.exporter), for metric_modules.py to\n'
            'import by name: written by tools/gen_registry_index.py, checked current by\n'
            'tests/test_registry_index.py."""\n\n'
            + HEADER + _tuple("METRIC_MODULES", metric_modules()))


def kernel_log_index() -> str:
    return ('"""The kernel-log record kinds families add (gpudiag/probe/<part>/kernel_log.py), for events.py to\n'
            'import by name: written by tools/gen_registry_index.py, checked current by\n'
            'tests/test_registry_index.py."""\n\n'
            + HEADER + _tuple("RECORD_MODULES", record_modules()))


INDEXES = {REPO / "gpudiag" / "checks" / "index.py": checks_index,
           REPO / "gpudiag" / "probe" / "index.py": probe_index,
           REPO / "gpudiag" / "expect" / "index.py": expect_index,
           REPO / "gpudiag" / "exporter" / "index.py": exporter_index,
           REPO / "gpudiag" / "probe" / "kernel_log" / "index.py": kernel_log_index}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if an index is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, make in INDEXES.items():
        text = make()
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(REPO)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        print(f"stale: {', '.join(stale)}: run tools/gen_registry_index.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
