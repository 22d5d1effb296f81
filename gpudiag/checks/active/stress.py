"""active.stress and active.hbm_bandwidth: what the power stress and the HBM copy showed, per GPU and across the node.

The stress (gpudiag.active.stress) holds every GPU at its power limit at once. Per GPU it fails on a hardware
slowdown (thermal, HW slowdown, power brake), a clock collapse, a peak temperature at the slowdown limit, new
uncorrectable ECC errors, and a steady mean power well short of the enforced limit that no throttle reason explains
(a weak power stage or a kernel that never got the GPU going), and an Xid / reset / RAS line of the GPU that the
kernel log gained during the load; the power cap itself is expected. Across the node,
the slow GPU: a GPU whose throughput or median SM clock under the cap is more than `stress_straggler_ratio` (5 %)
below the median of its identical siblings (same name, same kernel) fails with its figures beside theirs — the
straggler that holds back every collective job on the node.

HBM: the copy kernel's figure (each byte counted once) against half the part's nominal bandwidth (a copy reads and
writes each byte) × `hbm_efficiency`, and against its siblings' median.
"""

from __future__ import annotations

from typing import Callable, Optional

from gpudiag.checks.active.common import HBM, STRESS, _for_each, _kernel_log_hint, _not_judged, _rise
from gpudiag.checks.active.links import ActiveExpectations
from gpudiag.checks.active.stress_figures import StressFigures, figures_of, median_of
from gpudiag.checks.common import unknown, verdict
from gpudiag.checks.thermal import THERMAL_REASONS, cooling_advice, judge_sensor
from gpudiag.expect import Expectations
from gpudiag.model import (
    STATUS_SEVERITY,
    CheckResult,
    DeviceSnapshot,
    HbmBandwidth,
    NodeSnapshot,
    Status,
    StressResult,
    TemperatureSensor,
)


# Beyond the thermal reasons (thermal.py): the external power brake is a hardware slowdown as well.
_STRESS_REASONS = {**THERMAL_REASONS, "hw_power_brake": Status.FAIL}
# Reasons under which power short of the limit is explained (the GPU is held back by something else, judged on its
# own); the power cap (sw_power_cap / ppt_power) is what the stress aims for.
_EXPLAINS_LOW_POWER = set(_STRESS_REASONS) | {"applications_clocks", "sync_boost"}
# Clocks under load are only comparable between GPUs that the power cap holds down (a GPU short of its limit runs at
# its top clock and would make its capped siblings look slow): these reasons say the cap is in force.
POWER_CAP_REASONS = {"sw_power_cap", "ppt_power"}
MIN_JUDGED_STEADY_SAMPLES = 3  # the power shortfall is judged on a steady window of at least this many samples

# HBM bandwidth by part (read + write, GB/s), vendors' data sheets: H200 4.8 TB/s, H100 SXM 3.35, H100 NVL 3.9,
# H100 PCIe 2.0, A100 80GB 2.039 (SXM) / 1.935 (PCIe), A100 40GB 1.555, B200 8, MI300X/MI300A 5.3, MI325X 6,
# MI350X/MI355X 8. First match of a lowercase name fragment wins.
NOMINAL_HBM_GBPS = (
    ("gh200", 4000.0), ("h200", 4800.0), ("h100 nvl", 3900.0), ("h100 pcie", 2000.0), ("h100", 3350.0),
    ("h800", 3350.0), ("a100-sxm4-80gb", 2039.0), ("a100 80gb pcie", 1935.0), ("a100", 1555.0), ("b200", 8000.0),
    ("mi300", 5300.0), ("mi325", 6000.0), ("mi350", 8000.0), ("mi355", 8000.0),
)


def nominal_hbm_gbps(device: DeviceSnapshot, limits: ActiveExpectations) -> Optional[float]:
    if limits.hbm_nominal_gbps:
        return limits.hbm_nominal_gbps
    name = (device.name or "").lower()
    return next((gbps for fragment, gbps in NOMINAL_HBM_GBPS if fragment in name), None)


def _siblings(snapshot: NodeSnapshot, device: DeviceSnapshot, field_name: str) -> list:
    """(index, result) of the other load-tested GPUs of the same name, for the node-median comparisons."""
    out = []
    for entry in snapshot.active.devices if snapshot.active else []:
        other = next((d for d in snapshot.devices if d.index == entry.index), None)
        result = getattr(entry, field_name)
        if entry.index != device.index and other is not None and other.name == device.name and result is not None:
            out.append((entry.index, result))
    return out


