"""What the probes read about the whole node: backends, the PCI bus, the host, the kernel log; the snapshot."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any, Optional

from gpudiag.model.common import SNAPSHOT_SCHEMA_VERSION, ProbeError, Vendor
from gpudiag.model.device import DeviceSnapshot, PeerLink
from gpudiag.model.network import NetworkInfo
from gpudiag.model.records import dataclass

if TYPE_CHECKING:  # imported when a snapshot is read back (serialize.py) or the load tests run: not by a level-1 check
    from gpudiag.model.active import ActiveResults
    from gpudiag.model.screen import ScreeningInfo  # read by probe/screening/ when the state directory holds screens


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
class PcieDpmLevel:
    """One line of amdgpu's pp_dpm_pcie: a link power-management level the driver may switch the link to."""

    generation: Optional[int] = None
    width: Optional[int] = None


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
    # Every bridge between the GPU and the root complex, nearest first (switch ports, then the root port): a
    # firmware-first (APEI/GHES) PCIe error names a root port, and the GPUs below it are the ones it concerns.
    upstream_ports: list[str] = field(default_factory=list)
    # amdgpu's link DPM levels (pp_dpm_pcie, lowest first) and the index of the one in use (the line marked `*`);
    # empty / None where the file is absent (other drivers, ASICs without link DPM).
    # amdgpu's IP discovery: the MP0 (PSP) IP version, "13.0.6" (ip_discovery/die/0/MP0/0/{major,minor,revision});
    # amdgpu derives per-part RAS settings from it (the default bad-page threshold among them).
    mp0_ip_version: Optional[str] = None
    pcie_dpm_levels: list[PcieDpmLevel] = field(default_factory=list)
    pcie_dpm_current: Optional[int] = None
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
    """The host around the GPUs: kernel, driver modules, IOMMU, CPUs and NUMA nodes."""
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
    boot_id: Optional[str] = None  # /proc/sys/kernel/random/boot_id: names this boot in journals (issue 21)


@dataclass
class KernelEvent:
    """One line of interest in the kernel log."""

    vendor: Optional[Vendor]  # None: a PCIe slot event (pcieport), the checks find the GPU below the port
    kind: str  # "xid" | "ring_timeout" | "gpu_reset" | "gpu_reset_failed" | "ras_uncorrectable" | "page_fault" | …
    message: str
    pci_bus_id: Optional[str] = None  # normalised; for XIDs the log omits the function, ".0" is assumed
    code: Optional[int] = None  # the XID number
    pid: Optional[int] = None
    process: Optional[str] = None
    timestamp_seconds: Optional[float] = None  # seconds since boot, as the log stamps it
    count: Optional[int] = None  # e.g. the number of uncorrectable errors an amdgpu RAS line reports
    # What the line itself says about its severity or outcome: "fatal" / "nonfatal" / "correctable" (NVSwitch SXid,
    # NVLink5 Xid 144-150), the recovery action an Xid 154 moved to ("none", "reset", "reboot", "drain"), or
    # "detail" for an SXid line that only adds data to the record before it.
    detail: Optional[str] = None
    wall_time: Optional[float] = None  # epoch seconds, where the log line carries a wall clock (dmesg -T/iso, syslog)
    boot: Optional[str] = None  # the boot the line came from, where the log spans boots (journal _BOOT_ID, kern.log)
    decoded: Optional[str] = None  # what the line decodes to beyond its kind: an ACA STATUS's set bits, a GHES port;
    # on a NIC record (KernelLogInfo.nic_events), the netdev or RDMA device the line names
    # The kmsg sequence number of the record (Documentation/ABI/testing/dev-kmsg), where the log carries one: the
    # cursor the daemon follows the log by (gpudiag/daemon/follower.py; issue 34, item 3).
    seq: Optional[int] = None


