"""What an AMD Instinct node looks like, as plain data: one description rendered two ways, by the fake
libamd_smi.so (fake_amdsmi.py) and by the amdgpu sysfs tree writer (amdgpu_sysfs_tree.py), so both backends are
tested against the same scenarios.

Default: a healthy 8x MI300X node (device 0x74a1, Gen5 x16, 192 GB HBM3, 750 W cap, 7 XGMI links up per GPU,
gpu_metrics v1.8). Also: MI325X and MI355X nodes, and the SR-IOV guest (VF) view. Scenario knobs are the functions
at the bottom; each quirk of a real node cites where it was seen.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

# AmdSmiGpuBlock values (docs/vendor-api.md §5).
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
    # amd-smi static on MI3xx shows VBIOS VERSION like 022.042.000.002.000001 and PART_NUMBER 113-M3000100-102.
    vbios_version: str = "022.042.000.002.000001"
    vbios_part_number: str = "113-M3000100-102"
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
    # The MI300/MI350 default (gpudiag issue 15 item 5); 1965 was the older VRAM / 100 MiB formula. Only root
    # reads it (debugfs): see FakeAmdNode.root.
    bad_page_threshold: int = 128
    # amdgpu's IP discovery MP0 version (sysfs ip_discovery/die/0/MP0/0): MI300X is 13.0.6; the default bad-page
    # threshold follows it (gpudiag/probe/amdgpu/ras_threshold.py). None: no ip_discovery directory.
    mp0_version: Optional[tuple[int, int, int]] = (13, 0, 6)
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
    gfx_activity_percent: int = 0  # amdsmi_get_gpu_activity gfx_activity (an idle node)
    xgmi_links: list[int] = field(default_factory=lambda: [XGMI_UP] * 7)
    xgmi_error_status: int = 0  # answered only where amdgpu's xgmi_error works (df_fica)
    # DF FICA access, which amdgpu's xgmi_error needs: MI200 (DF 3.6) has it; on MI300/MI350 (DF 4.x) the sysfs read
    # fails with EINVAL and amdsmi answers INVAL (ROCm/rocm-systems#11468).
    df_fica: bool = False
    # The gpu_metrics table version (format, content): xgmi_link_status exists from v1.7; amdsmi 7.0.2 decodes up
    # to v1.8 and reads a v1.9 table (2026 kernels) as N/A fields.
    metrics_version: tuple[int, int] = (1, 8)
    # amdgpu ras/features: the mask of enabled blocks, or None when the file is absent (amdgpu.ras_enable=0).
    ras_features_present: bool = True
    # Blocks whose ras/<blk>_err_count reads "Query currently inaccessible" (RAS not ready, or a reset running):
    # rocm-smi-lib answers NOT_SUPPORTED for them and the total sums the others (gpudiag issue 15 item 2).
    ras_inaccessible: set[int] = field(default_factory=set)
    vf: bool = False  # an SR-IOV guest's view of the GPU (amdsmi virtualization mode GUEST)
    missing_partitions: set[int] = field(default_factory=set)  # partitions whose DRM node another driver holds
    compute_partition: str = "SPX"
    memory_partition: str = "NPS1"
    vram_total_mib: int = 196592
    vram_used_mib: int = 283
    lost: bool = False
    pcie_l0_to_recovery: int = 0
    pcie_nak_sent: int = 0
    pcie_nak_received: int = 0
    processes: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, name, VRAM bytes)
    in_tree: bool = False  # amdgpu from the kernel itself (no /sys/module/amdgpu/version)
    # The PCIe port the GPU hangs off (default: bus - 1, device 0) and the bridges above it, root port first.
    upstream_port: Optional[str] = None
    bridges: tuple[str, ...] = ()
    hang_in: Optional[str] = None  # a C symbol that blocks on this GPU until FakeAmdNode.unhang is set
    # amdgpu's CPER ring (debugfs amdgpu_ring_cper, Linux 6.15+), oldest record first (tests/support/cper_records.py
    # builds them); None: a kernel without the ring (amdsmi answers NOT_SUPPORTED).
    cper_records: Optional[list[bytes]] = field(default_factory=list)
    # What amdsmi_get_afids_from_cper answers for a record, by its record id: this fake does not decode ACA
    # registers as AMD's ras-decode does; a record not listed gets no AFIDs.
    cper_afids: dict[str, tuple[int, ...]] = field(default_factory=dict)

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
    # The newest gpu_metrics table this libamd_smi.so decodes: amd-smi-lib 7.0.2 reads up to v1.8; the ROCm 7.2
    # library reads the v1.9 tables of MI350 and VFs (issue 21), so their values arrive.
    metrics_decoded_up_to: tuple[int, int] = (1, 8)
    # libamd_smi.so could not dlopen libdrm_amdgpu (ROCm tarball / TheRock installs; ROCm/rocm-systems PR 2987 and
    # PR 8427): garbage BDFs, and no ASIC, VBIOS or driver info.
    libdrm_missing: bool = False
    init_status: int = 0  # what amdsmi_init returns (AMDSMI_STATUS_*)
    root: bool = True  # gpudiag runs as root: amdsmi reads the bad-page threshold from debugfs
    # Kernels that carry the partition in location_id bits [31:28] report every CPX partition at function .0.
    partitions_at_function_zero: bool = False
    # C symbol → the AMDSMI_STATUS_* it returns instead of answering: an int for every call, a list for the next
    # calls in turn (None in it: that call answers normally; after the list, every call does).
    failing_calls: dict[str, int | list[int]] = field(default_factory=dict)
    unhang: threading.Event = field(default_factory=threading.Event)


def mi300x_node(count: int = 8) -> FakeAmdNode:
    return FakeAmdNode(gpus=[FakeAmdGpu(bus=MI300X_BUSES[i], index=i) for i in range(count)])


def mi325x_node(count: int = 8) -> FakeAmdNode:
    """MI325X: the MI300X's gfx942 with 256 GB HBM3E and a 1000 W cap (AMD MI325X data sheet); device 0x74a5."""
    node = mi300x_node(count)
    for gpu in node.gpus:
        gpu.market_name, gpu.device_id, gpu.board_part_number = "AMD Instinct MI325X", 0x74A5, "102-G30217-00"
        gpu.vram_total_mib, gpu.power_cap_watts = 262128, 1000
    return node


