"""amdsmi's throttle time counters and clocks of one GPU (docs/vendor-api.md §8; amdsmi 7.0.2 wrapper shapes).

The residency counters come from the violation status the probe reads anyway (for the active throttle reasons):
no extra call. Each is the firmware's count of ticks spent in that limit (gpu_metrics *_residency_acc), beside the
accumulation counter that counts every tick (`acc_counter`); amd-smi computes its violation percentages as
Δresidency × 100 / Δaccumulation over two reads 100 ms apart (amd_smi.cc amdsmi_get_violation_status). The tick
length is not published, so the counters are kept in ticks rather than converted to seconds.
"""

from __future__ import annotations

from typing import Any

from gpudiag.model import DeviceSnapshot
from gpudiag.probe.amdsmi.calls import AmdsmiCaller, get, integer

# amdsmi_get_violation_status() "acc_*" counters → model.THROTTLE_TIME_REASONS names. PVIOL is the package power
# tracking (PPT) limit, TVIOL the socket thermal limit (comments in amdsmi_interface.py).
_RESIDENCY = {
    "acc_ppt_pwr": "ppt_power",
    "acc_socket_thrm": "socket_thermal",
    "acc_prochot_thrm": "prochot",
    "acc_vr_thrm": "vr_thermal",
    "acc_hbm_thrm": "hbm_thermal",
    "acc_gfx_clk_below_host_limit": "gfx_clock_below_host_limit",
}

# AmdSmiClkType member → (current, maximum) ClockInfo attributes. amdsmi_clk_info_t's clk/max_clk are MHz.
_CLOCKS = (("GFX", "graphics_mhz", "max_graphics_mhz"), ("MEM", "memory_mhz", "max_memory_mhz"))


def apply_violation_counters(device: DeviceSnapshot, status: Any) -> None:
    """The residency counters of a violation status already read; "N/A" (UINT64_MAX in C: unsupported) stays out.
    Without the accumulation counter a residency says nothing, so then none is kept."""
    accumulation = integer(get(status, "acc_counter"))
    residency = {reason: integer(get(status, key)) for key, reason in _RESIDENCY.items()}
    residency = {reason: value for reason, value in residency.items() if value is not None}
    if accumulation is None or not residency:
        return
    device.clocks.throttle_accumulation = accumulation
    device.clocks.throttle_residency = residency


def read_clocks(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    """Current and maximum graphics and memory clocks (amdsmi_get_clock_info), two calls."""
    for member, current, maximum in _CLOCKS:
        info = call("amdsmi_get_clock_info", handle, call.smi.AmdSmiClkType[member])
        setattr(device.clocks, current, integer(get(info, "clk")))
        setattr(device.clocks, maximum, integer(get(info, "max_clk")))
