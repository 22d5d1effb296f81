import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, ProbeError, Status
from tests.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, nvidia_h200_node, run


def test_ecc_disabled_fails_and_pending_changes_warn():
    snap = nvidia_h200_node()
    snap.devices[0].ecc.enabled = False
    snap.devices[0].ecc.pending_enabled = False
    snap.devices[1].ecc.pending_enabled = False  # on now, off after the next reset
    results = run(snap, "ecc.mode")
    off = for_gpu(results, 0)
    assert_actionable(off, Status.FAIL)
    assert "nvidia-smi -i 0 -e 1" in off.remediation
    assert_actionable(for_gpu(results, 1), Status.WARN)

    snap.devices[0].ecc.pending_enabled = True  # already fixed, waiting for a reset
    fixed = for_gpu(run(snap, "ecc.mode"), 0)
    assert_actionable(fixed, Status.WARN)
    assert "nvidia-smi -r -i 0" in fixed.remediation


def test_ecc_mode_unsupported_skips_and_unreadable_is_unknown():
    snap = nvidia_h200_node()
    snap.devices[0].ecc.enabled = None
    assert for_gpu(run(snap, "ecc.mode"), 0).status == Status.SKIP
    denied = ProbeError("nvml.nvmlDeviceGetEccMode", ErrorKind.NO_PERMISSION, "Insufficient Permissions")
    snap.devices[0].errors.append(denied)
    unreadable = for_gpu(run(snap, "ecc.mode"), 0)
    assert_actionable(unreadable, Status.UNKNOWN)
    assert "root" in unreadable.remediation
    # An unrelated error does not explain it.
    snap.devices[1].ecc.enabled = None
    snap.devices[1].errors.append(ProbeError("nvml.nvmlDeviceGetFanSpeed", ErrorKind.ERROR, "Unknown Error"))
    assert for_gpu(run(snap, "ecc.mode"), 1).status == Status.SKIP


def test_field_batch_errors_are_matched_by_field():
    snap = nvidia_h200_node()
    snap.devices[0].ecc.enabled = None
    errors = snap.devices[0].errors
    errors.append(ProbeError("nvml.nvmlDeviceGetFieldValues[NVML_FI_DEV_MEMORY_TEMP]", ErrorKind.ERROR, "Unknown"))
    assert for_gpu(run(snap, "ecc.mode"), 0).status == Status.SKIP
    errors.append(ProbeError("nvml.nvmlDeviceGetFieldValues[NVML_FI_DEV_ECC_CURRENT]", ErrorKind.ERROR, "Unknown"))
    assert for_gpu(run(snap, "ecc.mode"), 0).status == Status.UNKNOWN
    errors[:] = [ProbeError("nvml.nvmlDeviceGetFieldValues", ErrorKind.ERROR, "Unknown Error")]
    assert for_gpu(run(snap, "ecc.mode"), 0).status == Status.UNKNOWN


def test_a_timeout_explains_every_missing_value():
    snap = amd_mi300x_node()
    snap.devices[4].ecc.enabled = None
    snap.devices[4].errors.append(ProbeError("amdsmi.amdsmi_get_temp_metric", ErrorKind.TIMEOUT, "no answer in 2 s"))
    assert for_gpu(run(snap, "ecc.mode"), 4).status == Status.UNKNOWN


def test_uncorrected_errors_since_driver_load_fail_lifetime_ones_warn():
    snap = nvidia_h200_node()
    snap.devices[0].ecc.volatile_uncorrected = 2
    snap.devices[0].ecc.aggregate_uncorrected = 2
    snap.devices[1].ecc.aggregate_uncorrected = 1
    results = run(snap, "ecc.uncorrected")
    volatile = for_gpu(results, 0)
    assert_actionable(volatile, Status.FAIL)
    assert volatile.observed["volatile_uncorrected"] == 2 and "nvidia-smi -q -i 0 -d ECC" in volatile.remediation
    assert_actionable(for_gpu(results, 1), Status.WARN)


def test_amd_uncorrected_and_deferred():
    snap = amd_mi300x_node()
    snap.devices[5].ecc.volatile_uncorrected = 1
    snap.devices[6].ecc.deferred = 4
    assert "amd-smi metric --ecc -g 5" in for_gpu(run(snap, "ecc.uncorrected"), 5).remediation
    deferred = for_gpu(run(snap, "ecc.deferred"), 6)
    assert_actionable(deferred, Status.WARN)
    assert "amd-smi bad-pages -g 6" in deferred.remediation
    # Deferred errors are an AMD notion: on an NVIDIA node there is nothing to judge.
    (nvidia,) = run(nvidia_h200_node(), "ecc.deferred")
    assert nvidia.status == Status.SKIP and nvidia.device is None


