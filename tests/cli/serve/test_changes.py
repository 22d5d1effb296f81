"""The exporter's log, as the tracker makes it: one line per change of state, never one per collection; a cause
told once (its consequences are not); a bound on lines per cycle and per key over time (gpudiag/cli/serve/changes.py,
gpudiag/cli/serve/log_bound.py)."""

from __future__ import annotations

import logging

from gpudiag.checks import run_checks
from gpudiag.cli.serve.changes import MAX_LINES_PER_CYCLE, ChangeLog, ChangeTracker
from gpudiag.cli.serve.log_bound import RateBound
from gpudiag.daemon.poller import COMPLETE, ERROR, OVERRUN, Collection, Cycle
from gpudiag.model import CheckResult, CollectorRun, DeviceRef, ErrorKind, ProbeError, Status
from tests.support.snapshots import nvidia_h200_node

GPU1 = "0000:3b:00.0"


def cycle_of(snapshot, results=None) -> Cycle:
    results = run_checks(snapshot) if results is None else results
    return Cycle(COMPLETE, 0.1, Collection(snapshot, results, CollectorRun("checks", True, 0.0), 0.0))


def node(lose: bool = False, kind: ErrorKind = ErrorKind.GPU_LOST):
    """The healthy H200 pair of tests.support.snapshots, with GPU 1 not answering where `lose` (its identity kept, as
    the exporter's state gives it back)."""
    snapshot = nvidia_h200_node()
    snapshot.backends = [b for b in snapshot.backends if b.name == "nvml"]
    if lose:
        device = snapshot.devices[1]
        device.reachable = False
        device.errors = [ProbeError("nvml.device", kind, "NVML_ERROR_GPU_IS_LOST")]
        device.temperatures, device.power.draw_watts = {}, None
    return snapshot


def messages(changes) -> list[tuple]:
    return [(c.message, c.fields.get("gpu"), c.fields.get("check")) for c in changes]


def test_a_gpu_lost_is_one_line_however_many_collections_and_one_when_it_returns():
    tracker = ChangeTracker()
    first = tracker.observe(cycle_of(node()))
    assert messages(first) == [("backend up", None, None)]  # a healthy node at start: its backend, nothing else
    lost = [tracker.observe(cycle_of(node(lose=True))) for _ in range(5)]
    assert [messages(c) for c in lost] == [[("GPU lost", 1, None)], [], [], [], []]
    line = lost[0][0]
    assert line.level == logging.WARNING and line.fields["bus_id"] == GPU1 and line.fields["name"] == "NVIDIA H200"
    assert line.fields["error"] == "NVML_ERROR_GPU_IS_LOST"
    back = [tracker.observe(cycle_of(node())) for _ in range(3)]
    assert [messages(c) for c in back] == [[("GPU back", 1, None)], [], []]
    assert back[0][0].level == logging.INFO and back[0][0].fields["was"] == "lost"


def test_a_hung_gpu_is_told_as_hung_and_a_gpu_gone_from_the_list_as_lost():
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node()))
    assert messages(tracker.observe(cycle_of(node(lose=True, kind=ErrorKind.TIMEOUT)))) == [("GPU hung", 1, None)]
    assert messages(tracker.observe(cycle_of(node(lose=True)))) == [("GPU lost", 1, None)]  # hung, now lost
    gone = node()
    del gone.devices[1]
    line = tracker.observe(cycle_of(gone))
    assert messages(line) == [("GPU lost", 1, None)] and line[0].fields["bus_id"] == GPU1
    assert "no longer listed" in line[0].fields["error"]
    assert tracker.observe(cycle_of(gone)) == []
    assert messages(tracker.observe(cycle_of(node()))) == [("GPU back", 1, None)]


def test_gpus_unlisted_while_their_library_is_down_are_the_backends_line_only():
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node()))
    down = node()
    down.backends[0].available = False
    down.backends[0].error = ProbeError("nvml.open", ErrorKind.ERROR, "Driver Not Loaded")
    down.devices = []
    lines = tracker.observe(cycle_of(down, results=[]))
    assert messages(lines) == [("backend down", None, None)]
    assert lines[0].fields["backend"] == "nvml" and lines[0].fields["error"] == "Driver Not Loaded"
    assert tracker.observe(cycle_of(down, results=[])) == []
    assert messages(tracker.observe(cycle_of(node()))) == [("backend up", None, None)]


