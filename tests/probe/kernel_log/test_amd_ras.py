"""Fatal AMD RAS events in the kernel log (issue 15, item 1), on lines taken verbatim from public reports and the
amdgpu sources: parsed on the right GPU, judged with the right verdict, and the healthy lines around them ignored."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gpudiag.checks.kernel_log import family as kernel_log, amdgpu as kernel_log_amdgpu
from gpudiag.model import Status, Vendor
from gpudiag.probe.kernel_log.events import AMDGPU_EVENT_KINDS, PCIE_SLOT_EVENT_KINDS, parse_event
from gpudiag.probe.kernel_log.reader import read_kernel_log
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, nvidia_h200_node, run

# ROCm/ROCm#4021 (github.com/ROCm/ROCm/issues/4021, MI300X, ROCm 6.2.3): a fatal error on 0000:dd:00.0, the ACA
# dumps it brought on other GPUs of the XGMI hive (1b: STATUS with UC set; 9d: corrected banks only), the per-die
# correctable counts, and the driver's hive reset. Verbatim but for the `[seconds]` stamps kept as printed.
ROCM_4021 = """\
[76914.152141] amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!
[76914.152174] amdgpu 0000:3d:00.0: amdgpu: The cp might be in an unrecoverable state due to an unsuccessful queues preemption
[76914.152926] amdgpu 0000:1b:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[76914.152940] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0xbaa000000000080b
[76914.152948] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].ADDR=0x0000000000000000
[76914.152953] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].MISC0=0xd008000100000000
[76914.152957] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].IPID=0x0001d02e1f007900
[76914.152961] amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].SYND=0x000000005d003e1b
[76914.156884] amdgpu: Failed to restore process queues
[76914.184889] amdgpu 0000:9d:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[76914.184894] amdgpu 0000:9d:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0xd820000000060150
[76914.184898] amdgpu 0000:9d:00.0: {1}[Hardware Error]: aca entry[00].ADDR=0x0000000000000000
[76914.190522] amdgpu 0000:9d:00.0: {1}socket: 6, die: 1, 1533 new correctable hardware errors detected in xgmi_wafl block
[76914.190529] amdgpu 0000:9d:00.0: {1}socket: 6, die: 1, 1533 correctable hardware errors detected in total in xgmi_wafl block
[76914.214195] amdgpu 0000:dd:00.0: amdgpu: GPU reset begin!
[76914.238315] amdgpu 0000:1b:00.0: amdgpu: MODE1 reset
[76919.010450] amdgpu 0000:dd:00.0: amdgpu: GPU reset succeeded, trying to resume
[76919.011910] [drm] VRAM is lost due to GPU reset!
"""

A = "amdgpu 0000:68:00.0: "
# (message, kind, count): each line as the report or the kernel source prints it, cited.
RAS_CASES = [
    # issue 15 / ROCm/ROCm#4021 (MI300X); newer kernels (ras_mgr/amdgpu_ras_sys.c) print "{%llu} Uncorrectable …".
    (A + "{1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", "ras_fatal_error", None),
    (A + "{3} Uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", "ras_fatal_error", None),
    (A + "amdgpu: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", "ras_fatal_error", None),
    # amdgpu_mca.c bank dump (HW_ERR, RAS_EVENT_LOG); STATUS bit 61 (UC) set / bit 44 (Deferred) set.
    (A + "{1}[Hardware Error]: aca entry[00].STATUS=0xbaa000000000080b", "aca_uncorrectable", None),
    (A + "{2}[Hardware Error]: aca entry[03].STATUS=0x9c00100000000000", "aca_deferred", None),
    # amdgpu_aca.c aca_smu_bank_dump(): "ACA[%02d/%02d].%s=0x%016llx".
    (A + "{4}[Hardware Error]: ACA[01/02].STATUS=0xbaa000000000080b", "aca_uncorrectable", None),
    # kfd_int_process_v9.c (issue 15: "{14}poison is consumed by client 12, kick off gpu reset flow").
    (A + "{14}poison is consumed by client 12, kick off gpu reset flow", "ras_poison_consumed", None),
    (A + "amdgpu: poison is consumed by client 12, kick off gpu reset flow", "ras_poison_consumed", None),
    # issue 15: "socket: 0, die: 0, N new poison consumption detected in <block> block".
    (A + "{15}socket: 0, die: 0, 2 new poison consumption detected in umc block", "ras_poison_consumed", 2),
    # amdgpu_ras.c amdgpu_ras_interrupt_poison_creation_handler().
    (A + "{9}Poison is created", "ras_poison_created", None),
    (A + "amdgpu: Poison is created, no user action is needed.", "ras_poison_created", None),
    # amdgpu_ras_eeprom.c (node-scraper: "amdgpu: Saved bad pages (\d+) reaches threshold value 128").
    (A + "amdgpu: Saved bad pages 130 reaches threshold value 128", "bad_pages_threshold", 130),
    (A + "amdgpu: Saved bad pages(64) reaches threshold value(64).", "bad_pages_threshold", 64),
    (A + "amdgpu: RAS records:130 exceed threshold:128", "ras_records_exceed_threshold", 130),
    (A + "amdgpu: RAS records:116 exceeds 90% of threshold:128", "bad_pages_near_threshold", 116),
    (A + "amdgpu: RAS table incorrect checksum or error:-13", "ras_table_checksum", None),
    (A + "amdgpu: RAS Table incorrect checksum or error:-22", "ras_table_checksum", None),
    ("[drm:amdgpu_ras_eeprom_init [amdgpu]] *ERROR* RAS table incorrect checksum or error:-13",
     "ras_table_checksum", None),  # DRM_ERROR in older kernels: no bus ID
]


def test_every_new_amdgpu_kind_is_exercised():
    from tests.probe.kernel_log.test_amd_hive import HIVE_CASES
    from tests.probe.kernel_log.test_reader import AMDGPU_CASES

    exercised = {kind for _, kind, _ in AMDGPU_CASES + RAS_CASES + HIVE_CASES}
    assert exercised == set(AMDGPU_EVENT_KINDS)


@pytest.mark.parametrize("message, kind, count", RAS_CASES)
def test_ras_lines_parse_to_their_kind(message, kind, count):
    event = parse_event(message)
    assert event is not None, message
    assert (event.vendor, event.kind, event.count) == (Vendor.AMD, kind, count)
    assert event.pci_bus_id == (None if message.startswith("[drm:") else "0000:68:00.0")


@pytest.mark.parametrize("message", [
    A + "{1}[Hardware Error]: Accelerator Check Architecture events logged",  # the header: the STATUS line decides
    A + "{1}[Hardware Error]: aca entry[00].STATUS=0xd820000000060150",  # corrected (UC and Deferred clear)
    A + "{1}socket: 6, die: 1, 1533 new correctable hardware errors detected in xgmi_wafl block",
    A + "socket: 0, die: 0, 2 poison consumption detected in total in umc block",
    A + "amdgpu: RAS table recovery succeed",
    "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0",  # ghes: not a GPU's line
    "pcieport 0000:00:01.1: pciehp: Slot(15): Link Down/Up ignored (recovered by DPC)",
    "kworker/0:1[7]: amdgpu 0000:68:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
])
def test_lines_that_are_not_fatal_events(message):
    assert parse_event(message) is None


def test_the_total_line_is_not_a_second_event():
    new = parse_event(A + "socket: 0, die: 0, 3 new uncorrectable hardware errors detected in umc block")
    total = parse_event(A + "socket: 0, die: 0, 3 uncorrectable hardware errors detected in total in umc block")
    assert (new.kind, new.count, total) == ("ras_uncorrectable", 3, None)


@pytest.mark.parametrize("message, kind", [
    # drivers/pci/hotplug/pciehp_ctrl.c via pci_info on the port (node-scraper: "PCIe Link Down" / "PCIe card no
    # longer present").
    ("pcieport 0000:04:01.0: pciehp: Slot(15): Link Down", "slot_link_down"),
    ("pcieport 0000:04:01.0: pciehp: Slot(15): Card not present", "slot_card_not_present"),
])
def test_pcie_slot_lines_name_the_port(message, kind):
    event = parse_event(message)
    assert (event.vendor, event.kind, event.pci_bus_id) == (None, kind, "0000:04:01.0")
    assert PCIE_SLOT_EVENT_KINDS == kernel_log.PCIE_SLOT_EVENT_KINDS  # the checks' copy of the kinds


def _hive_node(tmp_path):
    """The ROCm/ROCm#4021 log on the MI300X fixture: dd → GPU 0 (05), 1b → GPU 1 (26), 9d → GPU 2 (46)."""
    text = ROCM_4021.replace("0000:dd:", "0000:05:").replace("0000:1b:", "0000:26:").replace("0000:9d:", "0000:46:")
    saved = tmp_path / "dmesg.txt"
    saved.write_text(text)
    snap = amd_mi300x_node()
    snap.kernel_log = read_kernel_log(file=saved)
    return snap


