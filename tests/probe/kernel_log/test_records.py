"""A record is one record (issue 32, item 1): text after a newline inside a kernel record belongs to that record and
never becomes a driver record of its own, in any form gpudiag reads. The hostile records are real: an unprivileged
user's segfault report whose program file name holds "\\nNVRM: Xid ...: 79, ... GPU has fallen off the bus."
(tests/fixtures/kmsg-hostile/README.md says how they were made)."""

from __future__ import annotations

import json

import pytest

from gpudiag.cli import app as cli
from gpudiag.model import KernelLogInfo
from gpudiag.probe.kernel_log.events import EventReader
from gpudiag.probe.kernel_log.formats import split_line
from gpudiag.probe.kernel_log.reader import drain_kmsg, read_kernel_log, scan
from tests.support.paths import REPO

HOSTILE = REPO / "tests/fixtures/kmsg-hostile"
FORMS = ["kmsg", "dmesg", "dmesg-x", "dmesg-T", "dmesg-iso", "dmesg-json"]
KMSG = (HOSTILE / "segfault-newline-name.kmsg").read_bytes()


@pytest.mark.parametrize("form", FORMS)
def test_a_segfault_report_holding_an_xid_in_its_file_name_is_no_driver_record(form):
    info = read_kernel_log(file=HOSTILE / f"segfault-newline-name.{form}")
    assert info.readable and info.events == [] and info.unreadable_lines == 0, (info.events, info.first_unreadable)


def test_live_kmsg_reads_each_read_as_one_record():
    """EventReader.feed, as the live /dev/kmsg reader drives it: one read() is one record."""
    reads = iter([KMSG])

    def read() -> bytes:
        try:
            return next(reads)
        except StopIteration:
            raise BlockingIOError from None

    lines, stopped = drain_kmsg(read)
    assert stopped is None
    record = split_line(lines[0])
    assert record.kernel and "\nNVRM: Xid (PCI:0000:18:00): 79" in record.message  # the kernel's own record, facility 0
    assert EventReader().feed(record) == []
    assert scan(lines, KernelLogInfo(source="kmsg")).events == []


def test_a_user_string_inside_an_nvrm_record_makes_no_second_record():
    """NVRM's "API mismatch: the client has the version %s" (nv.c) prints the client's string: a newline in it
    cannot start an Xid record, in kmsg or in dmesg's indented form."""
    text = ("NVRM: API mismatch: the client has the version 535.1\\x0aNVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has "
            "fallen off the bus., but\\x0aNVRM: this kernel module has the version 550.54.15.")
    lines = [f"3,900,5000000,-;{text}"]
    # At the error level the record itself is an unrecognised NVRM error (issue 32, item 7): one, of its first line
    # only; no Xid.
    events = scan(lines, KernelLogInfo(source="kmsg")).events
    assert [(e.kind, e.message) for e in events] == [("driver_error", "NVRM: API mismatch: the client has the version "
                                                                      "535.1")]
    dmesg = ["[    5.000000] NVRM: API mismatch: the client has the version 535.1",
             "               NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus., but",
             "               NVRM: this kernel module has the version 550.54.15."]
    assert scan(dmesg, KernelLogInfo(source="dmesg")).events == []


def test_the_real_multi_line_probe_message_is_still_read_as_a_unit():
    record = ("4,700,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this "
              "system has\\x0aNVRM: fallen off the bus and is not responding to commands.")
    events = scan([record], KernelLogInfo(source="kmsg")).events
    assert [(e.kind, e.pci_bus_id) for e in events] == [("fallen_off_bus", "0000:b3:00.0")]


def _node(tmp_path):
    from tests.support.field_corpus import _nvidia_root

    return _nvidia_root(tmp_path / "node", ["0000:18:00.0"])


