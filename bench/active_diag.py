"""Run gpudiag's load tests (gpudiag.active) on this node's GPUs and print what they measured: host<->device GB/s
per GPU against the PCIe link's ceiling, GPU<->GPU GB/s per pair, the memory test's size and time, and what the
stress saw (clocks, temperature, power, throttle reasons); then the active.* checks' verdicts. Writes everything as
JSON to OUT.

Usage: PYTHONPATH=. python3 bench/active_diag.py OUT.json [--stress-seconds 30] [--deadline 110]
                                                          [--tests pcie,p2p,memtest,stress]

Needs libcuda.so.1 (or libamdhip64.so + libhiprtc.so) and, to watch the stress, nvidia-ml-py (or amdsmi). Progress
goes to stderr, the summary to stdout. GPUs with someone else's job on them are skipped, never loaded.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from gpudiag.active import ALL_TESTS, ActiveOptions, run_active
from gpudiag.active.plan import held_memory
from gpudiag.model import ActiveResults, DeviceSnapshot, NodeSnapshot, to_dict

GEN5_X16_RAW_GB_PER_SECOND = 32 * 16 * 128 / 130 / 8  # 63.0: 32 GT/s a lane, 16 lanes, 128b/130b


def collect_snapshot(collector: Any) -> tuple[NodeSnapshot, Optional[str]]:
    """The probe's snapshot (devices, PCIe links, NVLinks, processes), which decides which GPUs may be loaded."""
    try:
        return collector.collect(), None
    except Exception as exc:  # noqa: BLE001 - the bench reports it and stops: without a snapshot, nothing is safe
        return NodeSnapshot(hostname=socket.gethostname()), f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def live_reader(snapshot: NodeSnapshot, collector: Any) -> tuple[Any, dict]:
    """The collector's own re-read of a device (its vendor backend stays open), for the stress samples and the
    ECC counters around the memory test; and how long one read takes."""
    if not snapshot.devices:
        return None, {"error": "no device to read"}
    began = time.perf_counter()
    first = collector.reprobe(snapshot.devices[0])
    timing = {"backend": first.source, "seconds_per_read": round(time.perf_counter() - began, 3)}
    if not first.reachable:
        return None, {**timing, "error": f"re-reading GPU {first.index} failed: {first.errors}"}
    return collector.reprobe, timing


def describe_link(device: DeviceSnapshot) -> str:
    pcie = device.pcie
    # NVML reports the GPU's own maximum generation but no GPU-only width (device_max_width stays None).
    gpu_width = f" x{pcie.device_max_width}" if pcie.device_max_width is not None else ""
    return (f"Gen{pcie.max_generation} x{pcie.max_width} (GPU supports Gen{pcie.device_max_generation}{gpu_width}; "
            f"now Gen{pcie.current_generation} x{pcie.current_width})")


def summary(snapshot: NodeSnapshot, results: ActiveResults) -> list[str]:
    lines = [f"runtime errors: {[e.message for e in results.errors]}" if results.errors else "runtime errors: none"]
    ceiling = GEN5_X16_RAW_GB_PER_SECOND
    for entry in results.devices:
        device = next(d for d in snapshot.devices if d.index == entry.index)
        lines.append(f"GPU {entry.index} {entry.pci_bus_id} {device.name} [{entry.runtime}] link "
                     f"{describe_link(device)}")
        if entry.skipped:
            lines.append(f"  skipped: {entry.skipped}")
            continue
        for label, copy in (("H2D", entry.h2d), ("D2H", entry.d2h)):
            if copy is not None:
                figure = (f"{copy.gb_per_second} GB/s = {copy.gb_per_second / ceiling:.0%} of the Gen5 x16 ceiling "
                          f"({ceiling:.1f} GB/s raw)" if copy.gb_per_second else "no figure")
                lines.append(f"  {label}: {figure}{'; error: ' + copy.error.message if copy.error else ''}")
        memtest = entry.memtest
        if memtest is not None:
            lines.append(f"  memtest: {memtest.bytes_tested / 1e9:.1f} GB of {(memtest.free_bytes or 0) / 1e9:.1f} GB "
                         f"free, {memtest.passes_completed}/{memtest.passes_requested} passes in {memtest.seconds} s, "
                         f"{memtest.mismatched_words} mismatching words; ECC corrected "
                         f"{memtest.ecc_corrected_before}->{memtest.ecc_corrected_after}, uncorrected "
                         f"{memtest.ecc_uncorrected_before}->{memtest.ecc_uncorrected_after}"
                         f"{'; error: ' + memtest.error.message if memtest.error else ''}")
        stress = entry.stress
        if stress is not None:
            clocks = [s.sm_clock_mhz for s in stress.samples if s.sm_clock_mhz is not None]
            temps = [s.temperature_celsius for s in stress.samples if s.temperature_celsius is not None]
            powers = [s.power_watts for s in stress.samples if s.power_watts is not None]
            reasons = sorted({r for s in stress.samples for r in (s.throttle_reasons or [])})
            lines.append(f"  stress: {stress.seconds} s, {stress.launches} launches, {stress.tflops} "
                         f"{(stress.precision or '').upper()} TFLOPS ({stress.kernel}); "
                         f"{len(stress.samples)} samples: SM clock {min(clocks, default=None)}-"
                         f"{max(clocks, default=None)} MHz, temperature {min(temps, default=None)}-"
                         f"{max(temps, default=None)} C, power up to {max(powers, default=None)} W, throttle reasons "
                         f"{reasons or 'none'}{'; ' + stress.telemetry_error if stress.telemetry_error else ''}"
                         f"{'; error: ' + stress.error.message if stress.error else ''}")
            for sample in stress.samples:
                lines.append(f"    t={sample.seconds:6.1f}s sm={sample.sm_clock_mhz} MHz mem={sample.memory_clock_mhz} "
                             f"MHz {sample.temperature_celsius} C {sample.power_watts} W {sample.throttle_reasons}")
    for peer in results.peers:
        link = next((p for p in snapshot.peers if {p.gpu_a, p.gpu_b} == {peer.src, peer.dst}), None)
        path = f"{link.path}, {link.link_count} links" if link else "path unknown"
        both = f", both ways {peer.bidirectional_gb_per_second} GB/s" if peer.bidirectional_gb_per_second else ""
        lines.append(f"GPU {peer.src} -> GPU {peer.dst}: {peer.copy.gb_per_second} GB/s{both} "
                     f"(peer access {'on' if peer.p2p_enabled else 'OFF'}, {path})"
                     f"{'; error: ' + peer.copy.error.message if peer.copy.error else ''}")
    return lines


