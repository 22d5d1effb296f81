"""thermal.*: temperatures against the device's own limits, and thermal throttling.

Sensors are whatever the probe named ("gpu", "memory" on NVIDIA; "edge", "hotspot", "vram", "hbm0".. on AMD); each
carries its own limits: slowdown (NVIDIA SLOWDOWN, AMD CRITICAL), shutdown (NVIDIA SHUTDOWN, AMD EMERGENCY) and max
operating (NVIDIA GPU_MAX / MEM_MAX).
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks import amd_throttle
from gpudiag.checks.common import (
    THROTTLE_TOPICS,
    device_check,
    not_available,
    passed,
    query_command,
    skipped,
    verdict,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import STATUS_SEVERITY, CheckResult, DeviceSnapshot, Status, TemperatureSensor

TEMPERATURE = "thermal.temperature"
THROTTLE = "thermal.throttle"

_TEMPERATURE_TOPICS = ("temp", "metrics")


def cooling_advice(device: DeviceSnapshot) -> str:
    return (f"Check the node's airflow: fan status and speed in the BMC, blanking panels, blocked or reversed air "
            f"paths, inlet temperature against the server's spec, and for a single hot GPU its heatsink seating. "
            f"Confirm with `{query_command(device, 'TEMPERATURE,PERFORMANCE', 'metric --temperature')}`.")


def judge_sensor(name: str, sensor: TemperatureSensor, margin: float) -> Optional[tuple[Status, str]]:
    """(status, finding) for one sensor, or None when it has no reading or no limit to compare with."""
    current = sensor.current_celsius
    if current is None:
        return None
    if sensor.shutdown_celsius is not None and current >= sensor.shutdown_celsius:
        return Status.FAIL, f"{name} {current:g}°C at/over its shutdown limit {sensor.shutdown_celsius:g}°C"
    # Without a slowdown limit (NVIDIA memory sensors), the max operating temperature is the line to hold.
    limit = sensor.slowdown_celsius if sensor.slowdown_celsius is not None else sensor.max_operating_celsius
    if limit is None:
        return None
    kind = "slowdown" if sensor.slowdown_celsius is not None else "max operating"
    if current >= limit:
        return Status.FAIL, f"{name} {current:g}°C at/over its {kind} limit {limit:g}°C"
    if current >= limit - margin:
        return Status.WARN, f"{name} {current:g}°C within {margin:g}°C of its {kind} limit {limit:g}°C"
    if sensor.max_operating_celsius is not None and current >= sensor.max_operating_celsius:
        return Status.WARN, (f"{name} {current:g}°C above its max operating temperature "
                             f"{sensor.max_operating_celsius:g}°C")
    return Status.PASS, f"{name} {current:g}°C"


def _temperature(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = TEMPERATURE
    if not any(s.current_celsius is not None for s in device.temperatures.values()):
        return not_available(check_id, device, "temperatures", _TEMPERATURE_TOPICS)
    findings = {name: judge_sensor(name, sensor, expect.thermal_warn_margin_celsius)
                for name, sensor in device.temperatures.items()}
    judged = {name: f for name, f in findings.items() if f is not None}
    observed = {name: s.current_celsius for name, s in device.temperatures.items()}
    if not judged:
        return skipped(check_id, device, f"{device.label} reports no temperature limits to compare with")
    expected = {name: {"slowdown": s.slowdown_celsius, "shutdown": s.shutdown_celsius,
                       "max_operating": s.max_operating_celsius, "warn_margin": expect.thermal_warn_margin_celsius}
                for name, s in device.temperatures.items() if name in judged}
    status = max((s for s, _ in judged.values()), key=STATUS_SEVERITY.__getitem__)
    if status == Status.PASS:
        message = f"{device.label}: " + ", ".join(text for _, text in judged.values())
    else:
        message = f"{device.label}: " + "; ".join(text for s, text in judged.values() if s == status)
    return verdict(check_id, status, device, message, observed=observed, expected=expected,
                   remediation=cooling_advice(device))


# Vendor-neutral throttle reasons (model.THROTTLE_REASONS) that are thermal, and how bad each is. Hardware
# slowdowns halve the clocks or more (NVML: HwThermalSlowdown, HwSlowdown); AMD PROCHOT is the hardware thermal
# throttle line. Software thermal slowdown and AMD's socket/VR/HBM thermal violations are the firmware holding a
# temperature target: real, but the GPU keeps running near its clocks.
THERMAL_REASONS = {
    "hw_thermal_slowdown": Status.FAIL,
    "prochot": Status.FAIL,
    "hw_slowdown": Status.FAIL,
    "sw_thermal_slowdown": Status.WARN,
    "socket_thermal": Status.WARN,
    "vr_thermal": Status.WARN,
    "hbm_thermal": Status.WARN,
}


def _throttle(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = THROTTLE
    reasons = device.clocks.throttle_reasons
    if reasons is None:
        return not_available(check_id, device, "throttle reasons", THROTTLE_TOPICS)
    active = [r for r in reasons if r in THERMAL_REASONS]
    # HwSlowdown is also raised by the external power brake; power.brake reports that case.
    if "hw_power_brake" in reasons and "hw_thermal_slowdown" not in reasons:
        active = [r for r in active if r != "hw_slowdown"]
    observed = {"active_reasons": reasons}
    if not active:
        return passed(check_id, device, f"{device.label}: no thermal throttling", observed=observed,
                      expected="no thermal throttle reason")
    evidence = amd_throttle.unbacked(device, active)  # AMD: a violation flag that nothing else bears out
    if evidence is not None:
        return passed(check_id, device, amd_throttle.quirk_message(device, evidence),
                      observed={**observed, **evidence, "quirk": "violation counters without throttling"},
                      expected="no thermal throttle reason, or one backed by temperature, power or held clocks")
    status = max((THERMAL_REASONS[r] for r in active), key=STATUS_SEVERITY.__getitem__)
    return verdict(check_id, status, device, f"{device.label} is thermally throttled: {', '.join(active)}",
                   observed=observed, expected="no thermal throttle reason",
                   remediation=(f"The GPU is shedding clocks to stay within its temperature limits; jobs on it run "
                                f"slower than on its peers. {cooling_advice(device)}"))


CHECKS = (
    device_check(TEMPERATURE, "every temperature sensor is clear of its slowdown/shutdown limits", _temperature),
    device_check(THROTTLE, "no thermal throttling (hardware slowdown fails, software slowdown warns)", _throttle),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "thermal.temperature": {F: ("drain", "GPUDIAG-THERMAL-LIMIT"), W: ("watch", "GPUDIAG-THERMAL-MARGIN")},
    "thermal.throttle": {F: ("drain", "GPUDIAG-THERMAL-HW-SLOWDOWN"), W: ("watch", "GPUDIAG-THERMAL-SW-SLOWDOWN")},
}
_REFERENCE = {
    "thermal.temperature": (
        "each temperature sensor and its slowdown / shutdown / maximum-operating thresholds",
        "Check the node's airflow: fans, blanking panels, inlet temperature, a blocked heatsink or cold plate."),
    "thermal.throttle": (
        "the active clock-throttle reasons (hardware and software thermal slowdown)",
        "Hardware slowdown: drain and fix cooling (or a failing sensor); software slowdown: watch the temperature."),
}
_SETTINGS = {
    "thermal.temperature": ("thermal_warn_margin_celsius",),
}
FAMILY = Family(
    "thermal", order=50, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