# --- stress --------------------------------------------------------------------------------------------------------


def _observed(stress: StressResult, mine: StressFigures, node: dict) -> dict:
    clocks = [s.sm_clock_mhz for s in stress.samples if s.sm_clock_mhz is not None]
    powers = [s.power_watts for s in stress.samples if s.power_watts is not None]
    return {"seconds": stress.seconds, "fp32_tflops": stress.fp32_tflops, "samples": len(stress.samples),
            "sm_clock_mhz": [min(clocks), max(clocks)] if clocks else None,
            "max_temperature_celsius": mine.max_temperature_celsius,
            "max_power_watts": max(powers) if powers else None, "throttle_reasons": mine.throttle_reasons,
            "kernel": stress.kernel, "precision": mine.precision, "tflops": mine.tflops,
            "mean_power_watts": mine.mean_power_watts, "power_limit_watts": mine.power_limit_watts,
            "sm_clock_under_load_mhz": {"min": mine.sm_clock_min_mhz, "median": mine.sm_clock_median_mhz},
            "start_temperature_celsius": mine.start_temperature_celsius,
            "hbm_stream_gb_per_second": stress.stream_gb_per_second,
            "ecc_corrected": [stress.ecc_corrected_before, stress.ecc_corrected_after],
            "ecc_uncorrected": [stress.ecc_uncorrected_before, stress.ecc_uncorrected_after],
            "kernel_events": stress.kernel_events, "node_median": node}


def _power_finding(mine: StressFigures, stress: StressResult, limits: ActiveExpectations
                   ) -> Optional[tuple[Status, str]]:
    ratio = mine.power_ratio
    if ratio is None or mine.precision != "bf16" or mine.steady_samples < MIN_JUDGED_STEADY_SAMPLES:
        return None  # no limit read, the FP32 kernel (never meant to reach it), or too short a run to say
    if ratio >= limits.stress_power_warn_ratio or set(mine.throttle_reasons) & _EXPLAINS_LOW_POWER:
        return None
    status = Status.FAIL if ratio < limits.stress_power_fail_ratio else Status.WARN
    return status, (f"steady mean power {mine.mean_power_watts:g} W is {ratio:.0%} of its {mine.power_limit_watts:g} W "
                    f"limit and no throttle reason explains it")


def _capped(figures: StressFigures) -> bool:
    return bool(POWER_CAP_REASONS & set(figures.throttle_reasons))


def _straggler(mine: StressFigures, siblings: list[StressFigures], limits: ActiveExpectations
               ) -> tuple[dict, list[tuple[Status, str]]]:
    node = {"gpus": len(siblings) + 1, "tflops": median_of([f.tflops for f in siblings]),
            "sm_clock_median_mhz": median_of([f.sm_clock_median_mhz for f in siblings]),
            "mean_power_watts": median_of([f.mean_power_watts for f in siblings])}
    capped_clocks = median_of([f.sm_clock_median_mhz for f in siblings if _capped(f)]) if _capped(mine) else None
    findings = []
    for mine_value, theirs, unit in ((mine.tflops, node["tflops"], "TFLOPS"),
                                     (mine.sm_clock_median_mhz, capped_clocks, "MHz median SM clock under the cap")):
        if mine_value is not None and theirs and mine_value < (1 - limits.stress_straggler_ratio) * theirs:
            findings.append((Status.FAIL, f"slow GPU: {mine_value:g} {unit}, {1 - mine_value / theirs:.1%} below the "
                                          f"{theirs:g} of its {len(siblings)} identical sibling(s)"))
    return node, findings


