"""AMD hive events (issue 21, item 5), on lines as public reports and the amdgpu sources print them: ACA banks decoded
as the kernel decodes them, an XGMI hive's reset judged on every GPU it took down with the cause told apart, the
hang precursors, and firmware-first (APEI/GHES) PCIe errors placed on the GPU below their port."""

from __future__ import annotations

import dataclasses

import pytest

from gpudiag.checks.kernel_log import amdgpu as kernel_log_amdgpu
from gpudiag.model import Status, Vendor
from gpudiag.probe.amdgpu import aca as amdgpu_aca
from gpudiag.probe.kernel_log.events import parse_event
from gpudiag.probe.kernel_log.ghes import GHES_EVENT_KINDS
from gpudiag.probe.kernel_log.reader import read_kernel_log
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, run

# (message, kind, bus): each verbatim from the source named, the dmesg stamp cut off.
HIVE_CASES = [
    # AMD node-scraper test/functional/fixtures/dmesg_sample.log: an ACA bank with only Poison (bit 43) of the error
    # bits set; amdgpu counts it as deferred (amdgpu_aca.h ACA_BANK_ERR_IS_DEFFERED).
    ("amdgpu 0000:03:00.0: {1}[Hardware Error]: ACA[01/01].STATUS=0x98000800003e0000", "aca_deferred",
     "0000:03:00.0"),
    # ROCm/legacy-rocm-build#4021 (MI300X, ROCm 6.2.3), the hive reset after a fatal error.
    ("amdgpu 0000:1b:00.0: amdgpu: MODE1 reset", "gpu_mode1_reset", "0000:1b:00.0"),
    ("amdgpu 0000:dd:00.0: amdgpu: GPU mode1 reset", "gpu_mode1_reset", "0000:dd:00.0"),
    ("amdgpu 0000:3d:00.0: amdgpu: The cp might be in an unrecoverable state due to an unsuccessful queues "
     "preemption", "cp_unrecoverable", "0000:3d:00.0"),
    # amdgpu_device.c amdgpu_device_mode1_reset() (and ValveSoftware/SteamOS#2802's log, Navi 33).
    ("amdgpu 0000:03:00.0: amdgpu: GPU smu mode1 reset", "gpu_mode1_reset", "0000:03:00.0"),
    # wayvr-org/wayvr#650 (RX 7900 XTX): a newer kernel without the "amdgpu: " after the device.
    ("amdgpu 0000:2d:00.0: GPU reset succeeded, trying to resume", "gpu_reset_succeeded", "0000:2d:00.0"),
    ("amdgpu 0000:2d:00.0: VRAM is lost due to GPU reset!", "vram_lost", "0000:2d:00.0"),
    ("amdgpu 0000:2d:00.0: MES failed to respond to msg=RESET", "mes_unresponsive", "0000:2d:00.0"),
    ("amdgpu 0000:2d:00.0: Ring gfx_0.0.0 reset failed", "ring_reset_failed", "0000:2d:00.0"),
    # amd-gfx, "[PATCH 2/3] drm/amdgpu: don't output mes error message when gfx hang during gpu reset" (YiPeng
    # Chai, 2023-04-27): DRM_ERROR from a compiler clone ("….constprop.0"), and the hung IP block.
    ("[drm:mes_v11_0_submit_pkt_and_poll_completion.constprop.0 [amdgpu]] *ERROR* MES failed to response msg=3",
     "mes_unresponsive", None),
    ("amdgpu: MES might be in unrecoverable state, issue a GPU reset", "mes_unresponsive", None),
    ("amdgpu 0000:63:00.0: amdgpu: IP block:gfx_v11_0 is hung!", "ip_block_hung", "0000:63:00.0"),
    # node-scraper test/unit/plugin/test_dmesg_analyzer.py ("QCM fence timeout", "Error Address").
    ("amdgpu: qcm fence wait loop timeout expired", "qcm_fence_timeout", None),
    ("amdgpu 0000:08:00.0: amdgpu: Error Address(PA):0x60d1a4480  Row:0x1834 Col:0x0  Bank:0x7 Channel:0x74",
     "umc_error_address", "0000:08:00.0"),
    # jrandiny/yoga-slim7-ubuntu readme.md (resume from s2idle) and amdgpu_ring.c amdgpu_ring_test_helper().
    ("amdgpu 0000:03:00.0: [drm:amdgpu_ring_test_helper [amdgpu]] *ERROR* ring gfx test failed (-110)",
     "ring_test_failed", "0000:03:00.0"),
    ("amdgpu 0000:23:00.0: [drm:amdgpu_ring_test_helper [amdgpu]] *ERROR* ring vcn_dec_0 test failed (-110)",
     "ring_test_failed_multimedia", "0000:23:00.0"),
]


