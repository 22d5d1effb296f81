"""Every metric gpudiag exports: its name, type, help and labels, in one place.

Naming (docs/architecture.md; Prometheus naming): prefix `gpudiag_`, base units in the name (`_celsius`, `_watts`,
`_joules`, `_hertz`, `_bytes`, `_seconds`, `_ratio`), counters end in `_total`. Identity labels (model, serial,
VBIOS, driver) sit only on `gpudiag_gpu_info` (a NIC's on `gpudiag_nic_info`); every per-GPU series carries `gpu`
(index), `uuid` and `pci_bus_id` so that it can be joined to the info series. The dashboard and alert-rule tests check
their expressions against this catalog, so a renamed metric breaks them rather than silently emptying a panel.

A check family adds its metrics in a module of its own, gpudiag/exporter/metrics_<family>.py, found by its name
(metric_modules.py imports them: this module imports none, since they import it):
it defines its MetricSpecs with `define` / `gpu_metric` and renders them in `add(fs, snapshot)`, which
node_metrics.add_snapshot calls for every collection (the exporter and the textfile). How to add one:
docs/adding-a-check-family.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: its name, kind, help and labels."""
    name: str  # the sample name as exposed (counters include `_total`)
    kind: str  # "gauge" | "counter"
    help: str
    labels: tuple[str, ...]


GPU_LABELS = ("gpu", "uuid", "pci_bus_id")

_ALL: dict[str, MetricSpec] = {}


def _define(name: str, kind: str, help_text: str, labels: tuple[str, ...] = ()) -> MetricSpec:
    assert name.startswith("gpudiag_") and (kind == "counter") == name.endswith("_total"), name
    spec = MetricSpec(name, kind, help_text, labels)
    _ALL[name] = spec
    return spec


def _gpu(name: str, kind: str, help_text: str, extra: tuple[str, ...] = ()) -> MetricSpec:
    return _define(name, kind, help_text, GPU_LABELS + extra)


# -- self-health and node ---------------------------------------------------------------------------------------

