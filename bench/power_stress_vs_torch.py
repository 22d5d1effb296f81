"""gpudiag's power stress and HBM copy against a torch reference on the same GPUs, in one run.

1. gpudiag: `run_active` with the hbm and stress tests on every idle GPU at once (the tensor-core kernel where the
   GPU has one), sampled through the probe's live reader (NVML / amdsmi).
2. torch: a BF16 matmul (8192², random data) on every GPU at once for as long, sampled by the same reader; then an
   on-device copy (`b.copy_(a)`, 2 GiB) timed by CUDA events, counted once.

Both steady windows use gpudiag.checks.active.stress_figures (the ramp left out). Printed per GPU: steady mean power,
its ratio to torch's (goal ≥ 0.95), tensor TFLOPS beside torch's (goal ≥ 0.9), SM clocks, peak temperature, throttle
reasons, HBM GB/s beside torch's copy (goal ≥ 0.9), and what the verification of every result found and cost on the host
(bench/verified_stress.py measures its GPU cost). With --copy-warps 0,2,4 the stress runs once per setting, the ratios
then use the last one (tuning).

Usage: PYTHONPATH=. python3 bench/power_stress_vs_torch.py [--seconds 30] [--copy-warps 2] [--json OUT.json]
Needs libcuda.so.1, nvidia-ml-py and torch (AMD: libamdhip64.so, libhiprtc.so, amdsmi and a ROCm torch).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from active_diag import collect_snapshot, live_reader  # noqa: E402  (bench/ is not a package)

from gpudiag.active import ActiveOptions, run_active  # noqa: E402
from gpudiag.active.session import telemetry_of  # noqa: E402
from gpudiag.checks.active.stress_figures import StressFigures, figures_of  # noqa: E402
from gpudiag.model import StressResult, to_dict  # noqa: E402

MATMUL_N = 8192
COPY_BYTES = 2 * 1024**3


def torch_matmul(torch: Any, ordinal: int, seconds: float, reader: Any, device: Any) -> StressResult:
    """BF16 matmul for `seconds`, sampled once a second; TFLOPS over the whole run (CUDA events)."""
    result = StressResult(seconds_requested=seconds, kernel="torch.matmul", precision="bf16")
    torch.cuda.set_device(ordinal)
    a = torch.randn(MATMUL_N, MATMUL_N, device=f"cuda:{ordinal}", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=f"cuda:{ordinal}", dtype=torch.bfloat16)
    c = a @ b
    torch.cuda.synchronize(ordinal)
    done = threading.Event()

    def sample() -> None:
        began = time.monotonic()
        while not done.is_set():
            result.samples.append(telemetry_of(reader(device), time.monotonic() - began))
            done.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sampler.start()
    began = time.monotonic()
    start.record()
    while time.monotonic() - began < seconds:
        for _ in range(20):
            c = torch.matmul(a, b, out=c)
        result.launches += 20
        torch.cuda.current_stream().synchronize()
    end.record()
    end.synchronize()
    done.set()
    sampler.join()
    result.seconds = round(time.monotonic() - began, 2)
    result.tflops = round(result.launches * 2 * MATMUL_N**3 / (start.elapsed_time(end) / 1000) / 1e12, 1)
    return result


def torch_copy(torch: Any, ordinal: int) -> float:
    a = torch.empty(COPY_BYTES, dtype=torch.uint8, device=f"cuda:{ordinal}")
    b = torch.empty_like(a)
    b.copy_(a)
    best = 0.0
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            b.copy_(a)
        end.record()
        end.synchronize()
        best = max(best, 10 * COPY_BYTES / (start.elapsed_time(end) / 1000) / 1e9)
    del a, b
    torch.cuda.empty_cache()
    return round(best, 1)


def line(label: str, f: StressFigures) -> str:
    return (f"{label:8} {f.tflops} {f.precision} TFLOPS, steady mean {f.mean_power_watts} W of {f.power_limit_watts} W "
            f"({f.power_ratio or 0:.1%}), max {f.max_power_watts} W, SM clock min/median {f.sm_clock_min_mhz}/"
            f"{f.sm_clock_median_mhz} MHz, {f.start_temperature_celsius}->{f.max_temperature_celsius} C, "
            f"reasons {f.throttle_reasons}")


def on_each(gpus: list, work: Any) -> list:
    out: list = [None] * len(gpus)
    threads = [threading.Thread(target=lambda i=i, g=g: out.__setitem__(i, work(i, g))) for i, g in enumerate(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="each stress: gpudiag's and torch's")
    parser.add_argument("--copy-warps", default="2", help="streaming warps per block; a list runs a sweep")
    parser.add_argument("--json", type=Path, help="write everything measured here")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()

    from gpudiag.probe.collector import CollectOptions, Collector

    collector = Collector(CollectOptions(timeout_seconds=30.0, read_kernel_log=False))
    snapshot, probe_error = collect_snapshot(collector)
    if probe_error or not snapshot.devices:
        print(f"no GPU to load: {probe_error}", file=sys.stderr)
        return 1
    reader, info = live_reader(snapshot, collector)
    print(f"GPUs: {[(d.index, d.name, d.pci_bus_id) for d in snapshot.devices]}; reader {info}")
    record: dict = {"gpus": [d.name for d in snapshot.devices], "gpudiag": [], "torch": {}}
    ours: dict[int, StressFigures] = {}
    sweep: list[tuple[int, int, StressFigures]] = []
    hbm: dict[int, Any] = {}
    for number, copy_warps in enumerate(int(w) for w in args.copy_warps.split(",")):
        tests = ("hbm", "stress") if number == 0 else ("stress",)
        options = ActiveOptions(tests=tests, stress_seconds=args.seconds, stress_copy_warps=copy_warps,
                                deadline_seconds=args.seconds + 120, reader=reader)
        results = run_active(snapshot, options)
        record["gpudiag"].append({"copy_warps": copy_warps, "active": to_dict(results)})
        print(f"gpudiag stress, stress_copy_warps={copy_warps} (mma.sync: warps of 8 a block; wgmma: 2x that of its "
              f"4 streaming warps):")
        for entry in results.devices:
            if entry.skipped or entry.stress is None:
                print(f"  GPU {entry.index}: not loaded: {entry.skipped or results.errors}")
                continue
            if entry.hbm is not None:
                hbm[entry.index] = entry.hbm
            figures = figures_of(entry.stress)
            ours[entry.index] = figures
            sweep.append((copy_warps, entry.index, figures))
            error = f" ERROR {entry.stress.error.message}" if entry.stress.error else ""
            print(f"  GPU {entry.index}: {line('gpudiag', figures)}; kernel {entry.stress.kernel}, HBM streamed "
                  f"{entry.stress.stream_gb_per_second} GB/s{error}")
            check = entry.stress.verification
            if check is not None:
                print(f"  GPU {entry.index}: verified {check.launches_verified} launches x {check.blocks_per_launch} "
                      f"blocks: {check.mismatched_blocks} mismatching blocks, reference cold == hot: "
                      f"{check.hot_reference_matches}, {check.stream_words_read} streamed words read, "
                      f"{check.stream_mismatches} mismatching; host compare {check.host_seconds:.3f} s of "
                      f"{entry.stress.seconds} s ({check.host_seconds / (entry.stress.seconds or 1):.3%})")
    if args.no_torch:
        return 0
    import torch

    ordinals = list(range(torch.cuda.device_count()))
    devices = sorted(snapshot.devices, key=lambda d: d.index)[:len(ordinals)]
    theirs = on_each(devices, lambda i, d: torch_matmul(torch, i, args.seconds, reader, d))
    copies = on_each(devices, lambda i, d: torch_copy(torch, i))
    print("torch reference (BF16 matmul 8192^2, copy_ of 2 GiB), then the ratios:")
    for device, stress, copy in zip(devices, theirs, copies):
        figures = figures_of(stress)
        record["torch"][device.index] = {"stress": to_dict(stress), "copy_gb_per_second": copy}
        print(f"  GPU {device.index}: {line('torch', figures)}")
        for copy_warps, index, mine in sweep[:-1] if len(sweep) > len(ours) else []:
            if index == device.index:
                print(f"  GPU {index}, {copy_warps} streaming warps: power "
                      f"{mine.mean_power_watts / (figures.mean_power_watts or 1):.3f}"
                      f" of torch's, TFLOPS {(mine.tflops or 0) / (figures.tflops or 1):.3f} of torch's")
        mine = ours.get(device.index)
        if mine is None:
            continue
        power = (mine.mean_power_watts or 0) / (figures.mean_power_watts or 1)
        flops = (mine.tflops or 0) / (figures.tflops or 1)
        ours_hbm = hbm[device.index].gb_per_second if device.index in hbm else None
        copy_ratio = (ours_hbm or 0) / copy if copy else 0
        print(f"  GPU {device.index}, {sweep[-1][0]} streaming warps: power {mine.mean_power_watts} / "
              f"{figures.mean_power_watts} W = {power:.3f} "
              f"(goal >= 0.95: {'met' if power >= 0.95 else 'MISSED'}); TFLOPS {mine.tflops} / {figures.tflops} = "
              f"{flops:.3f} (goal >= 0.9: {'met' if flops >= 0.9 else 'MISSED'}); HBM copy {ours_hbm} / {copy} GB/s = "
              f"{copy_ratio:.3f} (goal >= 0.9: {'met' if copy_ratio >= 0.9 else 'MISSED'})")
    collector.close()
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
