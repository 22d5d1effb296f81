"""A check that raises is reported as an internal error, distinct from a device that did not answer, and the suite
fails on it (tests/conftest.py)."""

from __future__ import annotations

import dataclasses

import pytest

import gpudiag.checks as checks
from gpudiag.checks import REGISTRY, run_checks
from gpudiag.checks.verdicts import is_internal_error
from gpudiag.model import Status
from tests.support.internal_errors import InternalErrorWatch
from tests.support.snapshots import nvidia_h200_node, run


def _with_broken(monkeypatch, check_id: str) -> None:
    def broken(snapshot, expect):
        return undefined_name  # noqa: F821 — the bug under test: a NameError inside a check

    monkeypatch.setattr(checks, "REGISTRY", tuple(dataclasses.replace(c, run=broken) if c.id == check_id else c
                                                  for c in REGISTRY))


@pytest.mark.internal_error_expected
def test_an_injected_name_error_is_internal_not_a_device_unknown(monkeypatch):
    _with_broken(monkeypatch, "inventory.gpus_visible")
    (crashed,) = run(nvidia_h200_node(), "inventory.gpus_visible")
    assert crashed.status == Status.UNKNOWN
    assert (crashed.action, crashed.fault_code) == ("watch", "GPUDIAG-INTERNAL-ERROR")
    assert is_internal_error(crashed)
    assert "NameError" in crashed.message and "undefined_name" in crashed.message
    assert crashed.message.startswith("internal error in check inventory.gpus_visible")


def test_a_device_unknown_is_not_an_internal_error():
    snap = nvidia_h200_node()
    snap.pci_gpus = []  # the PCI scan failed: unknown, deliberately
    (result,) = run(snap, "inventory.gpus_visible")
    assert result.status == Status.UNKNOWN
    assert not is_internal_error(result)
    assert result.fault_code == "GPUDIAG-INVENTORY-GPUS-VISIBLE-UNKNOWN"


@pytest.mark.internal_error_expected
def test_the_suite_guard_fails_a_test_whose_check_raised(monkeypatch):
    watch = InternalErrorWatch()
    watch.install(monkeypatch)
    watch.assert_none()  # nothing ran yet: no failure
    _with_broken(monkeypatch, "thermal.temperature")
    results = run_checks(nvidia_h200_node(), only=["thermal"])
    assert [r.check for r in watch.seen] == ["thermal.temperature"]
    assert all(not is_internal_error(r) for r in results if r.check != "thermal.temperature")
    with pytest.raises(pytest.fail.Exception, match="thermal.temperature: internal error.*NameError"):
        watch.assert_none()
