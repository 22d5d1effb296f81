"""The fake libnvidia-ml's answers about a GPU's own health (see fake_nvml_lib): the NVSwitch fabric state, the
unrepairable-memory flag and SRAM ECC. Each writes through the struct pointer pynvml passes, after checking the
struct version the way NVML does (a version the driver does not know: NVML_ERROR_ARGUMENT_VERSION_MISMATCH)."""

from __future__ import annotations

from typing import Any

import pynvml

from tests.support.fakes.fake_nvml import FakeGpu, FakeHealth
from tests.support.fakes.fake_nvml_lib import SUCCESS, FakeNvmlLib, c_symbol, target

VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
_FABRIC_VERSIONS = {pynvml.nvmlGpuFabricInfo_v3: 3, pynvml.nvmlGpuFabricInfo_v2: 2}


def _fill_fabric(info: Any, health: FakeHealth, struct_version: int) -> int:
    info.state = health.fabric_state
    info.status = health.fabric_status
    info.cliqueId = 0
    for i in range(len(info.clusterUuid)):
        info.clusterUuid[i] = 0
    if struct_version >= 2:
        info.healthMask = health.fabric_health_mask
    if struct_version >= 3:
        info.healthSummary = health.fabric_health_summary
    return SUCCESS


@c_symbol()
def nvmlDeviceGetGpuFabricInfoV(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    info = target(out)
    version = _FABRIC_VERSIONS.get(info.version)
    if version is None or version > gpu.health.fabric_struct_version:
        return VERSION_MISMATCH
    return _fill_fabric(info, gpu.health, version)


@c_symbol()
def nvmlDeviceGetGpuFabricInfo(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    """The unversioned R525 call: no health fields."""
    return _fill_fabric(target(out), gpu.health, 1)


@c_symbol()
def nvmlDeviceGetUnrepairableMemoryFlag_v1(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    flag = target(out)
    if flag.version != pynvml.nvmlUnrepairableMemory_v1:
        return VERSION_MISMATCH
    flag.unrepairableMemory = gpu.health.unrepairable_memory
    return SUCCESS


@c_symbol()
def nvmlDeviceGetSramEccErrorStatus(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    status = target(out)
    if status.version != pynvml.nvmlEccSramErrorStatus_v1:
        return VERSION_MISMATCH
    for name, *_ in status._fields_:
        if name != "version":
            setattr(status, name, gpu.health.sram.get(name, 0))
    return SUCCESS
