"""A family declares the node properties `gpudiag fleet` compares across peers (Family.drift): the fleet reads them
from the family's check results in the nodes' reports and names a node whose value differs from most of its peers',
with the family's advice and action; no fleet module names the family (issue 34, item 2)."""

from __future__ import annotations

import importlib

import pytest

from gpudiag.checks import family as family_module
from gpudiag.checks.family import DriftFact, Family, FamilyError
from gpudiag.fleet import report_facts

judge = importlib.import_module("gpudiag.fleet.judge")  # gpudiag.fleet.judge is also the package's function

FACT = DriftFact("toy_units", "toy units enabled", lambda observed: observed.get("units"),
                 "Enable the toy units its peers run.", action="drain")


@pytest.fixture
def toy_fact(monkeypatch):
    monkeypatch.setitem(report_facts.DRIFT_FACTS, "toy.units", FACT)
    monkeypatch.setattr(judge, "DRIFT_FACTS", {"toy.units": FACT})
    monkeypatch.setitem(judge._DRIFT_ADVICE, FACT.name, FACT.advice)
    monkeypatch.setitem(judge._DRIFT_ACTION, FACT.name, FACT.action)


def _node(name: str, units) -> object:
    builder = report_facts._Facts()
    builder.add({"check": "driver.library", "status": "pass", "device": None,
                 "observed": {"driver_version": "570.1", "device_count": 8}})
    builder.add({"check": "toy.units", "status": "pass", "device": None, "observed": {"units": units}})
    facts = builder.done(name)
    facts.model = "NVIDIA H100 80GB HBM3"
    return facts


def test_a_node_drifting_on_a_family_fact_is_named_with_the_family_s_advice(toy_fact):
    nodes = [_node("a", "x,y"), _node("b", "x,y"), _node("c", "x")]
    assert nodes[2].properties["toy_units"] == "x"
    (group,) = [g for g in judge.find_drift(nodes) if g["property"] == "toy_units"]
    assert group["expected"] == "x,y" and group["minority"][0]["nodes"][0]["node"] == "c"
    assert group["remediation"] == FACT.advice and group["description"] == "toy units enabled"
    finding = judge._drift_finding(group, "x", group["minority"][0]["nodes"][0])
    assert finding["action"] == "drain" and finding["message"].startswith("toy units enabled x;")


def test_a_fact_value_that_is_not_text_is_unread_not_compared(toy_fact):
    node = _node("a", ["not", "text"])
    assert "toy_units" not in node.properties and any("toy.units" in note for note in node.unread)


def test_a_drift_fact_for_a_check_the_family_lacks_is_refused():
    with pytest.raises(FamilyError, match="drift fact for toy.other"):
        Family("toy", order=999, checks=(), verdicts={}, reference={}, drift={"toy.other": FACT})
    assert family_module.DriftFact is DriftFact
