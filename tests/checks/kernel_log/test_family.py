import dataclasses

import pytest

from gpudiag.checks.kernel_log import amdgpu as kernel_log_amdgpu
from gpudiag.checks.kernel_log.xid_catalog import XID_CATALOG, xid_severity
from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, KernelEvent, ProbeError, Status, Vendor
from gpudiag.probe.kernel_log.events import AMDGPU_EVENT_KINDS, NVIDIA_EVENT_KINDS
from tests.support.snapshots import (
    amd_mi300x_node,
    amdgpu_event,
    assert_actionable,
    cpx_partitioned,
    for_gpu,
    node_level,
    nvidia_h200_node,
    run,
    xid_event,
)


def test_unreadable_log_is_unknown_with_the_permission_remedy():
    snap = nvidia_h200_node()
    snap.kernel_log.readable = False
    snap.kernel_log.error = ProbeError("/dev/kmsg", ErrorKind.NO_PERMISSION, "Operation not permitted")
    (result,) = run(snap, "kernel_log.xid")
    assert_actionable(result, Status.UNKNOWN)
    assert "dmesg_restrict" in result.remediation and "--kernel-log" in result.remediation
    # The AMD check does not apply to an NVIDIA-only node, readable log or not.
    assert run(snap, "kernel_log.amdgpu_errors")[0].status == Status.SKIP


def test_critical_xid_fails_its_gpu_only():
    snap = nvidia_h200_node()
    line = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    snap.kernel_log.events = [xid_event("0000:3b:00.0", 79, line)]
    results = run(snap, "kernel_log.xid")
    lost = for_gpu(results, 1)
    assert_actionable(lost, Status.FAIL)
    assert "Xid 79 (GPU has fallen off the bus) ×1" in lost.message
    assert "power-cycle" in lost.remediation
    assert lost.observed["last"].endswith("GPU has fallen off the bus.")
    assert for_gpu(results, 0).status == Status.PASS


def test_remediation_names_the_gpu_to_reset_and_orders_worst_first():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:19:00.0", 13), xid_event("0000:19:00.0", 48),
                              xid_event("0000:19:00.0", 13)]
    result = for_gpu(run(snap, "kernel_log.xid"), 0)
    assert result.status == Status.FAIL
    assert result.observed["events"] == {"Xid 13 (Graphics engine exception (a faulting kernel or illegal access))": 2,
                                         "Xid 48 (Double-bit (uncorrectable) ECC error)": 1}
    assert "nvidia-smi -r -i 0" in result.remediation and "<gpu>" not in result.remediation
    assert result.remediation.index("Xid 48") < result.remediation.index("Xid 13")


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68])
def test_application_xids_warn(code):
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:19:00.0", code)]
    assert_actionable(for_gpu(run(snap, "kernel_log.xid"), 0), Status.WARN)


def test_unknown_xid_warns_and_says_so():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:19:00.0", 999)]
    result = for_gpu(run(snap, "kernel_log.xid"), 0)
    assert_actionable(result, Status.WARN)
    assert "not in gpudiag's catalog" in result.message


