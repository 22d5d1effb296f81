"""Ask NVML every question gpudiag's probe asks, on a real node, and write down each answer (or error) and how
long it took. The fake NVML in tests/support/fakes is modelled on these answers; the timings show where probe time goes.

Usage: python3 tools/nvml_survey.py OUT.json
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

import pynvml as n


def ask(fn, *args):
    started = time.perf_counter()
    try:
        value = fn(*args)
        outcome = {"value": _plain(value)}
    except n.NVMLError as exc:
        outcome = {"error": type(exc).__name__, "code": exc.value}
    except Exception as exc:  # noqa: BLE001 - recorded, not hidden
        outcome = {"exception": f"{type(exc).__name__}: {exc}"}
    outcome["ms"] = round((time.perf_counter() - started) * 1000, 3)
    return outcome


def _plain(value):
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "_fields_"):
        return {name: _plain(getattr(value, name)) for name, *_ in value._fields_}
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        return [_plain(v) for v in value]
    return repr(value)


def device_questions(h):
    q = {
        "name": (n.nvmlDeviceGetName, h),
        "uuid": (n.nvmlDeviceGetUUID, h),
        "serial": (n.nvmlDeviceGetSerial, h),
        "index": (n.nvmlDeviceGetIndex, h),
        "minor": (n.nvmlDeviceGetMinorNumber, h),
        "arch": (n.nvmlDeviceGetArchitecture, h),
        "board_part": (n.nvmlDeviceGetBoardPartNumber, h),
        "pci": (n.nvmlDeviceGetPciInfo, h),
        "vbios": (n.nvmlDeviceGetVbiosVersion, h),
        "inforom_image": (n.nvmlDeviceGetInforomImageVersion, h),
        "pcie_curr_gen": (n.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "pcie_curr_width": (n.nvmlDeviceGetCurrPcieLinkWidth, h),
        "pcie_max_gen": (n.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "pcie_max_width": (n.nvmlDeviceGetMaxPcieLinkWidth, h),
        "pcie_gpu_max_gen": (n.nvmlDeviceGetGpuMaxPcieLinkGeneration, h),
        "pcie_speed": (n.nvmlDeviceGetPcieSpeed, h),
        "pcie_link_max_speed": (n.nvmlDeviceGetPcieLinkMaxSpeed, h),
        "pcie_replay": (n.nvmlDeviceGetPcieReplayCounter, h),
        "ecc_mode": (n.nvmlDeviceGetEccMode, h),
        "ecc_vol_corr": (n.nvmlDeviceGetTotalEccErrors, h, 0, 0),
        "ecc_vol_unc": (n.nvmlDeviceGetTotalEccErrors, h, 1, 0),
        "ecc_agg_corr": (n.nvmlDeviceGetTotalEccErrors, h, 0, 1),
        "ecc_agg_unc": (n.nvmlDeviceGetTotalEccErrors, h, 1, 1),
        "dram_vol_unc": (n.nvmlDeviceGetMemoryErrorCounter, h, 1, 0, 2),
        "remapped_rows": (n.nvmlDeviceGetRemappedRows, h),
        "remap_histogram": (n.nvmlDeviceGetRowRemapperHistogram, h),
        "retired_sbe": (n.nvmlDeviceGetRetiredPages, h, 0),
        "retired_dbe": (n.nvmlDeviceGetRetiredPages, h, 1),
        "retired_pending": (n.nvmlDeviceGetRetiredPagesPendingStatus, h),
        "temp_gpu": (n.nvmlDeviceGetTemperature, h, 0),
        "thr_shutdown": (n.nvmlDeviceGetTemperatureThreshold, h, 0),
        "thr_slowdown": (n.nvmlDeviceGetTemperatureThreshold, h, 1),
        "thr_mem_max": (n.nvmlDeviceGetTemperatureThreshold, h, 2),
        "thr_gpu_max": (n.nvmlDeviceGetTemperatureThreshold, h, 3),
        "power": (n.nvmlDeviceGetPowerUsage, h),
        "power_limit": (n.nvmlDeviceGetPowerManagementLimit, h),
        "power_enforced": (n.nvmlDeviceGetEnforcedPowerLimit, h),
        "power_default": (n.nvmlDeviceGetPowerManagementDefaultLimit, h),
        "power_constraints": (n.nvmlDeviceGetPowerManagementLimitConstraints, h),
        "energy": (n.nvmlDeviceGetTotalEnergyConsumption, h),
        "clock_reasons": (n.nvmlDeviceGetCurrentClocksEventReasons, h),
        "clock_reasons_supported": (n.nvmlDeviceGetSupportedClocksEventReasons, h),
        "clk_gr": (n.nvmlDeviceGetClockInfo, h, 0),
        "clk_sm": (n.nvmlDeviceGetClockInfo, h, 1),
        "clk_mem": (n.nvmlDeviceGetClockInfo, h, 2),
        "maxclk_gr": (n.nvmlDeviceGetMaxClockInfo, h, 0),
        "maxclk_sm": (n.nvmlDeviceGetMaxClockInfo, h, 1),
        "maxclk_mem": (n.nvmlDeviceGetMaxClockInfo, h, 2),
        "pstate": (n.nvmlDeviceGetPerformanceState, h),
        "persistence": (n.nvmlDeviceGetPersistenceMode, h),
        "compute_mode": (n.nvmlDeviceGetComputeMode, h),
        "mig_mode": (n.nvmlDeviceGetMigMode, h),
        "memory_v1": (n.nvmlDeviceGetMemoryInfo, h),
        "memory_v2": (n.nvmlDeviceGetMemoryInfo, h, n.nvmlMemory_v2),
        "bar1": (n.nvmlDeviceGetBAR1MemoryInfo, h),
        "util": (n.nvmlDeviceGetUtilizationRates, h),
        "numa": (n.nvmlDeviceGetNumaNodeId, h),
        "cpu_affinity": (n.nvmlDeviceGetCpuAffinity, h, 4),
        "compute_procs": (n.nvmlDeviceGetComputeRunningProcesses, h),
        "graphics_procs": (n.nvmlDeviceGetGraphicsRunningProcesses, h),
        "supported_events": (n.nvmlDeviceGetSupportedEventTypes, h),
        "fields_pcie": (
            lambda hh: [
                (f.fieldId, f.nvmlReturn, f.valueType, f.value.ullVal)
                for f in n.nvmlDeviceGetFieldValues(
                    hh,
                    [
                        82,
                        94,
                        95,
                        142,
                        143,
                        144,
                        145,
                        173,
                        174,
                        175,
                        176,
                        177,
                        178,
                        179,
                        180,
                        181,
                        182,
                        183,
                        185,
                        186,
                        230,
                    ],
                )
            ],
            h,
        ),
    }
    # What the driver itself says about the GPU's health (issue "No false healthy"): the NVSwitch fabric state, the
    # unrepairable-memory flag, SRAM ECC, and the throttle time counters (violation status and clock-event fields).
    q["fabric_v"] = (_fabric_info_v, h)
    q["fabric"] = (_fabric_info_v1, h)
    q["unrepairable_memory"] = (n.nvmlDeviceGetUnrepairableMemoryFlag_v1, h)
    q["sram_ecc_status"] = (_sram_ecc_status, h)
    q["sram_vol_unc"] = (n.nvmlDeviceGetMemoryErrorCounter, h, 1, 0, n.NVML_MEMORY_LOCATION_SRAM)
    q["sram_agg_unc"] = (n.nvmlDeviceGetMemoryErrorCounter, h, 1, 1, n.NVML_MEMORY_LOCATION_SRAM)
    q["dram_agg_unc"] = (n.nvmlDeviceGetMemoryErrorCounter, h, 1, 1, n.NVML_MEMORY_LOCATION_DRAM)
    for policy in range(12):
        q[f"violation_{policy}"] = (n.nvmlDeviceGetViolationStatus, h, policy)
    q["fields_health"] = (
        lambda hh: [
            (f.fieldId, f.nvmlReturn, f.valueType, f.value.ullVal)
            for f in n.nvmlDeviceGetFieldValues(hh, [74, 75, 76, 77, 78, 79, 80, 81, 169, 230, 269, 270, 271])
        ],
        h,
    )
    # Device-memory (DRAM) ECC fields the probe batches for the SRAM/DRAM split: SBE/DBE volatile, aggregate.
    q["fields_dram"] = (
        lambda hh: [
            (f.fieldId, f.nvmlReturn, f.valueType, f.value.ullVal)
            for f in n.nvmlDeviceGetFieldValues(hh, [11, 12, 22, 23])
        ],
        h,
    )
    for obj, name in ((0, "oem"), (1, "ecc"), (2, "power")):
        q[f"inforom_{name}"] = (n.nvmlDeviceGetInforomVersion, h, obj)
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        q[f"nvlink{link}_state"] = (n.nvmlDeviceGetNvLinkState, h, link)
    for link in range(2):
        q[f"nvlink{link}_version"] = (n.nvmlDeviceGetNvLinkVersion, h, link)
        q[f"nvlink{link}_remote_pci"] = (n.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        q[f"nvlink{link}_remote_type"] = (n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
        for counter in range(5):
            q[f"nvlink{link}_err{counter}"] = (n.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
    return q


def _fabric_info_v(h):
    info = n.c_nvmlGpuFabricInfo_v3_t()
    info.version = n.nvmlGpuFabricInfo_v3
    n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    return info


def _fabric_info_v1(h):
    """The unversioned R525 call, which the probe falls back to on drivers without nvmlDeviceGetGpuFabricInfoV."""
    info = n.c_nvmlGpuFabricInfo_t()
    n.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    return info


def _sram_ecc_status(h):
    status = n.c_nvmlEccSramErrorStatus_v1_t()
    status.version = n.nvmlEccSramErrorStatus_v1
    n.nvmlDeviceGetSramEccErrorStatus(h, ctypes.byref(status))
    return status


def main(path: str) -> None:
    t = time.perf_counter()
    n.nvmlInit()
    report = {"init_ms": round((time.perf_counter() - t) * 1000, 1), "pynvml_version": getattr(n, "__version__", None)}
    report["system"] = {
        "driver": ask(n.nvmlSystemGetDriverVersion), "cuda": ask(n.nvmlSystemGetCudaDriverVersion_v2),
        "nvml": ask(n.nvmlSystemGetNVMLVersion), "count": ask(n.nvmlDeviceGetCount),
        "max_links": n.NVML_NVLINK_MAX_LINKS,
    }
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    report["devices"] = []
    for h in handles:
        report["devices"].append({key: ask(*call) for key, call in device_questions(h).items()})
    report["pairs"] = {}
    for i, a in enumerate(handles):
        for j, b in enumerate(handles):
            if i < j:
                report["pairs"][f"{i}-{j}"] = {
                    "common_ancestor": ask(n.nvmlDeviceGetTopologyCommonAncestor, a, b),
                    **{f"p2p_{k}": ask(n.nvmlDeviceGetP2PStatus, a, b, k) for k in (0, 1, 2, 3, 4)},
                }
    t = time.perf_counter()
    n.nvmlShutdown()
    report["shutdown_ms"] = round((time.perf_counter() - t) * 1000, 1)
    with open(path, "w") as handle:
        json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
