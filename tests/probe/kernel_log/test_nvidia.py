"""Issue 32, item 6: NVIDIA records the field writes that gpudiag did not read, or read to the wrong action
(gpudiag/probe/kernel_log/nvidia.py, judged by gpudiag/checks/kernel_log/nvidia.py). Each record is verbatim from the
source named beside it; the same records are in the field corpus (tests/fixtures/field/nvidia/)."""

from __future__ import annotations

from gpudiag.model import Status
from gpudiag.probe.kernel_log.reader import read_kernel_log
from tests.support.snapshots import for_gpu, node_level, nvidia_h200_node, run


def _read(tmp_path, text: str):
    path = tmp_path / "kern.log"
    path.write_text(text, encoding="utf-8")
    snap = nvidia_h200_node()  # GPU 0 at 0000:19:00.0, GPU 1 at 0000:3b:00.0
    snap.kernel_log = read_kernel_log(file=path)
    return snap.kernel_log, run(snap, "kernel_log.xid") + run(snap, "kernel_log.sxid")


# -- an Xid with the full bus ID ------------------------------------------------------------------------------------

# scitix/sichek's test data, verbatim (components/dmesg/kmsg_event_cache_test.go at b6344db3):
# https://github.com/scitix/sichek/blob/b6344db3fe04133ea9bc5785c532fce4c9b8871f/components/dmesg/kmsg_event_cache_test.go
SICHEK_XIDS = ("[Mon Jan  1 12:00:00 2024] NVRM: Xid (PCI:0000:01:00.0): 13, SXid 00000001: 00000013,\n"
               "[Mon Jan  1 12:00:01 2024] NVRM: Xid (PCI:0000:02:00.0): 31, SXid 00000002: 00000031,\n")


def test_an_xid_with_the_full_bus_id_is_an_xid_of_that_gpu(tmp_path):
    log, results = _read(tmp_path, SICHEK_XIDS)
    assert [(e.kind, e.code, e.pci_bus_id) for e in log.events] == [("xid", 13, "0000:01:00.0"),
                                                                     ("xid", 31, "0000:02:00.0")]
    # neither GPU is the test node's: node-level, each under its bus ID; the word "SXid" in the text makes no SXid
    orphans = {r.observed["pci_bus_id"]: (r.status, r.action) for r in node_level(results)
               if r.check == "kernel_log.xid"}
    assert orphans == {"0000:01:00.0": (Status.WARN, "watch"), "0000:02:00.0": (Status.WARN, "watch")}
    assert {r.status for r in results if r.check == "kernel_log.sxid"} == {Status.PASS}


def test_the_full_bus_id_names_the_test_nodes_gpu_as_the_short_one_does(tmp_path):
    # The same shape on the test node's GPU 1: both spellings are one GPU.
    log, results = _read(tmp_path, "NVRM: Xid (PCI:0000:3b:00.0): 79, pid='<unknown>', name=<unknown>, GPU has "
                                   "fallen off the bus.\n")
    assert [e.pci_bus_id for e in log.events] == ["0000:3b:00.0"]
    assert for_gpu(results, 1).status == Status.FAIL and for_gpu(results, 0).status == Status.PASS


# -- a GSP core dump without its Xid ----------------------------------------------------------------------------------

# NVIDIA/open-gpu-kernel-modules#446 (a Talos node, `talosctl dmesg`), verbatim: the tail of a GSP core dump.
GSP_DUMP = "".join(
    f"192.168.11.119: kern: warning: [2026-04-22T21:27:51.{stamp}Z]: NVRM: kflcnCoreDumpNondestructive_IMPL: "
    f"TRACE: {n:02d} = 0x{value}\n"
    for stamp, n, value in (("291660856", 8, "0000000004d4b1a0"), ("291666514", 9, "0000000005c37b14"),
                            ("291670789", 10, "0000000005c39948"), ("291676137", 11, "0000000005a07fe0"),
                            ("291679812", 12, "000000000400a35c")))


