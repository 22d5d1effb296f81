"""Xid and kernel-log event counting: the log follower, the tally, and the NVML event watcher over the fake
libnvidia-ml (real pynvml bindings, fake C library)."""

from __future__ import annotations

import threading
import time

import pynvml
import pytest

from gpudiag.daemon.follower import KernelLogFollower
from gpudiag.exporter.events import BASELINE, LOG, NVML, EventTally
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.model import KernelEvent, Vendor
from gpudiag.probe.nvml.events import XidWatcher
from tests.support.exporter import series, wait_for
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.fakes.fake_nvml_events import nvml_events


def xid(bus: str, code: int, ts: float | None, tag: str = "") -> KernelEvent:
    return KernelEvent(Vendor.NVIDIA, "xid", f"NVRM: Xid (PCI:{bus}): {code}, {tag}", pci_bus_id=bus, code=code,
                       timestamp_seconds=ts)


# -- KernelLogFollower ----------------------------------------------------------------------------------------------


def test_first_read_is_the_baseline_and_later_reads_give_only_new_events():
    follower = KernelLogFollower()
    old = [xid("0000:19:00.0", 79, 10.0), xid("0000:19:00.0", 13, 11.0)]
    assert follower.new_events(old) == []
    assert follower.new_events(old) == []  # nothing new: nothing counted twice
    new = xid("0000:3b:00.0", 48, 12.5)
    assert follower.new_events(old + [new]) == [new]
    # the ring buffer dropped the oldest lines: still only the genuinely new one
    newer = xid("0000:3b:00.0", 94, 13.0)
    assert follower.new_events([new, newer]) == [newer]


def test_identical_lines_at_the_same_timestamp_are_counted_by_multiplicity():
    follower = KernelLogFollower()
    follower.new_events([xid("0000:19:00.0", 31, 5.0, "a")])
    again = [xid("0000:19:00.0", 31, 5.0, "a"), xid("0000:19:00.0", 31, 5.0, "a")]
    assert len(follower.new_events(again)) == 1  # the second occurrence at 5.0 is new
    assert follower.new_events(again) == []


def test_untimed_lines_compare_as_a_multiset_against_the_previous_read():
    follower = KernelLogFollower()
    line = xid("0000:19:00.0", 79, None)
    assert follower.new_events([line]) == []
    assert follower.new_events([line, line]) == [line]
    assert follower.new_events([line, line]) == []


def test_log_replaced_by_an_older_one_takes_a_new_baseline_instead_of_recounting():
    follower = KernelLogFollower()
    follower.new_events([xid("0000:19:00.0", 79, 500.0)])
    assert follower.new_events([xid("0000:19:00.0", 79, 3.0), xid("0000:19:00.0", 13, 4.0)]) == []
    fresh = xid("0000:19:00.0", 45, 6.0)
    assert follower.new_events([xid("0000:19:00.0", 13, 4.0), fresh]) == [fresh]


def test_an_empty_read_keeps_the_watermark():
    follower = KernelLogFollower()
    seen = [xid("0000:19:00.0", 79, 10.0)]
    follower.new_events(seen)
    assert follower.new_events([]) == []
    assert follower.new_events(seen) == []


# -- EventTally -------------------------------------------------------------------------------------------------


def test_tally_labels_counts_with_the_last_known_identity():
    tally = EventTally()
    tally.add("0000:19:00.0", "xid", 79)
    tally.add("0000:19:00.0", "xid", 79)
    tally.add(None, "xid", None)
    tally.add("0000:05:00.0", "ring_timeout")
    fs = MetricSet()
    tally.add_to(fs, {"0000:19:00.0": ("0", "GPU-a")})
    text = fs.exposition().decode()
    assert series(text, "gpudiag_gpu_xid_errors_total", code="79") == [
        ({"gpu": "0", "uuid": "GPU-a", "pci_bus_id": "0000:19:00.0", "code": "79"}, 2.0)]
    assert series(text, "gpudiag_gpu_xid_errors_total", code="unknown")[0][0]["pci_bus_id"] == ""
    assert series(text, "gpudiag_gpu_kernel_log_events_total", kind="ring_timeout")[0][1] == 1.0
    assert tally.version == 4


def test_tally_counts_an_event_both_sources_saw_once_and_adds_what_was_logged_before():
    tally = EventTally()
    tally.add("0000:19:00.0", "xid", 79, source=BASELINE)  # in the log when the exporter started
    tally.add("0000:19:00.0", "xid", 79, source=NVML)  # a new one: NVML first…
    assert tally.counts() == {("0000:19:00.0", "xid", "79"): 2}
    tally.add("0000:19:00.0", "xid", 79, source=LOG)  # …then its line in the log
    assert tally.counts() == {("0000:19:00.0", "xid", "79"): 2}
    tally.add("0000:19:00.0", "xid", 79, source=LOG)  # one NVML never delivered
    tally.add("0000:3b:00.0", "ring_timeout", source=BASELINE)
    assert tally.counts() == {("0000:19:00.0", "xid", "79"): 3, ("0000:3b:00.0", "ring_timeout", ""): 1}


