"""What copies over a link should reach, from the link itself, for the active.* bandwidth checks.

PCIe, per direction: raw = GT/s per lane × lanes × encoding / 8, with 8b/10b encoding for Gen1-2, 128b/130b for
Gen3-5 and FLIT mode (242 of 256 bytes) for Gen6 (PCI Express Base Specification). A Gen5 x16 link carries
63.0 GB/s raw, Gen4 x16 31.5. DMA copies lose 10-15% of that to protocol overhead: each TLP of 256 payload bytes
(the usual Max Payload Size) carries ~24 bytes of header, sequence number, LCRC and framing, and ACK and flow-control
DLLPs share the link. Pinned copies on H100/H200 reach 53-57 GB/s on Gen5 x16 and A100 25-26 GB/s on Gen4 x16,
about 0.85 of raw: the default achievable factor.

NVLink, per direction: 25 GB/s a link for NVLink 2-4 (V100: 6 links, 300 GB/s both ways; A100: 12 links, 600 GB/s;
H100/H200: 18 links, 900 GB/s) and 50 GB/s for NVLink 5 (B200: 18 links, 1.8 TB/s) — NVIDIA's data sheets. Copy-
engine copies reach ~80-87% of it (nvbandwidth's device_to_device_memcpy_ce on HGX H100: ~370-390 of 450 GB/s),
hence 0.8. XGMI: MI300X has 7 Infinity Fabric links of 128 GB/s peak both ways (AMD data sheet), 64 GB/s a
direction; one GPU pair uses one link, and hipMemcpyPeer reaches ~48 GB/s of it, hence 0.75.

Every figure can be pinned per node in the profile (Expectations fields `active_*`, see ActiveExpectations).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from gpudiag.checks.common import PhysicalGpu
from gpudiag.checks.pcie import LinkFacts
from gpudiag.model import DeviceSnapshot, NodeSnapshot

GT_PER_SECOND = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
NVLINK_GBPS_PER_LINK = 25.0
NVLINK5_GBPS_PER_LINK = 50.0
NVLINK5_ARCHITECTURES = ("blackwell",)


@dataclass(frozen=True)
class ActiveExpectations:
    """Thresholds of the active checks. A node profile overrides any of them through an Expectations field named
    `active_<field>` (when gpudiag.expect defines it); these are the defaults."""

    pcie_efficiency: float = 0.85  # achievable share of the raw link rate for pinned DMA copies
    pcie_warn_ratio: float = 0.85  # warn below this share of the achievable figure
    pcie_fail_ratio: float = 0.70  # fail below it: a Gen5 x16 link moving Gen4 figures (~26 of 53.6 GB/s) fails
    h2d_expected_gbps: Optional[float] = None  # pins the achievable figure instead of deriving it from the link
    d2h_expected_gbps: Optional[float] = None
    nvlink_gbps_per_link: Optional[float] = None  # None: by architecture (25, or 50 for NVLink 5)
    xgmi_gbps_per_link: float = 64.0
    p2p_efficiency: float = 0.80
    p2p_warn_ratio: float = 0.85
    p2p_fail_ratio: float = 0.70
    p2p_expected_gbps: Optional[float] = None
    stress_clock_fail_ratio: float = 0.5  # fail when the SM clock under load falls below this share of its max
    # stress.py: the steady tensor load holds ≥ 0.95 of the limit on a healthy H200 (lab: 98.5-99.1 %).
    stress_power_warn_ratio: float = 0.90
    stress_power_fail_ratio: float = 0.75
    stress_straggler_ratio: float = 0.05
    hbm_nominal_gbps: Optional[float] = None  # None: stress.NOMINAL_HBM_GBPS by the GPU's name
    hbm_efficiency: float = 0.85  # torch's copy_ reaches 2,133 GB/s once-counted on the lab H200: 0.89 of 4.8 TB/s
    hbm_warn_ratio: float = 0.85
    hbm_fail_ratio: float = 0.70

    @classmethod
    def of(cls, expect: Any) -> "ActiveExpectations":
        return cls(**{f.name: getattr(expect, f"active_{f.name}") for f in fields(cls)
                      if getattr(expect, f"active_{f.name}", None) is not None})


@dataclass(frozen=True)
class Target:
    """The bandwidth a link should reach and where that figure comes from."""
    gb_per_second: float  # what a healthy link achieves
    basis: str  # what the figure rests on, to finish "…% of the N GB/s <basis>"
    warn_ratio: float
    fail_ratio: float
    generation: Optional[int] = None  # PCIe generation, for the remediation
    fabric: bool = False  # NVLink / XGMI (PCIe peer paths are only warned about: the platform shapes them)

    def as_expected(self) -> dict:
        return {"gb_per_second": self.gb_per_second, "basis": self.basis,
                "warn_below_gb_per_second": round(self.gb_per_second * self.warn_ratio, 1),
                "fail_below_gb_per_second": round(self.gb_per_second * self.fail_ratio, 1)}


def pcie_raw_gb_per_second(generation: int, width: int) -> Optional[float]:
    if generation not in GT_PER_SECOND:
        return None
    return GT_PER_SECOND[generation] * width * ENCODING[generation] / 8


def _lesser(*values: Optional[int]) -> Optional[int]:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def expected_host_copy(snapshot: NodeSnapshot, device: DeviceSnapshot, pinned: Optional[float], expect: Any,
                       limits: ActiveExpectations) -> Optional[Target]:
    """Pinned host<->device copies over the link the GPU and its slot both support (not the current link: an
    NVIDIA GPU in a low P-state parks it at Gen1); the profile's expected_pcie_generation/width win, as for
    pcie.link_*."""
    if pinned:
        return Target(pinned, "node profile sets", limits.pcie_warn_ratio, limits.pcie_fail_ratio)
    facts = LinkFacts.of(PhysicalGpu(device, snapshot.pci_gpu(device.pci_bus_id)))
    generation = getattr(expect, "expected_pcie_generation", None) or _lesser(facts.gpu_generation,
                                                                              facts.slot_generation)
    width = getattr(expect, "expected_pcie_width", None) or _lesser(facts.gpu_width, facts.slot_width)
    raw = pcie_raw_gb_per_second(generation, width) if generation and width else None
    if raw is None:
        return None
    return Target(round(raw * limits.pcie_efficiency, 1),
                  f"Gen{generation} x{width} link carries after protocol overhead ({raw:.1f} GB/s raw)",
                  limits.pcie_warn_ratio, limits.pcie_fail_ratio, generation=generation)


def expected_peer_copy(snapshot: NodeSnapshot, src: DeviceSnapshot, dst: DeviceSnapshot, expect: Any,
                       limits: ActiveExpectations) -> Optional[Target]:
    """src -> dst copies over the pair's NVLinks or XGMI links (PeerLink.link_count: direct links, or on NVSwitch
    systems the lesser of the two GPUs' active switch links), or over PCIe when the pair has no fabric."""
    peer = next((p for p in snapshot.peers if {p.gpu_a, p.gpu_b} == {src.index, dst.index}), None)
    path = peer.path if peer else None
    fabric = path in ("nvlink", "xgmi")
    if limits.p2p_expected_gbps:
        return Target(limits.p2p_expected_gbps, "node profile sets", limits.p2p_warn_ratio, limits.p2p_fail_ratio,
                      fabric=fabric)
    if fabric:
        links = peer.link_count or 1
        if path == "nvlink":
            newest = any(a in (src.architecture or "").lower() for a in NVLINK5_ARCHITECTURES)
            per_link = limits.nvlink_gbps_per_link or (NVLINK5_GBPS_PER_LINK if newest else NVLINK_GBPS_PER_LINK)
            name = "NVLink" if links == 1 else "NVLinks"
        else:
            per_link, name = limits.xgmi_gbps_per_link, "XGMI link" if links == 1 else "XGMI links"
        raw = links * per_link
        verb = "carries" if links == 1 else "carry"
        return Target(round(raw * limits.p2p_efficiency, 1), f"{links} {name} {verb} ({raw:g} GB/s per direction raw)",
                      limits.p2p_warn_ratio, limits.p2p_fail_ratio, fabric=True)
    ends = [expected_host_copy(snapshot, d, None, expect, limits) for d in (src, dst)]
    if any(t is None for t in ends):
        return None
    slower = min(ends, key=lambda t: t.gb_per_second)
    return Target(slower.gb_per_second, f"PCIe path carries (the slower GPU's {slower.basis.split(' link')[0]} link)",
                  limits.p2p_warn_ratio, limits.p2p_fail_ratio)