def test_row_remap_pending_and_failure():
    snap = nvidia_h200_node()
    snap.devices[0].memory_health.remap_pending = True
    snap.devices[1].memory_health.remap_failure = True
    pending = for_gpu(run(snap, "memory.row_remap_pending"), 0)
    assert_actionable(pending, Status.FAIL)
    assert "nvidia-smi -r -i 0" in pending.remediation
    failure = for_gpu(run(snap, "memory.row_remap_failure"), 1)
    assert_actionable(failure, Status.FAIL)
    assert "RMA" in failure.remediation and "ROW_REMAPPER" in failure.remediation
    assert for_gpu(run(snap, "memory.row_remap_failure"), 0).status == Status.PASS


def test_banks_without_spare_rows_warn():
    snap = nvidia_h200_node()
    snap.devices[0].memory_health.remap_histogram.update({"max": 637, "none": 3})
    result = for_gpu(run(snap, "memory.row_remap_failure"), 0)
    assert_actionable(result, Status.WARN)
    assert "3 memory bank(s)" in result.message


def test_retired_pages_thresholds():
    snap = nvidia_h200_node()  # treated as a pre-Ampere GPU that reports retired pages
    health = [d.memory_health for d in snap.devices]
    health[0].retired_pages_single_bit, health[0].retired_pages_double_bit = 50, 10
    health[1].retired_pages_single_bit, health[1].retired_pages_double_bit = 14, 2
    results = run(snap, "memory.retired_pages")
    over = for_gpu(results, 0)
    assert_actionable(over, Status.FAIL)
    assert over.observed["total"] == 60
    assert_actionable(for_gpu(results, 1), Status.WARN)
    health[1].retired_pages_single_bit = 3
    assert for_gpu(run(snap, "memory.retired_pages"), 1).status == Status.PASS
    health[1].retired_pages_pending = True
    assert_actionable(for_gpu(run(snap, "memory.retired_pages"), 1), Status.FAIL)
    lenient = dataclasses.replace(Expectations(), retired_pages_fail_count=64)
    assert for_gpu(run(snap, "memory.retired_pages", lenient), 0).status == Status.WARN


def test_retired_pages_are_not_supported_on_hopper():
    assert {r.status for r in run(nvidia_h200_node(), "memory.retired_pages")} == {Status.SKIP}
    (amd,) = node_level(run(amd_mi300x_node(), "memory.retired_pages"))
    assert amd.status == Status.SKIP


def test_amd_bad_pages_against_the_device_threshold():
    snap = amd_mi300x_node()
    health = [d.memory_health for d in snap.devices]
    health[0].bad_pages_unreservable = 1
    health[1].bad_pages_reserved = 128  # = threshold
    health[2].bad_pages_reserved = 116  # >= 90% of 128
    health[3].bad_pages_pending = 2
    health[4].bad_pages_reserved = 100
    results = run(snap, "memory.bad_pages")
    assert_actionable(for_gpu(results, 0), Status.FAIL)
    assert_actionable(for_gpu(results, 1), Status.FAIL)
    assert "threshold of 128" in for_gpu(results, 1).message
    assert_actionable(for_gpu(results, 2), Status.WARN)
    assert_actionable(for_gpu(results, 3), Status.WARN)
    assert "reset" in for_gpu(results, 3).remediation
    assert for_gpu(results, 4).status == Status.PASS


def test_bad_pages_without_a_threshold_only_judge_pending_and_unreservable():
    snap = amd_mi300x_node()
    snap.devices[0].memory_health.bad_page_threshold = None
    snap.devices[0].memory_health.bad_pages_reserved = 400
    assert for_gpu(run(snap, "memory.bad_pages"), 0).status == Status.PASS


def test_unreachable_gpu_is_unknown_for_memory_checks():
    snap = nvidia_h200_node()
    snap.devices[1].reachable = False
    for check in ("ecc.mode", "ecc.uncorrected", "memory.row_remap_pending", "memory.row_remap_failure"):
        assert_actionable(for_gpu(run(snap, check), 1), Status.UNKNOWN)
