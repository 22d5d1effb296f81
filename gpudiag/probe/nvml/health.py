"""What the NVIDIA driver itself says about a GPU's health, read into DeviceSnapshot.driver_health:

- the recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R550+; read in the field batch, no call of its
  own): the state behind Xid 154, which stays set after the log line has rotated away;
- the unrepairable-memory flag (nvmlDeviceGetUnrepairableMemoryFlag_v1);
- SRAM ECC counts and the field-diagnostic threshold flag (nvmlDeviceGetSramEccErrorStatus), and the DRAM share of
  the ECC counts (device-memory fields 22/23 in the same field batch), so that SRAM and DRAM errors are told apart;
- the NVSwitch fabric state (nvmlDeviceGetGpuFabricInfoV, falling back to older struct versions and to the
  unversioned nvmlDeviceGetGpuFabricInfo of R525–R535).

A driver or pynvml that lacks a function or struct leaves the value None (the check skips); it is not an error.
Enum values are spelled out from nvml.h (the same numbers pynvml exposes) so that an older pynvml still decodes them.
"""

from __future__ import annotations

from typing import Any, Optional

from gpudiag.model import DeviceSnapshot, DriverHealth, FabricInfo
from gpudiag.probe.nvml.call import ABSENT, FUNCTION_NOT_FOUND, SUCCESS, NvmlCall, code_name
from gpudiag.probe.nvml.codes import ARGUMENT_VERSION_MISMATCH
from gpudiag.probe.nvml.field_ids import DRAM_FIELDS, RECOVERY_ACTION_FIELD
from gpudiag.probe.nvml.frames import FABRIC_CALL, FABRIC_VERSIONS, SRAM_CALL, SRAM_STRUCT, UNVERSIONED_FABRIC

# nvmlGpuRecoveryAction_t (nvml.h; NVIDIA "GPU Memory Error Management", Error Recovery and Response Flags).
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}
# nvmlGpuFabricState_t and NVML_GPU_FABRIC_HEALTH_SUMMARY_* (0 = not supported: left None).
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
HEALTH_SUMMARIES = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
_TRUE_FALSE = {1: "true", 2: "false"}
# NVML_GPU_FABRIC_HEALTH_MASK_*: (name, shift, width mask, value → text); a value of 0 means "not supported".
HEALTH_MASK_FIELDS = (
    ("degraded_bandwidth", 0, 0x3, _TRUE_FALSE),
    ("route_recovery", 2, 0x3, _TRUE_FALSE),
    ("route_unhealthy", 4, 0x3, _TRUE_FALSE),
    ("access_timeout_recovery", 6, 0x3, _TRUE_FALSE),
    ("incorrect_configuration", 8, 0xF, {1: "none", 2: "incorrect_sysguid", 3: "incorrect_chassis_sn",
                                         4: "no_partition", 5: "insufficient_nvlinks", 6: "incompatible_gpu_fw",
                                         7: "invalid_location", 8: "gpu_state_invalid"}),
    ("partition_assigned", 12, 0x3, _TRUE_FALSE),
    ("gfm_state", 14, 0x3, {1: "connected", 2: "disconnected"}),
)
_SRAM_UNITS = {"l2": "aggregateUncBucketL2", "sm": "aggregateUncBucketSm", "pcie": "aggregateUncBucketPcie",
               "mcu": "aggregateUncBucketMcu", "other": "aggregateUncBucketOther"}


def read_driver_health(call: NvmlCall, handle: Any, device: DeviceSnapshot, fields: dict[str, Any]) -> None:
    health = device.driver_health = DriverHealth()
    action = fields.get(RECOVERY_ACTION_FIELD)
    if action is not None:
        health.recovery_action = RECOVERY_ACTIONS.get(int(action), f"unknown ({int(action)})")
    if hasattr(call.nvml, "nvmlDeviceGetUnrepairableMemoryFlag_v1"):
        flag = call("nvmlDeviceGetUnrepairableMemoryFlag_v1", handle)
        health.unrepairable_memory = None if flag is None else bool(flag)
    _read_sram(call, handle, device, health)
    if all(name in fields for name in DRAM_FIELDS):
        device.ecc.by_block["dram"] = {key: int(fields[name]) for name, key in DRAM_FIELDS.items()}
    health.fabric = read_fabric(call, handle)


