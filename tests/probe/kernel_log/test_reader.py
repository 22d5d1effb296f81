"""Kernel log reader and parser, on real-format lines (kmsg records, dmesg, dmesg -T, journalctl -k) and the
driver messages as their sources print them (open-gpu-kernel-modules kernel_rc.c, amdgpu_job.c, amdgpu_device.c,
amdgpu_ras.c, gmc_v9_0.c)."""

from __future__ import annotations

import os
import stat

import pytest

from gpudiag.model import ErrorKind, Vendor
from gpudiag.probe.kernel_log.events import AMDGPU_EVENT_KINDS, nvidia_gpu_uuid, parse_event, split_line
from gpudiag.probe.kernel_log.reader import MAX_KMSG_READS, drain_kmsg, read_kernel_log
from tests.support.paths import FIXTURES
from tests.support.sysfs_tree import SysfsTree, deny_reads

XID_31 = (
    "NVRM: Xid (PCI:0000:3b:00): 31, pid=12345, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE "
    "GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
)


def event_of(message):
    event = parse_event(message)
    assert event is not None, message
    return event


# ---------------------------------------------------------------------------------------------------------------
# Line formats


@pytest.mark.parametrize(
    "line, seconds, message",
    [
        ("3,1234,5140900,-;" + XID_31, 5.1409, XID_31),  # /dev/kmsg record
        ("4,1235,5140901,c,caller=T512;NVRM: x", 5.140901, "NVRM: x"),  # CONFIG_PRINTK_CALLER adds a field
        ("[ 5140.123456] " + XID_31, 5140.123456, XID_31),  # dmesg
        ("[    0.000000] Linux version 6.8.0", 0.0, "Linux version 6.8.0"),
        ("kern  :err   : [ 5140.123456] " + XID_31, 5140.123456, XID_31),  # dmesg -x
        ("[Mon Nov 30 11:08:44 2026] " + XID_31, None, XID_31),  # dmesg -T: wall clock only
        ("[Tue Dec  1 09:00:01 2026] " + XID_31, None, XID_31),
        ("Nov 30 11:08:44 gpu-node-07 kernel: " + XID_31, None, XID_31),  # journalctl -k
        ("Dec  1 11:08:44 gpu-node-07 kernel: [ 5140.123456] " + XID_31, 5140.123456, XID_31),  # rsyslog kern.log
        ("2026-11-30T11:08:44+0000 gpu-node-07 kernel: " + XID_31, None, XID_31),  # journalctl -o short-iso
        ("[ 5140.123456] gpu-node-07 kernel: " + XID_31, 5140.123456, XID_31),  # journalctl -o short-monotonic
        (XID_31, None, XID_31),  # a bare message
        ("[ 5140.123456] " + XID_31 + "\n", 5140.123456, XID_31),
    ],
)
def test_every_line_format_reduces_to_timestamp_and_message(line, seconds, message):
    assert split_line(line)[:2] == (seconds, message)


def test_kmsg_continuation_lines_are_skipped():
    assert split_line(" SUBSYSTEM=pci") is None
    assert split_line(" DEVICE=+pci:0000:3b:00.0") is None


def test_kmsg_escapes_are_undone():
    # Documentation/ABI/testing/dev-kmsg: non-printable bytes and backslash arrive as \xNN (UTF-8 byte-wise).
    assert split_line(r"6,1,2,-;path C:\x5cx caf\xc3\xa9")[:2] == (2e-06, "path C:\\x café")


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA


def test_xid_with_pid_and_process_name():
    event = event_of(XID_31)
    assert (event.vendor, event.kind, event.code) == (Vendor.NVIDIA, "xid", 31)
    assert event.pci_bus_id == "0000:3b:00.0"  # the tag has no function: ".0" assumed
    assert (event.pid, event.process) == (12345, "python3")
    assert event.message == XID_31


