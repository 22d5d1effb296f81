"""The checklist says one cause once (issue 27): every node the tests' fakes build with one fault, both vendors, and
the three noisy cases issue 27 measured, printed by `gpudiag check` over the real pynvml and amdsmi bindings and
their fakes, stays within the line budget of docs/checklist.md; `--verbose` keeps the long form and the JSON report
every result."""

from __future__ import annotations

import json
import re

import pytest

from bench.checklist_lines import BUDGET
from tests.support.checklist_scenarios import ALL, LOST_GPU, checklist

HEADS = re.compile(r"^(FAIL|WARN|UNKN)  ")


def heads(text: str) -> list[str]:
    return [line for line in text.splitlines() if HEADS.match(line)]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.slow
def test_every_scenario_is_within_the_line_budget(name):
    code, text = checklist(name)
    assert code in (0, 1)
    assert len(text.splitlines()) <= BUDGET, text
    _, long_form = checklist(name, "--verbose")
    assert len(long_form.splitlines()) >= len(text.splitlines())


def test_a_missing_cuda_driver_library_is_said_once_with_what_to_install():
    """Was: 48 UNKNOWN blocks (6 load tests x 8 GPUs), 547 lines, each advising --timeout."""
    code, text = checklist("level2-without-libcuda")
    assert code == 0 and "Verdict: UNKNOWN — 48 unknown" in text
    (head,) = heads(text)
    assert head == "UNKN  6 checks  GPUs 0–7"
    assert text.count("libcuda.so.1: cannot open shared object file") == 2  # the message, and what was observed
    assert "--timeout" not in text and "more time" not in text
    assert "libnvidia-compute-<branch>" in text and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
    assert "0000:19:00.0, 0000:3b:00.0, 0000:4c:00.0, 0000:5d:00.0, 0000:9b:00.0, 0000:bb:00.0," in text
    _, report = checklist("level2-without-libcuda", "--json")
    results = [r for r in json.loads(report)["results"] if r["status"] == "unknown"]
    assert len(results) == 48
    assert [r["caused_by"] for r in results].count([]) == 1  # the first says it; the others follow from it


def test_a_gpu_lost_before_the_first_collection_leads_with_the_loss():
    """Was: the lost GPU twice (by bus ID and by index), 4 FAIL and 27 UNKNOWN blocks, `Gen? x0` among them."""
    bus = "0000:9b:00.0"
    code, text = checklist("gpu-lost-before-first-collection")
    assert code == 1
    first, *others = heads(text)
    assert first == f"FAIL  inventory.gpus_visible  GPU {LOST_GPU} {bus}" and others == []
    assert "Gen? x0" not in text and "unknown bus" not in text
    lines = text.splitlines()
    after = lines[lines.index("      because of it (--verbose shows each in full):") + 1:]
    assert after[0].startswith("        FAIL  inventory.gpu_count (node): expected 8 GPU(s); 8 on the PCI bus, 7")
    assert any(line.startswith("        FAIL  kernel_log.xid: ") and "Xid 79" in line for line in after[:4])
    assert any(line.startswith("        UNKN  29 checks: driver, inventory, pcie") for line in after[:6])
    _, report = checklist("gpu-lost-before-first-collection", "--json")
    results = json.loads(report)["results"]
    on_lost = [r for r in results if (r["device"] or {}).get("index") == LOST_GPU]
    assert {(r["device"]["pci_bus_id"], r["device"]["index"]) for r in on_lost} == {(bus, LOST_GPU)}  # one identity
    assert [r["check"] for r in results if r["status"] == "fail" and not r["caused_by"]] == ["inventory.gpus_visible"]
    _, long_form = checklist("gpu-lost-before-first-collection", "--verbose")
    assert len(heads(long_form)) == 4 and long_form.count(f"follows from inventory.gpus_visible {bus}") == 3


def test_a_profile_that_does_not_match_the_node_is_one_block_for_its_gpus():
    """Was: 8 identical 8-line FAIL blocks."""
    code, text = checklist("profile-mismatch")
    assert code == 1
    assert heads(text) == ["FAIL  inventory.gpu_model  GPUs 0–7"]
    assert "GPU <index> (<bus ID>) is a NVIDIA H200, not the expected NVIDIA H100 80GB HBM3" in text
    _, long_form = checklist("profile-mismatch", "--verbose")
    assert heads(long_form) == [f"FAIL  inventory.gpu_model  GPU {i} {bus}" for i, bus in enumerate(
        ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0", "0000:9b:00.0", "0000:bb:00.0",
         "0000:cb:00.0", "0000:db:00.0"))]
