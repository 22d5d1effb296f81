"""Faults that come back across boots (issue 21, item 7): the boot history the node keeps (the journal of `gpudiag
serve`, the systemd journal through journalctl), read through the probe within the deadline, and a hardware fault
seen on the same GPU in `kernel_log_repeat_boots` boots escalated to rma. Application faults never escalate."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpudiag.checks import run_checks
from gpudiag.expect import Expectations
from gpudiag.model import BootFault, BootHistory, Status
from gpudiag.probe.collector import CollectOptions, Collector, collect
from gpudiag.probe.kernel_log.boot_history import earlier_boots, read_boot_history
from gpudiag.probe.kernel_log.reader import read_kernel_log
from tests.support.fakes import journalctl
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for
from tests.support.snapshots import for_gpu, nvidia_h200_node, run, xid_event

BOOT = "0f9a3c2e4b1d4e6f8a7b9c0d1e2f3a4b"
GPU1 = "0000:3b:00.0"  # FakeNode.hgx_h200 GPU 1; tests.support.snapshots' nvidia_h200_node GPU 1
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _journal_entry(boot: str, code: int, when: str) -> str:
    return json.dumps({"boot_id": boot, "code": code, "event": "event", "gpu": 1, "kind": "xid", "log_timestamp": 9.0,
                       "message": f"NVRM: Xid (PCI:0000:3b:00): {code}, x", "pci_bus_id": GPU1, "time": when},
                      separators=(",", ":"), sort_keys=True)


def test_a_fault_in_this_boot_and_two_earlier_ones_escalates_to_rma():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event(GPU1, 79)]
    snap.boot_history = BootHistory(current_boot=BOOT, faults=[BootFault("b1", "xid", GPU1, 79),
                                                               BootFault("b2", "fallen_off_bus", GPU1)])
    result = for_gpu(run(snap, "kernel_log.xid"), 1)
    assert (result.status, result.action) == (Status.FAIL, "rma")
    assert "seen in 3 boots" in result.message and "RMA" in result.remediation
    # Two boots are not enough by default (GPUd: after two reboots), and a profile can lower the bar.
    snap.boot_history.faults.pop()
    assert for_gpu(run(snap, "kernel_log.xid"), 1).action == "reboot"
    assert for_gpu(run(snap, "kernel_log.xid", Expectations(kernel_log_repeat_boots=2)), 1).action == "rma"
    assert for_gpu(run(snap, "kernel_log.xid", Expectations(kernel_log_repeat_boots=None)), 1).action == "reboot"


def test_a_history_the_deadline_cut_short_says_a_repeat_is_not_known():
    """A hardware fault seen in fewer boots than a repeat needs, where the deadline stopped the history's read: the
    verdict stays (fail, reboot), and the report says the earlier boots were not all read, and what to run."""
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event(GPU1, 79), xid_event("0000:19:00.0", 13)]
    snap.boot_history = BootHistory(current_boot=BOOT, faults=[BootFault("b1", "xid", GPU1, 79)],
                                    problems=["journalctl -k -b b2: stopped at the collection's deadline"],
                                    cut_short=True)
    results = run(snap, "kernel_log.xid")
    lost = for_gpu(results, 1)
    assert (lost.status, lost.action) == (Status.FAIL, "reboot")
    assert "earlier boots not all read" in lost.message and "longer --timeout" in lost.remediation
    assert "earlier boots" not in for_gpu(results, 0).message  # Xid 13: a job's fault, no repeat to miss
    snap.boot_history.cut_short = False  # read whole: nothing to say
    assert "earlier boots" not in for_gpu(run(snap, "kernel_log.xid"), 1).message


def test_application_faults_and_other_gpus_never_escalate():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event(GPU1, 13), xid_event("0000:19:00.0", 79)]
    snap.boot_history = BootHistory(current_boot=BOOT, faults=[BootFault(b, "xid", GPU1, c)
                                                               for b in ("b1", "b2") for c in (13, 79)])
    results = run(snap, "kernel_log.xid")
    assert for_gpu(results, 1).action == "watch"  # Xid 13 three boots running: a job's fault, not the GPU's
    assert for_gpu(results, 0).action == "reboot"  # its Xid 79 history is GPU 1's


# Ubuntu 24.04's kernel banner as the kernel prints it (linux_banner: release, (user@host), (compiler), version).
BANNER = ("Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) "
          "13.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024")


def test_a_saved_log_that_spans_boots_counts_its_own_boots(tmp_path):
    # A kern.log keeps every boot: the kernel's banner (init/version.c linux_banner, in full: issue 32, item 4)
    # starts each one (and the since-boot clock starts again).
    lines = []
    for boot in range(3):
        lines += [f"Dec  {boot + 1} 10:00:00 node kernel: [    0.000000] {BANNER}",
                  f"Dec  {boot + 1} 11:00:00 node kernel: [ 3600.000000] {XID_79}"]
    log = tmp_path / "kern.log"
    log.write_text("\n".join(lines) + "\n")
    info = read_kernel_log(file=log)
    assert info.boots == 3 and {e.boot for e in info.events} == {"log-boot-0", "log-boot-1", "log-boot-2"}
    snap = nvidia_h200_node()
    snap.kernel_log = info
    assert for_gpu(run(snap, "kernel_log.xid"), 1).action == "rma"


def _fake_journalctl(tmp_path: Path, boots: dict[str, list[str]]) -> str:
    """A journalctl that answers --list-boots and -k -b ID -o json from `boots` (ID → kernel messages)."""
    return journalctl.write(tmp_path / "journalctl", tmp_path / "journal.json", boots, BOOT)


def test_the_systemd_journal_gives_earlier_boots_faults(tmp_path):
    program = _fake_journalctl(tmp_path, {"b1" * 16: [XID_79], "b2" * 16: ["NVRM: loading NVIDIA UNIX Kernel Module",
                                                                            XID_79, XID_79]})
    history = read_boot_history(Path("/"), None, BOOT, None, time.monotonic() + 5, journalctl=program)
    assert history.boots == 2 and len(history.faults) == 2  # the two lines of boot b2 are one fault there
    assert {(f.boot, f.kind, f.code, f.pci_bus_id) for f in history.faults} == {
        ("b1" * 16, "xid", 79, GPU1), ("b2" * 16, "xid", 79, GPU1)}
    assert history.sources == ["journalctl: 2 of 2 earlier boot(s) read"] and history.problems == []
    assert not history.cut_short


def test_list_boots_in_text_and_json():
    text = (" -2 0d4dd5ab0f1e4c1b9e0d7b8a4a7e1c3d Mon 2026-11-30 08:00:01 UTC—Mon 2026-11-30 20:12:44 UTC\n"
            " -1 6f1c8e2b9a4d4f0e8c7b6a5d4c3b2a19 Mon 2026-11-30 20:14:02 UTC—Tue 2026-12-01 06:00:00 UTC\n"
            "  0 0f9a3c2e4b1d4e6f8a7b9c0d1e2f3a4b Tue 2026-12-01 06:01:30 UTC—Tue 2026-12-01 09:00:00 UTC\n")
    assert earlier_boots(text) == ["6f1c8e2b9a4d4f0e8c7b6a5d4c3b2a19", "0d4dd5ab0f1e4c1b9e0d7b8a4a7e1c3d"]
    assert earlier_boots('[{"index":-1,"boot_id":"aa"},{"index":0,"boot_id":"bb"}]') == ["aa"]
    assert earlier_boots("No journal files were found.\n") == []


def test_a_hung_journalctl_is_cut_at_the_deadline(tmp_path):
    script = tmp_path / "journalctl"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(0o755)
    started = time.monotonic()
    history = read_boot_history(Path("/"), None, BOOT, None, time.monotonic() + 0.5, journalctl=str(script))
    assert time.monotonic() - started < 2.0
    assert history.faults == [] and "deadline" in history.problems[0] and history.cut_short


def test_the_gpudiag_journal_under_the_root_escalates_a_live_fault(tmp_path):
    """The whole path: the service's journal of two earlier boots in the state directory, Xid 79 in this boot's
    /dev/kmsg, the real collector and checks: GPU 1 is for RMA; entries of this boot and application Xids are not
    repeats."""
    node = FakeNode.hgx_h200(2)
    tree = sysfs_for(node, tmp_path)
    tree.add_kmsg([f"3,2,9000000,-;{XID_79}"])
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("0f9a3c2e-4b1d-4e6f-8a7b-9c0d1e2f3a4b\n")
    state = tmp_path / "var/lib/gpudiag"
    state.mkdir(parents=True)
    (state / "journal.1.jsonl").write_text(_journal_entry("a" * 32, 79, "2026-11-20T10:00:00+00:00") + "\n")
    (state / "journal.jsonl").write_text("\n".join([_journal_entry("b" * 32, 79, "2026-11-25T10:00:00+00:00"),
                                                    _journal_entry(BOOT, 79, "2026-12-01T10:00:00+00:00"),
                                                    _journal_entry("c" * 32, 13, "2026-11-26T10:00:00+00:00")]) + "\n")
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path, timeout_seconds=10, state_dir=state))
    history = snapshot.boot_history
    assert history.current_boot == BOOT and history.boots == 3
    assert any("journalctl" in p for p in history.problems)  # not run under --root
    result = for_gpu(run_checks(snapshot, only=["kernel_log.xid"]), 1)
    assert (result.status, result.action) == (Status.FAIL, "rma") and "seen in 3 boots" in result.message


def test_the_service_journals_each_event_with_its_boot_and_the_history_reads_it_back(tmp_path):
    from gpudiag.daemon.poller import Collection
    from gpudiag.model import CollectorRun
    from gpudiag.probe.kernel_log.events import parse_event
    from gpudiag.service.journal import Journal
    from gpudiag.service.keeper import JournalKeeper

    snap = nvidia_h200_node()
    snap.host.boot_id = "a" * 32
    snap.kernel_log.events = [parse_event("NVRM: Xid (PCI:0000:3b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 "
                                          "(0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)", 9.0)]
    JournalKeeper(Journal(tmp_path).load()).observe(Collection(snap, [], CollectorRun("checks", True, 0.0), 1.7e9))
    (entry,) = [e for e in Journal(tmp_path).load().entries() if e["event"] == "event"]
    assert (entry["boot_id"], entry["code"], entry["detail"]) == ("a" * 32, 149, "fatal")
    history = read_boot_history(tmp_path, tmp_path, BOOT, None, time.monotonic() + 5)
    assert [(f.boot, f.code, f.detail, f.source) for f in history.faults] == [("a" * 32, 149, "fatal",
                                                                               "gpudiag journal")]


@pytest.mark.parametrize("name", ["[0] NVRM", "Linux version x"])
def test_a_program_named_like_a_boot_makes_no_reboot(tmp_path, name):
    """Issue 32, item 4: three faults of one boot, between which user programs named "[0] NVRM" (a second since-boot
    stamp inside the message) or "Linux version x" (the banner's words) crash: one boot, no RMA."""
    segfault = (f"{name}[4242]: segfault at 0 ip 000055d5c0a8c132 sp 00007ffd3a1d2f80 error 6 "
                "in s[132,55d5c0a8c000+1000]")
    lines = [f"[    0.000000] {BANNER}"]
    for n in range(3):
        lines += [f"[ {3600 + n * 100}.000000] {XID_79}", f"[ {3650 + n * 100}.000000] {segfault}"]
    log = tmp_path / "dmesg.log"
    log.write_text("\n".join(lines) + "\n")
    info = read_kernel_log(file=log)
    assert info.boots in (None, 0, 1) and len(info.events) == 3 and {e.boot for e in info.events} == {None}
    snap = nvidia_h200_node()
    snap.kernel_log = info
    assert for_gpu(run(snap, "kernel_log.xid"), 1).action != "rma"


def test_a_collector_reads_a_cut_short_history_again_and_keeps_a_whole_one(monkeypatch):
    """The service collects every few seconds: earlier boots are read once per boot, unless the deadline cut the read
    short (BootHistory.cut_short), when the next collection reads them again."""
    from gpudiag.probe.kernel_log import boot_history

    answers = [BootHistory(current_boot=BOOT, cut_short=True), BootHistory(current_boot=BOOT)]
    reads = []
    monkeypatch.setattr(boot_history, "read_boot_history", lambda *args: reads.append(args) or answers[len(reads) - 1])
    collector = Collector(CollectOptions())
    for _ in range(3):
        collector._read_boot_history(BOOT, None, time.monotonic() + 1)
    assert len(reads) == 2 and collector._boot_history is answers[1]