@pytest.mark.parametrize("message, kind, bus", HIVE_CASES)
def test_hive_and_hang_lines_parse_to_their_kind(message, kind, bus):
    event = parse_event(message)
    assert event is not None, message
    assert (event.vendor, event.kind, event.pci_bus_id) == (Vendor.AMD, kind, bus)


@pytest.mark.parametrize("message", [
    "amdgpu 0000:1b:00.0: amdgpu: MODE1 reset failed",  # a failure, not a mode-1 reset: gpu_reset_failed
    "amdgpu 0000:dd:00.0: amdgpu: Dumping IP State",
    "amdgpu 0000:03:00.0: amdgpu: Starting gfx_0.0.0 ring reset",
    "amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 uses VM inv eng 0 on hub 0",
    "[drm] VRAM is lost due to GPU reset! (forged by a user: not the whole message)",
    "[drm:nv_drm_atomic_commit [nvidia_drm]] *ERROR* MES failed to response msg=3",  # another DRM driver
    "python3[77]: amdgpu 0000:1b:00.0: amdgpu: MODE1 reset",
])
def test_lines_that_are_not_hive_events(message):
    event = parse_event(message)
    assert event is None or event.kind == "gpu_reset_failed", message


def test_a_failed_mode1_reset_is_a_failed_reset():
    assert parse_event("amdgpu 0000:1b:00.0: amdgpu: GPU mode1 reset failed").kind == "gpu_reset_failed"


def test_the_bare_drm_vram_lost_line_is_read_without_a_gpu():
    # ROCm/legacy-rocm-build#4021 and loongson/Firmware#89: DRM_INFO in older kernels, no device named.
    event = parse_event("[drm] VRAM is lost due to GPU reset!")
    assert (event.kind, event.pci_bus_id) == ("vram_lost", None)


# ---------------------------------------------------------------------------------------------------------------
# ACA banks, decoded as amdgpu_aca.h does


@pytest.mark.parametrize("status, kind, bits", [
    (0x98000800003E0000, "aca_deferred", "Val, En, MiscV, Poison"),  # node-scraper: Poison alone
    (0x9C00100000000000, "aca_deferred", "Val, En, MiscV, AddrV, Deferred"),
    (0xBAA000000000080B, "aca_uncorrectable", "Val, UC, En, MiscV, PCC, TCC, SyndV"),  # legacy-rocm-build#4021
    (0xFAA00000000D080B, "aca_uncorrectable", "Val, Overflow, UC, En, MiscV, PCC, TCC, SyndV"),
    (0xBAA008000000080B, "aca_deferred", "Val, UC, En, MiscV, PCC, TCC, SyndV, Poison"),  # UE_DE_DECODE
    (0xD820000000060150, None, "Val, Overflow, En, MiscV, SyndV"),  # corrected: ecc.* judges it
    (0x000000000000000F, None, "(none set)"),  # node-scraper's test bank: Val clear, no error logged
    (0x0000080000000000, None, "Poison"),  # Poison without Val: not a logged error
])
def test_aca_status_decode(status, kind, bits):
    assert amdgpu_aca.aca_kind(status) == kind
    assert amdgpu_aca.describe(status) == f"STATUS bits {bits}"


@pytest.mark.parametrize("line", [
    "amdgpu 0000:03:00.0: {1}[Hardware Error]: ACA[01/01].STATUS=0x98000800003e0000",  # ACA dump (amdgpu_aca.c)
    "amdgpu 0000:03:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x98000800003e0000",  # MCA dump (amdgpu_mca.c)
    "amdgpu 0000:03:00.0: amdgpu: [Hardware error] ACA[01/01].STATUS=0x98000800003e0000",  # earlier HW_ERR
])
def test_a_poison_only_bank_is_deferred_in_both_dump_formats_and_fails_closed_to_a_warning(line):
    event = parse_event(line)
    assert (event.kind, event.decoded) == ("aca_deferred", "STATUS bits Val, En, MiscV, Poison")
    snap = _node(["0000:03:00.0"])
    snap.kernel_log.events = [event]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 0)
    assert_actionable(result, Status.WARN)
    assert result.action == "reset" and "Poison" in result.message


