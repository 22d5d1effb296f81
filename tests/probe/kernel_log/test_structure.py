"""A saved log's form comes from lines that truly are structured (issue 32, item 3): a program named like a journal
field, as the oldest record of a ring buffer, does not turn the whole dmesg into journal export or JSON; one line
that cannot be read (over-nested JSON) is counted and named, and never hides a readable fault."""

from __future__ import annotations

import json

import pytest

from gpudiag.probe.kernel_log.formats import structured_kind
from gpudiag.probe.kernel_log.reader import read_kernel_log

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
# The kernel's segfault report (arch/x86/mm/fault.c show_signal_msg) as dmesg prints it: the task's comm, at most 15
# bytes, then "[pid]: segfault at ...". Shape from tests/fixtures/kmsg-hostile/segfault-newline-name.dmesg.
SEGFAULT = ("[   12.000000] {name}[9377]: segfault at 0 ip 0000555bf4527132 sp 00007ffc92c9cd00 error 6 in "
            "s[132,55d5+1000]")
CURSOR = ("__CURSOR=s=739ad463348b4ceca5a9e69c95a3c93f;i=4ece7;b=6c7c6013a8f84c0abbbd4b4f1d3b4e01;m=e9a65b2;"
          "t=5e2c6b3c0b5c0;x=4e8e0bd0f5bfb153")


@pytest.mark.parametrize("name", ["__CURSOR=x", '{"MESSAGE"', '{"MESSAGE":"x"}', "__REALTIME_TIMES"])
def test_a_program_named_like_a_journal_field_does_not_change_the_logs_form(tmp_path, name):
    for stamped in (True, False):  # dmesg, and dmesg -t (no stamp: the name starts the line)
        first = SEGFAULT.format(name=name)
        first = first if stamped else first.split("] ", 1)[1]
        log = tmp_path / "dmesg.txt"
        log.write_text(f"{first}\n[ 3600.000000] {XID_79}\n")
        info = read_kernel_log(file=log)
        assert [(e.kind, e.code) for e in info.events] == [("xid", 79)], (name, stamped)
        assert info.unreadable_lines == 0, info.first_unreadable


def test_a_structured_line_is_one_that_truly_is():
    assert structured_kind(CURSOR + "\n") == "journal-export"
    assert structured_kind("__CURSOR=x[9377]: segfault at 0") is None
    assert structured_kind(json.dumps({"MESSAGE": "x", "_BOOT_ID": "b"})) == "journal-json"
    assert structured_kind('{"MESSAGE"[9377]: segfault at 0 ip 0') is None


def test_an_over_nested_line_is_counted_and_the_fault_after_it_read(tmp_path):
    entry = {"MESSAGE": XID_79, "_TRANSPORT": "kernel", "_BOOT_ID": "6c7c6013a8f84c0abbbd4b4f1d3b4e01",
             "__MONOTONIC_TIMESTAMP": "3600000000"}
    nested = '{"MESSAGE": ' + "[" * 50_000 + "]" * 50_000 + "}"
    log = tmp_path / "journal.json"
    log.write_text(json.dumps({**entry, "MESSAGE": "hello"}) + "\n" + nested + "\n" + json.dumps(entry) + "\n")
    info = read_kernel_log(file=log)
    assert [(e.kind, e.code) for e in info.events] == [("xid", 79)]
    assert info.unreadable_lines == 1 and info.first_unreadable.startswith("journal-json: {")


def test_an_over_nested_dmesg_json_item_is_skipped(tmp_path):
    """`dmesg --json` with one item's msg nested 4,000 deep: that item is skipped, the next one's Xid read."""
    items = [{"pri": 3, "time": 5.0, "msg": XID_79}] * 2
    log = tmp_path / "dmesg.json"
    log.write_text(json.dumps({"dmesg": items}, indent=3).replace('"msg": "NVRM', '"msg": ' + "[" * 4000 + "]" * 4000
                                                                  + '\n      },{\n         "msg": "NVRM', 1))
    info = read_kernel_log(file=log)
    assert info.readable and [(e.kind, e.code) for e in info.events][-1:] == [("xid", 79)]
