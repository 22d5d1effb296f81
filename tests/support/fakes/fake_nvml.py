"""A fake NVIDIA node for tests, served through the real pynvml bindings.

The fake replaces the NVML *C library* (`pynvml.nvmlLib`, docs/vendor-api.md §13), so every pynvml quirk — versioned
symbols, byref out-parameters, struct layouts, str/bytes conversion, the NVML_P2P_CAPS_INDEX_READ tuple — is
exercised exactly as on a real machine. The C functions live in `fake_nvml_lib`; this module holds the data.

    node = FakeNode.hgx_h200(2)
    node.gpus[1].pcie_downtrained(generation=3, width=8)
    with installed(node) as lib:
        ...  # pynvml / NvmlBackend now talk to `node`; lib.calls counts the C calls

Defaults describe a healthy NVIDIA H200 SXM as `nvidia-smi -q` reports it. Faults are plain fields or the small
methods below (each returns the GPU, for chaining).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Iterator, Optional
from unittest import mock

import pynvml

MiB = 1024 * 1024

# HGX H200 (8 GPUs): NVML bus IDs as NVML prints them (8-digit domain, upper case) and the 4 NVSwitches.
HGX_BUS_IDS = ("00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
               "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0")
NVSWITCH_BUS_IDS = ("00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0")
H200_NVLINKS = 18

# Clock-event reason bits (nvmlClocksEventReason*). A hardware slowdown of either kind also sets HwSlowdown.
REASON_GPU_IDLE = 0x1
REASON_HW_SLOWDOWN = 0x8
REASON_HW_THERMAL_SLOWDOWN = 0x40
REASON_HW_POWER_BRAKE = 0x80

# Power samples: timestamps in µs of Unix time, as the lab H100's were (2026-12-06 03:26), one every 20 ms.
POWER_SAMPLES_START_US = 1_796_527_554_000_000
POWER_SAMPLE_PERIOD_US = 20_000


@dataclass
class FakeNvLink:
    up: bool = True
    remote_bus_id: str = NVSWITCH_BUS_IDS[0]
    remote_type: int = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    version: int = 4  # NVLink 4 (Hopper)
    # "replay", "recovery", "crc_flit", "crc_data", "ecc_data" → count (missing: 0)
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeHealth:
    """What the driver says about the GPU's own health (R550+: recovery action, unrepairable memory, SRAM ECC, the
    NVSwitch fabric). Defaults: the healthy answers recorded on the lab's H200s (tests/fixtures/h200/
    nvml-health-survey.json; the 2-GPU machine's `nvidia-smi -q` for the fabric)."""

    recovery_action: int = pynvml.NVML_GPU_RECOVERY_ACTION_NONE  # field 230 (field_errors[230] makes it unsupported)
    unrepairable_memory: int = 0
    # c_nvmlEccSramErrorStatus_v1_t member → value (missing: 0), e.g. {"aggregateUncParity": 2}
    sram: dict[str, int] = field(default_factory=dict)
    dram_corrected: int = 0  # fields 22/23: aggregate device-memory (DRAM) ECC counts
    dram_uncorrected: int = 0
    # nvmlGpuFabricState_t; None: decided by the node (COMPLETED where GPUs hang off NVSwitches, i.e. on multi-GPU
    # nodes; NOT_SUPPORTED on a lone GPU, as on the lab's 1x H200 VM slice)
    fabric_state: Optional[int] = None
    fabric_status: int = pynvml.NVML_SUCCESS  # nvmlReturn_t of the fabric setup
    fabric_health_mask: int = 0  # 0: every health field NOT_SUPPORTED (the lab's 580 driver on H200)
    fabric_health_summary: int = pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED
    fabric_struct_version: int = 3  # the newest nvmlGpuFabricInfo_v* this driver accepts (older: version mismatch)


