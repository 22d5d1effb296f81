"""What the checks concluded."""

from __future__ import annotations

from typing import Any, Optional

from gpudiag.model.common import Status, Vendor
from gpudiag.model.device import DeviceSnapshot
from gpudiag.model.records import dataclass


@dataclass
class DeviceRef:
    """Which GPU a check result is about (index, UUID, bus ID, vendor, model)."""
    index: int
    uuid: Optional[str]
    pci_bus_id: Optional[str]
    vendor: Vendor
    model: Optional[str]

    @classmethod
    def of(cls, device: DeviceSnapshot) -> "DeviceRef":
        return cls(device.index, device.uuid, device.pci_bus_id, device.vendor, device.name)


@dataclass
class CheckResult:
    """One check's verdict on the node or one GPU, with what was seen, what was expected and what to do."""
    check: str  # stable dotted ID, e.g. "pcie.link_generation"
    status: Status
    message: str
    device: Optional[DeviceRef] = None
    observed: Any = None
    expected: Any = None
    remediation: str = ""
    # What automation should do with the GPU (or node): "none" | "watch" | "drain" | "reset" | "reboot" | "rma",
    # and a stable code naming the fault ("GPUDIAG-PCIE-DOWNTRAINED"). Set by gpudiag.checks.verdicts.
    action: Optional[str] = None
    fault_code: Optional[str] = None
    # When the service first saw this check in this state (ISO 8601 UTC), for a check answered through it.
    since: Optional[str] = None
