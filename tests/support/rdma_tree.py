"""Fake RDMA NIC trees (/sys/class/infiniband, the NICs' PCI functions and netdevs, the bridges' config space) laid out
as the kernel lays them out, built from the recordings in tests/fixtures/rdma/ (each cited there).

What is recorded and what is constructed, node by node:
- hgx_h100_ib: every /sys/class/infiniband file of the 8 ConnectX-7 HCAs and the bonded BlueField-3 is GPUd's
  recording of an H100 node, verbatim (gpud-sys-class-infiniband-h100.json). That recording has no PCI links, so the
  HCAs are placed on the PCI layout of the bare-metal Supermicro HGX H200 of nccl-tests issue 256: GPUs 18, 2a, 3a,
  5d, 9a, ab, ba, db (recorded), GPU/NIC pairs under the Broadcom PEX switches 16 (18/19), 27 (2a/29), 38 (3a/3b),
  5a (5d/5c) (recorded), the NIC of GPU db at da (recorded: its netdev enp218s0np0); the NICs of 9a, ab and ba at
  9b, ac and bb, the switches' downstream ports (bus+1) and the root ports are constructed by the recorded pattern.
  The front-end BlueField-3 sits on a root port of its own (constructed). The switches' ACS capability is at
  config offset 0x170 (GPUd PR 236's lspci record), ACSCap all set (the PLX switch's lspci record), ACSCtl all
  clear on the switch ports, and SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ on root ports (nccl issue 629's
  lspci lines; pci-acs-records.json).
- h200_roce: the nccl-tests issue 256 node itself: its GPUs, switches, NIC bus IDs and the three node GUIDs the
  dump shows (recorded); its ports in Ethernet mode carry the counters and hw_counters of GPUd's Ethernet port
  (mlx5_bond_0, recorded), fw 28.39.2048 / board MT_0000000838 / MT4129 of DeepEP issue 128's RoCE ConnectX-7
  (recorded in deepep-38-ibv-devinfo-h100-roce.json's sibling issue), netdev names enp<bus>s0np0 as the node's own
  enp218s0np0 (recorded for da, constructed for the rest), rate "400 Gb/sec (4X NDR)" (mlx5's 400GbE mapping;
  constructed), MTU and carrier_changes (constructed).
- mi300x_thor2 (rdma_tree_amd.py): an MI300X node with 8 Broadcom BCM57608 (THOR2, PCI 0x14e4:0x1760, bnxt_en
  bnxt_pci_tbl) RoCE NICs, the design Juniper validated on Dell XE9680 and Supermicro AS-8125GS-TNMR2 MI300X servers
  (mi300x-node-nic- specs.json). Device files from ucx issue 11048's bnxt_re (fw 231.0.154.0, hca_type "Broadcom
  NetXtreme-C/E RoCE Driver HCA", hw_rev 0x14e4, node GUID pattern; recorded), hw_counters named as bnxt_re's
  hw_counters.c names them (Broadcom/linux-rdma-nxt), no counters/ directory (bnxt_re has no PMA:
  drivers/infiniband/core/sysfs.c creates counters/ only for devices with process_mad), rate "400 Gb/sec (4X NDR)"
  (ib_get_width_and_speed for 400GbE over 4 lanes; constructed); the GPU bus IDs are tests/support/snapshots.py's MI300X
  node, the PCI layout constructed.
- mi355x_pollara (rdma_tree_amd.py): AMD Pensando Pollara 400 (driver ionic) as ROCm's amd-smi and Omnistat describe it
  (amd-ainic-pollara.json): rocep<bus>s0 device names, fw 1.110.1-a-1, counters/ empty, byte counters under
  hw_counters; 8 of them, one per MI355X (rocm-aic PR 61), PCI ID 0x1dd8:0x1002 (ionic.h
  PCI_DEVICE_ID_PENSANDO_IONIC_ETH_PF), the layout constructed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.support.paths import FIXTURES
from tests.support.sysfs_tree import SysfsTree

FIXTURES = FIXTURES / "rdma"

# ACS (include/uapi/linux/pci_regs.h): SV 0x01 TB 0x02 RR 0x04 CR 0x08 UF 0x10 EC 0x20 DT 0x40.
ACS_CAP_ALL = 0x7F  # "ACSCap: SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+"
ACS_CTRL_OFF = 0x00  # "ACSCtl: SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
ACS_CTRL_REDIRECT = 0x1D  # "ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
ACS_OFFSET = 0x170  # "Capabilities: [170 v1] Access Control Services"
GEN5_X16 = ("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def gpud_h100_files() -> dict[str, dict[str, str]]:
    """GPUd's recording, by device: {"mlx5_0": {"fw_ver": "28.41.1000", "ports/1/state": "4: ACTIVE", …}}."""
    devices: dict[str, dict[str, str]] = {}
    for path, text in fixture("gpud-sys-class-infiniband-h100.json")["files"].items():
        device, _, rest = path.partition("/")
        devices.setdefault(device, {})[rest] = text
    return devices


