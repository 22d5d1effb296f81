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


def _not_judged(check_id: str, device: DeviceSnapshot, what: str, error: ProbeError) -> CheckResult:
    """A test that ended with `error` and no figure to judge."""
    setup = error.kind != ErrorKind.ERROR or any(word in f"{error.source} {error.message}" for word in _SETUP_CALLS)
    observed = {"error": f"{error.source}: {error.message}"}
    if setup:
        return unknown(check_id, device, f"{device.label}: the {what} could not run: {error.message}",
                       observed=observed, expected=f"the {what} completes",
                       remediation=("Give the run more time (--timeout) if the deadline stopped it. Otherwise the "
                                    "driver's user-space runtime (libcuda.so.1 / libamdhip64.so, libhiprtc.so) must "
                                    "be installed and match the kernel driver; see the error for the call that "
                                    "failed."))
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
