"""One amdsmi processor handle → the DeviceSnapshot sections. Units are converted here, once.

Shapes, units and quirks are those of the amdsmi 7.0.2 Python wrapper (docs/vendor-api.md §1-§10). On a secondary
partition of a partitioned GPU (CPX partition 1…7) the device-wide calls answer NOT_SUPPORTED, so those sections
stay None there: they belong to the physical GPU, reported by its partition 0.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from gpudiag.model import DeviceSnapshot, GpuProcess, TemperatureSensor
from gpudiag.probe.amdsmi import throttle as amdsmi_throttle
from gpudiag.probe.amdsmi.calls import AmdsmiCaller, get, integer, number, text
from gpudiag.probe.amdsmi.cper_entries import fill_cper
from gpudiag.probe.amdsmi.ras import fill_bad_pages, fill_ecc, fill_xgmi
from gpudiag.probe.pcie_generation import generation_from_mts

MIB = 1024 * 1024
_UINT32_MAX = 0xFFFFFFFF
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF

# Sensor names shared with the amdgpu sysfs backend, so that the thermal checks see one vocabulary.
_TEMPERATURE_SENSORS = (
    ("edge", "EDGE"),
    ("hotspot", "HOTSPOT"),  # AmdSmiTemperatureType.JUNCTION is an alias of HOTSPOT
    ("vram", "VRAM"),
    ("hbm0", "HBM_0"),
    ("hbm1", "HBM_1"),
    ("hbm2", "HBM_2"),
    ("hbm3", "HBM_3"),
)

# amdsmi_get_violation_status() "active_*" flags → model.THROTTLE_REASONS names. PVIOL is the package power
# tracking (PPT) limit, TVIOL the socket thermal limit (comments in amdsmi_interface.py).
_VIOLATION_REASONS = {
    "active_ppt_pwr": "ppt_power",
    "active_socket_thrm": "socket_thermal",
    "active_prochot_thrm": "prochot",
    "active_vr_thrm": "vr_thermal",
    "active_hbm_thrm": "hbm_thermal",
}

_PCIE_ERROR_COUNTERS = {
    "nak_sent": "pcie_nak_sent_count",
    "nak_received": "pcie_nak_received_count",
    "l0_to_recovery": "pcie_l0_to_recovery_count",
    "other_end_recovery": "pcie_lc_perf_other_end_recovery_count",
}


def fill_device(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    """Every section, identity first: a lost GPU shows up there (DeviceLost) before the long tail of calls."""
    smi = call.smi
    _identity(device, call, handle)
    _firmware(device, call, handle)
    _pcie(device, call, handle)
    fill_ecc(device, call, handle, smi)
    fill_bad_pages(device, call, handle, smi)
    fill_cper(device, call, handle)
    _temperatures(device, call, handle, smi)
    _power(device, call, handle)
    _throttle(device, call, handle)
    amdsmi_throttle.read_clocks(device, call, handle)
    _memory_and_activity(device, call, handle)
    fill_xgmi(device, call, handle)
    _placement(device, call, handle)
    _processes(device, call, handle)
    _note_metrics_skew(device)


def _identity(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    device.uuid = text(call("amdsmi_get_gpu_device_uuid", handle))
    asic = call("amdsmi_get_gpu_asic_info", handle)
    device.name = text(get(asic, "market_name"))
    device.architecture = text(get(asic, "target_graphics_version"))
    board = call("amdsmi_get_gpu_board_info", handle)
    # The FRU's product serial is what is printed on the board; the ASIC serial (unique_id) is the fallback.
    device.serial = text(get(board, "product_serial")) or text(get(asic, "asic_serial"))
    device.board_part_number = text(get(board, "model_number"))
    device.vbios_version = text(get(call("amdsmi_get_gpu_vbios_info", handle), "version"))
    mode = get(call("amdsmi_get_gpu_virtualization_mode", handle), "mode")  # an AmdSmiVirtualizationMode member
    device.virtualization = mode.name.lower() if mode is not None and mode.name != "UNKNOWN" else None
    header = call("amdsmi_get_gpu_metrics_header_info", handle)  # read even for a table amdsmi cannot decode
    revision = (integer(get(header, "format_revision")), integer(get(header, "content_revision")))
    device.metrics_version = f"{revision[0]}.{revision[1]}" if None not in revision else None


def _firmware(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    for entry in get(call("amdsmi_get_fw_info", handle), "fw_list") or []:
        block = entry.get("fw_name")  # an AmdSmiFwBlock member, e.g. AMDSMI_FW_ID_PSP_SOSDRV
        version = text(entry.get("fw_version"))
        if block is not None and version is not None:
            device.firmware_versions[block.name.removeprefix("AMDSMI_FW_ID_")] = version


def _pcie(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    info = call("amdsmi_get_pcie_info", handle)
    static, metric = get(info, "pcie_static"), get(info, "pcie_metric")
    pcie = device.pcie
    # max_pcie_speed/max_pcie_width come from the GPU's own sysfs max_link_* (its capability), so they are the
    # device maximum; what the slot allows is not in amdsmi (the host probe reads the upstream port).
    pcie.device_max_generation = generation_from_mts(get(static, "max_pcie_speed")) or integer(
        get(static, "pcie_interface_version")
    )
    pcie.device_max_width = integer(get(static, "max_pcie_width"))
    pcie.current_generation = generation_from_mts(get(metric, "pcie_speed"))  # MT/s, from gpu_metrics
    pcie.current_width = integer(get(metric, "pcie_width"))
    pcie.replay_count = integer(get(metric, "pcie_replay_count"))
    pcie.replay_rollover_count = integer(get(metric, "pcie_replay_roll_over_count"))
    for name, key in _PCIE_ERROR_COUNTERS.items():
        value = integer(get(metric, key))
        if value is not None:
            pcie.error_counters[name] = value


def _temperatures(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any, smi: ModuleType) -> None:
    sensor_types, metric = smi.AmdSmiTemperatureType, smi.AmdSmiTemperatureMetric
    for name, member in _TEMPERATURE_SENSORS:
        sensor = sensor_types[member]
        current = number(call("amdsmi_get_temp_metric", handle, sensor, metric.CURRENT))
        if current is None:  # no such sensor on this ASIC (MI300X has no edge sensor, for one)
            continue
        device.temperatures[name] = TemperatureSensor(
            current_celsius=float(current),
            # The amd-smi CLI treats CRITICAL as the slowdown limit and EMERGENCY as the shutdown limit (§7).
            slowdown_celsius=_celsius(call("amdsmi_get_temp_metric", handle, sensor, metric.CRITICAL)),
            shutdown_celsius=_celsius(call("amdsmi_get_temp_metric", handle, sensor, metric.EMERGENCY)),
        )


def _celsius(value: Any) -> float | None:
    found = number(value)
    return float(found) if found is not None else None


def _power(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    info = call("amdsmi_get_power_info", handle)
    # current_socket_power on MI300 and later, average_socket_power on MI200 and older (§6). The wrapper maps
    # only 0xFFFF to "N/A"; UINT32_MAX is also an unsupported marker in the C header.
    for key in ("current_socket_power", "average_socket_power"):
        watts = number(get(info, key))
        if watts is not None and watts != _UINT32_MAX:
            device.power.draw_watts = float(watts)
            break
    caps = call("amdsmi_get_power_cap_info", handle)  # µW
    # A cap of 0 cannot be in force: for the cap and its default, 0 means the library has no value.
    device.power.limit_watts = _watts_from_microwatts(get(caps, "power_cap"), zero_is_unknown=True)
    device.power.default_limit_watts = _watts_from_microwatts(get(caps, "default_power_cap"), zero_is_unknown=True)
    device.power.min_limit_watts = _watts_from_microwatts(get(caps, "min_power_cap"))
    device.power.max_limit_watts = _watts_from_microwatts(get(caps, "max_power_cap"))
    _note_vf_power(device)
    energy = call("amdsmi_get_energy_count", handle)
    accumulator, resolution = number(get(energy, "energy_accumulator")), number(get(energy, "counter_resolution"))
    if accumulator is not None and resolution is not None:
        device.power.energy_joules = accumulator * resolution / 1e6  # µJ → J


def _note_vf_power(device: DeviceSnapshot) -> None:
    # SR-IOV guests (MI300X VF 0x74b5, MI350X VF): the host's SMU owns power, and the VF reports neither draw nor
    # cap (device-metrics-exporter output from an MI300X VF, digitalocean/do-agent PR 353: no power series).
    if device.virtualization == "guest" and device.power.draw_watts is None and device.power.limit_watts is None:
        device.unsupported["amdsmi.amdsmi_get_power_info"] = "an SR-IOV VF does not see power (the host owns it)"


def _watts_from_microwatts(value: Any, zero_is_unknown: bool = False) -> float | None:
    microwatts = number(value)
    if microwatts is None or microwatts == _UINT64_MAX or (zero_is_unknown and microwatts == 0):
        return None  # UINT64_MAX: the C layer's unsupported marker
    return microwatts / 1e6


def _throttle(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    # gpu_metrics' throttle_status is only a bool (and absent from metrics v1.7+), so the named reasons come from
    # the violation status (MI300 and later, §8).
    status = call("amdsmi_get_violation_status", handle)
    flags = {name: get(status, key) for key, name in _VIOLATION_REASONS.items()}
    readable = {name: flag for name, flag in flags.items() if isinstance(flag, bool)}
    if readable:
        device.clocks.throttle_reasons = [name for name, active in readable.items() if active]
    amdsmi_throttle.apply_violation_counters(device, status)


def _memory_and_activity(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    usage = call("amdsmi_get_gpu_vram_usage", handle)  # MiB: the C code divides bytes by 1024²
    total, used = integer(get(usage, "vram_total")), integer(get(usage, "vram_used"))
    device.memory.total_bytes = total * MIB if total is not None else None
    device.memory.used_bytes = used * MIB if used is not None else None
    activity = call("amdsmi_get_gpu_activity", handle)
    device.utilization.gpu_percent = integer(get(activity, "gfx_activity"))
    device.utilization.memory_percent = integer(get(activity, "umc_activity"))


def _placement(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    numa = integer(call("amdsmi_get_gpu_topo_numa_affinity", handle))
    device.numa_node = numa if numa is not None and numa >= 0 else None  # -1: no NUMA affinity
    device.compute_partition = text(call("amdsmi_get_gpu_compute_partition", handle))
    device.memory_partition = text(call("amdsmi_get_gpu_memory_partition", handle))


def _processes(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    """KFD compute processes on this GPU (or partition); names and users come from psutil in the collector."""
    listed = call("amdsmi_get_gpu_process_list", handle)
    if isinstance(listed, list):
        device.processes = [
            GpuProcess(entry["pid"], "compute", used_memory_bytes=integer(get(entry["memory_usage"], "vram_mem")))
            for entry in listed
        ]


# The newest gpu_metrics table amdsmi 7.0.2 decodes (v1.8, MI350). A newer driver (v1.9 on 2026 kernels, MI350 and
# VFs with ROCm 7.2) publishes a table an older library cannot read: the values it carries (power, PCIe and XGMI
# metrics, violation accumulators) come back "N/A". A library built for the newer table reads them, so the version
# alone proves nothing (issue 21): what decides is whether the values gpu_metrics carries arrived. Said once here,
# so that the checks that skip for it can say why.
DECODED_METRICS_VERSION = (1, 8)


def _metrics_values_missing(device: DeviceSnapshot) -> list[str]:
    """The gpu_metrics-borne values that did not arrive and that nothing else explains (an SR-IOV VF sees no power:
    _note_vf_power records that)."""
    missing = {
        "power draw": device.power.draw_watts is None and "amdsmi.amdsmi_get_power_info" not in device.unsupported,
        "PCIe counters": device.pcie.replay_count is None,
    }
    return [name for name, absent in missing.items() if absent]


def _note_metrics_skew(device: DeviceSnapshot) -> None:
    if device.metrics_version is None or device.is_logical_partition:
        return
    major, _, minor = device.metrics_version.partition(".")
    if (int(major), int(minor)) <= DECODED_METRICS_VERSION:
        return
    missing = _metrics_values_missing(device)
    if missing:
        device.unsupported["amdsmi.amdsmi_get_gpu_metrics_info"] = (
            f"the driver's gpu_metrics v{device.metrics_version} is newer than this amdsmi decodes "
            f"(v{DECODED_METRICS_VERSION[0]}.{DECODED_METRICS_VERSION[1]}), and its values ({', '.join(missing)}) "
            f"came back N/A: upgrade amd-smi-lib")
