"""Driving any probe backend the way the collector does (open, every device, every pair, close), minus the
threads and deadlines: for backend tests that look at what a backend fills, not at how it is scheduled."""

from __future__ import annotations

from dataclasses import dataclass

from gpudiag.model import BackendInfo, DeviceSnapshot, PeerLink
from gpudiag.probe.base import Backend
from gpudiag.probe.deadline import CallTracker


@dataclass
class Driven:
    info: BackendInfo
    devices: list[DeviceSnapshot]
    peers: list[PeerLink]


def drive(backend: Backend) -> Driven:
    info = backend.open(CallTracker())
    devices = [backend.probe_device(i, CallTracker()) for i in range(backend.device_count())] if info.available else []
    peers = backend.probe_peers(devices, CallTracker())
    backend.close()
    return Driven(info, devices, peers)
