"""The field IDs of a GPU's one nvmlDeviceGetFieldValues batch, by name, and how an answered field's number is read:
what fields.py reads the batch with and the NVML-ahead process (ahead.py) asks the same batch with. Nothing here
imports the model or pynvml, so that the ahead process can ask the batch before either is imported.
"""

from __future__ import annotations

# The driver's recovery action and the DRAM share of ECC, read for health.py.
RECOVERY_ACTION_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
DRAM_FIELDS = {"NVML_FI_DEV_ECC_SBE_AGG_DEV": "corrected", "NVML_FI_DEV_ECC_DBE_AGG_DEV": "uncorrected"}
HEALTH_FIELDS = (RECOVERY_ACTION_FIELD, *DRAM_FIELDS)  # joined to the device's one nvmlDeviceGetFieldValues batch

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


def device_fields(driver_version: str | None) -> tuple[str, ...]:
    """The batch for a driver: the clock-event time fields only where their IDs mean them (R580 on)."""
    try:
        major = int((driver_version or "").split(".")[0])
    except ValueError:
        major = 0
    return DEVICE_FIELDS + tuple(CLOCK_EVENT_TIME_FIELDS) if major >= CLOCK_EVENT_TIME_DRIVER else DEVICE_FIELDS


def batch(nvml: object, names: tuple[str, ...]) -> tuple[tuple[str, ...], list[int]]:
    """The fields of `names` this pynvml can ask for, and their IDs: an older pynvml lacks the newest field IDs,
    which are left out unless their ID is fixed here."""
    names = tuple(name for name in names if name in _FIXED_IDS or hasattr(nvml, name))
    return names, [_FIXED_IDS.get(name) or getattr(nvml, name) for name in names]


# nvmlValueType_t → the member of the nvmlValue_t union that holds the value (docs/vendor-api.md §9).
_UNION_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(value: object) -> int | float | None:
    """An answered field's number (a c_nvmlFieldValue_t whose nvmlReturn is SUCCESS); None for a value type this
    does not know."""
    member = _UNION_MEMBER.get(value.valueType)
    return None if member is None else getattr(value.value, member)
