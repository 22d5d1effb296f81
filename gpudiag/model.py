"""Plain data shared by every layer: what the probes saw and what the checks concluded.

Conventions:
- Units live in field names (`_celsius`, `_watts`, `_bytes`, `_mhz`) and are converted once, in the probe.
- `None` means "not supported or not read"; it is never a stand-in for zero. Why a value is missing is in
  `errors` (a probe error) or simply absent (the device does not support it).
- PCI bus IDs are lowercase with a 4-digit domain and a function: `0000:3b:00.0`.
- Everything here round-trips through JSON (`to_dict` / `from_dict`), which is how snapshots are recorded and
  replayed.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Union

SNAPSHOT_SCHEMA_VERSION = 1
REPORT_SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    UNKNOWN = "unknown"

    def __str__(self) -> str:  # so f-strings print "fail", not "Status.FAIL"
        return self.value


# How bad a status is, for the node verdict and for ordering the checklist (worst first).
STATUS_SEVERITY = {Status.FAIL: 4, Status.UNKNOWN: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


class Vendor(str, enum.Enum):
    NVIDIA = "nvidia"
    AMD = "amd"

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------------------------------------------------------
# Probe errors


class ErrorKind(str, enum.Enum):
    TIMEOUT = "timeout"  # the call did not return before its deadline
    GPU_LOST = "gpu_lost"  # the device fell off the bus / needs a reset
    NO_PERMISSION = "no_permission"
    NOT_FOUND = "not_found"  # library, device node or file missing
    ERROR = "error"  # anything else the backend reported

    def __str__(self) -> str:
        return self.value


@dataclass
class ProbeError:
    source: str  # what was being read, e.g. "nvml.nvmlDeviceGetEccMode" or "sysfs:/sys/bus/pci/devices/…/aer…"
    kind: ErrorKind
    message: str


# ---------------------------------------------------------------------------------------------------------------
# Per-device facts


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
    enabled: Optional[bool] = None
    pending_enabled: Optional[bool] = None  # the mode after the next reset (NVIDIA)
    volatile_corrected: Optional[int] = None  # since the driver loaded
    volatile_uncorrected: Optional[int] = None
    aggregate_corrected: Optional[int] = None  # over the device's lifetime
    aggregate_uncorrected: Optional[int] = None
    deferred: Optional[int] = None  # AMD: poisoned data consumed later
    # Per-block counts (AMD: "umc", "gfx", …; NVIDIA: "dram", "sram", …): {"corrected", "uncorrected", "deferred"}.
    by_block: dict[str, dict[str, int]] = field(default_factory=dict)


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


@dataclass
class TemperatureSensor:
    current_celsius: Optional[float] = None
    slowdown_celsius: Optional[float] = None  # NVIDIA SLOWDOWN; AMD CRITICAL
    shutdown_celsius: Optional[float] = None  # NVIDIA SHUTDOWN; AMD EMERGENCY
    max_operating_celsius: Optional[float] = None  # NVIDIA GPU_MAX / MEM_MAX


@dataclass
class PowerInfo:
    draw_watts: Optional[float] = None
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


@dataclass
class ClockInfo:
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


@dataclass
class MemoryUsage:
    total_bytes: Optional[int] = None
    used_bytes: Optional[int] = None  # excludes reserved_bytes where that is reported (NVML v2 memory info)
    reserved_bytes: Optional[int] = None  # held by the driver/firmware, not by processes
    bar1_total_bytes: Optional[int] = None
    bar1_used_bytes: Optional[int] = None


@dataclass
class Utilization:
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
    pid: int
    kind: str  # "compute" | "graphics"
    used_memory_bytes: Optional[int] = None
    name: Optional[str] = None  # from psutil; None when the PID is not visible (another PID namespace)
    user: Optional[str] = None
    cpu_percent: Optional[float] = None


@dataclass
class DeviceSnapshot:
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
    numa_node: Optional[int] = None
    cpu_affinity: Optional[list[int]] = None
    processes: Optional[list[GpuProcess]] = None

    # The device could not be talked to at all (lost, or its probe timed out): every check on it is unknown/fail.
    reachable: bool = True
    errors: list[ProbeError] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.pci_bus_id or 'unknown bus'})"

    @property
    def is_logical_partition(self) -> bool:
        """A partition of a physical GPU other than its first (which stands for the physical device)."""
        return self.physical_pci_bus_id is not None and self.physical_pci_bus_id != self.pci_bus_id


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


# ---------------------------------------------------------------------------------------------------------------
# Node-level facts


@dataclass
class BackendInfo:
    """One vendor library: did it load, and what does it report about the driver stack."""

    name: str  # "nvml" | "amdsmi" | "amdgpu-sysfs"
    vendor: Vendor
    available: bool = False  # library loaded and initialised
    error: Optional[ProbeError] = None
    library_version: Optional[str] = None  # NVML version / amdsmi lib version
    driver_version: Optional[str] = None
    runtime_version: Optional[str] = None  # CUDA driver API version "12.4" / ROCm version
    device_count: Optional[int] = None


@dataclass
class PciGpu:
    """A GPU seen on the PCI bus by the host probe, independent of any vendor library."""

    pci_bus_id: str
    vendor: Vendor
    vendor_id: str  # "0x10de"
    device_id: str  # "0x2335"
    class_code: str  # "0x030200"
    driver: Optional[str] = None  # the kernel driver bound to it ("nvidia", "amdgpu", "vfio-pci"), None if unbound
    current_link_generation: Optional[int] = None
    current_link_width: Optional[int] = None
    max_link_generation: Optional[int] = None  # the device's capability
    max_link_width: Optional[int] = None
    # The upstream port (slot) the GPU hangs off: its BDF and capability.
    upstream_pci_bus_id: Optional[str] = None
    upstream_max_link_generation: Optional[int] = None
    upstream_max_link_width: Optional[int] = None
    # AER counters: {"correctable": {"Receiver Error": 0, …, "TOTAL_ERR_COR": 0}, "nonfatal": …, "fatal": …}
    aer: dict[str, dict[str, int]] = field(default_factory=dict)
    numa_node: Optional[int] = None
    local_cpulist: Optional[str] = None
    iommu_group: Optional[int] = None
    iommu_domain_type: Optional[str] = None  # "identity" (passthrough) | "DMA" | "DMA-FQ" | "unmanaged"
    # Memory BAR sizes in bytes by BAR index, from `resource`.
    bar_sizes_bytes: dict[int, int] = field(default_factory=dict)


@dataclass
class HostInfo:
    hostname: Optional[str] = None
    kernel_release: Optional[str] = None
    kernel_cmdline: Optional[str] = None
    os_name: Optional[str] = None
    # Kernel modules of interest that are loaded, with their version where /sys/module/<m>/version exists.
    modules_loaded: dict[str, Optional[str]] = field(default_factory=dict)
    nvidia_proc_version: Optional[str] = None  # driver version from /proc/driver/nvidia/version
    iommu_enabled: Optional[bool] = None  # any IOMMU registered under /sys/class/iommu
    iommu_cmdline: dict[str, str] = field(default_factory=dict)  # intel_iommu / amd_iommu / iommu from cmdline
    cpu_count: Optional[int] = None
    cpu_percent: Optional[float] = None  # whole host
    per_cpu_percent: Optional[list[float]] = None
    load_average: Optional[list[float]] = None
    memory_total_bytes: Optional[int] = None
    memory_available_bytes: Optional[int] = None
    boot_time: Optional[float] = None  # epoch seconds
    numa_nodes: Optional[int] = None


@dataclass
class KernelEvent:
    """One line of interest in the kernel log."""

    vendor: Vendor
    kind: str  # "xid" | "ring_timeout" | "gpu_reset" | "gpu_reset_failed" | "ras_uncorrectable" | "page_fault" | …
    message: str
    pci_bus_id: Optional[str] = None  # normalised; for XIDs the log omits the function, ".0" is assumed
    code: Optional[int] = None  # the XID number
    pid: Optional[int] = None
    process: Optional[str] = None
    timestamp_seconds: Optional[float] = None  # seconds since boot, as the log stamps it
    count: Optional[int] = None  # e.g. the number of uncorrectable errors an amdgpu RAS line reports


@dataclass
class KernelLogInfo:
    source: Optional[str] = None  # "/dev/kmsg" or the file given
    readable: bool = False
    error: Optional[ProbeError] = None
    lines_scanned: int = 0
    events: list[KernelEvent] = field(default_factory=list)


@dataclass
class CollectorRun:
    """How one part of the collection went: the exporter's self-health comes from these."""

    name: str  # "host" | "kernel_log" | "nvml" | "amdsmi" | "amdgpu-sysfs" | "peers"
    success: bool
    duration_seconds: float
    error: Optional[str] = None


