"""The fleet view's memory bound (docs/fleet.md, "Memory"), held by bench/fleet_memory.py at the input caps: a
report at the 16 MiB report cap, and answers at the 64 MiB answer cap (the failing checks of 500 nodes). The
benchmark measures each `gpudiag fleet` process alone (its own peak RSS, from the kernel)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO

REPORT_BOUND_MIB = 100  # as docs/fleet.md states them
ANSWER_BOUND_MIB = 100


@pytest.mark.slow
def test_the_documented_memory_bound_holds_at_the_caps(tmp_path):
    docs = " ".join((REPO / "docs" / "fleet.md").read_text().split())
    assert f"a report at the 16 MiB cap stays under {REPORT_BOUND_MIB} MiB" in docs
    assert f"answers at the 64 MiB cap stay under {ANSWER_BOUND_MIB} MiB" in docs
    done = subprocess.run([sys.executable, str(REPO / "bench" / "fleet_memory.py"), "--cases", "report,answers-narrow",
                           "--results", "450000", "--nodes", "500", "--answer-mib", "63", "--large-for",
                           "gpudiag_check_ok{", "--json", str(tmp_path / "figures.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads((tmp_path / "figures.json").read_text())
    report, answers = figures["report"], figures["answers-narrow"]
    assert 16_000_000 < report["report_bytes"] <= 16 << 20 and answers["answer_bytes"] > 62 << 20
    # Judged, not given up on: the report's node fails; every node of the answers fails (its checks are not OK).
    assert (report["exit"], report["status"], report["judged"]) == (1, "fail", 1)
    assert (answers["exit"], answers["status"], answers["judged"]) == (1, "fail", 500)
    assert 0 < report["peak_rss_mib"] < REPORT_BOUND_MIB, report
    assert 0 < answers["peak_rss_mib"] < ANSWER_BOUND_MIB, answers
