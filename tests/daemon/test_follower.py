"""One kernel-log cursor (issue 34, item 3): the kmsg sequence number travels on each event; one follower in
gpudiag/daemon/ hands "events since N" to the exporter's counters and the service journal; a saved log without
sequence numbers keeps the diff by timestamp as its fallback."""

from __future__ import annotations

from gpudiag.daemon.follower import KernelLogFollower
from gpudiag.daemon.poller import collect_and_judge
from gpudiag.exporter.state import ExporterState
from gpudiag.model import KernelLogInfo
from gpudiag.probe.kernel_log.reader import scan
from gpudiag.service.journal import Journal
from gpudiag.service.keeper import JournalKeeper
from tests.support.snapshots import nvidia_h200_node

XID = "NVRM: Xid (PCI:0000:3b:00): {code}, pid=1234, name=python3, Ch 00000008"
# printk stamps a record (local_clock() in vprintk_store) before it reserves the record's sequence number
# (prb_reserve), so two CPUs can store seq N with the later stamp and seq N+1 with the earlier one: stamps are not
# ordered across CPUs, sequence numbers are. Here CPU B's record (seq 11, Xid 79) is read after CPU A's (seq 10).
READ_1 = ["6,9,1000000,-;pci 0000:3b:00.0: enabled", "4,10,3600000101,-;" + XID.format(code=13)]
READ_2 = READ_1 + ["4,11,3600000100,-;" + XID.format(code=79), "6,12,3700000000,-;random: crng reseeded"]


def _read(lines: list[str]) -> KernelLogInfo:
    return scan(lines, KernelLogInfo(source="/dev/kmsg", readable=True))


def test_the_sequence_number_travels_on_each_event_and_the_log_says_the_last_one():
    info = _read(READ_2)
    assert [(e.code, e.seq) for e in info.events] == [(13, 10), (79, 11)] and info.last_seq == 12


def test_events_since_n_by_sequence_number_where_stamps_are_out_of_order():
    follower = KernelLogFollower()
    first = _read(READ_1)
    assert follower.new_events(first.events, first.last_seq) == [] and follower.cursor == 10
    second = _read(READ_2)
    assert [e.code for e in follower.new_events(second.events, second.last_seq)] == [79]  # stamped before Xid 13
    assert follower.cursor == 12
    assert follower.new_events(second.events, second.last_seq) == []


def test_a_saved_log_without_sequence_numbers_keeps_the_diff():
    follower = KernelLogFollower()
    plain = [f"[ 3600.000101] {XID.format(code=13)}"]
    assert follower.new_events(_read(plain).events) == []
    later = _read(plain + [f"[ 3700.000000] {XID.format(code=79)}"])
    assert [e.code for e in follower.new_events(later.events, later.last_seq)] == [79] and follower.cursor is None


def test_a_new_boot_starts_a_new_baseline():
    follower = KernelLogFollower()
    follower.new_events(_read(READ_2).events, 12)
    rebooted = _read(["4,3,5000000,-;" + XID.format(code=48)])
    assert follower.new_events(rebooted.events, rebooted.last_seq) == [] and follower.cursor == 3


def test_one_follower_hands_the_same_new_events_to_the_exporter_and_the_journal(tmp_path):
    reads = iter([READ_1, READ_2])

    def collect():
        snap = nvidia_h200_node()
        snap.host.boot_id = "a" * 32
        snap.kernel_log = _read(next(reads))
        return snap

    follower = KernelLogFollower()
    state = ExporterState(stale_after_seconds=60, watcher_factory=None)
    keeper = JournalKeeper(Journal(tmp_path).load())
    first = collect_and_judge(collect, lambda snap: [], follower)
    second = collect_and_judge(collect, lambda snap: [], follower)
    assert first.log_baseline and [e.code for e in second.new_events] == [79] and not second.log_baseline
    keeper.observe(first)
    keeper.observe(second)
    journaled = [e["code"] for e in Journal(tmp_path).load().entries() if e["event"] == "event"]
    assert journaled == [13, 79]  # the baseline's events once, then what is new since N
    state._absorb(first)
    state._absorb(second)
    counts = state.tally.counts()
    assert counts[("0000:3b:00.0", "xid", "79")] == 1 and counts[("0000:3b:00.0", "xid", "13")] == 1
