"""host.*: host settings GPUs depend on: NVIDIA persistence mode, IOMMU mode, large BARs, kernel modules."""

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
    unknown,
    verdict,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, Status, Vendor


PERSISTENCE_MODE = "host.persistence_mode"
IOMMU = "host.iommu"
LARGE_BAR = "host.large_bar"
KERNEL_MODULES = "host.kernel_modules"


def _persistence(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    check_id = PERSISTENCE_MODE
    if device.persistence_mode is None:
        return not_available(check_id, device, "persistence mode", ("persistence",))
    observed = {"persistence_mode": device.persistence_mode}
    if device.persistence_mode:
        return passed(check_id, device, f"{device.label}: persistence mode on", observed=observed, expected="on")
    status = Status.FAIL if expect.persistence_mode_required else Status.WARN
    return verdict(check_id, status, device, f"{device.label}: persistence mode off",
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


# iommu_group/type → the profile's IOMMU mode (expect.IOMMU_MODES). "unmanaged" (VFIO, a VM owns the GPU) is
# none of them.
_MODE_OF_DOMAIN = {"identity": "passthrough", "DMA": "translated", "DMA-FQ": "translated"}
_SET_IOMMU_MODE = {
    "passthrough": "boot with `iommu=pt` (keeping `intel_iommu=on` / `amd_iommu=on` where VFIO needs it)",
    "translated": "boot without `iommu=pt` and with the IOMMU on (`intel_iommu=on` / `amd_iommu=on`)",
    "off": "disable the IOMMU (`intel_iommu=off` / `amd_iommu=off`, or VT-d / AMD-Vi off in the BIOS)",
}


def _iommu_against_profile(gpu: PhysicalGpu, snapshot: NodeSnapshot, wanted: str) -> CheckResult:
    domain = gpu.pci.iommu_domain_type if gpu.pci else None
    mode = _MODE_OF_DOMAIN.get(domain, domain) if domain else ("off" if snapshot.host.iommu_enabled is False else None)
    observed = {"pci_bus_id": gpu.pci_bus_id, "iommu_domain_type": domain, "mode": mode,
                "iommu_enabled": snapshot.host.iommu_enabled, "cmdline": snapshot.host.iommu_cmdline}
    confirm = f"Confirm with `cat /sys/bus/pci/devices/{gpu.pci_bus_id}/iommu_group/type` and `cat /proc/cmdline`."
    if mode is None:
        return unknown(IOMMU, gpu.device, f"{gpu.label}: IOMMU mode not known (no iommu_group type in sysfs)",
                       observed=observed, expected=wanted, remediation=confirm)
    if mode == wanted:
        return passed(IOMMU, gpu.device, f"{gpu.label}: IOMMU {mode}", observed=observed, expected=wanted)
    return failed(IOMMU, gpu.device, f"{gpu.label}: IOMMU {mode}, the profile expects {wanted}", observed=observed,
                  expected=wanted, remediation=f"To match its siblings, {_SET_IOMMU_MODE[wanted]}, then reboot. "
                                               f"{confirm}")


def iommu(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    wanted = expect.expected_iommu_mode
    if wanted is not None:
        return for_each_gpu(snapshot, IOMMU, lambda g: _iommu_against_profile(g, snapshot, wanted), sysfs_only=True)
    return for_each_gpu(snapshot, IOMMU, lambda g: _iommu_result(g, snapshot), sysfs_only=True)


def _bar_bytes(gpu: PhysicalGpu) -> Optional[int]:
    """The GPU's largest memory window: NVIDIA's BAR1 size, or the largest BAR in sysfs (AMD's VRAM BAR)."""
    sizes = [s for s in (gpu.device.memory.bar1_total_bytes if gpu.device else None,
                         max(gpu.pci.bar_sizes_bytes.values(), default=None) if gpu.pci else None) if s is not None]
    return max(sizes, default=None)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


def _large_bar(gpu: PhysicalGpu, expect: Expectations) -> CheckResult:
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
    status = Status.FAIL if expect.large_bar_required else Status.WARN
    return verdict(check_id, status, device, f"{device.label}: BAR is {_gib(bar)}, smaller than its {_gib(memory)} of "
                                             f"memory",
                   observed=observed, expected=f">= {memory} bytes",
                   remediation=("The BIOS did not give the GPU a large BAR, so the host and peers (GPUDirect RDMA, "
                                "P2P over PCIe) cannot map its memory and the driver may refuse to initialise. Enable "
                                "\"Above 4G Decoding\" and \"Resizable BAR\" (Re-Size BAR support) in the BIOS, and "
                                "make sure the MMIO high size covers all GPUs; then reboot. Confirm with "
                                f"`lspci -vvv -s {gpu.pci_bus_id} | grep -i region` and {reported}."))


def large_bar(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_gpu(snapshot, LARGE_BAR, lambda g: _large_bar(g, expect))


def kernel_modules(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    required = expect.required_kernel_modules
    if not required:
        return [skipped(KERNEL_MODULES, None, "no kernel modules required (required_kernel_modules)")]
    # The host probe records only the modules it is told to look for (probe/host.py MODULES_OF_INTEREST); the
    # profile loader (gpudiag/expect/profile.py) refuses to require any other, so absent here means not loaded.
    loaded = snapshot.host.modules_loaded
    missing = [m for m in required if m not in loaded]
    observed = {"loaded": {m: loaded[m] for m in required if m in loaded}, "missing": missing}
    expected = f"loaded: {', '.join(required)}"
    unreadable = [f"{e.source}: {e.message}" for e in snapshot.errors if "module" in e.source.lower()]
    if missing and unreadable:
        return [unknown(KERNEL_MODULES, None, f"could not tell whether {', '.join(missing)} are loaded",
                        observed={**observed, "errors": unreadable}, expected=expected,
                        remediation="Check that /proc/modules and /sys/module are readable (or run `lsmod`).")]
    if missing:
        return [failed(KERNEL_MODULES, None, f"required kernel module(s) not loaded: {', '.join(missing)}",
                       observed=observed, expected=expected,
                       remediation=(f"Load them (`modprobe {' '.join(missing)}`) and make them load at boot "
                                    f"(/etc/modules-load.d/); if modprobe fails, read why with `dmesg | tail` — "
                                    f"nvidia_peermem needs the InfiniBand stack (MLNX_OFED / ib_core) loaded first. "
                                    f"Confirm with `lsmod`."))]
    return [passed(KERNEL_MODULES, None, f"required kernel modules loaded: {', '.join(required)}", observed=observed,
                   expected=expected)]


CHECKS = (
    device_check(PERSISTENCE_MODE, "NVIDIA persistence mode is on", _persistence, vendor=Vendor.NVIDIA),
    Check(IOMMU, iommu, "GPUs are not behind a translating IOMMU domain (P2P / GPUDirect)"),
    Check(LARGE_BAR, large_bar, "each GPU's BAR maps all of its memory (Above 4G decoding / Resizable BAR)"),
    Check(KERNEL_MODULES, kernel_modules, "the kernel modules the profile requires are loaded"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "host.persistence_mode": {F: ("drain", "GPUDIAG-HOST-PERSISTENCE-OFF"),
                              W: ("watch", "GPUDIAG-HOST-PERSISTENCE-OFF")},
    "host.iommu": {F: ("drain", "GPUDIAG-HOST-IOMMU-MODE"), W: ("watch", "GPUDIAG-HOST-IOMMU-TRANSLATED")},
    "host.large_bar": {F: ("drain", "GPUDIAG-HOST-SMALL-BAR"), W: ("watch", "GPUDIAG-HOST-SMALL-BAR")},
    "host.kernel_modules": {F: ("drain", "GPUDIAG-HOST-MODULE-MISSING")},
}
_REFERENCE = {
    "host.persistence_mode": (
        "NVIDIA persistence mode per GPU",
        "Run nvidia-persistenced (`systemctl enable --now nvidia-persistenced`)."),
    "host.iommu": (
        "the IOMMU group type of each GPU (/sys/kernel/iommu_groups/*/type)",
        "Boot with `iommu=pt` (or the profile's mode) so that P2P and GPUDirect are not translated."),
    "host.large_bar": (
        "each GPU's BAR sizes against its memory size (sysfs resource)",
        "Enable Above 4G Decoding and Resizable BAR in the BIOS."),
    "host.kernel_modules": (
        "/proc/modules",
        "Load the modules the profile requires (e.g. nvidia_peermem for GPUDirect RDMA) and make them persistent."),
}
_SETTINGS = {
    "host.persistence_mode": ("persistence_mode_required",),
    "host.iommu": ("expected_iommu_mode",),
    "host.large_bar": ("large_bar_required",),
    "host.kernel_modules": ("required_kernel_modules",),
}
FAMILY = Family(
    "host", order=100, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
