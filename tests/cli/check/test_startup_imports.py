"""A level-1 `gpudiag check --direct` imports only what a level-1 check needs: it is timed against `nvidia-smi -q`
(bench/check_vs_nvidia_smi.py), and Python spends most of a cold check importing. The load tests' package
(gpudiag.active) and statistics (with decimal and fractions) are for --level 2|3 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.exporter_node import fake_node, fake_root
from tests.support.paths import REPO

LEVEL_2_ONLY = ("gpudiag.active", "gpudiag.active.options", "statistics", "fractions", "decimal")
RUNNER = ("import json, sys; from tests.support.exporter_node import fake_node; "
          "from tests.support.fakes.fake_nvml import installed; "
          "fake = installed(fake_node(2)); fake.__enter__(); before = set(sys.modules); "
          "from gpudiag.cli.app import main; code = main(sys.argv[1:]); "
          f"print(json.dumps(sorted(m for m in {LEVEL_2_ONLY!r} if m in sys.modules and m not in before)), "
          "file=sys.stderr); sys.exit(code)")


def test_a_level_1_direct_check_imports_nothing_of_the_load_tests(tmp_path):
    fake_root(tmp_path, fake_node(2))
    done = subprocess.run([sys.executable, "-c", RUNNER, "check", "--json", "--direct", "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["collected_by"] == "direct"
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
