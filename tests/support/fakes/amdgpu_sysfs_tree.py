"""Render an `amd_node.FakeAmdNode` as the amdgpu sysfs tree the kernel would show, on top of the shared
`tests.support.sysfs_tree.SysfsTree` (which lays out the PCI device, its upstream port and driver link).

Added per GPU, in the kernel's formats:
    sys/class/drm/card<N>            -> …/<bdf>/drm/card<N>       (and renderD<128+N>, which the backend skips)
    <bdf>/drm/card<N>/device         -> …/<bdf>
    <bdf>/{product_name,serial_number,unique_id,vbios_version,mem_info_vram_total,mem_info_vram_used,
           current_compute_partition,current_memory_partition,fw_version/<name>_fw_version}
    <bdf>/hwmon/hwmon<M>/{name,temp<i>_{label,input,crit,emergency},power1_input,power1_cap*}
    <bdf>/ras/{features,<block>_err_count,gpu_vram_bad_pages}
"""

from __future__ import annotations

from pathlib import Path

from tests.support.fakes.amd_node import RAS_BLOCK_SYSFS_NAME, FakeAmdGpu, FakeAmdNode
from tests.support.sysfs_tree import IORESOURCE_MEM_32, IORESOURCE_MEM_64_PREFETCH, SysfsTree

# hwmon temp channels (amdgpu_pm.c: temp1 edge, temp2 junction, temp3 mem) and their labels.
_HWMON_CHANNELS = {"edge": (1, "edge"), "hotspot": (2, "junction"), "vram": (3, "mem")}
# amdsmi firmware block names → amdgpu fw_version file prefixes (amdgpu_firmware_info / fw_version attributes).
_FW_FILES = {"PM": "smc", "PSP_SOSDRV": "sos", "CP_MEC1": "mec", "SMU": "smc"}
_BAD_PAGE_FLAG = {0: "R", 1: "P", 2: "F"}
_RAS_FEATURE_BIT = {"umc": 0, "sdma": 1, "gfx": 2, "mmhub": 3, "pcie_bif": 5, "hdp": 6, "xgmi_wafl": 7}
# An MI300X with Resizable BAR: BAR0 maps all VRAM (256 GiB), BAR2 the doorbells, BAR5 the registers.
_GIB = 1024**3
_MI300X_BARS = [
    (0x3F8000000000, 256 * _GIB, IORESOURCE_MEM_64_PREFETCH), (0, 0, 0),
    (0x3FC000000000, 2 * 1024 * 1024, IORESOURCE_MEM_64_PREFETCH), (0, 0, 0),
    (0, 0, 0), (0xB8000000, 512 * 1024, IORESOURCE_MEM_32), (0, 0, 0),
]


def _bars(gpu: FakeAmdGpu) -> list[tuple[int, int, int]]:
    """Resizable BAR maps all VRAM: BAR0 is the next power of two (256 GiB on MI300X/MI325X, 512 GiB on MI355X)."""
    size = 256 * _GIB
    while size < gpu.vram_total_mib * 1024 * 1024:
        size *= 2
    return [(0x3F8000000000, size, IORESOURCE_MEM_64_PREFETCH)] + _MI300X_BARS[1:]


_AER_CLEAN = {
    "correctable": {"RxErr": 0, "BadTLP": 0, "BadDLLP": 0, "Rollover": 0, "Timeout": 0},
    "nonfatal": {"Undefined": 0, "DLP": 0, "PoisonTLP": 0, "CmpltTO": 0},
    "fatal": {"Undefined": 0, "DLP": 0, "SDES": 0, "TLP": 0},
}


def gts(mts: int) -> str:
    """32000 → "32.0 GT/s PCIe", as Linux >= 5.7 prints link speeds."""
    return f"{mts / 1000:.1f} GT/s PCIe"


def add_amdgpu_node(tree: SysfsTree, node: FakeAmdNode) -> list[Path]:
    in_tree = bool(node.gpus) and node.gpus[0].in_tree
    # The in-tree driver has no version file (docs/vendor-api.md §1); its version is the kernel release.
    tree.add_module("amdgpu", node.gpus[0].driver_version if node.gpus and not in_tree else None)
    if in_tree:
        tree.set_kernel_release(node.gpus[0].driver_version.removeprefix("Linuxversion").split("(")[0])
    return [add_amdgpu(tree, gpu, card) for card, gpu in enumerate(node.gpus)]