def judge(snapshot: NodeSnapshot) -> tuple[list[dict], Optional[str]]:
    try:
        from gpudiag.checks.active.family import active_checks
        from gpudiag.expect import DEFAULT_EXPECTATIONS

        return [to_dict(r) for r in active_checks(snapshot, DEFAULT_EXPECTATIONS)], None
    except Exception as exc:  # noqa: BLE001 - the measurements stand without the verdicts
        return [], f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the JSON results")
    parser.add_argument("--stress-seconds", type=float, default=30.0)
    parser.add_argument("--deadline", type=float, default=110.0, help="seconds for the whole load-test run")
    parser.add_argument("--tests", default=",".join(ALL_TESTS))
    args = parser.parse_args()

    began = time.monotonic()
    from gpudiag.probe.collector import CollectOptions, Collector

    collector = Collector(CollectOptions(timeout_seconds=30.0, read_kernel_log=False))
    snapshot, probe_error = collect_snapshot(collector)
    if probe_error:
        print(f"the probe failed, nothing was loaded: {probe_error}", file=sys.stderr)
    for device in snapshot.devices:
        print(f"found GPU {device.index} {device.pci_bus_id} {device.name}: processes {device.processes}, "
              f"utilisation {device.utilization.gpu_percent}%, memory held {held_memory(device)} bytes, "
              f"{sum(1 for link in device.links if link.up)} NVLink/XGMI links up", file=sys.stderr)
    reader, reader_info = live_reader(snapshot, collector)
    print(f"telemetry reader: {reader_info}", file=sys.stderr)
    options = ActiveOptions(tests=tuple(t for t in args.tests.split(",") if t), deadline_seconds=args.deadline,
                            stress_seconds=args.stress_seconds, reader=reader)
    results = run_active(snapshot, options) if snapshot.devices else ActiveResults(tests=list(options.tests))
    collector.close()
    snapshot.active = results
    checks, checks_error = judge(snapshot)

    print("\n".join(summary(snapshot, results)))
    print("checks:")
    for check in checks:
        device = f"GPU {check['device']['index']}" if check["device"] else "node"
        print(f"  {check['status']:7} {check['check']:28} {device}: {check['message']}")
    if checks_error:
        print(f"  the checks could not run: {checks_error}")
    print(f"total {time.monotonic() - began:.1f} s")

    args.out.write_text(json.dumps({
        "hostname": snapshot.hostname,
        "backends": to_dict(snapshot.backends),
        "gpus": [{"index": d.index, "pci_bus_id": d.pci_bus_id, "name": d.name, "pcie": to_dict(d.pcie),
                  "nvlinks_up": sum(1 for link in d.links if link.up), "max_sm_mhz": d.clocks.max_sm_mhz,
                  "processes": to_dict(d.processes)} for d in snapshot.devices],
        "peers": to_dict(snapshot.peers),
        "probe_error": probe_error,
        "telemetry_reader": reader_info,
        "active": to_dict(results),
        "checks": checks,
        "checks_error": checks_error,
        "total_seconds": round(time.monotonic() - began, 1),
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if snapshot.devices and not probe_error else 1


if __name__ == "__main__":
    sys.exit(main())