BUILD_INFO = _define("gpudiag_build_info", "gauge", "gpudiag build; always 1.", ("version", "python_version"))
BACKEND_UP = _define(
    "gpudiag_backend_up", "gauge", "1 when the vendor library loaded and initialised, else 0.", ("backend", "vendor")
)
BACKEND_INFO = _define(
    "gpudiag_backend_info",
    "gauge",
    "Driver stack versions a loaded vendor library reports; always 1.",
    ("backend", "vendor", "driver_version", "library_version", "runtime_version"),
)
COLLECTOR_SUCCESS = _define(
    "gpudiag_collector_success",
    "gauge",
    "1 when this part of the last collection finished within its deadline without error, else 0.",
    ("collector",),
)
COLLECTOR_DURATION = _define(
    "gpudiag_collector_duration_seconds", "gauge", "How long this part of the last collection took.", ("collector",)
)
COLLECTIONS = _define(
    "gpudiag_collections_total",
    "counter",
    "Collection cycles by outcome: complete, overrun (missed its deadline), error.",
    ("outcome",),
)
LAST_COLLECTION = _define(
    "gpudiag_last_collection_timestamp_seconds",
    "gauge",
    "Unix time at which the last complete collection finished.",
)
PROBE_ERRORS = _define(
    "gpudiag_probe_errors",
    "gauge",
    "Probe errors in the last collection by kind; node-level errors have empty gpu labels.",
    GPU_LABELS + ("kind",),
)
KERNEL_LOG_READABLE = _define(
    "gpudiag_kernel_log_readable", "gauge", "1 when the kernel log could be read in the last collection, else 0."
)
DEVICE_UP = _gpu(
    "gpudiag_device_up",
    "gauge",
    "1 when the GPU answered its probe in the last collection; 0 when it was lost, hung past the deadline, or is on "
    "the PCI bus but no vendor library enumerates it.",
)
CHECK_OK = _define(
    "gpudiag_check_ok",
    "gauge",
    "1 when the check passed, warned or was skipped; 0 when it failed or could not decide (unknown).",
    ("check", "gpu"),
)
# The state set behind gpudiag_check_ok: which of pass/warn/fail/skip/unknown each (check, gpu) is in, so that a skip
# or an unknown is not read as a pass. The (check, gpu) series of gpudiag_check_ok, plus the GPU's uuid and
# pci_bus_id to join without gpudiag_gpu_info; node-level results are split by the GPU on the PCI bus that no library
# lists they are about (gpu="", its pci_bus_id; issue 33 item 8), the rest of the node's with all three empty.
CHECK_STATUS = _define(
    "gpudiag_check_status",
    "gauge",
    "1 for the check's current status (pass, warn, fail, skip, unknown), 0 for the other statuses.",
    ("check", "gpu", "uuid", "pci_bus_id", "status"),
)
# The same state set for what the network family judges per NIC and port (gpudiag/report/subject.py): a NIC's bus ID
# is its own, so it has its own series rather than gpudiag_check_status's pci_bus_id, which names GPUs. A network
# check's node-level results (the count of NICs) stay in gpudiag_check_status only.
NIC_CHECK_STATUS = _define(
    "gpudiag_nic_check_status",
    "gauge",
    "1 for the check's current status on this NIC port (pass, warn, fail, skip, unknown), 0 for the other statuses.",
    ("check", "nic", "pci_bus_id", "port", "status"),
)
# Node-level and always present after a collection, even with no GPU at all: what a "no GPU left" alert needs, since
# count() over per-GPU series of a node that lost every GPU is no series at all.
NODE_GPUS = _define(
    "gpudiag_node_gpus",
    "gauge",
    "GPUs this node shows: GPU functions on the PCI bus (source=pci_bus), and GPUs that answered their vendor "
    "library in the last collection (source=answering).",
    ("source",),
)
XID_ERRORS = _gpu(
    "gpudiag_gpu_xid_errors_total",
    "counter",
    "NVIDIA Xid errors: those in the kernel log when the exporter started, then each new one (NVML event or log line, "
    "once).",
    ("code",),
)
# Node-level: an NVSwitch is no GPU. Its series are bounded by EventTally (MAX_SWITCHES bus IDs, then "other").
SXID_EVENTS = _define(
    "gpudiag_nvswitch_sxid_events_total",
    "counter",
    "NVSwitch SXid errors in the kernel log since the exporter started, by switch PCI bus ID and SXid code (each "
    "record once: its Severity/Data dump lines are not counted).",
    ("pci_bus_id", "code"),
)
KERNEL_LOG_EVENTS = _gpu(
    "gpudiag_gpu_kernel_log_events_total",
    "counter",
    "GPU error lines in the kernel log other than Xids (ring timeouts, resets, RAS errors), from its first read on.",
    ("kind",),
)

# -- per GPU ----------------------------------------------------------------------------------------------------

