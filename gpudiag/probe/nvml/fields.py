"""Counters read in one batch with nvmlDeviceGetFieldValues instead of one NVML call each.

Each field carries its own status (`nvmlReturn`, docs/vendor-api.md §9): one unsupported field does not spoil the
others. The batch holds the error counters and flags that have a field ID; values that have none (clocks, power
limits, thresholds) are read with their own calls elsewhere.
"""

from __future__ import annotations

from typing import Any, Union

from gpudiag.model import DeviceSnapshot
from gpudiag.probe.nvml.call import ABSENT, INVALID_ARGUMENT, SUCCESS, NvmlCall, code_name
from gpudiag.probe.nvml.field_ids import (  # noqa: F401 - DEVICE_FIELDS, device_fields: this module's to its users
    _FIXED_IDS,
    CLOCK_EVENT_TIME_FIELDS,
    DEVICE_FIELDS,
    FIELD_TARGETS,
    PCIE_ERROR_FIELDS,
    THROTTLE_TIME_FIELDS,
    batch,
    device_fields,
    field_value,
)

Number = Union[int, float]


def read_fields(call: NvmlCall, handle: Any, names: tuple[str, ...] = DEVICE_FIELDS) -> dict[str, Number]:
    """{pynvml field constant name: value} for the fields the device answered; absent fields are left out."""
    nvml = call.nvml
    names, ids = batch(nvml, names)
    values = call("nvmlDeviceGetFieldValues", handle, ids)
    if values is None:
        return {}
    found: dict[str, Number] = {}
    for name, value in zip(names, values):
        code = value.nvmlReturn
        if code == SUCCESS:
            number = field_value(value)
            if number is not None:
                found[name] = number
            continue
        call.raise_if_lost(f"nvmlDeviceGetFieldValues[{name}]", code)
        # A field ID newer than the driver comes back INVALID_ARGUMENT: as absent as NOT_SUPPORTED.
        if code not in ABSENT and code != INVALID_ARGUMENT:
            call.record(f"nvml.nvmlDeviceGetFieldValues[{name}]", code, f"{name}: {code_name(nvml, code)}")
    return found


def apply_fields(device: DeviceSnapshot, fields: dict[str, Number]) -> None:
    """Put the batch's counters and flags where they belong in the snapshot (absent fields stay None)."""
    for name, part, attribute, convert in FIELD_TARGETS:
        if name in fields:
            setattr(getattr(device, part), attribute, convert(fields[name]))
    device.pcie.error_counters = {key: int(fields[name]) for name, key in PCIE_ERROR_FIELDS.items() if name in fields}
    reasons = {**THROTTLE_TIME_FIELDS, **{name: reason for name, (reason, _) in CLOCK_EVENT_TIME_FIELDS.items()}}
    device.clocks.throttle_seconds = {reason: fields[name] / 1e9 for name, reason in reasons.items() if name in fields}
