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


def place_unidentified(devices: list[DeviceSnapshot], pci_gpus: list) -> None:
    """Give a device lost before its bus ID was ever read the bus ID of the GPU it must be.

    NVML answers GPU_IS_LOST to nvmlDeviceGetPciInfo for a GPU that fell off the bus before gpudiag first read it,
    while the kernel still lists the function on the PCI bus: without this the node shows one GPU twice, "GPU 4
    (unknown bus)" and an anonymous GPU on the bus, and neither says which GPU to pull. By elimination: the GPUs of
    the vendor on the bus that no device claims are the devices of that vendor without a bus ID. One of each is the
    same GPU. Several are paired in order only where the whole node's index order is then its bus order (NVML
    enumerates by PCI bus ID, but documents no guarantee), so that no pairing is made against what the node shows.
    """
    claimed = {d.pci_bus_id for d in devices if d.pci_bus_id} | {
        d.physical_pci_bus_id for d in devices if d.physical_pci_bus_id}
    for vendor in {d.vendor for d in devices}:
        mine = [d for d in devices if d.vendor == vendor]
        unplaced = sorted((d for d in mine if not d.pci_bus_id), key=lambda d: d.index)
        free = sorted(p.pci_bus_id for p in pci_gpus if p.vendor == vendor and p.pci_bus_id not in claimed)
        if not unplaced or len(unplaced) != len(free):
            continue
        if len(unplaced) > 1:
            pairs = dict(zip((d.index for d in unplaced), free))
            by_index = [pairs.get(d.index, d.pci_bus_id) for d in sorted(mine, key=lambda d: d.index)]
            if by_index != sorted(by_index):
                continue
        for device, bus_id in zip(unplaced, free):
            device.pci_bus_id = bus_id
