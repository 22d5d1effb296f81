"""Healthy node snapshots to break in tests: 2x NVIDIA H200 on NVLink, and 8x AMD MI300X on XGMI.

Each builder returns a fresh snapshot, so a test mutates it freely (`snap.devices[0].pcie.current_width = 8`).
Values follow what the probes report on such nodes (units in field names, as in gpudiag.model).
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks import run_checks
from gpudiag.checks.verdicts import is_internal_error
from gpudiag.expect import Expectations
from gpudiag.model import (
    BackendInfo,
    CheckResult,
    ClockInfo,
    DeviceSnapshot,
    EccInfo,
    GpuLink,
    GpuProcess,
    HostInfo,
    KernelEvent,
    KernelLogInfo,
    MemoryHealth,
    MemoryUsage,
    NodeSnapshot,
    PciGpu,
    PcieInfo,
    PeerLink,
    PowerInfo,
    Status,
    TemperatureSensor,
    Utilization,
    Vendor,
)

GIB = 1024**3
MIB = 1024**2

NVIDIA_DRIVER = "560.35.03"
H200_BUS_IDS = ("0000:19:00.0", "0000:3b:00.0")
MI300X_BUS_IDS = ("0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0",
                  "0000:85:00.0", "0000:a6:00.0", "0000:c6:00.0", "0000:e5:00.0")


def _aer_clean() -> dict[str, dict[str, int]]:
    return {"correctable": {"Receiver Error": 0, "Bad TLP": 0, "Bad DLLP": 0, "RELAY_NUM Rollover": 0,
                            "Replay Timer Timeout": 0, "TOTAL_ERR_COR": 0},
            "nonfatal": {"Undefined": 0, "Completion Timeout": 0, "TOTAL_ERR_NONFATAL": 0},
            "fatal": {"Undefined": 0, "Surprise Down Error": 0, "TOTAL_ERR_FATAL": 0}}


def _upstream_of(bus_id: str) -> str:
    bus = int(bus_id[5:7], 16)
    return f"0000:{bus - 1:02x}:01.0"


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA: 2x H200 SXM, NVLink 4 (18 links each), PCIe Gen5 x16 behind a Gen5 switch, busy with a training job.
# Memory sizes, BAR1 and power limits as the lab's H200s answered NVML (tests/fixtures/h200x2/nvml-survey.json); other
# values are of the same kind. The exporter tests read this fixture too: they pin driver, VBIOS, slowdown, histogram.


def _h200(index: int, bus_id: str) -> DeviceSnapshot:
    numa = index  # one GPU per socket
    return DeviceSnapshot(
        index=index, vendor=Vendor.NVIDIA, source="nvml", pci_bus_id=bus_id,
        uuid=f"GPU-5c1e2f3a-0000-4000-8000-00000000000{index}", name="NVIDIA H200", serial=f"165092400000{index}",
        architecture="hopper", board_part_number="692-2G520-0282-000", minor_number=index,
        vbios_version="96.00.9F.00.01",
        firmware_versions={"image": "G520.0282.02.02", "oem": "2.1", "ecc": "7.16"},
        pcie=PcieInfo(current_generation=5, current_width=16, max_generation=5, max_width=16,
                      device_max_generation=5, device_max_width=16, replay_count=0, replay_rollover_count=0,
                      tx_kbytes_per_second=1200, rx_kbytes_per_second=8400),
        ecc=EccInfo(enabled=True, pending_enabled=True, volatile_corrected=0, volatile_uncorrected=0,
                    aggregate_corrected=3, aggregate_uncorrected=0),
        memory_health=MemoryHealth(remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remap_pending=False,
                                   remap_failure=False,
                                   remap_histogram={"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0}),
        temperatures={"gpu": TemperatureSensor(47.0, slowdown_celsius=90.0, shutdown_celsius=95.0,
                                               max_operating_celsius=87.0),
                      "memory": TemperatureSensor(52.0, max_operating_celsius=95.0)},
        power=PowerInfo(draw_watts=585.4, limit_watts=700.0, default_limit_watts=700.0, min_limit_watts=200.0,
                        max_limit_watts=700.0, energy_joules=9.1e8),
        clocks=ClockInfo(graphics_mhz=1980, sm_mhz=1980, memory_mhz=2619, max_graphics_mhz=1980, max_sm_mhz=1980,
                         max_memory_mhz=2619, throttle_reasons=[], throttle_reasons_mask=0, performance_state=0),
        # NVML v2 memory info: `used` leaves the driver-reserved memory out.
        memory=MemoryUsage(total_bytes=143771 * MIB, used_bytes=60 * GIB, reserved_bytes=615 * MIB,
                           bar1_total_bytes=256 * GIB, bar1_used_bytes=18 * MIB),
        utilization=Utilization(gpu_percent=97, memory_percent=41),
        persistence_mode=True, compute_mode="default", mig_enabled=False, mig_pending_enabled=False,
        links=[GpuLink(i, "nvlink", up=True, version=4, remote_pci_bus_id=f"0000:{0x80 + i % 4:02x}:00.0",
                       remote_device_type="switch",
                       error_counters={"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0})
               for i in range(18)],
        numa_node=numa, cpu_affinity=list(range(numa * 48, numa * 48 + 48)),
        processes=[GpuProcess(pid=41230 + index, kind="compute", used_memory_bytes=60 * GIB, name="python3",
                              user="train", cpu_percent=180.0)],
    )


def nvidia_h200_node() -> NodeSnapshot:
    devices = [_h200(i, bus) for i, bus in enumerate(H200_BUS_IDS)]
    pci_gpus = [PciGpu(pci_bus_id=bus, vendor=Vendor.NVIDIA, vendor_id="0x10de", device_id="0x2335",
                       class_code="0x030200", driver="nvidia", current_link_generation=5, current_link_width=16,
                       max_link_generation=5, max_link_width=16, upstream_pci_bus_id=_upstream_of(bus),
                       upstream_max_link_generation=5, upstream_max_link_width=16, aer=_aer_clean(), numa_node=i,
                       local_cpulist=f"{i * 48}-{i * 48 + 47}", iommu_group=20 + i, iommu_domain_type="identity",
                       bar_sizes_bytes={0: 64 * MIB, 1: 256 * GIB, 3: 32 * MIB})
                for i, bus in enumerate(H200_BUS_IDS)]
    return NodeSnapshot(
        hostname="h200-node-01", collected_at="2026-11-30T11:00:00Z", gpudiag_version="0.1.0",
        backends=[BackendInfo("nvml", Vendor.NVIDIA, available=True, library_version=f"12.{NVIDIA_DRIVER}",
                              driver_version=NVIDIA_DRIVER, runtime_version="12.6", device_count=2),
                  BackendInfo("amdsmi", Vendor.AMD, available=False, error=None)],
        devices=devices,
        peers=[PeerLink(0, 1, path="nvlink", p2p_read="ok", p2p_write="ok", p2p_nvlink="ok", p2p_atomics="ok",
                        link_count=18)],
        pci_gpus=pci_gpus,
        host=HostInfo(hostname="h200-node-01", kernel_release="6.8.0-45-generic",
                      kernel_cmdline="BOOT_IMAGE=/vmlinuz ro iommu=pt", os_name="Ubuntu 24.04.1 LTS",
                      modules_loaded={"nvidia": NVIDIA_DRIVER, "nvidia_uvm": NVIDIA_DRIVER,
                                      "nvidia_drm": NVIDIA_DRIVER},
                      nvidia_proc_version=NVIDIA_DRIVER, iommu_enabled=True, iommu_cmdline={"iommu": "pt"},
                      cpu_count=96, cpu_percent=30.0, per_cpu_percent=[30.0] * 96, load_average=[28.0, 27.5, 27.1],
                      memory_total_bytes=2048 * GIB, memory_available_bytes=1700 * GIB, boot_time=1.7e9,
                      numa_nodes=2),
        kernel_log=KernelLogInfo(source="/dev/kmsg", readable=True, lines_scanned=4210),
    )


# ---------------------------------------------------------------------------------------------------------------
# AMD: 8x MI300X (OAM, SPX/NPS1), XGMI fully connected (7 links each), PCIe Gen5 x16, idle, amdgpu-dkms.

AMDGPU_DKMS = "6.10.5"


def _mi300x(index: int, bus_id: str) -> DeviceSnapshot:
    numa = index // 4
    return DeviceSnapshot(
        index=index, vendor=Vendor.AMD, source="amdsmi", pci_bus_id=bus_id,
        uuid=f"a7ff74a1-0000-4000-8000-00000000000{index}", name="AMD Instinct MI300X", serial=f"692251000{index}",
        architecture="gfx942", board_part_number="113-M3000100-102",
        vbios_version="113-M3000100-102",
        firmware_versions={"SMC": "85.120.0", "PSP_SOSDRV": "00.36.02.59", "TA_XGMI": "00.1A.00.22", "RLC": "177"},
        pcie=PcieInfo(current_generation=5, current_width=16, max_generation=5, max_width=16,
                      device_max_generation=5, device_max_width=16, replay_count=0, replay_rollover_count=0,
                      error_counters={"nak_sent": 0, "nak_received": 0}),
        ecc=EccInfo(enabled=True, volatile_corrected=0, volatile_uncorrected=0, deferred=0,
                    by_block={"umc": {"corrected": 0, "uncorrected": 0, "deferred": 0},
                              "gfx": {"corrected": 0, "uncorrected": 0, "deferred": 0}}),
        memory_health=MemoryHealth(bad_pages_reserved=0, bad_pages_pending=0, bad_pages_unreservable=0,
                                   bad_page_threshold=128),
        temperatures={"hotspot": TemperatureSensor(41.0, slowdown_celsius=105.0, shutdown_celsius=110.0),
                      "vram": TemperatureSensor(36.0, slowdown_celsius=105.0, shutdown_celsius=110.0),
                      "hbm0": TemperatureSensor(35.0)},
        power=PowerInfo(draw_watts=142.0, limit_watts=750.0, default_limit_watts=750.0, min_limit_watts=0.0,
                        max_limit_watts=750.0),
        clocks=ClockInfo(graphics_mhz=132, memory_mhz=900, max_graphics_mhz=2100, max_memory_mhz=1300,
                         throttle_reasons=[]),
        memory=MemoryUsage(total_bytes=192 * GIB, used_bytes=283 * MIB),
        utilization=Utilization(gpu_percent=0, memory_percent=0),
        compute_partition="SPX", memory_partition="NPS1", xgmi_error_status="no_errors",
        links=[GpuLink(i, "xgmi", up=True, remote_pci_bus_id=peer, remote_device_type="gpu")
               for i, peer in enumerate(b for b in MI300X_BUS_IDS if b != bus_id)],
        numa_node=numa, cpu_affinity=list(range(numa * 64, numa * 64 + 64)),
        processes=[],
    )


def amd_mi300x_node() -> NodeSnapshot:
    devices = [_mi300x(i, bus) for i, bus in enumerate(MI300X_BUS_IDS)]
    pci_gpus = [PciGpu(pci_bus_id=bus, vendor=Vendor.AMD, vendor_id="0x1002", device_id="0x74a1",
                       class_code="0x120000", driver="amdgpu", current_link_generation=5, current_link_width=16,
                       max_link_generation=5, max_link_width=16, upstream_pci_bus_id=_upstream_of(bus),
                       upstream_max_link_generation=5, upstream_max_link_width=16, aer=_aer_clean(),
                       numa_node=i // 4, local_cpulist=f"{i // 4 * 64}-{i // 4 * 64 + 63}", iommu_group=40 + i,
                       iommu_domain_type="identity", bar_sizes_bytes={0: 256 * GIB, 2: 2 * MIB, 5: 1 * MIB})
                for i, bus in enumerate(MI300X_BUS_IDS)]
    peers = [PeerLink(a, b, path="xgmi", p2p_read="ok", p2p_write="ok", p2p_atomics="ok", link_count=1)
             for a in range(8) for b in range(a + 1, 8)]
    return NodeSnapshot(
        hostname="mi300x-node-07", collected_at="2026-11-30T11:00:00Z", gpudiag_version="0.1.0",
        backends=[BackendInfo("nvml", Vendor.NVIDIA, available=False),
                  BackendInfo("amdsmi", Vendor.AMD, available=True, library_version="25.3.0",
                              driver_version=AMDGPU_DKMS, runtime_version="6.4.1", device_count=8),
                  BackendInfo("amdgpu-sysfs", Vendor.AMD, available=True, device_count=8)],
        devices=devices, peers=peers, pci_gpus=pci_gpus,
        host=HostInfo(hostname="mi300x-node-07", kernel_release="6.8.0-45-generic",
                      kernel_cmdline="BOOT_IMAGE=/vmlinuz ro amd_iommu=on iommu=pt", os_name="Ubuntu 22.04.5 LTS",
                      modules_loaded={"amdgpu": AMDGPU_DKMS}, iommu_enabled=True,
                      iommu_cmdline={"amd_iommu": "on", "iommu": "pt"}, cpu_count=128, cpu_percent=2.0,
                      per_cpu_percent=[2.0] * 128, numa_nodes=2, memory_total_bytes=1536 * GIB),
        kernel_log=KernelLogInfo(source="/dev/kmsg", readable=True, lines_scanned=5120),
    )


def cpx_partitioned(snapshot: NodeSnapshot, partitions: int = 8) -> NodeSnapshot:
    """The same AMD node in CPX mode: each physical GPU shows as `partitions` logical GPUs; the first stands for
    the physical device, the others point at it by physical_pci_bus_id (on functions .1–.7 in this fixture)."""
    devices: list[DeviceSnapshot] = []
    for physical in snapshot.devices:
        physical.compute_partition = "CPX"
        physical.physical_pci_bus_id = physical.pci_bus_id
        for part in range(partitions):
            bus_id = physical.pci_bus_id[:-1] + str(part)
            logical = DeviceSnapshot(**{**physical.__dict__, "pci_bus_id": bus_id, "partition_id": part})
            devices.append(logical)
    for index, device in enumerate(devices):
        device.index = index
    snapshot.devices = devices
    return snapshot


# ---------------------------------------------------------------------------------------------------------------
# Test helpers


def run(snapshot: NodeSnapshot, check_id: str, expect: Optional[Expectations] = None) -> list[CheckResult]:
    return run_checks(snapshot, expect, only=[check_id])


def for_gpu(results: list[CheckResult], index: int) -> CheckResult:
    (result,) = [r for r in results if r.device is not None and r.device.index == index]
    return result


def node_level(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.device is None]


def statuses(results: list[CheckResult]) -> set[Status]:
    return {r.status for r in results}


def assert_actionable(result: CheckResult, status: Status) -> None:
    """The result has the status, and says what was seen, what was expected and what to do."""
    assert result.status == status, (result.status, result.message)
    assert not is_internal_error(result), result.message  # an `unknown` from a crash is not the unknown meant
    assert result.message
    assert result.observed is not None and result.expected is not None, result
    assert result.remediation.strip(), result


def xid_event(bus_id: Optional[str], code: int, message: str = "") -> KernelEvent:
    return KernelEvent(Vendor.NVIDIA, "xid", message or f"NVRM: Xid (PCI:{bus_id}): {code}, pid=1234, name=python3",
                       pci_bus_id=bus_id, code=code)


def amdgpu_event(bus_id: Optional[str], kind: str, message: str = "") -> KernelEvent:
    return KernelEvent(Vendor.AMD, kind, message or f"amdgpu {bus_id}: amdgpu: {kind}", pci_bus_id=bus_id)