# ---------------------------------------------------------------------------------------------------------------
# Active diagnostics (load tests, gpudiag.active). GB are 10^9 bytes. A test that could not run or was cut short
# carries a ProbeError (kind TIMEOUT: the deadline or an interruption stopped it) beside what it measured.


@dataclass
class CopyBandwidth:
    """Timed copies of one kind: the best of several batches, timed by GPU events."""

    gb_per_second: Optional[float] = None
    bytes_per_copy: Optional[int] = None
    copies_timed: int = 0
    error: Optional[ProbeError] = None


@dataclass
class PeerBandwidth:
    """GPU-to-GPU copies from `src` to `dst` (snapshot device indexes)."""

    src: int
    dst: int
    p2p_enabled: Optional[bool] = None  # False: no peer access, the runtime staged the copy through host memory
    copy: CopyBandwidth = field(default_factory=CopyBandwidth)
    bidirectional_gb_per_second: Optional[float] = None  # both directions at once, summed (on src < dst only)


@dataclass
class MemtestResult:
    bytes_tested: int = 0  # device memory written and read back by every pass
    free_bytes: Optional[int] = None  # free when the test started (after gpudiag's own context)
    total_bytes: Optional[int] = None
    passes_requested: int = 0
    passes_completed: int = 0
    mismatched_words: int = 0  # 32-bit words that read back wrong, over all passes
    first_error_address: Optional[int] = None  # device virtual address of the lowest mismatching word
    flipped_bits_mask: Optional[int] = None  # OR of (read ^ written) over all mismatches
    seconds: Optional[float] = None
    ecc_corrected_before: Optional[int] = None  # volatile ECC counters around the test
    ecc_corrected_after: Optional[int] = None
    ecc_uncorrected_before: Optional[int] = None
    ecc_uncorrected_after: Optional[int] = None
    error: Optional[ProbeError] = None


