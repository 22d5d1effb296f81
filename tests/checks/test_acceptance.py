"""The checks a node profile drives: new ones (driver.version, inventory.gpu_model / partition_mode,
host.kernel_modules) and the existing ones that honour a profile setting."""

import dataclasses
from datetime import datetime

from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.model import ErrorKind, ProbeError, Status
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


def expect(**settings):
    return dataclasses.replace(DEFAULT_EXPECTATIONS, **settings)


def only(results):
    (result,) = results
    return result


# -- driver.version ---------------------------------------------------------------------------------------------


def test_driver_version_exact_and_minimum():
    snap = nvidia_h200_node()  # driver 560.35.03 everywhere
    assert only(run(snap, "driver.version", expect(expected_driver_version="560.35.03"))).status == Status.PASS
    assert only(run(snap, "driver.version", expect(min_driver_version="550.54.15"))).status == Status.PASS
    # 560.35.03 > 560.4 only when compared part by part as numbers (35 > 4), not as text.
    assert only(run(snap, "driver.version", expect(min_driver_version="560.4"))).status == Status.PASS
    wrong = only(run(snap, "driver.version", expect(expected_driver_version="580.159.04")))
    assert_actionable(wrong, Status.FAIL)
    assert "560.35.03 is not the expected 580.159.04" in wrong.message
    assert (wrong.action, wrong.fault_code) == ("drain", "GPUDIAG-DRIVER-VERSION-UNEXPECTED")
    old = only(run(snap, "driver.version", expect(min_driver_version="570")))
    assert_actionable(old, Status.FAIL)
    assert "older than the required 570" in old.message


def test_driver_version_not_configured_or_not_comparable():
    snap = nvidia_h200_node()
    assert only(run(snap, "driver.version")).status == Status.SKIP
    snap.host.modules_loaded["nvidia"] = "560.35.03-custom"
    odd = only(run(snap, "driver.version", expect(min_driver_version="550")))
    assert odd.status == Status.UNKNOWN and "cannot be compared" in odd.message
    amd = amd_mi300x_node()
    del amd.host.modules_loaded["amdgpu"]
    amd.backends[1].driver_version = amd.host.kernel_release  # in-tree amdgpu: amdsmi reports the kernel release
    in_tree = only(run(amd, "driver.version", expect(min_driver_version="6.10")))
    # The in-tree driver's version is the kernel release, and it is compared (gpudiag issue 15 item 6).
    assert in_tree.status == Status.FAIL and "6.8.0-45-generic is older than the required 6.10" in in_tree.message
    assert "in-tree amdgpu (kernel release)" in in_tree.observed


# -- inventory.gpu_model, inventory.partition_mode --------------------------------------------------------------


def test_gpu_model_exact_or_wildcard_per_gpu():
    snap = amd_mi300x_node()
    assert {r.status for r in run(snap, "inventory.gpu_model", expect(expected_gpu_model="amd instinct mi300x"))} \
        == {Status.PASS}
    snap.devices[5].name = "AMD Instinct MI300X OAM"
    results = run(snap, "inventory.gpu_model", expect(expected_gpu_model="AMD Instinct MI300X*"))
    assert {r.status for r in results} == {Status.PASS} and len(results) == 8
    results = run(snap, "inventory.gpu_model", expect(expected_gpu_model="AMD Instinct MI300X"))
    assert_actionable(for_gpu(results, 5), Status.FAIL)
    assert [r.device.index for r in results if r.status == Status.FAIL] == [5]
    assert for_gpu(results, 5).fault_code == "GPUDIAG-INVENTORY-MODEL-MISMATCH"


def test_gpu_model_not_configured_is_one_node_level_skip():
    results = run(nvidia_h200_node(), "inventory.gpu_model")
    assert [(r.status, r.device) for r in results] == [(Status.SKIP, None)]