GPU_INFO = _gpu(
    "gpudiag_gpu_info",
    "gauge",
    "GPU identity; always 1.",
    ("vendor", "model", "serial", "vbios_version", "driver_version"),
)
TEMPERATURE = _gpu("gpudiag_gpu_temperature_celsius", "gauge", "Temperature by sensor.", ("sensor",))
TEMPERATURE_THRESHOLD = _gpu(
    "gpudiag_gpu_temperature_threshold_celsius",
    "gauge",
    "Temperature at which the GPU slows down, shuts down, or exceeds its maximum operating temperature.",
    ("sensor", "threshold"),
)
POWER = _gpu("gpudiag_gpu_power_watts", "gauge", "Power draw.")
POWER_LIMIT = _gpu("gpudiag_gpu_power_limit_watts", "gauge", "Power limit in force.")
POWER_DEFAULT_LIMIT = _gpu("gpudiag_gpu_power_default_limit_watts", "gauge", "Default power limit of the board.")
ENERGY = _gpu(
    "gpudiag_gpu_energy_joules_total", "counter", "Energy consumed since the driver loaded or the accumulator started."
)
CLOCK = _gpu("gpudiag_gpu_clock_hertz", "gauge", "Current clock frequency.", ("clock",))
CLOCK_MAX = _gpu("gpudiag_gpu_clock_max_hertz", "gauge", "Maximum clock frequency.", ("clock",))
UTILIZATION = _gpu(
    "gpudiag_gpu_utilization_ratio", "gauge", "Fraction of the last sample period the engine was busy.", ("engine",)
)
MEMORY_TOTAL = _gpu("gpudiag_gpu_memory_total_bytes", "gauge", "Device memory size.")
MEMORY_USED = _gpu("gpudiag_gpu_memory_used_bytes", "gauge", "Device memory in use.")
PCIE_GENERATION = _gpu(
    "gpudiag_gpu_pcie_link_generation",
    "gauge",
    "PCIe link generation: current, max (what this slot allows) and device_max (what the GPU supports).",
    ("kind",),
)
PCIE_WIDTH = _gpu("gpudiag_gpu_pcie_link_width_lanes", "gauge", "PCIe link width, by the same kinds.", ("kind",))
PCIE_REPLAYS = _gpu("gpudiag_gpu_pcie_replays_total", "counter", "PCIe replays (link-level retransmissions).")
PCIE_REPLAY_ROLLOVERS = _gpu("gpudiag_gpu_pcie_replay_rollovers_total", "counter", "PCIe replay-number rollovers.")
PCIE_LINK_ERRORS = _gpu(
    "gpudiag_gpu_pcie_link_errors_total",
    "counter",
    "PCIe link error counters the vendor library reports.",
    ("counter",),
)
PCIE_AER_ERRORS = _gpu(
    "gpudiag_gpu_pcie_aer_errors_total",
    "counter",
    "PCIe AER errors the kernel counted on the GPU's function, by severity and error type.",
    ("severity", "error"),
)
ECC_ENABLED = _gpu(
    "gpudiag_gpu_ecc_enabled",
    "gauge",
    "1 when ECC is enabled: now (current) or after the next reset (pending).",
    ("mode",),
)
ECC_ERRORS = _gpu(
    "gpudiag_gpu_ecc_errors_total",
    "counter",
    "Memory ECC errors: corrected/uncorrected, since driver load (volatile) or over the lifetime (aggregate).",
    ("severity", "scope"),
)
ECC_DEFERRED = _gpu(
    "gpudiag_gpu_ecc_deferred_errors_total", "counter", "Deferred (poisoned, consumed later) ECC errors (AMD)."
)
ECC_BLOCK_ERRORS = _gpu(
    "gpudiag_gpu_ecc_block_errors_total", "counter", "ECC errors by hardware block.", ("block", "severity")
)
REMAPPED_ROWS = _gpu(
    "gpudiag_gpu_remapped_rows", "gauge", "Memory rows remapped, by the error that caused it.", ("cause",)
)
ROW_REMAP_PENDING = _gpu("gpudiag_gpu_row_remap_pending", "gauge", "1 when a row remap waits for a GPU reset.")
ROW_REMAP_FAILED = _gpu("gpudiag_gpu_row_remap_failed", "gauge", "1 when a row remap failed (no spare row left).")
ROW_REMAP_BANKS = _gpu(
    "gpudiag_gpu_row_remap_banks",
    "gauge",
    "Memory banks by how many spare rows they have left (max, high, partial, low, none).",
    ("availability",),
)
RETIRED_PAGES = _gpu("gpudiag_gpu_retired_pages", "gauge", "Retired memory pages by cause.", ("cause",))
RETIRED_PAGES_PENDING = _gpu(
    "gpudiag_gpu_retired_pages_pending", "gauge", "1 when a page retirement waits for a GPU reset."
)
BAD_PAGES = _gpu("gpudiag_gpu_bad_pages", "gauge", "Bad memory pages by state (AMD).", ("state",))
BAD_PAGES_THRESHOLD = _gpu(
    "gpudiag_gpu_bad_pages_threshold", "gauge", "Bad pages after which the GPU is to be replaced (AMD)."
)
THROTTLE = _gpu(
    "gpudiag_gpu_throttle_reason_active", "gauge", "1 while this reason holds the clocks down, else 0.", ("reason",)
)
THROTTLE_SECONDS = _gpu(
    "gpudiag_gpu_throttle_seconds_total",
    "counter",
    "Time the clocks were held down for this reason since the driver loaded (NVIDIA violation and clock-event "
    "counters); rate() is the share of time throttled.",
    ("reason",),
)
THROTTLE_RESIDENCY = _gpu(
    "gpudiag_gpu_throttle_residency_total",
    "counter",
    "AMD firmware ticks spent in this throttle limit; rate() over rate(gpudiag_gpu_throttle_accumulation_total) is "
    "the share of time throttled.",
    ("reason",),
)
THROTTLE_ACCUMULATION = _gpu(
    "gpudiag_gpu_throttle_accumulation_total",
    "counter",
    "AMD firmware accumulation counter: every tick, the denominator of gpudiag_gpu_throttle_residency_total.",
)
LINK_UP = _gpu("gpudiag_gpu_link_up", "gauge", "1 when the NVLink/XGMI link is up, else 0.", ("link", "kind"))
XGMI_ERROR_STATE = _gpu(
    "gpudiag_gpu_xgmi_error_state",
    "gauge",
    "AMD XGMI error status: 1 on the current state (no_errors, error, multiple_errors), 0 on the others.",
    ("state",),
)
LINK_ERRORS = _gpu(
    "gpudiag_gpu_link_errors_total", "counter", "NVLink/XGMI link error counters.", ("link", "kind", "counter")
)