@dataclass
class TelemetrySample:
    seconds: float  # since the load started
    sm_clock_mhz: Optional[int] = None
    memory_clock_mhz: Optional[int] = None
    temperature_celsius: Optional[float] = None
    power_watts: Optional[float] = None
    throttle_reasons: Optional[list[str]] = None  # names from THROTTLE_REASONS


@dataclass
class StressResult:
    seconds_requested: float = 0.0
    seconds: Optional[float] = None  # how long the load ran
    launches: int = 0
    fp32_tflops: Optional[float] = None  # FMA throughput achieved (2 FLOP per FMA)
    samples: list[TelemetrySample] = field(default_factory=list)
    telemetry_error: Optional[str] = None  # why no (or fewer) samples were taken
    error: Optional[ProbeError] = None


@dataclass
class ActiveDevice:
    index: int  # the snapshot device index
    pci_bus_id: Optional[str] = None
    runtime: Optional[str] = None  # "cuda 12.4" | "hip 6.2"
    skipped: Optional[str] = None  # why the GPU was left alone (busy with another job, MIG, not visible…)
    h2d: Optional[CopyBandwidth] = None  # pinned host memory → device
    d2h: Optional[CopyBandwidth] = None
    memtest: Optional[MemtestResult] = None
    stress: Optional[StressResult] = None