def _judge_stress(snapshot: NodeSnapshot, expect: Expectations, limits: ActiveExpectations
                  ) -> Callable[[DeviceSnapshot, StressResult], CheckResult]:
    def judge(device: DeviceSnapshot, stress: StressResult) -> CheckResult:
        if not stress.launches:
            return _not_judged(STRESS, device, "stress", stress.error)
        mine = figures_of(stress)
        siblings = [figures_of(s) for _, s in _siblings(snapshot, device, "stress")
                    if s.launches and s.precision == stress.precision]
        node, findings = _straggler(mine, siblings, limits)
        observed = _observed(stress, mine, node)
        if not stress.samples:
            return unknown(STRESS, device, f"{device.label}: loaded for {stress.seconds} s at {mine.tflops} TFLOPS but "
                                           f"not watched: {stress.telemetry_error}", observed=observed,
                           expected="clocks, temperature and throttling sampled under load",
                           remediation="Run with the NVML/amdsmi backend available so the load can be watched.")
        findings += [(_STRESS_REASONS[r], f"throttle reason {r}") for r in mine.throttle_reasons
                     if r in _STRESS_REASONS]
        clocks = [s.sm_clock_mhz for s in stress.samples if s.sm_clock_mhz is not None]
        reference = device.clocks.max_sm_mhz or (max(clocks) if clocks else None)
        loaded = clocks[1:] or clocks  # the first sample may predate the clock ramp
        if reference and loaded and min(loaded) < limits.stress_clock_fail_ratio * reference:
            findings.append((Status.FAIL, f"SM clock fell to {min(loaded)} MHz of {reference} MHz"))
        sensor = device.temperatures.get("gpu") or next(iter(device.temperatures.values()), None)
        if sensor is not None and mine.max_temperature_celsius is not None:
            hottest = TemperatureSensor(current_celsius=mine.max_temperature_celsius,
                                        slowdown_celsius=sensor.slowdown_celsius,
                                        shutdown_celsius=sensor.shutdown_celsius,
                                        max_operating_celsius=sensor.max_operating_celsius)
            judged = judge_sensor("peak temperature", hottest, expect.thermal_warn_margin_celsius)
            if judged is not None and judged[0] != Status.PASS:
                findings.append(judged)
        power = _power_finding(mine, stress, limits)
        if power is not None:
            findings.append(power)
        uncorrected = _rise(stress.ecc_uncorrected_before, stress.ecc_uncorrected_after)
        corrected = _rise(stress.ecc_corrected_before, stress.ecc_corrected_after)
        if uncorrected:
            findings.append((Status.FAIL, f"{uncorrected} uncorrectable ECC errors during the stress"))
        if corrected:
            findings.append((Status.WARN, f"{corrected} corrected ECC errors during the stress"))
        if stress.kernel_events:
            findings.append((Status.FAIL, f"{len(stress.kernel_events)} kernel-log event(s) of this GPU during the "
                                          f"stress, first: {stress.kernel_events[0]}"))
        if stress.error is not None:
            findings.append((Status.WARN, f"ended early: {stress.error.message}"))
        status = max((s for s, _ in findings), key=STATUS_SEVERITY.__getitem__, default=Status.PASS)
        problems = "; ".join(text for s, text in findings if s == status)
        seen = _figures_text(stress, mine, node)
        message = f"{device.label}: {problems} ({seen})" if problems else (
            f"{device.label}: {seen}; no hardware slowdown" + (f" (reasons seen: {', '.join(mine.throttle_reasons)})"
                                                               if mine.throttle_reasons else ""))
        return verdict(STRESS, status, device, message, observed=observed, expected={
            "no_hardware_slowdown": True,
            "min_sm_clock_mhz": round(limits.stress_clock_fail_ratio * reference) if reference else None,
            "min_mean_power_watts": (round(limits.stress_power_warn_ratio * mine.power_limit_watts, 1)
                                     if mine.power_limit_watts and mine.precision == "bf16" else None),
            "max_below_node_median_ratio": limits.stress_straggler_ratio, "ecc_unchanged": True,
            "no_kernel_log_events": True},
            remediation=_remediation(device))
    return judge


def _figures_text(stress: StressResult, mine: StressFigures, node: dict) -> str:
    def beside(value: object, key: str) -> str:
        return f"{value} (node median {node[key]:g})" if node.get(key) else f"{value}"

    power = (f"{mine.mean_power_watts:g} W of {mine.power_limit_watts:g} W ({mine.power_ratio:.0%})"
             if mine.power_ratio is not None else f"{mine.mean_power_watts} W (limit unknown)")
    return (f"{stress.seconds} s at {beside(mine.tflops, 'tflops')} {(mine.precision or '').upper()} TFLOPS, steady "
            f"{power}, SM clock min/median "
            f"{mine.sm_clock_min_mhz}/{beside(mine.sm_clock_median_mhz, 'sm_clock_median_mhz')}"
            f" MHz, {mine.start_temperature_celsius}->{mine.max_temperature_celsius} °C")


