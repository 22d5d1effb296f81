"""Driving NvmlBackend over the fake libnvidia-ml the way the collector does (open, every device, every pair,
close), for the NVML probe tests."""

from __future__ import annotations

from dataclasses import dataclass

from gpudiag.model import BackendInfo, DeviceSnapshot, PeerLink
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.backend import NvmlBackend
from tests.support.fakes.fake_nvml import FakeGpu, FakeNode, installed
from tests.support.fakes.fake_nvml_lib import FakeNvmlLib


@dataclass
class Probed:
    info: BackendInfo
    devices: list[DeviceSnapshot]
    peers: list[PeerLink]
    lib: FakeNvmlLib


def probe(node: FakeNode) -> Probed:
    """Open, probe every device and every pair, close — as the collector does, minus the threads."""
    with installed(node) as lib:
        backend = NvmlBackend()
        info = backend.open(CallTracker())
        devices = [backend.probe_device(i, CallTracker()) for i in range(backend.device_count())]
        peers = backend.probe_peers(devices, CallTracker())
        backend.close()
    return Probed(info, devices, peers, lib)


def probe_one(gpu: FakeGpu) -> DeviceSnapshot:
    """The snapshot of a node holding only `gpu` (which then has no NVLink)."""
    result = probe(FakeNode(gpus=[gpu]))
    assert result.devices[0].reachable
    return result.devices[0]