def test_partition_mode_amd_and_nvidia():
    wanted = expect(expected_compute_partition="SPX", expected_memory_partition="NPS1", expected_mig_enabled=False)
    assert {r.status for r in run(amd_mi300x_node(), "inventory.partition_mode", wanted)} == {Status.PASS}
    cpx = run(cpx_partitioned(amd_mi300x_node()), "inventory.partition_mode", wanted)
    assert len(cpx) == 8  # one per physical GPU, not per partition
    assert_actionable(cpx[0], Status.FAIL)
    assert "compute_partition CPX, expected SPX" in cpx[0].message and "--compute-partition SPX" in cpx[0].remediation
    nvidia = nvidia_h200_node()
    assert {r.status for r in run(nvidia, "inventory.partition_mode", wanted)} == {Status.PASS}
    nvidia.devices[1].mig_enabled = True
    results = run(nvidia, "inventory.partition_mode", wanted)
    assert for_gpu(results, 0).status == Status.PASS
    assert_actionable(for_gpu(results, 1), Status.FAIL)
    assert "nvidia-smi -i 1 -mig 0" in for_gpu(results, 1).remediation
    # AMD settings say nothing about an NVIDIA GPU.
    amd_only = run(nvidia_h200_node(), "inventory.partition_mode", expect(expected_compute_partition="SPX"))
    assert {r.status for r in amd_only} == {Status.SKIP}


# -- host.kernel_modules, persistence, IOMMU, BAR -----------------------------------------------------------------


def test_required_kernel_modules():
    snap = nvidia_h200_node()
    assert only(run(snap, "host.kernel_modules")).status == Status.SKIP
    assert only(run(snap, "host.kernel_modules", expect(required_kernel_modules=("nvidia", "nvidia_uvm")))).status \
        == Status.PASS
    missing = only(run(snap, "host.kernel_modules", expect(required_kernel_modules=("nvidia", "nvidia_peermem"))))
    assert_actionable(missing, Status.FAIL)
    assert missing.observed["missing"] == ["nvidia_peermem"] and "modprobe nvidia_peermem" in missing.remediation
    snap.errors.append(ProbeError("sysfs:/proc/modules", ErrorKind.NO_PERMISSION, "permission denied"))
    assert only(run(snap, "host.kernel_modules", expect(required_kernel_modules=("nvidia_peermem",)))).status \
        == Status.UNKNOWN


def test_persistence_mode_required_turns_the_warning_into_a_failure():
    snap = nvidia_h200_node()
    snap.devices[0].persistence_mode = False
    assert for_gpu(run(snap, "host.persistence_mode"), 0).status == Status.WARN
    required = for_gpu(run(snap, "host.persistence_mode", expect(persistence_mode_required=True)), 0)
    assert_actionable(required, Status.FAIL)
    assert (required.action, required.fault_code) == ("drain", "GPUDIAG-HOST-PERSISTENCE-OFF")


def test_iommu_mode_against_the_profile():
    snap = amd_mi300x_node()  # identity domains: passthrough
    assert {r.status for r in run(snap, "host.iommu", expect(expected_iommu_mode="passthrough"))} == {Status.PASS}
    results = run(snap, "host.iommu", expect(expected_iommu_mode="translated"))
    assert_actionable(results[0], Status.FAIL)
    assert "IOMMU passthrough, the profile expects translated" in results[0].message
    snap.pci_gpus[2].iommu_domain_type = "DMA-FQ"
    results = run(snap, "host.iommu", expect(expected_iommu_mode="passthrough"))
    assert [r.status for r in results].count(Status.FAIL) == 1 and "iommu=pt" in results[2].remediation
    snap.pci_gpus[3].iommu_domain_type = None
    assert run(snap, "host.iommu", expect(expected_iommu_mode="passthrough"))[3].status == Status.UNKNOWN
    for pci in snap.pci_gpus:
        pci.iommu_domain_type = None
    snap.host.iommu_enabled = False
    assert {r.status for r in run(snap, "host.iommu", expect(expected_iommu_mode="off"))} == {Status.PASS}


