"""Per-device C functions of the fake libnvidia-ml (see fake_nvml_lib). Each takes the FakeGpu the handle names,
then the C arguments that follow the handle, and answers an NVML return code."""

from __future__ import annotations

import functools
from typing import Any, Optional, Union

import pynvml

from tests.support.fakes.fake_nvml import FakeGpu
from tests.support.fakes.fake_nvml_lib import (
    INSUFFICIENT_SIZE,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    SUCCESS,
    FakeNvmlLib,
    c_symbol,
    fill_pci,
    put,
    put_text,
    target,
    value_of,
)

_NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE: usedGpuMemory unknown


# Functions that write one FakeGpu attribute through their one out-pointer: C symbol → attribute.
_SCALARS = {
    "nvmlDeviceGetArchitecture": "architecture",
    "nvmlDeviceGetMinorNumber": "minor_number",
    "nvmlDeviceGetCurrPcieLinkGeneration": "pcie_generation",
    "nvmlDeviceGetCurrPcieLinkWidth": "pcie_width",
    "nvmlDeviceGetMaxPcieLinkGeneration": "pcie_max_generation",
    "nvmlDeviceGetMaxPcieLinkWidth": "pcie_max_width",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": "pcie_gpu_max_generation",
    "nvmlDeviceGetPcieReplayCounter": "pcie_replays",
    "nvmlDeviceGetPowerUsage": "power_mw",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit_mw",
    "nvmlDeviceGetPowerManagementLimit": "power_limit_mw",
    "nvmlDeviceGetPowerManagementDefaultLimit": "power_default_limit_mw",
    "nvmlDeviceGetTotalEnergyConsumption": "energy_mj",
    "nvmlDeviceGetCurrentClocksEventReasons": "clock_event_reasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "clock_event_reasons",  # the name before R535
    "nvmlDeviceGetPerformanceState": "performance_state",
    "nvmlDeviceGetPersistenceMode": "persistence",
    "nvmlDeviceGetComputeMode": "compute_mode",
    "nvmlDeviceGetNumaNodeId": "numa_node",
}
# Functions that write one FakeGpu string into (buffer, size): C symbol → attribute.
_TEXTS = {
    "nvmlDeviceGetUUID": "uuid",
    "nvmlDeviceGetName": "name",
    "nvmlDeviceGetSerial": "serial",
    "nvmlDeviceGetBoardPartNumber": "board_part_number",
    "nvmlDeviceGetVbiosVersion": "vbios",
}


def _scalar(lib: FakeNvmlLib, gpu: FakeGpu, out: Any, *, attribute: str) -> int:
    return put(out, int(getattr(gpu, attribute)))


def _text(lib: FakeNvmlLib, gpu: FakeGpu, buffer: Any, size: Any, *, attribute: str) -> int:
    return put_text(buffer, size, getattr(gpu, attribute))


for _symbol, _attribute in _SCALARS.items():
    c_symbol("device", _symbol)(functools.partial(_scalar, attribute=_attribute))
for _symbol, _attribute in _TEXTS.items():
    c_symbol("device", _symbol)(functools.partial(_text, attribute=_attribute))


# -- identity and firmware --------------------------------------------------------------------------------------