def _read_sram(call: NvmlCall, handle: Any, device: DeviceSnapshot, health: DriverHealth) -> None:
    nvml = call.nvml
    struct, version = getattr(nvml, SRAM_STRUCT[0], None), getattr(nvml, SRAM_STRUCT[1], None)
    if struct is None or version is None or not hasattr(nvml, SRAM_CALL):
        return
    status = struct()
    status.version = version
    # nvml.byref: pynvml's (ctypes.byref), or the NVML-ahead stand-in's, which has no ctypes struct to pass
    if call(SRAM_CALL, handle, nvml.byref(status)) is None:
        return
    health.sram_volatile_uncorrected = int(status.volatileUncParity) + int(status.volatileUncSecDed)
    health.sram_aggregate_uncorrected = int(status.aggregateUncParity) + int(status.aggregateUncSecDed)
    health.sram_aggregate_corrected = int(status.aggregateCor)
    health.sram_uncorrected_by_unit = {unit: int(getattr(status, name)) for unit, name in _SRAM_UNITS.items()}
    health.sram_threshold_exceeded = bool(status.bThresholdExceeded)
    device.ecc.by_block["sram"] = {"corrected": health.sram_aggregate_corrected,
                                   "uncorrected": health.sram_aggregate_uncorrected}


def read_fabric(call: NvmlCall, handle: Any) -> Optional[FabricInfo]:
    """The GPU's fabric state, or None where the driver has no fabric call or the GPU does not support it."""
    nvml = call.nvml
    if hasattr(nvml, FABRIC_CALL):
        for struct_name, version_name in FABRIC_VERSIONS:
            struct, version = getattr(nvml, struct_name, None), getattr(nvml, version_name, None)
            if struct is None or version is None:
                continue
            info = struct()
            info.version = version
            _, code, message = call.attempt(FABRIC_CALL, handle, nvml.byref(info))
            if code is None:
                return _fabric(nvml, info)
            if code == ARGUMENT_VERSION_MISMATCH:
                continue  # an older driver: try the smaller struct
            if code == FUNCTION_NOT_FOUND:
                break  # R525–R535 have only the unversioned call
            if code not in ABSENT:
                call.record(f"nvml.{FABRIC_CALL}", code, message)
            return None
    function, struct_name = UNVERSIONED_FABRIC
    struct = getattr(nvml, struct_name, None)
    if struct is None or not hasattr(nvml, function):
        return None
    info = struct()
    if call(function, handle, nvml.byref(info)) is None:
        return None
    return _fabric(nvml, info)


def _fabric(nvml: Any, info: Any) -> FabricInfo:
    state = int(info.state)
    fabric = FabricInfo(state=FABRIC_STATES.get(state, f"unknown ({state})"))
    if state == 0:
        return fabric  # no NVSwitch fabric (PCIe card, a VM slice): the other fields carry nothing
    if fabric.state == "completed":  # NVML: the status "must be checked only if" the state is completed
        fabric.status_code = int(info.status)
        fabric.status = "success" if fabric.status_code == SUCCESS else code_name(nvml, fabric.status_code)
    fabric.clique_id = int(info.cliqueId)
    import uuid  # here: only a GPU in an NVLink domain has one (uuid imports platform)

    fabric.cluster_uuid = str(uuid.UUID(bytes=bytes(info.clusterUuid)))
    mask = getattr(info, "healthMask", None)  # struct v2+
    if mask is not None:
        fabric.health_mask = int(mask)
        fabric.health = decode_health_mask(int(mask))
    summary = int(getattr(info, "healthSummary", 0))  # struct v3+
    if summary:
        fabric.health_summary = HEALTH_SUMMARIES.get(summary, f"unknown ({summary})")
    return fabric


def decode_health_mask(mask: int) -> dict[str, str]:
    decoded = {}
    for name, shift, width, values in HEALTH_MASK_FIELDS:
        value = (mask >> shift) & width
        if value:
            decoded[name] = values.get(value, f"unknown ({value})")
    return decoded
