"""What a healthy node looks like: the thresholds the checks judge a snapshot against (here), node profiles that set
them (profile.py, the shipped TOML in gpudiag/profiles/) and golden baselines (baseline.py).

`Expectations` is deliberately flat (one typed field per threshold, no nesting) so that a TOML profile can set any
field by name and `dataclasses.replace(DEFAULT, field=value)` derives a variant. The defaults are what an
experienced operator of H100/H200 and MI300X nodes would start from; where a vendor publishes a number, the comment
cites it, otherwise the comment says why the number was chosen.

A check family whose settings are its own declares them in a module of this package named <family>_settings.py
(network_settings.py), found by its name: one frozen dataclass `SETTINGS` of flat, typed fields with their defaults,
validated in its __post_init__ (raising ExpectationError). Expectations carries one instance of each
(`family_settings`; `expect.of(NetworkSettings)` gives the family's) and the profile loader takes their fields as
keys beside these (profile.py), so a family adds profile keys without editing this module.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import field, fields
from typing import Any, Optional, TypeVar

from gpudiag.expect.baseline import NodeBaseline
from gpudiag.expect.errors import ExpectationError  # noqa: F401  (re-exported: gpudiag.expect.ExpectationError)
from gpudiag.expect.index import SETTINGS_MODULES
from gpudiag.model.records import dataclass

GIB = 1024**3

COMPUTE_PARTITIONS = ("SPX", "DPX", "TPX", "QPX", "CPX")  # AmdSmiComputePartitionType (docs/vendor-api.md §10)
MEMORY_PARTITIONS = ("NPS1", "NPS2", "NPS4", "NPS8")  # AmdSmiMemoryPartitionType
# How the IOMMU treats the GPUs' DMA: "passthrough" (identity domain, `iommu=pt`), "translated" (DMA / DMA-FQ
# domains), "off" (no IOMMU registered).
IOMMU_MODES = ("passthrough", "translated", "off")
_DOTTED_VERSION = re.compile(r"^\d+(\.\d+)*$")


def version_tuple(version: str) -> tuple[int, ...]:
    """`560.35.03` → (560, 35, 3): driver versions compare numerically, part by part."""
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True)
class Expectations:
    """What the node should be: the defaults, a profile's settings and -p overrides."""
    # --- thermal ---------------------------------------------------------------------------------------------
    # Warn when a sensor is within this many °C of its slowdown (NVIDIA SLOWDOWN / AMD CRITICAL) limit, before
    # the GPU starts shedding clocks. 5 °C is about one fan-curve step: enough warning to act on airflow.
    thermal_warn_margin_celsius: float = 5.0

    # --- PCIe ------------------------------------------------------------------------------------------------
    # Replays since the driver loaded. DCGM treats more than 8 replays a minute as unhealthy
    # (DCGM_LIMIT_MAX_PCIREPLAY_RATE, dcgm_gpu_hardware_limits.h); a snapshot holds a count, not a rate, so this
    # is a count that a healthy link does not reach in days of uptime.
    pcie_replay_warn_count: int = 100
    # AMD: PCIe L0 -> Recovery transitions since the driver loaded (gpu_metrics pcie_l0_to_recovery_count). AMD's
    # node-scraper warns above 1 and errs above 3 (nodescraper/plugins/inband/amdsmi/analyzer_args.py). The count is
    # cumulative, not a rate: the fail limit scales with days since boot (3 per day), so a node up for months is not
    # failed for a handful of recoveries, while a link that retrains continuously (10,013,412 on an MI3xx node,
    # ROCm/device-metrics-exporter PR 191) fails at any age.
    pcie_recovery_warn_count: int = 1
    pcie_recovery_fail_count_per_day: int = 3
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
    # AMD: fail when more bad pages than this are reserved, whatever the device's own threshold (an acceptance
    # policy, e.g. 0: a new GPU carries no retired memory). None: only the device's threshold decides.
    max_bad_pages: Optional[int] = None
    # The ECC mode the node must run: True (ECC off fails), False (a fleet that runs without ECC on purpose: ECC on
    # fails), None (not judged).
    expected_ecc_enabled: Optional[bool] = True

    # --- kernel log ------------------------------------------------------------------------------------------
    # Overrides of the XID catalog's verdict (gpudiag/checks/kernel_log/xid_catalog.py). Precedence: ignore > fail >
    # warn > catalog. Empty by default: the catalog holds the defaults, with NVIDIA's resolution buckets beside them.
    xid_fail_codes: tuple[int, ...] = ()
    xid_warn_codes: tuple[int, ...] = ()
    xid_ignore_codes: tuple[int, ...] = ()
    # The same for amdgpu events, by the kinds the log scanner gives them (AMDGPU_EVENT_KINDS in
    # gpudiag/probe/kernel_log/events.py: "ring_timeout", "gpu_reset_failed", "ras_uncorrectable", …).
    amdgpu_fail_kinds: tuple[str, ...] = ()
    amdgpu_warn_kinds: tuple[str, ...] = ()
    amdgpu_ignore_kinds: tuple[str, ...] = ()
    # Judge only events logged in the last this-many seconds before the snapshot (by the kernel's since-boot
    # stamps); None ("boot" in a profile): everything since boot. Events without a stamp always count.
    kernel_log_window_seconds: Optional[float] = None
    # A hardware fault (a kernel-log finding that resets, reboots or drains) seen on the same GPU or NVSwitch in this
    # many boots escalates to rma: it came back after the reboots that were to clear it. 3 = two reboots, GPUd's
    # DefaultRebootThreshold (github.com/leptonai/gpud components/accelerator/nvidia/xid/threshold.go). The boots
    # come from the log itself where it spans boots, the journal of `gpudiag serve` and the systemd journal
    # (snapshot.boot_history). None: never escalate.
    kernel_log_repeat_boots: Optional[int] = 3

    # --- power -----------------------------------------------------------------------------------------------
    # Warn when the enforced power limit is below this fraction of the default limit: someone capped the GPU
    # (nvidia-smi -pl / amd-smi set --power-cap) and jobs run slower than on its peers.
    power_limit_warn_ratio: float = 0.95
    # Warn when the GPU draws more than this multiple of its enforced limit: the power controller is not holding
    # the limit, or the sensor is wrong. Short excursions of a few percent are normal; 10% is not.
    power_over_limit_warn_ratio: float = 1.10
    # The power limit every GPU must enforce (the SKU's board power unless the site caps it), within the tolerance.
    # None: the limit is judged only against the GPU's default (power_limit_warn_ratio).
    expected_power_limit_watts: Optional[float] = None
    power_limit_tolerance_watts: float = 5.0

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
    # The model name the vendor library reports ("NVIDIA H200", "AMD Instinct MI300X"), compared case-insensitively;
    # shell wildcards allowed ("AMD Instinct MI300X*"). None: not checked.
    expected_gpu_model: Optional[str] = None
    # Active NVLink/XGMI links per GPU. None: infer from the best-connected GPU of the same model on this node.
    expected_links_per_gpu: Optional[int] = None
    # Any NVLink/XGMI error counter (replay, recovery, CRC) above this count since driver load warns. Healthy
    # links accumulate a few CRC/replay events over weeks; hundreds mean a marginal link or cable/cartridge.
    link_error_warn_count: int = 100
    # How long after boot the NVSwitch fabric may still be unset (fabric state not started / in progress) before
    # topology.fabric fails instead of warning. nvidia-fabricmanager starts with the driver and trains the NVSwitch
    # and GPU NVLinks within a minute or two on HGX boards; 10 minutes leaves room for slow driver loads and
    # persistence daemons while a fabric manager that never finishes (stopped, or a driver/FM version mismatch)
    # still fails well before jobs land on a node where CUDA answers error 802 (cudaErrorSystemNotReady).
    fabric_setup_grace_seconds: float = 600.0

    # --- partitions, driver, host prerequisites (None / False: not required) ----------------------------------
    expected_compute_partition: Optional[str] = None  # AMD: one of COMPUTE_PARTITIONS
    expected_memory_partition: Optional[str] = None  # AMD: one of MEMORY_PARTITIONS
    expected_mig_enabled: Optional[bool] = None  # NVIDIA MIG mode
    expected_driver_version: Optional[str] = None  # exactly this driver version
    min_driver_version: Optional[str] = None  # at least this one (dotted numbers, compared part by part)
    # Persistence mode off warns by default; a profile that requires it makes it a failure.
    persistence_mode_required: bool = False
    expected_iommu_mode: Optional[str] = None  # one of IOMMU_MODES; None: translated DMA only warns
    # A BAR smaller than GPU memory fails by default (P2P and GPUDirect need it); False makes it a warning.
    large_bar_required: bool = True
    # Kernel modules that must be loaded, from those the host probe reads (probe/host.py MODULES_OF_INTEREST).
    required_kernel_modules: tuple[str, ...] = ()

    # --- golden baseline (gpudiag check --baseline FILE; not a profile key) ---------------------------------
    baseline: Optional[NodeBaseline] = None

    # --- the families' own settings (<family>_settings.py; each field a profile key of its own) -------------
    # One instance of each discovered SETTINGS type, in module-name order; read them with `of(kind)`.
    family_settings: tuple = field(default_factory=lambda: tuple(kind() for kind in FAMILY_SETTINGS))

    # --- active (load tests, `gpudiag check --level 2`) ------------------------------------------------------
    # None: the default of checks/active/links.ActiveExpectations, where each is explained and sourced. The
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
    # Power stress and HBM (checks/active/stress.py): shares of the enforced power limit the steady load must hold,
    # the slow-GPU threshold against identical siblings, and the HBM copy figure against the part's nominal rate.
    active_stress_power_warn_ratio: Optional[float] = None  # default 0.90
    active_stress_power_fail_ratio: Optional[float] = None  # default 0.75
    active_stress_straggler_ratio: Optional[float] = None  # default 0.05: 5 % below the siblings' median fails
    active_hbm_nominal_gbps: Optional[float] = None  # the part's HBM bandwidth (read + write), pins the table's
    active_hbm_efficiency: Optional[float] = None  # default 0.85 of nominal for a copy kernel's traffic
    active_hbm_warn_ratio: Optional[float] = None
    active_hbm_fail_ratio: Optional[float] = None

    def __post_init__(self) -> None:
        """Reject values no node can be judged by; ExpectationError names the field at fault."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ExpectationError(f.name, f"must not be negative, got {value!r}")
        if self.retired_pages_warn_count > self.retired_pages_fail_count:
            raise ExpectationError("retired_pages_warn_count", f"{self.retired_pages_warn_count} is above "
                                   f"retired_pages_fail_count ({self.retired_pages_fail_count})")
        for name in ("bad_pages_warn_fraction", "power_limit_warn_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ExpectationError(name, f"must be in (0, 1], got {getattr(self, name)!r}")
        for name in ("gpu_idle_percent", "host_cpu_busy_percent"):
            if getattr(self, name) > 100:
                raise ExpectationError(name, f"is a percentage (0-100), got {getattr(self, name)!r}")
        for name in ("expected_gpu_count", "kernel_log_window_seconds", "expected_power_limit_watts"):
            if getattr(self, name) == 0:
                raise ExpectationError(name, "must be above 0")
        if self.kernel_log_repeat_boots is not None and self.kernel_log_repeat_boots < 2:
            raise ExpectationError("kernel_log_repeat_boots", f"a repeat needs two boots at least, got "
                                                              f"{self.kernel_log_repeat_boots}")
        self._check_choices()
        self._check_overlaps()
        self._check_driver_versions()
        # the load tests warn below one share of the expected rate, fail below another
        for test in ("pcie", "p2p", "hbm", "stress_power"):
            warn, fail = getattr(self, f"active_{test}_warn_ratio"), getattr(self, f"active_{test}_fail_ratio")
            if warn is not None and fail is not None and fail > warn:
                raise ExpectationError(f"active_{test}_fail_ratio", f"{fail} is above active_{test}_warn_ratio "
                                                                    f"({warn}): nothing would only warn")

    def of(self, kind: type[_S]) -> _S:
        """The settings of one family (its SETTINGS type) that this Expectations carries."""
        return next((s for s in self.family_settings if type(s) is kind), None) or kind()

    def setting(self, key: str) -> Any:
        """The value of any profile key, this class's or a family's."""
        kind = family_keys().get(key)
        return getattr(self.of(kind) if kind is not None else self, key)

    def _check_choices(self) -> None:
        for name, choices in (("expected_compute_partition", COMPUTE_PARTITIONS),
                              ("expected_memory_partition", MEMORY_PARTITIONS),
                              ("expected_iommu_mode", IOMMU_MODES)):
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise ExpectationError(name, f"{value!r} is not one of {', '.join(choices)}")

    def _check_overlaps(self) -> None:
        for kind, lists in (("xid", ("xid_fail_codes", "xid_warn_codes", "xid_ignore_codes")),
                            ("amdgpu", ("amdgpu_fail_kinds", "amdgpu_warn_kinds", "amdgpu_ignore_kinds"))):
            seen: dict[object, str] = {}
            for name in lists:
                for item in getattr(self, name):
                    if item in seen and seen[item] != name:
                        raise ExpectationError(name, f"{item!r} is also in {seen[item]}: one verdict per {kind}")
                    seen[item] = name

    def _check_driver_versions(self) -> None:
        if self.min_driver_version is not None and not _DOTTED_VERSION.match(self.min_driver_version):
            raise ExpectationError("min_driver_version", f"{self.min_driver_version!r} is not a dotted version "
                                                         f"(e.g. 550.54.15)")
        exact, minimum = self.expected_driver_version, self.min_driver_version
        if exact is not None and minimum is not None and _DOTTED_VERSION.match(exact) \
                and version_tuple(exact) < version_tuple(minimum):
            raise ExpectationError("expected_driver_version", f"{exact} is below min_driver_version ({minimum})")


_S = TypeVar("_S")


def _family_settings_types() -> tuple[type, ...]:
    """The SETTINGS dataclass of every <family>_settings.py module of this package (index.py lists them: written by
    tools/gen_registry_index.py), in name order; a key that two of them (or one of them and Expectations) both name
    raises, since a profile key must mean one thing."""
    found = [importlib.import_module(name).SETTINGS for name in SETTINGS_MODULES]
    owner = {f.name: "Expectations" for f in fields(Expectations)}
    for kind in found:
        for f in fields(kind):
            if f.name in owner:
                raise TypeError(f"profile key {f.name!r} is declared by both {owner[f.name]} and {kind.__name__}")
            owner[f.name] = kind.__name__
    return tuple(found)


def family_keys() -> dict[str, type]:
    """Profile key -> the family SETTINGS type that declares it."""
    return {f.name: kind for kind in FAMILY_SETTINGS for f in fields(kind)}


def with_settings(base: Expectations, **values: Any) -> Expectations:
    """`base` with `values` set, each key routed to Expectations or to the family settings that declare it (a
    value a family cannot have raises ExpectationError from that family's __post_init__)."""
    owners = family_keys()
    core = {k: v for k, v in values.items() if k not in owners}
    carried = tuple(dataclasses.replace(s, **{k: v for k, v in values.items() if owners.get(k) is type(s)})
                    for s in base.family_settings)
    return dataclasses.replace(base, **core, family_settings=carried)


FAMILY_SETTINGS: tuple[type, ...] = _family_settings_types()
DEFAULT_EXPECTATIONS = Expectations()
