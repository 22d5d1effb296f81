"""Counters read in one batch with nvmlDeviceGetFieldValues instead of one NVML call each.

Each field carries its own status (`nvmlReturn`, vendor-api.md §9): one unsupported field does not spoil the
others. The batch holds the error counters and flags that have a field ID; values that have none (clocks, power
limits, thresholds) are read with their own calls elsewhere.
"""

from __future__ import annotations

from typing import Any, Union

from gpudiag.model import DeviceSnapshot
from gpudiag.probe.nvml_call import ABSENT, INVALID_ARGUMENT, SUCCESS, NvmlCall, code_name
from gpudiag.probe.nvml_health import HEALTH_FIELDS

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

DEVICE_FIELDS = (
    *(name for name, *_ in FIELD_TARGETS),
    *PCIE_ERROR_FIELDS,
    "NVML_FI_DEV_MEMORY_TEMP",  # °C (HBM); a sensor of its own, see nvml_sensors
    "NVML_FI_DEV_NVLINK_LINK_COUNT",  # how many NVLinks to walk; NOT_SUPPORTED on GPUs without NVLink
    *HEALTH_FIELDS,  # the driver's recovery action and the DRAM share of ECC (nvml_health)
)

# nvmlValueType_t → the member of the nvmlValue_t union that holds the value (vendor-api.md §9).
_UNION_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

Number = Union[int, float]


def read_fields(call: NvmlCall, handle: Any, names: tuple[str, ...] = DEVICE_FIELDS) -> dict[str, Number]:
    """{pynvml field constant name: value} for the fields the device answered; absent fields are left out."""
    nvml = call.nvml
    names = tuple(name for name in names if hasattr(nvml, name))  # an older pynvml lacks the newest field IDs
    values = call("nvmlDeviceGetFieldValues", handle, [getattr(nvml, name) for name in names])
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
