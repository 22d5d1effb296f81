"""Which GPUs the load tests may touch. A GPU that is someone else's (processes on it, busy, memory held) is left
alone with the reason said; so is one the tests cannot drive as a whole (MIG, an AMD partition, unreachable)."""

from __future__ import annotations

from typing import Optional

from gpudiag.active.options import GIB, ActiveOptions
from gpudiag.model import DeviceSnapshot, GpuProcess, normalize_pci_bus_id


def size_text(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= GIB else f"{nbytes / 2**20:.1f} MiB"


def _describe(process: GpuProcess) -> str:
    who = ", ".join(part for part in (process.name, process.user) if part)
    memory = f", {size_text(process.used_memory_bytes)}" if process.used_memory_bytes else ""
    return f"pid {process.pid}{f' ({who})' if who else ''}{memory}"


def skip_reason(device: DeviceSnapshot, options: ActiveOptions) -> Optional[str]:
    """Why `device` must not be loaded, from what the probe saw; None: it may be tested."""
    if not device.reachable:
        return "it did not answer its vendor library"
    if device.pci_bus_id is None:
        return "its PCI bus ID is unknown, so it cannot be matched to a runtime device"
    if device.is_logical_partition:
        return f"it is a partition of the GPU at {device.physical_pci_bus_id}; partitions are not tested one by one"
    if device.mig_enabled:
        return "MIG mode is enabled: the load tests need the whole GPU (disable MIG to test it)"
    if device.processes:
        listed = "; ".join(_describe(p) for p in device.processes[:3])
        more = f" and {len(device.processes) - 3} more" if len(device.processes) > 3 else ""
        return f"busy with another job, not disturbed: {len(device.processes)} process(es) on it ({listed}{more})"
    busy = device.utilization.gpu_percent
    if busy is not None and busy >= options.busy_utilization_percent:
        return f"busy with another job, not disturbed: {busy}% utilised"
    held = held_memory(device)
    if held is not None and held > options.busy_memory_bytes:
        return (f"busy with another job, not disturbed: {size_text(held)} of its memory is in use "
                f"although no process is listed (another container?)")
    return None


def held_memory(device: DeviceSnapshot) -> Optional[int]:
    """Memory in use beyond what the driver reserves for itself."""
    if device.memory.used_bytes is None:
        return None
    return device.memory.used_bytes - (device.memory.reserved_bytes or 0)


def runtime_ordinals(runtime, count: int) -> dict[str, int]:
    """Normalised PCI bus ID → runtime ordinal. CUDA orders devices fastest-first by default and both runtimes
    honour *_VISIBLE_DEVICES, so the runtime's order is never assumed to be the probe's."""
    ordinals = {}
    for ordinal in range(count):
        ordinals[normalize_pci_bus_id(runtime.pci_bus_id(ordinal))] = ordinal
    return ordinals
