"""Saved-log formats (issue 21, item 1) the corpus has no public NVRM sample of, one test each, with the line shapes
the tools write (systemd's journalctl output modes and export format, RFC 5424, rsyslog's #012): a driver record
read in each, a user-space record never, and a file gpudiag cannot read said so. The formats with public samples are
replayed from tests/fixtures/field/ (tests/probe/kernel_log/test_field_corpus.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from gpudiag.model import Status
from gpudiag.probe.kernel_log.formats import split_line
from gpudiag.probe.kernel_log.reader import read_kernel_log
from tests.support.snapshots import for_gpu, nvidia_h200_node, run

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
GPU1 = "0000:3b:00.0"


def _read(tmp_path, text: str, name: str = "kern.log"):
    path = tmp_path / name
    path.write_text(text)
    return read_kernel_log(file=path)


@pytest.mark.parametrize("line, fmt, seconds", [
    (f"Dec 01 22:49:56 gpu-node-07 kernel: {XID}", "syslog", None),  # journalctl -k -o short
    (f"Dec 01 22:49:56 kernel: {XID}", "syslog", None),  # --no-hostname
    (f"2026-12-01T22:49:56+0000 gpu-node-07 kernel: {XID}", "syslog", None),  # -o short-iso (systemd < 254)
    (f"2026-12-01T22:49:56.886367+00:00 gpu-node-07 kernel: {XID}", "syslog", None),  # short-iso-precise, rsyslog
    (f"Dec 01 22:49:56.886367 gpu-node-07 kernel: {XID}", "syslog", None),  # -o short-precise
    (f"Tue 2026-12-01 22:49:56 UTC gpu-node-07 kernel: {XID}", "syslog", None),  # -o short-full
    (f"[   27.647469] gpu-node-07 kernel: {XID}", "journal-monotonic", 27.647469),  # -o short-monotonic
    (f"[   27.647469] kernel: {XID}", "journal-monotonic", 27.647469),  # short-monotonic --no-hostname
    (f"<4>1 2026-12-01T22:49:56.886367+00:00 gpu-node-07 kernel - - - {XID}", "rfc5424", None),
    (f"<4>Dec  1 22:49:56 gpu-node-07 kernel: {XID}", "syslog", None),  # RFC 3164 with its PRI
    (f"[  130.456250] [ T1946] {XID}", "dmesg", 130.45625),  # CONFIG_PRINTK_CALLER on the console
    (f"kern  :warn  : [  130.456250] [    C3] {XID}", "dmesg-x", 130.45625),
])
def test_each_journal_and_syslog_form_is_read(line, fmt, seconds):
    split = split_line(line)
    assert (split.message, split.fmt, split.seconds, split.kernel) == (XID, fmt, seconds, True)


@pytest.mark.parametrize("line", [
    f"Dec 01 22:49:56 gpu-node-07 python3[4242]: {XID}",  # a program's own journal line (-o short)
    f"Dec 01 22:49:56 python3[4242]: {XID}",
    f"<12>1 2026-12-01T22:49:56.886367+00:00 gpu-node-07 logger 4242 - - {XID}",  # facility user
    f"<13>Dec  1 22:49:56 gpu-node-07 kernel: {XID}",  # `logger -t kernel` is user facility (13 = 1 * 8 + 5)
    f"10.20.30.29: user: warning: [2023-04-02T08:26:16.320486611Z]: {XID}",  # talosctl, user space
])
def test_user_space_lines_never_count(tmp_path, line):
    info = _read(tmp_path, line + "\n")
    assert info.events == [] and info.records_not_kernel == 1 and info.unreadable_lines == 0


def _entry(message, transport="kernel", boot="a" * 32, monotonic="27647469"):
    # a cursor of the journal's shape (sd_journal_get_cursor): an export's first line is one (issue 32, item 3)
    cursor = f"s=739ad463348b4ceca5a9e69c95a3c93f;i=4ece7;b={boot};m=1a5e0ed;t=5e2c6b3c0b5c0;x=4e8e0bd0f5bfb153"
    return {"__CURSOR": cursor, "__REALTIME_TIMESTAMP": "1796165396886367", "__MONOTONIC_TIMESTAMP": monotonic,
            "_BOOT_ID": boot, "_TRANSPORT": transport, "SYSLOG_IDENTIFIER": "kernel" if transport == "kernel" else "x",
            "MESSAGE": message}


def test_journal_export_json_and_json_pretty(tmp_path):
    records = [_entry(XID), _entry(XID.replace("79", "48"), transport="syslog")]
    export = "".join("".join(f"{k}={v}\n" for k, v in r.items()) + "\n" for r in records)
    for name, text in (("export", export), ("json", "".join(json.dumps(r) + "\n" for r in records)),
                       ("pretty", "".join(json.dumps(r, indent=8) + "\n" for r in records)),
                       ("seq", "".join("\x1e" + json.dumps(r) + "\n" for r in records))):
        info = _read(tmp_path, text, name)
        assert [(e.code, e.timestamp_seconds, e.boot) for e in info.events] == [(79, 27.647469, "a" * 32)], name
        assert info.records_not_kernel == 1 and info.unreadable_lines == 0, name


def test_a_journal_spanning_boots_counts_them_and_a_message_in_bytes_is_read(tmp_path):
    records = [_entry(XID, boot="a" * 32), _entry(list(XID.encode()), boot="b" * 32)]
    info = _read(tmp_path, "".join(json.dumps(r) + "\n" for r in records))
    assert info.boots == 2 and [e.boot for e in info.events] == ["a" * 32, "b" * 32]


def test_multi_line_records_in_one_line_are_read_line_by_line(tmp_path):
    # osapi.c prints the probe-time message as one printk of three lines: kmsg escapes the newlines, rsyslog
    # writes #012 for them, and a journal MESSAGE keeps them.
    triple = ("NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
              "NVRM: fallen off the bus and is not responding to commands.")
    for text in ("3,1200,1843308145,-;" + triple.replace("\n", "\\x0a") + "\n",
                 "Dec  1 22:49:56 gpu-node-07 kernel: " + triple.replace("\n", "#012") + "\n",
                 json.dumps(_entry(triple)) + "\n"):
        (event,) = _read(tmp_path, text).events
        assert (event.kind, event.pci_bus_id, event.detail) == ("fallen_off_bus", "0000:b3:00.0", "probe")


def test_a_line_in_no_known_format_warns_with_the_file_and_the_line(tmp_path):
    # A driver record behind a prefix gpudiag does not know (here a container runtime's log line around dmesg).
    text = f"2026-12-01T22:49:56.886367Z stdout F [   27.647469] {XID}\n"
    info = _read(tmp_path, text)
    assert info.events == [] and info.unreadable_lines == 1 and "line 1: 2026-12-01T22:49:56" in info.first_unreadable
    snap = nvidia_h200_node()
    snap.kernel_log = info
    result = for_gpu(run(snap, "kernel_log.xid"), 1)
    assert result.status == Status.WARN and "cannot read" in result.message and str(tmp_path) in result.message
    assert result.observed["first_unreadable"].startswith("line 1:")


def test_a_compressed_log_is_not_judged_clean(tmp_path):
    path = tmp_path / "kern.log.gz"
    path.write_bytes(gzip.compress(f"[ 9.0] {XID}\n".encode()))
    info = read_kernel_log(file=path)
    assert info.readable and info.unreadable_lines == 1 and "gzip" in info.first_unreadable
    snap = nvidia_h200_node()
    snap.kernel_log = info
    assert {r.status for r in run(snap, "kernel_log.xid")} == {Status.WARN}


def test_chatter_and_foreign_prefixes_stay_quiet(tmp_path):
    # A dmesg line from another module that mentions NVRM in passing is readable (a known stamp) and no record.
    info = _read(tmp_path, f"[ 1.0] python[1]: segfault at 0 in {XID}\n[ 2.0] NVRM: loading NVIDIA UNIX x86_64\n")
    assert info.events == [] and info.unreadable_lines == 0