def test_a_gsp_core_dump_is_one_gsp_failure_and_resets(tmp_path):
    log, results = _read(tmp_path, GSP_DUMP)
    assert [e.kind for e in log.events] == ["gsp_core_dump"]  # five lines of one dump: one event
    (node,) = [r for r in node_level(results) if r.check == "kernel_log.xid"]  # the dump names no GPU
    assert (node.status, node.action, node.fault_code) == (Status.FAIL, "reset", "GPUDIAG-NVRM-GSP-CORE-DUMP")


def test_the_later_lines_of_an_error_level_dump_are_no_unrecognised_errors(tmp_path):
    # The dump's lines as /dev/kmsg hands them over at NV_PRINTF's LEVEL_ERROR (priority 3), the messages verbatim:
    # the dump is read once, its later lines are neither new dumps nor "unrecognised driver error"s.
    records = [f"3,{900 + i},1843308{145 + i},-;NVRM: kflcnCoreDumpNondestructive_IMPL: TRACE: {i:02d} = "
               f"0x0000000004d4b1a0" for i in range(8, 13)]
    log, _ = _read(tmp_path, "\n".join(records) + "\n")
    assert [e.kind for e in log.events] == ["gsp_core_dump"]


# -- a multicast-fabric failure ---------------------------------------------------------------------------------------

# scitix/sichek's test data (the same file as SICHEK_XIDS), verbatim.
MULTICAST = ("[Mon Jan  5 06:51:22 2026] NVRM: nvCheckOkFailedNoLog: Check failed: Requested object not found "
             "[NV_ERR_OBJECT_NOT_FOUND] (0x00000057) returned from status @ mem_multicast_fabric.c:2917\n") * 3


def test_a_multicast_fabric_failure_warns_and_names_the_fabric(tmp_path):
    log, results = _read(tmp_path, MULTICAST)
    assert [(e.kind, e.detail) for e in log.events] == [("multicast_fabric_error", "NV_ERR_OBJECT_NOT_FOUND")] * 3
    (node,) = [r for r in node_level(results) if r.check == "kernel_log.xid"]
    assert (node.status, node.action, node.fault_code) == (Status.WARN, "watch", "GPUDIAG-NVRM-MULTICAST-FABRIC")
    assert "NV_ERR_OBJECT_NOT_FOUND" in node.message
    assert "nvidia-fabricmanager" in node.remediation and "imex" in node.remediation


def test_a_reset_required_in_the_multicast_code_is_still_a_reset_required(tmp_path):
    # The reset-required assertion (sichek's line, tests/probe/kernel_log/test_wordings.py) placed in
    # mem_multicast_fabric.c: what the driver asks (a reset) wins over where it asked it.
    text = ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
            "returned from status @ mem_multicast_fabric.c:2917\n")
    log, _ = _read(tmp_path, text)
    assert [e.kind for e in log.events] == ["reset_required"]


# -- RmInitAdapter: reset or reboot by the driver's own status --------------------------------------------------------

# NVIDIA/open-gpu-kernel-modules#1230, verbatim (GPU 0000:a1:00.0 after a GSP failure).
WPR2 = ("[  127.849897] NVRM: GPU6 _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP\n"
        "[  127.849906] NVRM: GPU6 _kgspBootGspRm: (the GPU is likely in a bad state and may need to be reset)\n"
        "[  127.849936] NVRM: GPU6 RmInitAdapter: Cannot initialize GSP firmware RM\n"
        "[  127.850566] NVRM: GPU 0000:a1:00.0: RmInitAdapter failed! (0x62:0x40:2168)\n"
        "[  127.852333] NVRM: GPU 0000:a1:00.0: rm_init_adapter failed, device minor number 7\n")


def test_rm_init_adapter_failing_with_reset_required_resets_the_gpu(tmp_path):
    log, results = _read(tmp_path, WPR2)
    assert [(e.kind, e.pci_bus_id, e.detail) for e in log.events] == [("rm_init_failed", "0000:a1:00.0",
                                                                       "reset_required")]
    (node,) = [r for r in node_level(results) if r.check == "kernel_log.xid"]  # not in the test node's inventory
    assert (node.status, node.action, node.fault_code) == (Status.FAIL, "reset", "GPUDIAG-NVRM-INIT-RESET-REQUIRED")