@dataclass
class FakeGpu:
    # Identity and firmware
    bus_id: str = HGX_BUS_IDS[0]
    uuid: str = "GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a00"
    serial: str = "1654824000120"
    name: str = "NVIDIA H200"
    architecture: int = pynvml.NVML_DEVICE_ARCH_HOPPER
    board_part_number: str = "692-2G525-0200-000"
    minor_number: int = 0
    pci_device_id: int = 0x233510DE  # device << 16 | vendor
    pci_subsystem_id: int = 0x18B010DE
    vbios: str = "96.00.A5.00.01"
    # InfoROM objects: None → NOT_SUPPORTED (Hopper has no power object: nvidia-smi prints N/A)
    inforom: dict[str, Optional[str]] = field(default_factory=lambda: {
        "oem": "2.1", "ecc": "7.16", "power": None, "image": "G525.0200.00.05"})

    # PCIe link and counters
    pcie_generation: int = 5
    pcie_width: int = 16
    pcie_max_generation: int = 5
    pcie_max_width: int = 16
    pcie_gpu_max_generation: int = 5
    pcie_replays: int = 0
    pcie_replay_rollovers: int = 0
    pcie_counters: dict[int, int] = field(default_factory=dict)  # field ID (173–183, 169) → count; missing: 0

    # ECC ("single bit" = corrected, "double bit" = uncorrected in NVML's names)
    ecc_enabled: bool = True
    ecc_pending: bool = True
    ecc_volatile_corrected: int = 0
    ecc_volatile_uncorrected: int = 0
    ecc_aggregate_corrected: int = 0
    ecc_aggregate_uncorrected: int = 0

    # Row remapping (Ampere+) or page retirement (earlier); the other one answers NOT_SUPPORTED.
    row_remapping: bool = True
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    remap_histogram: tuple[int, int, int, int, int] = (2560, 0, 0, 0, 0)  # max, high, partial, low, none
    retired_pages: Optional[tuple[int, int, bool]] = None  # (single-bit, double-bit, pending)

    # Temperatures °C; thresholds by NVML_TEMPERATURE_THRESHOLD_*; None → NOT_SUPPORTED
    temperature: int = 27
    memory_temperature: Optional[int] = 32
    thresholds: dict[int, int] = field(default_factory=lambda: {
        pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 92,
        pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 89,
        pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: 87,
        pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: 95,
    })

    # Power in mW, energy in mJ
    power_mw: int = 74_312
    power_limit_mw: int = 700_000
    power_default_limit_mw: int = 700_000
    power_min_limit_mw: int = 200_000
    power_max_limit_mw: int = 700_000
    energy_mj: int = 98_765_432
    # The driver's power sample buffer (nvmlDeviceGetSamples, NVML_TOTAL_POWER_SAMPLES): (timestamp µs, mW), oldest
    # first. Empty: every read answers NVML_ERROR_NOT_FOUND (no sample newer than asked), as a buffer with none.
    power_samples: list[tuple[int, int]] = field(default_factory=list)
    power_sample_type: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT  # nvmlValueType_t the samples come back as

    # Clocks in MHz by NVML_CLOCK_*; an idle GPU reports the GpuIdle reason
    clock_event_reasons: int = REASON_GPU_IDLE
    clocks: dict[int, int] = field(default_factory=lambda: {
        pynvml.NVML_CLOCK_GRAPHICS: 345, pynvml.NVML_CLOCK_SM: 345, pynvml.NVML_CLOCK_MEM: 3201})
    max_clocks: dict[int, int] = field(default_factory=lambda: {
        pynvml.NVML_CLOCK_GRAPHICS: 1980, pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 3201})
    performance_state: int = 0
    # Time throttled since the driver loaded, ns, by field ID (perf-policy fields 74-81 and the R580 clock-event
    # fields 269-271), as the lab's H200 answered them (tests/fixtures/h200/nvml-health-survey.json: 78 low
    # utilisation and 80/81 below application/base clocks count, the rest 0). A missing ID answers NOT_SUPPORTED.
    throttle_ns: dict[int, int] = field(default_factory=lambda: {
        74: 0, 75: 0, 76: 0, 77: 0, 78: 23_678_421_568, 79: 0, 80: 14_276_011_904, 81: 14_276_011_904,
        269: 0, 270: 0, 271: 0})

    # Modes
    persistence: bool = True
    compute_mode: int = pynvml.NVML_COMPUTEMODE_DEFAULT
    mig: Optional[tuple[int, int]] = (0, 0)  # (current, pending); None → NOT_SUPPORTED

    # Memory in bytes (the v2 struct keeps the driver-reserved part out of `used`)
    memory_total: int = 143771 * MiB
    memory_reserved: int = 553 * MiB
    memory_used: int = 0
    bar1_total: int = 262144 * MiB
    bar1_used: int = 1 * MiB
    utilization: tuple[int, int] = (0, 0)  # gpu %, memory %

    numa_node: int = 0
    cpus: tuple[int, ...] = tuple(range(0, 32))
    compute_processes: list[tuple[int, Optional[int]]] = field(default_factory=list)  # (pid, used bytes)
    graphics_processes: list[tuple[int, Optional[int]]] = field(default_factory=list)
    mps_processes: list[tuple[int, Optional[int]]] = field(default_factory=list)  # MPS clients

    # None: decided by the node (18 links to NVSwitches when the node has several GPUs, none otherwise)
    nvlinks: Optional[list[FakeNvLink]] = None
    health: FakeHealth = field(default_factory=FakeHealth)

    # Faults
    lost: bool = False  # every call about this GPU answers NVML_ERROR_GPU_IS_LOST
    lose_after_calls: Optional[int] = None  # answers this many calls, then is lost
    unknown_after_lost: bool = False  # once lost, later calls answer NVML_ERROR_UNKNOWN (as after an Xid 79)
    hang: Optional[str] = None  # a C symbol that blocks until the node's `release` is set
    unsupported: set[str] = field(default_factory=set)  # C symbols answering NVML_ERROR_NOT_SUPPORTED
    failures: dict[str, int] = field(default_factory=dict)  # C symbol → NVML return code
    field_errors: dict[int, int] = field(default_factory=dict)  # field ID → per-field nvmlReturn

    def pcie_downtrained(self, generation: int = 4, width: int = 8) -> "FakeGpu":
        self.pcie_generation, self.pcie_width = generation, width
        return self

    def thermal_slowdown(self) -> "FakeGpu":
        slowdown = self.thresholds[pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN]
        self.temperature = slowdown + 2
        self.memory_temperature = self.thresholds[pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX] - 1
        self.clock_event_reasons = REASON_HW_THERMAL_SLOWDOWN | REASON_HW_SLOWDOWN
        self.clocks[pynvml.NVML_CLOCK_GRAPHICS] = self.clocks[pynvml.NVML_CLOCK_SM] = 1110
        return self

    def power_sampled(self, *milliwatts: int, period_us: int = POWER_SAMPLE_PERIOD_US) -> "FakeGpu":
        """The driver takes a power sample of each value, one every `period_us` after its newest (the first at
        POWER_SAMPLES_START_US), as the lab H100's buffer filled (a sample every ~20 ms)."""
        newest = self.power_samples[-1][0] if self.power_samples else POWER_SAMPLES_START_US - period_us
        for step, value in enumerate(milliwatts, start=1):
            self.power_samples.append((newest + step * period_us, value))
        return self

    def power_brake(self) -> "FakeGpu":
        self.clock_event_reasons = REASON_HW_POWER_BRAKE | REASON_HW_SLOWDOWN
        return self

    def nvlink_down(self, *links: int) -> "FakeGpu":
        assert self.nvlinks, "give the GPU its links first (FakeNode does for multi-GPU nodes)"
        for index in links:
            self.nvlinks[index].up = False
        return self


