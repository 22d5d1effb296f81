"""The fleet view of the NICs, from `gpudiag check` JSON reports: a node whose NIC firmware differs from its siblings'
and a node with a port slower than its siblings' drift, named with what to do; alike nodes pass. The reports are the
real JSON (report/json_report.py) of the network checks run over the fake NIC trees."""

from __future__ import annotations

import json

from gpudiag.checks.network import family as network, affinity as network_affinity
from gpudiag.checks.verdicts import assign
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.fleet import judge
from gpudiag.fleet.report_facts import node_facts
from gpudiag.report.json_report import report_dict
from tests.support import rdma_tree
from tests.support.network_nodes import clear_counters, snapshot

CHECKS = network.FAMILY.checks + network_affinity.TOPOLOGY_CHECKS


def report(root, name: str, fault=None) -> dict:
    node = clear_counters(rdma_tree.hgx_h100_ib(root))
    if fault is not None:
        fault(node)
    snap = snapshot(root)
    snap.hostname = name
    results = [assign(r) for c in CHECKS for r in c.run(snap, DEFAULT_EXPECTATIONS)]
    return json.loads(json.dumps(report_dict(snap, results)))  # as the file holds it


def facts(tmp_path, faults: dict):
    return [node_facts(report(tmp_path / name, name, fault), name)[0] for name, fault in faults.items()]


def test_alike_nodes_have_no_nic_drift(tmp_path):
    verdict = judge(facts(tmp_path, {f"n{i}": None for i in range(3)}))
    assert verdict.drift == [] and {n.status for n in verdict.nodes} == {"pass"}
    node = facts(tmp_path / "again", {"n9": None})[0]
    # the ports network.rate judged (the lone front-end BlueField-3 has no sibling to be judged against)
    assert node.properties["nic_port_rate_min"] == "400 Gb/s"
    assert node.properties["nic_firmware:MT_0000000838"] == "28.41.1000"


def test_a_node_whose_nic_firmware_differs_from_its_siblings_drifts(tmp_path):
    verdict = judge(facts(tmp_path, {"n0": None, "n1": None,
                                     "n2": lambda node: rdma_tree.firmware(node, "mlx5_6", "28.39.1002")}))
    (drift,) = [d for d in verdict.drift if d["property"] == "nic_firmware:MT_0000000838"]
    assert drift["expected"] == "28.41.1000"
    assert drift["minority"] == [{"value": "28.39.1002,28.41.1000", "count": 1,
                                  "nodes": [{"node": "n2", "gpus": None}]}]
    n2 = next(n for n in verdict.nodes if n.node == "n2")
    (finding,) = [f for f in n2.findings if f["kind"] == "drift"]
    assert "MT_0000000838 NIC firmware" in finding["message"] and "mlxfwmanager" in finding["remediation"]


def test_a_node_with_a_port_slower_than_its_siblings_fails_and_drifts(tmp_path):
    verdict = judge(facts(tmp_path, {"n0": None, "n1": None, "n2": lambda node: rdma_tree.half_rate(node, "mlx5_7")}))
    (drift,) = [d for d in verdict.drift if d["property"] == "nic_port_rate_min"]
    assert drift["expected"] == "400 Gb/s"
    assert drift["minority"] == [{"value": "200 Gb/s", "count": 1, "nodes": [{"node": "n2", "gpus": None}]}]
    n2 = next(n for n in verdict.nodes if n.node == "n2")
    assert n2.status == "fail"
    assert any(f["kind"] == "drift" and "slowest RDMA NIC port 200 Gb/s" in f["message"] for f in n2.findings)
    (failing,) = [f for f in n2.findings if f["kind"] == "fail"]
    assert failing["check"] == "network.rate" and "mlx5_7" in failing["message"]
    assert failing["fault_code"] is None or failing["fault_code"].startswith("GPUDIAG-")