@dataclass
class ActiveResults:
    tests: list[str] = field(default_factory=list)  # requested: "pcie", "p2p", "memtest", "stress"
    started_at: Optional[str] = None  # ISO 8601 UTC
    duration_seconds: Optional[float] = None
    devices: list[ActiveDevice] = field(default_factory=list)
    peers: list[PeerBandwidth] = field(default_factory=list)
    errors: list[ProbeError] = field(default_factory=list)  # node-level: runtime missing, hung call, interrupted


@dataclass
class NodeSnapshot:
    schema_version: int = SNAPSHOT_SCHEMA_VERSION
    hostname: Optional[str] = None
    collected_at: Optional[str] = None  # ISO 8601 UTC
    duration_seconds: Optional[float] = None
    gpudiag_version: Optional[str] = None
    backends: list[BackendInfo] = field(default_factory=list)
    devices: list[DeviceSnapshot] = field(default_factory=list)
    peers: list[PeerLink] = field(default_factory=list)
    pci_gpus: list[PciGpu] = field(default_factory=list)
    host: HostInfo = field(default_factory=HostInfo)
    kernel_log: KernelLogInfo = field(default_factory=KernelLogInfo)
    errors: list[ProbeError] = field(default_factory=list)  # node-level probe errors
    active: Optional[ActiveResults] = None  # load tests, when they were run (gpudiag check --level 2)
    collectors: list[CollectorRun] = field(default_factory=list)

    def backend(self, name: str) -> Optional[BackendInfo]:
        return next((b for b in self.backends if b.name == name), None)

    def pci_gpu(self, pci_bus_id: Optional[str]) -> Optional[PciGpu]:
        return next((p for p in self.pci_gpus if p.pci_bus_id == pci_bus_id), None)


# ---------------------------------------------------------------------------------------------------------------
# Check results


@dataclass
class DeviceRef:
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


# ---------------------------------------------------------------------------------------------------------------
# PCI bus ID normalisation (used by every probe)

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")


def normalize_pci_bus_id(raw: str) -> str:
    """`00000000:3B:00.0` (NVML), `0000:3b:00` (XID lines), `3b:00.0` → `0000:3b:00.0`."""
    match = _BUS_ID.match(raw.strip())
    if not match:
        raise ValueError(f"not a PCI bus ID: {raw!r}")
    domain, bus, dev, func = match.groups()
    domain_int = int(domain, 16) if domain else 0
    return f"{domain_int:04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{func or '0'}"


# ---------------------------------------------------------------------------------------------------------------
# JSON round trip


def to_dict(obj: Any) -> Any:
    """Dataclasses → plain JSON-able values (enums become their values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


class SchemaError(ValueError):
    """A recorded snapshot does not fit the model."""


def from_dict(cls: Any, data: Any, path: str = "$") -> Any:
    """Plain values → the typed model, guided by the dataclasses' type hints. Unknown keys are rejected so that a
    corrupt or foreign file is reported, not half-read."""
    origin = typing.get_origin(cls)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(cls) if a is not type(None)]
        if data is None:
            return None
        return from_dict(args[0], data, path) if len(args) == 1 else data
    if cls is Any:
        return data
    if dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object for {cls.__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = set(data) - names
        if unknown:
            raise SchemaError(f"{path}: unknown field(s) {sorted(unknown)} for {cls.__name__}")
        return cls(**{k: from_dict(hints[k], v, f"{path}.{k}") for k, v in data.items()})
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        try:
            return cls(data)
        except ValueError:
            raise SchemaError(f"{path}: {data!r} is not a valid {cls.__name__}") from None
    if origin is list:
        if not isinstance(data, list):
            raise SchemaError(f"{path}: expected a list")
        (item,) = typing.get_args(cls)
        return [from_dict(item, v, f"{path}[{i}]") for i, v in enumerate(data)]
    if origin is dict:
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object")
        key_type, value_type = typing.get_args(cls)
        return {key_type(k): from_dict(value_type, v, f"{path}.{k}") for k, v in data.items()}
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if cls in (int, float, str, bool) and not isinstance(data, cls):
        raise SchemaError(f"{path}: expected {cls.__name__}, got {type(data).__name__}")
    return data