@dataclass
class FakeNode:
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    driver_version: str = "550.127.05"
    cuda_version: int = 12040
    nvml_version: str = "12.550.127.05"
    init_error: int = pynvml.NVML_SUCCESS  # what nvmlInit answers, e.g. NVML_ERROR_DRIVER_NOT_LOADED
    missing_symbols: set[str] = field(default_factory=set)  # absent from this (older) driver
    # Common PCIe ancestor per GPU pair (NVML_TOPOLOGY_*), and P2P status per pair and caps index.
    default_topology: int = pynvml.NVML_TOPOLOGY_NODE
    topology: dict[tuple[int, int], int] = field(default_factory=dict)
    p2p: dict[tuple[int, int], dict[int, int]] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)  # frees every hung call
    hang_init: bool = False  # nvmlInit blocks until `release` (a driver wedged before any device is reached)

    def __post_init__(self) -> None:
        for gpu in self.gpus:
            if gpu.nvlinks is None:
                gpu.nvlinks = _switch_links() if len(self.gpus) > 1 else []
            if gpu.health.fabric_state is None:
                gpu.health.fabric_state = (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED if len(self.gpus) > 1
                                           else pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)

    @classmethod
    def hgx_h200(cls, count: int = 8, **node: object) -> "FakeNode":
        """`count` H200 SXM GPUs of an HGX baseboard: distinct identities, half on each NUMA node."""
        gpus = [
            FakeGpu(
                bus_id=HGX_BUS_IDS[i],
                uuid=f"GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a{i:02x}",
                serial=f"16548240001{i:02d}",
                minor_number=i,
                numa_node=0 if i < max(1, count // 2) else 1,
                cpus=tuple(range(0, 32)) if i < max(1, count // 2) else tuple(range(32, 64)),
            )
            for i in range(count)
        ]
        return cls(gpus=gpus, **node)  # type: ignore[arg-type]

    def pair_topology(self, a: int, b: int) -> int:
        return self.topology.get(_pair(a, b), self.default_topology)

    def p2p_status(self, a: int, b: int, caps_index: int) -> int:
        return self.p2p.get(_pair(a, b), {}).get(caps_index, pynvml.NVML_P2P_STATUS_OK)


def _switch_links() -> list[FakeNvLink]:
    return [FakeNvLink(remote_bus_id=NVSWITCH_BUS_IDS[i % len(NVSWITCH_BUS_IDS)]) for i in range(H200_NVLINKS)]


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


# -----------------------------------------------------------------------------------------------------------------
# Installing the fake into pynvml


@contextlib.contextmanager
def installed(node: FakeNode) -> Iterator["FakeNvmlLib"]:  # noqa: F821 - imported below, where it is used
    """Serve `node` through pynvml for the duration; pynvml's module state is restored afterwards."""
    from tests.support.fakes.fake_nvml_lib import FakeNvmlLib

    lib = FakeNvmlLib(node)
    with _pynvml_state(lib):
        try:
            yield lib
        finally:
            # Free hung calls and let their threads finish against this fake, not against the next test's.
            node.release.set()
            lib.join_hung_threads(timeout=5.0)


@contextlib.contextmanager
def library_missing() -> Iterator[None]:
    """pynvml finds no libnvidia-ml.so.1, even on a machine that has one: its CDLL load fails."""

    def refuse(name: str, *args: object, **kwargs: object) -> None:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    with _pynvml_state(None), mock.patch.object(pynvml, "CDLL", refuse):
        yield


@contextlib.contextmanager
def _pynvml_state(lib: object) -> Iterator[None]:
    """Set pynvml.nvmlLib, and restore it, the init refcount and the function-pointer cache afterwards (the cache
    would otherwise hand the next test this fake's functions)."""
    with pynvml.libLoadLock:
        saved = (pynvml.nvmlLib, pynvml._nvmlLib_refcount)
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        yield
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib, pynvml._nvmlLib_refcount = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()
