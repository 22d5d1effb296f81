"""`gpudiag serve` on a real NVIDIA node: /metrics latency against `nvidia-smi --query-gpu` for the same fields.

Target (issue: gpudiag serve): our /metrics p99 at most 1/10 of nvidia-smi's p99, measured side by side in one
run. A common exporter runs that nvidia-smi query on every scrape; gpudiag collects in the background and a scrape
only sends the last collection.

The exporter runs as its own process (`python3 -m gpudiag serve`, collecting every --interval seconds); this script
scrapes it over loopback, interleaved with nvidia-smi runs, so both see the same machine state. It also reports
what a real collection costs (wall time, CPU) and the exporter's RSS, and saves one /metrics body (--save).

Needs only the standard library plus psutil (and what gpudiag needs: pynvml, prometheus-client, typer); no network.
Usage: PYTHONPATH=. python3 bench/exporter_h200.py --save /tmp/h200-metrics.txt [--scrapes 500] [--smi-runs 50]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.exporter_process import ExporterProcess, percentile  # noqa: E402

# nvidia-smi fields for what gpudiag exports per GPU (fields this driver does not know are dropped, and listed).
SMI_FIELDS = [
    "index", "uuid", "pci.bus_id", "name", "serial", "vbios_version", "driver_version",
    "temperature.gpu", "temperature.memory", "power.draw", "power.limit", "enforced.power.limit",
    "power.default_limit", "clocks.gr", "clocks.sm", "clocks.mem", "clocks.max.gr", "clocks.max.sm",
    "clocks.max.mem", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
    "pcie.link.width.max", "ecc.mode.current", "ecc.mode.pending", "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total", "retired_pages.pending", "clocks_event_reasons.active",
    "clocks_throttle_reasons.active", "utilization.gpu", "utilization.memory", "memory.total", "memory.used",
    "pstate", "persistence_mode", "total_energy_consumption",
]


def summary(seconds: list[float]) -> dict:
    return {"n": len(seconds), "p50_ms": percentile(seconds, 0.5) * 1000, "p99_ms": percentile(seconds, 0.99) * 1000,
            "max_ms": max(seconds) * 1000, "mean_ms": statistics.fmean(seconds) * 1000}


def smi(fields: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"],
                          capture_output=True, text=True, timeout=60)


def usable_fields() -> tuple[list[str], list[str]]:
    if smi(SMI_FIELDS).returncode == 0:
        return list(SMI_FIELDS), []
    usable = [f for f in SMI_FIELDS if smi([f]).returncode == 0]
    return usable, [f for f in SMI_FIELDS if f not in usable]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, required=True, help="write one /metrics response here")
    parser.add_argument("--scrapes", type=int, default=500, help="scrapes of gpudiag in all")
    parser.add_argument("--smi-runs", type=int, default=50, help="nvidia-smi runs in all")
    parser.add_argument("--interval", type=float, default=5.0, help="gpudiag's collection interval, seconds")
    parser.add_argument("--timeout", type=float, default=10.0, help="gpudiag's collection deadline, seconds")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    have_smi = shutil.which("nvidia-smi") is not None
    fields, dropped = usable_fields() if have_smi else ([], [])
    exporter = ExporterProcess([sys.executable, "-m", "gpudiag", "serve", "--listen", "127.0.0.1:0",
                                "--interval", str(args.interval), "--timeout", str(args.timeout)])
    try:
        deadline = time.monotonic() + 120
        while exporter.collections() < 2:
            if time.monotonic() > deadline:
                raise SystemExit("gpudiag serve completed no collection within 120 s")
            time.sleep(0.5)
        body = exporter.get()
        args.save.write_bytes(body)

        # What a real collection costs: exporter CPU over a quiet period, per collection completed in it.
        n0, cpu0 = exporter.collections(), exporter.cpu_seconds()
        time.sleep(max(3 * args.interval, 10))
        n1, cpu1 = exporter.collections(), exporter.cpu_seconds()
        collection_wall = exporter.sample("gpudiag_collector_duration_seconds", collector="collection")

        ours: list[float] = []
        theirs: list[float] = []
        per_round = max(1, args.scrapes // max(1, args.smi_runs))
        for round_number in range(max(args.smi_runs, 1)):
            if have_smi and round_number < args.smi_runs:
                started = time.perf_counter()
                done = smi(fields)
                theirs.append(time.perf_counter() - started)
                if done.returncode != 0:
                    raise SystemExit(f"nvidia-smi failed: {done.stderr.strip()}")
            for _ in range(per_round):
                started = time.perf_counter()
                exporter.get()
                ours.append(time.perf_counter() - started)
        rss_mib = exporter.rss_mib()
    finally:
        exporter.stop()

    text = body.decode()
    figures = {
        "gpus_up": len(re.findall(r"^gpudiag_device_up\{.*\} 1$", text, re.M)),
        "gpus_down": len(re.findall(r"^gpudiag_device_up\{.*\} 0$", text, re.M)),
        "series": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
        "gpudiag_metrics": summary(ours),
        "nvidia_smi_query": summary(theirs) if theirs else None,
        "nvidia_smi_fields": len(fields),
        "nvidia_smi_fields_dropped": dropped,
        "collection_wall_s": collection_wall,
        "collection_cpu_ms": (cpu1 - cpu0) / max(1, n1 - n0) * 1000,
        "exporter_rss_mib": rss_mib,
    }
    g = figures["gpudiag_metrics"]
    print(f"GPUs up / down: {figures['gpus_up']} / {figures['gpus_down']}; {figures['series']} series;"
          f" /metrics saved to {args.save}")
    print(f"gpudiag /metrics:        p50 {g['p50_ms']:7.2f} ms   p99 {g['p99_ms']:7.2f} ms   (n={g['n']})")
    if theirs:
        s = figures["nvidia_smi_query"]
        print(f"nvidia-smi --query-gpu:  p50 {s['p50_ms']:7.2f} ms   p99 {s['p99_ms']:7.2f} ms   (n={s['n']},"
              f" {len(fields)} fields{'; dropped: ' + ', '.join(dropped) if dropped else ''})")
        ratio = g["p99_ms"] / s["p99_ms"]
        figures["p99_ratio"] = ratio
        print(f"p99 ratio gpudiag / nvidia-smi: {ratio:.4f} (target <= 0.1: {'meets' if ratio <= 0.1 else 'MISSES'})")
    else:
        print("nvidia-smi not found: no comparison")
    print(f"a real collection: {figures['collection_wall_s']} s wall, {figures['collection_cpu_ms']:.1f} ms CPU;"
          f" exporter RSS {rss_mib:.1f} MiB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
