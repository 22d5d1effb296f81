"""topology.gpu_nic_affinity and network.gpudirect: each GPU has a NIC near it, and the NIC may read and write the
GPU's memory directly (GPUDirect RDMA) along a path that stays below their PCIe switch.

Where a GPU and a NIC sit relative to each other is read from the PCI tree (PciGpu.upstream_ports and
RdmaDevice.upstream_ports, nearest bridge first) and said in `nvidia-smi topo -m`'s words, whose legend reads:
  PIX  = Connection traversing at most a single PCIe bridge
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
On an HGX H100/H200 each GPU has its ConnectX-7 below the same PCIe switch (PIX: nccl-tests issue 256), the "hw
topology" Azure's health checks verify (check_hw_topology); NCCL then sends each GPU's traffic through that NIC.

GPUDirect RDMA needs (NCCL net_ib.cc ncclIbGdrSupport / ncclIbDmaBufSupport, UCX ib_md.c; docs/network.md):
NVIDIA — the nvidia_peermem module ("Starting with CUDA 11.4 and R470 drivers, a new kernel module nvidia-peermem is
included in the standard NVIDIA driver installers", NVIDIA GPU Operator docs, GPUDirect RDMA), the legacy
nv_peer_mem (MLNX OFED's peer-memory client nv_mem), or dma-buf (Linux 5.12's ib_umem_dmabuf with NVIDIA's open
kernel modules); AMD — ROCm's peer-memory client (memory_peers/amdkfd, with MLNX OFED) or dma-buf (amdgpu exports
dma-bufs; Linux 5.12). And no ACS redirect on the bridges between GPU and NIC: the kernel's own test
(drivers/pci/p2pdma.c calc_map_type_and_dist: every bridge from the provider up to and including the common
upstream bridge, then from the client up to it, `pci_bridge_has_acs_redir`: ctrl & (ReqRedir | CmpltRedir |
EgressCtrl)) — with one, peer-to-peer traffic goes up through the root complex.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import (Check, PhysicalGpu, failed, passed, physical_gpus, skipped, unknown, vendors_present,
                                   verdict, warned)
from gpudiag.checks.network.common import (AFFINITY, GPUDIRECT, UNLOCATED_ADVICE, fabric_to_judge, label,
                                           located_text, not_read, unlocated)
from gpudiag.expect.network_settings import NetworkSettings, settings_of
from gpudiag.model import CheckResult, NodeSnapshot, Status, Vendor
from gpudiag.model.network import NetworkInfo, PciBridge, RdmaDevice
from gpudiag.model.records import dataclass

RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_WORDS = {"PIX": "below the same PCIe switch", "PXB": "below the same PCIe switch tree",
          "PHB": "on the same root port (through the host bridge)", "NODE": "on the same NUMA node, no shared bridge",
          "SYS": "on another NUMA node"}
_REQUIRED = {"switch": ("PIX", "PXB"), "numa": ("PIX", "PXB", "PHB", "NODE")}
_REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "EgressCtrl")


@dataclass
class Relation:
    """Where a NIC sits from a GPU: the nvidia-smi topo word for it and the first bridge both paths share."""
    nic: RdmaDevice
    word: Optional[str]  # RELATIONS, or None when the NUMA nodes are unknown and no bridge is shared
    shared: Optional[str]  # the first bridge both paths pass through
    gpu_bridges: list[str]  # the GPU's path up to and including `shared`
    nic_bridges: list[str]  # the NIC's path below `shared`


def relation(gpu_path: list[str], gpu_numa: Optional[int], nic: RdmaDevice) -> Relation:
    nic_path = nic.upstream_ports
    shared = next((b for b in gpu_path if b in nic_path), None)
    if shared is None:
        if gpu_numa is None or nic.numa_node is None:
            word = None
        else:
            word = "NODE" if gpu_numa == nic.numa_node else "SYS"
        return Relation(nic, word, None, list(gpu_path), list(nic_path))
    gi, ni = gpu_path.index(shared), nic_path.index(shared)
    if shared == gpu_path[-1] and shared == nic_path[-1]:  # only the root port: the host bridge is crossed
        word = "PHB"
    else:
        word = "PIX" if gi <= 1 and ni <= 1 else "PXB"
    return Relation(nic, word, shared, gpu_path[:gi + 1], nic_path[:ni])


def _rank(rel: Relation) -> int:
    return RELATIONS.index(rel.word) if rel.word else len(RELATIONS)


def _gpu_numa(gpu: PhysicalGpu) -> Optional[int]:
    if gpu.device is not None and gpu.device.numa_node is not None:
        return gpu.device.numa_node
    return gpu.pci.numa_node if gpu.pci else None


def nearest(gpu: PhysicalGpu, nics: list[RdmaDevice], settings: NetworkSettings) -> Optional[Relation]:
    """The GPU's NIC: the one the profile pairs it with, else the nearest fabric NIC (the first by name on a tie)."""
    if gpu.pci is None:
        return None
    paired = settings.pairs().get(gpu.pci_bus_id or "")
    candidates = [n for n in nics if n.name == paired] if paired else nics
    relations = [relation(gpu.pci.upstream_ports, _gpu_numa(gpu), n) for n in candidates if n.pci_bus_id]
    return min(relations, key=lambda r: (_rank(r), r.nic.name), default=None)


