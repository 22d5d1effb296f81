"""A collection made by two processes (gpudiag/probe/split.py) is the collection one process makes: the vendor
part, the side parts and their join give the same snapshot as `Collector.collect()`, timings aside; and a side part
that failed, hung or could not be sent is recorded as the collector records such a part (fail closed)."""

from __future__ import annotations

import pickle
import threading

from gpudiag.model.serialize import to_dict
from gpudiag.probe.collector import Collector, CollectOptions, PROBE_PARTS
from gpudiag.probe.deadline import Outcome
from gpudiag.probe.split import (SIDE_PARTS, SideParts, _portable, collect_side_parts, collect_vendor_part,
                                 expected_side_parts, join)
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed

XID_79 = "<3>[  812.102311] NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus."
# what differs between two collections a moment apart: how long each part took, when, the CPU load meanwhile
MOMENTARY = {"duration_seconds", "elapsed_seconds", "collected_at", "read_at", "cpu_percent", "per_cpu_percent",
             "memory_available_bytes"}


def _steady(value):
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in MOMENTARY}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _options(root) -> CollectOptions:
    """New options for each collection: a Collector carries state between its collections in them (the NICs'
    counters), and each of the check's processes collects once."""
    return CollectOptions(root=root, timeout_seconds=10.0, parts=PROBE_PARTS, state_dir=root / "var/lib/gpudiag")


def test_the_two_parts_joined_are_the_one_process_collection(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True
    fake_root(tmp_path, node, kmsg=(XID_79,))
    with installed(node):
        with Collector(_options(tmp_path)) as collector:
            whole = collector.collect()
        side = pickle.loads(pickle.dumps(collect_side_parts(_options(tmp_path))))  # as it crosses the pipe
        options = _options(tmp_path)
        joined = join(collect_vendor_part(options), side, options)
    assert set(side.outcomes) == SIDE_PARTS
    assert [run.name for run in joined.collectors] == [run.name for run in whole.collectors]
    assert _steady(to_dict(joined)) == _steady(to_dict(whole))
    assert any(e.kind == "xid" and e.code == 79 for e in joined.kernel_log.events)  # read, not two empty readings


def test_a_failed_side_collection_fails_each_of_its_parts(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    options = _options(tmp_path)
    with installed(node):
        for hung in (False, True):
            side = SideParts.failed(expected_side_parts(options), "the side process", hung, 12.0)
            assert list(side.outcomes) == expected_side_parts(options)
            assert set(side.outcomes) == SIDE_PARTS and next(iter(side.outcomes)) == "kernel_log"
            snapshot = join(collect_vendor_part(options), side, options)
            runs = {run.name: run for run in snapshot.collectors}
            assert all(runs[name].success is False for name in side.outcomes)
            assert snapshot.kernel_log.error is not None and snapshot.network.readable is False
            assert ("hung in the side process" in runs["kernel_log"].error) is hung


def test_an_outcome_is_sent_without_its_thread_and_with_what_cannot_be_pickled_as_words():
    lock = threading.Lock()  # cannot be pickled
    sent = _portable(Outcome(done=True, value={"lock": lock}, elapsed_seconds=0.5))
    assert sent.value is None and "could not be sent" in str(sent.error) and sent.done
    raised = _portable(Outcome(done=True, error=ValueError(lock), thread=threading.current_thread()))
    assert pickle.loads(pickle.dumps(raised)).error.args == (f"ValueError: {lock}",)
    assert raised.thread is None and not raised.still_running