def test_a_gpu_lost_at_start_is_told_at_start():
    tracker = ChangeTracker()
    assert messages(tracker.observe(cycle_of(node(lose=True)))) == [("backend up", None, None), ("GPU lost", 1, None)]


def test_a_check_changing_status_is_a_line_each_time_it_changes():
    ref = DeviceRef.of(nvidia_h200_node().devices[0])
    tracker = ChangeTracker()

    def results(status, message="x16"):
        return [CheckResult("pcie.link_width", status, message, ref), CheckResult("host.iommu", Status.PASS, "on")]

    assert messages(tracker.observe(cycle_of(node(), results(Status.PASS)))) == [("backend up", None, None)]
    failing = tracker.observe(cycle_of(node(), results(Status.FAIL, "x8 in an x16 slot")))
    assert messages(failing) == [("check status changed", 0, "pcie.link_width")]
    assert failing[0].fields == {"check": "pcie.link_width", "status": "fail", "previous": "pass", "gpu": 0,
                                "bus_id": ref.pci_bus_id, "message": "x8 in an x16 slot"}
    assert tracker.observe(cycle_of(node(), results(Status.FAIL, "x4 now"))) == []  # same status: no line
    assert [c.fields["status"] for c in tracker.observe(cycle_of(node(), results(Status.UNKNOWN)))] == ["unknown"]
    passing = tracker.observe(cycle_of(node(), results(Status.PASS)))
    assert [(c.level, c.fields["previous"]) for c in passing] == [(logging.INFO, "unknown")]
    assert tracker.observe(cycle_of(node(), results(Status.SKIP))) == []  # pass ↔ skip is no news


def test_a_check_failing_at_start_is_told_and_a_passing_one_is_not():
    ref = DeviceRef.of(nvidia_h200_node().devices[0])
    results = [CheckResult("pcie.link_width", Status.FAIL, "x8", ref), CheckResult("host.iommu", Status.PASS, "on")]
    changes = ChangeTracker().observe(cycle_of(node(), results))
    assert messages(changes) == [("backend up", None, None), ("check status changed", 0, "pcie.link_width")]
    assert "previous" not in changes[1].fields  # never seen before: no "previous=pass" (issue 36 item 3)


def test_the_checks_a_lost_gpu_leaves_unknown_are_its_lines_consequences_not_lines_of_their_own():
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node()))
    lost = cycle_of(node(lose=True))
    assert sum(r.status is not Status.PASS for r in lost.collection.results) > 5  # many results changed …
    assert messages(tracker.observe(lost)) == [("GPU lost", 1, None)]  # … one line
    assert messages(tracker.observe(cycle_of(node()))) == [("GPU back", 1, None)]


def test_a_check_that_failed_before_the_gpu_was_lost_is_told_passing_once_the_gpu_is_back():
    ref = DeviceRef.of(nvidia_h200_node().devices[1])
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node(), [CheckResult("thermal.gpu", Status.FAIL, "95 C", ref)]))
    assert messages(tracker.observe(cycle_of(node(lose=True)))) == [("GPU lost", 1, None)]
    back = tracker.observe(cycle_of(node(), [CheckResult("thermal.gpu", Status.PASS, "40 C", ref)]))
    assert messages(back) == [("GPU back", 1, None), ("check status changed", 1, "thermal.gpu")]
    assert back[1].fields["previous"] == "fail"


def test_overrun_and_failure_are_one_line_each_and_one_when_collections_complete_again():
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node()))
    overruns = [tracker.observe(Cycle(OVERRUN, 12.0, error="no result within 12.0s")),
                tracker.observe(Cycle(OVERRUN, 0.0, error="the previous collection is still running (in x)"))]
    assert [messages(c) for c in overruns] == [[("collection overrun", None, None)], []]
    assert overruns[0][0].level == logging.WARNING and overruns[0][0].fields["error"] == "no result within 12.0s"
    # while no collection completes, nothing is known of the GPUs: no line about them
    failed = tracker.observe(Cycle(ERROR, 0.1, error="RuntimeError: boom"))
    assert messages(failed) == [("collection failed", None, None)] and failed[0].level == logging.ERROR
    again = tracker.observe(cycle_of(node()))
    assert messages(again) == [("collection complete again", None, None)] and again[0].fields["was"] == ERROR


