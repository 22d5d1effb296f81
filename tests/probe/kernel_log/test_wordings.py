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


# -- item 6: records without an Xid ---------------------------------------------------------------------------------


def _node_results(tmp_path, text: str, check: str = "kernel_log.xid", upstream: tuple = ()):
    path = tmp_path / "kern.log"
    path.write_text(text, encoding="utf-8")
    snap = nvidia_h200_node()
    if upstream:  # the record's bridges placed above the test node's GPU 1 (as the corpus's pci_parents do)
        snap.pci_gpus[1].upstream_ports = [*snap.pci_gpus[1].upstream_ports, *upstream]
    snap.kernel_log = read_kernel_log(file=path)
    return snap.kernel_log, run(snap, check)


def test_reset_required_assertions_fail_the_node(tmp_path):
    # scitix/sichek's test data (the driver's NV_ASSERT_OK print, 0x62 NV_ERR_RESET_REQUIRED), verbatim:
    # https://github.com/scitix/sichek/blob/006f9e68ad058929760986eafba89dbd8afe5a09/components/dmesg/
    # kmsg_event_cache_test.go
    text = ("[Mon Jan  1 12:00:00 2024] NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; "
            "hParent=0x5c000054; hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; "
            "paramsStatus=0x00000062; status=0x00000062\n"
            "[Mon Jan  1 12:00:01 2024] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
            "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874\n")
    log, results = _node_results(tmp_path, text)
    assert [e.kind for e in log.events] == ["reset_required"]
    (node,) = node_level(results)  # the line names no GPU
    assert (node.status, node.action, node.fault_code) == (Status.FAIL, "reset", "GPUDIAG-NVRM-RESET-REQUIRED")


def test_an_invalid_bar_and_the_probe_failure_fail_the_gpu(tmp_path):
    # linux-kernel, "AGP mem resource is 64 bits, so no X ?" (J.A. Magallon, 2006-07-13, Message-ID
    # <20060713001123.6d523a2f@werewolf.auna.net>), verbatim; the oldest drivers print the bus as "0001:00.0".
    text = ("nvidia: module license 'NVIDIA' taints kernel.\n"
            "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
            "NVRM: BAR1 is 0M @ 0x00000000 (PCI:0001:00.0)\n"
            "NVRM: The system BIOS may have misconfigured your graphics card.\n"
            "nvidia: probe of 0000:01:00.0 failed with error -1\n"
            "NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
            "NVRM: None of the NVIDIA graphics adapters were initialized!\n")
    log, results = _node_results(tmp_path, text)
    assert [(e.kind, e.pci_bus_id) for e in log.events] == [("bar_invalid", "0000:01:00.0"),
                                                            ("probe_failed", "0000:01:00.0")]
    (node,) = node_level(results)  # never listed by the driver: not in the inventory
    assert node.status == Status.FAIL and node.observed["pci_bus_id"] == "0000:01:00.0"
    assert {r.status for r in results if r.device is not None} == {Status.PASS}


def test_the_older_one_line_fallen_off_message(tmp_path):
    # kernel-open/nvidia/nv.c before the "GPU %04x:…: GPU has fallen off the bus." wording (the example line),
    # on the test node's GPU 1.
    log, results = _node_results(tmp_path, "[ 3.000000] NVRM: GPU at 0000:3b:00.0 has fallen off the bus.\n")
    assert [(e.kind, e.pci_bus_id) for e in log.events] == [("fallen_off_bus", "0000:3b:00.0")]
    assert for_gpu(results, 1).status == Status.FAIL and for_gpu(results, 0).status == Status.PASS


def test_native_aer_fatal_errors_on_a_bridge_fail_the_gpus_below_it(tmp_path):
    # linux-pci, "Recovering from AER: Uncorrected (Fatal) error" (Hinko Kocevar, 2020-12-04,
    # https://lore.kernel.org/linux-pci/1a9f75f828c04130b16b7e0a3ae7f1e0@ess.eu/), verbatim: the root port 00:01.0
    # reports a fatal completion timeout; the devices below it stopped answering. Placed above the test node's GPU 1.
    text = ("Dec  1 02:16:37 bd-cpu18 kernel: pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: id=0008\n"
            "Dec  1 02:16:37 bd-cpu18 kernel: pcieport 0000:00:01.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
            "type=Transaction Layer, id=0008(Requester ID)\n"
            "Dec  1 02:16:37 bd-cpu18 kernel: pcieport 0000:00:01.0:   device [8086:1901] error status/mask="
            "00004000/00000000\n"
            "Dec  1 02:16:37 bd-cpu18 kernel: pcieport 0000:00:01.0:    [14] Completion Timeout     (First)\n")
    log, results = _node_results(tmp_path, text, upstream=("0000:00:01.0",))
    assert [(e.kind, e.pci_bus_id) for e in log.events] == [("aer_fatal", "0000:00:01.0")]
    gpu = for_gpu(results, 1)
    assert (gpu.status, gpu.action, gpu.fault_code) == (Status.FAIL, "reboot", "GPUDIAG-PCIE-AER-FATAL")
    assert for_gpu(results, 0).status == Status.PASS and node_level(results) == []


