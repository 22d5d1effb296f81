"""Golden /metrics of the recorded lab nodes: the exposition a real H200 node's snapshot turns into, line by line.

A change to any metric name, label, unit or value shows up here as a diff to review; GPUDIAG_UPDATE_GOLDEN=1
rewrites the files after a deliberate change. The Python version in gpudiag_build_info is masked (it differs
between machines), and the collection time is fixed.
"""

from __future__ import annotations

import os
import re

import pytest

from gpudiag.checks import run_checks
from gpudiag.exporter.textfile import render_textfile
from gpudiag.model.recording import load_snapshot
from tests.support.paths import FIXTURES, GOLDEN

RECORDED = {"h200x2": FIXTURES / "h200x2" / "snapshot.json", "h200": FIXTURES / "h200" / "snapshot.json"}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_golden_metrics_of_the_recorded_lab_nodes(name):
    if not RECORDED[name].exists():
        pytest.skip(f"{name} was not recorded")
    snapshot = load_snapshot(RECORDED[name])
    text = render_textfile(snapshot, run_checks(snapshot), finished_at=1_800_000_000.0)
    text = re.sub(r'python_version="[^"]*"', 'python_version="X"', text)
    golden = GOLDEN / f"{name}.metrics.prom"
    if os.environ.get("GPUDIAG_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"output differs from {golden} (GPUDIAG_UPDATE_GOLDEN=1 rewrites it)"