def config_space(vendor: int, device: int, acs_ctrl: Optional[int], acs_cap: int = ACS_CAP_ALL,
                 size: int = 4096) -> bytes:
    """A bridge's PCI config space as sysfs `config` gives root: the IDs, and (acs_ctrl not None) an extended
    capability list of AER at 0x100 → ACS at 0x170. `size` 64 is what an unprivileged reader gets."""
    data = bytearray(4096)
    data[0:4] = vendor.to_bytes(2, "little") + device.to_bytes(2, "little")
    data[0x0A:0x0C] = (0x0604).to_bytes(2, "little")  # class: PCI-to-PCI bridge
    if acs_ctrl is not None:
        data[0x100:0x104] = (0x0001 | (2 << 16) | (ACS_OFFSET << 20)).to_bytes(4, "little")  # AER v2 → 0x170
        data[ACS_OFFSET:ACS_OFFSET + 4] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS v1, last
        data[ACS_OFFSET + 4:ACS_OFFSET + 8] = acs_cap.to_bytes(2, "little") + acs_ctrl.to_bytes(2, "little")
    return bytes(data[:size])


@dataclass
class Nic:
    name: str
    bdf: str
    files: dict[str, str]  # under /sys/class/infiniband/<name>/
    vendor: str = "0x15b3"
    device: str = "0x1021"  # ConnectX-7
    class_code: str = "0x020700"  # InfiniBand controller (0x020000 when the ports are Ethernet)
    driver: str = "mlx5_core"
    numa_node: int = 0
    netdevs: dict[str, dict[str, str]] = field(default_factory=dict)  # ifname → /sys/class/net/<if>/ files


@dataclass
class Pair:
    """A GPU and its NIC below one PCIe switch (or the NIC elsewhere)."""

    gpu: str
    nic: Nic
    root_port: str
    switch_up: str
    gpu_down: str
    nic_down: str
    nic_root_port: Optional[str] = None  # the NIC on another root port / switch (fault variant)
    nic_switch_up: Optional[str] = None


