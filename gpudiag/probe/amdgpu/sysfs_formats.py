"""Parsers for the amdgpu driver's own sysfs files, in the formats the kernel writes them.

Sources: drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c (ras/*_err_count, ras/features, ras/gpu_vram_bad_pages),
drivers/gpu/drm/amd/pm/amdgpu_pm.c and the swsmu print_clk_levels (pp_dpm_pcie); docs/vendor-api.md §2, §5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from gpudiag.probe.pcie_generation import generation_from_gts_text

# What an err_count file reads while a RAS interrupt is being handled (amdgpu_ras_sysfs_read). It is not a count.
RAS_QUERY_INACCESSIBLE = "Query currently inaccessible"

_COUNT_LINE = re.compile(r"^\s*(ue|ce|de)\s*:\s*(\d+)\s*$")
_COUNT_NAMES = {"ue": "uncorrected", "ce": "corrected", "de": "deferred"}


def parse_err_count(text: str) -> Optional[dict[str, int]]:
    """`"ue: 0\\nce: 3\\n"` (`de: N` on newer kernels) → {"uncorrected": 0, "corrected": 3}. None when the file
    holds anything else (the inaccessible message included): never a made-up zero."""
    counts = {}
    for line in text.splitlines():
        match = _COUNT_LINE.match(line)
        if match:
            counts[_COUNT_NAMES[match.group(1)]] = int(match.group(2))
        elif line.strip():
            return None
    return counts if "uncorrected" in counts and "corrected" in counts else None


# amdgpu_ras_block: AMDGPU_RAS_BLOCK__UMC = 0, so bit 0 of the feature mask is the memory controllers' ECC.
_UMC_FEATURE_BIT = 1 << 0
_FEATURE_MASK = re.compile(r"feature mask:\s*(0x[0-9a-fA-F]+)")


def umc_ecc_enabled(features_text: str) -> Optional[bool]:
    """ras/features reads "feature mask: 0x…"; is UMC (HBM ECC) among the enabled RAS features?"""
    match = _FEATURE_MASK.search(features_text)
    return bool(int(match.group(1), 16) & _UMC_FEATURE_BIT) if match else None


@dataclass
class BadPageCounts:
    """amdgpu's bad-page table, counted by state."""
    reserved: int = 0
    pending: int = 0
    unreservable: int = 0


_BAD_PAGE_LINE = re.compile(r"^\s*0x[0-9a-fA-F]+\s*:\s*0x[0-9a-fA-F]+\s*:\s*([RPF])\s*$")
_BAD_PAGE_FLAG = {"R": "reserved", "P": "pending", "F": "unreservable"}  # F: failed to reserve


def parse_bad_pages(text: str) -> Optional[BadPageCounts]:
    """ras/gpu_vram_bad_pages, one "0x<page> : 0x<size> : <R|P|F>" line per retired page. None on an
    unrecognised line."""
    counts = BadPageCounts()
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _BAD_PAGE_LINE.match(line)
        if not match:
            return None
        name = _BAD_PAGE_FLAG[match.group(1)]
        setattr(counts, name, getattr(counts, name) + 1)
    return counts


@dataclass
class PcieLevel:
    """One line of amdgpu's pp_dpm_pcie: a link speed and width level, and whether it is current."""
    generation: Optional[int]
    width: Optional[int]
    current: bool


_DPM_PCIE_LINE = re.compile(r"^\s*\d+:\s*(\S+GT/s),?\s*x(\d+)\b.*?(\*)?\s*$")


def parse_pp_dpm_pcie(text: str) -> list[PcieLevel]:
    """pp_dpm_pcie: one "N: <rate>GT/s, x<width> <clk>Mhz [*]" line per link DPM level, `*` on the current one."""
    levels = []
    for line in text.splitlines():
        match = _DPM_PCIE_LINE.match(line)
        if match:
            rate, width, star = match.groups()
            levels.append(PcieLevel(generation_from_gts_text(rate), int(width), star is not None))
    return levels