def test_the_kernel_log_going_unreadable_and_back_is_a_line_each():
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node(), []))
    blind = node()
    blind.kernel_log.readable = False
    blind.kernel_log.error = ProbeError("kernel_log", ErrorKind.NO_PERMISSION, "/dev/kmsg: Permission denied")
    lines = tracker.observe(cycle_of(blind, []))
    assert messages(lines) == [("kernel log unreadable", None, None)]
    assert lines[0].fields["error"] == "/dev/kmsg: Permission denied"
    assert tracker.observe(cycle_of(blind, [])) == []
    assert messages(tracker.observe(cycle_of(node(), []))) == [("kernel log readable again", None, None)]


def test_more_changes_than_a_cycle_tells_are_put_off_to_the_next_cycles_not_lost():
    tracker = ChangeTracker()
    tracker.observe(cycle_of(node(), []))
    many = [CheckResult(f"x.check_{i:03d}", Status.FAIL, "bad") for i in range(MAX_LINES_PER_CYCLE + 10)]
    first = tracker.observe(cycle_of(node(), many))
    assert len(first) == MAX_LINES_PER_CYCLE + 1
    assert first[-1].message == "more state changes than one collection tells" and first[-1].fields["put_off"] == 10
    second = tracker.observe(cycle_of(node(), many))
    assert sorted(c.fields["check"] for c in second) == [f"x.check_{i:03d}" for i in range(MAX_LINES_PER_CYCLE,
                                                                                           MAX_LINES_PER_CYCLE + 10)]
    assert tracker.observe(cycle_of(node(), many)) == []


def test_a_level_not_logged_takes_no_room_and_is_not_told_later():
    tracker = ChangeTracker(max_lines=1)
    lines = tracker.observe(cycle_of(node(lose=True)), enabled=lambda level: level >= logging.WARNING)
    assert messages(lines) == [("GPU lost", 1, None)]  # the info "backend up" line is not logged: no room taken
    assert tracker.observe(cycle_of(node(lose=True))) == []


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_flapping_gpu_is_bounded_per_key_and_its_summary_tells_the_state_it_ended_in(caplog):
    clock = Clock()
    bound = RateBound(per_window=4, window_seconds=300.0, clock=clock)
    changes = ChangeLog(bound=bound, logger=logging.getLogger("gpudiag.test.flap"))
    with caplog.at_level(logging.INFO, logger="gpudiag.test.flap"):
        changes.observe(cycle_of(node()))
        for flap in range(20):  # lost and back, collection after collection: 20 changes in 100 s
            clock.now += 5
            changes.observe(cycle_of(node(lose=flap % 2 == 0)))
        told = [r for r in caplog.records if r.getMessage().startswith("GPU")]
        assert [r.getMessage() for r in told] == ["GPU lost", "GPU back", "GPU lost", "GPU back"]
        clock.now += 300  # the window ends: one line says what was held back and where the GPU is now
        changes.observe(cycle_of(node(lose=False)))
    told = [r for r in caplog.records if r.getMessage().startswith("GPU")]
    assert len(told) == 5 and told[-1].getMessage() == "GPU back" and told[-1].suppressed == 16
    assert told[-1].fields["bus_id"] == GPU1


def test_the_bound_counts_per_key_and_forgets_quiet_keys():
    clock = Clock()
    bound = RateBound(per_window=2, window_seconds=60.0, clock=clock)
    assert [bound.admit("a", i) for i in range(4)] == [0, 0, None, None]
    assert bound.admit("b") == 0  # another key: its own budget
    clock.now += 60
    assert bound.due() == [("a", 3, 2)]  # the latest held back, and how many were
    assert bound.admit("a") == 0 and bound.admit("a") is None  # the summary began a's new window
    clock.now += 60
    assert bound.admit("a") == 1  # a line in a new window carries the count held back before it
    assert bound.due() == [] and "b" not in bound._windows
