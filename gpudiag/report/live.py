"""The live view's sample (`gpudiag top`): one row per GPU with what an operator watches — power (the mean since the
previous collection where the driver's samples give one, else the driver's power reading) and its limit,
temperatures, clocks, utilisation, memory used, ECC and retired/remapped counts, PCIe link, throttle reasons — and
its verdict: the checks failing, unknown or warning on that GPU now.

Made from one collection (the snapshot and the results the checks gave it) by the service (the socket's `top`
request, gpudiag/service/runtime.py) and by `gpudiag top --direct` alike, as plain JSON-able dicts so that the
service can send them as they are. A value the device does not report is None (the view prints `-`), never 0.

The verdict names causes: a result that follows from another finding (report/causes.py) is told as that finding,
so that a GPU that stopped answering reads `fail:inventory.gpus_visible`, not a dozen `unknown` IDs, and a GPU its
library could not read at all `fail:driver.library`, never `ok`."""

from __future__ import annotations

from typing import Optional

from gpudiag.model import CheckResult, NodeSnapshot, Status
from gpudiag.model.device import DeviceSnapshot
from gpudiag.report.causes import follows_from
from gpudiag.report.verdict import nothing_probed

# The verdict's order: the worst first.
VERDICT_ORDER = (Status.FAIL, Status.UNKNOWN, Status.WARN)
# Which sensor is "the GPU" and which "its memory", by vendor naming (probe/nvml_sensors.py, probe/amdsmi_device.py,
# probe/amdgpu_sysfs.py): AMD's hotspot is what `amd-smi monitor` shows as GPU_T, its vram (or the hottest HBM
# stack where only those are read) MEM_T.
GPU_SENSORS = ("gpu", "hotspot", "edge")
MEMORY_SENSORS = ("memory", "vram")


def live_view(snapshot: NodeSnapshot, results: list[CheckResult], judged: bool = True) -> dict:
    """{"hostname", "gpus": [row per GPU], "node": the node-level verdict, "nothing_probed": exit 3's condition}
    of one collection. `judged`: False where the checks did not run (an internal error): every verdict is then
    None, never a pass."""
    causes = follows_from(results)
    bad = [position for position, result in enumerate(results) if result.status in VERDICT_ORDER]
    # What a result is told as: itself where it is a finding of its own, else what it follows from — on the GPU's
    # row even where that cause is the node's (a library that failed: the GPUs it should have read are not "ok").
    told_as = {position: causes[position] or [position] for position in bad}
    rows = gpu_rows(snapshot)
    for row in rows:
        about = [cause for position in bad if _about(results[position], row) for cause in told_as[position]]
        row["verdict"] = _verdict([results[p] for p in dict.fromkeys(about)]) if judged else None
    on_rows = {p for p in bad for row in rows if _about(results[p], row)}
    node = [results[p] for p in bad if results[p].device is None and not causes[p] and p not in on_rows]
    return {"hostname": snapshot.hostname, "gpus": rows, "node": _verdict(node) if judged else None,
            "nothing_probed": nothing_probed(snapshot)}


def gpu_rows(snapshot: NodeSnapshot) -> list[dict]:
    """A row per GPU the vendor libraries list, then one per GPU only the PCI bus shows (lost to its library)."""
    rows = [_device_row(device) for device in snapshot.devices]
    listed = {device.pci_bus_id for device in snapshot.devices if device.pci_bus_id}
    return rows + [_absent_row(pci.pci_bus_id, pci.vendor.value) for pci in snapshot.pci_gpus
                   if pci.pci_bus_id not in listed]


def _about(result: CheckResult, row: dict) -> bool:
    """As report/gpu_selection.about_selected matches a result to a GPU: by bus ID where it has one, else index;
    a result about no GPU its library lists names the GPU on the PCI bus it is about in its observed value
    (inventory.gpus_visible on a GPU no library enumerated)."""
    if result.device is None:
        observed = result.observed if isinstance(result.observed, dict) else {}
        return row["pci_bus_id"] is not None and observed.get("pci_bus_id") == row["pci_bus_id"]
    if result.device.pci_bus_id:
        return result.device.pci_bus_id == row["pci_bus_id"]
    return row["index"] is not None and result.device.index == row["index"]


