"""active.*: what the load tests (gpudiag.active, `gpudiag check --level 2`) measured, judged against what the
hardware should do: copy bandwidth against the PCIe link and the NVLink/XGMI fabric, the memory test's mismatches
and ECC counters, and the clocks, temperature and throttling seen under the stress.

Expected bandwidths come from the link itself (active_links.py) and can be pinned in the node profile.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from gpudiag.checks.active_links import ActiveExpectations, Target, expected_host_copy, expected_peer_copy
from gpudiag.checks.common import Check, failed, passed, reset_command, skipped, unknown, verdict, warned
from gpudiag.checks.thermal import THERMAL_REASONS, cooling_advice, judge_sensor
from gpudiag.expect import Expectations
from gpudiag.model import (
    STATUS_SEVERITY,
    CheckResult,
    CopyBandwidth,
    DeviceSnapshot,
    ErrorKind,
    MemtestResult,
    NodeSnapshot,
    PeerBandwidth,
    ProbeError,
    Status,
    StressResult,
    TemperatureSensor,
    Vendor,
)

PCIE_H2D = "active.pcie_h2d_bandwidth"
PCIE_D2H = "active.pcie_d2h_bandwidth"
P2P = "active.p2p_bandwidth"
MEMTEST = "active.memtest"
STRESS = "active.stress"

# Errors that say the test could not run here (missing library, a kernel the runtime would not load, a deadline)
# rather than that the GPU failed it: those are `unknown`; any other runtime error under load is a `fail`.
_SETUP_CALLS = ("load", "cuInit", "hipInit", "cuModuleLoadDataEx", "hiprtc", "SYMBOL_NOT_FOUND")


def _device(snapshot: NodeSnapshot, index: int) -> DeviceSnapshot:
    return next(d for d in snapshot.devices if d.index == index)


def _kernel_log_hint(device: DeviceSnapshot) -> str:
    log = "dmesg -T | grep -i -e NVRM -e Xid" if device.vendor == Vendor.NVIDIA else "dmesg -T | grep -i amdgpu"
    return (f"Check the kernel log (`{log}`) for errors logged during the test, reset the GPU "
            f"(`{reset_command(device)}`) and run the test again; an error that comes back on the same GPU is an "
            f"RMA case.")


def _not_judged(check_id: str, device: DeviceSnapshot, what: str, error: ProbeError) -> CheckResult:
    """A test that ended with `error` and no figure to judge."""
    setup = error.kind != ErrorKind.ERROR or any(word in f"{error.source} {error.message}" for word in _SETUP_CALLS)
    observed = {"error": f"{error.source}: {error.message}"}
    if setup:
        return unknown(check_id, device, f"{device.label}: the {what} could not run: {error.message}",
                       observed=observed, expected=f"the {what} completes",
                       remediation=("Give the run more time (--timeout) if the deadline stopped it. Otherwise the "
                                    "driver's user-space runtime (libcuda.so.1 / libamdhip64.so, libhiprtc.so) must "
                                    "be installed and match the kernel driver; see the error for the call that "
                                    "failed."))
    return failed(check_id, device, f"{device.label} failed under load: {error.message}", observed=observed,
                  expected=f"the {what} completes without a runtime error", remediation=_kernel_log_hint(device))


def _for_each(snapshot: NodeSnapshot, check_id: str, test: str, field_name: str,
              judge: Callable[[DeviceSnapshot, Any], CheckResult]) -> list[CheckResult]:
    """One result per GPU the load tests considered: skipped ones say why, unfinished ones are unknown."""
    active = snapshot.active
    if active is None:
        return [skipped(check_id, None, "load tests were not run (gpudiag check --level 2 runs them)")]
    if test not in active.tests:
        return [skipped(check_id, None, f"the {test} load test was not requested")]
    if not active.devices:
        why = "; ".join(e.message for e in active.errors) or "no GPU to test"
        return [skipped(check_id, None, f"no GPU was load-tested: {why}")]
    results = []
    for entry in active.devices:
        device = _device(snapshot, entry.index)
        result = getattr(entry, field_name)
        if entry.skipped:
            results.append(skipped(check_id, device, f"{device.label} was not load-tested: {entry.skipped}"))
        elif result is None:
            why = "; ".join(e.message for e in active.errors) or "the load tests ended before it ran"
            results.append(unknown(check_id, device, f"{device.label}: the {test} test did not complete: {why}",
                                   observed=None, expected=f"the {test} test completes",
                                   remediation=_kernel_log_hint(device)))
        else:
            results.append(judge(device, result))
    return results


# --- host <-> device ---------------------------------------------------------------------------------------------


def _judge_host_copy(check_id: str, direction: str, snapshot: NodeSnapshot, expect: Expectations,
                     pinned: Optional[float]) -> Callable[[DeviceSnapshot, CopyBandwidth], CheckResult]:
    limits = ActiveExpectations.of(expect)

    def judge(device: DeviceSnapshot, copy: CopyBandwidth) -> CheckResult:
        what = f"{direction} copy test"
        if copy.gb_per_second is None:
            return _not_judged(check_id, device, what, copy.error)
        target = expected_host_copy(snapshot, device, pinned, expect, limits)
        observed = {"gb_per_second": copy.gb_per_second, "bytes_per_copy": copy.bytes_per_copy}
        if target is None:
            return passed(check_id, device, f"{device.label} {direction}: {copy.gb_per_second} GB/s (link "
                                            f"generation/width unknown: not judged)", observed=observed)
        ratio = copy.gb_per_second / target.gb_per_second
        message = (f"{device.label} {direction}: {copy.gb_per_second} GB/s, {ratio:.0%} of the "
                   f"{target.gb_per_second:g} GB/s a {target.basis}")
        return verdict(check_id, _status(ratio, target), device, message, observed=observed,
                       expected=target.as_expected(),
                       remediation=(
                           f"Pinned copies this slow mean the link carries less than it trained for, or the path "
                           f"to host memory is throttled. Check pcie.link_generation/pcie.link_width and the AER and "
                           f"replay counters (a riser or retimer that fails under load retrains or replays), confirm "
                           f"the link under load with `lspci -vvv -s {device.pci_bus_id} | grep LnkSta` while the "
                           f"test runs, check the BIOS (PCIe speed Auto/Gen{target.generation}, Max Payload Size ≥ "
                           f"256, IOMMU passthrough for performance nodes), and reseat or swap the riser/cable."))
    return judge


def _status(ratio: float, target: Target) -> Status:
    return Status.FAIL if ratio < target.fail_ratio else Status.WARN if ratio < target.warn_ratio else Status.PASS


def h2d_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    pinned = ActiveExpectations.of(expect).h2d_expected_gbps
    return _for_each(snapshot, PCIE_H2D, "pcie", "h2d", _judge_host_copy(PCIE_H2D, "host->device", snapshot, expect,
                                                                         pinned))


def d2h_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    pinned = ActiveExpectations.of(expect).d2h_expected_gbps
    return _for_each(snapshot, PCIE_D2H, "pcie", "d2h", _judge_host_copy(PCIE_D2H, "device->host", snapshot, expect,
                                                                         pinned))


# --- GPU <-> GPU ---------------------------------------------------------------------------------------------------


def p2p_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    active = snapshot.active
    if active is None or "p2p" not in active.tests:
        return [skipped(P2P, None, "load tests were not run (gpudiag check --level 2 runs them)" if active is None
                        else "the p2p load test was not requested")]
    if not active.peers:
        tested = [e for e in active.devices if not e.skipped]
        why = "; ".join(e.message for e in active.errors) or f"{len(tested)} GPU(s) load-tested, two are needed"
        return [skipped(P2P, None, f"no GPU pair was measured: {why}")]
    return [_judge_pair(snapshot, peer, expect) for peer in active.peers]


def _judge_pair(snapshot: NodeSnapshot, peer: PeerBandwidth, expect: Expectations) -> CheckResult:
    src, dst = _device(snapshot, peer.src), _device(snapshot, peer.dst)
    pair = f"GPU {src.index} -> GPU {dst.index}"
    copy = peer.copy
    if copy.gb_per_second is None:
        return _not_judged(P2P, src, f"{pair} copy test", copy.error)
    target = expected_peer_copy(snapshot, src, dst, expect, ActiveExpectations.of(expect))
    observed = {"dst": dst.index, "gb_per_second": copy.gb_per_second, "p2p_enabled": peer.p2p_enabled,
                "bidirectional_gb_per_second": peer.bidirectional_gb_per_second}
    if target is None:
        return passed(P2P, src, f"{pair}: {copy.gb_per_second} GB/s (no NVLink/XGMI or link data: not judged)",
                      observed=observed)
    fabric = target.basis
    if target.fabric and peer.p2p_enabled is False:
        return failed(P2P, src, f"{pair}: no peer access although they share {fabric}; copies went through host "
                                f"memory at {copy.gb_per_second} GB/s", observed=observed,
                      expected=target.as_expected(),
                      remediation=("The runtime refused peer access over the fabric. On NVSwitch systems "
                                   "nvidia-fabricmanager must be running and healthy (`systemctl status "
                                   "nvidia-fabricmanager`, `nvidia-smi -q | grep -A2 Fabric`); check `nvidia-smi "
                                   "topo -m` / `amd-smi topology` and the topology.* checks."))
    ratio = copy.gb_per_second / target.gb_per_second
    status = _status(ratio, target)
    if not target.fabric and status == Status.FAIL:
        status = Status.WARN  # PCIe peer traffic depends on the root complex and switches, not only on the GPUs
    message = f"{pair}: {copy.gb_per_second} GB/s, {ratio:.0%} of the {target.gb_per_second:g} GB/s {fabric}"
    return verdict(P2P, status, src, message, observed=observed, expected=target.as_expected(),
                   remediation=(f"GPU-to-GPU copies are slower than {fabric} carries: check topology.links_up and "
                                f"topology.link_errors for links down or erroring (replays, CRC), reseat the bridge "
                                f"or check the NVSwitch tray / XGMI cabling, and compare with the other pairs of "
                                f"this node: one slow pair points at a link, all slow at the fabric or firmware."))


# --- memory test ---------------------------------------------------------------------------------------------------


def _judge_memtest(device: DeviceSnapshot, memtest: MemtestResult) -> CheckResult:
    check_id = MEMTEST
    observed = {"bytes_tested": memtest.bytes_tested, "passes": memtest.passes_completed,
                "seconds": memtest.seconds, "mismatched_words": memtest.mismatched_words,
                "ecc_corrected": [memtest.ecc_corrected_before, memtest.ecc_corrected_after],
                "ecc_uncorrected": [memtest.ecc_uncorrected_before, memtest.ecc_uncorrected_after]}
    expected = "every word reads back as written; ECC counters unchanged"
    rma = (f"Memory that returns other data than was written is a hardware fault: drain the GPU, run the vendor's "
           f"memory diagnostic (`dcgmi diag -r 3` / `rvs -c mem.conf`), check row remapping / retired pages "
           f"(memory.* checks, `nvidia-smi -q -d ROW_REMAPPER`, `amd-smi bad-pages`) and the kernel log; "
           f"{_kernel_log_hint(device)}")
    if memtest.mismatched_words:
        return failed(check_id, device, (
            f"{device.label}: {memtest.mismatched_words} words read back wrong in {memtest.bytes_tested / 1e9:.1f} GB "
            f"(first at device address {memtest.first_error_address:#x}, flipped bits {memtest.flipped_bits_mask:#010x})"),
            observed=observed, expected=expected, remediation=rma)
    if memtest.passes_completed == 0:
        return _not_judged(check_id, device, "memory test", memtest.error)
    uncorrected = _rise(memtest.ecc_uncorrected_before, memtest.ecc_uncorrected_after)
    corrected = _rise(memtest.ecc_corrected_before, memtest.ecc_corrected_after)
    if uncorrected:
        return failed(check_id, device, f"{device.label}: {uncorrected} uncorrectable ECC errors during the memory test",
                      observed=observed, expected=expected, remediation=rma)
    summary = (f"{memtest.bytes_tested / 1e9:.1f} GB of {(memtest.total_bytes or 0) / 1e9:.1f} GB in "
               f"{memtest.passes_completed} passes, {memtest.seconds} s")
    if corrected:
        return warned(check_id, device, f"{device.label}: {corrected} corrected ECC errors during the memory test "
                                        f"({summary})", observed=observed, expected=expected,
                      remediation="ECC corrected what the test wrote; a GPU that keeps correcting errors under load is "
                                  "wearing out. " + rma)
    if memtest.error is not None:
        return warned(check_id, device, f"{device.label}: no mismatch in {summary}, but the test ended early: "
                                        f"{memtest.error.message}", observed=observed, expected=expected,
                      remediation="Run it again with a longer --timeout to cover every pass.")
    ecc = "ECC counters unchanged" if memtest.ecc_corrected_after is not None else "ECC not re-read"
    return passed(check_id, device, f"{device.label}: no mismatch in {summary}; {ecc}", observed=observed,
                  expected=expected)


def _rise(before: Optional[int], after: Optional[int]) -> int:
    return after - before if before is not None and after is not None and after > before else 0


def memtest(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, MEMTEST, "memtest", "memtest", _judge_memtest)


# --- stress --------------------------------------------------------------------------------------------------------

# Beyond the thermal reasons (thermal.py): the external power brake is a hardware slowdown as well.
_STRESS_REASONS = {**THERMAL_REASONS, "hw_power_brake": Status.FAIL}


def _judge_stress(snapshot: NodeSnapshot, expect: Expectations, limits: ActiveExpectations
                  ) -> Callable[[DeviceSnapshot, StressResult], CheckResult]:
    def judge(device: DeviceSnapshot, stress: StressResult) -> CheckResult:
        check_id = STRESS
        if not stress.launches:
            return _not_judged(check_id, device, "stress", stress.error)
        samples = stress.samples
        clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None]
        temperatures = [s.temperature_celsius for s in samples if s.temperature_celsius is not None]
        powers = [s.power_watts for s in samples if s.power_watts is not None]
        reasons = sorted({r for s in samples for r in (s.throttle_reasons or [])})
        observed = {"seconds": stress.seconds, "fp32_tflops": stress.fp32_tflops, "samples": len(samples),
                    "sm_clock_mhz": [min(clocks), max(clocks)] if clocks else None,
                    "max_temperature_celsius": max(temperatures) if temperatures else None,
                    "max_power_watts": max(powers) if powers else None, "throttle_reasons": reasons}
        if not samples:
            return unknown(check_id, device, f"{device.label}: loaded for {stress.seconds} s at {stress.fp32_tflops} "
                                             f"TFLOPS but not watched: {stress.telemetry_error}", observed=observed,
                           expected="clocks, temperature and throttling sampled under load",
                           remediation="Run with the NVML/amdsmi backend available so the load can be watched.")
        findings: list[tuple[Status, str]] = [(_STRESS_REASONS[r], f"throttle reason {r}") for r in reasons
                                              if r in _STRESS_REASONS]
        reference = device.clocks.max_sm_mhz or (max(clocks) if clocks else None)
        loaded = clocks[1:] or clocks  # the first sample may predate the clock ramp
        if reference and loaded and min(loaded) < limits.stress_clock_fail_ratio * reference:
            findings.append((Status.FAIL, f"SM clock fell to {min(loaded)} MHz of {reference} MHz"))
        sensor = device.temperatures.get("gpu") or next(iter(device.temperatures.values()), None)
        if sensor is not None and temperatures:
            hottest = TemperatureSensor(current_celsius=max(temperatures), slowdown_celsius=sensor.slowdown_celsius,
                                        shutdown_celsius=sensor.shutdown_celsius,
                                        max_operating_celsius=sensor.max_operating_celsius)
            judged = judge_sensor("peak temperature", hottest, expect.thermal_warn_margin_celsius)
            if judged is not None and judged[0] != Status.PASS:
                findings.append(judged)
        if stress.error is not None:
            findings.append((Status.WARN, f"ended early: {stress.error.message}"))
        status = max((s for s, _ in findings), key=STATUS_SEVERITY.__getitem__, default=Status.PASS)
        seen = (f"{stress.seconds} s at {stress.fp32_tflops} FP32 TFLOPS, SM clock "
                f"{observed['sm_clock_mhz'] or 'unknown'} MHz, peak {observed['max_temperature_celsius']} °C, "
                f"{observed['max_power_watts']} W")
        problems = "; ".join(text for s, text in findings if s == status)
        message = f"{device.label}: {problems} ({seen})" if problems else (
            f"{device.label}: {seen}; no hardware slowdown" + (f" (reasons seen: {', '.join(reasons)})" if reasons
                                                               else ""))
        return verdict(check_id, status, device, message, observed=observed,
                       expected={"no_hardware_slowdown": True, "min_sm_clock_mhz": round(
                           limits.stress_clock_fail_ratio * reference) if reference else None},
                       remediation=("A GPU that slows down within a minute of load will hold back every job on "
                                    "it. " + cooling_advice(device) + " A power-brake slowdown is asserted by the "
                                    "chassis: check the PSUs and the BMC's power-capping events."))
    return judge


def stress(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, STRESS, "stress", "stress",
                     _judge_stress(snapshot, expect, ActiveExpectations.of(expect)))


def active_checks(snapshot: NodeSnapshot, expectations: Expectations) -> list[CheckResult]:
    """Every active.* check, in checklist order."""
    return [result for check in CHECKS for result in check.run(snapshot, expectations)]


CHECKS = (
    Check(PCIE_H2D, h2d_bandwidth, "pinned host->device copies reach what the PCIe link's generation and width carry"),
    Check(PCIE_D2H, d2h_bandwidth, "pinned device->host copies reach what the PCIe link's generation and width carry"),
    Check(P2P, p2p_bandwidth, "GPU-to-GPU copies (peer access on) reach what NVLink/XGMI carries, for every pair"),
    Check(MEMTEST, memtest, "most of the free GPU memory reads back every pattern written, ECC counters unchanged"),
    Check(STRESS, stress, "under an FMA load: no hardware slowdown, no clock collapse, temperature clear of limits"),
)