# -- XidWatcher over the fake NVML --------------------------------------------------------------------------------


@pytest.fixture
def node():
    return FakeNode.hgx_h200(2)


def watch(**kwargs) -> tuple[XidWatcher, list[tuple]]:
    got: list[tuple] = []
    watcher = XidWatcher(lambda bus, code: got.append((bus, code)), wait_ms=20, backoff_seconds=0.05, **kwargs)
    watcher.start()
    return watcher, got


def test_watcher_counts_xids_of_each_gpu_by_bus_id(node):
    with installed(node) as lib:
        events = nvml_events(lib)
        watcher, got = watch()
        try:
            wait_for(lambda: watcher.status().healthy)
            assert watcher.status().covered_bus_ids == {"0000:19:00.0", "0000:3b:00.0"}
            assert events.emit(1, 79) == 1 and events.emit(0, 48) == 1
            wait_for(lambda: len(got) == 2)
            assert got == [("0000:3b:00.0", 79), ("0000:19:00.0", 48)]
        finally:
            watcher.stop()
        assert lib.init_count == 0 and events.freed == 1  # the session was closed: set freed, NVML shut down


def test_gpu_without_xid_events_is_left_to_the_kernel_log(node):
    node.gpus[1].unsupported.add("nvmlDeviceGetSupportedEventTypes")
    with installed(node):
        watcher, _ = watch()
        try:
            status = wait_for(lambda: watcher.status() if watcher.status().healthy else None)
            assert status.covered_bus_ids == {"0000:19:00.0"}
            assert status.enumerated_bus_ids == {"0000:19:00.0", "0000:3b:00.0"}
            assert "GPU 1" in status.error
        finally:
            watcher.stop()


def test_a_gpu_with_an_unreadable_bus_id_does_not_stop_the_watcher(node):
    node.gpus[1].bus_id = "not-a-bus-id"
    with installed(node):
        watcher, _ = watch()
        try:
            status = wait_for(lambda: watcher.status() if watcher.status().healthy else None)
            assert status.covered_bus_ids == {"0000:19:00.0"}
            assert "GPU 1" in status.error
        finally:
            watcher.stop()


def test_failed_wait_reopens_the_session(node):
    with installed(node) as lib:
        events = nvml_events(lib)
        watcher, got = watch()
        try:
            wait_for(lambda: watcher.status().healthy)
            events.fail_next_wait(pynvml.NVML_ERROR_GPU_IS_LOST)
            wait_for(lambda: events.freed >= 1)  # the broken set was released …
            wait_for(lambda: watcher.status().healthy and len(events.sets) == 1)  # … and a new one registered
            events.emit(0, 63)
            wait_for(lambda: got == [("0000:19:00.0", 63)])
        finally:
            watcher.stop()


def test_driver_loaded_after_start_is_picked_up_with_backoff(node):
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with installed(node) as lib:
        watcher, got = watch()
        try:
            wait_for(lambda: lib.calls["nvmlInitWithFlags"] >= 3)
            status = watcher.status()
            assert not status.healthy and "Driver Not Loaded" in status.error
            # exponential backoff: 0.05, 0.1, 0.2 … — a handful of attempts in half a second, not hundreds
            time.sleep(0.5)
            assert lib.calls["nvmlInitWithFlags"] < 8
            node.init_error = pynvml.NVML_SUCCESS
            wait_for(lambda: watcher.status().healthy, timeout=5)
            nvml_events(lib).emit(1, 92)
            wait_for(lambda: got == [("0000:3b:00.0", 92)])
        finally:
            watcher.stop()


def test_stop_returns_promptly_even_with_the_watcher_hung_in_nvml(node):
    node.gpus[0].hang = "nvmlDeviceGetSupportedEventTypes"
    with installed(node):
        watcher, _ = watch()
        time.sleep(0.1)
        started = time.monotonic()
        watcher.stop(timeout_seconds=0.3)
        assert time.monotonic() - started < 1.0
        assert not watcher.status().healthy


def test_request_reopen_registers_again(node):
    with installed(node) as lib:
        events = nvml_events(lib)
        watcher, _ = watch()
        try:
            wait_for(lambda: watcher.status().healthy)
            watcher.request_reopen()
            wait_for(lambda: events.freed == 1 and watcher.status().healthy)
        finally:
            watcher.stop()


# -- Bounded series (issue 10, item 1) ------------------------------------------------------------------------------