# ---------------------------------------------------------------------------------------------------------------
# The XGMI hive reset of ROCm/legacy-rocm-build#4021 (MI300X): a fatal error on 0000:dd:00.0 and MODE1 resets on
# every GPU. Lines verbatim from the report's description, without its ACA dumps and after the seventh GPU's reset
# (the whole event is in tests/fixtures/field/amd/legacy-rocm-build-4021.json).
HIVE_4021 = """\
[76914.152141] amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!
[76914.152174] amdgpu 0000:3d:00.0: amdgpu: The cp might be in an unrecoverable state due to an unsuccessful queues preemption
[76914.190522] amdgpu 0000:9d:00.0: {1}socket: 6, die: 1, 1533 new correctable hardware errors detected in xgmi_wafl block
[76914.190529] amdgpu 0000:9d:00.0: {1}socket: 6, die: 1, 1533 correctable hardware errors detected in total in xgmi_wafl block
[76914.214195] amdgpu 0000:dd:00.0: amdgpu: GPU reset begin!
[76914.216568] Pid 1230312(python3.12) over core_pipe_limit
[76914.216571] Skipping core dump
[76914.237823] amdgpu 0000:dd:00.0: amdgpu: Dumping IP State
[76914.237826] amdgpu 0000:dd:00.0: amdgpu: Dumping IP State Completed
[76914.238315] amdgpu 0000:1b:00.0: amdgpu: MODE1 reset
[76914.238316] amdgpu 0000:dd:00.0: amdgpu: MODE1 reset
[76914.238321] amdgpu 0000:dd:00.0: amdgpu: GPU mode1 reset
[76914.238320] amdgpu 0000:3d:00.0: amdgpu: MODE1 reset
[76914.238322] amdgpu 0000:1b:00.0: amdgpu: GPU mode1 reset
[76914.238321] amdgpu 0000:4e:00.0: amdgpu: MODE1 reset
[76914.238322] amdgpu 0000:bd:00.0: amdgpu: MODE1 reset
[76914.238323] amdgpu 0000:9d:00.0: amdgpu: MODE1 reset
[76914.238323] amdgpu 0000:5f:00.0: amdgpu: MODE1 reset
"""
HIVE_BUSES = ["0000:1b:00.0", "0000:3d:00.0", "0000:4e:00.0", "0000:5f:00.0", "0000:9d:00.0", "0000:bd:00.0",
              "0000:dd:00.0", "0000:fd:00.0"]  # the eighth is not in the excerpt


def _node(buses):
    """The MI300X fixture with its GPUs moved to `buses` (in index order)."""
    snap = amd_mi300x_node()
    for device, pci, bus in zip(snap.devices, snap.pci_gpus, buses):
        device.pci_bus_id = pci.pci_bus_id = bus
    snap.devices, snap.pci_gpus = snap.devices[:len(buses)], snap.pci_gpus[:len(buses)]
    return snap


def test_every_gpu_the_hive_reset_took_down_is_judged_and_the_cause_is_told_apart(tmp_path):
    saved = tmp_path / "dmesg.txt"
    saved.write_text(HIVE_4021)
    snap = _node(HIVE_BUSES)
    snap.kernel_log = read_kernel_log(file=saved)
    results = {r.device.pci_bus_id: r for r in run(snap, "kernel_log.amdgpu_errors") if r.device}

    cause = results["0000:dd:00.0"]
    assert_actionable(cause, Status.FAIL)
    assert (cause.action, cause.fault_code) == ("reset", "GPUDIAG-AMDGPU-RAS-FATAL-ERROR")
    assert "XGMI hive" not in cause.message  # its own resets are judged as its own
    for bus in ("0000:1b:00.0", "0000:3d:00.0", "0000:4e:00.0", "0000:5f:00.0", "0000:9d:00.0", "0000:bd:00.0"):
        reset = results[bus]
        assert_actionable(reset, Status.WARN)
        assert (reset.action, reset.fault_code) == ("watch", "GPUDIAG-AMDGPU-HIVE-RESET"), bus
        assert "after a fatal error on GPU 6 (0000:dd:00.0)" in reset.message
        assert "lost" in reset.message
    assert "queue preemption failed" in results["0000:3d:00.0"].message
    assert results["0000:fd:00.0"].status == Status.PASS  # no line names it
    assert node_level(run(snap, "kernel_log.amdgpu_errors")) == []


def test_a_vram_lost_line_that_names_no_gpu_is_not_taken_for_a_bystander():
    """legacy-rocm-build#4021 ends the hive reset with amdgpu's bare "[drm] VRAM is lost due to GPU reset!": it names
    no GPU, so it is judged node-level as what it says, not blamed on the hive's fatal error."""
    snap = _node(["0000:1b:00.0", "0000:dd:00.0"])
    snap.kernel_log.events = [
        parse_event("amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", 1.0),
        parse_event("[drm] VRAM is lost due to GPU reset!", 5.0)]
    (result,) = node_level(run(snap, "kernel_log.amdgpu_errors"))
    assert (result.status, result.action, result.fault_code) == (Status.WARN, "watch", "GPUDIAG-AMDGPU-VRAM-LOST")
    assert "hive" not in result.message