def add_amdgpu(tree: SysfsTree, gpu: FakeAmdGpu, card: int) -> Path:
    """One MI300-class GPU bound to amdgpu as card<card>; returns its PCI device directory."""
    upstream_bdf = gpu.upstream_port or f"0000:{gpu.bus - 1:02x}:00.0"
    device = tree.add_pci_gpu(
        gpu.bdf,
        vendor="0x1002",
        device=f"0x{gpu.device_id:04x}",
        class_code="0x120000",  # processing accelerator
        link=(gts(gpu.pcie_mts), gpu.pcie_width, gts(gpu.pcie_max_mts), gpu.pcie_max_width),
        upstream=(upstream_bdf, gts(gpu.slot_max_mts), 16),
        driver="amdgpu",
        numa_node=gpu.numa_node,
        local_cpulist="0-47,96-143" if gpu.numa_node == 0 else "48-95,144-191",
        bars=_bars(gpu),
        aer=_AER_CLEAN,
        bridges=gpu.bridges,
    )
    rel = str(device.relative_to(tree.root))
    for name in (f"card{card}", f"renderD{128 + card}"):
        tree.symlink(f"sys/class/drm/{name}", f"{rel}/drm/{name}")
        tree.symlink(f"{rel}/drm/{name}/device", rel)
    attributes = {
        "product_name": gpu.market_name,
        "serial_number": gpu.serial,
        "unique_id": f"{gpu.unique_id:016x}",
        "vbios_version": gpu.vbios_part_number,  # amdgpu_atombios.c prints the VBIOS part number (vbios_pn) here
        "mem_info_vram_total": gpu.vram_total_mib * 1024 * 1024,
        "mem_info_vram_used": gpu.vram_used_mib * 1024 * 1024,
        "current_compute_partition": gpu.compute_partition,
        "current_memory_partition": gpu.memory_partition,
    }
    for name, value in attributes.items():
        tree.write(f"{rel}/{name}", str(value))
    if gpu.mp0_version is not None:  # amdgpu_discovery.c: ip_discovery/die/<die>/<hw id name>/<instance>/
        for name, value in zip(("major", "minor", "revision"), gpu.mp0_version):
            tree.write(f"{rel}/ip_discovery/die/0/MP0/0/{name}", str(value))
    for block, version in gpu.firmware.items():
        tree.write(f"{rel}/fw_version/{_FW_FILES[block]}_fw_version", f"0x{version:08x}")
    _hwmon(tree, rel, gpu, card)
    _ras(tree, rel, gpu)
    return device


def _hwmon(tree: SysfsTree, rel: str, gpu: FakeAmdGpu, card: int) -> None:
    hwmon = f"{rel}/hwmon/hwmon{card + 2}"
    tree.write(f"{hwmon}/name", "amdgpu")
    for sensor, reading in gpu.temperatures.items():
        channel, label = _HWMON_CHANNELS[sensor]
        tree.write(f"{hwmon}/temp{channel}_label", label)
        tree.write(f"{hwmon}/temp{channel}_input", str(reading.current * 1000))
        if reading.critical is not None:
            tree.write(f"{hwmon}/temp{channel}_crit", str(reading.critical * 1000))
        if reading.emergency is not None:
            tree.write(f"{hwmon}/temp{channel}_emergency", str(reading.emergency * 1000))
    tree.write(f"{hwmon}/power1_input", str(gpu.power_watts * 1_000_000))
    tree.write(f"{hwmon}/power1_cap", str(gpu.power_cap_watts * 1_000_000))
    tree.write(f"{hwmon}/power1_cap_default", str(gpu.power_cap_watts * 1_000_000))
    tree.write(f"{hwmon}/power1_cap_max", str(gpu.power_cap_watts * 1_000_000))
    tree.write(f"{hwmon}/power1_cap_min", "0")


def _ras(tree: SysfsTree, rel: str, gpu: FakeAmdGpu) -> None:
    if not gpu.ras_features_present:
        return  # amdgpu.ras_enable=0: no ras/ directory at all
    mask = 0
    for block in gpu.ras_blocks:
        name = RAS_BLOCK_SYSFS_NAME[block]
        corrected, uncorrected, deferred = gpu.ecc(block)
        mask |= 1 << _RAS_FEATURE_BIT[name]
        counts = f"ue: {uncorrected}\nce: {corrected}\nde: {deferred}\n"
        if block in gpu.ras_inaccessible:
            counts = "Query currently inaccessible\n"  # amdgpu_ras.c while RAS is not ready or a reset runs
        tree.write(f"{rel}/ras/{name}_err_count", counts)
    tree.write(f"{rel}/ras/features", f"feature mask: 0x{mask:08x}")
    pages = "".join(f"0x{address:08x} : 0x00001000 : {_BAD_PAGE_FLAG[status]}\n" for address, status in gpu.bad_pages)
    tree.write(f"{rel}/ras/gpu_vram_bad_pages", pages)
