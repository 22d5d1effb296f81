"""Shared by the active.* check modules: one result per load-tested GPU, and the verdict on a test that ended with
an error and no figure."""

from __future__ import annotations

from typing import Any, Callable, Optional

from gpudiag.checks.common import failed, reset_command, skipped, unknown
from gpudiag.model import CheckResult, DeviceSnapshot, ErrorKind, NodeSnapshot, ProbeError, Vendor


def _device(snapshot: NodeSnapshot, index: int) -> DeviceSnapshot:
    return next(d for d in snapshot.devices if d.index == index)


def _kernel_log_hint(device: DeviceSnapshot) -> str:
    log = "dmesg -T | grep -i -e NVRM -e Xid" if device.vendor == Vendor.NVIDIA else "dmesg -T | grep -i amdgpu"
    return (f"Check the kernel log (`{log}`) for errors logged during the test, reset the GPU "
            f"(`{reset_command(device)}`) and run the test again; an error that comes back on the same GPU is an "
            f"RMA case.")


# Errors that say the test could not run here (missing library, a kernel the runtime would not load, a deadline)
# rather than that the GPU failed it: those are `unknown`; any other runtime error under load is a `fail`.
_SETUP_CALLS = ("load", "cuInit", "hipInit", "cuModuleLoadDataEx", "hiprtc", "SYMBOL_NOT_FOUND")
# Errors that stop every load test of the GPU, not one: the runtime library would not load or initialise
# (active/binding.load_library, the runtimes' cuInit / hipInit), so the GPU's results all say the one thing.
_RUNTIME_WIDE = (".load", ".cuInit", ".hipInit")

# The runtime library that is not installed: where it comes from (Debian's and Ubuntu's names from their driver
# packages, nvidia-graphics-drivers: libcuda1 / libnvidia-tesla-<branch>-cuda1 and libnvidia-compute-<branch>;
# NVIDIA's RHEL repository: nvidia-driver-cuda-libs; the NVIDIA Container Toolkit mounts libcuda only for the
# `compute` capability, `utility` being NVML and nvidia-smi alone. ROCm: hip-runtime-amd carries libamdhip64 and
# libhiprtc under /opt/rocm/lib).
_INSTALL_RUNTIME = {
    Vendor.NVIDIA: (
        "libcuda.so.1 is the NVIDIA driver's own user-space library and must be the kernel module's version "
        "(driver.version; nvidia-smi shows it): install the driver's compute libraries (Ubuntu: "
        "libnvidia-compute-<branch>, <branch> being the driver's major version, or its -server flavour; Debian: "
        "libcuda1 or libnvidia-tesla-<branch>-cuda1; RHEL and its rebuilds, from NVIDIA's repository: "
        "nvidia-driver-cuda-libs). In a container, ask the NVIDIA Container Toolkit for them: "
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility (utility alone brings NVML and nvidia-smi, not libcuda). Confirm "
        "with `ldconfig -p | grep libcuda.so.1`, then run the load tests again."),
    Vendor.AMD: (
        "libamdhip64.so and libhiprtc.so are ROCm's HIP runtime: install the hip-runtime-amd package of the ROCm "
        "release that matches the amdgpu driver, and let the loader find /opt/rocm/lib (a file in "
        "/etc/ld.so.conf.d/ naming it, then `ldconfig`); a container image must carry them itself. Confirm with "
        "`ldconfig -p | grep -e libamdhip64 -e libhiprtc`, then run the load tests again."),
}


def _setup_remediation(device: DeviceSnapshot, error: ProbeError) -> str:
    """What to do about a test that could not run: the remedy for its cause, not every remedy there is."""
    if error.kind == ErrorKind.NOT_FOUND and error.source.endswith(".load"):
        return _INSTALL_RUNTIME[device.vendor]
    if error.kind == ErrorKind.TIMEOUT:
        return "Give the run more time (--timeout): the deadline stopped it before it could finish."
    return ("The driver's user-space runtime (libcuda.so.1 / libamdhip64.so, libhiprtc.so) must match the kernel "
            "driver; see the error for the call that failed.")


def _not_judged(check_id: str, device: DeviceSnapshot, what: str, error: ProbeError) -> CheckResult:
    """A test that ended with `error` and no figure to judge."""
    setup = error.kind != ErrorKind.ERROR or any(word in f"{error.source} {error.message}" for word in _SETUP_CALLS)
    observed = {"error": f"{error.source}: {error.message}"}
    if setup:
        if error.source.endswith(_RUNTIME_WIDE):
            # said alike by every load test of every GPU it stopped: one finding (report/grouping.py)
            return unknown(check_id, device, f"{device.label}: the load tests could not run: {error.message}",
                           observed=observed, expected="the GPU runtime loads and initialises",
                           remediation=_setup_remediation(device, error))
        return unknown(check_id, device, f"{device.label}: the {what} could not run: {error.message}",
                       observed=observed, expected=f"the {what} completes",
                       remediation=_setup_remediation(device, error))
    return failed(check_id, device, f"{device.label} failed under load: {error.message}", observed=observed,
                  expected=f"the {what} completes without a runtime error", remediation=_kernel_log_hint(device))


def _for_each(snapshot: NodeSnapshot, check_id: str, test: str, field_name: str,
              judge: Callable[[DeviceSnapshot, Any], CheckResult]) -> list[CheckResult]:
    """One result per GPU the load tests considered: skipped ones say why, unfinished ones are unknown."""
    active = snapshot.active
    if active is None:
        return [skipped(check_id, None, "load tests were not run (gpudiag check --level 2 runs them)")]
    if test not in active.tests:
        return [skipped(check_id, None, f"the {test} load test was not requested")]
    if not active.devices:
        why = "; ".join(e.message for e in active.errors) or "no GPU to test"
        return [skipped(check_id, None, f"no GPU was load-tested: {why}")]
    results = []
    for entry in active.devices:
        device = _device(snapshot, entry.index)
        result = getattr(entry, field_name)
        if entry.skipped:
            results.append(skipped(check_id, device, f"{device.label} was not load-tested: {entry.skipped}"))
        elif result is None:
            why = "; ".join(e.message for e in active.errors) or "the load tests ended before it ran"
            results.append(unknown(check_id, device, f"{device.label}: the {test} test did not complete: {why}",
                                   observed=None, expected=f"the {test} test completes",
                                   remediation=_kernel_log_hint(device)))
        else:
            results.append(judge(device, result))
    return results


def _rise(before: Optional[int], after: Optional[int]) -> int:
    """How much a counter rose across a test (0 when either reading is missing)."""
    return after - before if before is not None and after is not None and after > before else 0
