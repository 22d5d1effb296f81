"""What the probes read about one GPU (and about a pair of GPUs)."""

from __future__ import annotations

from dataclasses import field
from typing import Optional

from gpudiag.model.common import ProbeError, Vendor
from gpudiag.model.cper import CperLog
from gpudiag.model.records import dataclass


@dataclass
class PcieInfo:
    """PCIe link as the vendor library reports it. `max_*` is what this slot allows (the lesser of device and
    link partner); `device_max_*` is what the GPU itself supports."""

    current_generation: Optional[int] = None
    current_width: Optional[int] = None
    max_generation: Optional[int] = None
    max_width: Optional[int] = None
    device_max_generation: Optional[int] = None
    device_max_width: Optional[int] = None
    replay_count: Optional[int] = None
    replay_rollover_count: Optional[int] = None
    # Further link error counters by name (e.g. "correctable_errors", "nak_received", "fatal_errors").
    error_counters: dict[str, int] = field(default_factory=dict)
    tx_kbytes_per_second: Optional[int] = None
    rx_kbytes_per_second: Optional[int] = None


@dataclass
class EccInfo:
    """ECC mode and error counts of one GPU (volatile: since the driver loaded; aggregate: over its life)."""
    enabled: Optional[bool] = None
    pending_enabled: Optional[bool] = None  # the mode after the next reset (NVIDIA)
    volatile_corrected: Optional[int] = None  # since the driver loaded
    volatile_uncorrected: Optional[int] = None
    aggregate_corrected: Optional[int] = None  # over the device's lifetime
    aggregate_uncorrected: Optional[int] = None
    deferred: Optional[int] = None  # AMD: poisoned data consumed later
    # Per-block counts (AMD: "umc", "gfx", …; NVIDIA: "dram", "sram", …): {"corrected", "uncorrected", "deferred"}.
    by_block: dict[str, dict[str, int]] = field(default_factory=dict)
    # AMD: RAS blocks enabled on the device whose counts could not be read (amdgpu answers "Query currently
    # inaccessible" while RAS is not ready or a reset runs). The totals then cover only the other blocks.
    unreadable_blocks: list[str] = field(default_factory=list)


@dataclass
class MemoryHealth:
    """Row remapping (NVIDIA Ampere+), retired pages (NVIDIA pre-Ampere) and bad pages (AMD)."""

    remapped_rows_correctable: Optional[int] = None
    remapped_rows_uncorrectable: Optional[int] = None
    remap_pending: Optional[bool] = None
    remap_failure: Optional[bool] = None
    # Row-remapper bank histogram: how many banks have max/high/partial/low/none spare rows left.
    remap_histogram: dict[str, int] = field(default_factory=dict)
    retired_pages_single_bit: Optional[int] = None
    retired_pages_double_bit: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    bad_pages_reserved: Optional[int] = None
    bad_pages_pending: Optional[int] = None
    bad_pages_unreservable: Optional[int] = None
    bad_page_threshold: Optional[int] = None
    # Where the threshold came from: "driver" (read from amdgpu), or amdgpu's default when the driver's value is
    # readable only by root through debugfs: "default:MP0 13.0.6" (the part's own, by its MP0 version) or "default"
    # (by architecture, the MP0 version unknown).
    bad_page_threshold_source: Optional[str] = None


@dataclass
class TemperatureSensor:
    """One temperature reading with the thresholds the device reports for it (°C)."""
    current_celsius: Optional[float] = None
    slowdown_celsius: Optional[float] = None  # NVIDIA SLOWDOWN; AMD CRITICAL
    shutdown_celsius: Optional[float] = None  # NVIDIA SHUTDOWN; AMD EMERGENCY
    max_operating_celsius: Optional[float] = None  # NVIDIA GPU_MAX / MEM_MAX


