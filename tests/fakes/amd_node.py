"""What an AMD Instinct node looks like, as plain data: one description rendered two ways, by the fake
libamd_smi.so (fake_amdsmi.py) and by the amdgpu sysfs tree writer (amdgpu_sysfs_tree.py), so both backends are
tested against the same scenarios.

Default: a healthy 8x MI300X node (device 0x74a1, Gen5 x16, 192 GB HBM3, 750 W cap, 7 XGMI links up per GPU).
Scenario knobs are the functions at the bottom.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

# AmdSmiGpuBlock values (vendor-api.md §5).
BLOCK_UMC, BLOCK_SDMA, BLOCK_GFX, BLOCK_MMHUB, BLOCK_PCIE_BIF, BLOCK_HDP, BLOCK_XGMI_WAFL = 1, 2, 4, 8, 32, 64, 128
MI300X_RAS_BLOCKS = (BLOCK_UMC, BLOCK_SDMA, BLOCK_GFX, BLOCK_MMHUB, BLOCK_PCIE_BIF, BLOCK_HDP, BLOCK_XGMI_WAFL)
# The same blocks as amdgpu names them in sysfs ras/<name>_err_count (amdgpu_ras.c ras_block_string).
RAS_BLOCK_SYSFS_NAME = {
    BLOCK_UMC: "umc",
    BLOCK_SDMA: "sdma",
    BLOCK_GFX: "gfx",
    BLOCK_MMHUB: "mmhub",
    BLOCK_PCIE_BIF: "pcie_bif",
    BLOCK_HDP: "hdp",
    BLOCK_XGMI_WAFL: "xgmi_wafl",
}

# AmdSmiMemoryPageStatus / the R, P, F flags of ras/gpu_vram_bad_pages.
PAGE_RESERVED, PAGE_PENDING, PAGE_UNRESERVABLE = 0, 1, 2

# amdsmi_xgmi_link_status_type_t
XGMI_DOWN, XGMI_UP, XGMI_DISABLED = 0, 1, 2

PARTITIONS_PER_MODE = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}

# PCIe buses of the 8 OAMs on a typical MI300X UBB platform; the first four hang off socket 0.
MI300X_BUSES = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)


@dataclass
class Temperature:
    current: int
    critical: Optional[int]
    emergency: Optional[int]


@dataclass
class FakeAmdGpu:
    """One physical GPU (an OAM). Temperatures in °C, power in W, memory in MiB, link speeds in MT/s."""

    bus: int
    index: int
    market_name: str = "AMD Instinct MI300X"
    device_id: int = 0x74A1
    gfx_target: int = 0x942  # amdsmi formats "gfx" + hex(value)
    compute_units: int = 304
    vbios_version: str = "113-M3000100-102"
    board_part_number: str = "102-G30211-0C"
    driver_version: str = "6.12.12"
    firmware: dict[str, int] = field(
        default_factory=lambda: {"PM": 0x00556A00, "PSP_SOSDRV": 0x00270082, "CP_MEC1": 178}
    )
    pcie_max_mts: int = 32000
    pcie_max_width: int = 16
    pcie_mts: int = 32000
    pcie_width: int = 16
    slot_max_mts: int = 32000  # the upstream port (board slot) capability; only sysfs shows it
    pcie_replay_count: int = 0
    ras_blocks: tuple[int, ...] = MI300X_RAS_BLOCKS
    # block → (corrected, uncorrected, deferred)
    ecc_counts: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    bad_pages: list[tuple[int, int]] = field(default_factory=list)  # (page address, PAGE_* status)
    bad_page_threshold: int = 1965  # amdgpu default: VRAM / 100 MiB (amdgpu_ras_validate_threshold)
    # MI300X has no edge sensor (amd-smi shows N/A); junction ("hotspot") and HBM ("vram") it has.
    temperatures: dict[str, Temperature] = field(
        default_factory=lambda: {"hotspot": Temperature(48, 100, 105), "vram": Temperature(39, 95, 105)}
    )
    power_watts: int = 180
    reports_average_power: bool = False  # MI200 and older: average_socket_power instead of current_socket_power
    power_cap_watts: int = 750
    energy_microjoules: int = 6_500_000_000
    violations: set[str] = field(default_factory=set)  # amdsmi "active_*" names, e.g. {"active_ppt_pwr"}
    # amdsmi_get_violation_status accumulators (firmware ticks): "acc_counter" counts every tick, each other
    # "acc_*" the ticks in that limit; a name left out answers UINT64_MAX ("N/A"). Magnitudes as an MI300X node
    # exported them through AMD's device-metrics-exporter (amd_gpu_violation_current_accumulated_counter ~764,600,
    # ROCm/device-metrics-exporter pull request 550).
    violation_counters: dict[str, int] = field(default_factory=lambda: {
        "acc_counter": 764_653, "acc_ppt_pwr": 1_204, "acc_socket_thrm": 0, "acc_prochot_thrm": 0,
        "acc_vr_thrm": 0, "acc_hbm_thrm": 0})
    # amdsmi_get_clock_info (MHz) by AMDSMI_CLK_TYPE_* value: (current, max). GFX (0) idles in deep sleep well below
    # its 2100 MHz peak engine clock; MEM (4) runs HBM3 at 1300 MHz (5.2 Gb/s per pin; AMD MI300X data sheet).
    clocks_mhz: dict[int, tuple[int, int]] = field(default_factory=lambda: {0: (132, 2100), 4: (900, 1300)})
    xgmi_links: list[int] = field(default_factory=lambda: [XGMI_UP] * 7)
    xgmi_error_status: int = 0
    compute_partition: str = "SPX"
    memory_partition: str = "NPS1"
    vram_total_mib: int = 196592
    vram_used_mib: int = 283
    lost: bool = False
    processes: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, name, VRAM bytes)
    hang_in: Optional[str] = None  # a C symbol that blocks on this GPU until FakeAmdNode.unhang is set

    @property
    def numa_node(self) -> int:
        return 0 if self.bus < 0x80 else 1

    @property
    def bdf(self) -> str:
        return f"0000:{self.bus:02x}:00.0"

    @property
    def serial(self) -> str:
        return f"PCB0{self.index}4A1X"

    @property
    def unique_id(self) -> int:
        return 0x4E2C_0000_0000_0000 | (self.bus << 8) | self.index

    @property
    def partitions(self) -> int:
        return PARTITIONS_PER_MODE[self.compute_partition]

    def ecc(self, block: int) -> tuple[int, int, int]:
        return self.ecc_counts.get(block, (0, 0, 0))


@dataclass
class FakeAmdNode:
    gpus: list[FakeAmdGpu]
    library_present: bool = True  # libamd_smi.so loadable
    rocm_version: Optional[tuple[int, int, int]] = (7, 0, 2)  # librocm-core.so; None: not installed
    lib_version: tuple[int, int, int] = (26, 0, 2)
    init_status: int = 0  # what amdsmi_init returns (AMDSMI_STATUS_*)
    # C symbol → the AMDSMI_STATUS_* it returns instead of answering: an int for every call, a list for the next
    # calls in turn (then it answers normally).
    failing_calls: dict[str, int | list[int]] = field(default_factory=dict)
    unhang: threading.Event = field(default_factory=threading.Event)


def mi300x_node(count: int = 8) -> FakeAmdNode:
    return FakeAmdNode(gpus=[FakeAmdGpu(bus=MI300X_BUSES[i], index=i) for i in range(count)])


# ---------------------------------------------------------------------------------------------------------------
# Scenario knobs


def pcie_trained_gen4_on_gen4_board(node: FakeAmdNode, gpu: int) -> None:
    """A Gen5 MI300X in a slot that only does Gen4: it trains at 16 GT/s x16."""
    node.gpus[gpu].pcie_mts = 16000
    node.gpus[gpu].slot_max_mts = 16000


def uncorrectable_ecc(node: FakeAmdNode, gpu: int, count: int = 2) -> None:
    corrected, uncorrected, deferred = node.gpus[gpu].ecc(BLOCK_UMC)
    node.gpus[gpu].ecc_counts[BLOCK_UMC] = (corrected, uncorrected + count, deferred)


def pending_bad_pages(node: FakeAmdNode, gpu: int, count: int = 3) -> None:
    node.gpus[gpu].bad_pages += [(0x5A000 + i, PAGE_PENDING) for i in range(count)]


def xgmi_link_down(node: FakeAmdNode, gpu: int, link: int) -> None:
    node.gpus[gpu].xgmi_links[link] = XGMI_DOWN


def hotspot_over_critical(node: FakeAmdNode, gpu: int) -> None:
    sensor = node.gpus[gpu].temperatures["hotspot"]
    sensor.current = sensor.critical + 4


def cpx_mode(node: FakeAmdNode, memory_partition: str = "NPS4") -> None:
    for gpu in node.gpus:
        gpu.compute_partition, gpu.memory_partition = "CPX", memory_partition


def lose_gpu(node: FakeAmdNode, gpu: int) -> None:
    node.gpus[gpu].lost = True
