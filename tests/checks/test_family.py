"""A check family registers itself (gpudiag/checks/family.py): a declaration that leaves a check without its verdict
row or its reference text, or that the central views could not be built from, fails when it is made; the views
(registry, verdict table, reference, settings, probe parts) are the declarations' union, in checklist order."""

from __future__ import annotations


import pytest

import gpudiag.checks as checks
from gpudiag.checks.common import Check
from gpudiag.checks.family import Family, FamilyError
from gpudiag.checks.verdicts import TABLE
from gpudiag.model import Status


def _check(check_id: str) -> Check:
    return Check(check_id, lambda snapshot, expect: [], "a toy check")


def toy(**overrides) -> Family:
    fields = dict(name="toy", order=999, checks=(_check("toy.one"), _check("toy.two")),
                  verdicts={"toy.one": {Status.FAIL: ("drain", "GPUDIAG-TOY-ONE")}, "toy.two": {}},
                  reference={"toy.one": ("the toy's first file", "Fix the toy, then look again."),
                             "toy.two": ("the toy's second file", "Fix the toy, then look again.")},
                  settings={"toy.one": ("expected_gpu_count",)}, probe_parts={"kernel_log": ("toy.two",)})
    fields.update(overrides)
    return Family(**fields)


def test_a_complete_declaration_is_accepted():
    family = toy()
    assert family.ids == ("toy.one", "toy.two")


@pytest.mark.parametrize("overrides, said", [
    (dict(verdicts={"toy.one": {}}), "no verdict row for toy.two"),
    (dict(reference={"toy.one": ("reads", "what to do")}), "no reference text for toy.two"),
    (dict(verdicts={"toy.one": {}, "toy.two": {}, "toy.three": {}}), "verdict row for toy.three, which is not"),
    (dict(reference={"toy.one": ("a", "b"), "toy.two": ("", "b")}), "toy.two: empty reference text"),
    (dict(verdicts={"toy.one": {Status.FAIL: ("panic", "GPUDIAG-TOY")}, "toy.two": {}}), "bad verdict"),
    (dict(verdicts={"toy.one": {Status.FAIL: ("drain", "toy-one")}, "toy.two": {}}), "bad verdict"),
    (dict(verdicts={"toy.one": {Status.PASS: ("none", "GPUDIAG-TOY")}, "toy.two": {}}), "bad verdict"),
    (dict(checks=(_check("toy.one"), _check("other.two"))), "other.two is not named toy.<check>"),
    (dict(checks=(_check("toy.one"), _check("toy.one"))), "a check ID twice"),
    (dict(settings={"toy.nine": ("expected_gpu_count",)}), "settings for toy.nine"),
    (dict(probe_parts={"network": ("pcie.",)}), "probe part 'network'"),
    (dict(name="Toy"), "lower-case"),
])
def test_an_incomplete_declaration_fails_loudly(overrides, said):
    with pytest.raises(FamilyError) as caught:
        toy(**overrides)
    message = str(caught.value)
    assert said in message and message.startswith(f"check family {overrides.get('name', 'toy')!r}: "), message


def test_two_families_of_one_order_or_name_are_refused(monkeypatch):
    import importlib

    clash = Family("order_clash", checks.DECLARED[0].order, (_check("order_clash.one"),),
                   verdicts={"order_clash.one": {}}, reference={"order_clash.one": ("its file", "Fix the toy.")})
    real = importlib.import_module

    def with_toy(name, *args):
        module = real(name, *args)
        if name == "gpudiag.checks.firmware":
            return type("Module", (), {"FAMILIES": (module.FAMILY, clash)})
        return module

    monkeypatch.setattr(importlib, "import_module", with_toy)
    with pytest.raises(FamilyError, match="share the order"):
        checks._declared_families()


def test_the_views_are_the_declarations_in_checklist_order():
    families = checks.DECLARED
    assert [f.order for f in families] == sorted(f.order for f in families)
    assert checks.REGISTRY == tuple(c for f in families for c in f.checks)
    assert list(TABLE) == list(checks.CHECK_IDS) == list(checks.REFERENCE)
    for family in families:
        for check_id in family.ids:
            assert TABLE[check_id] == dict(family.verdicts[check_id])
            assert checks.REFERENCE[check_id] == family.reference[check_id]
            assert checks.SETTINGS.get(check_id) == family.settings.get(check_id)


def test_a_selection_needs_the_probe_parts_its_families_declare():
    assert checks.probe_parts_for(checks.resolve_selection(["kernel_log"])) == {"kernel_log"}
    assert checks.probe_parts_for(checks.resolve_selection(["baseline.fabric"])) == {"peers"}
    assert checks.probe_parts_for(checks.resolve_selection(["baseline.pcie", "thermal"])) == frozenset()
