"""PCIe transfer rates to generations, for the units each source uses (docs/vendor-api.md §2)."""

from __future__ import annotations

import re
from typing import Optional

# Per-lane signalling rate in MT/s → generation. amdsmi reports MT/s (sysfs GT/s × 1000); its C code uses exactly
# this table.
_GENERATION_BY_MTS = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}


def generation_from_mts(mts: object) -> Optional[int]:
    """`32000` → 5. Anything that is not a known rate (amdsmi's "N/A", 0 for an untrained link) → None.

    A small tolerance absorbs rates computed from 0.1 GT/s units (gpu_metrics `pcie_link_speed`)."""
    if isinstance(mts, bool) or not isinstance(mts, (int, float)):
        return None
    for rate, generation in _GENERATION_BY_MTS.items():
        if abs(mts - rate) <= rate * 0.05:
            return generation
    return None


_GTS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")


def generation_from_gts_text(text: Optional[str]) -> Optional[int]:
    """sysfs `current_link_speed` / `max_link_speed` ("16.0 GT/s PCIe", or "16 GT/s" before Linux 5.7) and
    amdgpu `pp_dpm_pcie` ("16.0GT/s,") → generation. "Unknown" (link down) → None."""
    match = _GTS.match(text or "")
    return generation_from_mts(float(match.group(1)) * 1000) if match else None
