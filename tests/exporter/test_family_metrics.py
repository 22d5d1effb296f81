"""A check family's metrics (gpudiag/exporter/metrics_<family>.py) are found by module name: their specs join the
catalog (and so docs/reference/metrics.md) and their `add(fs, snapshot)` renders them with every collection."""

from __future__ import annotations

import sys
import types

import pytest

from gpudiag.exporter import catalog, metric_modules
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.node_metrics import add_snapshot
from tests.support.snapshots import nvidia_h200_node
from tests.support.tools import load_tool


def test_metric_modules_are_found_by_name(tmp_path):
    for name in ("metrics_network.py", "node_metrics.py", "metrics_toy.py", "catalog.py"):
        (tmp_path / name).write_text("")
    found = load_tool("gen_registry_index").metric_modules([str(tmp_path)], "gpudiag.exporter")
    assert sorted(found) == ["gpudiag.exporter.metrics_network", "gpudiag.exporter.metrics_toy"]


@pytest.fixture
def toy_metrics(monkeypatch):
    module = types.ModuleType("gpudiag.exporter.metrics_toy")
    spec = catalog.MetricSpec("gpudiag_toy_devices", "gauge", "Devices the toy family saw.", ())
    module.add = lambda fs, snapshot: fs.add(spec, (), len(snapshot.devices))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(metric_modules, "family_modules", lambda: (module,))
    return module


def test_a_family_s_add_renders_with_the_snapshot(toy_metrics):
    fs, snapshot = MetricSet(), nvidia_h200_node()
    assert len(snapshot.devices) == 2
    add_snapshot(fs, snapshot)
    body = fs.exposition().decode()
    assert "# TYPE gpudiag_toy_devices gauge\ngpudiag_toy_devices 2\n" in body
    assert fs.names()[-1] == "gpudiag_toy_devices"  # after every series of the core catalog: their order is kept


def test_define_registers_a_family_metric_in_the_catalog(monkeypatch):
    monkeypatch.setattr(catalog, "_ALL", dict(catalog._ALL))
    spec = catalog.define("gpudiag_toy_ports", "gauge", "Ports the toy family saw.", ("device",))
    assert metric_modules.all_metrics()["gpudiag_toy_ports"] is spec
    with pytest.raises(AssertionError):
        catalog.define("gpudiag_toy_errors", "counter", "Counters end in _total.")
