"""Which backends read each vendor's GPUs, in the order they are tried (the first that opens is used), and the Python
library each vendor's backends need (a vendor whose library is not installed is not tried)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from gpudiag.model import Vendor
from gpudiag.probe.base import Backend

if TYPE_CHECKING:
    from gpudiag.probe.collector import CollectOptions


def nvidia_backends(options: CollectOptions) -> list[Backend]:
    """NVML: the one the options were given (a cold direct check's vendor child: over the NVML-ahead process's
    answers, gpudiag/probe/nvml/ahead_answers.py) where it reads what
    they ask for (the NVLink error counters or not, the power samples or not), else a new one."""
    from gpudiag.probe.nvml.backend import NvmlBackend

    link_errors = "link_errors" in options.parts
    started = options.nvml_backend
    if (started is not None and getattr(started, "link_errors", None) == link_errors
            and getattr(started, "power_samples", False) == options.power_samples):
        return [started]
    return [NvmlBackend(link_errors=link_errors, power_samples=options.power_samples)]


def amd_backends(options: CollectOptions) -> list[Backend]:
    """amdsmi first; the amdgpu sysfs reader stands in when amdsmi cannot be used."""
    from gpudiag.probe.amdgpu.sysfs import AmdgpuSysfsBackend
    from gpudiag.probe.amdsmi.backend import AmdsmiBackend

    return [AmdsmiBackend(), AmdgpuSysfsBackend(options.root)]


VENDOR_BACKENDS: dict[Vendor, Callable[[CollectOptions], list[Backend]]] = {
    Vendor.NVIDIA: nvidia_backends,
    Vendor.AMD: amd_backends,
}
VENDOR_PYTHON_MODULE = {Vendor.NVIDIA: "pynvml", Vendor.AMD: "amdsmi"}
