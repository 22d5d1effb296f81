import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, ProbeError, Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, nvidia_h200_node, run


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


# ---------------------------------------------------------------------------------------------------------------
# Issue 16, the survivors of tools/mutate.py in gpudiag/checks/ecc.py: each judgement at its boundary, with the
# exact status, action and the words an operator acts on.

NVIDIA_RMA = "run NVIDIA's field diagnostic (or `dcgmi diag -r 3`) and open an RMA with its log and an " \
             "`nvidia-bug-report.sh` archive"
AMD_RMA = "run `amd-smi bad-pages` and AGFHC/RVS memory tests, and open an RMA with their output"


def test_the_rma_advice_names_the_vendors_own_diagnostic():
    snap = nvidia_h200_node()
    snap.devices[0].memory_health.remap_failure = True
    nvidia = for_gpu(run(snap, "memory.row_remap_failure"), 0)
    assert (nvidia.status, nvidia.action) == (Status.FAIL, "rma")
    assert f"Drain the GPU and {NVIDIA_RMA}: a remap failure meets NVIDIA's RMA criteria." in nvidia.remediation
    assert "amd-smi" not in nvidia.remediation

    amd_snap = amd_mi300x_node()
    amd_snap.devices[0].memory_health.bad_pages_unreservable = 1
    amd = for_gpu(run(amd_snap, "memory.bad_pages"), 0)
    assert (amd.status, amd.action) == (Status.FAIL, "rma")
    assert amd.remediation.startswith(f"Drain the GPU and {AMD_RMA}. ")
    assert "dcgmi" not in amd.remediation and "None" not in amd.remediation


def _ecc_off_profile(enabled, pending):
    snap = nvidia_h200_node()
    snap.devices[0].ecc.enabled, snap.devices[0].ecc.pending_enabled = enabled, pending
    return for_gpu(run(snap, "ecc.mode", Expectations(expected_ecc_enabled=False)), 0)


def test_a_profile_without_ecc_warns_when_ecc_turns_on_at_the_next_reset():
    drifting = _ecc_off_profile(False, True)
    assert_actionable(drifting, Status.WARN)
    assert "ECC is off but set to turn on at the next reset" in drifting.message
    assert "nvidia-smi -i 0 -e 0" in drifting.remediation
    assert _ecc_off_profile(False, False).status == Status.PASS
    on = _ecc_off_profile(True, True)
    assert_actionable(on, Status.FAIL)
    assert "ECC is enabled; the profile expects it off" in on.message
    assert "Disable ECC: `nvidia-smi -i 0 -e 0`, then reset the GPU (`nvidia-smi -r -i 0`) or reboot." in on.remediation
    amd = amd_mi300x_node()  # amdgpu has no runtime ECC switch: RAS goes off on the kernel command line
    amd_on = for_gpu(run(amd, "ecc.mode", Expectations(expected_ecc_enabled=False)), 0)
    assert amd_on.status == Status.FAIL
    assert "Disable ECC: boot with amdgpu.ras_enable=0 on the kernel command line." in amd_on.remediation
    assert "nvidia-smi" not in amd_on.remediation


def _uncorrected(volatile, aggregate, unreadable=(), by_block=None):
    snap = amd_mi300x_node()
    ecc = snap.devices[0].ecc
    ecc.volatile_uncorrected, ecc.aggregate_uncorrected = volatile, aggregate
    ecc.unreadable_blocks = list(unreadable)
    if by_block is not None:
        ecc.by_block = by_block
    return for_gpu(run(snap, "ecc.uncorrected"), 0)


def test_uncorrected_with_no_counter_skips_and_either_counter_alone_is_judged():
    assert _uncorrected(None, None).status == Status.SKIP  # not a pass: nothing was counted
    lifetime = _uncorrected(None, 1)
    assert (lifetime.status, lifetime.action) == (Status.WARN, "watch")
    assert "1 uncorrected ECC error(s) in its lifetime" in lifetime.message
    assert _uncorrected(None, 0).status == Status.PASS
    now = _uncorrected(1, None)
    assert (now.status, now.action) == (Status.FAIL, "reset")