def test_nvrm_fallen_off_the_bus_line_fails_its_gpu():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [KernelEvent(Vendor.NVIDIA, "fallen_off_bus",
                                          "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                                          pci_bus_id="0000:3b:00.0")]
    result = for_gpu(run(snap, "kernel_log.xid"), 1)
    assert_actionable(result, Status.FAIL)
    assert "fallen off the bus" in result.message


def test_every_kernel_event_kind_the_scanner_emits_is_judged():
    judged_amd = set(kernel_log_amdgpu.AMDGPU_EVENTS)
    assert set(AMDGPU_EVENT_KINDS) <= judged_amd
    codes = {"xid": 79, "sxid": 24007}
    # A multicast-fabric failure fails a job's fabric memory, not the GPU: it warns (checks/kernel_log/nvidia.py).
    warns = {"multicast_fabric_error"}
    for kind in NVIDIA_EVENT_KINDS:  # each fails where it lands: its GPU, its NVSwitch, or node-level
        snap = nvidia_h200_node()
        snap.kernel_log.events = [KernelEvent(Vendor.NVIDIA, kind, "NVRM: x", pci_bus_id="0000:19:00.0",
                                              code=codes.get(kind), detail="fatal" if kind == "sxid" else None)]
        results = run(snap, "kernel_log.xid") + run(snap, "kernel_log.sxid")
        assert (Status.WARN if kind in warns else Status.FAIL) in {r.status for r in results}, kind


def test_xid_on_a_gpu_outside_the_inventory_is_node_level():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:5d:00.0", 79)]
    (orphan,) = node_level(run(snap, "kernel_log.xid"))
    assert_actionable(orphan, Status.FAIL)
    assert "0000:5d:00.0" in orphan.message


def test_lost_gpu_still_gets_its_xids():
    snap = nvidia_h200_node()
    snap.devices[1].reachable = False
    snap.kernel_log.events = [xid_event("0000:3b:00.0", 79)]
    assert for_gpu(run(snap, "kernel_log.xid"), 1).status == Status.FAIL


def test_profile_overrides_the_catalog():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:19:00.0", 13), xid_event("0000:3b:00.0", 79)]
    expect = dataclasses.replace(Expectations(), xid_ignore_codes=(13,), xid_warn_codes=(79,))
    results = run(snap, "kernel_log.xid", expect)
    ignored = for_gpu(results, 0)
    assert ignored.status == Status.PASS and "1 ignored by the profile" in ignored.message
    assert for_gpu(results, 1).status == Status.WARN
    strict = dataclasses.replace(Expectations(), xid_fail_codes=(13,))
    assert for_gpu(run(snap, "kernel_log.xid", strict), 0).status == Status.FAIL


def test_catalog_covers_the_common_codes_with_the_documented_severities():
    common = {8, 13, 31, 32, 38, 43, 45, 48, 56, 57, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119, 120, 121, 122,
              123, 124, 136, 137, 140, 143, 154} | set(range(144, 151))
    assert common <= set(XID_CATALOG)
    default = Expectations()
    for code in (48, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert xid_severity(code, default) == Status.FAIL, code
    for code in (13, 31, 43, 45, 68):
        assert xid_severity(code, default) == Status.WARN, code
    assert xid_severity(12345, default) == Status.WARN
    # No two codes share a meaning (a renumbered or copied entry shows); every code's row is pinned against NVIDIA's
    # catalog in tests/checks/kernel_log/test_pinned_xid.py.
    assert len({info.meaning for info in XID_CATALOG.values()}) == len(XID_CATALOG)


def test_amdgpu_events_by_kind():
    snap = amd_mi300x_node()
    snap.kernel_log.events = [
        amdgpu_event("0000:05:00.0", "ring_timeout", "amdgpu 0000:05:00.0: amdgpu: ring comp_1.0.0 timeout"),
        amdgpu_event("0000:05:00.0", "gpu_reset"),
        amdgpu_event("0000:26:00.0", "gpu_reset_failed"),
        amdgpu_event("0000:46:00.0", "ras_uncorrectable"),
        amdgpu_event("0000:65:00.0", "page_fault"),
        amdgpu_event("0000:85:00.0", "something_new"),
    ]
    results = run(snap, "kernel_log.amdgpu_errors")
    assert_actionable(for_gpu(results, 0), Status.WARN)
    assert for_gpu(results, 0).observed["events"] == {"GPU ring (job queue) timeout": 1, "GPU reset by the driver": 1}
    assert_actionable(for_gpu(results, 1), Status.FAIL)
    assert "cold-boot" in for_gpu(results, 1).remediation
    assert for_gpu(results, 2).status == Status.FAIL
    assert "amd-smi reset --gpureset -g 2" in for_gpu(results, 2).remediation
    assert for_gpu(results, 3).status == Status.WARN
    assert for_gpu(results, 4).status == Status.WARN and "something_new" in for_gpu(results, 4).message
    assert {for_gpu(results, i).status for i in (5, 6, 7)} == {Status.PASS}


def test_amdgpu_event_on_a_partition_lands_on_its_physical_gpu():
    snap = cpx_partitioned(amd_mi300x_node())
    snap.kernel_log.events = [amdgpu_event("0000:26:00.3", "gpu_reset_failed")]
    results = run(snap, "kernel_log.amdgpu_errors")
    assert len(results) == 8
    failed = [r for r in results if r.status == Status.FAIL]
    assert [r.device.pci_bus_id for r in failed] == ["0000:26:00.0"]


# -- boundaries (issue 16: mutation survivors in gpudiag/checks/kernel_log/family.py)
# -----------------------------------

def _booted(snap, seconds_before_collection):
    """Boot `seconds_before_collection` before the snapshot's collection time (its collected_at)."""
    from datetime import datetime
    collected = datetime.fromisoformat(snap.collected_at.replace("Z", "+00:00")).timestamp()
    snap.host.boot_time = collected - seconds_before_collection
    return snap


def _stamped_xid(bus, code, seconds):
    event = xid_event(bus, code)
    event.timestamp_seconds = seconds
    return event


def test_the_window_starts_exactly_window_seconds_before_collection():
    """Booted 10,000 s before collection, a 3,600 s window starts at 6,400 s since boot: an event stamped there is
    judged, one a millisecond earlier is not; an event with no time stamp is always judged."""
    snap = _booted(nvidia_h200_node(), 10_000)
    bus0, bus1 = snap.devices[0].pci_bus_id, snap.devices[1].pci_bus_id
    window = Expectations(kernel_log_window_seconds=3600.0)
    snap.kernel_log.events = [_stamped_xid(bus0, 79, 6400.0), _stamped_xid(bus1, 79, 6399.999)]
    results = run(snap, "kernel_log.xid", window)
    assert (for_gpu(results, 0).status, for_gpu(results, 0).action) == (Status.FAIL, "reboot")
    earlier = for_gpu(results, 1)
    assert (earlier.status, earlier.action) == (Status.PASS, "none")
    assert earlier.message == f"{snap.devices[1].label}: no driver error events since boot (1 ignored by the profile)"
    snap.kernel_log.events = [_stamped_xid(bus1, 79, None)]
    assert for_gpu(run(snap, "kernel_log.xid", window), 1).status == Status.FAIL


def test_without_a_window_or_a_boot_time_every_event_is_judged():
    snap = _booted(nvidia_h200_node(), 10_000)
    snap.kernel_log.events = [_stamped_xid(snap.devices[0].pci_bus_id, 79, 1.0)]
    assert for_gpu(run(snap, "kernel_log.xid"), 0).status == Status.FAIL  # no window configured
    snap.host.boot_time = None
    assert for_gpu(run(snap, "kernel_log.xid", Expectations(kernel_log_window_seconds=3600.0)), 0).status == Status.FAIL


def test_an_unreadable_log_says_why_or_that_no_reason_was_recorded():
    snap = nvidia_h200_node()
    snap.kernel_log.readable = False
    snap.kernel_log.error = ProbeError("/dev/kmsg", ErrorKind.NO_PERMISSION, "Operation not permitted")
    (result,) = run(snap, "kernel_log.xid")
    assert result.message.startswith("the kernel log (/dev/kmsg) could not be read: ")
    assert result.message.endswith(": Operation not permitted") and "no reason recorded" not in result.message
    snap.kernel_log.error, snap.kernel_log.source = None, None
    (result,) = run(snap, "kernel_log.xid")
    assert result.status == Status.UNKNOWN
    assert result.message == "the kernel log (not found) could not be read: no reason recorded"


def test_a_clean_scan_passes_and_says_how_many_records_it_skipped():
    snap = nvidia_h200_node()
    label = snap.devices[0].label
    assert for_gpu(run(snap, "kernel_log.xid"), 0).message == f"{label}: no driver error events since boot"
    snap.kernel_log.records_skipped = 3
    result = for_gpu(run(snap, "kernel_log.xid"), 0)
    assert result.status == Status.PASS
    assert result.message == (f"{label}: no driver error events since boot "
                              f"(3 record(s) could not be parsed and were skipped)")


def test_an_xid_event_without_a_code_is_not_judged():
    """The filter keeps Xids with a code (and fallen-off-the-bus lines): an "xid" record with no code (a saved
    snapshot, a future probe) is no finding, neither a warning about "Xid None"."""
    snap = nvidia_h200_node()
    snap.kernel_log.events = [KernelEvent(Vendor.NVIDIA, "xid", "NVRM: Xid (PCI:0000:19:00): ",
                                          pci_bus_id="0000:19:00.0", code=None)]
    assert [r.status for r in run(snap, "kernel_log.xid")] == [Status.PASS, Status.PASS]


def test_nvrm_fallen_off_the_bus_asks_for_a_reboot_with_xid_79s_code():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [KernelEvent(Vendor.NVIDIA, "fallen_off_bus",
                                          "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                                          pci_bus_id="0000:3b:00.0")]
    lost = for_gpu(run(snap, "kernel_log.xid"), 1)
    assert (lost.status, lost.action, lost.fault_code) == (Status.FAIL, "reboot", "GPUDIAG-XID-79")


def test_a_lost_slot_fails_the_nvidia_gpu_below_it_and_warns_node_level_otherwise():
    from gpudiag.probe.kernel_log.events import parse_event
    snap = nvidia_h200_node()  # GPU 1 (0000:3b:00.0) hangs off port 0000:3a:01.0 (tests/support/snapshots.py)
    snap.kernel_log.events = [parse_event("pcieport 0000:3a:01.0: pciehp: Slot(7): Link Down")]
    lost = for_gpu(run(snap, "kernel_log.xid"), 1)
    assert (lost.status, lost.action, lost.fault_code) == (Status.FAIL, "reboot", "GPUDIAG-PCIE-SLOT-LOST")
    assert "PCIe slot link down (the GPU fell off the bus)" in lost.message
    snap.kernel_log.events = [parse_event("pcieport 0000:f0:01.0: pciehp: Slot(3): Card not present")]
    (node,) = node_level(run(snap, "kernel_log.xid"))
    assert (node.status, node.action, node.fault_code) == (Status.WARN, "watch", "GPUDIAG-PCIE-SLOT-LOST")
    assert node.message.startswith("PCIe slot below port 0000:f0:01.0 (no GPU on the bus is known below it): ")
    assert "PCIe hot-plug slot lost its card ×1" in node.message


def test_node_level_results_name_where_the_events_came_from():
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:5d:00.0", 79), xid_event(None, 13)]
    results = sorted(node_level(run(snap, "kernel_log.xid")), key=lambda r: r.message)
    assert [(r.message.split(": ")[0], r.status) for r in results] == [
        ("GPU at 0000:5d:00.0 (not in the inventory)", Status.FAIL),
        ("a GPU the log line does not name", Status.WARN),
    ]


def test_an_unreadable_log_is_unknown_for_the_amd_check_too():
    snap = amd_mi300x_node()
    snap.kernel_log.readable = False
    snap.kernel_log.error = ProbeError("/dev/kmsg", ErrorKind.NO_PERMISSION, "Operation not permitted")
    (result,) = run(snap, "kernel_log.amdgpu_errors")
    assert result.status == Status.UNKNOWN and result.device is None
    assert result.message.startswith("the kernel log (/dev/kmsg) could not be read: ")
    assert "dmesg_restrict" in result.remediation