# -- the driver's own health verdicts (NVIDIA; exporter/health_metrics.py). State sets: 1 on the current value, 0 on
# the others; absent where the driver or GPU does not report them (a GPU outside an NVSwitch fabric has no fabric
# series).
FABRIC_STATE = _gpu(
    "gpudiag_gpu_fabric_state",
    "gauge",
    "NVSwitch fabric set-up of the GPU by the fabric manager: 1 on the current state (not_started, in_progress, "
    "completed), 0 on the others.",
    ("state",),
)
FABRIC_HEALTH = _gpu(
    "gpudiag_gpu_fabric_health_summary",
    "gauge",
    "The driver's summary of the GPU's fabric health: 1 on the current one (healthy, unhealthy, limited_capacity).",
    ("summary",),
)
RECOVERY_ACTION = _gpu(
    "gpudiag_gpu_recovery_action",
    "gauge",
    "The recovery action the driver requires before the GPU can be used again (Xid 154): 1 on the current one "
    "(none, gpu_reset, node_reboot, drain_p2p, drain_and_reset, recover_imex_domain, bus_reset, system_reboot).",
    ("action",),
)
UNREPAIRABLE_MEMORY = _gpu(
    "gpudiag_gpu_unrepairable_memory", "gauge", "1 when the driver flags the GPU's memory as unrepairable, else 0."
)
SRAM_THRESHOLD_EXCEEDED = _gpu(
    "gpudiag_gpu_sram_threshold_exceeded",
    "gauge",
    "1 when the GPU's SRAM ECC errors exceed the field-diagnostic threshold (an RMA criterion), else 0.",
)

# -- load tests (`check --level 2`, `textfile --level 2`): what the last run measured ---------------------------

