"""Background collection and what a scrape renders from it: overruns, failures, staleness, event counting."""

from __future__ import annotations

import threading

from gpudiag.daemon.poller import COMPLETE, ERROR, OVERRUN, Poller, collect_and_judge
from gpudiag.exporter.state import ExporterState
from gpudiag.model import CheckResult, DeviceRef, KernelEvent, Status, Vendor
from tests.support.exporter import series, value, wait_for
from tests.support.snapshots import nvidia_h200_node


class Scripted:
    """A collect() whose next answers a test decides: a snapshot, an exception, or a hang until released."""

    def __init__(self):
        self.answers = []
        self.release = threading.Event()
        self.calls = 0

    def __call__(self):
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else nvidia_h200_node()
        if answer == "hang":
            self.release.wait(10)
            return nvidia_h200_node()
        if isinstance(answer, Exception):
            raise answer
        return answer


def make(collect, judge=lambda s: [], deadline=0.2):
    state = ExporterState(stale_after_seconds=60, watcher_factory=None)
    poller = Poller(lambda: collect_and_judge(collect, judge), state.on_cycle, interval_seconds=60,
                    deadline_seconds=deadline)
    return state, poller


def metrics(state: ExporterState) -> str:
    return state.render().decode()


def test_complete_cycle_publishes_devices_checks_and_self_health():
    ref = DeviceRef.of(nvidia_h200_node().devices[0])
    state, poller = make(Scripted(), judge=lambda s: [CheckResult("pcie.link_width", Status.FAIL, "x8", ref)])
    state.on_cycle(poller.run_cycle())
    text = metrics(state)
    assert value(text, "gpudiag_device_up", gpu="0") == 1
    assert value(text, "gpudiag_check_ok", check="pcie.link_width", gpu="0") == 0
    assert value(text, "gpudiag_collections_total", outcome=COMPLETE) == 1
    assert value(text, "gpudiag_collections_total", outcome=OVERRUN) == 0  # initialised, so increase() works
    assert value(text, "gpudiag_collector_success", collector="collection") == 1
    assert value(text, "gpudiag_collector_success", collector="checks") == 1
    assert value(text, "gpudiag_last_collection_timestamp_seconds") > 1.7e9
    assert state.health() == (True, "ok")
    assert value(text, "process_resident_memory_bytes") > 0


def test_overrun_drops_device_series_and_starts_no_second_collection_while_the_first_hangs():
    collect = Scripted()
    state, poller = make(collect)
    state.on_cycle(poller.run_cycle())
    finished_before = value(metrics(state), "gpudiag_last_collection_timestamp_seconds")
    collect.answers = ["hang"]
    cycle = poller.run_cycle()
    assert cycle.outcome == OVERRUN and "0.2s" in cycle.error
    state.on_cycle(cycle)
    text = metrics(state)
    assert series(text, "gpudiag_device_up") == []  # never the last collection's readings passed off as current
    assert series(text, "gpudiag_gpu_temperature_celsius") == []
    assert value(text, "gpudiag_collector_success", collector="collection") == 0
    assert value(text, "gpudiag_collections_total", outcome=OVERRUN) == 1
    assert value(text, "gpudiag_last_collection_timestamp_seconds") == finished_before
    # the hung collection still holds the vendor libraries: the next cycle does not enter them again
    again = poller.run_cycle()
    assert again.outcome == OVERRUN and "still running" in again.error
    assert collect.calls == 2
    collect.release.set()
    wait_for(lambda: poller.run_cycle().outcome == COMPLETE)
    assert collect.calls == 3


def test_a_collector_exception_is_an_error_cycle_not_a_crash():
    collect = Scripted()
    collect.answers = [RuntimeError("boom")]
    state, poller = make(collect)
    cycle = poller.run_cycle()
    assert cycle.outcome == ERROR and "boom" in cycle.error
    state.on_cycle(cycle)
    assert value(metrics(state), "gpudiag_collections_total", outcome=ERROR) == 1
    assert state.health() == (False, "no collection has completed yet")


def test_failing_checks_keep_the_measurements():
    state, poller = make(Scripted(), judge=lambda s: 1 / 0)
    state.on_cycle(poller.run_cycle())
    text = metrics(state)
    assert value(text, "gpudiag_collector_success", collector="checks") == 0
    assert value(text, "gpudiag_device_up", gpu="1") == 1
    assert series(text, "gpudiag_check_ok") == []


def test_health_turns_503_when_collections_stop_completing():
    state = ExporterState(stale_after_seconds=0.05, watcher_factory=None)
    poller = Poller(lambda: collect_and_judge(nvidia_h200_node, lambda s: []), state.on_cycle, 60, 1.0)
    state.on_cycle(poller.run_cycle())
    assert state.health()[0]
    healthy, message = wait_for(lambda: (lambda h: h if not h[0] else None)(state.health()), timeout=2)
    assert "ago" in message


def test_render_is_cached_until_something_changes(monkeypatch):
    state, poller = make(Scripted())
    state.on_cycle(poller.run_cycle())
    built = []
    real = state.metric_set
    monkeypatch.setattr(state, "metric_set", lambda *a: built.append(1) or real(*a))
    first = state.render()
    assert state.render().split(b"# HELP process_")[0] == first.split(b"# HELP process_")[0]
    assert len(built) == 1  # the second scrape reused the body
    state.tally.add("0000:19:00.0", "xid", 79)
    assert b'code="79"' in state.render()
    state.on_cycle(poller.run_cycle())
    state.render()
    assert len(built) == 3


def test_new_kernel_log_xids_are_counted_once_across_collections():
    def with_log(*events):
        snapshot = nvidia_h200_node()
        snapshot.kernel_log.events = list(events)
        return snapshot

    old = KernelEvent(Vendor.NVIDIA, "xid", "old 79", "0000:19:00.0", 79, timestamp_seconds=1.0)
    new = KernelEvent(Vendor.NVIDIA, "xid", "new 48", "0000:3b:00.0", 48, timestamp_seconds=2.0)
    ring = KernelEvent(Vendor.AMD, "ring_timeout", "ring gfx timeout", "0000:3b:00.0", timestamp_seconds=3.0)
    collect = Scripted()
    collect.answers = [with_log(old), with_log(old, new), with_log(old, new, ring), with_log(old, new, ring)]
    state, poller = make(collect)
    for _ in range(4):
        state.on_cycle(poller.run_cycle())
    text = metrics(state)
    # The Xid 79 was in the log before the exporter started: counted from the first read, as kernel_log.xid sees it.
    assert series(text, "gpudiag_gpu_xid_errors_total") == [
        ({"gpu": "0", "uuid": "GPU-5c1e2f3a-0000-4000-8000-000000000000", "pci_bus_id": "0000:19:00.0", "code": "79"},
         1.0),
        ({"gpu": "1", "uuid": "GPU-5c1e2f3a-0000-4000-8000-000000000001", "pci_bus_id": "0000:3b:00.0", "code": "48"},
         1.0)]
    assert value(text, "gpudiag_gpu_kernel_log_events_total", kind="ring_timeout") == 1


def test_poller_loop_runs_on_its_interval_and_stops():
    collect = Scripted()
    state = ExporterState(stale_after_seconds=60, watcher_factory=None)
    poller = Poller(lambda: collect_and_judge(collect, lambda s: []), state.on_cycle, interval_seconds=0.05,
                    deadline_seconds=1.0)
    poller.start()
    wait_for(lambda: collect.calls >= 3)
    poller.stop()
    wait_for(lambda: not poller.alive, timeout=1)
