"""What the probes read about the node's RDMA NICs (InfiniBand and RoCE): devices, ports, their counters, the PCI path
from each NIC to the root port, the ACS control of the bridges on the GPUs' and NICs' paths, and the host facts that
GPUDirect RDMA depends on. Sources and file formats: docs/network.md.

Units live in field names; None = not supported or not read (why is in `errors`). Counters keep the kernel's own
names and raw values (counters/port_rcv_data and port_xmit_data count 4-octet words: Documentation/ABI/stable/
sysfs-class-infiniband); the byte figures derived from them carry `_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gpudiag.model.common import ProbeError


@dataclass
class NetDev:
    """The Ethernet netdev behind a RoCE port (`/sys/class/net/<name>`)."""

    name: str
    found_by: str  # "gid_attrs" (ports/N/gid_attrs/ndevs/0) | "device/net" (the PCI function's net/ directory)
    operstate: Optional[str] = None  # "up" | "down" | "lowerlayerdown" | "dormant" | "unknown" (RFC 2863 words)
    carrier: Optional[bool] = None  # None where the kernel refuses the read (EINVAL: interface not up)
    carrier_changes: Optional[int] = None  # link up/down transitions since boot (net-sysfs.c carrier_changes)
    speed_mbps: Optional[int] = None  # None: not running (EINVAL) or -1 (SPEED_UNKNOWN)
    mtu_bytes: Optional[int] = None
    pci_bus_id: Optional[str] = None  # the PCI function behind `device`


@dataclass
class RdmaPort:
    """One port of an RDMA device (`/sys/class/infiniband/<dev>/ports/<n>/`)."""

    number: int
    state: Optional[str] = None  # "ACTIVE" from "4: ACTIVE" (DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER, NOP)
    state_code: Optional[int] = None
    phys_state: Optional[str] = None  # "LinkUp" from "5: LinkUp" (Sleep, Polling, Disabled, …, LinkErrorRecovery)
    phys_state_code: Optional[int] = None
    rate_text: Optional[str] = None  # as the kernel prints it: "400 Gb/sec (4X NDR)"
    rate_gbps: Optional[float] = None  # 400.0; "2.5 Gb/sec (1X SDR)" → 2.5
    width: Optional[str] = None  # "4X"
    width_lanes: Optional[int] = None  # 4
    speed: Optional[str] = None  # "NDR" (older kernels print no word for SDR)
    link_layer: Optional[str] = None  # "InfiniBand" | "Ethernet" | "Unknown"
    lid: Optional[int] = None  # InfiniBand only (0 on RoCE)
    sm_lid: Optional[int] = None
    # counters/ (IBTA PortCounters/PortCountersExtended), by file name; files that read "N/A (no PMA)" or refuse the
    # read (EINVAL: a restricted PF, GPUd issue 1164) are named in counters_unsupported instead.
    counters: dict[str, int] = field(default_factory=dict)
    counters_unsupported: list[str] = field(default_factory=list)
    hw_counters: dict[str, int] = field(default_factory=dict)  # hw_counters/ (driver-specific names), lifespan left out
    hw_counters_unsupported: list[str] = field(default_factory=list)
    rcv_data_bytes: Optional[int] = None  # 4 × counters["port_rcv_data"]
    xmit_data_bytes: Optional[int] = None  # 4 × counters["port_xmit_data"]
    netdev: Optional[NetDev] = None  # RoCE (link_layer Ethernet) ports only


@dataclass
class RdmaDevice:
    """One RDMA device (`/sys/class/infiniband/<name>`) and the PCI function it sits on."""

    name: str  # "mlx5_0", "bnxt_re0", "rocep9s0" (rdma-core's udev naming)
    pci_bus_id: Optional[str] = None  # lowercase, 4-digit domain; None where `device` is no PCI function
    vendor_id: Optional[str] = None  # "0x15b3" Mellanox/NVIDIA, "0x14e4" Broadcom, "0x1dd8" AMD Pensando
    device_id: Optional[str] = None  # "0x1021" ConnectX-7
    driver: Optional[str] = None  # the PCI driver bound to the function: "mlx5_core" | "bnxt_en" | "ionic" | …
    virtual_function: bool = False  # an SR-IOV VF (`device/physfn` exists)
    node_type: Optional[str] = None  # "CA" from "1: CA"
    fw_ver: Optional[str] = None
    board_id: Optional[str] = None  # "MT_0000000838" (mlx5 PSID); absent on bnxt_re and ionic
    hca_type: Optional[str] = None  # "MT4129" (mlx5: the PCI device ID in decimal)
    hw_rev: Optional[str] = None
    node_guid: Optional[str] = None  # "9c63:c003:0055:48fe" as the kernel prints it
    sys_image_guid: Optional[str] = None  # the same on every port of one card
    numa_node: Optional[int] = None  # None: no NUMA affinity (-1) or not read
    current_link_generation: Optional[int] = None  # the NIC's own PCIe link
    current_link_width: Optional[int] = None
    max_link_generation: Optional[int] = None
    max_link_width: Optional[int] = None
    # Every bridge between the NIC and the root complex, nearest first (as PciGpu.upstream_ports): a GPU and a NIC
    # share a PCIe switch when their lists share a bridge below the last (root port) one.
    upstream_ports: list[str] = field(default_factory=list)
    ports: list[RdmaPort] = field(default_factory=list)
    ports_skipped: int = 0  # ports beyond the probe's cap
    errors: list[ProbeError] = field(default_factory=list)


@dataclass
class AcsControl:
    """A bridge's ACS extended capability (PCIe Base Spec 7.7.8; include/uapi/linux/pci_regs.h PCI_ACS_*), with
    lspci's names for the bits: SrcValid TransBlk ReqRedir CmpltRedir UpstreamFwd EgressCtrl DirectTrans."""

    offset: int  # of the capability in extended config space
    capability_raw: int
    control_raw: int
    capability: dict[str, bool] = field(default_factory=dict)
    control: dict[str, bool] = field(default_factory=dict)