def test_native_aer_on_a_port_no_gpu_sits_below_is_not_a_gpu_fault(tmp_path):
    # linux-pci, "[PATCH] PCI: ERR: Don't override the status returned by error_detect()" (Hou Zhiqiang, 2020-05-27,
    # https://lore.kernel.org/linux-pci/20200527083130.4137-1-Zhiqiang.Hou@nxp.com/): an e1000e NIC's fatal error,
    # verbatim; no GPU below 0002:00:00.0.
    text = ("pcieport 0002:00:00.0: AER: Uncorrected (Fatal) error received: 0002:01:00.0\n"
            "e1000e 0002:01:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
            "(Unregistered Agent ID)\n"
            "pcieport 0002:00:00.0: AER: Root Port link has been reset\n")
    log, results = _node_results(tmp_path, text)
    assert [e.kind for e in log.events] == ["aer_fatal"]
    assert {r.status for r in results} == {Status.PASS}


def test_amdgpu_probe_failure_without_the_fatal_init_line(tmp_path):
    # The driver core's line (drivers/base/dd.c), on the test node's MI300X GPU 0 (0000:05:00.0).
    from tests.support.snapshots import amd_mi300x_node

    path = tmp_path / "kern.log"
    path.write_text("[    9.120000] amdgpu 0000:05:00.0: amdgpu: finishing device.\n"
                    "[    9.130000] amdgpu: probe of 0000:05:00.0 failed with error -22\n")
    snap = amd_mi300x_node()
    snap.kernel_log = read_kernel_log(file=path)
    results = run(snap, "kernel_log.amdgpu_errors")
    assert [e.kind for e in snap.kernel_log.events] == ["probe_failed"]
    gpu = for_gpu(results, 0)
    assert (gpu.status, gpu.action, gpu.fault_code) == (Status.FAIL, "reboot", "GPUDIAG-AMDGPU-PROBE-FAILED")
    assert for_gpu(results, 1).status == Status.PASS


def test_the_checks_know_the_aer_kinds_the_probe_gives():
    from gpudiag.checks.kernel_log.common import AER_EVENT_KINDS as CHECKED
    from gpudiag.probe.kernel_log.aer import AER_EVENT_KINDS as PARSED

    assert CHECKED == PARSED


# -- item 7: what no rule names is still seen -------------------------------------------------------------------------

# A GSP allocation failure no rule names (scitix/sichek's test line above, verbatim message); NVRM prints it at
# NV_DBG_ERRORS, i.e. KERN_ERR: the kmsg record's own priority 3 says so, and only that is read.
GSP_ALLOC = ("NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054; hObject=0x5c00005b; "
             "hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000062; status=0x00000062")


def test_an_error_level_record_no_rule_names_warns_with_its_line(tmp_path):
    log, results = _node_results(tmp_path, f"3,1200,1843308145,-;{GSP_ALLOC}\n")
    assert [e.kind for e in log.events] == ["driver_error"]
    (node,) = node_level(results)  # the line names no GPU
    assert (node.status, node.action, node.fault_code) == (Status.WARN, "watch", "GPUDIAG-KERNEL-LOG-UNRECOGNISED")
    assert "unrecognised driver error" in node.message and "GspRmAlloc failed" in node.message
    assert node.observed["unrecognised_lines"] == [GSP_ALLOC[:300]]


@pytest.mark.skipif(shutil.which("dmesg") is None, reason="util-linux dmesg is not installed")
def test_the_level_comes_from_dmesg_x_as_the_real_dmesg_writes_it(tmp_path):
    raw = tmp_path / "raw"
    raw.write_text(f"<3>[ 1843.308145] {GSP_ALLOC}\n<6>[ 1843.308146] {GSP_ALLOC.replace('0x62', '0x63')}\n")
    text = subprocess.run(["dmesg", "-F", str(raw), "-x"], capture_output=True, text=True, check=True).stdout
    assert text.startswith("kern  :err   : ")
    log, _ = _node_results(tmp_path, text)
    assert [(e.kind, e.message) for e in log.events] == [("driver_error", GSP_ALLOC)]  # the info-level one is not


@pytest.mark.parametrize("text", [
    f"6,1200,1843308145,-;{GSP_ALLOC}\n",  # the same record at the info level
    f"[ 1843.308145] {GSP_ALLOC}\n",  # plain dmesg carries no level: nothing is guessed from the text
    # the load banner NVRM prints at the error level (the lab H200's tests/fixtures/h200x2/kmsg-sample.txt)
    "3,1077,12290000,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(nixbld@)  \n",
    "6,1078,2090000,-;RAS: Correctable Errors collector initialized.\n",  # drivers/ras/cec.c, no GPU driver
    f"11,1079,12290001,-;{GSP_ALLOC}\n",  # user space (facility 1, level err): never a driver record
])
def test_benign_banners_plain_dmesg_and_user_space_stay_passes(tmp_path, text):
    log, results = _node_results(tmp_path, text)
    assert log.events == [] and {r.status for r in results} == {Status.PASS}


def test_a_flood_of_one_new_wording_is_bounded(tmp_path):
    from gpudiag.probe.kernel_log.events import MAX_UNRECOGNISED

    text = "".join(f"3,{n},{n},-;NVRM: GPU 0000:3b:00.0: someNewFailure_IMPL: step {n} failed\n" for n in range(500))
    log, results = _node_results(tmp_path, text)
    assert len(log.events) == MAX_UNRECOGNISED and {e.pci_bus_id for e in log.events} == {"0000:3b:00.0"}
    gpu = for_gpu(results, 1)
    assert gpu.status == Status.WARN and len(gpu.observed["unrecognised_lines"]) == 3
    assert gpu.message.count("someNewFailure_IMPL") == 1 and for_gpu(results, 0).status == Status.PASS
