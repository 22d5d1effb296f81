"""The text checklist: verdict first, failures before warnings, one entry per finding."""

from __future__ import annotations

from gpudiag.checks import run_checks
from gpudiag.model import ErrorKind, ProbeError
from gpudiag.report.text import render_text
from tests.support.snapshots import nvidia_h200_node


def test_a_gpu_that_stopped_answering_is_one_entry_and_its_checks_follow_from_it():
    snapshot = nvidia_h200_node()
    lost = snapshot.devices[1]
    lost.reachable = False
    lost.errors.append(ProbeError("nvml.device", ErrorKind.GPU_LOST, "the GPU is lost"))
    results = run_checks(snapshot)
    text = render_text(snapshot, results)
    entries = [line for line in text.splitlines() if line.startswith(("FAIL", "UNKN"))]
    assert entries == ["FAIL  inventory.gpus_visible  GPU 1 0000:3b:00.0"]
    unknown = sum(r.status.value == "unknown" for r in results)
    assert f"        UNKN  {unknown} checks: driver, pcie, ecc" in text  # what follows from it, in one line
    long_form = render_text(snapshot, results, verbose=True)
    (entry,) = [line for line in long_form.splitlines() if line.startswith("UNKN")]
    assert f"{unknown} checks  GPU 1" in entry and "follows from inventory.gpus_visible 0000:3b:00.0" in long_form
    assert "pcie.link_generation" in long_form and "thermal.temperature" in long_form  # each check named


def test_failures_lead_and_a_healthy_node_is_short():
    snapshot = nvidia_h200_node()
    healthy = render_text(snapshot, run_checks(snapshot))
    assert healthy.splitlines()[2].startswith("Verdict: PASS")
    assert not any(line.startswith(("FAIL", "WARN", "UNKN")) for line in healthy.splitlines())

    snapshot.devices[0].memory_health.remap_pending = True
    failing = render_text(snapshot, run_checks(snapshot)).splitlines()
    assert failing[2].startswith("Verdict: FAIL")
    assert failing[4].startswith("FAIL  memory.row_remap_pending  GPU 0")


def test_a_family_not_asked_for_says_once_how_to_ask_for_it():
    snapshot = nvidia_h200_node()
    lines = render_text(snapshot, run_checks(snapshot)).splitlines()
    (active,) = [line for line in lines if line.lstrip().startswith("active")]
    assert "load tests were not run (gpudiag check --level 2 runs them)" in active and "skipped" not in active