def test_events_on_bus_ids_of_no_gpu_fold_into_one_bounded_series():
    # 20,000 injected records on made-up bus IDs once made 20,000 Xid series (1.9 MB bodies). Only the GPUs of the
    # snapshot get their own series; every other bus ID is counted under pci_bus_id="other".
    from gpudiag.daemon.poller import COMPLETE, Collection, Cycle
    from gpudiag.exporter.events import OTHER_BUS_ID
    from gpudiag.exporter.state import ExporterState
    from gpudiag.model import CollectorRun
    from tests.support.snapshots import nvidia_h200_node

    state = ExporterState(stale_after_seconds=60, watcher_factory=None)

    def cycle(events):
        snapshot = nvidia_h200_node()
        snapshot.kernel_log.events = events
        collection = Collection(snapshot, [], CollectorRun("checks", True, 0.0), time.time())
        state.on_cycle(Cycle(COMPLETE, 0.1, collection))

    cycle([])  # the baseline
    forged = [xid(f"0001:{i // 256 % 256:02x}:{i % 256:02x}.0", 79, 100.0 + i) for i in range(20_000)]
    slot = [KernelEvent(None, kind, "pcieport …", pci_bus_id=port, timestamp_seconds=30_001.0)
            for kind, port in (("slot_link_down", "0000:3a:01.0"), ("slot_card_not_present", "0000:f0:01.0"))]
    cycle(forged + [xid("0000:3b:00.0", 48, 30_000.0)] + slot)  # 0000:3a:01.0 is GPU 1's upstream port
    text = state.render().decode()
    xids = series(text, "gpudiag_gpu_xid_errors_total")
    assert len(xids) == 2, len(xids)
    assert series(text, "gpudiag_gpu_xid_errors_total", pci_bus_id=OTHER_BUS_ID, code="79")[0][1] == 20_000
    assert series(text, "gpudiag_gpu_xid_errors_total", pci_bus_id="0000:3b:00.0", code="48")[0][0]["gpu"] == "1"
    assert series(text, "gpudiag_gpu_kernel_log_events_total", kind="slot_link_down")[0][0]["gpu"] == "1"
    assert series(text, "gpudiag_gpu_kernel_log_events_total",
                  kind="slot_card_not_present")[0][0]["pci_bus_id"] == OTHER_BUS_ID
    assert len(text) < 100_000


def test_stopping_a_watcher_whose_thread_is_not_started_yet_does_not_raise():
    """start() assigns the thread before starting it: a stop in between (SIGTERM right after the first collection)
    must not raise "cannot join thread before it is started"."""
    watcher = XidWatcher(lambda bus, code: None)
    watcher._thread = threading.Thread(target=lambda: None, daemon=True)  # the moment between the two
    watcher.stop(timeout_seconds=0.1)
    assert watcher._stop.is_set()


def test_sxids_are_counted_per_switch_and_code_once_per_record_and_bounded():
    # Issue 21: an SXid record and its Severity/Data dump lines (GPUd's sxid README, verbatim) count once; switches
    # beyond MAX_SWITCHES fold into pci_bus_id="other", so a log cannot make series without end.
    from gpudiag.daemon.poller import COMPLETE, Collection, Cycle
    from gpudiag.exporter.events import MAX_SWITCHES, OTHER_BUS_ID
    from gpudiag.exporter.state import ExporterState
    from gpudiag.model import CollectorRun
    from gpudiag.probe.kernel_log.events import parse_event
    from tests.support.snapshots import nvidia_h200_node

    state = ExporterState(stale_after_seconds=60, watcher_factory=None)

    def cycle(messages):
        snapshot = nvidia_h200_node()
        snapshot.kernel_log.events = [parse_event(m, 6781753.0 + i) for i, m in enumerate(messages)]
        state.on_cycle(Cycle(COMPLETE, 0.1, Collection(snapshot, [], CollectorRun("checks", True, 0.0), time.time())))

    cycle([])
    record = ["nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
              "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00",
              "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, 0x00000000, "
              "0x10000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}"]
    many = [f"nvidia-nvswitch0: SXid (PCI:0001:{i:02x}:00.0): 20009, Non-fatal, Link 04 RX Short Error Rate"
            for i in range(MAX_SWITCHES + 10)]
    cycle(record + many)
    text = state.render().decode()
    assert series(text, "gpudiag_nvswitch_sxid_events_total", pci_bus_id="0000:06:00.0", code="20034")[0][1] == 1
    assert series(text, "gpudiag_nvswitch_sxid_events_total", pci_bus_id="0000:07:00.0") == []
    sxids = series(text, "gpudiag_nvswitch_sxid_events_total")
    assert len(sxids) == MAX_SWITCHES + 1
    assert series(text, "gpudiag_nvswitch_sxid_events_total", pci_bus_id=OTHER_BUS_ID)[0][1] == 11
