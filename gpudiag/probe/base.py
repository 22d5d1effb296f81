"""The contract every vendor backend (NVML, amdsmi, amdgpu sysfs) fulfils for the collector."""

from __future__ import annotations

from typing import Protocol

from gpudiag.model import BackendInfo, DeviceSnapshot, PeerLink, Vendor
from gpudiag.probe.deadline import CallTracker


class DeviceLost(Exception):
    """Raised inside a backend's device probe when the device stops answering (NVML GPU_IS_LOST, amdsmi
    AMDGPU_RESTART_ERR …): the rest of that device's probe is pointless."""


class Backend(Protocol):
    name: str  # "nvml" | "amdsmi" | "amdgpu-sysfs"
    vendor: Vendor

    def open(self, tracker: CallTracker) -> BackendInfo:
        """Load and initialise the library. Never raises: failure is `available=False` with an `error`.
        Runs under a deadline (see collect)."""

    def device_count(self) -> int:
        """Devices the library enumerates (after a successful open)."""

    def probe_device(self, index: int, tracker: CallTracker) -> DeviceSnapshot:
        """Everything about one device. Runs on its own thread under the collection deadline; calls
        `tracker.enter(name)` / `tracker.leave()` around each vendor call so that a hang can be named.
        NotSupported becomes None; other per-field failures become `ProbeError`s in `device.errors`;
        a lost device raises DeviceLost (or returns with `reachable=False`)."""

    def probe_peers(self, devices: list[DeviceSnapshot], tracker: CallTracker) -> list[PeerLink]:
        """Topology and P2P status for each pair of reachable devices."""

    def close(self) -> None:
        """Shut the library down, unless a call is still hung in it."""

