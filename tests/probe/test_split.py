"""A collection made by two processes (gpudiag/probe/split.py) is the collection one process makes: the vendor
part, the side parts and their join give the same snapshot as `Collector.collect()`, timings aside; and a side part
that failed, hung or could not be sent is recorded as the collector records such a part (fail closed)."""

from __future__ import annotations

import json
import pickle
import threading

from gpudiag.model.serialize import to_dict
from gpudiag.probe.collector import Collector, CollectOptions, PROBE_PARTS
from gpudiag.probe.deadline import Outcome
from gpudiag.probe import host
from gpudiag.probe.split import (SIDE_PARTS, SideParts, _portable, collect_side_parts, collect_vendor_part,
                                 expected_side_parts, join, side_parts_of)
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


def test_the_kernel_log_s_process_reads_only_the_boot_of_the_host_and_the_join_is_the_same(tmp_path, monkeypatch):
    """As the check collects (gpudiag/cli/check/early_collect.py): the kernel log in one process, the families' parts
    in another. The kernel log's reads this boot's ID and start, not the whole host; its earlier boots are read as one
    process reads them: the service's journal holds an Xid 79 of an earlier boot, one of this boot (no repeat), and
    one without a boot ID written before this boot began (told by the boot time)."""
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node, kmsg=(XID_79,))
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("0f9a3c2e-4b1d-4e6f-8a7b-9c0d1e2f3a4b\n")
    state = tmp_path / "var/lib/gpudiag"
    state.mkdir(parents=True)
    entry = {"code": 79, "event": "event", "gpu": 1, "kind": "xid", "log_timestamp": 9.0,
             "message": "NVRM: Xid (PCI:0000:19:00): 79, x", "pci_bus_id": node.gpus[0].bus_id}
    earlier = [{**entry, "boot_id": boot, "time": when} for boot, when in (
        ("b" * 32, "2026-11-25T10:00:00+00:00"), ("0f9a3c2e4b1d4e6f8a7b9c0d1e2f3a4b", "2026-12-01T10:00:00+00:00"),
        ("", "2020-01-01T10:00:00+00:00"))]  # no boot ID: earlier than this boot's start (its boot time) or not
    (state / "journal.jsonl").write_text("\n".join(json.dumps(e, separators=(",", ":")) for e in earlier) + "\n")
    with installed(node):
        with Collector(_options(tmp_path)) as collector:
            whole = collector.collect()
        families = collect_side_parts(_options(tmp_path), side_parts_of("families"))
        probed = []
        real = host.probe_host
        monkeypatch.setattr(host, "probe_host", lambda *args: probed.append(args) or real(*args))
        kernel_log = collect_side_parts(_options(tmp_path), side_parts_of("kernel_log"))
        side = pickle.loads(pickle.dumps(SideParts.merged([kernel_log, families])))
        monkeypatch.undo()
        options = _options(tmp_path)
        joined = join(collect_vendor_part(options), side, options)
    assert probed == []
    assert whole.boot_history.current_boot == "0f9a3c2e4b1d4e6f8a7b9c0d1e2f3a4b" and whole.boot_history.boots == 2
    assert _steady(to_dict(joined)) == _steady(to_dict(whole))


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