def _remediation(device: DeviceSnapshot) -> str:
    return ("A GPU that slows down, falls short of its power limit or lags its siblings under load holds back every "
            "job on it. " + cooling_advice(device) + " A power-brake slowdown is asserted by the chassis: check the "
            "PSUs and the BMC's power-capping events. Power short of the limit with no throttle reason points at the "
            "GPU's power delivery (VRM) or a limit set below the default (power.limit). A slow GPU with healthy "
            "power and temperature: compare its clocks and ECC counters with its siblings', reseat it, and swap it "
            "with a sibling to see whether the fault follows the GPU or the slot. " + _kernel_log_hint(device))


def stress(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, STRESS, "stress", "stress",
                     _judge_stress(snapshot, expect, ActiveExpectations.of(expect)))


# --- HBM -----------------------------------------------------------------------------------------------------------


def _judge_hbm(snapshot: NodeSnapshot, limits: ActiveExpectations
               ) -> Callable[[DeviceSnapshot, HbmBandwidth], CheckResult]:
    def judge(device: DeviceSnapshot, hbm: HbmBandwidth) -> CheckResult:
        if hbm.gb_per_second is None:
            return _not_judged(HBM, device, "HBM copy test", hbm.error)
        theirs = median_of([r.gb_per_second for _, r in _siblings(snapshot, device, "hbm")])
        nominal = nominal_hbm_gbps(device, limits)
        target = nominal / 2 * limits.hbm_efficiency if nominal else None
        observed = {"gb_per_second": hbm.gb_per_second, "bytes_per_copy": hbm.bytes_per_copy,
                    "traffic_gb_per_second": round(2 * hbm.gb_per_second, 1), "node_median_gb_per_second": theirs}
        expected = {
            "nominal_gb_per_second": nominal,
            "expected_copy_gb_per_second": round(target, 1) if target else None,
            "warn_below_gb_per_second": round(target * limits.hbm_warn_ratio, 1) if target else None,
            "fail_below_gb_per_second": round(target * limits.hbm_fail_ratio, 1) if target else None,
            "max_below_node_median_ratio": limits.stress_straggler_ratio,
        }
        findings: list[tuple[Status, str]] = []
        if target:
            ratio = hbm.gb_per_second / target
            if ratio < limits.hbm_warn_ratio:
                findings.append((Status.FAIL if ratio < limits.hbm_fail_ratio else Status.WARN,
                                 f"{ratio:.0%} of the {target:.0f} GB/s a healthy copy reaches ({nominal:g} GB/s "
                                 "nominal)"))
        if theirs and hbm.gb_per_second < (1 - limits.stress_straggler_ratio) * theirs:
            findings.append((Status.WARN, f"{1 - hbm.gb_per_second / theirs:.1%} below its siblings' median of "
                                          f"{theirs:g} GB/s"))
        status = max((s for s, _ in findings), key=STATUS_SEVERITY.__getitem__, default=Status.PASS)
        basis = (f"{hbm.gb_per_second / target:.0%} of the {target:.0f} GB/s expected from {nominal:g} GB/s nominal"
                 if target else "no nominal bandwidth known for this part: judged against its siblings only")
        median = f", node median {theirs:g} GB/s" if theirs else ""
        message = f"{device.label}: HBM copy {hbm.gb_per_second:g} GB/s (each byte counted once), {basis}{median}"
        if findings:
            message += "; " + "; ".join(text for s, text in findings if s == status)
        return verdict(HBM, status, device, message, observed=observed, expected=expected, remediation=(
            "Device memory slower than the part delivers: check the memory clock (clocks under load, "
            "`nvidia-smi -q -d CLOCK` / `amd-smi metric --clock`), HBM temperature and throttle reasons, row "
            "remapping or retired pages (memory.* checks), and the memory test; a GPU slower than its identical "
            "siblings is a straggler for every job on the node. " + _kernel_log_hint(device)))
    return judge


def hbm_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, HBM, "hbm", "hbm", _judge_hbm(snapshot, ActiveExpectations.of(expect)))