@dataclass
class PowerInfo:
    """Power draw, limits and energy of one GPU (W, J)."""
    draw_watts: Optional[float] = None  # the driver's latest reading when probed
    # The mean of the driver's own power samples taken since the previous probe of this GPU by the same backend (an
    # open collector's: `gpudiag top`, `gpudiag serve`), and the span those samples cover in seconds (at most the
    # driver's buffer, ~2.4 s on H100; draw_watts is itself a one-second average there, NVML documents it so for
    # Ampere and later but GA100). None where the backend does not ask (a one-shot check), on the first probe,
    # where no sample is newer than the previous probe's, and where the device or driver has no sample buffer. NVIDIA
    # only: amdsmi's average_socket_power (MI200 and older) is the SMU's own average over a window amdsmi does not
    # document, not one since the previous probe; it is read as draw_watts.
    average_watts: Optional[float] = None
    average_seconds: Optional[float] = None
    limit_watts: Optional[float] = None  # the limit in force
    default_limit_watts: Optional[float] = None
    min_limit_watts: Optional[float] = None
    max_limit_watts: Optional[float] = None
    energy_joules: Optional[float] = None  # since driver load (NVIDIA) or accumulator start (AMD)


# Vendor-neutral names for clock-event / throttle reasons.
THROTTLE_REASONS = (
    "gpu_idle",
    "applications_clocks",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake",
    "display_clocks",
    "board_limit",
    "reliability",
    # AMD violation/throttle sources
    "ppt_power",
    "socket_thermal",
    "prochot",
    "vr_thermal",
    "hbm_thermal",
)

# Reasons with a time counter (ClockInfo.throttle_seconds / throttle_residency), beyond the THROTTLE_REASONS names
# they share: NVIDIA's perf-policy counters "thermal" (the thermal policy as a whole), "low_utilization",
# "below_application_clocks" and "below_base_clocks" (clocks below the application / base clocks, for any reason),
# and AMD's "gfx_clock_below_host_limit".
THROTTLE_TIME_REASONS = (
    "sw_power_cap",
    "thermal",
    "sync_boost",
    "board_limit",
    "low_utilization",
    "reliability",
    "below_application_clocks",
    "below_base_clocks",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake",
    "ppt_power",
    "socket_thermal",
    "prochot",
    "vr_thermal",
    "hbm_thermal",
    "gfx_clock_below_host_limit",
)


@dataclass
class ClockInfo:
    """Current and maximum clocks of one GPU (MHz) and the reasons its clocks are held down."""
    graphics_mhz: Optional[int] = None
    sm_mhz: Optional[int] = None
    memory_mhz: Optional[int] = None
    max_graphics_mhz: Optional[int] = None
    max_sm_mhz: Optional[int] = None
    max_memory_mhz: Optional[int] = None
    # Active throttle / clock-event reasons (names from THROTTLE_REASONS). None: not readable.
    throttle_reasons: Optional[list[str]] = None
    throttle_reasons_mask: Optional[int] = None
    performance_state: Optional[int] = None  # NVIDIA P-state, 0 = max performance
    # Time the clocks were held down since the driver loaded, by reason (NVIDIA; names in THROTTLE_TIME_REASONS):
    # counters, so that rate() is the share of time throttled, catching throttling that comes and goes between two
    # samples. A reason the GPU does not report is absent, never 0.
    throttle_seconds: dict[str, float] = field(default_factory=dict)
    # AMD: the firmware's residency accumulators by reason (ppt_power, socket_thermal, …) and the accumulation
    # counter they are a share of, both in firmware ticks of unpublished length: Δresidency / Δaccumulation is the
    # share of time throttled.
    throttle_residency: dict[str, int] = field(default_factory=dict)
    throttle_accumulation: Optional[int] = None


@dataclass
class MemoryUsage:
    """Device memory in use and in all (bytes)."""
    total_bytes: Optional[int] = None
    used_bytes: Optional[int] = None  # excludes reserved_bytes where that is reported (NVML v2 memory info)
    reserved_bytes: Optional[int] = None  # held by the driver/firmware, not by processes
    bar1_total_bytes: Optional[int] = None
    bar1_used_bytes: Optional[int] = None


@dataclass
class Utilization:
    """How busy the GPU and its memory were over the driver's last sample (%)."""
    gpu_percent: Optional[int] = None
    memory_percent: Optional[int] = None