def test_small_bar_fails_unless_the_profile_relaxes_it():
    snap = nvidia_h200_node()
    snap.devices[0].memory.bar1_total_bytes = 256 * 1024**2
    snap.pci_gpus[0].bar_sizes_bytes = {0: 16 * 1024**2, 1: 256 * 1024**2}
    assert for_gpu(run(snap, "host.large_bar"), 0).status == Status.FAIL
    relaxed = for_gpu(run(snap, "host.large_bar", expect(large_bar_required=False)), 0)
    assert_actionable(relaxed, Status.WARN)
    assert relaxed.action == "watch"


# -- power.limit, ecc.mode, memory.bad_pages ----------------------------------------------------------------------


def test_power_limit_against_the_profile():
    snap = nvidia_h200_node()
    at_700 = expect(expected_power_limit_watts=700.0, power_limit_tolerance_watts=5.0)
    assert {r.status for r in run(snap, "power.limit", at_700)} == {Status.PASS}
    snap.devices[1].power.limit_watts = 670.0  # within the default's 95% floor, but not the profile's 700 W
    assert for_gpu(run(snap, "power.limit"), 1).status == Status.PASS
    capped = for_gpu(run(snap, "power.limit", at_700), 1)
    assert_actionable(capped, Status.FAIL)
    assert "nvidia-smi -i 1 -pl 700" in capped.remediation and "670 W" in capped.message
    assert capped.expected == "700 W ± 5 W"
    beyond = for_gpu(run(snap, "power.limit", expect(expected_power_limit_watts=1000.0)), 1)
    assert_actionable(beyond, Status.FAIL)
    assert "cannot be set that high (its maximum is 700 W)" in beyond.remediation


def test_ecc_mode_expected_off_or_not_judged():
    snap = nvidia_h200_node()
    off = for_gpu(run(snap, "ecc.mode", expect(expected_ecc_enabled=False)), 0)
    assert_actionable(off, Status.FAIL)
    assert "nvidia-smi -i 0 -e 0" in off.remediation and off.fault_code == "GPUDIAG-ECC-MODE"
    snap.devices[0].ecc.enabled = snap.devices[0].ecc.pending_enabled = False
    assert for_gpu(run(snap, "ecc.mode", expect(expected_ecc_enabled=False)), 0).status == Status.PASS
    assert for_gpu(run(snap, "ecc.mode"), 0).status == Status.FAIL
    assert for_gpu(run(snap, "ecc.mode", expect(expected_ecc_enabled=None)), 0).status == Status.SKIP


def test_max_bad_pages_and_the_pending_reset_verdict():
    snap = amd_mi300x_node()
    snap.devices[4].memory_health.bad_pages_reserved = 3
    assert for_gpu(run(snap, "memory.bad_pages"), 4).status == Status.PASS  # far below the device's 128
    strict = for_gpu(run(snap, "memory.bad_pages", expect(max_bad_pages=0)), 4)
    assert_actionable(strict, Status.FAIL)
    assert (strict.action, strict.fault_code) == ("rma", "GPUDIAG-MEMORY-BAD-PAGES-LIMIT")
    assert for_gpu(run(snap, "memory.bad_pages", expect(max_bad_pages=3)), 4).status == Status.PASS
    snap.devices[4].memory_health.bad_pages_pending = 1
    pending = for_gpu(run(snap, "memory.bad_pages", expect(max_bad_pages=3)), 4)
    assert (pending.status, pending.action, pending.fault_code) == (
        Status.WARN, "reset", "GPUDIAG-MEMORY-BAD-PAGES-PENDING")


# -- kernel_log: window, amdgpu kinds, per-finding verdicts --------------------------------------------------------


