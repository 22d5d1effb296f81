"""power.*: power brake, power limits, and draw against the limit.

Running at the power limit under load is normal: the GPU boosts until it meets the cap (NVML SwPowerCap, AMD PPT).
That is never a failure here; a limit set below the default, a hardware power brake, or a draw the controller does
not hold are.
"""

from __future__ import annotations

from gpudiag.checks.common import (
    THROTTLE_TOPICS,
    device_check,
    failed,
    not_available,
    passed,
    query_command,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, Status, Vendor

BRAKE = "power.brake"
LIMIT = "power.limit"
DRAW = "power.draw"

_POWER_TOPICS = ("power", "energy", "metrics")


def _power_query(device: DeviceSnapshot) -> str:
    return query_command(device, "POWER,PERFORMANCE", "metric --power")


def _brake(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = BRAKE
    reasons = device.clocks.throttle_reasons
    if reasons is None:
        return not_available(check_id, device, "throttle reasons", THROTTLE_TOPICS)
    observed = {"active_reasons": reasons}
    if "hw_power_brake" in reasons:
        return failed(check_id, device, f"{device.label}: hardware power brake is asserted, clocks are cut",
                      observed=observed, expected="no power brake",
                      remediation=("The system asserted the GPU's external power-brake signal: a PSU failed or lost "
                                   "redundancy, or the chassis is over its power budget. Check PSU health and "
                                   "redundancy in the BMC event log, the power-brake/sideband cable to the GPU "
                                   "baseboard, and the power-capping policy of the BMC. Confirm with "
                                   f"`{_power_query(device)}` (HW Power Brake Slowdown: Active)."))
    return passed(check_id, device, f"{device.label}: no power brake", observed=observed, expected="no power brake")


def _set_limit_command(device: DeviceSnapshot, watts: float) -> str:
    if device.vendor == Vendor.NVIDIA:
        return f"nvidia-smi -i {device.index} -pl {watts:g}"
    return f"amd-smi set -g {device.index} --power-cap {watts:g}"


def _limit_against_profile(device: DeviceSnapshot, wanted: float, tolerance: float) -> CheckResult:
    """The profile names the limit (the SKU's board power, or the site's cap): anything else is drift."""
    power = device.power
    if power.limit_watts is None:
        return not_available(LIMIT, device, "power limit", _POWER_TOPICS)
    observed = {"limit_watts": power.limit_watts, "default_limit_watts": power.default_limit_watts,
                "max_limit_watts": power.max_limit_watts}
    expected = f"{wanted:g} W ± {tolerance:g} W"
    if abs(power.limit_watts - wanted) <= tolerance:
        return passed(LIMIT, device, f"{device.label}: power limit {power.limit_watts:g} W", observed=observed,
                      expected=expected)
    if power.max_limit_watts is not None and wanted > power.max_limit_watts + tolerance:
        fix = (f"The GPU cannot be set that high (its maximum is {power.max_limit_watts:g} W): it is another SKU or "
               f"board than the profile describes, or its VBIOS caps it; check inventory.gpu_model and the VBIOS.")
    else:
        fix = (f"Set it with `{_set_limit_command(device, wanted)}` (not persistent across reboots: find the script "
               f"or BMC policy that set {power.limit_watts:g} W, and persist the right value the way the site does).")
    return failed(LIMIT, device, f"{device.label}: power limit {power.limit_watts:g} W, expected {expected}",
                  observed=observed, expected=expected,
                  remediation=f"{fix} Confirm with `{_power_query(device)}`.")


def _limit(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = LIMIT
    power = device.power
    if expect.expected_power_limit_watts is not None:
        return _limit_against_profile(device, expect.expected_power_limit_watts, expect.power_limit_tolerance_watts)
    if power.limit_watts is None or power.default_limit_watts is None:
        return not_available(check_id, device, "power limit and default limit", _POWER_TOPICS)
    observed = {"limit_watts": power.limit_watts, "default_limit_watts": power.default_limit_watts}
    floor = power.default_limit_watts * expect.power_limit_warn_ratio
    expected = f">= {floor:g} W ({expect.power_limit_warn_ratio:.0%} of the default {power.default_limit_watts:g} W)"
    if power.limit_watts < floor:
        restore = _set_limit_command(device, power.default_limit_watts)
        return warned(check_id, device, f"{device.label}: power limit {power.limit_watts:g} W is below the default "
                                        f"{power.default_limit_watts:g} W",
                      observed=observed, expected=expected,
                      remediation=(f"Someone capped this GPU, so it runs slower than its peers. If that was not "
                                   f"intended, restore the default: `{restore}` (not persistent across reboots; look "
                                   f"for the script or BMC policy that set it). Confirm with "
                                   f"`{_power_query(device)}`."))
    return passed(check_id, device, f"{device.label}: power limit {power.limit_watts:g} W", observed=observed,
                  expected=expected)


def _draw(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = DRAW
    power = device.power
    if power.draw_watts is None or power.limit_watts is None:
        return not_available(check_id, device, "power draw and limit", _POWER_TOPICS)
    reasons = device.clocks.throttle_reasons or []
    capped = any(r in reasons for r in ("sw_power_cap", "ppt_power"))
    observed = {"draw_watts": power.draw_watts, "limit_watts": power.limit_watts, "power_capped": capped}
    ceiling = power.limit_watts * expect.power_over_limit_warn_ratio
    expected = f"<= {ceiling:g} W ({expect.power_over_limit_warn_ratio:.0%} of the limit)"
    if power.draw_watts > ceiling:
        return warned(check_id, device,
                      f"{device.label} draws {power.draw_watts:g} W, over its {power.limit_watts:g} W limit",
                      observed=observed, expected=expected,
                      remediation=("The power controller is not holding the limit, or the power sensor reads wrong. "
                                   "Update the VBIOS/firmware, compare with the BMC's reading of the GPU's power, and "
                                   f"open a support case if it persists. Confirm with `{_power_query(device)}`."))
    note = " (power-capped at its limit: normal under load)" if capped else ""
    return passed(check_id, device, f"{device.label} draws {power.draw_watts:g} W of {power.limit_watts:g} W{note}",
                  observed=observed, expected=expected)


CHECKS = (
    device_check(BRAKE, "no hardware power brake asserted", _brake),
    device_check(LIMIT, "the enforced power limit is the profile's, or not below the default", _limit),
    device_check(DRAW, "power draw is held at or below the limit", _draw),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "power.brake": {F: ("drain", "GPUDIAG-POWER-BRAKE")},
    "power.limit": {F: ("drain", "GPUDIAG-POWER-LIMIT-UNEXPECTED"), W: ("watch", "GPUDIAG-POWER-LIMIT-CAPPED")},
    "power.draw": {W: ("watch", "GPUDIAG-POWER-OVER-LIMIT")},
}
_REFERENCE = {
    "power.brake": (
        "the hardware power-brake throttle reason (an external signal from the chassis or PSU)",
        "The chassis asserts the power brake: check the PSUs, the power budget and the BMC's event log.",
    ),
    "power.limit": (
        "the enforced and default power limits",
        "Restore the limit (`nvidia-smi -pl`, `amd-smi set --power-cap`) or find who capped it (a BMC or DCGM policy).",
    ),
    "power.draw": (
        "power draw against the enforced limit",
        "The controller is not holding the limit, or the sensor is wrong: compare with the BMC's reading.",
    ),
}
_SETTINGS = {
    "power.limit": ("expected_power_limit_watts", "power_limit_tolerance_watts", "power_limit_warn_ratio"),
    "power.draw": ("power_over_limit_warn_ratio",),
}
FAMILY = Family(
    "power", order=60, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
