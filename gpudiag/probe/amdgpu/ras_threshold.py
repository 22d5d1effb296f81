"""The bad-page threshold amdgpu applies to a part by default, when its own value cannot be read.

amdgpu reads the threshold from its RAS table as root only (debugfs bad_page_cnt_threshold; amdsmi answers
NOT_SUPPORTED / NO_PERM otherwise), so memory.bad_pages judges against what the driver itself would use. With the
default amdgpu.bad_page_threshold=-1 that is derived per part, not one constant (amd-gfx, "drm/amdgpu: ..." by
Hawking Zhang, 2025-01-22; amdgpu_ras.c):

    amdgpu_ras_validate_threshold():     bad_page_cnt_threshold = ((con->reserved_pages_in_bytes) >> 21) << 4;
    amdgpu_ras_init_reserved_vram_size(): MP0 13.0.2 / 13.0.6 / 13.0.12: AMDGPU_RAS_RESERVED_VRAM_SIZE_DEFAULT (16 MiB)
                                          MP0 13.0.14: AMDGPU_RAS_RESERVED_VRAM_SIZE_DEFAULT << 1 (32 MiB)

so 128 pages for MP0 13.0.6 and 13.0.12 and 256 for 13.0.14. The MP0 version comes from amdgpu's IP discovery in
sysfs (PciGpu.mp0_ip_version). Where it cannot be read, MI300- and MI350-series parts (gfx942, gfx950) are judged
against 128, the lower of their defaults, and the result says so.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.model import NodeSnapshot, Vendor

_RESERVED_BYTES_BY_MP0 = {"13.0.2": 16 << 20, "13.0.6": 16 << 20, "13.0.12": 16 << 20, "13.0.14": 32 << 20}
BY_ARCHITECTURE = {"gfx942": 128, "gfx950": 128}  # without the MP0 version: the lower of the parts' defaults


def default_for_mp0(mp0: Optional[str]) -> Optional[int]:
    reserved = _RESERVED_BYTES_BY_MP0.get(mp0 or "")
    return (reserved >> 21) << 4 if reserved is not None else None


def refine_defaults(snapshot: NodeSnapshot) -> None:
    """Replace the architecture's stand-in threshold by the part's own default where the PCI probe read the GPU's MP0
    version (probe/amdsmi/ras.py fill_bad_pages set the stand-in: source "default")."""
    mp0_by_bus = {p.pci_bus_id: p.mp0_ip_version for p in snapshot.pci_gpus if p.mp0_ip_version}
    for device in snapshot.devices:
        health = device.memory_health
        if device.vendor != Vendor.AMD or health.bad_page_threshold_source != "default":
            continue
        bus = device.physical_pci_bus_id or device.pci_bus_id
        threshold = default_for_mp0(mp0_by_bus.get(bus))
        if threshold is not None:
            health.bad_page_threshold = threshold
            health.bad_page_threshold_source = f"default:MP0 {mp0_by_bus[bus]}"
