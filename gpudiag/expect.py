"""What a healthy node looks like: the thresholds the checks judge a snapshot against.

`Expectations` is deliberately flat (one typed field per threshold, no nesting) so that a TOML profile can set any
field by name and `dataclasses.replace(DEFAULT, field=value)` derives a variant. The defaults are what an
experienced operator of H100/H200 and MI300X nodes would start from; where a vendor publishes a number, the comment
cites it, otherwise the comment says why the number was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

GIB = 1024**3


@dataclass(frozen=True)
class Expectations:
    # --- thermal ---------------------------------------------------------------------------------------------
    # Warn when a sensor is within this many °C of its slowdown (NVIDIA SLOWDOWN / AMD CRITICAL) limit, before
    # the GPU starts shedding clocks. 5 °C is about one fan-curve step: enough warning to act on airflow.
    thermal_warn_margin_celsius: float = 5.0

    # --- PCIe ------------------------------------------------------------------------------------------------
    # Replays since the driver loaded. DCGM treats more than 8 replays a minute as unhealthy
    # (DCGM_LIMIT_MAX_PCIREPLAY_RATE, dcgm_gpu_hardware_limits.h); a snapshot holds a count, not a rate, so this
    # is a count that a healthy link does not reach in days of uptime.
    pcie_replay_warn_count: int = 100
    # AER correctable errors (TOTAL_ERR_COR) on the GPU's function since boot. Correctable errors are fixed by the
    # link layer, but a steady stream means a marginal link (riser, retimer, dirty connector).
    aer_correctable_warn_count: int = 100
    # None: expect what the GPU itself supports (PcieInfo.device_max_* / sysfs max_link_*). Set these when a
    # platform is known to run GPUs below their capability by design (e.g. Gen5 GPUs in a Gen4 server).
    expected_pcie_generation: Optional[int] = None
    expected_pcie_width: Optional[int] = None

    # --- memory health ---------------------------------------------------------------------------------------
    # NVIDIA retired pages (pre-Ampere page retirement, single + double bit). DCGM fails a GPU at 60
    # (DCGM_LIMIT_MAX_RETIRED_PAGES, "defined via bug 1665722") and has a soft limit of 15
    # (DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT); the legacy scheme holds at most 64 retirements
    # (NVIDIA "GPU Memory Error Management", Row Remapping). Row-remap failure is always an RMA criterion
    # (same guide, "RMA Policy") and needs no threshold.
    retired_pages_warn_count: int = 15
    retired_pages_fail_count: int = 60
    # AMD: fraction of the device's bad_page_threshold at which to warn. amdgpu itself logs "RAS records:%u
    # exceeds 90%% of threshold" at 90% and reports an RMA reason at 100% (amdgpu_ras_eeprom.c).
    bad_pages_warn_fraction: float = 0.9

    # --- kernel log ------------------------------------------------------------------------------------------
    # Overrides of the XID catalog's verdict (gpudiag/checks/xid_catalog.py). Precedence: ignore > fail > warn >
    # catalog. Empty by default: the catalog holds the defaults, with NVIDIA's resolution buckets beside them.
    xid_fail_codes: tuple[int, ...] = ()
    xid_warn_codes: tuple[int, ...] = ()
    xid_ignore_codes: tuple[int, ...] = ()

    # --- power -----------------------------------------------------------------------------------------------
    # Warn when the enforced power limit is below this fraction of the default limit: someone capped the GPU
    # (nvidia-smi -pl / amd-smi set --power-cap) and jobs run slower than on its peers.
    power_limit_warn_ratio: float = 0.95
    # Warn when the GPU draws more than this multiple of its enforced limit: the power controller is not holding
    # the limit, or the sensor is wrong. Short excursions of a few percent are normal; 10% is not.
    power_over_limit_warn_ratio: float = 1.10

    # --- workload --------------------------------------------------------------------------------------------
    # A GPU below this utilisation is "near idle".
    gpu_idle_percent: int = 10
    # Host CPUs local to a GPU averaging at least this busy are "saturated".
    host_cpu_busy_percent: float = 90.0
    # GPU memory held (used minus driver-reserved) with no process on the GPU, above which it looks leaked.
    # 1 GiB is above what a driver or a persistence daemon holds on its own.
    leaked_memory_warn_bytes: int = 1 * GIB

    # --- inventory and topology ------------------------------------------------------------------------------
    # None: do not check the count (a node profile sets it, e.g. 8 for an HGX board).
    expected_gpu_count: Optional[int] = None
    # Active NVLink/XGMI links per GPU. None: infer from the best-connected GPU of the same model on this node.
    expected_links_per_gpu: Optional[int] = None
    # Any NVLink/XGMI error counter (replay, recovery, CRC) above this count since driver load warns. Healthy
    # links accumulate a few CRC/replay events over weeks; hundreds mean a marginal link or cable/cartridge.
    link_error_warn_count: int = 100

    # --- active (load tests, `gpudiag check --level 2`) ------------------------------------------------------
    # None: the default of checks/active_links.ActiveExpectations, where each is explained and sourced. The
    # *_expected_gbps fields pin the achievable copy rate instead of deriving it from the link (e.g. a platform
    # known to reach less); the ratios are shares of that figure below which a result warns or fails.
    active_h2d_expected_gbps: Optional[float] = None
    active_d2h_expected_gbps: Optional[float] = None
    active_p2p_expected_gbps: Optional[float] = None
    active_pcie_efficiency: Optional[float] = None  # achievable share of the raw PCIe rate (default 0.85)
    active_pcie_warn_ratio: Optional[float] = None
    active_pcie_fail_ratio: Optional[float] = None
    active_nvlink_gbps_per_link: Optional[float] = None  # per direction (default 25, 50 on NVLink 5)
    active_xgmi_gbps_per_link: Optional[float] = None
    active_p2p_efficiency: Optional[float] = None
    active_p2p_warn_ratio: Optional[float] = None
    active_p2p_fail_ratio: Optional[float] = None
    active_stress_clock_fail_ratio: Optional[float] = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"expectation {f.name} must not be negative, got {value!r}")
        if self.retired_pages_warn_count > self.retired_pages_fail_count:
            raise ValueError(
                f"retired_pages_warn_count ({self.retired_pages_warn_count}) is above "
                f"retired_pages_fail_count ({self.retired_pages_fail_count})"
            )
        for name in ("bad_pages_warn_fraction", "power_limit_warn_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"expectation {name} must be in (0, 1], got {getattr(self, name)!r}")
        if self.gpu_idle_percent > 100 or self.host_cpu_busy_percent > 100:
            raise ValueError("gpu_idle_percent and host_cpu_busy_percent are percentages (0-100)")


DEFAULT_EXPECTATIONS = Expectations()