def mi355x_node(count: int = 8) -> FakeAmdNode:
    """MI355X: gfx950 (CDNA 4), 288 GB HBM3E, 1400 W (AMD MI355X data sheet). UNSURE: device ID 0x75a3 and the
    part number; gpu_metrics v1.8 (smu_v13_0_12)."""
    node = mi300x_node(count)
    for gpu in node.gpus:
        gpu.market_name, gpu.device_id, gpu.gfx_target = "AMD Instinct MI355X", 0x75A3, 0x950
        gpu.compute_units, gpu.board_part_number = 256, "102-G31501-00"
        gpu.mp0_version = (13, 0, 12)  # smu/psp v13_0_12 (amdgpu_ras_init_reserved_vram_size: 128-page default)
        gpu.vram_total_mib, gpu.power_cap_watts = 294896, 1400
    return node


def mi250x_node(count: int = 2) -> FakeAmdNode:
    """MI250X (gfx90a, DF 3.6): amdgpu's xgmi_error works there; gpu_metrics v1.3 has no xgmi_link_status."""
    node = mi300x_node(count)
    for gpu in node.gpus:
        gpu.market_name, gpu.device_id, gpu.gfx_target, gpu.df_fica = "AMD Instinct MI250X", 0x740C, 0x90A, True
        gpu.metrics_version, gpu.reports_average_power, gpu.vram_total_mib = (1, 3), True, 65520
        gpu.pcie_max_mts = gpu.pcie_mts = gpu.slot_max_mts = 16000
    return node


def vf_guest(node: FakeAmdNode) -> FakeAmdNode:
    """The node as a cloud VM sees it: every GPU an SR-IOV VF (MI300X VF 0x74b5; the MI350X VF reports the same
    way). A VF reports no power, answers UNEXPECTED_DATA for the XGMI link status, and has RAS only on UMC, SDMA,
    GFX and PCIE_BIF (amdgpu_ras_check_supported for an SR-IOV VF)."""
    for gpu in node.gpus:
        gpu.vf = True
        if gpu.device_id == 0x74A1:
            gpu.device_id = 0x74B5
        gpu.ras_blocks = (BLOCK_UMC, BLOCK_SDMA, BLOCK_GFX, BLOCK_PCIE_BIF)
    return node


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


