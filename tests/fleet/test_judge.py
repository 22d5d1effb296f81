"""The fleet judgement as pure functions of NodeFacts, whatever the source: the edges of drift and outliers."""

from __future__ import annotations

from gpudiag.fleet import Failure, NodeFacts, judge


def h200(name: str, driver: str = "580.159.04", h2d: float = 55e9, **gpu_props: str) -> NodeFacts:
    facts = NodeFacts(node=name, model="NVIDIA H200", properties={"driver_version": driver, "gpu_count": "2"},
                      bus_ids={0: "0000:19:00.0", 1: "0000:3b:00.0"})
    for gpu in (0, 1):
        facts.gpu_property(gpu, "power_limit", "700 W")
        facts.figures[("copy_h2d", gpu)] = h2d
    for name_, value in gpu_props.items():
        facts.gpu_property(1, name_, value)
    return facts


def test_alike_nodes_pass():
    verdict = judge([h200(f"n{i}") for i in range(4)])
    assert verdict.status == "pass" and verdict.drift == [] and verdict.outliers == []
    assert {n.status for n in verdict.nodes} == {"pass"}


def test_an_even_split_has_no_majority_and_names_both_sides():
    verdict = judge([h200("a"), h200("b", driver="570.1")])
    (drift,) = verdict.drift
    assert drift["expected"] is None and [m["value"] for m in drift["minority"]] == ["570.1", "580.159.04"]
    assert {n.node: n.status for n in verdict.nodes} == {"a": "drift", "b": "drift"}


def test_a_per_gpu_difference_names_the_gpu():
    verdict = judge([h200("a"), h200("b"), h200("c", power_limit="500 W")])
    (drift,) = verdict.drift
    assert drift["minority"] == [{"value": "500 W", "count": 1, "nodes": [{"node": "c", "gpus": [1]}]}]
    (finding,) = verdict.nodes[2].findings
    assert (finding["gpu"], finding["action"]) == (1, "watch") and "5 GPUs of its peers run 700 W" in finding["message"]


def test_models_are_compared_only_with_themselves():
    mi300 = h200("amd", driver="6.10.5")
    mi300.model = "AMD Instinct MI300X"
    assert judge([h200("a"), h200("b"), mi300]).drift == []


def test_outliers_need_three_peers_and_more_than_the_threshold():
    assert judge([h200("a"), h200("b", h2d=40e9)]).outliers == []  # two nodes: no median worth the name
    at_threshold = judge([h200("a"), h200("b"), h200("c", h2d=55e9 * 0.95)], threshold=0.05)
    assert at_threshold.outliers == []  # exactly 5 % below is not more than 5 %
    below = judge([h200("a"), h200("b"), h200("c", h2d=55e9 * 0.94)], threshold=0.05)
    assert [(o["node"], o["gpu"]) for o in below.outliers] == [("c", 0), ("c", 1)]
    assert below.nodes[2].status == "lag" and below.status == "fail"


def test_a_faster_node_is_not_an_outlier():
    assert judge([h200("a"), h200("b"), h200("c", h2d=70e9)]).outliers == []


def test_unknown_counts_as_failing_and_warnings_alone_pass():
    undecided = h200("u")
    undecided.failures.append(Failure("kernel_log.xid", "unknown", action="watch"))
    warned = h200("w")
    warned.warnings.append("pcie.replay_errors")
    verdict = judge([undecided, warned, h200("x")])
    assert {n.node: n.status for n in verdict.nodes} == {"u": "fail", "w": "warn", "x": "pass"}
    assert judge([warned, h200("x"), h200("y")]).status == "warn"


def test_a_silent_node_is_named_and_compared_with_nobody():
    down = NodeFacts(node="down", silent=[(None, None, "scrape target down")])
    verdict = judge([h200("a"), h200("b"), down])
    assert verdict.drift == [] and verdict.nodes[2].status == "silent"
    assert verdict.nodes[2].findings[0]["remediation"].startswith("Nothing from this node")


def test_an_incomplete_read_is_not_a_pass():
    verdict = judge([h200("a"), h200("b")], complete=False)
    assert verdict.status == "unknown" and verdict.complete is False