def _nic_text(rel: Relation) -> str:
    where = f", shared bridge {rel.shared}" if rel.shared else ""
    return f"{label(rel.nic)} {_WORDS.get(rel.word or '', 'at an unknown distance')} ({rel.word or '?'}{where})"


def _topo_command(gpu: PhysicalGpu) -> str:
    if gpu.device is not None and gpu.device.vendor == Vendor.AMD:
        return "`amd-smi topology` and `lspci -tv`"
    return "`nvidia-smi topo -m` (the GPU's row: its NIC should read PIX) and `lspci -tv`"


# -- topology.gpu_nic_affinity ----------------------------------------------------------------------------------


def affinity(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    fabric, nothing = fabric_to_judge(AFFINITY, snapshot, settings)
    if nothing is not None:
        return nothing
    gpus = physical_gpus(snapshot)
    if not gpus:
        return [skipped(AFFINITY, None, "no GPU on this node: nothing to judge")]
    found = {id(g): nearest(g, fabric, settings) for g in gpus}
    if settings.gpu_nic_affinity is not None:
        allowed, source = _REQUIRED[settings.gpu_nic_affinity], f"the profile ({settings.gpu_nic_affinity})"
    else:
        best = min((_rank(r) for r in found.values() if r is not None), default=len(RELATIONS))
        if best >= len(RELATIONS):
            allowed, source = (), "no GPU has a NIC at a known distance"
        else:
            allowed, source = RELATIONS[:best + 1], f"the best GPU of this node ({RELATIONS[best]})"
    paired = settings.pairs()
    nowhere = unlocated(snapshot.network)
    results = []
    for gpu in gpus:
        rel = found[id(gpu)]
        must = ("PIX", "PXB") if gpu.pci_bus_id in paired else allowed
        result = _judge_affinity(gpu, rel, must, source if gpu.pci_bus_id not in paired
                                 else f"the profile's pair {paired[gpu.pci_bus_id]}")
        maybe = [d for d in nowhere if gpu.pci_bus_id not in paired or d.name == paired[gpu.pci_bus_id]]
        if maybe and result.status in (Status.FAIL, Status.WARN):
            result = _not_placed(gpu, maybe, result)
        results.append(result)
    return results + not_read(AFFINITY, snapshot.network)


def _not_placed(gpu: PhysicalGpu, maybe: list[RdmaDevice], judged: CheckResult) -> CheckResult:
    """A GPU without a NIC near it among the NICs placed on the PCI bus, while some NIC could not be placed: that
    one may be its NIC, below its switch. Unknown, not a fault (issue 33, item 5)."""
    return unknown(AFFINITY, gpu.device, f"{gpu.label}: no NIC placed near it, and the PCI function of "
                                         f"{located_text(maybe)}: it may be this GPU's NIC",
                   observed={**(judged.observed or {}), "unlocated": {d.name: d.pci_unreadable for d in maybe}},
                   expected=judged.expected, remediation=UNLOCATED_ADVICE + f" Then look at {_topo_command(gpu)}.")


def _judge_affinity(gpu: PhysicalGpu, rel: Optional[Relation], allowed: tuple[str, ...], source: str) -> CheckResult:
    device = gpu.device
    if gpu.pci is None:
        return skipped(AFFINITY, device, f"{gpu.label}: its PCI path was not read (not on the host's PCI view)")
    expected = f"a fabric NIC {' or '.join(allowed) or 'at a known distance'} ({source})"
    if rel is None:
        return failed(AFFINITY, device, f"{gpu.label}: not the NIC it is paired with, nor any fabric NIC with a PCI "
                                        f"function", observed={"gpu": gpu.pci_bus_id}, expected=expected,
                      remediation=f"Check the profile's gpu_nic_pairs names a NIC of this node (`ls "
                                  f"/sys/class/infiniband`) and {_topo_command(gpu)}.")
    observed = {"gpu": gpu.pci_bus_id, "nic": rel.nic.name, "nic_pci_bus_id": rel.nic.pci_bus_id,
                "relation": rel.word, "shared_bridge": rel.shared, "gpu_numa_node": _gpu_numa(gpu),
                "nic_numa_node": rel.nic.numa_node}
    if rel.word is None:
        return unknown(AFFINITY, device, f"{gpu.label}: its nearest NIC {label(rel.nic)} shares no bridge with it and "
                                         f"their NUMA nodes are not known", observed=observed, expected=expected,
                       remediation=f"Read the NUMA nodes (`cat /sys/bus/pci/devices/*/numa_node`: -1 is none; "
                                   f"enable ACPI SRAT/NUMA reporting in the BIOS) and look at {_topo_command(gpu)}.")
    if rel.word in allowed:
        return passed(AFFINITY, device, f"{gpu.label}: {_nic_text(rel)}", observed=observed, expected=expected)
    status = Status.FAIL if rel.word in ("NODE", "SYS") or "PHB" not in allowed else Status.WARN
    return verdict(AFFINITY, status, device, f"{gpu.label}: no fabric NIC below its PCIe switch; the nearest is "
                                             f"{_nic_text(rel)}", observed=observed, expected=expected,
                   remediation=(f"Its traffic to other nodes crosses the CPU's root complex"
                                f"{' and the socket interconnect' if rel.word == 'SYS' else ''} instead of staying "
                                f"below its switch, at a fraction of the bandwidth. A NIC in the wrong slot, a swapped "
                                f"riser or cable, or a NIC that is missing (network.nics) does this: compare the "
                                f"server's slot map with {_topo_command(gpu)}. NCCL picks the nearest NIC "
                                f"(NCCL_DEBUG=INFO names it per GPU); a NIC far from every GPU is no use to it."))


# -- network.gpudirect ------------------------------------------------------------------------------------------


def _kernel_at_least(release: Optional[str], major: int, minor: int) -> Optional[bool]:
    if not release:
        return None
    parts = release.split(".", 2)
    try:
        return (int(parts[0]), int(parts[1].split("-", 1)[0])) >= (major, minor)
    except (ValueError, IndexError):
        return None


def _stack(snapshot: NodeSnapshot, vendor: Vendor, settings: NetworkSettings) -> CheckResult:
    host = snapshot.network.host
    modules, peers = host.modules_loaded, host.memory_peers
    dmabuf_kernel = _kernel_at_least(host.kernel_release, 5, 12)
    if vendor == Vendor.NVIDIA:
        name = "NVIDIA"
        peermem = [m for m in ("nvidia_peermem", "nv_peer_mem") if m in modules] + \
                  [f"memory_peers/{p}" for p in ("nv_mem", "nv_mem_nc") if p in peers]
        dmabuf = None if host.nvidia_open_kernel_module is None or dmabuf_kernel is None else \
            bool(host.nvidia_open_kernel_module and dmabuf_kernel)
        advice = ("Load the peer-memory module: `modprobe nvidia_peermem` (it ships with the driver since R470; make "
                  "it load at boot: `echo nvidia_peermem > /etc/modules-load.d/nvidia-peermem.conf`; it needs the "
                  "RDMA core (ib_core) loaded first), or run NVIDIA's open kernel modules on Linux >= 5.12 so that "
                  "NCCL registers GPU memory as dma-buf. Confirm with `lsmod | grep nvidia_peermem` and a job's "
                  "`NCCL_DEBUG=INFO` line 'GPU Direct RDMA Enabled'.")
        observed = {"peer_memory": peermem, "open_kernel_module": host.nvidia_open_kernel_module,
                    "kernel_release": host.kernel_release}
    else:
        name = "AMD"
        peermem = [f"memory_peers/{p}" for p in ("amdkfd",) if p in peers]
        dmabuf = None if dmabuf_kernel is None else bool(dmabuf_kernel and "amdgpu" in modules)
        advice = ("Run an RDMA stack that takes ROCm memory: MLNX OFED with its amdkfd peer-memory client "
                  "(/sys/kernel/mm/memory_peers/amdkfd), or the upstream RDMA stack on Linux >= 5.12 with amdgpu "
                  "loaded (dma-buf). Confirm with a job's `NCCL_DEBUG=INFO` (RCCL) GPU Direct RDMA line.")
        observed = {"peer_memory": peermem, "amdgpu_loaded": "amdgpu" in modules,
                    "kernel_release": host.kernel_release}
    path = settings.gpudirect_path
    expected = {"any": "a peer-memory client or dma-buf", "peermem": "a peer-memory client", "dmabuf": "dma-buf"}[path]
    observed["dmabuf_capable"] = dmabuf
    have = {"peermem": bool(peermem), "dmabuf": dmabuf}
    ok = (have["peermem"] or bool(dmabuf)) if path == "any" else bool(have[path])
    if ok:
        flavour = "open kernel modules" if vendor == Vendor.NVIDIA else "amdgpu"
        how = ", ".join(filter(None, (" and ".join(peermem), f"dma-buf ({flavour}, Linux >= 5.12)" if dmabuf else "")))
        return passed(GPUDIRECT, None, f"{name} GPUDirect RDMA available: {how}", observed=observed,
                      expected=expected)
    if (path in ("any", "dmabuf")) and dmabuf is None and not (path == "any" and peermem):
        return unknown(GPUDIRECT, None, f"{name} GPUDirect RDMA: no peer-memory client, and whether dma-buf works "
                                        f"cannot be told (kernel release or driver flavour not read)",
                       observed=observed, expected=expected, remediation=advice)
    missing = "no peer-memory client (nvidia_peermem not loaded)" if vendor == Vendor.NVIDIA and not peermem \
        else "no peer-memory client" if not peermem else "no dma-buf support"
    return failed(GPUDIRECT, None, f"{name} GPUDirect RDMA not available: {missing}"
                                   f"{'' if path != 'any' else ', and no dma-buf-capable stack'}; NCCL falls back to "
                                   f"copies through host memory", observed=observed, expected=expected,
                  remediation=advice)


def _acs(gpu: PhysicalGpu, rel: Relation, bridges: dict[str, PciBridge]) -> Optional[CheckResult]:
    """The ACS control of the bridges between the GPU and its NIC (None when nothing is unreadable: see below)."""
    device = gpu.device
    path = rel.gpu_bridges + rel.nic_bridges
    states = {b: bridges.get(b) for b in path}
    redirect = {b: [bit for bit in _REDIRECT_BITS if s.acs.control.get(bit)] for b, s in states.items()
                if s is not None and s.acs_state == "present" and s.acs is not None}
    redirect = {b: bits for b, bits in redirect.items() if bits}
    unread = [b for b, s in states.items() if s is None or s.acs_state in ("unreadable", "error")]
    observed = {"gpu": gpu.pci_bus_id, "nic": rel.nic.name, "bridges": {b: (s.acs_state if s else "not read")
                                                                        for b, s in states.items()}}
    expected = "no ACS redirect (ReqRedir, CmpltRedir, EgressCtrl) on the bridges between the GPU and its NIC"
    if redirect:
        observed["redirect"] = redirect
        listing = "; ".join(f"{b}: {', '.join(bits)}" for b, bits in sorted(redirect.items()))
        recorded = sorted({states[b].acs_recorded_at for b in redirect if states[b].acs_recorded_at})
        if recorded:
            observed["acs_recorded_by_root_at"] = recorded[0]
        how = f" (as root recorded it at {recorded[0]})" if recorded else ""
        return warned(GPUDIRECT, device, f"{gpu.label}: ACS redirect on the path to {label(rel.nic)} ({listing}): "
                                         f"GPUDirect traffic goes up through the root complex{how}",
                      observed=observed, expected=expected,
                      remediation=("Turn ACS off on the PCIe switches of a bare-metal node (the BIOS setting, e.g. "
                                   "'ACS Enable = Disable' on AMD platforms; or at boot `setpci -s <bridge> "
                                   "ECAP_ACS+0x6.w=0000` for each bridge listed, as NCCL's troubleshooting guide "
                                   "shows). In a VM, ACS belongs to the hypervisor: leave it. Confirm with `lspci -vvv "
                                   "-s <bridge> | grep ACSCtl` (ReqRedir- CmpltRedir-)."))
    if unread:
        return None
    recorded = sorted({s.acs_recorded_at for s in states.values() if s is not None and s.acs_recorded_at})
    if recorded:  # read by root for this unprivileged process (gpudiag root-facts, probe/root_facts/)
        observed["acs_recorded_by_root_at"] = recorded[0]
    how = f" (as root recorded it at {recorded[0]})" if recorded else ""
    return passed(GPUDIRECT, device, f"{gpu.label}: no ACS redirect on the {len(path)} bridge(s) to "
                                     f"{label(rel.nic)}{how}", observed=observed, expected=expected)


def gpudirect(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    settings = settings_of(expect)
    fabric, nothing = fabric_to_judge(GPUDIRECT, snapshot, settings)
    if nothing is not None:
        return nothing
    info: NetworkInfo = snapshot.network
    vendors = vendors_present(snapshot)
    if not vendors:
        return [skipped(GPUDIRECT, None, "no GPU on this node: nothing to judge")]
    results = [_stack(snapshot, vendor, settings) for vendor in (Vendor.NVIDIA, Vendor.AMD) if vendor in vendors]
    bridges = {b.pci_bus_id: b for b in info.bridges}
    unread: list[str] = []
    for gpu in physical_gpus(snapshot):
        rel = nearest(gpu, fabric, settings)
        if rel is None or rel.word not in ("PIX", "PXB"):
            continue  # no switch between them: topology.gpu_nic_affinity says so, ACS does not come into it
        result = _acs(gpu, rel, bridges)
        if result is None:
            unread.append(gpu.pci_bus_id or "?")
        else:
            results.append(result)
    results += not_read(GPUDIRECT, info)
    if unread:
        states = sorted({b.acs_state for b in info.bridges if b.acs_state in ("unreadable", "error")})
        record = f"; root's record: {info.acs_record}" if info.acs_record else ""
        results.append(unknown(GPUDIRECT, None, f"the ACS control of the bridges between {len(unread)} GPU(s) and "
                                                f"their NICs could not be read ({', '.join(states) or 'not read'})"
                                                f"{record}",
                               observed={"gpus": unread, "acs_states": states, "root_record": info.acs_record},
                               expected="the bridges' ACS control readable",
                               remediation="The ACS capability lies in extended config space, which the kernel gives "
                                           "only to CAP_SYS_ADMIN (pci-sysfs.c). The shipped units have root record "
                                           "it before each run (`ExecStartPre=-+gpudiag root-facts`; "
                                           "gpudiag-check.timer refreshes it every 5 min): enable the timer "
                                           "(`systemctl enable --now gpudiag-check.timer`), or record it now with "
                                           "`sudo gpudiag root-facts`, or run the check as root. Read it yourself "
                                           "with `sudo lspci -vvv | grep -e ACSCtl`."))
    return results


# topology.gpu_nic_affinity is the topology family's (checks/topology.py declares it); network.gpudirect network's.
TOPOLOGY_CHECKS = (
    Check(AFFINITY, affinity, "each GPU has a fabric NIC below its PCIe switch (nvidia-smi topo -m's PIX/PXB), or "
                              "as near as the profile asks"),
)
CHECKS = (
    Check(GPUDIRECT, gpudirect, "GPUDirect RDMA is possible: a peer-memory client or dma-buf, and no ACS redirect "
                                "between each GPU and its NIC"),
)