def test_a_reset_long_after_a_fatal_error_elsewhere_is_not_blamed_on_it():
    snap = _node(["0000:1b:00.0", "0000:dd:00.0"])
    fatal = parse_event("amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
                        100.0)
    reset = parse_event("amdgpu 0000:1b:00.0: amdgpu: MODE1 reset", 100.0 + kernel_log_amdgpu.HIVE_WINDOW_SECONDS + 1)
    snap.kernel_log.events = [fatal, reset]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 0)
    assert (result.status, result.fault_code) == (Status.WARN, "GPUDIAG-AMDGPU-GPU-MODE1-RESET")
    assert "hive" not in result.message


def test_a_mode1_reset_after_a_hang_is_judged_as_the_gpus_own():
    """ValveSoftware/SteamOS#2802 / wayvr-org/wayvr#650: MES stops answering, the ring reset fails, MODE1 reset."""
    lines = ["amdgpu 0000:2d:00.0: MES failed to respond to msg=RESET", "amdgpu 0000:2d:00.0: Ring gfx_0.0.0 reset "
                                                                        "failed",
             "amdgpu 0000:2d:00.0: MODE1 reset", "amdgpu 0000:2d:00.0: VRAM is lost due to GPU reset!"]
    snap = _node(["0000:2d:00.0"])
    snap.kernel_log.events = [parse_event(line) for line in lines]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 0)
    assert_actionable(result, Status.WARN)
    assert result.action == "reset" and result.fault_code.startswith("GPUDIAG-AMDGPU-")
    assert "MES scheduler firmware stopped responding" in result.message and "hive" not in result.message


# ---------------------------------------------------------------------------------------------------------------
# APEI/GHES: node-scraper's record, verbatim from test/unit/plugin/test_dmesg_analyzer.py (kern/iso prefix cut).
GHES = """\
{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
{1}[Hardware Error]: event severity: recoverable
{1}[Hardware Error]:  Error 0, type: recoverable
{1}[Hardware Error]:   section_type: PCIe error
{1}[Hardware Error]:   port_type: 4, root port
{1}[Hardware Error]:   version: 3.0
{1}[Hardware Error]:   command: 0x0547, status: 0x4010
{1}[Hardware Error]:   device_id: 0000:54:01.0
{1}[Hardware Error]:   slot: 19
{1}[Hardware Error]:   secondary_bus: 0x55
{1}[Hardware Error]:   vendor_id: 0x8086, device_id: 0x352a
{1}[Hardware Error]:   class_code: 060400
{1}[Hardware Error]:   bridge: secondary_status: 0x2000, control: 0x0003
"""


def _ghes_node(tmp_path, text, ports):
    saved = tmp_path / "dmesg.txt"
    saved.write_text(text)
    snap = _node(["0000:58:00.0", "0000:05:00.0"])
    snap.pci_gpus[0].upstream_pci_bus_id, snap.pci_gpus[0].upstream_ports = ports[0], ports
    snap.kernel_log = read_kernel_log(file=saved)
    return snap


def test_a_ghes_pcie_error_on_a_root_port_lands_on_the_gpu_below_it_through_a_switch(tmp_path):
    # GPU 0000:58:00.0 below a PCIe switch (57:00.0 down, 56:00.0 up) on root port 0000:54:01.0.
    snap = _ghes_node(tmp_path, GHES, ["0000:57:00.0", "0000:56:00.0", "0000:54:01.0"])
    (event,) = snap.kernel_log.events
    assert (event.vendor, event.kind, event.pci_bus_id) == (None, "ghes_pcie_uncorrected", "0000:54:01.0")
    results = run(snap, "kernel_log.amdgpu_errors")
    below = for_gpu(results, 0)
    assert_actionable(below, Status.WARN)
    assert "root port 0000:54:01.0" in below.message and "pcie.aer" in below.remediation
    assert for_gpu(results, 1).status == Status.PASS
    assert node_level(results) == []


def test_a_fatal_ghes_record_fails_the_gpu_and_one_on_another_port_is_not_a_gpus(tmp_path):
    fatal = GHES.replace("event severity: recoverable", "event severity: fatal")
    snap = _ghes_node(tmp_path, fatal, ["0000:54:01.0"])
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 0)
    assert (result.status, result.action, result.fault_code) == (
        Status.FAIL,
        "reboot",
        "GPUDIAG-AMDGPU-GHES-PCIE-FATAL",
    )
    elsewhere = _ghes_node(tmp_path, fatal, ["0000:40:01.1"])  # a NIC's or a drive's root port
    assert {r.status for r in run(elsewhere, "kernel_log.amdgpu_errors")} == {Status.PASS}


