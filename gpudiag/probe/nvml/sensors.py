"""NVML sensors of one GPU: temperatures and their thresholds, power and energy, clocks and clock-event
(throttle) reasons, utilisation. NVML reports °C, mW, mJ and MHz; the model wants °C, W, J and MHz."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from gpudiag.model import DeviceSnapshot, TemperatureSensor
from gpudiag.probe.nvml.call import ABSENT, FUNCTION_NOT_FOUND, NvmlCall
from gpudiag.probe.nvml.fields import Number

if TYPE_CHECKING:
    from gpudiag.probe.nvml.power_samples import PowerSamples

# Clock-event reason bits (nvmlClocksEventReason*, and the older nvmlClocksThrottleReason* names that alone define
# BoardLimit and Reliability; docs/vendor-api.md §8) → model.THROTTLE_REASONS names. A hardware thermal or
# power-brake slowdown also sets the generic HwSlowdown bit.
REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
PSTATE_UNKNOWN = 32  # NVML_PSTATE_UNKNOWN


def read_temperatures(call: NvmlCall, handle: Any, device: DeviceSnapshot, fields: dict[str, Number]) -> None:
    nvml = call.nvml

    def threshold(name: str) -> Optional[float]:
        return _float(call.constant(device, "nvmlDeviceGetTemperatureThreshold", handle, getattr(nvml, name)))

    gpu = TemperatureSensor(
        current_celsius=_float(call("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)),
        slowdown_celsius=threshold("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"),
        shutdown_celsius=threshold("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN"),
        max_operating_celsius=threshold("NVML_TEMPERATURE_THRESHOLD_GPU_MAX"),
    )
    # HBM temperature has no call of its own, only field NVML_FI_DEV_MEMORY_TEMP (docs/vendor-api.md §7).
    memory = TemperatureSensor(
        current_celsius=_float(fields.get("NVML_FI_DEV_MEMORY_TEMP")),
        max_operating_celsius=threshold("NVML_TEMPERATURE_THRESHOLD_MEM_MAX"),
    )
    for name, sensor in (("gpu", gpu), ("memory", memory)):
        if sensor != TemperatureSensor():
            device.temperatures[name] = sensor


def read_power(call: NvmlCall, handle: Any, device: DeviceSnapshot,
               samples: Optional["PowerSamples"] = None) -> None:
    """Draw and limits, and with `samples` (a collector that probes again and again) the mean of the driver's power
    samples since the previous probe (power_samples.py); the energy counter comes with the field batch (fields.py)."""
    power = device.power
    power.draw_watts = _milli(call("nvmlDeviceGetPowerUsage", handle))
    if samples is not None:
        samples.read(call, handle, device)
    power.limit_watts = _milli(call("nvmlDeviceGetEnforcedPowerLimit", handle))
    power.default_limit_watts = _milli(call("nvmlDeviceGetPowerManagementDefaultLimit", handle))
    constraints = call("nvmlDeviceGetPowerManagementLimitConstraints", handle)  # [min, max] in mW
    if constraints is not None:
        power.min_limit_watts, power.max_limit_watts = _milli(constraints[0]), _milli(constraints[1])


def read_clocks(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    nvml = call.nvml
    clocks = device.clocks
    mask = _clock_event_reasons(call, handle)
    if mask is not None:
        clocks.throttle_reasons_mask = int(mask)
        clocks.throttle_reasons = [name for bit, name in REASON_BITS if mask & bit]
    for attr, domain in (("graphics_mhz", "NVML_CLOCK_GRAPHICS"), ("sm_mhz", "NVML_CLOCK_SM"),
                         ("memory_mhz", "NVML_CLOCK_MEM")):
        setattr(clocks, attr, call("nvmlDeviceGetClockInfo", handle, getattr(nvml, domain)))
        maximum = call.constant(device, "nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, domain))
        setattr(clocks, f"max_{attr}", maximum)
    pstate = call("nvmlDeviceGetPerformanceState", handle)
    clocks.performance_state = None if pstate is None or pstate == PSTATE_UNKNOWN else pstate


def _clock_event_reasons(call: NvmlCall, handle: Any) -> Optional[int]:
    mask, code, message = call.attempt("nvmlDeviceGetCurrentClocksEventReasons", handle)
    if code == FUNCTION_NOT_FOUND:
        # Drivers before R535 only export the older name of the same call.
        return call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if code is not None and code not in ABSENT:
        call.record("nvml.nvmlDeviceGetCurrentClocksEventReasons", code, message)
    return mask


def read_utilization(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    rates = call("nvmlDeviceGetUtilizationRates", handle)
    if rates is not None:
        device.utilization.gpu_percent = int(rates.gpu)
        device.utilization.memory_percent = int(rates.memory)


def _float(value: Optional[Number]) -> Optional[float]:
    return None if value is None else float(value)


def _milli(value: Optional[Number]) -> Optional[float]:
    """mW → W."""
    return None if value is None else value / 1000.0