@pytest.mark.parametrize(
    "message, pci, code, pid, process",
    [
        ("NVRM: Xid (PCI:0000:b7:00 GPU-I:01): 43, pid=2211, name=train.py, Ch 00000010",
         "0000:b7:00.0", 43, 2211, "train.py"),
        ("NVRM: Xid (PCI:0000:b7:00 GPU-I:02 GPU-CI:00): 13, pid=7, name=bench, Graphics SM Warp Exception on "
         "(GPC 0, TPC 1, SM 0): Out Of Range Address", "0000:b7:00.0", 13, 7, "bench"),
        ("NVRM: Xid (PCI:0000:3b:00): 119, pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC "
         "response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
         "0000:3b:00.0", 119, None, None),
        ("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", "0000:2b:00.0", 79, None, None),
        ("NVRM: Xid (PCI:0000:02:00): 13, pid=1896, Graphics Exception: ESR 0x405840=0x80000000",  # older driver
         "0000:02:00.0", 13, 1896, None),
        ("NVRM: Xid (PCI:0002:01:00): 48, pid=99, name=a, An uncorrectable double bit error was detected.",
         "0002:01:00.0", 48, 99, "a"),
    ],
)
def test_xid_variants(message, pci, code, pid, process):
    event = event_of(message)
    assert (event.kind, event.pci_bus_id, event.code, event.pid, event.process) == ("xid", pci, code, pid, process)


def test_fallen_off_the_bus_device_line():
    # NV_DEV_PRINTF(NV_DBG_ERRORS, nv, "GPU has fallen off the bus.\n") → "NVRM: GPU %04x:%02x:%02x.%x: …"
    event = event_of("NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.")
    assert (event.vendor, event.kind, event.pci_bus_id, event.code) == (Vendor.NVIDIA, "fallen_off_bus",
                                                                         "0000:2b:00.0", None)


def test_gpu_uuid_line_is_a_mapping_not_an_event():
    line = "NVRM: GPU at PCI:0000:3b:00: GPU-5a0ac8c8-0bd3-5e51-43e5-7e4d3a3d6b0f"
    assert parse_event(line) is None
    assert nvidia_gpu_uuid(line) == ("0000:3b:00.0", "GPU-5a0ac8c8-0bd3-5e51-43e5-7e4d3a3d6b0f")
    assert nvidia_gpu_uuid(XID_31) is None


# ---------------------------------------------------------------------------------------------------------------
# amdgpu

AMD = "amdgpu 0000:c1:00.0: amdgpu: "


AMDGPU_CASES = [
    (AMD + "ring gfx_0.0.0 timeout, signaled seq=148, emitted seq=150", "ring_timeout", None),
    (AMD + "ring sdma0 timeout, but soft recovered", "ring_timeout_soft_recovered", None),
    (AMD + "GPU reset begin!", "gpu_reset", None),
    (AMD + "GPU reset begin!. Source: 1", "gpu_reset", None),
    (AMD + "GPU reset(2) succeeded!", "gpu_reset_succeeded", 2),
    (AMD + "GPU reset(3) failed", "gpu_reset_failed", None),
    (AMD + "Mode2 reset failed", "gpu_reset_failed", None),
    (AMD + "GPU reset end with ret = -110", "gpu_reset_failed", None),
    (AMD + "2 uncorrectable hardware errors detected in umc block", "ras_uncorrectable", 2),
    (AMD + "socket: 0, die: 1, 3 new uncorrectable hardware errors detected in umc block",
     "ras_uncorrectable", 3),
    (AMD + "{12}socket: 1, die: 0, 5 new uncorrectable hardware errors detected in umc block",
     "ras_uncorrectable", 5),  # RAS_EVENT_LOG prefixes the event id
    (AMD + "socket: 0, die: 0 4 uncorrectable hardware errors detected in gfx block",  # earlier: no comma
     "ras_uncorrectable", 4),
    (AMD + "socket: 0, die: 0, 4 new deferred hardware errors detected in umc block", "ras_deferred", 4),
    (AMD + "[gfxhub0] retry page fault (src_id:0 ring:0 vmid:8 pasid:32773, for process python3 pid 4242 "
           "thread python3 pid 4250)", "page_fault", None),
    (AMD + "[mmhub] no-retry page fault (src_id:0 ring:40 vmid:1 pasid:32770)", "page_fault", None),
    (AMD + "WARN: GPU is throttled, expect performance decrease. VR.", "throttled", None),
    (AMD + "WARN: GPU thermal throttling temperature reached, expect performance decrease. PPT0 and THM_CORE.",
     "throttled", None),
    (AMD + "Fatal error during GPU init", "init_failed", None),
    # issue 32: the SMU stopped answering, verbatim from ROCm/legacy-rocm-build#2196 (swsmu) and #1886 (vega20, MI50)
    (AMD + "SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x00000012 SMN_C2PMSG_82:0x00000005",
     "smu_unresponsive", None),
    (AMD + "Failed to send message 0x26, response 0x0", "smu_unresponsive", None),
]