def _verdict(findings: list[CheckResult]) -> dict[str, list[str]]:
    """{"fail": [check IDs], "unknown": [...], "warn": [...]}, each in the order found, once each; {} when none."""
    verdict: dict[str, list[str]] = {}
    for status in VERDICT_ORDER:
        ids = list(dict.fromkeys(r.check for r in findings if r.status is status))
        if ids:
            verdict[status.value] = ids
    return verdict


def _absent_row(bus: Optional[str], vendor: str) -> dict:
    row = {key: None for key in FIELDS}
    row.update(pci_bus_id=bus, vendor=vendor, reachable=False)
    return row


def _first(device: DeviceSnapshot, names: tuple[str, ...]) -> Optional[float]:
    for name in names:
        sensor = device.temperatures.get(name)
        if sensor is not None and sensor.current_celsius is not None:
            return sensor.current_celsius
    return None


def _memory_temperature(device: DeviceSnapshot) -> Optional[float]:
    found = _first(device, MEMORY_SENSORS)
    if found is not None:
        return found
    stacks = [s.current_celsius for name, s in device.temperatures.items()
              if name.startswith("hbm") and s.current_celsius is not None]
    return max(stacks) if stacks else None


def _sum(*values: Optional[int]) -> Optional[int]:
    """The sum of the values read; None when none was (a count the device does not keep is not 0)."""
    read = [v for v in values if v is not None]
    return sum(read) if read else None


def _retired(device: DeviceSnapshot) -> Optional[int]:
    """Rows remapped (NVIDIA Ampere+), else pages retired (NVIDIA before), else bad pages retired (AMD)."""
    health = device.memory_health
    for counts in ((health.remapped_rows_correctable, health.remapped_rows_uncorrectable),
                   (health.retired_pages_single_bit, health.retired_pages_double_bit),
                   (health.bad_pages_reserved,)):
        total = _sum(*counts)
        if total is not None:
            return total
    return None


def _power(device: DeviceSnapshot) -> dict:
    """power_watts: the mean of the driver's power samples since the previous collection where the backend read one,
    with power_average_seconds the span it covers; else the driver's power reading (draw_watts: a one-second average
    on NVIDIA Ampere and later but GA100, instantaneous before), with power_average_seconds None (a collection's
    first sample, AMD, a GPU without a sample buffer)."""
    power = device.power
    if power.average_watts is not None:
        return {"power_watts": power.average_watts, "power_average_seconds": power.average_seconds}
    return {"power_watts": power.draw_watts, "power_average_seconds": None}


def _device_row(device: DeviceSnapshot) -> dict:
    clocks, memory = device.clocks, device.memory
    return {
        "index": device.index, "pci_bus_id": device.pci_bus_id, "uuid": device.uuid,
        "vendor": device.vendor.value, "name": device.name, "reachable": device.reachable,
        **_power(device), "power_limit_watts": device.power.limit_watts,
        "gpu_temperature_celsius": _first(device, GPU_SENSORS),
        "memory_temperature_celsius": _memory_temperature(device),
        # AMD reports no SM clock: its gfx clock is the compute clock (amd-smi monitor's GFX_CLK)
        "sm_clock_mhz": clocks.sm_mhz if clocks.sm_mhz is not None else clocks.graphics_mhz,
        "memory_clock_mhz": clocks.memory_mhz,
        "gpu_utilization_percent": device.utilization.gpu_percent,
        "memory_utilization_percent": device.utilization.memory_percent,
        "memory_used_bytes": memory.used_bytes, "memory_total_bytes": memory.total_bytes,
        "ecc_corrected": device.ecc.volatile_corrected, "ecc_uncorrected": device.ecc.volatile_uncorrected,
        "retired": _retired(device),
        "pcie_generation": device.pcie.current_generation, "pcie_width": device.pcie.current_width,
        "throttle_reasons": None if clocks.throttle_reasons is None else list(clocks.throttle_reasons),
    }


# Every key of a row (besides "verdict"), in the order _device_row writes them.
FIELDS = ("index", "pci_bus_id", "uuid", "vendor", "name", "reachable", "power_watts", "power_average_seconds",
          "power_limit_watts", "gpu_temperature_celsius", "memory_temperature_celsius", "sm_clock_mhz",
          "memory_clock_mhz", "gpu_utilization_percent", "memory_utilization_percent", "memory_used_bytes",
          "memory_total_bytes", "ecc_corrected", "ecc_uncorrected", "retired", "pcie_generation", "pcie_width",
          "throttle_reasons")
