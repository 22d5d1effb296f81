"""A forked `check --direct` imports what writing its report needs while it waits for its children
(report/verdict.py `ready_to_print`, gpudiag/cli/check/direct.py): afterwards writing the report imports nothing,
in every format."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO

# In a fresh interpreter (this one has imported every renderer already): the checks and the expectations first, as
# the check has by then; then ready_to_print; then the modules print_verdict still imports, over a node snapshot.
PROGRAM = """
import io, json, sys
from gpudiag.checks import run_checks
from gpudiag.cli.shared.node_collect import expectations
from gpudiag.report.verdict import print_verdict, ready_to_print
from tests.support.snapshots import nvidia_h200_node
fmt = sys.argv[1]
snapshot, expected = nvidia_h200_node(), expectations(None, [], None)
ready_to_print(fmt)
before, out = set(sys.modules), sys.stdout
sys.stdout = io.StringIO()
print_verdict(snapshot, expected, [], [], [], "direct", fmt, False, False)
sys.stdout = out
print(json.dumps(sorted(name for name in set(sys.modules) - before if name.startswith("gpudiag"))))
"""


@pytest.mark.parametrize("fmt", ["text", "json", "junit"])
def test_after_ready_to_print_writing_the_report_imports_nothing(fmt):
    done = subprocess.run([sys.executable, "-c", PROGRAM, fmt], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_without_it_writing_the_report_imports_its_renderer():
    """The test above can fail: left out, the renderer's modules are imported while the report is written."""
    program = PROGRAM.replace("ready_to_print(fmt)\n", "")
    done = subprocess.run([sys.executable, "-c", program, "text"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "gpudiag.report.text" in json.loads(done.stdout)