@c_symbol()
def nvmlDeviceGetPciInfo_v3(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    return fill_pci(out, gpu.bus_id, gpu.pci_device_id, gpu.pci_subsystem_id)


_INFOROM_OBJECTS = {pynvml.NVML_INFOROM_OEM: "oem", pynvml.NVML_INFOROM_ECC: "ecc", pynvml.NVML_INFOROM_POWER: "power"}


@c_symbol()
def nvmlDeviceGetInforomVersion(lib: FakeNvmlLib, gpu: FakeGpu, obj: Any, buffer: Any, size: Any) -> int:
    name = _INFOROM_OBJECTS.get(value_of(obj))
    if name is None:
        return INVALID_ARGUMENT
    return put_text(buffer, size, gpu.inforom.get(name))


@c_symbol()
def nvmlDeviceGetInforomImageVersion(lib: FakeNvmlLib, gpu: FakeGpu, buffer: Any, size: Any) -> int:
    return put_text(buffer, size, gpu.inforom.get("image"))


# -- field values -------------------------------------------------------------------------------------------------

_UINT, _ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
_UNION_MEMBER = {_UINT: "uiVal", _ULL: "ullVal"}
_PCIE_COUNTER_FIELDS = set(range(pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS,
                                 pynvml.NVML_FI_DEV_PCIE_COUNT_LANE_ERROR + 1))
_PCIE_COUNTER_FIELDS.add(pynvml.NVML_FI_DEV_PCIE_L0_TO_RECOVERY_COUNTER)


def _field(gpu: FakeGpu, field_id: int) -> Union[int, tuple[int, int]]:
    """(value type, value) for a field the GPU has, else the per-field NVML return code."""
    if field_id in gpu.field_errors:
        return gpu.field_errors[field_id]
    f = pynvml
    table: dict[int, tuple[int, Optional[int]]] = {
        f.NVML_FI_DEV_ECC_CURRENT: (_UINT, int(gpu.ecc_enabled)),
        f.NVML_FI_DEV_ECC_PENDING: (_UINT, int(gpu.ecc_pending)),
        f.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (_ULL, gpu.ecc_volatile_corrected),
        f.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (_ULL, gpu.ecc_volatile_uncorrected),
        f.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (_ULL, gpu.ecc_aggregate_corrected),
        f.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (_ULL, gpu.ecc_aggregate_uncorrected),
        f.NVML_FI_DEV_MEMORY_TEMP: (_UINT, gpu.memory_temperature),
        f.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (_ULL, gpu.energy_mj),
        f.NVML_FI_DEV_NVLINK_LINK_COUNT: (_UINT, len(gpu.nvlinks) if gpu.nvlinks else None),
        f.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (_UINT, gpu.pcie_replays),
        f.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER: (_UINT, gpu.pcie_replay_rollovers),
        f.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (_UINT, gpu.health.recovery_action),
        f.NVML_FI_DEV_ECC_SBE_AGG_DEV: (_ULL, gpu.health.dram_corrected),
        f.NVML_FI_DEV_ECC_DBE_AGG_DEV: (_ULL, gpu.health.dram_uncorrected),
    }
    if gpu.row_remapping:
        table.update({
            f.NVML_FI_DEV_REMAPPED_COR: (_UINT, gpu.remapped_correctable),
            f.NVML_FI_DEV_REMAPPED_UNC: (_UINT, gpu.remapped_uncorrectable),
            f.NVML_FI_DEV_REMAPPED_PENDING: (_UINT, int(gpu.remap_pending)),
            f.NVML_FI_DEV_REMAPPED_FAILURE: (_UINT, int(gpu.remap_failure)),
        })
    if gpu.retired_pages is not None:
        single, double, pending = gpu.retired_pages
        table.update({
            f.NVML_FI_DEV_RETIRED_SBE: (_UINT, single),
            f.NVML_FI_DEV_RETIRED_DBE: (_UINT, double),
            f.NVML_FI_DEV_RETIRED_PENDING: (_UINT, int(pending)),
        })
    if field_id in _PCIE_COUNTER_FIELDS:
        return (_UINT, gpu.pcie_counters.get(field_id, 0))
    if field_id in gpu.throttle_ns:
        return (_ULL, gpu.throttle_ns[field_id])
    value_type, value = table.get(field_id, (_UINT, None))
    return NOT_SUPPORTED if value is None else (value_type, value)


@c_symbol()
def nvmlDeviceGetFieldValues(lib: FakeNvmlLib, gpu: FakeGpu, count: Any, values: Any) -> int:
    array = target(values)
    for i in range(value_of(count)):
        entry = array[i]
        entry.timestamp, entry.latencyUsec = 1_700_000_000_000_000, 3
        answer = _field(gpu, entry.fieldId)
        if isinstance(answer, int):
            entry.nvmlReturn = answer
            continue
        entry.valueType, entry.nvmlReturn = answer[0], SUCCESS
        setattr(entry.value, _UNION_MEMBER[answer[0]], answer[1])
    return SUCCESS


# -- ECC and memory health ----------------------------------------------------------------------------------------


@c_symbol()
def nvmlDeviceGetEccMode(lib: FakeNvmlLib, gpu: FakeGpu, current: Any, pending: Any) -> int:
    put(current, int(gpu.ecc_enabled))
    return put(pending, int(gpu.ecc_pending))


@c_symbol()
def nvmlDeviceGetRemappedRows(lib: FakeNvmlLib, gpu: FakeGpu, corr: Any, unc: Any, pending: Any, failure: Any) -> int:
    if not gpu.row_remapping:
        return NOT_SUPPORTED
    put(corr, gpu.remapped_correctable)
    put(unc, gpu.remapped_uncorrectable)
    put(pending, int(gpu.remap_pending))
    return put(failure, int(gpu.remap_failure))


@c_symbol()
def nvmlDeviceGetRowRemapperHistogram(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    if not gpu.row_remapping:
        return NOT_SUPPORTED
    histogram = target(out)
    histogram.max, histogram.high, histogram.partial, histogram.low, histogram.none = gpu.remap_histogram
    return SUCCESS


# -- temperature, power, clocks -----------------------------------------------------------------------------------


@c_symbol()
def nvmlDeviceGetTemperature(lib: FakeNvmlLib, gpu: FakeGpu, sensor: Any, out: Any) -> int:
    if value_of(sensor) != pynvml.NVML_TEMPERATURE_GPU:
        return INVALID_ARGUMENT
    return put(out, gpu.temperature)


@c_symbol()
def nvmlDeviceGetPowerManagementLimitConstraints(lib: FakeNvmlLib, gpu: FakeGpu, low: Any, high: Any) -> int:
    put(low, gpu.power_min_limit_mw)
    return put(high, gpu.power_max_limit_mw)


# c_nvmlValue_t member of each nvmlValueType_t
_VALUE_MEMBERS = {pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
                  pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal"}


@c_symbol()
def nvmlDeviceGetSamples(lib: FakeNvmlLib, gpu: FakeGpu, kind: Any, last_seen: Any, value_type: Any, count: Any,
                         samples: Any) -> int:
    """The samples newer than `last_seen` (µs), NOT_FOUND where there is none. Without an array (pynvml's first
    call) only their number and type; with one, as many as it holds. Power samples only: the other kinds
    (utilisation, clocks) are NOT_SUPPORTED here."""
    if value_of(kind) != pynvml.NVML_TOTAL_POWER_SAMPLES:
        return NOT_SUPPORTED
    newer = [(stamp, value) for stamp, value in gpu.power_samples if stamp > value_of(last_seen)]
    if not newer:
        return pynvml.NVML_ERROR_NOT_FOUND
    put(value_type, gpu.power_sample_type)
    if samples is None:
        return put(count, len(newer))
    array = target(samples)
    written = newer[:min(value_of(target(count)), len(array))]
    member = _VALUE_MEMBERS.get(gpu.power_sample_type, "uiVal")
    for position, (stamp, value) in enumerate(written):
        array[position].timeStamp = stamp
        setattr(array[position].sampleValue, member, value)
    return put(count, len(written))


def _keyed(lib: FakeNvmlLib, gpu: FakeGpu, key: Any, out: Any, *, attribute: str) -> int:
    """A value chosen by an enum argument (clock domain, threshold kind); a key the GPU lacks is NOT_SUPPORTED."""
    value = getattr(gpu, attribute).get(value_of(key))
    return NOT_SUPPORTED if value is None else put(out, value)


for _symbol, _attribute in (("nvmlDeviceGetClockInfo", "clocks"), ("nvmlDeviceGetMaxClockInfo", "max_clocks"),
                            ("nvmlDeviceGetTemperatureThreshold", "thresholds")):
    c_symbol("device", _symbol)(functools.partial(_keyed, attribute=_attribute))


@c_symbol()
def nvmlDeviceGetUtilizationRates(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    rates = target(out)
    rates.gpu, rates.memory = gpu.utilization
    return SUCCESS


# -- modes, memory ------------------------------------------------------------------------------------------------


@c_symbol()
def nvmlDeviceGetMigMode(lib: FakeNvmlLib, gpu: FakeGpu, current: Any, pending: Any) -> int:
    if gpu.mig is None:
        return NOT_SUPPORTED
    put(current, gpu.mig[0])
    return put(pending, gpu.mig[1])


@c_symbol()
def nvmlDeviceGetMemoryInfo(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    memory = target(out)
    used = gpu.memory_reserved + gpu.memory_used  # v1 counts the reserved part as used
    memory.total, memory.used, memory.free = gpu.memory_total, used, gpu.memory_total - used
    return SUCCESS


@c_symbol()
def nvmlDeviceGetMemoryInfo_v2(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    memory = target(out)
    if memory.version != pynvml.nvmlMemory_v2:
        return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    memory.total, memory.reserved, memory.used = gpu.memory_total, gpu.memory_reserved, gpu.memory_used
    memory.free = gpu.memory_total - gpu.memory_reserved - gpu.memory_used
    return SUCCESS


@c_symbol()
def nvmlDeviceGetBAR1MemoryInfo(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    bar1 = target(out)
    bar1.bar1Total, bar1.bar1Used, bar1.bar1Free = gpu.bar1_total, gpu.bar1_used, gpu.bar1_total - gpu.bar1_used
    return SUCCESS


# -- affinity and processes ---------------------------------------------------------------------------------------


@c_symbol()
def nvmlDeviceGetCpuAffinity(lib: FakeNvmlLib, gpu: FakeGpu, words: Any, out: Any) -> int:
    mask = target(out)
    size = value_of(words)
    for cpu in gpu.cpus:
        if cpu < size * 64:  # like NVML, report only what fits the caller's array
            mask[cpu // 64] |= 1 << (cpu % 64)
    return SUCCESS


def _processes(processes: list[tuple[int, Optional[int]]], count_ref: Any, array: Any) -> int:
    count = target(count_ref)
    if array is None or count.value < len(processes):
        count.value = len(processes)
        return INSUFFICIENT_SIZE if processes else SUCCESS
    for entry, (pid, used) in zip(array, processes):
        entry.pid = pid
        entry.usedGpuMemory = _NOT_AVAILABLE_ULL if used is None else used
        entry.gpuInstanceId = entry.computeInstanceId = 0xFFFFFFFF
    count.value = len(processes)
    return SUCCESS


@c_symbol()
def nvmlDeviceGetComputeRunningProcesses_v3(lib: FakeNvmlLib, gpu: FakeGpu, count: Any, array: Any) -> int:
    return _processes(gpu.compute_processes, count, array)


@c_symbol()
def nvmlDeviceGetGraphicsRunningProcesses_v3(lib: FakeNvmlLib, gpu: FakeGpu, count: Any, array: Any) -> int:
    return _processes(gpu.graphics_processes, count, array)


@c_symbol()
def nvmlDeviceGetMPSComputeRunningProcesses_v3(lib: FakeNvmlLib, gpu: FakeGpu, count: Any, array: Any) -> int:
    """The clients of an MPS server on the GPU (the server itself is in the compute list)."""
    return _processes(gpu.mps_processes, count, array)
