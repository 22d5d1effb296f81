"""Stand-ins for what a deadline cut short: the probe error that says why, and the device that could not be read
(keeping whatever identity was read before it stopped answering)."""

from __future__ import annotations

from gpudiag.model import DeviceSnapshot, ErrorKind, ProbeError, Vendor
from gpudiag.probe.deadline import Outcome


def outcome_error(source: str, outcome: Outcome) -> ProbeError:
    if not outcome.started:
        return ProbeError(source=source, kind=ErrorKind.TIMEOUT,
                          message="not probed: the deadline passed while earlier devices were probed")
    if not outcome.done:
        hung_in = outcome.tracker.current or "the backend"
        return ProbeError(
            source=source,
            kind=ErrorKind.TIMEOUT,
            message=f"no answer within the deadline (hung in {hung_in} after {outcome.elapsed_seconds:.1f}s)",
        )
    error = outcome.error
    kind = ErrorKind.NO_PERMISSION if isinstance(error, PermissionError) else ErrorKind.ERROR
    return ProbeError(source=source, kind=kind, message=f"{type(error).__name__}: {error}")


def _identity_of(index: int, vendor: Vendor, source: str, outcome: Outcome) -> DeviceSnapshot:
    """A stand-in for a device that could not be probed, keeping whatever identity was read before it stopped."""
    device = DeviceSnapshot(index=index, vendor=vendor, source=source, reachable=False)
    partial = outcome.tracker.partial
    if isinstance(partial, DeviceSnapshot):
        for name in ("pci_bus_id", "uuid", "name", "serial"):
            setattr(device, name, getattr(partial, name))
    return device


def unreachable_device(vendor: Vendor, source: str, index: int, outcome: Outcome, still_hung: bool = False):
    device = _identity_of(index, vendor, source, outcome)
    error = outcome_error(f"{source}.device", outcome)
    if still_hung:
        error.message = f"a call from an earlier collection is still hung ({outcome.tracker.current or 'unknown call'})"
    device.errors.append(error)
    return device


def lost_device(vendor: Vendor, source: str, index: int, outcome: Outcome) -> DeviceSnapshot:
    device = _identity_of(index, vendor, source, outcome)
    device.errors.append(ProbeError(source=f"{source}.device", kind=ErrorKind.GPU_LOST, message=str(outcome.error)))
    return device