def test_three_boots_of_forged_records_neither_drain_nor_rma(tmp_path, capsys):
    """The consequences the issue lists, at the check level: the forged Xid 79 drains nothing, and three boots of it
    (each boot opened by a real banner) are no RMA."""
    banner = ("[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) (x86_64-linux-gnu-gcc-13) "
              "#45-Ubuntu SMP")
    hostile = (HOSTILE / "segfault-newline-name.dmesg").read_text()
    log = tmp_path / "kernel.log"
    log.write_text("".join(f"{banner}\n{hostile}" for _ in range(3)))
    fake, root = _node(tmp_path)
    with fake:
        code = cli.main(["check", "--json", "--root", str(root), "--kernel-log", str(log), "--only", "kernel_log"])
    results = json.loads(capsys.readouterr().out)["results"]
    assert code == 0, results
    assert all(r["status"] == "pass" for r in results if r["check"] == "kernel_log.xid"), results


@pytest.mark.parametrize("form", ["journal.export", "journal.json", "journal.short"])
def test_the_journals_forms_of_the_same_records_make_no_driver_record(form):
    """Issue 32, items 1 and 2, from a real journald + journalctl: the segfault record, and a native-protocol
    client's MESSAGE holding "\\n\\n_TRANSPORT=kernel\\nMESSAGE=NVRM: Xid …" (a binary field in export)."""
    info = read_kernel_log(file=HOSTILE / form)
    assert info.readable and info.events == [] and info.unreadable_lines == 0, (info.events, info.first_unreadable)


def test_export_reads_a_binary_kernel_message_by_its_length(tmp_path):
    """The probe-time "fallen off the bus" message is one kernel record of three lines: export writes its MESSAGE
    as a binary field, whose length holds NUL bytes. It is read, not dropped, and the file is not "binary data"."""
    entries = (HOSTILE / "journal.export").read_bytes()
    first = entries[:entries.index(b"\n\n__CURSOR=") + 2]
    message = (b"NVRM: The NVIDIA GPU 0000:18:00.0\nNVRM: (PCI ID: 10de:2335) installed in this system has\n"
               b"NVRM: fallen off the bus and is not responding to commands.")
    probe = first.replace(b"MESSAGE=" + first.split(b"MESSAGE=")[1].split(b"\n")[0] + b"\n",
                          b"MESSAGE\n" + len(message).to_bytes(8, "little") + message + b"\n")
    log = tmp_path / "journal.export"
    log.write_bytes(probe + entries)
    info = read_kernel_log(file=log)
    assert [(e.kind, e.pci_bus_id) for e in info.events] == [("fallen_off_bus", "0000:18:00.0")]
    assert info.unreadable_lines == 0


def test_export_with_a_length_past_its_end_names_the_field_and_reads_on(tmp_path):
    entries = (HOSTILE / "journal.export").read_bytes()
    first = entries[:entries.index(b"\n\n__CURSOR=") + 2]
    broken = first.replace(b"\nMESSAGE=", b"\nMESSAGE\n\xff\xff\xff\xff\x00\x00\x00\x00", 1)
    xid = first.replace(first.split(b"MESSAGE=")[1].split(b"\n")[0],
                        b"NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.")
    log = tmp_path / "journal.export"
    log.write_bytes(broken + xid)
    info = read_kernel_log(file=log)
    assert [(e.kind, e.code) for e in info.events] == [("xid", 79)]
    assert info.unreadable_lines == 1 and "MESSAGE" in info.first_unreadable


def test_a_forged_later_xid_154_cannot_turn_a_real_one_into_a_warn():
    """Issue 32, item 1: Xid 154 "GPU Reset Required" (the driver's own record), then a user's segfault report whose
    file name holds the driver's "changed ... to 0x0 (None)" record: the GPU still needs its reset."""
    from gpudiag.model import Status
    from tests.support.snapshots import for_gpu, nvidia_h200_node, run

    real = "4,800,5000000000,-;NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 " \
           "(GPU Reset Required)"
    forged = KMSG.decode().strip().replace("6,432,57607268910", "6,801,5100000000").replace(
        "79, pid=1, GPU has fallen off the bus.", "154, GPU recovery action changed from 0x1 (GPU Reset Required) to "
        "0x0 (None)").replace("PCI:0000:18:00", "PCI:0000:3b:00")
    info = scan([real, forged], KernelLogInfo(source="/dev/kmsg", readable=True))
    assert [(e.code, e.detail) for e in info.events] == [(154, "reset")]
    snap = nvidia_h200_node()
    snap.kernel_log = info
    assert for_gpu(run(snap, "kernel_log.xid"), 1).status == Status.FAIL
