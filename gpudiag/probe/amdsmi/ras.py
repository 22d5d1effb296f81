"""RAS through amdsmi: ECC mode and counts, bad pages, XGMI health, as real MI300X/MI325X/MI355X nodes answer.

The quirks, each from a public report or the amdgpu / rocm-smi-lib sources:
- ECC mode: amdsmi_get_gpu_ecc_enabled reads amdgpu's `ras/features` mask. With RAS switched off
  (amdgpu.ras_enable=0) the file is absent and the call answers NOT_SUPPORTED; a mask of 0 answers API_FAILED (7).
  On a part that has RAS, both mean "ECC off", not "cannot tell".
- ECC counts: while RAS is not ready or a GPU reset runs, amdgpu's `ras/<blk>_err_count` reads `Query currently
  inaccessible`; rocm-smi-lib turns that into NOT_SUPPORTED for the block, and amdsmi_get_gpu_total_ecc_count sums
  the blocks that answered and still returns SUCCESS. So the blocks that did not answer are listed
  (EccInfo.unreadable_blocks): a total over part of the blocks is not a clean bill.
- XGMI error status: amdgpu's `xgmi_error` needs DF FICA access that DF 4.x (MI300, MI350) does not provide, so the
  read fails with EINVAL and amdsmi_gpu_xgmi_error_status answers AMDSMI_STATUS_INVAL on every healthy gfx942 /
  gfx950 GPU (ROCm/rocm-systems#11468, where RDC had the same blind spot). XGMI health is then the XGMI_WAFL RAS
  block's counts (read with the other blocks above); xgmi_error stays in use where it works (MI200, DF 3.6).
- XGMI link status comes from gpu_metrics `xgmi_link_status`, which exists only from gpu_metrics v1.7: with older
  drivers amdsmi 7.0 reports every link as "X" (disabled), newer amdsmi answers NOT_SUPPORTED
  (ROCm/rocm-systems PR 2053), and an SR-IOV VF answers UNEXPECTED_DATA. None of these says a link is down.
- Bad-page threshold: amdsmi reads it from debugfs, which only root can read (and containers rarely mount), so it
  answers NOT_SUPPORTED or NO_PERM otherwise. VFs have no bad-page retirement of their own
  (amdgpu_ras_recovery_init returns early for an SR-IOV VF, amdgpu_ras.c).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

from gpudiag.model import DeviceSnapshot, GpuLink
from gpudiag.probe.amdgpu.ras_threshold import BY_ARCHITECTURE
from gpudiag.probe.amdsmi.calls import (
    STATUS_API_FAILED,
    STATUS_INVAL,
    STATUS_NO_PERM,
    STATUS_NOT_SUPPORTED,
    STATUS_NOT_YET_IMPLEMENTED,
    STATUS_UNEXPECTED_DATA,
    AmdsmiCaller,
    get,
    integer,
)

_UNSUPPORTED = (STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED)
_XGMI_LINK_UP = {"U": True, "D": False}  # "X" = disabled by configuration, "N/A" = unknown: not listed
_XGMI_ERROR_STATUS = {0: "no_errors", 1: "error", 2: "multiple_errors"}

# The bad-page threshold amdgpu applies by default, by architecture, until the collector refines it per part from the
# GPU's MP0 version (probe/amdgpu/ras_threshold.py: 128 on MP0 13.0.6 / 13.0.12, 256 on 13.0.14).
DEFAULT_BAD_PAGE_THRESHOLD = BY_ARCHITECTURE

ECC_ENABLED = "amdsmi.amdsmi_get_gpu_ecc_enabled"
XGMI_ERROR = "amdsmi.amdsmi_gpu_xgmi_error_status"
XGMI_LINKS = "amdsmi.amdsmi_get_gpu_xgmi_link_status"
BAD_PAGE_THRESHOLD = "amdsmi.amdsmi_get_gpu_bad_page_threshold"


def fill_ecc(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any, smi: ModuleType) -> None:
    enabled_blocks, status = call.answer("amdsmi_get_gpu_ecc_enabled", handle, tolerate=frozenset({STATUS_API_FAILED}))
    ecc = device.ecc
    if enabled_blocks is not None:  # bitmask of AmdSmiGpuBlock values
        ecc.enabled = bool(enabled_blocks & smi.AmdSmiGpuBlock.UMC)  # UMC = the HBM memory controllers
    elif status == STATUS_API_FAILED:
        ecc.enabled = False  # rocm-smi-lib answers API_FAILED for a ras/features mask of 0: no block has RAS on
    elif status in _UNSUPPORTED:
        device.unsupported[ECC_ENABLED] = ("amdgpu publishes no RAS feature mask (no ras/features: RAS is off, "
                                           "amdgpu.ras_enable=0, or the part has no RAS)")
    total = call("amdsmi_get_gpu_total_ecc_count", handle)
    # amdgpu counts since the driver loaded: the volatile counters in NVML's terms.
    ecc.volatile_corrected = integer(get(total, "correctable_count"))
    ecc.volatile_uncorrected = integer(get(total, "uncorrectable_count"))
    ecc.deferred = integer(get(total, "deferred_count"))
    for block in smi.AmdSmiGpuBlock:
        if block in (smi.AmdSmiGpuBlock.INVALID, smi.AmdSmiGpuBlock.RESERVED) or not (enabled_blocks or 0) & block:
            continue
        counts, status = call.answer("amdsmi_get_gpu_ecc_count", handle, block)
        values = {
            "corrected": integer(get(counts, "correctable_count")),
            "uncorrected": integer(get(counts, "uncorrectable_count")),
            "deferred": integer(get(counts, "deferred_count")),
        }
        if any(v is not None for v in values.values()):
            ecc.by_block[block.name.lower()] = {k: v for k, v in values.items() if v is not None}
        elif status in _UNSUPPORTED:
            # An enabled block whose counts did not answer: "Query currently inaccessible" (module docstring).
            ecc.unreadable_blocks.append(block.name.lower())


def fill_bad_pages(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any, smi: ModuleType) -> None:
    pages = call("amdsmi_get_gpu_bad_page_info", handle)
    health = device.memory_health
    if isinstance(pages, list):
        statuses = [page.get("status") for page in pages]
        status = smi.AmdSmiMemoryPageStatus
        health.bad_pages_reserved = statuses.count(status.RESERVED)
        health.bad_pages_pending = statuses.count(status.PENDING)
        health.bad_pages_unreservable = statuses.count(status.UNRESERVABLE)
    threshold, code = call.answer("amdsmi_get_gpu_bad_page_threshold", handle, tolerate=frozenset({STATUS_NO_PERM}))
    threshold = integer(threshold)
    if threshold:
        health.bad_page_threshold, health.bad_page_threshold_source = threshold, "driver"
        return
    if device.virtualization == "guest":
        device.unsupported[BAD_PAGE_THRESHOLD] = "an SR-IOV VF has no bad-page retirement of its own (the host's)"
        return
    default = DEFAULT_BAD_PAGE_THRESHOLD.get(device.architecture or "")
    if default is not None and (code in _UNSUPPORTED or code == STATUS_NO_PERM):
        # Only root reads the driver's value (debugfs): judge against the documented default rather than nothing.
        health.bad_page_threshold, health.bad_page_threshold_source = default, "default"


def fill_xgmi(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    links, code = call.answer("amdsmi_get_gpu_xgmi_link_status", handle,
                              tolerate=frozenset({STATUS_UNEXPECTED_DATA}))
    states = get(links, "status") or []
    for index, state in enumerate(states):
        if state in _XGMI_LINK_UP:
            device.links.append(GpuLink(index=index, kind="xgmi", up=_XGMI_LINK_UP[state]))
    reason = _link_status_missing(device, states, code)
    if reason is not None:
        device.unsupported[XGMI_LINKS] = reason
    error_status, code = call.answer("amdsmi_gpu_xgmi_error_status", handle, tolerate=frozenset({STATUS_INVAL}))
    error_status = integer(error_status)  # the enum's .value, not the member
    if error_status is not None:
        device.xgmi_error_status = _XGMI_ERROR_STATUS.get(error_status)
    elif code == STATUS_INVAL:
        device.unsupported[XGMI_ERROR] = ("amdgpu's xgmi_error answers EINVAL on this part (no DF FICA access on "
                                          "MI300/MI350, ROCm/rocm-systems#11468): XGMI health is read from the "
                                          "XGMI_WAFL RAS block instead")


def _link_status_missing(device: DeviceSnapshot, states: list[str], code: int) -> Optional[str]:
    metrics = f"gpu_metrics v{device.metrics_version}" if device.metrics_version else "this gpu_metrics table"
    if states and all(state == "X" for state in states):
        return (f"every XGMI link reads X: amdsmi 7.0 reports that when {metrics} has no xgmi_link_status "
                f"(added in gpu_metrics v1.7)")
    if code == STATUS_UNEXPECTED_DATA:
        return "amdsmi answers UNEXPECTED_DATA for the XGMI link status (an SR-IOV VF has no link status)"
    if code in _UNSUPPORTED:
        # Newer amdsmi answers NOT_SUPPORTED where 7.0 gave all "X" (ROCm/rocm-systems PR 2053).
        return f"amdsmi reports no XGMI link status with {metrics} (gpu_metrics v1.7+ carries it)"
    return None
