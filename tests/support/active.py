"""Shared by the active-diagnostics tests: snapshots of idle GPUs, fast options, and installing the fake runtimes
at the ctypes boundary."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

from gpudiag.active import ActiveOptions
from gpudiag.model import (
    ClockInfo,
    DeviceSnapshot,
    EccInfo,
    GpuProcess,
    MemoryUsage,
    NodeSnapshot,
    PowerInfo,
    TemperatureSensor,
    Utilization,
    Vendor,
)
from tests.support.fakes.gpu_sim import SimDevice, patch_cdll
from tests.support.fakes.libamdhip import FakeHip, FakeHiprtc
from tests.support.fakes.libcuda import FakeCuda

BUS_IDS = ("0000:3b:00.0", "0000:5e:00.0")


def idle_device(index: int, vendor: Vendor = Vendor.NVIDIA, **changes: Any) -> DeviceSnapshot:
    device = DeviceSnapshot(
        index=index, vendor=vendor, source="nvml" if vendor == Vendor.NVIDIA else "amdsmi",
        pci_bus_id=BUS_IDS[index], name="NVIDIA H200" if vendor == Vendor.NVIDIA else "AMD Instinct MI300X",
        processes=[], utilization=Utilization(gpu_percent=0, memory_percent=0),
        memory=MemoryUsage(total_bytes=4 * 1024**2, used_bytes=0, reserved_bytes=0),
        ecc=EccInfo(enabled=True, volatile_corrected=3, volatile_uncorrected=0),
    )
    return dataclasses.replace(device, **changes)


def snapshot_of(*devices: DeviceSnapshot) -> NodeSnapshot:
    return NodeSnapshot(hostname="node1", devices=list(devices))


def sim_devices(count: int = 2, **changes: Any) -> list[SimDevice]:
    """Devices as the runtime names them (uppercase hex, like cuDeviceGetPCIBusId), linked to each other."""
    return [SimDevice(BUS_IDS[i].upper(), peer_gbps={1 - i: 370.0 - 10 * i} if count == 2 else {}, **changes)
            for i in range(count)]


def fast_options(**changes: Any) -> ActiveOptions:
    """Small sizes and short times so that the simulated GPUs answer in milliseconds; progress kept for asserts."""
    base = dict(copy_bytes=256 * 1024, p2p_bytes=256 * 1024, copy_repeats=4, copy_batches=2,
                memtest_chunk_bytes=1024**2, memtest_passes=2, stress_seconds=0.2, stress_launch_ms=5.0,
                sample_interval_seconds=0.05, grace_seconds=5.0, progress=io.StringIO())
    base.update(changes)
    return ActiveOptions(**base)


def install_cuda(monkeypatch: Any, devices: list[SimDevice], **kwargs: Any) -> FakeCuda:
    fake = FakeCuda(devices, **kwargs)
    patch_cdll(monkeypatch, {"libcuda.so": fake})
    return fake


def install_hip(monkeypatch: Any, devices: list[SimDevice], **kwargs: Any) -> tuple[FakeHip, FakeHiprtc]:
    hip = FakeHip(devices, **kwargs)
    hiprtc = FakeHiprtc(hip)
    patch_cdll(monkeypatch, {"libamdhip64.so": hip, "libhiprtc.so": hiprtc})
    return hip, hiprtc


def live_reader(throttle: list[str] | None = None, sm_mhz: int = 1980, ecc_corrected: int = 3,
                ecc_uncorrected: int = 0):
    """A DeviceReader answering fixed live sensors (what the NVML backend would read during the load)."""
    def read(device: DeviceSnapshot) -> DeviceSnapshot:
        return dataclasses.replace(
            device,
            clocks=ClockInfo(sm_mhz=sm_mhz, memory_mhz=3201, max_sm_mhz=1980, throttle_reasons=list(throttle or [])),
            temperatures={"gpu": TemperatureSensor(current_celsius=61.0, slowdown_celsius=87.0)},
            power=PowerInfo(draw_watts=655.0, limit_watts=700.0),
            ecc=EccInfo(enabled=True, volatile_corrected=ecc_corrected, volatile_uncorrected=ecc_uncorrected),
        )
    return read


def busy_process(pid: int = 4242) -> GpuProcess:
    return GpuProcess(pid=pid, kind="compute", used_memory_bytes=30 * 1024**3, name="python", user="alice")