ACTIVE_RUN = _define(
    "gpudiag_active_run_timestamp_seconds", "gauge", "Unix time at which the load tests of this output started."
)
ACTIVE_COPY_BANDWIDTH = _gpu(
    "gpudiag_active_copy_bandwidth_bytes_per_second",
    "gauge",
    "Pinned host<->GPU copy bandwidth the load test measured (direction h2d or d2h).",
    ("direction",),
)
ACTIVE_LINK_GENERATION = _gpu(
    "gpudiag_active_pcie_link_generation",
    "gauge",
    "PCIe link generation read while the host copies of the load test ran (direction h2d or d2h); the best reading.",
    ("direction",),
)
ACTIVE_LINK_WIDTH = _gpu(
    "gpudiag_active_pcie_link_width_lanes",
    "gauge",
    "PCIe link width read while the host copies of the load test ran (direction h2d or d2h); the best reading.",
    ("direction",),
)
ACTIVE_P2P_BANDWIDTH = _gpu(
    "gpudiag_active_p2p_bandwidth_bytes_per_second",
    "gauge",
    "GPU-to-GPU copy bandwidth from this GPU to peer_gpu that the load test measured.",
    ("peer_gpu",),
)
ACTIVE_MEMTEST_BYTES = _gpu(
    "gpudiag_active_memtest_tested_bytes", "gauge", "GPU memory the memory test wrote and read back in every pass."
)
ACTIVE_MEMTEST_MISMATCHES = _gpu(
    "gpudiag_active_memtest_mismatched_words", "gauge", "32-bit words that read back wrong in the memory test."
)
ACTIVE_STRESS_FLOPS = _gpu(
    "gpudiag_active_stress_fp32_flops", "gauge", "FP32 FMA throughput (FLOP/s) the GPU held during the stress test."
)
ACTIVE_STRESS_THROUGHPUT = _gpu(
    "gpudiag_active_stress_flops", "gauge",
    "Throughput (FLOP/s) of the stress kernel in its precision (bf16: tensor/matrix cores; fp32: FMA).", ("precision",)
)
ACTIVE_STRESS_POWER = _gpu(
    "gpudiag_active_stress_mean_power_watts", "gauge", "Mean power draw over the steady part of the stress test."
)
ACTIVE_STRESS_POWER_LIMIT = _gpu(
    "gpudiag_active_stress_power_limit_watts", "gauge", "The enforced power limit while the stress test ran."
)
ACTIVE_STRESS_CLOCK = _gpu(
    "gpudiag_active_stress_sm_clock_hertz", "gauge",
    "SM clock over the steady part of the stress test (stat min or median).", ("stat",)
)
ACTIVE_STRESS_TEMPERATURE = _gpu(
    "gpudiag_active_stress_max_temperature_celsius", "gauge", "Peak GPU temperature during the stress test."
)
ACTIVE_STRESS_THROTTLE = _gpu(
    "gpudiag_active_stress_throttle_reason_seen", "gauge",
    "1 for each throttle reason seen during the stress test (sw_power_cap is expected at the power limit).",
    ("reason",)
)
ACTIVE_STRESS_VERIFIED = _gpu(
    "gpudiag_active_stress_verified_launches", "gauge",
    "Stress launches whose every block result was compared bit for bit (active.compute).",
)
ACTIVE_STRESS_MISMATCHES = _gpu(
    "gpudiag_active_stress_mismatches", "gauge",
    "Results the stress computed wrong: kind tensor counts block results that differed from their siblings', kind "
    "stream the streamed HBM reads that returned other data than written. Anything above 0 is silent data corruption.",
    ("kind",)
)
ACTIVE_STRESS_MISMATCH_SM = _gpu(
    "gpudiag_active_stress_mismatch_sm_launches", "gauge",
    "Launches in which a block on this SM (AMD: XCC/SE/SH/CU) computed other bits than its siblings (at most 16 SMs).",
    ("sm",)
)
ACTIVE_HBM_BANDWIDTH = _gpu(
    "gpudiag_active_hbm_copy_bandwidth_bytes_per_second", "gauge",
    "Device-memory copy bandwidth the HBM test measured, each copied byte counted once (read + write is twice this).",
)


# The names a family's metric module uses (metrics_<family>.py).
define, gpu_metric = _define, _gpu


def defined() -> dict[str, MetricSpec]:
    """The specs defined so far: the core catalog's and those of the family metric modules already imported (all of
    them once gpudiag.exporter.metric_modules.all_metrics() has run)."""
    return dict(_ALL)
