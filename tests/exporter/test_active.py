"""What the load tests measured, as metrics: the lab's 2x H200 load-test run rendered into the textfile form."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from gpudiag.checks import run_checks
from gpudiag.exporter.textfile import render_textfile
from gpudiag.model import ActiveResults, from_dict
from gpudiag.model.recording import load_snapshot
from tests.support.exporter import value
from tests.support.paths import FIXTURES

H200X2 = FIXTURES / "h200x2"


@pytest.fixture
def measured():
    # The load tests ran on another lease of the same 2x H200 machine kind than the recorded snapshot (same GPU
    # indexes and bus IDs, other UUIDs): the figures are real, their pairing with this snapshot is the test's.
    snapshot = load_snapshot(H200X2 / "snapshot.json")
    recorded = json.loads((H200X2 / "recorded" / "active_2gpu.json").read_text())
    snapshot.active = from_dict(ActiveResults, recorded["active"])
    assert [d.pci_bus_id for d in snapshot.active.devices] == [d.pci_bus_id for d in snapshot.devices]
    return snapshot


def test_load_test_figures_are_exported_in_base_units(measured):
    text = render_textfile(measured, run_checks(measured), finished_at=1_800_000_000.0)
    first = measured.devices[0]
    gpu0 = {"gpu": "0", "uuid": first.uuid, "pci_bus_id": first.pci_bus_id}
    assert value(text, "gpudiag_active_copy_bandwidth_bytes_per_second", direction="h2d", **gpu0) == pytest.approx(
        55.45e9
    )
    assert value(text, "gpudiag_active_copy_bandwidth_bytes_per_second", direction="d2h", **gpu0) == pytest.approx(
        55.3e9
    )
    assert value(text, "gpudiag_active_p2p_bandwidth_bytes_per_second", peer_gpu="1", **gpu0) == pytest.approx(394.48e9)
    assert value(text, "gpudiag_active_memtest_mismatched_words", **gpu0) == 0
    assert value(text, "gpudiag_active_memtest_tested_bytes", **gpu0) > 130e9
    assert value(text, "gpudiag_active_stress_fp32_flops", **gpu0) == pytest.approx(55.48e12)
    assert value(text, "gpudiag_check_ok", check="active.memtest", gpu="0") == 1


def test_the_link_read_under_load_is_exported_where_it_was_read(measured):
    # The recorded run predates the reading: no series for it (never a 0), until a run reads the link.
    text = render_textfile(measured, run_checks(measured), finished_at=1_800_000_000.0)
    assert "gpudiag_active_pcie_link_generation" not in text
    measured.active.devices[0].h2d.link_generation, measured.active.devices[0].h2d.link_width = 5, 16
    text = render_textfile(measured, run_checks(measured), finished_at=1_800_000_000.0)
    assert value(text, "gpudiag_active_pcie_link_generation", direction="h2d", gpu="0") == 5
    assert value(text, "gpudiag_active_pcie_link_width_lanes", direction="h2d", gpu="0") == 16
    assert value(text, "gpudiag_active_pcie_link_generation", direction="d2h", gpu="0") is None


def test_without_load_tests_there_are_no_active_series(measured):
    measured.active = None
    assert "gpudiag_active_" not in render_textfile(measured, run_checks(measured))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_accepts_the_load_test_series(measured):
    text = render_textfile(measured, run_checks(measured))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


RECORDED_METRICS = sorted((H200X2.parent).glob("*/recorded/*.prom")) + sorted(
    H200X2.parent.glob("*/recorded/*.metrics.txt")
)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
@pytest.mark.parametrize("path", RECORDED_METRICS, ids=lambda p: p.name)
def test_promtool_accepts_what_the_lab_machines_exported(path):
    done = subprocess.run(["promtool", "check", "metrics"], input=path.read_text(), capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