def test_uncorrected_names_the_blocks_that_counted_them():
    blocks = {"umc": {"corrected": 0, "uncorrected": 3}, "gfx": {"corrected": 1, "uncorrected": 0}}
    named = _uncorrected(3, None, by_block=blocks)
    assert named.message.endswith("3 uncorrected ECC error(s) since the driver loaded (in umc)")
    bare = _uncorrected(3, None, by_block={})
    assert bare.message.endswith("3 uncorrected ECC error(s) since the driver loaded")


def test_zero_uncorrected_with_an_unreadable_block_is_not_a_clean_bill():
    # A zero total while a RAS block did not answer covers only the other blocks (amdgpu: "Query currently
    # inaccessible" during a reset): the memory controller (umc) missing is unknown, another block a warning.
    umc = _uncorrected(0, 0, unreadable=["umc"])
    assert umc.status == Status.UNKNOWN
    assert "the counts of umc could not be read" in umc.message
    other = _uncorrected(0, 0, unreadable=["sdma"])
    assert (other.status, other.action) == (Status.WARN, "watch")
    assert other.observed["unreadable_blocks"] == ["sdma"]
    assert _uncorrected(None, None, unreadable=["umc"]).status == Status.UNKNOWN
    assert _uncorrected(5, 5, unreadable=["umc"]).status == Status.FAIL  # counted errors outrank the gap


def test_unsupported_counters_skip_rather_than_pass():
    amd = amd_mi300x_node()
    amd.devices[0].ecc.deferred = None
    assert for_gpu(run(amd, "ecc.deferred"), 0).status == Status.SKIP
    amd.devices[0].ecc.deferred = 0
    assert for_gpu(run(amd, "ecc.deferred"), 0).status == Status.PASS
    health = amd.devices[1].memory_health
    health.bad_pages_reserved = health.bad_pages_pending = health.bad_pages_unreservable = None
    assert for_gpu(run(amd, "memory.bad_pages"), 1).status == Status.SKIP

    nvidia = nvidia_h200_node()
    nvidia.devices[0].memory_health.remap_pending = None
    nvidia.devices[1].memory_health.remap_failure = None
    assert for_gpu(run(nvidia, "memory.row_remap_pending"), 0).status == Status.SKIP
    assert for_gpu(run(nvidia, "memory.row_remap_pending"), 1).status == Status.PASS
    assert for_gpu(run(nvidia, "memory.row_remap_failure"), 1).status == Status.SKIP
    assert for_gpu(run(nvidia, "memory.row_remap_failure"), 0).status == Status.PASS


def _bad_pages_expected(expect=None, **health):
    snap = amd_mi300x_node()
    for name, value in health.items():
        setattr(snap.devices[0].memory_health, name, value)
    return for_gpu(run(snap, "memory.bad_pages", expect), 0)


def test_bad_pages_expected_states_the_threshold_the_default_and_the_profiles_maximum():
    assert _bad_pages_expected().expected == ("reserved < 90% of the threshold 128, none pending or unreservable")
    assert _bad_pages_expected(bad_page_threshold=None).expected == "none pending or unreservable"
    assert _bad_pages_expected(Expectations(max_bad_pages=3)).expected == (
        "at most 3 reserved, reserved < 90% of the threshold 128, none pending or unreservable")
    default = _bad_pages_expected(bad_page_threshold_source="default")
    assert default.expected.endswith("(threshold 128 is amdgpu's default for gfx942 (its MP0 version unknown: the "
                                     "lower of the MI300/MI350-series defaults): the driver's own value is readable "
                                     "only by root)")
    assert default.observed["threshold_source"] == "default"
    by_part = _bad_pages_expected(bad_page_threshold_source="default:MP0 13.0.14", bad_page_threshold=256)
    assert "(threshold 256 is amdgpu's default for MP0 13.0.14: " in by_part.expected
    driver = _bad_pages_expected(bad_page_threshold_source="driver")
    assert "default" not in driver.expected and "threshold_source" not in driver.observed


def test_pending_bad_pages_ask_for_a_reset():
    pending = _bad_pages_expected(bad_pages_pending=1)
    assert (pending.status, pending.action, pending.fault_code) == (
        Status.WARN, "reset", "GPUDIAG-MEMORY-BAD-PAGES-PENDING")
    assert "1 bad page(s) pending reservation" in pending.message


