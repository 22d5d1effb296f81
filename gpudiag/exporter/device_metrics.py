"""Per-GPU series from one DeviceSnapshot (and the host's view of its PCI function, for AER).

Only a reachable device gets measurement series: an unreachable one (lost, or hung past the deadline) has nothing
current to report, and repeating its last readings would be a lie; it keeps `gpudiag_device_up 0` and its identity.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.exporter import catalog as m
from gpudiag.exporter.metric_set import MetricSet, flag, gpu_labels
from gpudiag.exporter.health_metrics import add_driver_health
from gpudiag.model import THROTTLE_REASONS, DeviceSnapshot, PciGpu, Vendor

MHZ = 1_000_000.0

# Throttle reasons each vendor's probe reads as a whole (one clock-event mask / one violation record), so that a
# reason not listed as active really is inactive and can be exported as 0. model.THROTTLE_REASONS lists NVIDIA's
# (the nvmlClocksEventReason / ThrottleReason bits, docs/vendor-api.md §8), then AMD's (amdsmi_get_violation_status).
_FIRST_AMD_REASON = THROTTLE_REASONS.index("ppt_power")
VENDOR_THROTTLE_REASONS = {
    Vendor.NVIDIA: THROTTLE_REASONS[:_FIRST_AMD_REASON],
    Vendor.AMD: THROTTLE_REASONS[_FIRST_AMD_REASON:],
}

_XGMI_STATES = ("no_errors", "error", "multiple_errors")  # amdsmi_gpu_xgmi_error_status (docs/vendor-api.md §4)
_THRESHOLDS = (
    ("slowdown", "slowdown_celsius"),
    ("shutdown", "shutdown_celsius"),
    ("max_operating", "max_operating_celsius"),
)


def add_device(fs: MetricSet, device: DeviceSnapshot, driver_version: Optional[str]) -> None:
    ids = gpu_labels(device)
    fs.add(
        m.GPU_INFO,
        ids
        + (
            device.vendor.value,
            device.name or "",
            device.serial or "",
            device.vbios_version or "",
            driver_version or "",
        ),
        1,
    )
    if not device.reachable:
        return
    _thermal_and_power(fs, ids, device)
    _clocks(fs, ids, device)
    _pcie(fs, ids, device)
    _ecc(fs, ids, device)
    _memory_health(fs, ids, device)
    add_driver_health(fs, ids, device)
    if device.xgmi_error_status is not None:
        for state in _XGMI_STATES:
            fs.add(m.XGMI_ERROR_STATE, ids + (state,), int(device.xgmi_error_status == state))
    for link in device.links:
        link_ids = ids + (str(link.index), link.kind)
        fs.add(m.LINK_UP, link_ids, flag(link.up))
        for counter, value in sorted(link.error_counters.items()):
            fs.add(m.LINK_ERRORS, link_ids + (counter,), value)


def add_aer(fs: MetricSet, ids: tuple[str, str, str], pci: PciGpu) -> None:
    for severity, counters in sorted(pci.aer.items()):
        for error, value in sorted(counters.items()):
            # The TOTAL_ERR_* line of each file is the sum of the others: exporting it would double any sum().
            if not error.startswith("TOTAL_ERR"):
                fs.add(m.PCIE_AER_ERRORS, ids + (severity, error), value)


def _thermal_and_power(fs: MetricSet, ids: tuple[str, ...], device: DeviceSnapshot) -> None:
    for sensor, reading in sorted(device.temperatures.items()):
        fs.add(m.TEMPERATURE, ids + (sensor,), reading.current_celsius)
        for threshold, attribute in _THRESHOLDS:
            fs.add(m.TEMPERATURE_THRESHOLD, ids + (sensor, threshold), getattr(reading, attribute))
    power = device.power
    fs.add(m.POWER, ids, power.draw_watts)
    fs.add(m.POWER_LIMIT, ids, power.limit_watts)
    fs.add(m.POWER_DEFAULT_LIMIT, ids, power.default_limit_watts)
    fs.add(m.ENERGY, ids, power.energy_joules)
    fs.add(m.MEMORY_TOTAL, ids, device.memory.total_bytes)
    fs.add(m.MEMORY_USED, ids, device.memory.used_bytes)
    for engine, percent in (("gpu", device.utilization.gpu_percent), ("memory", device.utilization.memory_percent)):
        fs.add(m.UTILIZATION, ids + (engine,), None if percent is None else percent / 100.0)


def _clocks(fs: MetricSet, ids: tuple[str, ...], device: DeviceSnapshot) -> None:
    clocks = device.clocks
    for name, current, maximum in (
        ("graphics", clocks.graphics_mhz, clocks.max_graphics_mhz),
        ("sm", clocks.sm_mhz, clocks.max_sm_mhz),
        ("memory", clocks.memory_mhz, clocks.max_memory_mhz),
    ):
        fs.add(m.CLOCK, ids + (name,), None if current is None else current * MHZ)
        fs.add(m.CLOCK_MAX, ids + (name,), None if maximum is None else maximum * MHZ)
    if clocks.throttle_reasons is not None:
        active = set(clocks.throttle_reasons)
        for reason in sorted(set(VENDOR_THROTTLE_REASONS.get(device.vendor, ())) | active):
            fs.add(m.THROTTLE, ids + (reason,), int(reason in active))
    # Only the reasons the GPU reported: an unsupported counter has no series, never a 0.
    for reason, seconds in sorted(clocks.throttle_seconds.items()):
        fs.add(m.THROTTLE_SECONDS, ids + (reason,), seconds)
    if clocks.throttle_accumulation is not None:
        fs.add(m.THROTTLE_ACCUMULATION, ids, clocks.throttle_accumulation)
        for reason, ticks in sorted(clocks.throttle_residency.items()):
            fs.add(m.THROTTLE_RESIDENCY, ids + (reason,), ticks)


def _pcie(fs: MetricSet, ids: tuple[str, ...], device: DeviceSnapshot) -> None:
    pcie = device.pcie
    for kind, generation, width in (
        ("current", pcie.current_generation, pcie.current_width),
        ("max", pcie.max_generation, pcie.max_width),
        ("device_max", pcie.device_max_generation, pcie.device_max_width),
    ):
        fs.add(m.PCIE_GENERATION, ids + (kind,), generation)
        fs.add(m.PCIE_WIDTH, ids + (kind,), width)
    fs.add(m.PCIE_REPLAYS, ids, pcie.replay_count)
    fs.add(m.PCIE_REPLAY_ROLLOVERS, ids, pcie.replay_rollover_count)
    for counter, value in sorted(pcie.error_counters.items()):
        fs.add(m.PCIE_LINK_ERRORS, ids + (counter,), value)


def _ecc(fs: MetricSet, ids: tuple[str, ...], device: DeviceSnapshot) -> None:
    ecc = device.ecc
    fs.add(m.ECC_ENABLED, ids + ("current",), flag(ecc.enabled))
    fs.add(m.ECC_ENABLED, ids + ("pending",), flag(ecc.pending_enabled))
    for severity, scope, value in (
        ("corrected", "volatile", ecc.volatile_corrected),
        ("uncorrected", "volatile", ecc.volatile_uncorrected),
        ("corrected", "aggregate", ecc.aggregate_corrected),
        ("uncorrected", "aggregate", ecc.aggregate_uncorrected),
    ):
        fs.add(m.ECC_ERRORS, ids + (severity, scope), value)
    fs.add(m.ECC_DEFERRED, ids, ecc.deferred)
    for block, counts in sorted(ecc.by_block.items()):
        for severity, value in sorted(counts.items()):
            fs.add(m.ECC_BLOCK_ERRORS, ids + (block, severity), value)


def _memory_health(fs: MetricSet, ids: tuple[str, ...], device: DeviceSnapshot) -> None:
    health = device.memory_health
    fs.add(m.REMAPPED_ROWS, ids + ("correctable",), health.remapped_rows_correctable)
    fs.add(m.REMAPPED_ROWS, ids + ("uncorrectable",), health.remapped_rows_uncorrectable)
    fs.add(m.ROW_REMAP_PENDING, ids, flag(health.remap_pending))
    fs.add(m.ROW_REMAP_FAILED, ids, flag(health.remap_failure))
    for availability, banks in health.remap_histogram.items():
        fs.add(m.ROW_REMAP_BANKS, ids + (availability,), banks)
    fs.add(m.RETIRED_PAGES, ids + ("single_bit",), health.retired_pages_single_bit)
    fs.add(m.RETIRED_PAGES, ids + ("double_bit",), health.retired_pages_double_bit)
    fs.add(m.RETIRED_PAGES_PENDING, ids, flag(health.retired_pages_pending))
    fs.add(m.BAD_PAGES, ids + ("reserved",), health.bad_pages_reserved)
    fs.add(m.BAD_PAGES, ids + ("pending",), health.bad_pages_pending)
    fs.add(m.BAD_PAGES, ids + ("unreservable",), health.bad_pages_unreservable)
    fs.add(m.BAD_PAGES_THRESHOLD, ids, health.bad_page_threshold)
