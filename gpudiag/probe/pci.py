"""GPUs as the PCI bus sees them (sysfs), independent of any vendor library.

This is what still answers when NVML or amdsmi cannot load, when the driver is not bound, or when a GPU has
dropped its link: the device is on the bus (or not), with the kernel's view of its link, AER counters, NUMA
placement, IOMMU group and BARs. File formats: docs/vendor-api.md §2 (link), §3 (AER, numa_node, local_cpulist).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from gpudiag.model import ErrorKind, PciGpu, PcieDpmLevel, ProbeError, Vendor, normalize_pci_bus_id
from gpudiag.probe.amdgpu.sysfs_formats import parse_pp_dpm_pcie
from gpudiag.probe.files import FileReader
from gpudiag.probe.pcie_generation import generation_from_gts_text

VENDOR_IDS = {"0x10de": Vendor.NVIDIA, "0x1002": Vendor.AMD}

# PCI base classes that a GPU reports: 0x03 display controller (VGA 0x0300, 3D 0x0302) and 0x12 processing
# accelerator (AMD Instinct MI300 reports 0x1200). An NVSwitch is a bridge (0x0680) and a GPU's HDMI audio
# function is 0x0403: same vendor ID, not GPUs.
GPU_BASE_CLASSES = ("0x03", "0x12")

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

_AER_FILES = {"correctable": "aer_dev_correctable", "nonfatal": "aer_dev_nonfatal", "fatal": "aer_dev_fatal"}

# include/linux/ioport.h: IORESOURCE_MEM. I/O-port BARs (IORESOURCE_IO, 0x100) are not memory apertures.
_IORESOURCE_MEM = 0x200


def probe_pci_gpus(root: Path = Path("/")) -> tuple[list[PciGpu], list[ProbeError]]:
    """Every NVIDIA/AMD GPU function under `root/sys/bus/pci/devices`, sorted by bus ID, with the errors met
    reading them. Never raises."""
    reader = FileReader(root)
    devices_dir = reader.path("sys/bus/pci/devices")
    gpus = []
    for name in reader.entries(devices_dir) or []:
        gpu = _probe_function(reader, devices_dir / name)
        if gpu is not None:
            gpus.append(gpu)
    return gpus, reader.errors


def _probe_function(reader: FileReader, device: Path) -> Optional[PciGpu]:
    vendor_id = (reader.line(device / "vendor") or "").lower()
    class_code = (reader.line(device / "class") or "").lower()
    if vendor_id not in VENDOR_IDS or not class_code.startswith(GPU_BASE_CLASSES):
        return None
    try:
        bus_id = normalize_pci_bus_id(device.name)
    except ValueError:
        reader.record(device, ErrorKind.ERROR, f"not a PCI bus ID: {device.name!r}")
        return None
    gpu = PciGpu(
        pci_bus_id=bus_id,
        vendor=VENDOR_IDS[vendor_id],
        vendor_id=vendor_id,
        device_id=(reader.line(device / "device") or "").lower(),
        class_code=class_code,
        driver=reader.link_name(device / "driver"),
        current_link_generation=_generation(reader, device / "current_link_speed"),
        current_link_width=reader.integer(device / "current_link_width"),  # 0 = link down: a real reading
        max_link_generation=_generation(reader, device / "max_link_speed"),
        max_link_width=reader.integer(device / "max_link_width"),
        aer=_aer(reader, device),
        numa_node=_numa_node(reader, device),
        local_cpulist=reader.line(device / "local_cpulist"),
        bar_sizes_bytes=_bar_sizes(reader, device / "resource"),
    )
    gpu.upstream_ports = _upstream_ports(device)
    upstream = _upstream_port(device)
    if upstream is not None:
        gpu.upstream_pci_bus_id = upstream.name
        gpu.upstream_max_link_generation = _generation(reader, upstream / "max_link_speed")
        gpu.upstream_max_link_width = reader.integer(upstream / "max_link_width")
    if gpu.driver == "amdgpu":
        _pcie_dpm(reader, device, gpu)
        gpu.mp0_ip_version = _ip_version(reader, device / "ip_discovery/die/0/MP0/0")
    group = reader.link_name(device / "iommu_group")
    if group is not None and group.isdigit():
        gpu.iommu_group = int(group)
        gpu.iommu_domain_type = reader.line(reader.path(f"sys/kernel/iommu_groups/{group}/type"))
    return gpu


def _pcie_dpm(reader: FileReader, device: Path, gpu: PciGpu) -> None:
    """amdgpu's link power-management levels (pp_dpm_pcie, docs/vendor-api.md §2): the pcie checks excuse a link below
    its maximum only when the level in use (`*`) is below the top one. Written by the swsmu print/emit_clk_levels,
    case SMU_PCIE (drivers/gpu/drm/amd/pm/swsmu/smu11/*_ppt.c, smu13/*_ppt.c): one "%d: %s %s %dMhz %s" line per
    level; ASICs without link DPM print their one level, always current (arcturus_ppt.c), or no file at all."""
    text = reader.text(device / "pp_dpm_pcie")
    levels = parse_pp_dpm_pcie(text) if text else []
    gpu.pcie_dpm_levels = [PcieDpmLevel(level.generation, level.width) for level in levels]
    current = [index for index, level in enumerate(levels) if level.current]
    gpu.pcie_dpm_current = current[0] if len(current) == 1 else None


def _ip_version(reader: FileReader, instance: Path) -> Optional[str]:
    """An IP block's version from amdgpu's IP discovery in sysfs (amdgpu_discovery.c: ip_discovery/die/<die>/
    <hw_id name>/<instance>/{major,minor,revision}), e.g. "13.0.6"; None where the directory is absent (older
    kernels, parts without IP discovery). A missing directory is no error, hence the existence test first."""
    if not instance.is_dir():
        return None
    parts = [reader.integer(instance / name) for name in ("major", "minor", "revision")]
    return ".".join(str(p) for p in parts) if None not in parts else None


def _generation(reader: FileReader, path: Path) -> Optional[int]:
    """The kernel prints "32.0 GT/s PCIe" (>= 5.7) or "32 GT/s" (<= 5.6), see drivers/pci/pci-sysfs.c and
    pci_speed_string(); a link that is down or untrained reads "Unknown", which is no error."""
    speed = reader.line(path)
    generation = generation_from_gts_text(speed)
    if generation is None and speed is not None and not speed.startswith("Unknown"):
        reader.record(path, ErrorKind.ERROR, f"unrecognised link speed {speed!r} in {reader.shown(path)}")
    return generation


def _numa_node(reader: FileReader, device: Path) -> Optional[int]:
    node = reader.integer(device / "numa_node")
    return None if node is None or node < 0 else node  # -1: no NUMA affinity (single node, or firmware silent)


def _aer(reader: FileReader, device: Path) -> dict[str, dict[str, int]]:
    """`{"correctable": {"Receiver Error": 2, …, "TOTAL_ERR_COR": 2}, …}`; kinds whose file is missing (kernel
    < 4.19, AER not enabled) are left out. ABI: Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats."""
    aer: dict[str, dict[str, int]] = {}
    for kind, filename in _AER_FILES.items():
        text = reader.text(device / filename)
        if text is None:
            continue
        counters = {}
        for line in text.splitlines():
            name, _, count = line.strip().rpartition(" ")
            if name and count.isdigit():
                counters[name] = int(count)
        aer[kind] = counters
    return aer


def _bar_sizes(reader: FileReader, path: Path) -> dict[int, int]:
    """Memory BAR sizes by resource index from `resource` ("0x<start> 0x<end> 0x<flags>" per line, index = line
    number: 0-5 the BARs, 6 the expansion ROM, 7+ SR-IOV BARs). Unassigned resources are all zero."""
    sizes = {}
    for index, line in enumerate((reader.text(path) or "").splitlines()):
        try:
            start, end, flags = (int(field, 16) for field in line.split())
        except ValueError:
            reader.record(path, ErrorKind.ERROR, f"unexpected line {index} in {reader.shown(path)}: {line!r}")
            continue
        if end > start and flags & _IORESOURCE_MEM:
            sizes[index] = end - start + 1
    return sizes


def _upstream_port(device: Path) -> Optional[Path]:
    """The bridge the device hangs off: the parent of its real sysfs directory
    (sys/devices/pci0000:00/<root port or switch port>/<device>). A device directly on the root complex (common
    in VMs) has no upstream port."""
    parent = Path(os.path.realpath(device)).parent
    return parent if _BDF.match(parent.name) else None


def _upstream_ports(device: Path) -> list[str]:
    """Every bridge above the device up to the root complex, nearest first: the BDF-named ancestors of its real
    sysfs directory (sys/devices/pci0000:00/<root port>/<switch up>/<switch down>/<device>)."""
    ports = []
    for parent in Path(os.path.realpath(device)).parents:
        if not _BDF.match(parent.name):
            break
        ports.append(parent.name)
    return ports


def parse_cpulist(text: str) -> list[int]:
    """`0-23,48-71` (sysfs local_cpulist, cpuset list format) → [0, …, 23, 48, …, 71]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus
