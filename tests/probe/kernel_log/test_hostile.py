"""The kernel log scanner against a hostile node (issue 10, items 1-4): local users who put driver-like text into
the log, lines built to make the regexes slow, numbers too long for int(), and real lines the scanner used to drop.
"""

from __future__ import annotations

import time

from gpudiag.checks import run_checks
from gpudiag.model import Status
from gpudiag.probe.collector import CollectOptions, collect
from gpudiag.probe.kernel_log.events import MAX_RECORD_CHARS, parse_event, split_line
from gpudiag.probe.kernel_log.reader import MAX_LOG_BYTES, read_kernel_log
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for
from tests.support.sysfs_tree import SysfsTree

XID_79 = "NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus."
# What the kernel logs when a program whose name is the text above segfaults (issue 10, item 1).
SEGFAULT = ("python[3734]: segfault at 0 ip 00007f0000000000 sp 00007ffd00000000 error 4 in "
            "NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.[7f0000000000+1000]")


def kinds(info):
    return [(e.kind, e.code, e.pci_bus_id) for e in info.events]


def collect_node(tmp_path, kmsg: list[str], timeout: float = 5.0):
    """A collection of a fake 2x H200 node whose /dev/kmsg holds `kmsg` (after its boot record); (snapshot, seconds)."""
    node = FakeNode.hgx_h200(2)
    sysfs_for(node, tmp_path).add_kmsg(kmsg)
    with installed(node):
        started = time.monotonic()
        snapshot = collect(CollectOptions(root=tmp_path, timeout_seconds=timeout))
        return snapshot, time.monotonic() - started


# ---------------------------------------------------------------------------------------------------------------
# 1. Only the drivers' own records count


def test_driver_text_inside_another_message_is_not_an_event():
    assert parse_event(SEGFAULT) is None
    assert parse_event("python[1]: segfault in NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.") is None
    assert parse_event("bash[9]: amdgpu 0000:c1:00.0: amdgpu: GPU reset(3) failed") is None
    assert parse_event("audit: type=1400 msg='amdgpu 0000:c1:00.0: amdgpu: Fatal error during GPU init'") is None
    # Any user can make the driver print a client version of its choosing (an ioctl on /dev/nvidiactl).
    assert parse_event("NVRM: API mismatch: the client has the version GPU has fallen off the bus, but this kernel "
                       "module has the version 580.159.04.") is None


def test_kmsg_records_written_from_user_space_are_not_driver_records(tmp_path):
    # printk.c devkmsg_write(): a write to /dev/kmsg gets facility LOG_USER (1) unless it names another non-zero
    # facility, so facility 0 (kernel) is the kernel's alone: <14> = user.info, <8> = user.emerg.
    tree = SysfsTree(tmp_path)
    tree.add_kmsg([
        f"14,100,5000000,-;{XID_79}",  # echo "NVRM: Xid …" > /dev/kmsg
        f"8,101,5000001,-;{XID_79}",
        "11,102,5000002,-;amdgpu 0000:c1:00.0: amdgpu: GPU reset(3) failed",
        f"4,103,5000003,-;{XID_79.replace('19:00', '3b:00')}",  # the driver's own (facility 0, warning)
    ])
    info = read_kernel_log(tree.root)
    assert kinds(info) == [("xid", 79, "0000:3b:00.0")]
    assert info.lines_scanned == 4 and info.records_not_kernel == 3


def test_split_line_reports_the_kmsg_facility():
    assert split_line(f"4,1,2,-;{XID_79}").kernel is True
    assert split_line(f"14,1,2,-;{XID_79}").kernel is False
    assert split_line(f"user  :warn  : [ 5.0] {XID_79}").kernel is False  # dmesg -x names the facility
    assert split_line(f"kern  :warn  : [ 5.0] {XID_79}").kernel is True
    assert split_line(f"[ 5.0] {XID_79}").kernel is True  # a saved dmesg has no facility: prefix rule only