def xgmi_wafl_errors(node: FakeAmdNode, gpu: int, corrected: int = 0, uncorrected: int = 0) -> None:
    """XGMI faults as MI300/MI350 report them: counts on the XGMI_WAFL RAS block (ROCm/rocm-systems#11468)."""
    node.gpus[gpu].ecc_counts[BLOCK_XGMI_WAFL] = (corrected, uncorrected, 0)


def ras_inaccessible(node: FakeAmdNode, gpu: int, blocks: tuple[int, ...] = (BLOCK_UMC,)) -> None:
    node.gpus[gpu].ras_inaccessible |= set(blocks)


def ras_disabled(node: FakeAmdNode, gpu: int, mask_zero: bool = False) -> None:
    """amdgpu.ras_enable=0: no ras/ directory (NOT_SUPPORTED); or ras/features with mask 0 (API_FAILED)."""
    if mask_zero:
        node.gpus[gpu].ras_blocks = ()
    else:
        node.gpus[gpu].ras_features_present = False


def reserved_bad_pages(node: FakeAmdNode, gpu: int, count: int) -> None:
    node.gpus[gpu].bad_pages += [(0x10000 + i, PAGE_RESERVED) for i in range(count)]


def old_gpu_metrics(node: FakeAmdNode, version: tuple[int, int] = (1, 6)) -> None:
    """A driver whose gpu_metrics predates xgmi_link_status (v1.6 on ROCm 6.1-era MI300X) or is newer than amdsmi
    7.0.2 decodes (v1.9)."""
    for gpu in node.gpus:
        gpu.metrics_version = version


def in_tree_amdgpu(node: FakeAmdNode, kernel_release: str = "6.8.0-79-generic") -> None:
    """amdgpu built into the distribution kernel: no /sys/module/amdgpu/version, and amdsmi 6.4-7.0 reports the
    whole /proc/version with its spaces removed (ROCm/k8s-device-plugin#157)."""
    for gpu in node.gpus:
        gpu.driver_version = (f"Linuxversion{kernel_release}(buildd@lcy02-amd64-100)(x86_64-linux-gnu-gcc-13"
                              f"(Ubuntu13.3.0-6ubuntu2~24.04)13.3.0,GNUld(GNUBinutilsforUbuntu)2.42)"
                              f"#79-UbuntuSMPPREEMPT_DYNAMICTueAug1214:42:46UTC2025")
        gpu.in_tree = True


def pcie_recoveries(node: FakeAmdNode, gpu: int, count: int, naks: int = 0) -> None:
    node.gpus[gpu].pcie_l0_to_recovery = count
    node.gpus[gpu].pcie_nak_received = naks


def violation_counters_without_throttling(node: FakeAmdNode) -> None:
    """The firmware quirk of issue 21 (idle MI300X, amdgpu DKMS 6.10.5): the thermal residency accumulators advance
    with the accumulation counter, so amdsmi's per = Δresidency × 100 / Δaccumulation reads 100 % and the active flags
    are set, on a GPU that is idle and cool (42 °C). PROCHOT and PPT count nothing."""
    for gpu in node.gpus:
        gpu.driver_version = "6.10.5"
        gpu.temperatures["hotspot"].current = 42
        total = gpu.violation_counters["acc_counter"]
        gpu.violation_counters.update(acc_socket_thrm=total, acc_vr_thrm=total, acc_hbm_thrm=total)
        gpu.violations = {"active_socket_thrm", "active_vr_thrm", "active_hbm_thrm"}


def fatal_cper(node: FakeAmdNode, gpu: int, afids: tuple[int, ...] = (30,), record_id: str = "1:1") -> None:
    """A fatal CPER record in the GPU's ring (an MI300 crash dump), which amdsmi decodes to `afids` (30: "Device
    Internal Errors, All Others, Fatal" in AMD's AFID table, gpudiag/checks/ras/afid_catalog.py)."""
    from tests.support.cper_records import fatal_crashdump

    node.gpus[gpu].cper_records.append(fatal_crashdump(record_id))
    node.gpus[gpu].cper_afids[record_id] = afids


def corrected_cper(node: FakeAmdNode, gpu: int, afids: tuple[int, ...] = (24,), record_id: str = "1:2") -> None:
    """A corrected error's CPER record (24: "HBM Errors, All, Corrected")."""
    from tests.support.cper_records import corrected_aca

    node.gpus[gpu].cper_records.append(corrected_aca(record_id))
    node.gpus[gpu].cper_afids[record_id] = afids