def _booted_seconds_ago(snap, seconds):
    collected = datetime.fromisoformat(snap.collected_at.replace("Z", "+00:00")).timestamp()
    snap.host.boot_time = collected - seconds
    return snap


def test_kernel_log_window_ignores_older_events():
    snap = _booted_seconds_ago(nvidia_h200_node(), 10_000)
    old, recent = xid_event(snap.devices[0].pci_bus_id, 79), xid_event(snap.devices[1].pci_bus_id, 79)
    old.timestamp_seconds, recent.timestamp_seconds = 100.0, 9_000.0
    snap.kernel_log.events = [old, recent]
    since_boot = run(snap, "kernel_log.xid")
    assert [r.status for r in since_boot] == [Status.FAIL, Status.FAIL]
    last_hour = run(snap, "kernel_log.xid", expect(kernel_log_window_seconds=3600.0))
    assert for_gpu(last_hour, 0).status == Status.PASS and "1 ignored by the profile" in for_gpu(last_hour, 0).message
    assert for_gpu(last_hour, 1).status == Status.FAIL
    snap.host.boot_time = None  # cannot place the window: nothing is left out
    assert {r.status for r in run(snap, "kernel_log.xid", expect(kernel_log_window_seconds=3600.0))} == {Status.FAIL}


def test_xid_findings_carry_the_catalogs_action_and_code():
    snap = nvidia_h200_node()
    bus0, bus1 = snap.devices[0].pci_bus_id, snap.devices[1].pci_bus_id
    snap.kernel_log.events = [xid_event(bus0, 13), xid_event(bus0, 79), xid_event(bus1, 13), xid_event(bus1, 48)]
    results = run(snap, "kernel_log.xid")
    gpu0, gpu1 = for_gpu(results, 0), for_gpu(results, 1)
    assert (gpu0.status, gpu0.action, gpu0.fault_code) == (Status.FAIL, "reboot", "GPUDIAG-XID-79")
    assert (gpu1.status, gpu1.action, gpu1.fault_code) == (Status.FAIL, "reset", "GPUDIAG-XID-48")
    snap.kernel_log.events = [xid_event(bus0, 13)]
    app = for_gpu(run(snap, "kernel_log.xid"), 0)
    assert (app.status, app.action, app.fault_code) == (Status.WARN, "watch", "GPUDIAG-XID-13")
    disqualified = for_gpu(run(snap, "kernel_log.xid", expect(xid_fail_codes=(13,))), 0)
    assert (disqualified.status, disqualified.action) == (Status.FAIL, "drain")


def test_amdgpu_kinds_from_the_profile():
    snap = amd_mi300x_node()
    bus = snap.devices[2].pci_bus_id
    snap.kernel_log.events = [amdgpu_event(bus, "ring_timeout"), amdgpu_event(bus, "page_fault")]
    default = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 2)
    assert (default.status, default.action) == (Status.WARN, "watch")
    strict = for_gpu(run(snap, "kernel_log.amdgpu_errors", expect(amdgpu_fail_kinds=("ring_timeout",))), 2)
    assert (strict.status, strict.action, strict.fault_code) == (Status.FAIL, "drain", "GPUDIAG-AMDGPU-RING-TIMEOUT")
    quiet = for_gpu(run(snap, "kernel_log.amdgpu_errors",
                        expect(amdgpu_ignore_kinds=("ring_timeout", "page_fault"))), 2)
    assert quiet.status == Status.PASS and "2 ignored by the profile" in quiet.message
    snap.kernel_log.events.append(amdgpu_event(bus, "gpu_reset_failed"))
    failed = for_gpu(run(snap, "kernel_log.amdgpu_errors", expect(amdgpu_warn_kinds=("gpu_reset_failed",))), 2)
    assert failed.status == Status.WARN and failed.action == "reboot"  # the verdict stays what the event needs
    assert node_level(run(snap, "kernel_log.amdgpu_errors")) == []