def test_a_fatal_error_on_a_hive_fails_the_right_gpus_with_reset(tmp_path):
    snap = _hive_node(tmp_path)
    assert [(e.kind, e.pci_bus_id) for e in snap.kernel_log.events] == [
        ("ras_fatal_error", "0000:05:00.0"), ("cp_unrecoverable", "0000:3d:00.0"),
        ("aca_uncorrectable", "0000:26:00.0"), ("gpu_reset", "0000:05:00.0"), ("gpu_mode1_reset", "0000:26:00.0"),
        ("gpu_reset_succeeded", "0000:05:00.0"), ("vram_lost", None)]
    results = run(snap, "kernel_log.amdgpu_errors")
    fatal, aca = for_gpu(results, 0), for_gpu(results, 1)
    assert_actionable(fatal, Status.FAIL)
    assert (fatal.action, fatal.fault_code) == ("reset", "GPUDIAG-AMDGPU-RAS-FATAL-ERROR")
    assert_actionable(aca, Status.FAIL)
    assert aca.action == "reset" and "hive" in aca.remediation
    assert for_gpu(results, 2).status == Status.PASS  # corrected banks and counts only
    assert {for_gpu(results, i).status for i in range(3, 8)} == {Status.PASS}


@pytest.mark.parametrize("kind, status, action", [
    ("ras_poison_consumed", Status.FAIL, "reset"),
    ("bad_pages_threshold", Status.FAIL, "rma"),
    ("ras_records_exceed_threshold", Status.FAIL, "rma"),
    ("ras_poison_created", Status.WARN, "watch"),
    ("aca_deferred", Status.WARN, "reset"),
    ("bad_pages_near_threshold", Status.WARN, "watch"),
    ("ras_table_checksum", Status.WARN, "watch"),
    # issue 21 (tests/probe/kernel_log/test_amd_hive.py)
    ("ring_test_failed", Status.FAIL, "reboot"),
    ("ring_test_failed_multimedia", Status.WARN, "watch"),
    ("ip_block_hung", Status.WARN, "reset"),
    ("umc_error_address", Status.WARN, "reset"),
    ("gpu_mode1_reset", Status.WARN, "watch"),
    ("vram_lost", Status.WARN, "watch"),
])
def test_each_ras_event_gets_its_verdict(kind, status, action):
    from tests.probe.kernel_log.test_amd_hive import HIVE_CASES

    (message, _, _) = next(case for case in RAS_CASES + HIVE_CASES if case[1] == kind)
    snap = amd_mi300x_node()
    event = parse_event(re.sub(r"^amdgpu [0-9a-f:.]+: ", "amdgpu 0000:c6:00.0: ", message))
    snap.kernel_log.events = [event]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 6)
    assert_actionable(result, status)
    assert result.action == action


