"""Reading one NVIDIA GPU through NVML into a DeviceSnapshot: identity, firmware, PCIe, ECC and memory health,
memory use, modes, CPU affinity and processes. Sensors (temperature, power, clocks) are in sensors.py, NVLink in
links.py. Units are converted here, once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from gpudiag.model import DeviceSnapshot, GpuProcess
from gpudiag.probe.nvml import health as nvml_health, links as nvml_links, sensors as nvml_sensors
from gpudiag.probe.nvml.call import NvmlCall
from gpudiag.probe.nvml.fields import DEVICE_FIELDS, apply_fields, read_fields
from gpudiag.probe.nvml.links import pci_bus_id

if TYPE_CHECKING:
    from gpudiag.probe.nvml.power_samples import PowerSamples

# nvmlDeviceArchitecture_t (nvml.h), named as `nvidia-smi -q` prints "Product Architecture".
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
ARCHITECTURE_UNKNOWN = 0xFFFFFFFF

# nvmlComputeMode_t. EXCLUSIVE_THREAD (1) is no longer settable but an old setting could still report it.
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

# InfoROM objects (nvmlInforomObject_t) → firmware_versions keys; the image version has its own call.
INFOROM_OBJECTS = (("inforom_oem", "NVML_INFOROM_OEM"), ("inforom_ecc", "NVML_INFOROM_ECC"),
                   ("inforom_power", "NVML_INFOROM_POWER"))


def read_device(call: NvmlCall, handle: Any, device: DeviceSnapshot, link_errors: bool = True,
                field_names: tuple[str, ...] = DEVICE_FIELDS, power_samples: Optional["PowerSamples"] = None) -> None:
    """Fill `device` from NVML. Identity comes first: if a later call hangs, the partial snapshot (the tracker's
    `partial`) already says which GPU it is. `field_names`: the field batch for this driver (device_fields);
    `power_samples`: where the mean power since the previous probe is asked for (power_samples.py)."""
    read_identity(call, handle, device)
    read_firmware(call, handle, device)
    fields = read_fields(call, handle, field_names)
    apply_fields(device, fields)  # ECC, row remapping / retired pages, PCIe counters, energy
    nvml_health.read_driver_health(call, handle, device, fields)  # recovery action, SRAM ECC, fabric
    read_pcie(call, handle, device)
    read_remap_histogram(call, handle, device)
    nvml_sensors.read_temperatures(call, handle, device, fields)
    nvml_sensors.read_power(call, handle, device, power_samples)
    nvml_sensors.read_clocks(call, handle, device)
    nvml_sensors.read_utilization(call, handle, device)
    read_memory_usage(call, handle, device)
    read_modes(call, handle, device)
    link_count = fields.get("NVML_FI_DEV_NVLINK_LINK_COUNT")
    device.links = nvml_links.read_nvlinks(call, handle, None if link_count is None else int(link_count), link_errors)
    read_affinity(call, handle, device)
    device.processes = read_processes(call, handle)


def _text(value: Optional[str]) -> Optional[str]:
    """NVML fills an empty buffer for a value the board does not carry (e.g. no serial): absent, not ''."""
    if value is None:
        return None
    value = value.strip()
    return value or None


def read_identity(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    pci = call("nvmlDeviceGetPciInfo", handle)  # the _v3 symbol: the 32-byte busId field
    if pci is not None:
        device.pci_bus_id = pci_bus_id(pci.busId)
    device.uuid = _text(call("nvmlDeviceGetUUID", handle))
    device.name = _text(call("nvmlDeviceGetName", handle))
    device.serial = _text(call("nvmlDeviceGetSerial", handle))
    architecture = call("nvmlDeviceGetArchitecture", handle)
    if architecture is not None and architecture != ARCHITECTURE_UNKNOWN:
        device.architecture = ARCHITECTURES.get(architecture, f"NVML architecture {architecture}")
    device.board_part_number = _text(call("nvmlDeviceGetBoardPartNumber", handle))
    device.minor_number = call("nvmlDeviceGetMinorNumber", handle)


def read_firmware(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    device.vbios_version = _text(call("nvmlDeviceGetVbiosVersion", handle))
    versions = {key: _text(call("nvmlDeviceGetInforomVersion", handle, getattr(call.nvml, obj)))
                for key, obj in INFOROM_OBJECTS}
    versions["inforom_image"] = _text(call("nvmlDeviceGetInforomImageVersion", handle))
    device.firmware_versions = {key: value for key, value in versions.items() if value is not None}


def read_pcie(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    pcie = device.pcie
    pcie.current_generation = call("nvmlDeviceGetCurrPcieLinkGeneration", handle)
    pcie.current_width = call("nvmlDeviceGetCurrPcieLinkWidth", handle)
    # "Max" is what this GPU in this slot can reach (the lesser of GPU and link partner); "GPU max" is the GPU's own.
    # NVML has no call for the GPU's own maximum width: device_max_width stays None (the host probe reads it).
    pcie.max_generation = call("nvmlDeviceGetMaxPcieLinkGeneration", handle)
    pcie.max_width = call("nvmlDeviceGetMaxPcieLinkWidth", handle)
    pcie.device_max_generation = call("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle)


def read_remap_histogram(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    """How many DRAM banks have max/high/partial/low/no spare rows left; asked only where rows are remapped."""
    health = device.memory_health
    if health.remapped_rows_correctable is None and health.remap_pending is None:
        return
    histogram = call("nvmlDeviceGetRowRemapperHistogram", handle)
    if histogram is not None:
        health.remap_histogram = {name: int(getattr(histogram, name))
                                  for name in ("max", "high", "partial", "low", "none")}


def read_memory_usage(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    memory = device.memory
    # The v2 struct reports driver/firmware-reserved memory apart from `used`; v1 folds it into `used`. Older
    # drivers lack nvmlDeviceGetMemoryInfo_v2 or reject the struct version: fall back to v1.
    version = getattr(call.nvml, "nvmlMemory_v2", None)
    info, code, _ = call.attempt("nvmlDeviceGetMemoryInfo", handle, version) if version else (None, -1, "")
    if code is None:
        memory.reserved_bytes = int(info.reserved)
    else:
        info = call("nvmlDeviceGetMemoryInfo", handle)
    if info is not None:
        memory.total_bytes = int(info.total)
        memory.used_bytes = int(info.used)
    bar1 = call("nvmlDeviceGetBAR1MemoryInfo", handle)
    if bar1 is not None:
        memory.bar1_total_bytes = int(bar1.bar1Total)
        memory.bar1_used_bytes = int(bar1.bar1Used)


def read_modes(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    persistence = call("nvmlDeviceGetPersistenceMode", handle)
    device.persistence_mode = None if persistence is None else bool(persistence)
    mode = call("nvmlDeviceGetComputeMode", handle)
    device.compute_mode = None if mode is None else COMPUTE_MODES.get(mode, f"unknown ({mode})")
    mig = call("nvmlDeviceGetMigMode", handle)  # [current, pending]; NOT_SUPPORTED on GPUs without MIG
    if mig is not None:
        device.mig_enabled, device.mig_pending_enabled = bool(mig[0]), bool(mig[1])


def read_affinity(call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
    node = call("nvmlDeviceGetNumaNodeId", handle)
    # -1: the GPU has no NUMA affinity (single-node host); that is "no node", not node -1.
    device.numa_node = node if node is not None and node >= 0 else None
    # CPU affinity is not asked of NVML: nvmlDeviceGetCpuAffinity cost 9 ms per GPU on the lab's H200s
    # (tools/nvml_timing.py), and the kernel's sysfs local_cpulist says the same for free (the collector fills
    # device.cpu_affinity from it).


def read_processes(call: NvmlCall, handle: Any) -> Optional[list[GpuProcess]]:
    """Compute and graphics processes with their GPU memory; names and users are added by the host probe."""
    found: Optional[list[GpuProcess]] = None
    for kind, function in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                           ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        processes = call(function, handle)
        if processes is None:
            continue
        found = found or []
        found.extend(GpuProcess(pid=int(p.pid), kind=kind, used_memory_bytes=p.usedGpuMemory) for p in processes)
    return found
