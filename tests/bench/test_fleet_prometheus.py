"""bench/fleet_prometheus.py at a tiny size, so that the benchmark keeps working (and keeps checking that the fleet
view names exactly the faulty nodes of the synthetic fleet) between the runs that measure it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.e2e.test_prometheus import needs_prometheus
from tests.support.paths import REPO



@needs_prometheus
def test_the_fleet_benchmark_runs_and_names_the_faulty_nodes(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "bench" / "fleet_prometheus.py"), "--nodes", "12", "--gpus",
                             "2", "--checks", "4", "--json", str(tmp_path / "figures.json")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "named exactly the three faulty nodes" in result.stdout
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["correct"] is True and figures["nodes"] == 12 and figures["peak_rss_mib"] > 0
