"""Whether an AMD GPU's reported thermal throttling is backed by what throttling means (thermal.throttle).

amdsmi's violation status (amdsmi_get_violation_status) derives its `active_*` flags from the firmware's residency
accumulators: per = Δresidency × 100 / Δaccumulation_counter over two gpu_metrics reads 100 ms apart, active = per > 0
(amd_smi.cc). A firmware whose residency counters advance with the accumulation counter makes every such flag read
100 % at idle: issue 21 met it on idle MI300X with amdgpu DKMS 6.10.5 (thermal violations at 42 °C on every GPU);
AMD's own amd_smi_lib 7.0 changelog shows an idle MI300X whose TOTAL_GFX_CLK_BELOW_HOST_LIMIT and LOW_UTILIZATION
accumulators equal the accumulation counter (100 %, ACTIVE), and ROCm/rocm-systems#11781 a Radeon AI PRO R9700 that
reports THROTTLED at 37 °C and 1 W because its firmware keeps one throttler bit set. A flag alone is therefore not
taken for throttling: the GPU must also be hot (a sensor within TEMPERATURE_MARGIN_CELSIUS of its slowdown limit),
at its power limit, or busy with its graphics clock held below its maximum. When the readings say none of that, the
verdict names the quirk instead of warning. When they cannot say (no temperature or no power reading), the flag
stands: what cannot be seen is not excused.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.model import DeviceSnapshot, Vendor

# Throttling starts at the slowdown (CRITICAL) limit; firmware thermal targets sit a little below it.
TEMPERATURE_MARGIN_CELSIUS = 15.0
POWER_AT_LIMIT_RATIO = 0.90  # drawing this share of the limit or more: the power controller may be holding clocks
BUSY_PERCENT = 50  # busy enough that a graphics clock below its maximum means clocks held down
CLOCK_HELD_RATIO = 0.90
# The quirk's own signature in the counters: the residency of a reason equals the accumulation counter.
QUIRK_RESIDENCY_SHARE = 0.999


def _hot(device: DeviceSnapshot) -> Optional[bool]:
    readings = [(s.current_celsius, s.slowdown_celsius) for s in device.temperatures.values()
                if s.current_celsius is not None and s.slowdown_celsius is not None]
    if not readings:
        return None
    return any(current >= limit - TEMPERATURE_MARGIN_CELSIUS for current, limit in readings)


def _at_power_limit(device: DeviceSnapshot) -> Optional[bool]:
    power = device.power
    if power.draw_watts is None or not power.limit_watts:
        return None
    return power.draw_watts >= POWER_AT_LIMIT_RATIO * power.limit_watts


def _clocks_held(device: DeviceSnapshot) -> bool:
    busy, clocks = device.utilization.gpu_percent, device.clocks
    if busy is None or busy < BUSY_PERCENT or clocks.graphics_mhz is None or not clocks.max_graphics_mhz:
        return False
    return clocks.graphics_mhz < CLOCK_HELD_RATIO * clocks.max_graphics_mhz


def residency_shares(device: DeviceSnapshot, reasons: list[str]) -> dict[str, float]:
    """Residency ÷ accumulation counter since the driver loaded, for the reasons that have both."""
    total = device.clocks.throttle_accumulation
    if not total:
        return {}
    return {r: round(device.clocks.throttle_residency[r] / total, 4)
            for r in reasons if r in device.clocks.throttle_residency}


def unbacked(device: DeviceSnapshot, reasons: list[str]) -> Optional[dict]:
    """For an AMD GPU whose violation status names `reasons`: the evidence that nothing throttles it (what the
    verdict then reports), or None when the reasons stand (the GPU is hot, at its power limit or held down while
    busy, the readings are missing, or it is not an AMD GPU)."""
    if device.vendor != Vendor.AMD or not reasons:
        return None
    hot, at_limit = _hot(device), _at_power_limit(device)
    if hot is None or at_limit is None or hot or at_limit or _clocks_held(device):
        return None
    sensor, hottest = max(((name, s) for name, s in device.temperatures.items()
                           if s.current_celsius is not None and s.slowdown_celsius),
                          key=lambda item: item[1].current_celsius - item[1].slowdown_celsius)
    return {
        "reported_reasons": reasons, "closest_sensor": sensor,
        "hottest_celsius": hottest.current_celsius, "slowdown_celsius": hottest.slowdown_celsius,
        "draw_watts": device.power.draw_watts, "limit_watts": device.power.limit_watts,
        "gpu_busy_percent": device.utilization.gpu_percent, "graphics_mhz": device.clocks.graphics_mhz,
        "max_graphics_mhz": device.clocks.max_graphics_mhz,
        "residency_share": residency_shares(device, reasons),
    }


def quirk_message(device: DeviceSnapshot, evidence: dict) -> str:
    shares = evidence["residency_share"]
    counted = [r for r, share in shares.items() if share >= QUIRK_RESIDENCY_SHARE]
    counters = (f"; its residency counters for {', '.join(counted)} equal the accumulation counter (every tick "
                f"since the driver loaded counted as throttled)" if counted else "")
    busy = evidence["gpu_busy_percent"]
    return (f"{device.label}: the violation status reports {', '.join(evidence['reported_reasons'])}, but nothing "
            f"throttles the GPU: {evidence['closest_sensor']} {evidence['hottest_celsius']:g}°C of its "
            f"{evidence['slowdown_celsius']:g}°C slowdown limit, {evidence['draw_watts']:g} W of "
            f"{evidence['limit_watts']:g} W"
            + (f", {busy}% busy" if busy is not None else "") + counters
            + " — the firmware's violation counters, not throttling (amdsmi reads 100 %); not judged as throttled")