@dataclass
class GpuLink:
    """One NVLink or XGMI link of a GPU."""

    index: int
    kind: str  # "nvlink" | "xgmi"
    up: Optional[bool] = None
    version: Optional[int] = None
    remote_pci_bus_id: Optional[str] = None
    remote_device_type: Optional[str] = None  # "gpu" | "switch" | "npu" | "unknown"
    # Error counters by name: "replay", "recovery", "crc_flit", "crc_data", "ecc_data", …
    error_counters: dict[str, int] = field(default_factory=dict)


@dataclass
class GpuProcess:
    """A process holding a context on the GPU."""
    pid: int
    kind: str  # "compute" | "graphics"
    used_memory_bytes: Optional[int] = None
    name: Optional[str] = None  # from psutil; None when the PID is not visible (another PID namespace)
    user: Optional[str] = None
    cpu_percent: Optional[float] = None


@dataclass
class FabricInfo:
    """The GPU's place in an NVSwitch fabric as the driver reports it (NVIDIA nvmlDeviceGetGpuFabricInfoV). CUDA
    cannot use a GPU of an NVSwitch system until nvidia-fabricmanager has set its fabric up (state "completed")."""

    state: Optional[str] = None  # "not_supported" | "not_started" | "in_progress" | "completed"
    # The outcome of the fabric setup (an nvmlReturn_t), meaningful once completed: "success" or the NVML error name.
    status: Optional[str] = None
    status_code: Optional[int] = None
    clique_id: Optional[int] = None
    cluster_uuid: Optional[str] = None
    # Newer drivers (struct v3): "healthy" | "unhealthy" | "limited_capacity"; None where not reported.
    health_summary: Optional[str] = None
    health_mask: Optional[int] = None
    # The mask decoded: "degraded_bandwidth", "route_recovery", "route_unhealthy", "access_timeout_recovery" →
    # "true" | "false"; "incorrect_configuration" → "none" or the reason; fields the driver does not report are left
    # out.
    health: dict[str, str] = field(default_factory=dict)


@dataclass
class DriverHealth:
    """What the driver itself says about the GPU (NVIDIA R550+): its recovery verdict, memory it cannot repair,
    SRAM ECC, and the NVSwitch fabric. None: the driver or GPU does not report it."""

    # nvmlGpuRecoveryAction_t by name: "none" | "gpu_reset" | "node_reboot" | "drain_p2p" | "drain_and_reset" |
    # "recover_imex_domain" | "bus_reset" | "system_reboot" (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).
    recovery_action: Optional[str] = None
    unrepairable_memory: Optional[bool] = None
    # SRAM ECC (nvmlDeviceGetSramEccErrorStatus): uncorrectable = parity + SEC-DED.
    sram_volatile_uncorrected: Optional[int] = None
    sram_aggregate_uncorrected: Optional[int] = None
    sram_aggregate_corrected: Optional[int] = None
    # Aggregate uncorrectable SRAM errors by unit: "l2", "sm", "pcie", "mcu", "other".
    sram_uncorrected_by_unit: dict[str, int] = field(default_factory=dict)
    sram_threshold_exceeded: Optional[bool] = None  # the field-diagnostic error threshold (an RMA criterion)
    fabric: Optional[FabricInfo] = None


