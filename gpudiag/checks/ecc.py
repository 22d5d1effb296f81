"""ecc.* and memory.*: GPU memory integrity: ECC mode and error counts, NVIDIA row remapping and page retirement,
AMD bad pages.

ECC disabled is a fail, not a warning: without ECC, memory errors corrupt results silently, and NVIDIA's page
retirement and row remapping (and AMD's bad-page retirement) are built on ECC and stop working too (NVIDIA "Dynamic
Page Retirement": "works only when the customer enables ECC"). A fleet that disables ECC on purpose skips ecc.mode.
"""

from __future__ import annotations

from gpudiag.checks.common import (
    FIELD_BATCH,
    device_check,
    driver_health_missing,
    failed,
    not_available,
    passed,
    query_command,
    reset_command,
    skipped,
    unknown,
    unsupported_reasons,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, Status, Vendor

MODE = "ecc.mode"
UNCORRECTED = "ecc.uncorrected"
DEFERRED = "ecc.deferred"
REMAP_PENDING = "memory.row_remap_pending"
REMAP_FAILURE = "memory.row_remap_failure"
RETIRED_PAGES = "memory.retired_pages"
BAD_PAGES = "memory.bad_pages"
SRAM = "ecc.sram"
UNREPAIRABLE = "memory.unrepairable"

_ECC_TOPICS = ("ecc", "ras", FIELD_BATCH)
_REMAP_TOPICS = ("remap", FIELD_BATCH)
_RETIRED_TOPICS = ("retired", FIELD_BATCH)
_BAD_PAGE_TOPICS = ("bad_page", "bad page", "reserved_pages", "ras")
_SRAM_TOPICS = ("sramecc",)
_UNREPAIRABLE_TOPICS = ("unrepairable",)


def _ecc_query(device: DeviceSnapshot) -> str:
    return query_command(device, "ECC", "metric --ecc")


def _rma_advice(device: DeviceSnapshot) -> str:
    if device.vendor == Vendor.NVIDIA:
        return ("run NVIDIA's field diagnostic (or `dcgmi diag -r 3`) and open an RMA with its log and an "
                "`nvidia-bug-report.sh` archive")
    return "run `amd-smi bad-pages` and AGFHC/RVS memory tests, and open an RMA with their output"


def _mode_off_expected(device: DeviceSnapshot, observed: dict) -> CheckResult:
    """A profile that runs the fleet without ECC (for the memory it frees and the bandwidth): ECC on is the drift."""
    confirm = f"Confirm with `{_ecc_query(device)}`."
    if device.vendor == Vendor.NVIDIA:
        disable = f"`nvidia-smi -i {device.index} -e 0`, then reset the GPU (`{reset_command(device)}`) or reboot"
    else:
        disable = "boot with amdgpu.ras_enable=0 on the kernel command line"
    if device.ecc.enabled:
        return failed(MODE, device, f"{device.label}: ECC is enabled; the profile expects it off",
                      observed=observed, expected="ECC disabled", remediation=f"Disable ECC: {disable}. {confirm}")
    if device.ecc.pending_enabled:
        return warned(MODE, device, f"{device.label}: ECC is off but set to turn on at the next reset",
                      observed=observed, expected="ECC disabled, no pending change",
                      remediation=f"Undo it with `nvidia-smi -i {device.index} -e 0` before the next reset. {confirm}")
    return passed(MODE, device, f"{device.label}: ECC disabled, as the profile expects", observed=observed,
                  expected="ECC disabled")


def _mode(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    ecc = device.ecc
    if expect.expected_ecc_enabled is None:
        return skipped(MODE, device, "ECC mode is not judged (expected_ecc_enabled is unset)")
    if ecc.enabled is None:
        ras_off = unsupported_reasons(device, ("ecc_enabled", "/ras$"))
        if ras_off and expect.expected_ecc_enabled:
            return _ras_not_reported(device, ras_off)
        return not_available(MODE, device, "ECC mode", _ECC_TOPICS)
    observed = {"enabled": ecc.enabled, "pending_enabled": ecc.pending_enabled}
    if expect.expected_ecc_enabled is False:
        return _mode_off_expected(device, observed)
    confirm = f"Confirm with `{_ecc_query(device)}`."
    if not ecc.enabled and ecc.pending_enabled:
        return warned(MODE, device, f"{device.label}: ECC is off but enabled for the next reset",
                      observed=observed, expected="ECC enabled",
                      remediation=f"Reset the GPU to apply it: `{reset_command(device)}` (or reboot). {confirm}")
    if not ecc.enabled:
        if device.vendor == Vendor.NVIDIA:
            enable = f"`nvidia-smi -i {device.index} -e 1`, then reset the GPU (`{reset_command(device)}`) or reboot"
        else:
            enable = "remove amdgpu.ras_enable=0 from the kernel command line (or set it to 1) and reboot"
        return failed(MODE, device, f"{device.label}: ECC is disabled, memory errors go undetected",
                      observed=observed, expected="ECC enabled", remediation=f"Enable ECC: {enable}. {confirm}")
    if ecc.pending_enabled is False:
        return warned(MODE, device, f"{device.label}: ECC is on now but set to turn off at the next reset",
                      observed=observed, expected="ECC enabled, no pending change",
                      remediation=f"Undo it with `nvidia-smi -i {device.index} -e 1` before the next reset. {confirm}")
    return passed(MODE, device, f"{device.label}: ECC enabled", observed=observed, expected="ECC enabled")


def _ras_not_reported(device: DeviceSnapshot, reasons: list[str]) -> CheckResult:
    """amdgpu publishes no RAS feature mask on a GPU the profile says has ECC: RAS was switched off
    (amdgpu.ras_enable=0), and with it ECC reporting and bad-page retirement."""
    return failed(MODE, device, f"{device.label}: ECC/RAS is not reported ({'; '.join(reasons)}); the profile "
                                f"expects ECC on",
                  observed={"enabled": None, "why": reasons}, expected="ECC enabled",
                  remediation=(f"Remove amdgpu.ras_enable=0 (and any amdgpu.ras_mask) from the kernel command line "
                               f"and reboot; confirm with `cat /sys/class/drm/card*/device/ras/features` and "
                               f"`{_ecc_query(device)}`. If the profile is wrong for this part, set "
                               f"expected_ecc_enabled = false."))


def _partial_total(device: DeviceSnapshot, observed: dict, expected: str) -> CheckResult:
    """Some RAS blocks did not answer: amdsmi's total covers only the others, so 0 is not a clean bill."""
    blocks = ", ".join(device.ecc.unreadable_blocks)
    result = unknown if "umc" in device.ecc.unreadable_blocks else warned
    return result(UNCORRECTED, device, f"{device.label}: no uncorrected ECC errors in the blocks that answered, but "
                                       f"the counts of {blocks} could not be read",
                  observed={**observed, "unreadable_blocks": device.ecc.unreadable_blocks}, expected=expected,
                  remediation=(f"amdgpu answers 'Query currently inaccessible' while RAS is not ready or a GPU reset "
                               f"runs, often right after a fatal error: check the kernel log (`dmesg -T | grep -i "
                               f"-e ras -e 'hardware error' -e reset`), wait for the reset to finish and re-run. "
                               f"Confirm with `{_ecc_query(device)}`."))


def _uncorrected(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    ecc = device.ecc
    if ecc.volatile_uncorrected is None and ecc.aggregate_uncorrected is None:
        if ecc.unreadable_blocks:
            return _partial_total(device, {}, "0 uncorrected errors")
        return not_available(UNCORRECTED, device, "uncorrected ECC counts", _ECC_TOPICS)
    observed = {"volatile_uncorrected": ecc.volatile_uncorrected, "aggregate_uncorrected": ecc.aggregate_uncorrected,
                "volatile_corrected": ecc.volatile_corrected, "aggregate_corrected": ecc.aggregate_corrected,
                "by_block": ecc.by_block}
    expected = "0 uncorrected errors"
    if ecc.volatile_uncorrected:
        blocks = [name for name, counts in ecc.by_block.items() if counts.get("uncorrected")]
        where = f" (in {', '.join(blocks)})" if blocks else ""
        return failed(UNCORRECTED, device,
                      f"{device.label}: {ecc.volatile_uncorrected} uncorrected ECC error(s) since the driver "
                      f"loaded{where}",
                      observed=observed, expected=expected,
                      remediation=(f"Drain the GPU: the jobs that hit these errors got corrupted data or were killed. "
                                   f"Check memory.* (row remapping / bad pages) and reset the GPU "
                                   f"(`{reset_command(device)}`) to apply any pending repair. If uncorrected errors "
                                   f"recur after the reset, {_rma_advice(device)}. Confirm with "
                                   f"`{_ecc_query(device)}`."))
    if ecc.unreadable_blocks:
        return _partial_total(device, observed, expected)
    if ecc.aggregate_uncorrected:
        return warned(UNCORRECTED, device, f"{device.label}: {ecc.aggregate_uncorrected} uncorrected ECC error(s) "
                                           f"in its lifetime, none since the driver loaded",
                      observed=observed, expected=expected,
                      remediation=(f"Past errors, already handled by a reset: watch whether the count grows, and "
                                   f"check memory.* for remapping/retirement headroom. Confirm with "
                                   f"`{_ecc_query(device)}`."))
    return passed(UNCORRECTED, device, f"{device.label}: no uncorrected ECC errors", observed=observed,
                  expected=expected)


def _deferred(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    if device.ecc.deferred is None:
        return not_available(DEFERRED, device, "deferred ECC errors", _ECC_TOPICS)
    observed = {"deferred": device.ecc.deferred, "by_block": device.ecc.by_block}
    if device.ecc.deferred:
        return warned(DEFERRED, device, f"{device.label}: {device.ecc.deferred} deferred (poisoned) memory error(s)",
                      observed=observed, expected="0 deferred errors",
                      remediation=(f"Deferred errors are uncorrectable data that was poisoned and consumed later; the "
                                   f"affected pages should be retired. Check `amd-smi bad-pages -g {device.index}` for "
                                   f"pending pages and reset the GPU (`{reset_command(device)}`) to reserve them. "
                                   f"Confirm with `{_ecc_query(device)}`."))
    return passed(DEFERRED, device, f"{device.label}: no deferred errors", observed=observed,
                  expected="0 deferred errors")


def _remap_pending(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    health = device.memory_health
    if health.remap_pending is None:
        return not_available(REMAP_PENDING, device, "row-remapping state", _REMAP_TOPICS)
    observed = {"remap_pending": health.remap_pending,
                "remapped_rows_correctable": health.remapped_rows_correctable,
                "remapped_rows_uncorrectable": health.remapped_rows_uncorrectable}
    if health.remap_pending:
        return failed(REMAP_PENDING, device, f"{device.label}: a row remap is pending; it takes effect at the next "
                                             f"GPU reset",
                      observed=observed, expected="no pending remap",
                      remediation=(f"Drain the GPU and reset it (`{reset_command(device)}`, or reboot) to apply the "
                                   f"remap. Confirm with `nvidia-smi -q -i {device.index} -d ROW_REMAPPER` "
                                   f"(Pending: No)."))
    return passed(REMAP_PENDING, device, f"{device.label}: no row remap pending", observed=observed,
                  expected="no pending remap")


def _remap_failure(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    health = device.memory_health
    if health.remap_failure is None:
        return not_available(REMAP_FAILURE, device, "row-remapping failure flag", _REMAP_TOPICS)
    observed = {"remap_failure": health.remap_failure, "histogram": health.remap_histogram}
    confirm = f"Confirm with `nvidia-smi -q -i {device.index} -d ROW_REMAPPER`"
    if health.remap_failure:
        # NVIDIA "GPU Memory Error Management", RMA Policy: the failure flag, validated by the field diagnostic,
        # meets the RMA criteria.
        return failed(REMAP_FAILURE, device, f"{device.label}: a row remap failed; a failing bank has no spare row "
                                             f"left",
                      observed=observed, expected="no remap failure",
                      remediation=f"Drain the GPU and {_rma_advice(device)}: a remap failure meets NVIDIA's RMA "
                                  f"criteria. {confirm}.")
    exhausted = health.remap_histogram.get("none", 0)
    if exhausted:
        return warned(REMAP_FAILURE, device, f"{device.label}: {exhausted} memory bank(s) have no spare rows left",
                      observed=observed, expected="spare rows in every bank",
                      remediation=(f"The next uncorrectable error in such a bank cannot be remapped and fails the "
                                   f"GPU: plan a replacement and watch ecc.uncorrected. {confirm} (Bank Remap "
                                   f"Availability Histogram)."))
    return passed(REMAP_FAILURE, device, f"{device.label}: no row-remap failure", observed=observed,
                  expected="no remap failure")


def _retired_pages(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    health = device.memory_health
    if health.retired_pages_single_bit is None and health.retired_pages_double_bit is None:
        return not_available(RETIRED_PAGES, device, "retired pages", _RETIRED_TOPICS)
    total = (health.retired_pages_single_bit or 0) + (health.retired_pages_double_bit or 0)
    observed = {"single_bit": health.retired_pages_single_bit, "double_bit": health.retired_pages_double_bit,
                "total": total, "pending": health.retired_pages_pending}
    expected = f"fewer than {expect.retired_pages_warn_count} retired pages, none pending"
    confirm = f"Confirm with `nvidia-smi -q -i {device.index} -d PAGE_RETIREMENT`."
    if total >= expect.retired_pages_fail_count:
        return failed(RETIRED_PAGES, device,
                      f"{device.label}: {total} retired pages (limit {expect.retired_pages_fail_count})",
                      observed=observed, expected=expected,
                      remediation=f"The GPU is running out of retirement slots: drain it and {_rma_advice(device)}. "
                                  f"{confirm}")
    if health.retired_pages_pending:
        pending = failed(RETIRED_PAGES, device, f"{device.label}: a page retirement is pending; the bad page stays in "
                                                f"use until the driver reloads",
                         observed=observed, expected=expected,
                         remediation=f"Drain the GPU and reset it (`{reset_command(device)}`) or reboot to retire the "
                                     f"page. {confirm}")
        return with_verdict(pending, "reset", "GPUDIAG-MEMORY-RETIREMENT-PENDING")
    if total >= expect.retired_pages_warn_count:
        return warned(RETIRED_PAGES, device,
                      f"{device.label}: {total} retired pages (warn at {expect.retired_pages_warn_count})",
                      observed=observed, expected=expected,
                      remediation=f"Memory is degrading: watch the rate of new retirements and plan a replacement. "
                                  f"{confirm}")
    return passed(RETIRED_PAGES, device, f"{device.label}: {total} retired pages", observed=observed,
                  expected=expected)


def _bad_pages(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    health = device.memory_health
    counts = (health.bad_pages_reserved, health.bad_pages_pending, health.bad_pages_unreservable)
    if all(count is None for count in counts):
        return not_available(BAD_PAGES, device, "bad-page records", _BAD_PAGE_TOPICS)
    reserved = health.bad_pages_reserved or 0
    threshold = health.bad_page_threshold
    observed = {"reserved": health.bad_pages_reserved, "pending": health.bad_pages_pending,
                "unreservable": health.bad_pages_unreservable, "threshold": threshold}
    expected = "none pending or unreservable"
    if threshold:
        expected = f"reserved < {expect.bad_pages_warn_fraction:.0%} of the threshold {threshold}, {expected}"
    source = health.bad_page_threshold_source or ""
    if source.startswith("default"):
        # The driver's value is root-only (debugfs); the part's own default stands in (amdgpu_ras_validate_threshold:
        # by MP0 version), or the lower of the MI300/MI350 defaults where the MP0 version is unknown, and says so.
        observed["threshold_source"] = source
        part = (source.partition(":")[2] or
                f"{device.architecture} (its MP0 version unknown: the lower of the MI300/MI350-series defaults)")
        expected += (f" (threshold {threshold} is amdgpu's default for {part}: the driver's own value is readable "
                     f"only by root)")
    if expect.max_bad_pages is not None:
        expected = f"at most {expect.max_bad_pages} reserved, {expected}"
    confirm = f"Confirm with `amd-smi bad-pages -g {device.index}`."
    if health.bad_pages_unreservable:
        return failed(BAD_PAGES, device, f"{device.label}: {health.bad_pages_unreservable} bad page(s) could not be "
                                         f"reserved and stay in use",
                      observed=observed, expected=expected,
                      remediation=f"Drain the GPU and {_rma_advice(device)}. {confirm}")
    if expect.max_bad_pages is not None and reserved > expect.max_bad_pages:
        return failed(BAD_PAGES, device, f"{device.label}: {reserved} bad pages reserved, more than the profile's "
                                         f"{expect.max_bad_pages}",
                      observed=observed, expected=expected,
                      remediation=f"The GPU has more retired memory than this fleet accepts: drain it and "
                                  f"{_rma_advice(device)} (or raise max_bad_pages if the policy allows). {confirm}")
    if threshold and reserved >= threshold:
        # amdgpu reports an RMA reason once the records reach the threshold (amdgpu_ras_eeprom.c).
        return failed(BAD_PAGES, device, f"{device.label}: {reserved} bad pages reserved, at the device's "
                                         f"threshold of {threshold}",
                      observed=observed, expected=expected,
                      remediation=f"The GPU has reached its bad-page limit (amdgpu flags it for RMA): drain it and "
                                  f"{_rma_advice(device)}. {confirm}")
    if health.bad_pages_pending:
        return with_verdict(warned(BAD_PAGES, device, f"{device.label}: {health.bad_pages_pending} bad page(s) "
                                                      f"pending reservation",
                                   observed=observed, expected=expected,
                                   remediation=f"Reset the GPU (`{reset_command(device)}`) or reload amdgpu to "
                                               f"reserve them. {confirm}"), "reset", "GPUDIAG-MEMORY-BAD-PAGES-PENDING")
    if threshold and reserved >= expect.bad_pages_warn_fraction * threshold:
        return warned(BAD_PAGES, device, f"{device.label}: {reserved} bad pages reserved, near the threshold of "
                                         f"{threshold}",
                      observed=observed, expected=expected,
                      remediation=f"Memory is degrading towards the RMA limit: plan a replacement and watch ecc.*. "
                                  f"{confirm}")
    return passed(BAD_PAGES, device, f"{device.label}: {reserved} bad pages reserved", observed=observed,
                  expected=expected)


def _sram(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    """SRAM (on-chip caches, register files) cannot be repaired by row remapping: uncorrectable SRAM errors, and the
    field diagnostic's SRAM error threshold (bThresholdExceeded of nvmlEccSramErrorStatus_v1_t, NVML API reference),
    are RMA criteria. DRAM errors stay with ecc.uncorrected and memory.row_remap_* (reset to remap, RMA when a remap
    fails)."""
    missing = driver_health_missing(SRAM, device, "sram_aggregate_uncorrected", "SRAM ECC counts", _SRAM_TOPICS)
    if missing is not None:
        return missing
    health = device.driver_health
    observed = {"volatile_uncorrected": health.sram_volatile_uncorrected,
                "aggregate_uncorrected": health.sram_aggregate_uncorrected,
                "aggregate_corrected": health.sram_aggregate_corrected,
                "uncorrected_by_unit": health.sram_uncorrected_by_unit,
                "threshold_exceeded": health.sram_threshold_exceeded}
    expected = "no uncorrectable SRAM errors, SRAM error threshold not exceeded"
    remediation = (f"SRAM errors are not repaired by row remapping; NVIDIA's field diagnostic treats them as an RMA "
                   f"criterion. Drain the GPU and {_rma_advice(device)}. Confirm with "
                   f"`nvidia-smi -q -i {device.index} -d ECC` (SRAM Uncorrectable, SRAM Threshold Exceeded).")
    if health.sram_threshold_exceeded:
        return with_verdict(failed(SRAM, device, f"{device.label}: its SRAM error count is past NVIDIA's "
                                                 f"field-diagnostic threshold",
                                   observed=observed, expected=expected, remediation=remediation),
                            "rma", "GPUDIAG-ECC-SRAM-THRESHOLD")
    uncorrected = max(health.sram_aggregate_uncorrected or 0, health.sram_volatile_uncorrected or 0)
    if uncorrected:
        units = ", ".join(f"{n} {unit}" for unit, n in health.sram_uncorrected_by_unit.items() if n)
        return failed(SRAM, device, f"{device.label}: {uncorrected} uncorrectable SRAM ECC error(s)"
                                    + (f" ({units})" if units else ""),
                      observed=observed, expected=expected, remediation=remediation)
    return passed(SRAM, device, f"{device.label}: no uncorrectable SRAM errors", observed=observed,
                  expected=expected)


def _unrepairable(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    missing = driver_health_missing(UNREPAIRABLE, device, "unrepairable_memory", "unrepairable-memory flag",
                                    _UNREPAIRABLE_TOPICS)
    if missing is not None:
        return missing
    flag = device.driver_health.unrepairable_memory
    observed = {"unrepairable_memory": flag}
    if flag:
        return failed(UNREPAIRABLE, device, f"{device.label}: the driver flags its memory as unrepairable",
                      observed=observed, expected="memory repairable",
                      remediation=f"The GPU has memory faults that neither row remapping nor a reset can repair. "
                                  f"Drain it and {_rma_advice(device)}. Confirm with "
                                  f"`nvidia-smi -q -i {device.index} -d ECC` (Unrepairable Memory: Yes).")
    return passed(UNREPAIRABLE, device, f"{device.label}: no unrepairable memory", observed=observed,
                  expected="memory repairable")


CHECKS = (
    device_check(MODE, "ECC is enabled, no mode change pending", _mode),
    device_check(UNCORRECTED, "no uncorrected ECC errors since the driver loaded (lifetime errors warn)",
                 _uncorrected),
    device_check(SRAM, "no uncorrectable SRAM ECC errors, SRAM threshold not exceeded (NVIDIA; an RMA criterion)",
                 _sram, vendor=Vendor.NVIDIA),
    device_check(DEFERRED, "no deferred (poisoned) memory errors (AMD)", _deferred, vendor=Vendor.AMD),
    device_check(REMAP_PENDING, "no row remap waiting for a GPU reset (NVIDIA Ampere+)", _remap_pending,
                 vendor=Vendor.NVIDIA),
    device_check(REMAP_FAILURE, "no row-remap failure (an RMA criterion), spare rows left", _remap_failure,
                 vendor=Vendor.NVIDIA),
    device_check(UNREPAIRABLE, "the driver does not flag the GPU's memory as unrepairable (NVIDIA; an RMA "
                 "criterion)", _unrepairable, vendor=Vendor.NVIDIA),
    device_check(RETIRED_PAGES, "retired pages below thresholds, none pending (NVIDIA pre-Ampere)", _retired_pages,
                 vendor=Vendor.NVIDIA),
    device_check(BAD_PAGES, "bad pages below the device's threshold, none pending or unreservable (AMD)",
                 _bad_pages, vendor=Vendor.AMD),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_ECC_VERDICTS = {
    "ecc.mode": {F: ("reset", "GPUDIAG-ECC-MODE"), W: ("reset", "GPUDIAG-ECC-MODE-PENDING")},
    "ecc.uncorrected": {F: ("reset", "GPUDIAG-ECC-UNCORRECTED"), W: ("watch", "GPUDIAG-ECC-UNCORRECTED-LIFETIME")},
    "ecc.sram": {F: ("rma", "GPUDIAG-ECC-SRAM-UNCORRECTED")},
    "ecc.deferred": {W: ("reset", "GPUDIAG-ECC-DEFERRED")},
}
_ECC_REFERENCE = {
    "ecc.mode": (
        "ECC mode, current and pending (NVML; amdsmi / sysfs RAS features)",
        "Enable ECC (`nvidia-smi -e 1`, amdgpu.ras_enable) and reset the GPU so that a pending change takes effect."),
    "ecc.uncorrected": (
        "uncorrected ECC error counters, volatile (since driver load) and aggregate (lifetime)",
        "Uncorrected errors since the driver loaded: drain and reset the GPU (a row remap or page retirement follows); "
        "lifetime errors only: watch for new ones."),
    "ecc.sram": (
        "NVIDIA SRAM ECC counters and the driver's SRAM threshold-exceeded flag",
        "The SRAM threshold is an RMA criterion: drain the GPU and open an RMA with the field-diagnostic log."),
    "ecc.deferred": (
        "AMD deferred (poisoned) error counts per RAS block",
        "Poisoned data was consumed later: reset the GPU and watch the bad-page count."),
}
_ECC_SETTINGS = {
    "ecc.mode": ("expected_ecc_enabled",),
}
_MEMORY_VERDICTS = {
    "memory.row_remap_pending": {F: ("reset", "GPUDIAG-MEMORY-REMAP-PENDING")},
    "memory.row_remap_failure": {F: ("rma", "GPUDIAG-MEMORY-REMAP-FAILURE"),
                                 W: ("watch", "GPUDIAG-MEMORY-REMAP-EXHAUSTED")},
    "memory.unrepairable": {F: ("rma", "GPUDIAG-MEMORY-UNREPAIRABLE")},
    "memory.retired_pages": {F: ("rma", "GPUDIAG-MEMORY-RETIRED-PAGES-LIMIT"),
                             W: ("watch", "GPUDIAG-MEMORY-RETIRED-PAGES")},
    "memory.bad_pages": {F: ("rma", "GPUDIAG-MEMORY-BAD-PAGES-LIMIT"), W: ("watch", "GPUDIAG-MEMORY-BAD-PAGES")},
}
_MEMORY_REFERENCE = {
    "memory.row_remap_pending": (
        "NVML row-remapping info: a remap waiting for a reset (Ampere and later)",
        "Drain the GPU and reset it (`nvidia-smi -r`) so that the remap takes effect."),
    "memory.row_remap_failure": (
        "NVML row-remapping failure flag and the banks' spare-row histogram",
        "A failed remap is an RMA criterion: drain and RMA the GPU. No spare rows left: plan the replacement."),
    "memory.unrepairable": (
        "the driver's unrepairable-memory flag (NVIDIA)",
        "The memory cannot be repaired in the field: drain and RMA the GPU."),
    "memory.retired_pages": (
        "NVML retired pages by cause and the pending flag (pre-Ampere)",
        "Reset the GPU for a pending retirement; at the fail count the GPU meets NVIDIA's RMA criterion."),
    "memory.bad_pages": (
        "AMD bad pages by state and the device's bad_page_threshold",
        "Near the threshold: plan the replacement; at it, the GPU is an RMA candidate (amdgpu stops reserving)."),
}
_MEMORY_SETTINGS = {
    "memory.retired_pages": ("retired_pages_warn_count", "retired_pages_fail_count"),
    "memory.bad_pages": ("bad_pages_warn_fraction", "max_bad_pages"),
}
ECC_FAMILY = Family(
    "ecc", order=40, checks=tuple(c for c in CHECKS if c.family == "ecc"),
    verdicts=_ECC_VERDICTS, reference=_ECC_REFERENCE,
    settings=_ECC_SETTINGS,
)
MEMORY_FAMILY = Family(
    "memory", order=45, checks=tuple(c for c in CHECKS if c.family == "memory"),
    verdicts=_MEMORY_VERDICTS, reference=_MEMORY_REFERENCE,
    settings=_MEMORY_SETTINGS,
)
FAMILIES = (ECC_FAMILY, MEMORY_FAMILY)