@pytest.mark.parametrize("message, kind, count", AMDGPU_CASES)
def test_amdgpu_event_kinds(message, kind, count):
    event = event_of(message)
    assert (event.vendor, event.kind, event.count) == (Vendor.AMD, kind, count)
    assert event.pci_bus_id == "0000:c1:00.0"
    assert event.message == message


def test_every_amdgpu_kind_exercised_above_is_known():
    # The RAS kinds are exercised in test_amd_ras.py, which checks that all of them are.
    exercised = {kind for _, kind, _ in AMDGPU_CASES}
    assert exercised <= set(AMDGPU_EVENT_KINDS)


def test_page_fault_names_the_process_when_the_kernel_does():
    with_process = event_of(AMD + "[gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769, for "
                                  "process pt_main_thread pid 8812 thread pt_main_thread pid 8840)")
    assert (with_process.pid, with_process.process) == (8812, "pt_main_thread")
    without = event_of(AMD + "[gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32769)")
    assert (without.pid, without.process) == (None, None)


def test_old_drm_error_lines_have_no_bus_id():
    event = event_of("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, but soft recovered")
    assert (event.kind, event.pci_bus_id) == ("ring_timeout_soft_recovered", None)


@pytest.mark.parametrize(
    "message",
    [
        AMD + "no uncorrectable hardware errors detected in umc block",  # the all-clear form
        AMD + "0 uncorrectable hardware errors detected in gfx block",
        AMD + "socket: 0, die: 0, 0 deferred hardware errors detected in total in umc block",
        # issue 15: the running total after a "new" line is not a second event
        AMD + "socket: 0, die: 1, 7 uncorrectable hardware errors detected in total in umc block",
        AMD + "{12}socket: 1, die: 0, 5 uncorrectable hardware errors detected in total in umc block",
        AMD + "GPU reset end with ret = 0",
        AMD + "socket: 0, die: 0, 3 new correctable hardware errors detected in umc block, no user action is needed",
        AMD + "SMU is initialized successfully!",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
        "i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:85dffffb, in Xorg [1234]",
        "radeon 0000:01:00.0: ring 0 stalled for more than 10000msec",
        "",
    ],
)
def test_lines_that_are_not_gpu_events(message):
    assert parse_event(message) is None


# ---------------------------------------------------------------------------------------------------------------
# Reading: live /dev/kmsg (a regular file in a tree), saved files


