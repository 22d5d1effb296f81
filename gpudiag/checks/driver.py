"""driver.*: a usable driver stack for the GPUs on the bus: kernel module, binding, vendor library, versions."""

from __future__ import annotations

from typing import Optional

from gpudiag.checks import amd_platform, recovery
from gpudiag.checks.common import (
    PERMISSION_REMEDIATION,
    VENDOR_NAMES,
    Check,
    failed,
    kernel_log_command,
    passed,
    skipped,
    unknown,
    vendors_present,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations, version_tuple
from gpudiag.model import BackendInfo, CheckResult, ErrorKind, NodeSnapshot, PciGpu, Status, Vendor

KERNEL_MODULE = {Vendor.NVIDIA: "nvidia", Vendor.AMD: "amdgpu"}
LIBRARY_HINT = {
    Vendor.NVIDIA: "libnvidia-ml.so.1 (the driver's userspace package, e.g. nvidia-utils / libnvidia-compute)",
    Vendor.AMD: "libamd_smi.so (ROCm's amd-smi-lib package)",
}
# Why a module loads yet the GPU fails to initialise: the driver cannot map the GPU's BARs (64-bit MMIO above
# 4 GiB disabled in the BIOS), or its firmware (NVIDIA GSP, amdgpu microcode) is missing.
_INIT_FAILURE_HINT = {
    Vendor.NVIDIA: ("Look for `RmInitAdapter failed` or `BAR1 is 0M` in the kernel log: enable \"Above 4G "
                    "Decoding\" (and Resizable BAR) in the BIOS, and check that the GSP firmware in "
                    "/lib/firmware/nvidia/<version>/ matches the driver."),
    Vendor.AMD: ("Look for `Fatal error during GPU init` or `failed to load firmware` in the kernel log: enable "
                 "\"Above 4G Decoding\" in the BIOS and install the amdgpu firmware that matches the driver "
                 "(/lib/firmware/amdgpu)."),
}


def _module_failure_remediation(vendor: Vendor) -> str:
    module = KERNEL_MODULE[vendor]
    return (f"Load it with `modprobe {module}` and read why it failed with `{kernel_log_command(vendor)}`. "
            f"If modprobe cannot find it, the module was not built for the running kernel: compare `uname -r` with "
            f"`dkms status` and rebuild/reinstall the driver for this kernel; with Secure Boot on, the module must "
            f"be signed with an enrolled key (`mokutil --sb-state`).")


def _serving_libraries(snapshot: NodeSnapshot, vendor: Vendor) -> list[str]:
    return [b.name for b in snapshot.backends if b.vendor == vendor and b.available and b.device_count]


def _module_result(snapshot: NodeSnapshot, vendor: Vendor) -> CheckResult:
    check_id = "driver.module_loaded"
    module = KERNEL_MODULE[vendor]
    modules = snapshot.host.modules_loaded
    expected = f"{module} loaded"
    if module in modules:
        return passed(check_id, None, f"kernel module {module} is loaded", observed={module: modules[module]},
                      expected=expected)
    serving = _serving_libraries(snapshot, vendor)
    if serving:
        # A library cannot enumerate GPUs without the module: the module list was incomplete, not the driver.
        return passed(check_id, None, f"kernel module {module} is loaded ({', '.join(serving)} answers; it is "
                                      f"missing from the module list read from /sys/module)",
                      observed={"modules_loaded": sorted(modules), "libraries": serving}, expected=expected)
    module_errors = [e for e in snapshot.errors if "module" in e.source.lower()]
    if module_errors:
        return unknown(check_id, None, f"could not tell whether kernel module {module} is loaded",
                       observed=[f"{e.source}: {e.message}" for e in module_errors], expected=expected,
                       remediation="Check that /sys/module is readable (or run `lsmod`) and re-run gpudiag.")
    gpus = [p.pci_bus_id for p in snapshot.pci_gpus if p.vendor == vendor]
    return failed(check_id, None, f"kernel module {module} is not loaded, so the {VENDOR_NAMES[vendor]} GPU(s) on "
                                  f"the PCI bus ({', '.join(gpus) or 'none listed'}) have no driver",
                  observed={"modules_loaded": sorted(modules)}, expected=expected,
                  remediation=_module_failure_remediation(vendor))


def module_loaded(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    vendors = vendors_present(snapshot)
    if not vendors:
        return [skipped("driver.module_loaded", None, "no GPU on the PCI bus or in any vendor library")]
    return [_module_result(snapshot, vendor) for vendor in sorted(vendors)]


def _binding_result(pci: PciGpu) -> CheckResult:
    check_id = "driver.device_bound"
    wanted = KERNEL_MODULE[pci.vendor]
    observed = {"pci_bus_id": pci.pci_bus_id, "driver": pci.driver}
    if pci.driver == wanted:
        return passed(check_id, None, f"{pci.pci_bus_id} is bound to {wanted}", observed=observed, expected=wanted)
    if pci.driver == "vfio-pci":
        return warned(check_id, None, f"{pci.pci_bus_id} is bound to vfio-pci (passed through to a VM), not usable "
                                      f"on this host",
                      observed=observed, expected=wanted,
                      remediation=(f"On a VM host that is intended. Otherwise unbind it from vfio-pci (remove its ID "
                                   f"from vfio-pci.ids= on the kernel command line and in /etc/modprobe.d) and bind "
                                   f"{wanted}."))
    if pci.driver == "nouveau":
        return failed(check_id, None, f"{pci.pci_bus_id} is bound to nouveau, which cannot run CUDA or NVML",
                      observed=observed, expected=wanted,
                      remediation=("Blacklist nouveau (`blacklist nouveau` and `options nouveau modeset=0` in "
                                   "/etc/modprobe.d/blacklist-nouveau.conf), rebuild the initramfs "
                                   "(`update-initramfs -u` / `dracut -f`) and reboot."))
    bound = f"bound to {pci.driver}" if pci.driver else "not bound to any driver"
    return failed(check_id, None, f"{pci.pci_bus_id} is {bound}", observed=observed, expected=wanted,
                  remediation=(f"See why {wanted} did not claim it: `lspci -k -s {pci.pci_bus_id}` and "
                               f"`{kernel_log_command(pci.vendor)}`. {_INIT_FAILURE_HINT[pci.vendor]}"))


def device_bound(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    if not snapshot.pci_gpus:
        return [skipped("driver.device_bound", None, "no GPU found on the PCI bus")]
    return [_binding_result(p) for p in snapshot.pci_gpus]


def _library_failure_remediation(backend: BackendInfo, module_is_loaded: bool) -> str:
    kind = backend.error.kind if backend.error else None
    text = backend.error.message.lower() if backend.error else ""
    if backend.vendor == Vendor.NVIDIA and "mismatch" in text:  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        return ("The userspace library and the loaded kernel module are different driver versions (typical after a "
                "driver upgrade without a reboot): compare `cat /proc/driver/nvidia/version` with the package "
                "version, then reboot or reload the module stack (`rmmod nvidia_uvm nvidia_drm nvidia_modeset "
                "nvidia; modprobe nvidia`).")
    if kind == ErrorKind.NO_PERMISSION:
        return PERMISSION_REMEDIATION
    if not module_is_loaded:
        return _module_failure_remediation(backend.vendor)
    if kind == ErrorKind.NOT_FOUND:
        return (f"The kernel module is loaded but {LIBRARY_HINT[backend.vendor]} was not found: install the "
                f"userspace package of the same version as the module (check `ldconfig -p | grep -e nvidia-ml -e "
                f"amd_smi`).")
    return (f"The module is loaded but the library could not initialise the GPUs. "
            f"{_INIT_FAILURE_HINT[backend.vendor]} Confirm with `{kernel_log_command(backend.vendor)}`.")


def _library_result(snapshot: NodeSnapshot, backend: BackendInfo) -> CheckResult:
    check_id = "driver.library"
    vendor = VENDOR_NAMES[backend.vendor]
    if backend.available:
        versions = {"library_version": backend.library_version, "driver_version": backend.driver_version,
                    "runtime_version": backend.runtime_version, "device_count": backend.device_count}
        if backend.error is not None:  # initialised, but part of what it reads is missing (amdsmi without libdrm)
            degraded = warned(check_id, None, f"{backend.name} initialised with {backend.device_count} GPU(s), "
                                              f"degraded: {backend.error.message}",
                              observed={**versions, "error": f"{backend.error.kind}: {backend.error.message}"},
                              expected="library initialised with all its dependencies",
                              remediation=(f"{backend.error.message}. Then re-run; the checks that read what is "
                                           f"missing report unknown until then."))
            return with_verdict(degraded, "watch", "GPUDIAG-DRIVER-LIBRARY-DEGRADED")
        return passed(check_id, None, f"{backend.name} initialised and reports {backend.device_count} GPU(s)",
                      observed=versions, expected="library initialised")
    gpus = [p.pci_bus_id for p in snapshot.pci_gpus if p.vendor == backend.vendor]
    reason = f"{backend.error.kind}: {backend.error.message}" if backend.error else "no reason recorded"
    if not gpus:
        return skipped(check_id, None, f"{backend.name} not available ({reason}); no {vendor} GPU on the PCI bus "
                                       f"needs it")
    module_is_loaded = KERNEL_MODULE[backend.vendor] in snapshot.host.modules_loaded
    remediation = _library_failure_remediation(backend, module_is_loaded)
    observed = {"error": reason, "gpus_on_bus": gpus}
    fallback = _serving_libraries(snapshot, backend.vendor)
    if fallback:
        return warned(check_id, None, f"{backend.name} failed ({reason}); {', '.join(fallback)} is used instead, "
                                      f"with fewer checks possible",
                      observed=observed, expected=f"{backend.name} initialised", remediation=remediation)
    return failed(check_id, None, f"{backend.name} failed ({reason}): {len(gpus)} {vendor} GPU(s) on the PCI bus "
                                  f"have no usable driver",
                  observed=observed, expected=f"{backend.name} initialised", remediation=remediation)


def library(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    if not snapshot.backends:
        return [skipped("driver.library", None, "no vendor library was tried")]
    return [_library_result(snapshot, backend) for backend in snapshot.backends]


def _nvidia_versions(snapshot: NodeSnapshot) -> dict[str, Optional[str]]:
    nvml = snapshot.backend("nvml")
    return {"kernel module (/sys/module/nvidia/version)": snapshot.host.modules_loaded.get("nvidia"),
            "/proc/driver/nvidia/version": snapshot.host.nvidia_proc_version,
            "NVML driver version": nvml.driver_version if nvml else None}


IN_TREE = "in-tree amdgpu (kernel release)"


def _amd_versions(snapshot: NodeSnapshot) -> dict[str, Optional[str]]:
    amdsmi = snapshot.backend("amdsmi")
    reported = amdsmi.driver_version if amdsmi else None
    module = snapshot.host.modules_loaded.get("amdgpu")
    release = snapshot.host.kernel_release
    # The in-tree amdgpu has no /sys/module/amdgpu/version: its version is the kernel release, and amdsmi reports
    # that release (the probe cuts it out of the /proc/version text amdsmi 6.4-7.0 returns; docs/vendor-api.md §1).
    in_tree = module is None and ("amdgpu" in snapshot.host.modules_loaded
                                  or (release is not None and reported == release))
    if in_tree and release is not None and reported in (None, release):
        return {IN_TREE: release, "amdsmi driver version": reported}
    return {"kernel module (/sys/module/amdgpu/version)": module, "amdsmi driver version": reported}


def _version_result(snapshot: NodeSnapshot, vendor: Vendor) -> CheckResult:
    check_id = "driver.version_consistent"
    name = VENDOR_NAMES[vendor]
    reported = _nvidia_versions(snapshot) if vendor == Vendor.NVIDIA else _amd_versions(snapshot)
    versions = {source: v for source, v in reported.items() if v is not None}
    expected = "one driver version everywhere"
    if not versions:
        return skipped(check_id, None, f"no {name} driver version is reported on this node")
    if len(set(versions.values())) == 1:
        return passed(check_id, None, f"{name} driver {next(iter(versions.values()))} reported consistently",
                      observed=versions, expected=expected)
    listing = ", ".join(f"{source} {v}" for source, v in versions.items())
    return failed(check_id, None, f"{name} driver versions disagree: {listing}", observed=versions, expected=expected,
                  remediation=("The loaded kernel module and the userspace driver come from different installs (an "
                               "upgrade without a reboot, or a DKMS build for another version). Reboot into the new "
                               "module or reinstall one consistent driver package; confirm with `modinfo -F version "
                               f"{KERNEL_MODULE[vendor]}` and the vendor SMI."))


def version_consistent(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    vendors = vendors_present(snapshot)
    if not vendors:
        return [skipped("driver.version_consistent", None, "no GPU on this node")]
    return [_version_result(snapshot, vendor) for vendor in sorted(vendors)]


def _expected_version_result(snapshot: NodeSnapshot, vendor: Vendor, expect: Expectations) -> CheckResult:
    check_id = "driver.version"
    name = VENDOR_NAMES[vendor]
    reported = _nvidia_versions(snapshot) if vendor == Vendor.NVIDIA else _amd_versions(snapshot)
    versions = {source: v for source, v in reported.items() if v is not None}
    exact, minimum = expect.expected_driver_version, expect.min_driver_version
    expected = exact if exact is not None else f">= {minimum}"
    confirm = (f"Confirm with `modinfo -F version {KERNEL_MODULE[vendor]}` and "
               + ("`cat /proc/driver/nvidia/version`." if vendor == Vendor.NVIDIA else "`amd-smi version`."))
    # The loaded kernel module's version comes first (it is what runs); the others are checked for agreement by
    # driver.version_consistent.
    version = next(iter(versions.values()), None)
    if version is None:
        why = "" if vendor == Vendor.NVIDIA else " (the in-tree amdgpu has no version of its own: pin the kernel)"
        return unknown(check_id, None, f"no {name} driver version is reported, so it cannot be compared with "
                                       f"{expected}{why}",
                       observed=reported, expected=expected,
                       remediation=f"Fix the driver first (driver.module_loaded, driver.library). {confirm}")
    install = (f"Install the {name} driver the profile names ({expected}) from the site's package repository and "
               f"reboot (or reload the driver stack), so that this node runs what its siblings run. {confirm}")
    if exact is not None and version != exact:
        return failed(check_id, None, f"{name} driver {version} is not the expected {exact}", observed=versions,
                      expected=expected, remediation=install)
    if minimum is not None:
        try:
            too_old = version_tuple(_numeric(version) if IN_TREE in versions else version) < version_tuple(minimum)
        except ValueError:
            return unknown(check_id, None, f"{name} driver version {version!r} cannot be compared with {expected}",
                           observed=versions, expected=expected, remediation=confirm)
        if too_old:
            return failed(check_id, None, f"{name} driver {version} is older than the required {minimum}",
                          observed=versions, expected=expected, remediation=install)
    return passed(check_id, None, f"{name} driver {version} as expected ({expected})", observed=versions,
                  expected=expected)


def _numeric(version: str) -> str:
    """A kernel release `6.8.0-79-generic` → `6.8.0` (the in-tree amdgpu's version); driver versions pass as they
    are."""
    return version.split("-", 1)[0]


def expected_version(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    if expect.expected_driver_version is None and expect.min_driver_version is None:
        return [skipped("driver.version", None, "no driver version configured (expected_driver_version, "
                                                "min_driver_version)")]
    vendors = vendors_present(snapshot)
    if not vendors:
        return [skipped("driver.version", None, "no GPU on this node")]
    return [_expected_version_result(snapshot, vendor, expect) for vendor in sorted(vendors)]


CHECKS = (
    Check("driver.module_loaded", module_loaded, "the GPU kernel module (nvidia / amdgpu) is loaded"),
    Check("driver.device_bound", device_bound, "each GPU on the PCI bus is bound to its vendor driver"),
    Check("driver.library", library, "the vendor management library (NVML / amdsmi) initialised"),
    Check("driver.version_consistent", version_consistent, "kernel module and library report one driver version"),
    Check("driver.version", expected_version, "the driver is the profile's version (exact or minimum)"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "driver.module_loaded": {F: ("drain", "GPUDIAG-DRIVER-MODULE-NOT-LOADED")},
    "driver.device_bound": {F: ("drain", "GPUDIAG-DRIVER-DEVICE-UNBOUND"), W: ("watch", "GPUDIAG-DRIVER-DEVICE-VFIO")},
    "driver.library": {F: ("drain", "GPUDIAG-DRIVER-LIBRARY-FAILED"), W: ("watch", "GPUDIAG-DRIVER-LIBRARY-FALLBACK")},
    # Module and library of different versions: an upgrade without a reboot; the reboot is the fix.
    "driver.version_consistent": {F: ("reboot", "GPUDIAG-DRIVER-VERSION-MISMATCH")},
    "driver.version": {F: ("drain", "GPUDIAG-DRIVER-VERSION-UNEXPECTED")},
    "driver.recovery_action": {F: ("drain", "GPUDIAG-DRIVER-RECOVERY-ACTION")},
    "driver.gpu_metrics_version": {W: ("watch", "GPUDIAG-DRIVER-METRICS-VERSION-SKEW")},
}
_REFERENCE = {
    "driver.module_loaded": (
        "/sys/module/nvidia, /sys/module/amdgpu; the GPUs on the PCI bus (/sys/bus/pci/devices)",
        "Load the driver (`modprobe nvidia` / `modprobe amdgpu`); if it refuses, `dmesg` says why (a kernel upgrade "
        "without the DKMS module, Secure Boot signing, nouveau holding the GPU)."),
    "driver.device_bound": (
        "each GPU function's driver link in sysfs (/sys/bus/pci/devices/*/driver)",
        "Bind the GPU to its vendor driver: blacklist nouveau, unbind vfio-pci where the GPU is not meant for a VM, "
        "and read `lspci -k` and `dmesg` for why the driver did not claim it."),
    "driver.library": (
        "whether NVML (libnvidia-ml, through nvidia-ml-py) or amdsmi (libamd_smi.so) loads and initialises",
        "Install the management library of the running driver (NVIDIA: the driver's libnvidia-ml; AMD: ROCm's "
        "amd-smi-lib and its Python wrapper) and check device permissions; without amdsmi, AMD falls back to sysfs."),
    "driver.version_consistent": (
        "the kernel module's version (/sys/module/*/version, /proc/driver/nvidia/version) and the library's",
        "The driver was upgraded without a reboot (or two installs are mixed): reboot, or reload the kernel module."),
    "driver.version": (
        "the driver version the library or module reports",
        "Install the driver version the profile names (the fleet's validated release)."),
    "driver.recovery_action": (
        "NVML's GPU recovery action (R550+ drivers; what Xid 154 announces)",
        "Do what the driver asks before using the GPU again: reset the GPU, reboot the node, or drain P2P traffic."),
    "driver.gpu_metrics_version": (
        "the gpu_metrics table version the amdgpu driver writes and the one amdsmi decodes (AMD)",
        "Install the amd-smi-lib release that matches the amdgpu driver, so that metrics are decoded, not guessed."),
}
_SETTINGS = {
    "driver.version": ("expected_driver_version", "min_driver_version"),
}
FAMILY = Family(
    "driver", order=10, checks=CHECKS + recovery.CHECKS + amd_platform.DRIVER_CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
