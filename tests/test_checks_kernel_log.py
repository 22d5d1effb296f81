import dataclasses

import pytest

from gpudiag.checks import kernel_log
from gpudiag.checks.xid_catalog import XID_CATALOG, xid_severity
from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, KernelEvent, ProbeError, Status, Vendor
from gpudiag.probe.kernel_log_events import AMDGPU_EVENT_KINDS, NVIDIA_EVENT_KINDS
from tests.snapshots import (
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
    judged_amd = set(kernel_log._AMDGPU_EVENTS)
    assert set(AMDGPU_EVENT_KINDS) <= judged_amd
    assert set(NVIDIA_EVENT_KINDS) == {"xid", "fallen_off_bus"}


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
    # catalog in tests/test_pinned_xid.py.
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