@dataclass
class KernelLogInfo:
    """What the kernel log scan read and the driver events it found."""
    source: Optional[str] = None  # "/dev/kmsg" or the file given
    readable: bool = False
    error: Optional[ProbeError] = None
    lines_scanned: int = 0
    events: list[KernelEvent] = field(default_factory=list)
    records_skipped: int = 0  # records that could not be parsed (e.g. a number no kernel prints), each alone
    records_not_kernel: int = 0  # /dev/kmsg records user space wrote (facility not kernel): never driver events
    lines_truncated: int = 0  # lines longer than a kernel record, read up to the cap only
    incomplete: Optional[str] = None  # why not all of the log was scanned (deadline, size cap), or None
    # Lines in no format the scanner reads that may hold a driver record (a driver prefix after an unknown stamp, a
    # binary or compressed file): counted, and the first one kept, so that the checks never say "no events" of them.
    unreadable_lines: int = 0
    first_unreadable: Optional[str] = None
    # Of those, the ones that name a GPU (its bus ID, normalised) → how many and the first: a line that names a GPU
    # warns that GPU only; the rest, naming none, warn node-level (issue 32, item 5); the first of those under "".
    unreadable_gpus: dict[str, int] = field(default_factory=dict)
    unreadable_gpu_first: dict[str, str] = field(default_factory=dict)
    formats: dict[str, int] = field(default_factory=dict)  # driver lines read, by the line format they came in
    boots: int = 0  # boots the log spans, where it says (0: one boot, or not known)
    # The RDMA NIC drivers' records (gpudiag/probe/network/kernel_log.py), kept apart from the GPU events above, which
    # the GPU checks, the exporter's event counts and the service journal read.
    nic_events: list[KernelEvent] = field(default_factory=list)
    # The highest kmsg sequence number read (any record, a driver's or not), where the log carries them: the daemon's
    # cursor, "events since N" (gpudiag/daemon/follower.py; issue 34, item 3). None for a log without them.
    last_seq: Optional[int] = None


@dataclass
class BootFault:
    """A driver event of an earlier boot, as the node's own records keep it (issue 21, item 7)."""
    boot: str  # the boot ID, or a name for a boot known only by its place ("earlier boot(s)")
    kind: str  # the KernelEvent kind
    pci_bus_id: Optional[str] = None
    code: Optional[int] = None
    source: str = ""  # "gpudiag journal" | "journalctl"
    detail: Optional[str] = None  # as KernelEvent.detail


@dataclass
class BootHistory:
    """The driver events of earlier boots: the journal of `gpudiag serve` and the systemd journal, each read within
    a deadline. `sources` says what was read, `problems` what could not be (neither is fatal)."""
    current_boot: Optional[str] = None
    sources: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    faults: list[BootFault] = field(default_factory=list)
    boots: int = 0  # earlier boots the records reach back to
    # The collection's deadline stopped a read (a `problems` entry says which): earlier boots may hold faults that
    # `faults` lacks, so a fault not seen in enough boots may still be a repeat.
    cut_short: bool = False


@dataclass
class CollectorRun:
    """How one part of the collection went: the exporter's self-health comes from these."""

    name: str  # "host" | "kernel_log" | "nvml" | "amdsmi" | "amdgpu-sysfs" | "peers"
    success: bool
    duration_seconds: float
    error: Optional[str] = None


@dataclass
class NodeSnapshot:
    """One collection of the whole node: host, PCI bus, vendor backends, devices, peers and kernel log."""
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
    boot_history: Optional[BootHistory] = None  # earlier boots' driver events, where the node keeps them
    collectors: list[CollectorRun] = field(default_factory=list)
    network: Optional[NetworkInfo] = None  # the RDMA NICs (probe/network/rdma.py); None: not collected
    screening: Optional[ScreeningInfo] = None  # the idle-time screens' record (docs/screening.md); None: not read
    # The readings of the probe parts families add (gpudiag/probe/<part>/part.py), by part name, as plain JSON values
    # (the family's model type through serialize.to_dict; its checks read it back with from_dict): a new family adds
    # its part without a field here (issue 34, item 2). A part absent: not collected.
    parts: dict[str, Any] = field(default_factory=dict)

    def backend(self, name: str) -> Optional[BackendInfo]:
        return next((b for b in self.backends if b.name == name), None)

    def pci_gpu(self, pci_bus_id: Optional[str]) -> Optional[PciGpu]:
        return next((p for p in self.pci_gpus if p.pci_bus_id == pci_bus_id), None)
