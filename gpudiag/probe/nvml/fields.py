"""Counters read in one batch with nvmlDeviceGetFieldValues instead of one NVML call each.

Each field carries its own status (`nvmlReturn`, docs/vendor-api.md §9): one unsupported field does not spoil the
others. The batch holds the error counters and flags that have a field ID; values that have none (clocks, power
limits, thresholds) are read with their own calls elsewhere.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from gpudiag.model import DeviceSnapshot
from gpudiag.probe.nvml.call import ABSENT, INVALID_ARGUMENT, SUCCESS, NvmlCall, code_name
from gpudiag.probe.nvml.health import HEALTH_FIELDS

# PCIe link error counters (field IDs 173–183, NVML >= R525) → PcieInfo.error_counters keys.
PCIE_ERROR_FIELDS = {
    "NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS": "correctable_errors",
    "NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED": "nak_received",
    "NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR": "receiver_errors",
    "NVML_FI_DEV_PCIE_COUNT_BAD_TLP": "bad_tlp",
    "NVML_FI_DEV_PCIE_COUNT_NAKS_SENT": "nak_sent",
    "NVML_FI_DEV_PCIE_COUNT_BAD_DLLP": "bad_dllp",
    "NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR": "non_fatal_errors",
    "NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR": "fatal_errors",
    "NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ": "unsupported_requests",
    "NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR": "lcrc_errors",
    "NVML_FI_DEV_PCIE_COUNT_LANE_ERROR": "lane_errors",
    "NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER": "l0_to_recovery",
}

# Fields that land on one DeviceSnapshot attribute: (field, part of the snapshot, attribute, conversion).
# ECC: "single bit" (SBE) is NVML's name for corrected, "double bit" (DBE) for uncorrected errors. Page retirement
# (pre-Ampere) and row remapping (Ampere+; the four values nvmlDeviceGetRemappedRows returns) are each NOT_SUPPORTED
# on the other generation.
FIELD_TARGETS = (
    ("NVML_FI_DEV_ECC_CURRENT", "ecc", "enabled", bool),
    ("NVML_FI_DEV_ECC_PENDING", "ecc", "pending_enabled", bool),
    ("NVML_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc", "volatile_corrected", int),
    ("NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc", "volatile_uncorrected", int),
    ("NVML_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc", "aggregate_corrected", int),
    ("NVML_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc", "aggregate_uncorrected", int),
    ("NVML_FI_DEV_RETIRED_SBE", "memory_health", "retired_pages_single_bit", int),
    ("NVML_FI_DEV_RETIRED_DBE", "memory_health", "retired_pages_double_bit", int),
    ("NVML_FI_DEV_RETIRED_PENDING", "memory_health", "retired_pages_pending", bool),
    ("NVML_FI_DEV_REMAPPED_COR", "memory_health", "remapped_rows_correctable", int),
    ("NVML_FI_DEV_REMAPPED_UNC", "memory_health", "remapped_rows_uncorrectable", int),
    ("NVML_FI_DEV_REMAPPED_PENDING", "memory_health", "remap_pending", bool),
    ("NVML_FI_DEV_REMAPPED_FAILURE", "memory_health", "remap_failure", bool),
    ("NVML_FI_DEV_PCIE_REPLAY_COUNTER", "pcie", "replay_count", int),
    ("NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER", "pcie", "replay_rollover_count", int),
    ("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "power", "energy_joules", lambda millijoules: millijoules / 1000.0),
)

# Time throttled since the driver loaded, in ns (nvmlViolationTime_t.violationTime "in Nanoseconds",
# https://docs.nvidia.com/deploy/nvml-api/structnvmlViolationTime__t.html) → ClockInfo.throttle_seconds reasons.
# Fields 74-81 are the perf-policy counters that nvmlDeviceGetViolationStatus returns for policies 0-5, 10 and 11:
# asked here in the batch that is read anyway, they cost no NVML call, where the violation status costs one call
# (~1 ms on the lab's H200) per policy. The lab's H200 (driver 580.159.04) answered both the same within the
# driver's sampling (low utilisation: 23.75 s by the call, 23.68 s by field 78; tests/fixtures/h200/
# nvml-health-survey.json). 74 and 76 are also NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP / _SYNC_BOOST, the
# counters `nvidia-smi -q` prints under "Clocks Event Reasons Counters".
THROTTLE_TIME_FIELDS = {
    "NVML_FI_DEV_PERF_POLICY_POWER": "sw_power_cap",
    "NVML_FI_DEV_PERF_POLICY_THERMAL": "thermal",
    "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST": "sync_boost",
    "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT": "board_limit",
    "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION": "low_utilization",
    "NVML_FI_DEV_PERF_POLICY_RELIABILITY": "reliability",
    "NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS": "below_application_clocks",
    "NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS": "below_base_clocks",
}
# The other clock-event counters of `nvidia-smi -q`, by the IDs of the R580 nvml.h (nvidia-ml-py 13.580+), which
# the lab's H200 answered on driver 580.159.04. Earlier headers numbered them 251-253, where R580 has power-smoothing
# fields, and 269-271 were power-smoothing fields there: so the IDs are fixed here rather than taken from whatever
# nvidia-ml-py is installed, and asked only of drivers from R580 on (CLOCK_EVENT_TIME_DRIVER).
CLOCK_EVENT_TIME_FIELDS = {
    "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN": ("sw_thermal_slowdown", 269),
    "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN": ("hw_thermal_slowdown", 270),
    "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN": ("hw_power_brake", 271),
}
CLOCK_EVENT_TIME_DRIVER = 580
_FIXED_IDS = {name: field_id for name, (_, field_id) in CLOCK_EVENT_TIME_FIELDS.items()}

DEVICE_FIELDS = (
    *(name for name, *_ in FIELD_TARGETS),
    *PCIE_ERROR_FIELDS,
    "NVML_FI_DEV_MEMORY_TEMP",  # °C (HBM); a sensor of its own, see sensors.py
    "NVML_FI_DEV_NVLINK_LINK_COUNT",  # how many NVLinks to walk; NOT_SUPPORTED on GPUs without NVLink
    *HEALTH_FIELDS,  # the driver's recovery action and the DRAM share of ECC (health.py)
    *THROTTLE_TIME_FIELDS,
)


def device_fields(driver_version: Optional[str]) -> tuple[str, ...]:
    """The batch for a driver: the clock-event time fields only where their IDs mean them (R580 on)."""
    try:
        major = int((driver_version or "").split(".")[0])
    except ValueError:
        major = 0
    return DEVICE_FIELDS + tuple(CLOCK_EVENT_TIME_FIELDS) if major >= CLOCK_EVENT_TIME_DRIVER else DEVICE_FIELDS

# nvmlValueType_t → the member of the nvmlValue_t union that holds the value (docs/vendor-api.md §9).
_UNION_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

Number = Union[int, float]


def read_fields(call: NvmlCall, handle: Any, names: tuple[str, ...] = DEVICE_FIELDS) -> dict[str, Number]:
    """{pynvml field constant name: value} for the fields the device answered; absent fields are left out."""
    nvml = call.nvml
    # An older pynvml lacks the newest field IDs: those are left out unless their ID is fixed here.
    names = tuple(name for name in names if name in _FIXED_IDS or hasattr(nvml, name))
    values = call("nvmlDeviceGetFieldValues", handle, [_FIXED_IDS.get(name) or getattr(nvml, name) for name in names])
    if values is None:
        return {}
    found: dict[str, Number] = {}
    for name, value in zip(names, values):
        code = value.nvmlReturn
        if code == SUCCESS:
            member = _UNION_MEMBER.get(value.valueType)
            if member is not None:
                found[name] = getattr(value.value, member)
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