def test_kmsg_records_of_a_tree_with_continuation_lines(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_kmsg([
        "6,900,4000000,-;pci 0000:3b:00.0: [10de:2335] type 00 class 0x030200",
        " SUBSYSTEM=pci",
        " DEVICE=+pci:0000:3b:00.0",
        "4,901,5140900,-;" + XID_31,
        "6,902,5200000,-;amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!",
    ])
    info = read_kernel_log(tree.root)
    assert (info.readable, info.error, info.source) == (True, None, str(tree.path("dev/kmsg")))
    assert info.lines_scanned == 3
    assert [(e.kind, e.timestamp_seconds) for e in info.events] == [("xid", 5.1409), ("gpu_reset", 5.2)]


def test_saved_files_in_each_format(tmp_path):
    saved = tmp_path / "dmesg.txt"
    saved.write_text(
        "[    3.120000] nvidia: loading out-of-tree module taints kernel.\n"
        "[ 5140.123456] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
        "[Mon Nov 30 11:08:44 2026] NVRM: Xid (PCI:0000:3c:00): 94, pid=1, name=x, Contained ECC error.\n"
        "Nov 30 11:08:45 gpu-node-07 kernel: amdgpu 0000:c1:00.0: amdgpu: Fatal error during GPU init\n"
    )
    info = read_kernel_log(file=saved)
    assert (info.readable, info.source, info.lines_scanned) == (True, str(saved), 4)
    assert [(e.kind, e.code, e.pci_bus_id, e.timestamp_seconds) for e in info.events] == [
        ("xid", 79, "0000:3b:00.0", 5140.123456),
        ("xid", 94, "0000:3c:00.0", None),
        ("init_failed", None, "0000:c1:00.0", None),
    ]


def test_recorded_h200_boot_log_has_records_and_no_gpu_events(tmp_path):
    # tests/fixtures/h200x2/kmsg-sample.txt: raw /dev/kmsg from the lab's H200 VM (35 records, 45 dictionary lines,
    # NVRM driver chatter that is not an error).
    sample = FIXTURES / "h200x2" / "kmsg-sample.txt"
    from_file = read_kernel_log(file=sample)
    assert (from_file.readable, from_file.lines_scanned, from_file.events, from_file.error) == (True, 35, [], None)
    SysfsTree(tmp_path).add_kmsg(sample.read_text().splitlines())
    assert read_kernel_log(tmp_path).lines_scanned == 35  # the same records as the live-device stand-in


def test_a_missing_saved_file_is_not_found(tmp_path):
    info = read_kernel_log(file=tmp_path / "nope.log")
    assert info.readable is False
    assert info.error.kind == ErrorKind.NOT_FOUND


def test_a_missing_kmsg_is_not_found(tmp_path):
    info = read_kernel_log(tmp_path)
    assert (info.readable, info.error.kind, info.events) == (False, ErrorKind.NOT_FOUND, [])


def test_kmsg_permission_denied_says_how_to_grant_access(tmp_path, monkeypatch):
    tree = SysfsTree(tmp_path)
    kmsg = tree.add_kmsg(["4,901,5140900,-;" + XID_31])
    deny_reads(monkeypatch, kmsg)
    info = read_kernel_log(tree.root)
    assert (info.readable, info.events, info.error.kind) == (False, [], ErrorKind.NO_PERMISSION)
    assert "root" in info.error.message and "CAP_SYSLOG" in info.error.message
    assert "dmesg_restrict=0" in info.error.message


def test_an_unreadable_saved_file_is_a_permission_error(tmp_path, monkeypatch):
    saved = tmp_path / "kern.log"
    saved.write_text(XID_31 + "\n")
    deny_reads(monkeypatch, saved)
    info = read_kernel_log(file=saved)
    assert (info.readable, info.error.kind) == (False, ErrorKind.NO_PERMISSION)


# ---------------------------------------------------------------------------------------------------------------
# Draining the kmsg device (the os.read boundary)


def scripted_reads(*steps):
    """A stand-in for os.read on /dev/kmsg: each step is a record (bytes) or an exception to raise."""
    queue = list(steps)

    def read():
        step = queue.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    return read


def test_drain_reads_until_eagain_and_carries_on_after_epipe():
    read = scripted_reads(
        b"6,10,100,-;first\n SUBSYSTEM=pci\n",
        BrokenPipeError(32, "Broken pipe"),  # records 11-19 overwritten while we read
        b"3,20,200,-;" + XID_31.encode() + b"\n",
        BlockingIOError(11, "Resource temporarily unavailable"),
        b"6,21,300,-;never read\n",
    )
    lines, stopped = drain_kmsg(read)
    assert stopped is None
    assert lines == ["6,10,100,-;first", " SUBSYSTEM=pci", "3,20,200,-;" + XID_31]


def test_drain_is_bounded_against_a_log_storm_and_endless_epipe():
    lines, stopped = drain_kmsg(lambda: b"6,1,1,-;storm\n", max_reads=50)
    assert len(lines) == 50 and "50 reads" in stopped

    def always_epipe():
        raise BrokenPipeError(32, "Broken pipe")

    assert drain_kmsg(always_epipe, max_reads=50) == ([], "stopped after 50 reads; newer records were not scanned")
    assert MAX_KMSG_READS >= 100_000  # the real bound leaves room for a full 32 MiB ring buffer of short records


def test_drain_keeps_what_it_read_before_another_error():
    lines, stopped = drain_kmsg(scripted_reads(b"6,1,1,-;kept\n", OSError(22, "Invalid argument")))
    assert lines == ["6,1,1,-;kept"]
    assert "Invalid argument" in stopped


def test_the_live_kmsg_device_when_this_machine_lets_us_read_it():
    try:
        is_device = stat.S_ISCHR(os.stat("/dev/kmsg").st_mode)
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        pytest.skip("/dev/kmsg is not readable here")
    if not is_device:
        pytest.skip("/dev/kmsg is not the kernel's device here")
    info = read_kernel_log()
    assert (info.readable, info.error, info.source) == (True, None, "/dev/kmsg")
    assert info.lines_scanned > 0  # the boot messages at least


# -- boundaries (issue 16: mutation survivors in gpudiag/probe/kernel_log/events.py) --------------------------------

@pytest.mark.parametrize("digits, pid", [("4294967295", 4294967295), ("42949672950", None)])
def test_a_pid_of_ten_digits_is_kept_and_one_of_eleven_dropped_with_the_xid_kept(digits, pid):
    event = parse_event(f"NVRM: Xid (PCI:0000:3b:00): 13, pid={digits}, name=python3, Graphics Exception")
    assert (event.code, event.pid, event.process) == (13, pid, "python3")


def test_a_bare_line_keeps_a_host_kernel_tag_only_a_time_stamp_may_precede():
    """`host kernel: ` is stripped after a dmesg stamp (journalctl -o short-monotonic), never from a bare line
    or after a syslog prefix (which already had its own host/kernel tag): there it is text someone wrote."""
    bare = "evil kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    assert split_line(bare)[:3] == (None, bare, True)
    assert parse_event(split_line(bare).message) is None
    after_syslog = "Nov 30 11:08:44 node kernel: [   12.500000] evil kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
    assert split_line(after_syslog)[:3] == (12.5, "evil kernel: NVRM: Xid (PCI:0000:3b:00): 79, ", True)
    assert split_line("[   12.500000] node kernel: NVRM: x").message == "NVRM: x"


def test_kmsg_escapes_are_decoded_only_in_an_all_ascii_record():
    """The kernel escapes every byte outside printable ASCII (Documentation/ABI/testing/dev-kmsg), so a record that
    already holds non-ASCII text was not escaped by it: it is taken as it is, `\\x41` included."""
    assert split_line("6,1,2,-;NVRM: caf\\xc3\\xa9").message == "NVRM: café"
    assert split_line("6,1,2,-;NVRM: café \\x41").message == "NVRM: café \\x41"
    assert split_line("6,1,2,-;NVRM: café ✓").message == "NVRM: café ✓"