def test_bad_pages_warn_exactly_at_the_fraction_of_the_threshold():
    # 90 % of 100 is exactly 90: "reserved < 90% of the threshold" passes 89 and warns at 90.
    assert _bad_pages_expected(bad_page_threshold=100, bad_pages_reserved=89).status == Status.PASS
    at = _bad_pages_expected(bad_page_threshold=100, bad_pages_reserved=90)
    assert (at.status, at.action) == (Status.WARN, "watch")
    assert "90 bad pages reserved, near the threshold of 100" in at.message


def _driver_health(**values):
    from gpudiag.model import DriverHealth

    snap = nvidia_h200_node()
    health = DriverHealth(recovery_action="none", unrepairable_memory=False, sram_volatile_uncorrected=0,
                          sram_aggregate_uncorrected=0, sram_aggregate_corrected=0, sram_threshold_exceeded=False)
    for name, value in values.items():
        setattr(health, name, value)
    snap.devices[0].driver_health = health
    return snap


def test_the_sram_threshold_alone_is_an_rma():
    # bThresholdExceeded of nvmlEccSramErrorStatus_v1_t with no uncorrectable count: the field diagnostic's own limit.
    result = for_gpu(run(_driver_health(sram_threshold_exceeded=True, sram_aggregate_corrected=5000), "ecc.sram"), 0)
    assert (result.status, result.action, result.fault_code) == (Status.FAIL, "rma", "GPUDIAG-ECC-SRAM-THRESHOLD")
    assert "past NVIDIA's field-diagnostic threshold" in result.message
    assert NVIDIA_RMA in result.remediation
    assert for_gpu(run(_driver_health(), "ecc.sram"), 0).status == Status.PASS


def test_sram_errors_name_their_units():
    named = for_gpu(run(_driver_health(sram_aggregate_uncorrected=2, sram_uncorrected_by_unit={"l2": 2, "sm": 0}),
                        "ecc.sram"), 0)
    assert (named.status, named.action) == (Status.FAIL, "rma")
    assert named.message.endswith("2 uncorrectable SRAM ECC error(s) (2 l2)")
    bare = for_gpu(run(_driver_health(sram_aggregate_uncorrected=2), "ecc.sram"), 0)
    assert bare.message.endswith("2 uncorrectable SRAM ECC error(s)")


def test_unrepairable_memory_is_an_rma_and_its_absence_skips():
    flagged = for_gpu(run(_driver_health(unrepairable_memory=True), "memory.unrepairable"), 0)
    assert (flagged.status, flagged.action, flagged.fault_code) == (Status.FAIL, "rma", "GPUDIAG-MEMORY-UNREPAIRABLE")
    assert "the driver flags its memory as unrepairable" in flagged.message
    assert for_gpu(run(_driver_health(), "memory.unrepairable"), 0).status == Status.PASS
    assert for_gpu(run(_driver_health(unrepairable_memory=None), "memory.unrepairable"), 0).status == Status.SKIP
    assert for_gpu(run(_driver_health(sram_aggregate_uncorrected=None), "ecc.sram"), 0).status == Status.SKIP


def test_ecc_mode_with_ras_switched_off_fails_only_where_the_profile_expects_ecc():
    snap = amd_mi300x_node()
    snap.devices[0].ecc.enabled = None
    snap.devices[0].unsupported["amdsmi.amdsmi_get_gpu_ecc_enabled"] = "no RAS feature mask (amdgpu.ras_enable=0?)"
    off = for_gpu(run(snap, "ecc.mode"), 0)
    assert (off.status, off.action) == (Status.FAIL, "reset")
    assert "ECC/RAS is not reported (no RAS feature mask (amdgpu.ras_enable=0?))" in off.message
    assert "amdgpu.ras_enable=0" in off.remediation
    assert for_gpu(run(snap, "ecc.mode", Expectations(expected_ecc_enabled=False)), 0).status == Status.SKIP
    # expected_ecc_enabled unset: the mode is not judged, even with ECC off
    snap.devices[1].ecc.enabled = False
    unjudged = for_gpu(run(snap, "ecc.mode", Expectations(expected_ecc_enabled=None)), 1)
    assert unjudged.status == Status.SKIP and "expected_ecc_enabled is unset" in unjudged.message
