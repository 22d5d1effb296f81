"""A level-1 `gpudiag check --direct` imports only what a level-1 check needs: it is timed against `nvidia-smi -q`
(bench/check_vs_nvidia_smi.py), and Python spends most of a cold check importing. The load tests' package
(gpudiag.active), their types (gpudiag.model.active) and the judging of their results (gpudiag.checks.active's
modules but the family's declaration), and statistics (with decimal and fractions) are for --level 2|3 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.exporter_node import fake_node, fake_root
from tests.support.paths import REPO

LEVEL_2_ONLY = (
    "gpudiag.active",
    "gpudiag.active.options",
    "statistics",
    "fractions",
    "decimal",
    "gpudiag.model.active",
    "gpudiag.checks.active.copies",
    "gpudiag.checks.active.memtest",
    "gpudiag.checks.active.stress",
    "gpudiag.checks.active.stress_figures",
    "gpudiag.checks.active.compute",
    "gpudiag.checks.active.links",
)
RUNNER = ("import json, sys; from tests.support.exporter_node import fake_node; "
          "from tests.support.fakes.fake_nvml import installed; "
          "fake = installed(fake_node(2)); fake.__enter__(); "
          "from gpudiag.cli.app import main; code = main(sys.argv[1:]); "
          f"print(json.dumps(sorted(m for m in {LEVEL_2_ONLY!r} if m in sys.modules)), file=sys.stderr); "
          "sys.exit(code)")


def test_a_level_1_direct_check_imports_nothing_of_the_load_tests(tmp_path):
    fake_root(tmp_path, fake_node(2))
    done = subprocess.run([sys.executable, "-c", RUNNER, "check", "--json", "--direct", "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["collected_by"] == "direct"
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


# What the user's own `gpudiag check --direct` (the fast path, gpudiag/cli/check/fastpath.py) must not import on a
# node whose GPUs run no process: what only another path uses (psutil describes GPU processes; socket, the service's
# client; difflib, a misspelt --only; uuid and its platform, an NVLink domain's UUID; calendar, a kernel-log event's
# wall time), beside the load tests' modules above. pynvml itself imports shutil, subprocess and tempfile (ctypes.util).
ONLY_WHEN_USED = ("psutil", "socket", "difflib", "uuid", "platform", "calendar")
FAST_PATH_RUNNER = (
    "import dataclasses, io, json, sys, contextlib\n"
    "from gpudiag.cli.check import fastpath\n"
    "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
    "    code = fastpath.main(sys.argv[1:])\n"
    "compiled = sorted(f'{m.__name__}.{c.__name__}' for m in list(sys.modules.values())\n"
    "                  if getattr(m, '__name__', '').startswith('gpudiag') for c in vars(m).values()\n"
    "                  if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == m.__name__\n"
    "                  and getattr(c.__eq__, '__code__', None) is not None and c.__eq__.__code__.co_filename == "
    "'<string>')\n"
    "print(json.dumps({'code': code, 'collected_by': json.loads(out.getvalue())['collected_by'],\n"
    f"                  'imported': sorted(m for m in {LEVEL_2_ONLY + ONLY_WHEN_USED!r} if m in sys.modules),\n"
    "                  'compiled': compiled}))\n")


def test_the_users_direct_check_imports_only_what_it_uses_and_compiles_no_dataclass_method(tmp_path):
    """No fake library here: the interpreter holds only what the check imported (on a machine without NVML the probe
    says so; the modules are the same)."""
    fake_root(tmp_path, fake_node(2))
    done = subprocess.run([sys.executable, "-c", FAST_PATH_RUNNER, "check", "--json", "--direct", "--root",
                           str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["collected_by"] == "direct" and found["code"] in (0, 1)
    assert found["imported"] == []
    assert found["compiled"] == []  # gpudiag.model.records.dataclass shares __repr__ and __eq__
