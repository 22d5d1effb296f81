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
    # The lost GPU once, what follows from it in one line under it (issue 36, item 6: it was four findings, its
    # Xid 79 with kernel_log.xid's default action, drain, where the node's own report says reboot).
    lost = [i for i, line in enumerate(lines) if line.startswith("  gpu09:9858 ")]
    assert [lines[i] for i in lost] == ["  gpu09:9858 GPU 1 (0000:3b:00.0): inventory.gpus_visible: fails -> reboot"]
    assert lines[lost[0] + 2] == ("      because of it: FAIL kernel_log.xid; UNKN 27 checks (driver, pcie, ecc, "
                                  "memory, "
                                  "thermal, power, topology, firmware, host, workload); SILENT GPU does not answer its "
                                  "probe (gpudiag_device_up 0)"), text
    assert [line for line in lines if line.startswith("  gpu13:9858 ")] == [
        "  gpu13:9858 GPUs 0–7: inventory.gpu_model: fails -> drain"]

    code, report, _ = run(capsys, "--prometheus", server.url, "--json")
    nodes = {n["node"]: n for n in json.loads(report)["nodes"]}
    assert len([f for f in nodes["gpu13:9858"]["findings"] if f["check"] == "inventory.gpu_model"]) == 8
    assert len([f for f in nodes["gpu09:9858"]["findings"] if f["kind"] == "unknown"]) == 27
    lost = {(f["kind"], f["check"]): f for f in nodes["gpu09:9858"]["findings"]}
    assert (lost[("fail", "kernel_log.xid")]["action"], lost[("fail", "kernel_log.xid")]["fault_code"]) == (
        "reboot", "GPUDIAG-XID-79")  # as the node's report says it
    assert {tuple(f["caused_by"]) for f in nodes["gpu09:9858"]["findings"] if f["check"] != "inventory.gpus_visible"} \
        == {("inventory.gpus_visible 0000:3b:00.0",)}
    assert {n for n, v in nodes.items() if v["status"] == "fail"} == set(FAULTY)