def test_a_corrected_ghes_record_is_left_to_the_aer_counters(tmp_path):
    corrected = GHES.replace("recoverable", "corrected")
    assert _ghes_node(tmp_path, corrected, ["0000:54:01.0"]).kernel_log.events == []


def test_ghes_records_of_two_sources_interleaved_are_assembled_apart(tmp_path):
    other = GHES.replace("{1}", "{2}").replace("Source: 1", "Source: 2").replace("0000:54:01.0", "0000:40:01.1")
    mixed = "".join(a + "\n" + b + "\n" for a, b in zip(GHES.splitlines(), other.splitlines()))
    snap = _ghes_node(tmp_path, mixed, ["0000:54:01.0"])
    assert [(e.kind, e.pci_bus_id) for e in snap.kernel_log.events] == [
        ("ghes_pcie_uncorrected", "0000:54:01.0"), ("ghes_pcie_uncorrected", "0000:40:01.1")]


def test_a_flood_of_ghes_headers_keeps_a_bounded_state(tmp_path):
    flood = "".join(f"{{{i}}}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1\n"
                    for i in range(10_000)) + GHES
    snap = _ghes_node(tmp_path, flood, ["0000:54:01.0"])
    assert [e.kind for e in snap.kernel_log.events] == ["ghes_pcie_uncorrected"]


def test_the_checks_copy_of_the_ghes_kinds_is_the_probes():
    assert GHES_EVENT_KINDS == kernel_log_amdgpu.GHES_EVENT_KINDS


def test_a_ghes_event_keeps_its_decoded_text_through_the_gpu_mapping():
    snap = _node(["0000:58:00.0"])
    snap.pci_gpus[0].upstream_ports = ["0000:54:01.0"]
    event = dataclasses.replace(parse_event("amdgpu 0000:58:00.0: amdgpu: MODE1 reset"), vendor=None,
                                kind="ghes_pcie_fatal", pci_bus_id="0000:54:01.0", decoded="fatal PCIe error at x")
    snap.kernel_log.events = [event]
    (mapped,) = kernel_log_amdgpu.port_events(snap, Vendor.AMD)
    assert (mapped.vendor, mapped.pci_bus_id, mapped.decoded) == (Vendor.AMD, "0000:58:00.0", "fatal PCIe error at x")


def test_the_pci_probe_records_every_bridge_between_a_gpu_and_the_root_complex(tmp_path):
    from gpudiag.probe.pci import probe_pci_gpus
    from tests.support.sysfs_tree import SysfsTree

    tree = SysfsTree(tmp_path)
    tree.add_pci_gpu("0000:58:00.0", vendor="0x1002", device="0x74a1", class_code="0x120000", driver="amdgpu",
                     upstream=("0000:57:00.0", "32.0 GT/s PCIe", 16), bridges=("0000:54:01.0", "0000:56:00.0"))
    tree.add_pci_gpu("0000:05:00.0", vendor="0x1002", device="0x74a1", class_code="0x120000", driver="amdgpu")
    gpus, errors = probe_pci_gpus(tree.root)
    assert errors == []
    assert {g.pci_bus_id: (g.upstream_pci_bus_id, g.upstream_ports) for g in gpus} == {
        "0000:58:00.0": ("0000:57:00.0", ["0000:57:00.0", "0000:56:00.0", "0000:54:01.0"]),
        "0000:05:00.0": (None, [])}  # directly on the root complex, as in most VMs


def test_the_exporter_counts_a_ghes_error_under_the_gpu_below_its_root_port():
    from gpudiag.exporter.events import OTHER_BUS_ID, series_bus_id

    snap = _node(["0000:58:00.0"])
    snap.pci_gpus[0].upstream_pci_bus_id, snap.pci_gpus[0].upstream_ports = "0000:57:00.0", [
        "0000:57:00.0", "0000:56:00.0", "0000:54:01.0"]
    gpus = {"0000:58:00.0"}
    ghes = dataclasses.replace(parse_event("amdgpu 0000:58:00.0: amdgpu: MODE1 reset"), vendor=None,
                               kind="ghes_pcie_fatal", pci_bus_id="0000:54:01.0")
    assert series_bus_id(ghes, snap, gpus) == "0000:58:00.0"
    assert series_bus_id(dataclasses.replace(ghes, pci_bus_id="0000:40:01.1"), snap, gpus) == OTHER_BUS_ID