@dataclass
class DeviceSnapshot:
    """Everything read of one GPU in one collection; a value the device does not support is None."""
    index: int
    vendor: Vendor
    source: str  # which backend filled it: "nvml" | "amdsmi" | "sysfs"
    pci_bus_id: Optional[str] = None
    uuid: Optional[str] = None
    name: Optional[str] = None
    serial: Optional[str] = None
    architecture: Optional[str] = None
    board_part_number: Optional[str] = None
    minor_number: Optional[int] = None

    vbios_version: Optional[str] = None
    # InfoROM object versions (NVIDIA: "oem", "ecc", "power", "image") or firmware blocks (AMD: "SMC", "PSP_SOSDRV"…)
    firmware_versions: dict[str, str] = field(default_factory=dict)

    pcie: PcieInfo = field(default_factory=PcieInfo)
    ecc: EccInfo = field(default_factory=EccInfo)
    memory_health: MemoryHealth = field(default_factory=MemoryHealth)
    # Sensor name ("gpu", "memory", "edge", "hotspot", "vram", "hbm0"…) → readings.
    temperatures: dict[str, TemperatureSensor] = field(default_factory=dict)
    power: PowerInfo = field(default_factory=PowerInfo)
    clocks: ClockInfo = field(default_factory=ClockInfo)
    memory: MemoryUsage = field(default_factory=MemoryUsage)
    utilization: Utilization = field(default_factory=Utilization)

    persistence_mode: Optional[bool] = None
    compute_mode: Optional[str] = None  # "default" | "exclusive_process" | "prohibited"
    mig_enabled: Optional[bool] = None
    mig_pending_enabled: Optional[bool] = None
    # AMD partitioning. A logical GPU of a partitioned device points at its physical GPU by `physical_pci_bus_id`.
    compute_partition: Optional[str] = None  # "SPX" | "DPX" | "CPX" …
    memory_partition: Optional[str] = None  # "NPS1" | "NPS4" …
    partition_id: Optional[int] = None
    physical_pci_bus_id: Optional[str] = None

    links: list[GpuLink] = field(default_factory=list)
    # AMD: the device's XGMI error status, "no_errors" | "error" | "multiple_errors" (amdsmi_gpu_xgmi_error_status).
    xgmi_error_status: Optional[str] = None
    # AMD: the GPU's CPER records (amdsmi_get_gpu_cper_entries; issue 32 item 9). None: not read (another vendor, the
    # call unsupported or failed: `unsupported` or `errors` says which, or a snapshot recorded before gpudiag read it).
    cper: Optional[CperLog] = None
    # NVIDIA: filled by the NVML probe; None where nothing read it (another vendor, or a snapshot recorded before
    # gpudiag read it).
    driver_health: Optional[DriverHealth] = None
    numa_node: Optional[int] = None
    cpu_affinity: Optional[list[int]] = None
    processes: Optional[list[GpuProcess]] = None

    # AMD: the gpu_metrics table version the driver publishes ("1.8"), and the virtualisation mode amdsmi reports
    # ("baremetal" | "guest" (an SR-IOV VF) | "passthrough" | "host").
    metrics_version: Optional[str] = None
    virtualization: Optional[str] = None
    # Values the platform does not report, with the reason: the source (vendor call, e.g.
    # "amdsmi.amdsmi_get_power_info") → why it is absent. Checks that skip on such a value say why.
    unsupported: dict[str, str] = field(default_factory=dict)

    # The device could not be talked to at all (lost, or its probe timed out): every check on it is unknown/fail.
    reachable: bool = True
    errors: list[ProbeError] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.pci_bus_id or 'unknown bus'})"

    @property
    def is_logical_partition(self) -> bool:
        """A partition of a physical GPU other than its first (which stands for the physical device)."""
        if self.physical_pci_bus_id is None:
            return False
        # Kernels that carry the partition in location_id bits [31:28] give every partition function .0: the
        # partition number, not the bus ID, tells them apart then.
        return self.physical_pci_bus_id != self.pci_bus_id or (self.partition_id or 0) > 0


@dataclass
class PeerLink:
    """How two GPUs reach each other."""

    gpu_a: int
    gpu_b: int
    # Common ancestor: "internal" | "nvlink" | "xgmi" | "pix" (one switch) | "pxb" (several switches) |
    # "phb" (host bridge) | "node" (same NUMA node) | "sys" (across sockets)
    path: Optional[str] = None
    p2p_read: Optional[str] = None  # "ok" | "chipset_not_supported" | "gpu_not_supported" | … | "not_supported"
    p2p_write: Optional[str] = None
    p2p_nvlink: Optional[str] = None
    p2p_atomics: Optional[str] = None
    link_count: Optional[int] = None  # direct NVLink/XGMI links between the two
