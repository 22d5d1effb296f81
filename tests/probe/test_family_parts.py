"""A probe part a family adds (gpudiag/probe/<name>/part.py) is found by its name and run by the Collector within
the deadline, on its own thread, with no step wired into collect(): what it read is stored, a part that raised or
missed the deadline is stored as an error (fail closed), and a part no selected check judges is not run."""

from __future__ import annotations

import sys
import threading
import types

import pytest

from gpudiag.probe import collector as probe
from gpudiag.model import ErrorKind
from gpudiag.probe.collector import CollectOptions, Collector
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for
from tests.support.tools import load_tool


@pytest.fixture
def toy_part(monkeypatch):
    """A toy part module, registered as gpudiag/probe/toy/part.py would be; `behaviour` decides what collect does."""
    module = types.ModuleType("gpudiag.probe.toy.part")
    module.behaviour = lambda snapshot: len(snapshot.pci_gpus)  # it sees the host facts read before it
    module.stored = []
    module.release = threading.Event()
    module.collect = lambda snapshot, options, until: module.behaviour(snapshot)
    module.store = lambda snapshot, value, error: module.stored.append((value, error))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(probe, "FAMILY_PARTS", {"toy": module.__name__})
    monkeypatch.setattr(probe, "PROBE_PARTS", probe.PROBE_PARTS | {"toy"})
    yield module
    module.release.set()


def collect(tmp_path, parts, timeout=3.0):
    node = FakeNode.hgx_h200(2)
    sysfs_for(node, tmp_path)
    with installed(node), Collector(CollectOptions(root=tmp_path, timeout_seconds=timeout, parts=parts)) as c:
        return c.collect()


def test_parts_are_found_by_module_name(tmp_path):
    # a part is a sub-package's part.py; a module named part.py at the top, a sub-package without one, or a module
    # of another name is none
    for name in ("network/__init__.py", "network/part.py", "network/rdma.py", "nvml/__init__.py", "nvml/call.py",
                 "toy/__init__.py", "toy/part.py", "part.py", "partial.py", "rdma.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    found = load_tool("gen_registry_index").probe_parts([str(tmp_path)], "gpudiag.probe")
    assert found == {"network": "gpudiag.probe.network.part", "toy": "gpudiag.probe.toy.part"}
    assert set(probe.FAMILY_PARTS) <= probe.PROBE_PARTS


def test_a_selected_part_is_collected_and_stored(tmp_path, toy_part):
    snapshot = collect(tmp_path, frozenset({"toy"}))
    assert toy_part.stored == [(2, None)]
    (run,) = [r for r in snapshot.collectors if r.name == "toy"]
    assert run.success


def test_a_part_no_selected_check_judges_is_not_run(tmp_path, toy_part):
    snapshot = collect(tmp_path, frozenset())
    assert toy_part.stored == [] and not [r for r in snapshot.collectors if r.name == "toy"]


def test_a_part_that_raises_is_stored_as_an_error(tmp_path, toy_part):
    def broken(snapshot):
        raise OSError("sysfs went away")

    toy_part.behaviour = broken
    snapshot = collect(tmp_path, frozenset({"toy"}))
    ((value, error),) = toy_part.stored
    assert value is None and "sysfs went away" in error.message
    (run,) = [r for r in snapshot.collectors if r.name == "toy"]
    assert not run.success


def test_a_hung_part_does_not_hold_the_collection_past_its_deadline(tmp_path, toy_part):
    toy_part.behaviour = lambda snapshot: toy_part.release.wait(30)
    snapshot = collect(tmp_path, frozenset({"toy"}), timeout=1.0)
    ((value, error),) = toy_part.stored
    assert value is None and error.kind == ErrorKind.TIMEOUT
    assert snapshot.duration_seconds < 3