def test_a_faked_xid_does_not_fail_the_node(tmp_path):
    snapshot, _ = collect_node(tmp_path, [f"6,200,9000000,-;{SEGFAULT}", f"14,201,9000001,-;{XID_79}"])
    results = run_checks(snapshot, only=["kernel_log.xid"])
    assert {r.status for r in results} == {Status.PASS}, [(r.status, r.message) for r in results]


# ---------------------------------------------------------------------------------------------------------------
# 2. Bounded time: linear patterns, capped lines, capped bytes


def test_a_huge_line_is_scanned_fast_and_a_real_xid_after_it_still_counts(tmp_path):
    saved = tmp_path / "dmesg.txt"
    hostile = "NVRM: " + "NVRM: x " * (11 * 1024 * 1024 // 8)  # 11 MB: quadratic for `NVRM: .*fallen off the bus`
    saved.write_text(f"[ 1.0] {hostile}\n[ 2.0] {XID_79}\n")
    started = time.monotonic()
    info = read_kernel_log(file=saved)
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, elapsed
    assert kinds(info) == [("xid", 79, "0000:19:00.0")]
    assert info.lines_truncated == 1


def test_a_truncated_line_cannot_smuggle_a_record_in_its_tail(tmp_path):
    saved = tmp_path / "dmesg.txt"
    padding = "x" * (MAX_RECORD_CHARS - len("[ 1.0] python[1]: "))
    saved.write_text(f"[ 1.0] python[1]: {padding}{XID_79}\n")  # the Xid text begins right after the cap
    assert read_kernel_log(file=saved).events == []


def test_every_pattern_is_fast_on_long_adversarial_lines():
    # One message per driver prefix, padded with what each pattern's parts would backtrack over.
    bodies = [
        "NVRM: " + "NVRM: " * 2000, "NVRM: Xid (PCI:0000:19:00" + " " * 8000,
        "amdgpu 0000:c1:00.0: amdgpu: " + "ring " * 1600, "amdgpu 0000:c1:00.0: " + "1 " * 4000,
        "amdgpu 0000:c1:00.0: " + "socket: 0, die: 0, " * 400, "amdgpu 0000:c1:00.0: " + "[gfxhub" * 1100,
        "[drm:amdgpu_x [amdgpu]] *ERROR* " + "GPU reset(" * 800, "pcieport 0000:00:01.0: pciehp: Slot(" + "(" * 8000,
        "amdgpu 0000:c1:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x" + "0" * 8000,
    ]
    started = time.monotonic()
    for body in bodies:
        for prefix in ("", "[ 1.0] ", "6,1,1,-;", "Nov 30 11:08:44 h kernel: "):
            parse = split_line(prefix + body)
            parse_event(parse.message, parse.seconds)
    assert time.monotonic() - started < 1.0


def test_a_saved_file_larger_than_the_cap_is_read_from_its_end(tmp_path):
    saved = tmp_path / "kern.log"
    filler = "[ 1.0] " + "y" * 1000 + "\n"
    with open(saved, "w") as out:
        out.write(f"[ 0.5] {XID_79.replace('19:00', '3b:00')}\n")  # oldest: beyond the cap
        for _ in range(MAX_LOG_BYTES // len(filler) + 10):
            out.write(filler)
        out.write(f"[ 9.0] {XID_79}\n")  # newest: kept
    info = read_kernel_log(file=saved)
    assert kinds(info) == [("xid", 79, "0000:19:00.0")]
    assert info.incomplete and "MiB" in info.incomplete


def test_a_scan_past_its_deadline_stops_and_says_so(tmp_path):
    saved = tmp_path / "kern.log"
    saved.write_text("".join(f"[ {i}.0] usb 1-1: new device\n" for i in range(50_000)))
    info = read_kernel_log(file=saved, until=time.monotonic() - 1)  # already late
    assert info.readable and info.incomplete and "deadline" in info.incomplete


def test_a_hostile_line_does_not_starve_the_gpu_probes(tmp_path):
    # Issue 10, item 2: an 11 MB line made every NVML probe miss its deadline (16 false gpus_visible FAILs).
    snapshot, elapsed = collect_node(tmp_path, ["6,300,1000,-;NVRM: " + "NVRM: x " * (11 * 1024 * 1024 // 8)], 3.0)
    assert elapsed < 3.5
    assert [d.reachable for d in snapshot.devices] == [True, True]
    assert snapshot.kernel_log.readable and snapshot.kernel_log.lines_truncated == 1


# ---------------------------------------------------------------------------------------------------------------
# 3. One bad record is skipped and counted, never fatal


def test_a_huge_number_skips_its_record_only(tmp_path):
    tree = SysfsTree(tmp_path)
    huge = "9" * 5000  # over Python's 4,300-digit int-string limit
    tree.add_kmsg([
        f"4,{huge},1000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, y",
        f"4,2,{huge},-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, y",
        f"4,3,3000,-;NVRM: Xid (PCI:0000:3b:00): {huge}, pid=1, name=x, y",
        f"4,4,4000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid={huge}, name=x, y",
        f"4,5,5000,-;amdgpu 0000:c1:00.0: amdgpu: {huge} uncorrectable hardware errors detected in umc block",
        f"4,6,6000,-;{XID_79}",
    ])
    info = read_kernel_log(tree.root)
    assert info.error is None and info.readable
    assert ("xid", 79, "0000:19:00.0") in kinds(info)
    assert info.records_skipped >= 3
    with_pid = [e for e in info.events if e.code == 13]
    assert all(e.pid is None for e in with_pid)


def test_skipped_records_are_named_in_the_check(tmp_path):
    snapshot, _ = collect_node(tmp_path, [f"4,{'9' * 5000},1000,-;{XID_79}", f"4,6,6000,-;{XID_79}"])
    results = run_checks(snapshot, only=["kernel_log.xid"])
    failed = [r for r in results if r.status == Status.FAIL]
    assert len(failed) == 1 and "1 record(s) could not be parsed" in failed[0].message
    assert failed[0].observed["records_skipped"] == 1


# ---------------------------------------------------------------------------------------------------------------
# 4. Real lines kept, fake digits refused


def test_a_five_digit_vmd_domain_is_kept():
    event = parse_event("NVRM: Xid (PCI:10000:01:00): 79, pid=1, name=x, GPU has fallen off the bus.")
    assert (event.kind, event.code, event.pci_bus_id) == ("xid", 79, "10000:01:00.0")
    amd = parse_event("amdgpu 10001:c1:00.0: amdgpu: GPU reset(3) failed")
    assert amd.pci_bus_id == "10001:c1:00.0"


def test_non_ascii_digits_are_not_numbers():
    assert parse_event("NVRM: Xid (PCI:0000:19:00): \u0667\u0669, pid=1, name=x, y") is None
    assert (
        parse_event("amdgpu 0000:c1:00.0: amdgpu: \u0663 uncorrectable hardware errors detected in umc block") is None
    )
    assert split_line("[ \u0661.0] x").seconds is None


def test_a_scan_that_misses_the_deadline_is_unknown_and_the_gpus_are_unaffected(tmp_path, monkeypatch):
    from gpudiag.probe.kernel_log import reader as kernel_log

    real = kernel_log.split_line

    def slow(line):  # a log whose scan outlasts the deadline: 20,000 records at 1 ms each
        time.sleep(0.001)
        return real(line)

    monkeypatch.setattr(kernel_log, "split_line", slow)
    snapshot, elapsed = collect_node(tmp_path, [f"6,{i},{i},-;NVRM: loading" for i in range(20_000)], 1.5)
    assert elapsed < 2.5
    assert [d.reachable for d in snapshot.devices] == [True, True]
    assert "deadline" in (snapshot.kernel_log.incomplete or ""), (
        snapshot.kernel_log.error,
        snapshot.kernel_log.lines_scanned,
        snapshot.collectors,
    )
    results = run_checks(snapshot, only=["kernel_log.xid"])
    assert {r.status for r in results} == {Status.UNKNOWN}
    assert all("scan incomplete" in r.message and "--timeout" in r.remediation for r in results)
    gpus = run_checks(snapshot, only=["inventory.gpus_visible"])
    assert Status.FAIL not in {r.status for r in gpus}
