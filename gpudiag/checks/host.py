"""host.*: host settings GPUs depend on: NVIDIA persistence mode, IOMMU mode, large BARs."""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import (
    Check,
    PhysicalGpu,
    device_check,
    failed,
    not_available,
    for_each_gpu,
    passed,
    skipped,
    warned,
)
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, Vendor


PERSISTENCE_MODE = "host.persistence_mode"
IOMMU = "host.iommu"
LARGE_BAR = "host.large_bar"


def _persistence(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = PERSISTENCE_MODE
    if device.persistence_mode is None:
        return not_available(check_id, device, "persistence mode", ("persistence",))
    observed = {"persistence_mode": device.persistence_mode}
    if device.persistence_mode:
        return passed(check_id, device, f"{device.label}: persistence mode on", observed=observed, expected="on")
    return warned(check_id, device, f"{device.label}: persistence mode off",
                  observed=observed, expected="on",
                  remediation=("Without it the driver tears the GPU down whenever no client holds it: every job and "
                               "every nvidia-smi call pays seconds of re-initialisation, and ECC/remap state is "
                               "reloaded each time. Run the daemon: `systemctl enable --now nvidia-persistenced` "
                               "(preferred over the deprecated `nvidia-smi -pm 1`). Confirm with "
                               "`nvidia-smi --query-gpu=index,persistence_mode --format=csv`."))


_TRANSLATED = ("DMA", "DMA-FQ")  # iommu_group/type: the IOMMU remaps the GPU's DMA


def _iommu_result(gpu: PhysicalGpu, snapshot: NodeSnapshot) -> CheckResult:
    check_id = IOMMU
    domain = gpu.pci.iommu_domain_type if gpu.pci else None
    observed = {"pci_bus_id": gpu.pci_bus_id, "iommu_domain_type": domain,
                "iommu_enabled": snapshot.host.iommu_enabled, "cmdline": snapshot.host.iommu_cmdline}
    if domain in _TRANSLATED:
        return warned(check_id, gpu.device, f"{gpu.label}: IOMMU translates its DMA (domain {domain})",
                      observed=observed, expected="passthrough (identity) domain, or IOMMU off",
                      remediation=("Translated DMA slows or blocks GPU peer-to-peer and GPUDirect RDMA (NCCL falls "
                                   "back to staging through host memory). Boot with `iommu=pt` (keep "
                                   "`intel_iommu=on` / `amd_iommu=on` if VFIO needs it), then reboot. Confirm with "
                                   f"`cat /sys/bus/pci/devices/{gpu.pci_bus_id}/iommu_group/type` (identity)."))
    if domain is not None:
        note = " (passed through to a VM)" if domain == "unmanaged" else ""
        return passed(check_id, gpu.device, f"{gpu.label}: IOMMU domain {domain}{note}", observed=observed)
    if snapshot.host.iommu_enabled is False:
        return passed(check_id, gpu.device, f"{gpu.label}: no IOMMU active", observed=observed)
    return skipped(check_id, gpu.device, f"{gpu.label}: IOMMU domain type not known")


def iommu(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_gpu(snapshot, IOMMU, lambda g: _iommu_result(g, snapshot), sysfs_only=True)


def _bar_bytes(gpu: PhysicalGpu) -> Optional[int]:
    """The GPU's largest memory window: NVIDIA's BAR1 size, or the largest BAR in sysfs (AMD's VRAM BAR)."""
    sizes = [s for s in (gpu.device.memory.bar1_total_bytes if gpu.device else None,
                         max(gpu.pci.bar_sizes_bytes.values(), default=None) if gpu.pci else None) if s is not None]
    return max(sizes, default=None)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


def _large_bar(gpu: PhysicalGpu) -> CheckResult:
    check_id = LARGE_BAR
    device = gpu.device
    if device is None:
        return skipped(check_id, None, f"{gpu.label}: GPU memory size comes from the vendor library")
    bar, memory = _bar_bytes(gpu), device.memory.total_bytes
    if bar is None or memory is None:
        return not_available(check_id, device, "BAR and memory sizes", ("bar", "memory", "vram", "resource"))
    observed = {"bar_bytes": bar, "memory_bytes": memory}
    if bar >= memory:
        return passed(check_id, device, f"{device.label}: BAR {_gib(bar)} maps all {_gib(memory)} of GPU memory",
                      observed=observed, expected=f">= {memory} bytes")
    reported = "`nvidia-smi -q -d MEMORY` (BAR1 Total)" if device.vendor == Vendor.NVIDIA else "its largest region"
    return failed(check_id, device, f"{device.label}: BAR is {_gib(bar)}, smaller than its {_gib(memory)} of memory",
                  observed=observed, expected=f">= {memory} bytes",
                  remediation=("The BIOS did not give the GPU a large BAR, so the host and peers (GPUDirect RDMA, "
                               "P2P over PCIe) cannot map its memory and the driver may refuse to initialise. Enable "
                               "\"Above 4G Decoding\" and \"Resizable BAR\" (Re-Size BAR support) in the BIOS, and "
                               "make sure the MMIO high size covers all GPUs; then reboot. Confirm with "
                               f"`lspci -vvv -s {gpu.pci_bus_id} | grep -i region` and {reported}."))


def large_bar(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_gpu(snapshot, LARGE_BAR, _large_bar)


CHECKS = (
    device_check(PERSISTENCE_MODE, "NVIDIA persistence mode is on", _persistence, vendor=Vendor.NVIDIA),
    Check(IOMMU, iommu, "GPUs are not behind a translating IOMMU domain (P2P / GPUDirect)"),
    Check(LARGE_BAR, large_bar, "each GPU's BAR maps all of its memory (Above 4G decoding / Resizable BAR)"),
)
