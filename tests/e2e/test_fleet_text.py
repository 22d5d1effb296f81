"""`gpudiag fleet --prometheus` says one finding once (issue 27: 163 lines for 14 nodes): a node's findings alike on
several GPUs or checks are one line, the command that shows them naming them all; JSON keeps every finding."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet import run
from tests.support.fleet_text_nodes import FAULTY, answers, prepare
from tests.support.prometheus_stand_in import stand_in  # noqa: F401 - a fixture

FLEET_BUDGET = 30  # lines for these 14 nodes; 144 before the grouping


@pytest.mark.slow
def test_a_fleet_of_14_nodes_is_a_page_not_a_scroll(capsys, stand_in):  # noqa: F811
    prepare()
    server = stand_in(answers)
    code, text, _ = run(capsys, "--prometheus", server.url)
    lines = text.splitlines()
    assert code == 1 and len(lines) <= FLEET_BUDGET, text
    lost = [line for line in lines if line.startswith("  gpu09:9858 ")]
    assert lost == ["  gpu09:9858 GPU 1 (0000:3b:00.0): inventory.gpus_visible: fails -> reboot",
                    "  gpu09:9858 GPU 1 (0000:3b:00.0): kernel_log.xid: fails -> drain",
                    "  gpu09:9858 GPU 1 (0000:3b:00.0): 27 checks (driver, pcie, ecc, memory, thermal, power, topology, "
                    "firmware, host, workload): could not decide (unknown): not shown healthy -> watch",
                    "  gpu09:9858 GPU 1 (0000:3b:00.0): silent: GPU does not answer its probe (gpudiag_device_up 0) "
                    "-> reboot"]
    assert ("      `gpudiag check --only driver,pcie,ecc,memory,thermal,power,topology,firmware,host,workload` on the "
            "node says what was seen and what to do.") in lines
    assert [line for line in lines if line.startswith("  gpu13:9858 ")] == [
        "  gpu13:9858 GPUs 0–7: inventory.gpu_model: fails -> drain"]

    code, report, _ = run(capsys, "--prometheus", server.url, "--json")
    nodes = {n["node"]: n for n in json.loads(report)["nodes"]}
    assert len([f for f in nodes["gpu13:9858"]["findings"] if f["check"] == "inventory.gpu_model"]) == 8
    assert len([f for f in nodes["gpu09:9858"]["findings"] if f["kind"] == "unknown"]) == 27
    assert {n for n, v in nodes.items() if v["status"] == "fail"} == set(FAULTY)
