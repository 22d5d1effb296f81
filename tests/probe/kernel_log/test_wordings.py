"""Issue 32, items 5-7: what the field writes that gpudiag did not read. Each record is verbatim from the source named
beside it (or made here by the real tool that writes it); records on a real GPU's own bus were moved onto the test
node's bus only where the comment says so."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpudiag.model import Status
from gpudiag.probe.kernel_log.formats import month_number, split_line, wall_seconds
from gpudiag.probe.kernel_log.reader import read_kernel_log
from tests.support.snapshots import for_gpu, node_level, nvidia_h200_node, run

# -- item 5: other locales and shapes ---------------------------------------------------------------------------

# A GPU of the test node (nvidia_h200_node: GPU 0 at 0000:19:00.0, GPU 1 at 0000:3b:00.0).
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _xid_results(tmp_path, text: str):
    path = tmp_path / "kern.log"
    path.write_text(text, encoding="utf-8")
    snap = nvidia_h200_node()
    snap.kernel_log = read_kernel_log(file=path)
    return snap.kernel_log, run(snap, "kernel_log.xid")


# journalctl -o short prints the month with strftime's %b (systemd src/shared/logs-show.c), in the reader's LC_TIME:
# glibc's abmon of zh_CN (`6月`, the line of tests/fixtures/field/nvidia/threestones-zh-cn-journal.json), ru_RU
# (`фев`), nb_NO (`jan.`), and a full name where a locale's abbreviation is the name (`april`).
@pytest.mark.parametrize("stamp, month", [("6月 28 02:52:53 jjf-Super-Server", 6), ("фев 12 21:35:19 gpu-node-07", 2),
                                          ("jan. 29 09:27:03 gpu-node-07", 1), ("april 19 09:27:03 gpu-node-07", 4),
                                          ("Jan 02 21:35:19 ", 1)])  # the last: a blank host name
def test_a_journal_line_in_another_locale_fails_its_own_gpu_only(tmp_path, stamp, month):
    line = f"{stamp} kernel: {XID}"
    split = split_line(line)
    assert (split.message, split.fmt, split.kernel) == (XID, "syslog", True)
    assert month_number(stamp.split(" ")[0]) == month and wall_seconds(split.wall_time) is not None
    log, results = _xid_results(tmp_path, line + "\n")
    assert log.unreadable_lines == 0
    assert for_gpu(results, 1).status == Status.FAIL and for_gpu(results, 0).status == Status.PASS
    assert node_level(results) == []


def test_a_program_in_another_locale_is_still_user_space(tmp_path):
    log, results = _xid_results(tmp_path, f"фев 12 21:35:19 gpu-node-07 python3[4242]: {XID}\n")
    assert log.events == [] and log.records_not_kernel == 1 and {r.status for r in results} == {Status.PASS}


@pytest.mark.skipif(shutil.which("dmesg") is None, reason="util-linux dmesg is not installed")
@pytest.mark.parametrize("flags", [["-H", "--color=always"], ["-x", "-H", "--color=always"], ["-H"]])
def test_dmesg_human_output_as_the_real_dmesg_writes_it(tmp_path, flags):
    # `dmesg -H` on a terminal: relative times and colours (the prefix `NVRM: ` coloured apart from the rest).
    # Before, the coloured lines were read as bare text and the Xid silently passed.
    raw = tmp_path / "raw"
    raw.write_text(f"<3>[ 1590188.789226] {XID}\n")
    human = subprocess.run(["dmesg", "-F", str(raw), *flags], capture_output=True, text=True, check=True).stdout
    assert "Xid" in human and ("\x1b[" in human) == ("--color=always" in flags)
    log, results = _xid_results(tmp_path, human)
    assert [(e.code, e.pci_bus_id) for e in log.events] == [(79, "0000:3b:00.0")]
    assert for_gpu(results, 1).status == Status.FAIL and for_gpu(results, 0).status == Status.PASS


def test_an_unreadable_line_warns_only_the_gpu_it_names(tmp_path):
    # A driver record behind a prefix gpudiag does not know (a container runtime's log line around dmesg).
    log, results = _xid_results(tmp_path, f"2026-12-01T22:49:56.886367Z stdout F [   27.647469] {XID}\n")
    assert log.unreadable_lines == 1 and log.unreadable_gpus == {"0000:3b:00.0": 1}
    assert for_gpu(results, 1).status == Status.WARN and "cannot read" in for_gpu(results, 1).message
    assert for_gpu(results, 0).status == Status.PASS and node_level(results) == []


def test_an_unreadable_line_that_names_no_gpu_warns_node_level(tmp_path):
    # The oldest drivers' Xid names no domain or bus as gpudiag reads it (`NVRM: Xid (0000:03:00)` is read; this
    # wrapper hides even that): the warning is the node's, not every GPU's.
    text = "2026-12-01T22:49:56.886367Z stdout F [   27.647469] NVRM: GPU has fallen off the bus.\n"
    log, results = _xid_results(tmp_path, text)
    assert log.unreadable_lines == 1 and log.unreadable_gpus == {}
    assert [r.status for r in results if r.device is not None] == [Status.PASS, Status.PASS]
    (node,) = node_level(results)
    assert node.status == Status.WARN and "line 1:" in node.observed["first_unreadable"]


# -- item 8: NVIDIA's documents decide where peers disagree --------------------------------------------------------


def test_xid_44_follows_nvidia_catalog_ignore_bucket():
    # docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: 44 ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW, Immediate
    # Action IGNORE, Investigatory CONTACT_SUPPORT (GPUd fails it). Before, gpudiag warned it as "not in the catalog".
    from gpudiag.checks.kernel_log import xid_catalog

    assert xid_catalog.XID_CATALOG[44].bucket == "IGNORE"
    assert "not in gpudiag's catalog" not in xid_catalog.describe(44)
    assert xid_catalog.automation_action(44, Status.WARN) == "watch"


def test_sxid_12028_non_fatal_stays_a_warning_as_the_fabric_manager_guide_says():
    # GPUd's test line (tests/fixtures/field/nvidia/gpud-sxid-kmsg.json); the guide lists 12028 as Non-Fatal.
    from gpudiag.checks.kernel_log import sxid_catalog
    from gpudiag.checks.kernel_log.nvidia import sxid_finding
    from gpudiag.probe.kernel_log.nvidia import sxid_event

    event = sxid_event("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV "
                       "error (First)", None)
    assert sxid_catalog.sxid_class(12028) == sxid_catalog.NONFATAL
    assert (sxid_finding(event).severity, sxid_finding(event).verdict) == (Status.WARN, "watch")