class RdmaTree:
    """Writes RDMA NICs, GPUs and bridges into a SysfsTree."""

    def __init__(self, root: Path, gpus: bool = True):
        self.sys = SysfsTree(root)
        self.root = Path(root)
        self.nic_dirs: dict[str, Path] = {}
        # False: the GPUs are another writer's (a fake vendor node's own tree, tests/support/fabric_nodes.py): pairs
        # add only their NICs and bridges.
        self.gpus = gpus

    def add_gpu(
        self,
        bdf: str,
        *,
        bridges: tuple[str, ...],
        upstream: str,
        vendor: str = "0x10de",
        device: str = "0x2335",
        class_code: str = "0x030200",
        driver: str = "nvidia",
        numa_node: int = 0,
    ) -> None:
        self.sys.add_pci_gpu(bdf, vendor=vendor, device=device, class_code=class_code, driver=driver,
                             numa_node=numa_node, upstream=(upstream, "32.0 GT/s PCIe", 16), bridges=bridges)

    def add_nic(self, nic: Nic, *, bridges: tuple[str, ...], upstream: str) -> Path:
        function = self.sys.add_pci_device(nic.bdf, vendor=nic.vendor, device=nic.device, class_code=nic.class_code,
                                           link=GEN5_X16, upstream=(upstream, "32.0 GT/s PCIe", 16), bridges=bridges,
                                           driver=nic.driver, numa_node=nic.numa_node)
        relative = function.relative_to(self.root)
        ib = f"{relative}/infiniband/{nic.name}"
        for path, text in nic.files.items():
            self.sys.write(f"{ib}/{path}", text)
        self.sys.symlink(f"{ib}/device", str(relative))
        self.sys.symlink(f"sys/class/infiniband/{nic.name}", ib)
        for ifname, attributes in nic.netdevs.items():
            net = f"{relative}/net/{ifname}"
            for name, text in attributes.items():
                self.sys.write(f"{net}/{name}", text)
            self.sys.symlink(f"{net}/device", str(relative))
            self.sys.symlink(f"sys/class/net/{ifname}", net)
        # The path the probe opens (through the class directory's link), which deny_* helpers must name.
        self.nic_dirs[nic.name] = self.sys.path(f"sys/class/infiniband/{nic.name}")
        return self.nic_dirs[nic.name]

    def add_virtual_netdev(self, name: str, attributes: dict[str, str]) -> None:
        """A netdev no PCI function is behind (a bond, a VLAN): /sys/devices/virtual/net/<name>, no `device` link."""
        for attribute, text in attributes.items():
            self.sys.write(f"sys/devices/virtual/net/{name}/{attribute}", text)
        self.sys.symlink(f"sys/class/net/{name}", f"sys/devices/virtual/net/{name}")

    def add_pair(self, pair: Pair, **gpu) -> None:
        """The GPU (an H200 unless `gpu` says otherwise: add_gpu's keywords) and its NIC."""
        if self.gpus:
            self.add_gpu(pair.gpu, bridges=(pair.root_port, pair.switch_up), upstream=pair.gpu_down,
                         numa_node=pair.nic.numa_node, **gpu)
        self.add_nic(pair.nic, bridges=(pair.nic_root_port or pair.root_port, pair.nic_switch_up or pair.switch_up),
                     upstream=pair.nic_down)

    def set_config(self, bdf: str, config: bytes) -> Path:
        path = self.sys.path(f"sys/bus/pci/devices/{bdf}/config")
        path.write_bytes(config)
        return path

    def set_acs(self, root_ports: set[str], switch_ports: set[str], size: int = 4096) -> None:
        """Root ports (stand-in IDs 0x8086:0x352a) with ACS redirect on, switch ports (Broadcom PEX 0x1000:0xc030, as
        nccl-tests issue 256 recorded them) with ACS off; the IDs in sysfs and in config space agree."""
        for ports, (vendor, device), ctrl in ((root_ports, (0x8086, 0x352A), ACS_CTRL_REDIRECT),
                                              (switch_ports, (0x1000, 0xC030), ACS_CTRL_OFF)):
            for bdf in sorted(ports):
                self.sys.write(f"sys/bus/pci/devices/{bdf}/vendor", f"0x{vendor:04x}")
                self.sys.write(f"sys/bus/pci/devices/{bdf}/device", f"0x{device:04x}")
                self.set_config(bdf, config_space(vendor, device, ctrl, size=size))

    def port_file(self, nic: str, port: int, relative: str) -> Path:
        return self.nic_dirs[nic] / "ports" / str(port) / relative

    def set_port(self, nic: str, port: int, relative: str, text: str) -> None:
        path = self.port_file(nic, port, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    def set_device(self, nic: str, relative: str, text: str) -> None:
        (self.nic_dirs[nic] / relative).write_text(text + "\n")

    def add_modules(self, *names: str) -> None:
        for name in names:
            self.sys.add_module(name)


# ---------------------------------------------------------------------------------------------------------------
# The nodes


@dataclass
class Node:
    tree: RdmaTree
    pairs: list[Pair]
    extra_nics: list[Nic] = field(default_factory=list)
    root_ports: set[str] = field(default_factory=set)
    switch_ports: set[str] = field(default_factory=set)

    @property
    def nics(self) -> list[Nic]:
        return [p.nic for p in self.pairs] + self.extra_nics

    def finish(self, config_size: int = 4096) -> "Node":
        """Name the bridges of every pair and write their config space (ACS)."""
        for pair in self.pairs:
            self.root_ports.add(pair.nic_root_port or pair.root_port)
            self.root_ports.add(pair.root_port)
            self.switch_ports |= {pair.switch_up, pair.gpu_down, pair.nic_down, pair.nic_switch_up or pair.switch_up}
        self.tree.set_acs(self.root_ports, self.switch_ports, size=config_size)
        return self


def bus_of(bdf: str) -> int:
    return int(bdf[5:7], 16)


def _pcie_path(switch_up: str) -> tuple[str, str, str]:
    """(root port, GPU downstream port, NIC downstream port) for a switch whose upstream port is `switch_up`: the root
    port one bus below, the downstream ports on the switch's internal bus (constructed; NCCL dumps name only the
    upstream port)."""
    bus = bus_of(switch_up)
    return f"0000:{bus - 1:02x}:01.0", f"0000:{bus + 1:02x}:00.0", f"0000:{bus + 1:02x}:01.0"


# nccl-tests issue 256 (recorded: GPUs, and the switch/NIC of the first four pairs and of db/da).
HGX_GPUS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
            "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
HGX_SWITCHES = ("0000:16:00.0", "0000:27:00.0", "0000:38:00.0", "0000:5a:00.0",
                "0000:97:00.0", "0000:a8:00.0", "0000:b7:00.0", "0000:d8:00.0")  # the last four constructed
HGX_NICS = ("0000:19:00.0", "0000:29:00.0", "0000:3b:00.0", "0000:5c:00.0",
            "0000:9b:00.0", "0000:ac:00.0", "0000:bb:00.0", "0000:da:00.0")  # 9b, ac, bb constructed
GPUD_HCAS = ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")
FRONTEND_BDF, FRONTEND_ROOT = "0000:c1:00.0", "0000:c0:01.0"  # constructed


def constructed_layout(gpu_bus_ids: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(switches, NICs) for GPUs at other bus IDs than the recorded board's, by the recorded pattern (nccl-tests issue
    256: a GPU at bus b below a switch whose upstream port is at b-2 or b-3, its NIC on the switch's other port): here
    the switch at b-3 (root port b-4, downstream ports b-2) and the NIC at b+1. Constructed."""
    buses = [bus_of(gpu) for gpu in gpu_bus_ids]
    return (tuple(f"0000:{b - 3:02x}:00.0" for b in buses), tuple(f"0000:{b + 1:02x}:00.0" for b in buses))


def hgx_h100_ib(root: Path, *, peermem: bool = True, nic_elsewhere: Optional[int] = None,
                privileged: bool = True, gpus: bool = True, gpu_bus_ids: Optional[tuple[str, ...]] = None) -> Node:
    """8x H100-class GPUs, each with its ConnectX-7 NDR HCA below the same switch, plus the BlueField-3 front-end.
    `nic_elsewhere`: the index of a GPU whose HCA is moved below the next pair's switch. `privileged`: the bridges'
    config files as root reads them (4 KiB) or as a user does (64 bytes). `gpus`: RdmaTree's. `gpu_bus_ids`: the GPUs
    elsewhere than on the recorded board (tests/support/acceptance_nodes.py's), their switches and NICs placed by
    constructed_layout."""
    tree = RdmaTree(root, gpus)
    files = gpud_h100_files()
    pairs = []
    gpu_ids, switches, nics = HGX_GPUS, HGX_SWITCHES, HGX_NICS
    if gpu_bus_ids is not None:
        gpu_ids, (switches, nics) = gpu_bus_ids, constructed_layout(gpu_bus_ids)
    for index, (gpu, switch, nic_bdf, name) in enumerate(zip(gpu_ids, switches, nics, GPUD_HCAS)):
        root_port, gpu_down, nic_down = _pcie_path(switch)
        nic = Nic(name=name, bdf=nic_bdf, files=files[name], numa_node=index // 4)
        pair = Pair(gpu, nic, root_port, switch, gpu_down, nic_down)
        if nic_elsewhere == index:
            other = switches[(index + 1) % len(switches)]
            pair.nic_root_port, _, _ = _pcie_path(other)
            pair.nic_switch_up = other
            pair.nic_down = f"0000:{bus_of(other) + 1:02x}:02.0"
        tree.add_pair(pair)
        pairs.append(pair)
    front = Nic(name="mlx5_bond_0", bdf=FRONTEND_BDF, files=dict(files["mlx5_bond_0"]), device="0xa2dc",
                class_code="0x020000", numa_node=1)
    front.files["ports/1/gid_attrs/ndevs/0"] = "bond0"
    tree.add_nic(front, bridges=(), upstream=FRONTEND_ROOT)
    tree.add_virtual_netdev("bond0", {"operstate": "up", "carrier": "1", "carrier_changes": "3", "speed": "200000",
                                      "mtu": "9000"})
    node = Node(tree, pairs, extra_nics=[front], root_ports={FRONTEND_ROOT})
    node.finish(4096 if privileged else 64)
    tree.add_modules("ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib", "nvidia")
    if peermem:
        tree.sys.add_module("nvidia_peermem", version="580.65.06")
    tree.sys.set_proc_nvidia_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  "
                                     "Release Build  (dvs-builder@U16-I3-B03-4-3)  Mon Jul 28 23:00:00 UTC 2025\n")
    tree.sys.set_kernel_release("6.8.0-60-generic")
    for number, nic in enumerate(node.nics):
        tree.sys.write(f"sys/class/infiniband_verbs/uverbs{number}/ibdev", nic.name)
    return node


# nccl-tests issue 256: the three node GUIDs its dump shows (mlx5_0, mlx5_1, mlx5_2), as the kernel prints them.
ROCE_GUIDS = {"mlx5_0": "a87c:b100:03e1:a258", "mlx5_1": "6c35:9b00:03c0:639c", "mlx5_2": "e2cb:a100:03c0:639c"}


def _roce_port(gpud: dict[str, str], ifname: str) -> dict[str, str]:
    port = {k: v for k, v in gpud.items() if k.startswith("ports/1/")}  # GPUd's Ethernet port: counters, state
    port["ports/1/rate"] = "400 Gb/sec (4X NDR)"
    port["ports/1/lid"] = "0x0"
    port["ports/1/sm_lid"] = "0x0"
    port["ports/1/gid_attrs/ndevs/0"] = ifname
    return port


def h200_roce(root: Path, gpus: bool = True) -> Node:
    tree = RdmaTree(root, gpus)
    bond = gpud_h100_files()["mlx5_bond_0"]
    pairs = []
    for index, (gpu, switch, nic_bdf) in enumerate(zip(HGX_GPUS, HGX_SWITCHES, HGX_NICS)):
        name, ifname = f"mlx5_{index}", f"enp{bus_of(nic_bdf)}s0np0"
        files = {"fw_ver": "28.39.2048", "board_id": "MT_0000000838", "hca_type": "MT4129", "hw_rev": "0x0",
                 "node_type": "1: CA", **_roce_port(bond, ifname)}
        if name in ROCE_GUIDS:
            files["node_guid"] = files["sys_image_guid"] = ROCE_GUIDS[name]
        nic = Nic(name=name, bdf=nic_bdf, files=files, class_code="0x020000", numa_node=index // 4,
                  netdevs={ifname: {"operstate": "up", "carrier": "1", "carrier_changes": "2", "speed": "400000",
                                    "mtu": "9000"}})
        root_port, gpu_down, nic_down = _pcie_path(switch)
        pair = Pair(gpu, nic, root_port, switch, gpu_down, nic_down)
        tree.add_pair(pair)
        pairs.append(pair)
    node = Node(tree, pairs).finish()
    tree.add_modules("ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib", "nvidia", "nvidia_peermem")
    return node


# ---------------------------------------------------------------------------------------------------------------
# Faults, each on one NIC of a built node


def port_down(node: Node, nic: str) -> None:
    """As sglang issue 6823's ibstat shows a port with no link: State: Down, Physical state: Disabled, Rate: 40."""
    node.tree.set_port(nic, 1, "state", "1: DOWN")
    node.tree.set_port(nic, 1, "phys_state", "3: Disabled")
    node.tree.set_port(nic, 1, "rate", "40 Gb/sec (4X QDR)")


def half_rate(node: Node, nic: str) -> None:
    """Two of four lanes: the kernel's text for it is GPUd's recorded 2-lane NDR port."""
    node.tree.set_port(nic, 1, "rate", "200 Gb/sec (2X NDR)")


def link_errors(node: Node, nic: str, **counters: int) -> None:
    for name, value in counters.items():
        node.tree.set_port(nic, 1, f"counters/{name}", str(value))


def firmware(node: Node, nic: str, version: str) -> None:
    node.tree.set_device(nic, "fw_ver", version)


def deny_counter(monkeypatch, node: Node, nic: str, name: str, error: int) -> Path:
    """Make one counter file fail its read with `error` (EINVAL: a restricted PF; EIO: a NIC gone)."""
    path = node.tree.port_file(nic, 1, f"counters/{name}")
    original = open

    def guarded(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise OSError(error, os.strerror(error), os.fspath(path))
        return original(file, *args, **kwargs)

    import builtins

    monkeypatch.setattr(builtins, "open", guarded)
    return path