def test_rm_init_adapter_failing_otherwise_still_reboots(tmp_path):
    # NVIDIA/gpu-operator#1146, verbatim: status 0x24, not a reset the driver asks for.
    text = ("Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! "
            "(0x24:0x72:1568)\n")
    log, results = _read(tmp_path, text)
    assert [(e.kind, e.detail) for e in log.events] == [("rm_init_failed", None)]
    (node,) = [r for r in node_level(results) if r.check == "kernel_log.xid"]
    assert (node.status, node.action, node.fault_code) == (Status.FAIL, "reboot", "GPUDIAG-NVRM-INIT-FAILED")


# -- Xid 94 by what its line says of a reset ----------------------------------------------------------------------

# akash-network/support#244, verbatim, on the test node's GPU 1 (the record's GPU is 0000:00:08).
XID94_NO_RESET = ("[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:3b:00): 94, pid='<unknown>', name=<unknown>, "
                  "Contained: SM (0x1). RST: No, D-RST: No\n")


def test_xid_94_that_needs_no_reset_warns(tmp_path):
    log, results = _read(tmp_path, XID94_NO_RESET)
    assert [(e.code, e.detail) for e in log.events] == [(94, "no-reset")]
    gpu = for_gpu(results, 1)
    assert (gpu.status, gpu.action, gpu.fault_code) == (Status.WARN, "watch", "GPUDIAG-XID-94")
    assert "RESTART_APP" in gpu.remediation


def test_xid_94_that_asks_for_a_reset_fails_and_a_process_name_cannot_say_otherwise(tmp_path):
    # The driver's format (kern_gpu_error_cont_ga100.c: `… RST: %s, D-RST: %s` at the end), with a process whose name
    # (a user's choice, printed before the driver's text) claims no reset: the line's end is the driver's.
    text = ("NVRM: Xid (PCI:0000:3b:00): 94, pid=4242, name=x RST: No, D-RST: No, Contained: SM (0x1). RST: Yes, "
            "D-RST: No\n"
            "NVRM: Xid (PCI:0000:19:00): 94, pid=4243, name=y, Contained: SM (0x1). RST: No, D-RST: Yes\n")
    log, results = _read(tmp_path, text)
    assert [(e.pci_bus_id, e.detail) for e in log.events] == [("0000:3b:00.0", "reset"), ("0000:19:00.0",
                                                                                          "drain-reset")]
    for index in (0, 1):
        gpu = for_gpu(results, index)
        assert (gpu.status, gpu.action) == (Status.FAIL, "reset"), index


def test_xid_94_whose_line_says_nothing_of_a_reset_keeps_the_catalog_verdict(tmp_path):
    # GPUd's test line (tests/fixtures/field/nvidia/gpud-pr-1174.json) on the test node's GPU 1.
    log, results = _read(tmp_path, "NVRM: Xid (PCI:0000:3b:00): 94, pid=1234, name=python3, Contained ECC error\n")
    assert [(e.code, e.detail) for e in log.events] == [(94, None)]
    assert (for_gpu(results, 1).status, for_gpu(results, 1).action) == (Status.FAIL, "reset")


# -- native AER on an NVIDIA GPU's root port --------------------------------------------------------------------------


def test_native_aer_reaches_an_nvidia_gpu_through_the_bridges_sysfs_nests_it_below(tmp_path):
    # The field corpus's wilicc/gpu-burn#1 record (a Surprise Down on root port 00:02.0, the GPU at 02:00.0 below it),
    # replayed through `gpudiag check --kernel-log` on the fake NVIDIA node: gpudiag learns the GPU's bridges from its
    # sysfs path (probe/pci.py), so the port's fatal error fails the GPU; with the GPU on the root complex, the same
    # record is another device's and nothing fails.
    import dataclasses

    from tests.support.field_corpus import records, replay

    (record,) = [r for r in records() if r.id == "gpu-burn-1-surprise-down-without-the-xid"]
    assert record.data["pci_parents"] == {"0000:02:00.0": ["0000:00:02.0"]}
    (tmp_path / "below").mkdir()
    (tmp_path / "flat").mkdir()
    assert replay(record, tmp_path / "below").right
    flat = dataclasses.replace(record, data={k: v for k, v in record.data.items() if k != "pci_parents"})
    assert not replay(flat, tmp_path / "flat").right