@dataclass
class PciBridge:
    """A bridge on the PCI path of a NIC or a GPU, and its ACS state."""

    pci_bus_id: str
    vendor_id: Optional[str] = None
    device_id: Optional[str] = None
    root_port: bool = False  # the topmost bridge of its path (its parent is the host bridge)
    # "present": `acs` holds the capability; "absent": the config space was read whole and has no ACS capability;
    # "unreadable": config space beyond the first 64 bytes is root-only (drivers/pci/pci-sysfs.c pci_read_config);
    # "error": the read failed or the capability list is malformed (see NetworkInfo.errors).
    acs_state: str = "unreadable"
    acs: Optional[AcsControl] = None
    config_bytes_read: Optional[int] = None
    # Where `acs` came from a record root wrote (probe/root_facts/record.py: this process could not read it), when
    # root wrote it (ISO 8601 UTC); None: read by this process.
    acs_recorded_at: Optional[str] = None


@dataclass
class GpuDirectInputs:
    """What GPUDirect RDMA needs of the host, as NCCL and UCX test for it (docs/network.md, "GPUDirect inputs")."""

    # Modules that matter to RDMA and peer memory, loaded (or built in) → their version where /sys/module has one.
    modules_loaded: dict[str, Optional[str]] = field(default_factory=dict)
    # /sys/kernel/mm/memory_peers/<client>/version: peer-memory clients registered with MLNX OFED's ib_core
    # (nv_mem = nv_peer_mem, nv_mem_nc, amdkfd = ROCm), client → version.
    memory_peers: dict[str, Optional[str]] = field(default_factory=dict)
    nvidia_open_kernel_module: Optional[bool] = None  # /proc/driver/nvidia/version names the open modules (dma-buf)
    kernel_release: Optional[str] = None  # dma-buf MRs need ib_umem_dmabuf (Linux 5.12)
    verbs_devices: dict[str, str] = field(default_factory=dict)  # /sys/class/infiniband_verbs: uverbsN → RDMA device


@dataclass
class CounterReading:
    """The port counters of the collection before this one, so that the checks can judge rates since then (a
    collector that reads again keeps its last reading: gpudiag/probe/network/history.py)."""

    seconds_before: float  # how long before this reading it was taken (monotonic clock)
    # "<device>/<port>" → {counter name: value}: counters/ and hw_counters/ by their file names (hw_counters under
    # "hw:<name>", since a driver may give one the name of a PortCounter; a RoCE netdev's carrier_changes under
    # "netdev:carrier_changes").
    ports: dict[str, dict[str, int]] = field(default_factory=dict)

    def of(self, device: str, port: int) -> Optional[dict[str, int]]:
        return self.ports.get(port_key(device, port))


def port_key(device: str, port: int) -> str:
    """How CounterReading.ports names a port: "mlx5_0/1"."""
    return f"{device}/{port}"


@dataclass
class NetworkInfo:
    """One read of the node's RDMA NICs (gpudiag/probe/network/rdma.py read_network)."""

    # The class directory was listed, or is absent (no RDMA devices: nothing to read); False: sysfs itself could not
    # be read under the root, or /sys/class/infiniband exists and could not be listed.
    readable: bool = False
    class_present: Optional[bool] = None  # /sys/class/infiniband exists (ib_core is loaded)
    devices: list[RdmaDevice] = field(default_factory=list)
    devices_skipped: int = 0  # devices beyond the probe's cap
    bridges: list[PciBridge] = field(default_factory=list)  # on the NICs' and GPUs' paths, by bus ID
    host: GpuDirectInputs = field(default_factory=GpuDirectInputs)
    incomplete: Optional[str] = None  # why not everything was read (deadline, a cap), or None
    errors: list[ProbeError] = field(default_factory=list)  # node-level; per-device ones are on the device
    previous: Optional[CounterReading] = None  # the previous collection's counters; None: this is the first read
    # Where some bridges' ACS control could not be read here: what became of root's record of it
    # (probe/root_facts/record.py), e.g. "recorded by root 3 min ago (…)" or "no record at
    # /var/lib/gpudiag/root-facts.json"; None: not needed.
    acs_record: Optional[str] = None

    def device(self, name: str) -> Optional[RdmaDevice]:
        return next((d for d in self.devices if d.name == name), None)
