"""`gpudiag serve` over the fake NVIDIA node: scrape latency, CPU per collection, memory after many scrapes.

Targets (issue: gpudiag serve): for 8 GPUs, under 0.5% of one core at a 15 s interval (one collection and one
scrape per 15 s); RSS under 60 MiB and flat over 10,000 scrapes. Also run at 64 devices to show how it scales.

The exporter runs as its own process, exactly as `gpudiag serve` (tests/support/exporter_node.py installs the fake
libnvidia-ml first), so its CPU and RSS are measured from outside, without the benchmark's client in them. The
fake is Python standing in for the C library, so the CPU and memory figures include the fake's own work: they
over-state what the real library costs. Everything runs on loopback; the request loop is bounded by --scrapes.

Usage: python3 bench/exporter_fake.py [--devices 8 64] [--scrapes 10000] [--idle-seconds 15] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.exporter_process import ExporterProcess, percentile  # noqa: E402

INTERVAL_SECONDS = 15.0  # the scrape and collection interval the CPU target is stated for
COLLECT_EVERY = 1.0  # how often the exporter under test collects (faster than production: more samples)
TARGET_CPU_PERCENT = 0.5
TARGET_RSS_MIB = 60


def bench(devices: int, scrapes: int, idle_seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as root:
        target = ExporterProcess([sys.executable, "-m", "tests.support.exporter_node", root, str(devices), "--",
                                  "--listen", "127.0.0.1:0", "--interval", str(COLLECT_EVERY), "--timeout", "10"])
        try:
            while target.collections() < 3:  # warm: imports done, NVML open, caches filled
                time.sleep(0.2)
            body = target.get()
            # Idle: only collections (and one scrape at each end to count them).
            before_n, before_cpu = target.collections(), target.cpu_seconds()
            time.sleep(idle_seconds)
            after_n, after_cpu = target.collections(), target.cpu_seconds()
            per_collection = (after_cpu - before_cpu) / max(1, after_n - before_n)
            # Scrapes: latency, memory, and the CPU left once the collections meanwhile are accounted for.
            rss = [(0, target.rss_mib())]
            latencies = []
            start_n, start_cpu = target.collections(), target.cpu_seconds()
            for n in range(1, scrapes + 1):
                started = time.perf_counter()
                target.get()
                latencies.append(time.perf_counter() - started)
                if n % max(1, scrapes // 10) == 0:
                    rss.append((n, target.rss_mib()))
            end_n, end_cpu = target.collections(), target.cpu_seconds()
            per_scrape = max(0.0, (end_cpu - start_cpu) - (end_n - start_n) * per_collection) / scrapes
        finally:
            target.stop()
    return {
        "devices": devices,
        "series": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
        "body_kib": len(body) / 1024,
        "cpu_ms_per_collection": per_collection * 1000,
        "cpu_ms_per_scrape": per_scrape * 1000,
        "cpu_percent_of_one_core_at_15s": (per_collection + per_scrape) / INTERVAL_SECONDS * 100,
        "scrapes": scrapes,
        "latency_ms": {"p50": percentile(latencies, 0.5) * 1000, "p99": percentile(latencies, 0.99) * 1000,
                       "max": max(latencies) * 1000},
        "rss_mib": rss,
    }


def report(r: dict) -> None:
    print(f"\n== {r['devices']} devices: {r['series']} series, {r['body_kib']:.0f} KiB per scrape")
    cpu_ok = "meets" if r["cpu_percent_of_one_core_at_15s"] < TARGET_CPU_PERCENT else "MISSES"
    if r["devices"] != 8:
        cpu_ok = "stated for 8 GPUs; shown for scale"
    print(f"CPU: {r['cpu_ms_per_collection']:.1f} ms per collection (probe + checks + render),"
          f" {r['cpu_ms_per_scrape']:.2f} ms per scrape")
    print(f"  at one collection and one scrape per 15 s: {r['cpu_percent_of_one_core_at_15s']:.3f}% of one core"
          f" (target < {TARGET_CPU_PERCENT}%: {cpu_ok})")
    lat = r["latency_ms"]
    print(f"/metrics latency, {r['scrapes']} scrapes (collecting every {COLLECT_EVERY:g} s meanwhile):"
          f" p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, max {lat['max']:.1f} ms")
    rss = r["rss_mib"]
    rss_ok = "meets" if rss[-1][1] < TARGET_RSS_MIB else "MISSES"
    print("exporter RSS (MiB) after N scrapes: " + ", ".join(f"{n}: {m:.1f}" for n, m in rss))
    print(f"  final {rss[-1][1]:.1f} MiB (target < {TARGET_RSS_MIB}: {rss_ok}); change over the last 90%:"
          f" {rss[-1][1] - rss[1][1]:+.1f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--scrapes", type=int, default=10_000)
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = [bench(devices, args.scrapes, args.idle_seconds) for devices in args.devices]
    for result in results:
        report(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