def test_a_lost_slot_below_a_gpu_fails_that_gpu_with_reboot():
    snap = amd_mi300x_node()  # GPU 4 (0000:85:00.0) hangs off port 0000:84:01.0
    snap.kernel_log.events = [parse_event("pcieport 0000:84:01.0: pciehp: Slot(15): Link Down")]
    results = run(snap, "kernel_log.amdgpu_errors")
    lost = for_gpu(results, 4)
    assert_actionable(lost, Status.FAIL)
    assert lost.action == "reboot" and "fell off the bus" in lost.message
    assert node_level(results) == []


def test_a_lost_slot_with_no_gpu_known_below_it_warns_node_level_once():
    snap = amd_mi300x_node()
    snap.kernel_log.events = [parse_event("pcieport 0000:f0:01.0: pciehp: Slot(3): Card not present")]
    (node,) = node_level(run(snap, "kernel_log.amdgpu_errors"))
    assert_actionable(node, Status.WARN)
    assert "0000:f0:01.0" in node.message and "inventory" in node.remediation
    nvidia = nvidia_h200_node()
    nvidia.kernel_log.events = list(snap.kernel_log.events)
    assert node_level(run(nvidia, "kernel_log.xid"))[0].status == Status.WARN  # an NVIDIA node too
    assert {r.status for r in run(snap, "kernel_log.xid")} == {Status.SKIP}  # once: the AMD check on an AMD node


def test_a_lost_slot_on_a_node_without_gpus_is_ignored():
    snap = dataclasses.replace(amd_mi300x_node(), devices=[], pci_gpus=[], peers=[])
    snap.kernel_log.events = [parse_event("pcieport 0000:84:01.0: pciehp: Slot(15): Link Down")]
    assert {r.status for r in run(snap, "kernel_log.amdgpu_errors")} == {Status.SKIP}


def test_every_amdgpu_kind_has_a_finding():
    assert set(AMDGPU_EVENT_KINDS) <= set(kernel_log_amdgpu.AMDGPU_EVENTS)
