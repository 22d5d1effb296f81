"""Issue 32, item 1: "at 16 forged Xids a second [a local user] can push a real Xid 48 out of `gpudiag history` in
about 7 minutes". Through the service's real history path — the ring buffer read as /dev/kmsg is (a recorded tree's
dev/kmsg, gpudiag/probe/kernel_log/reader.py), the daemon's one kernel-log follower (gpudiag/daemon/follower.py), the
journal keeper and its bounded, rotating journal (gpudiag/service/keeper.py, journal.py) at their shipped sizes, then
`gpudiag history` reading the journal file — a real Xid 48 followed by thousands of forged ones at that rate stays in
the history, and no forged one gets in.

The records: the Xid 48 is the driver's line from NVIDIA/gpu-operator#1146 (a worker's syslog: "NVRM: Xid
(PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) …"), in the kmsg record
shape the lab H200 recorded its Xids in (level 4, tests/fixtures/h200/faults/kmsg.txt); the forged ones are the real
segfault record of tests/fixtures/kmsg-hostile/segfault-newline-name.kmsg (a program file named
`x\\nNVRM: Xid (PCI:0000:18:00): 79, …`, run as nobody), its message verbatim, each copy with the sequence number and
time stamp the kernel would give the next record.
"""

from __future__ import annotations

import dataclasses
import json

from gpudiag.cli import app as cli
from gpudiag.daemon.follower import KernelLogFollower
from gpudiag.daemon.poller import collect_and_judge
from gpudiag.probe.kernel_log.reader import read_kernel_log
from gpudiag.service.journal import DEFAULT_MAX_BYTES, Journal
from gpudiag.service.keeper import JournalKeeper
from tests.support.paths import FIXTURES
from tests.support.snapshots import nvidia_h200_node

XID_48 = ("NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) "
          "has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.")
FORGED = (FIXTURES / "kmsg-hostile" / "segfault-newline-name.kmsg").read_text(encoding="utf-8").strip()
RATE = 16  # forged records a second, as the issue measured
INTERVAL = 10  # seconds between two collections of the service
COLLECTIONS = 30  # 30 x 10 s x 16/s = 4,800 forged Xid 79 records, past what the journal's generations hold


def _history(tmp_path, state, capsys) -> list[dict]:
    code = cli.main(["history", "--socket", str(tmp_path / "none.sock"), "--state-dir", str(state),
                     "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, err
    return json.loads(out)["entries"]


def _forged(seq: int, usec: int) -> str:
    """The real record with the next sequence number and time stamp: its header is the kernel's, its text the user's."""
    assert FORGED.startswith("6,432,57607268910,-;")
    return f"6,{seq},{usec},-;" + FORGED.split(";", 1)[1]


def test_forged_xids_at_16_a_second_cannot_push_a_real_xid_48_out_of_the_history(tmp_path, capsys):
    assert "\\x0aNVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus." in FORGED
    kmsg = tmp_path / "root" / "dev" / "kmsg"
    kmsg.parent.mkdir(parents=True)
    state = tmp_path / "state"
    records = ["6,1,1000000,-;Linux version 6.18.44 (root@build) (gcc (Debian 12.2.0-14) 12.2.0) #1 SMP",
               f"4,2,100000000,-;{XID_48}"]
    follower = KernelLogFollower()
    keeper = JournalKeeper(Journal(state, DEFAULT_MAX_BYTES).load())  # the shipped size: 512 KiB a generation

    def collect():
        snap = nvidia_h200_node()
        snap.host.boot_id = "b" * 32
        snap.kernel_log = read_kernel_log(root=tmp_path / "root")
        return snap

    seq, usec = 3, 100_000_000
    for _ in range(COLLECTIONS):
        kmsg.write_text("\n".join(records) + "\n", encoding="utf-8")  # the ring buffer as a whole read sees it
        collection = collect_and_judge(collect, lambda snap: [], follower)
        assert not collection.snapshot.kernel_log.events[1:]  # the Xid 48 only: no forged record is a driver's
        keeper.observe(collection)
        for _ in range(RATE * INTERVAL):  # the next ten seconds of forged records
            usec += 1_000_000 // RATE
            records.append(_forged(seq, usec))
            seq += 1
    assert len(records) - 2 == RATE * INTERVAL * COLLECTIONS

    entries = _history(tmp_path, state, capsys)
    xids = [(e.get("code"), e.get("pci_bus_id"), e.get("level")) for e in entries if e.get("kind") == "xid"]
    assert xids == [(48, "0000:07:00.0", "fail")], xids  # the real one, once; not one forged Xid 79
    assert not [e for e in entries if e.get("kind") == "events_dropped"]


def test_a_genuine_flood_past_what_rotation_carries_is_said_in_the_history(tmp_path, capsys):
    """The bound that remains: rotation carries fail-level entries into the next generation up to a quarter of it
    (128 KiB of the shipped 512 KiB), so genuine fail-level events by the thousand — the driver repeats an Xid 48 on
    every channel of the process that met the error — push the oldest out: about 3,750 of them after it here. The
    history then says so, with one fail-level `evidence_dropped` entry counting them, instead of looking complete."""
    kmsg = tmp_path / "root" / "dev" / "kmsg"
    kmsg.parent.mkdir(parents=True)
    state = tmp_path / "state"
    records = [f"4,2,100000000,-;{XID_48}"]
    follower, keeper = KernelLogFollower(), JournalKeeper(Journal(state, DEFAULT_MAX_BYTES).load())

    def collect():
        snap = nvidia_h200_node()
        snap.kernel_log = read_kernel_log(root=tmp_path / "root")
        return snap

    seq, usec = 3, 100_000_000
    for number in range(30):  # 150 genuine Xid 48 records a collection (the keeper journals up to 200 a collection)
        kmsg.write_text("\n".join(records[-3000:]) + "\n", encoding="utf-8")  # a ring buffer keeps the newest
        collection = collect_and_judge(collect, lambda snap: [], follower)
        # a collection a second, as the service's interval has them: entries are timed to the second, and collections
        # within one second would tie, so that the order they are listed in would depend on when the second ticked
        keeper.observe(dataclasses.replace(collection, finished_at=1_796_000_000.0 + number))
        for _ in range(150):
            usec += 100_000
            # the driver's per-channel form of the report, shaped after the line a public post-mortem quotes
            # ("NVRM: Xid (PCI:0000:55:00): 48, pid=2187734, name=python, channel 0x00000002"), on this GPU, each
            # record with a channel of its own
            records.append(f"4,{seq},{usec},-;NVRM: Xid (PCI:0000:07:00): 48, pid=2187734, name=python, "
                           f"channel 0x{seq:08x}")
            seq += 1
    entries = _history(tmp_path, state, capsys)
    assert not [e for e in entries if e.get("kind") == "xid" and e.get("log_timestamp") == 100.0]  # the first: gone
    (marker,) = [e for e in entries if e.get("kind") == "evidence_dropped"]
    assert marker["level"] == "fail" and marker["count"] > 1000
    assert "did not fit what rotation carries" in marker["message"]
    assert entries.index(marker) < len(entries) // 2  # where the dropped entries were: before the kept ones
