"""Wall time of the full `gpudiag check` against `nvidia-smi -q` on the same node, in one run.

Target (issue: the checklist on NVIDIA nodes): gpudiag's full checklist no slower than `nvidia-smi -q`.
Both commands run as fresh processes, interleaved so that both see the same machine state; the figure is the
median of N runs of each, after one warm-up run of each (page cache, driver state).

Usage: python3 bench/check_vs_nvidia_smi.py [--runs N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], env: dict) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    return time.perf_counter() - started, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    env = dict(os.environ, PYTHONPATH=str(REPO))
    commands = {
        "gpudiag check": [sys.executable, "-m", "gpudiag", "check", "--format", "json"],
        "nvidia-smi -q": ["nvidia-smi", "-q"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    for name, cmd in commands.items():  # warm-up
        timed(cmd, env)
    for _ in range(args.runs):
        for name, cmd in commands.items():
            seconds, rc = timed(cmd, env)
            samples[name].append(seconds)
            codes[name].add(rc)

    figures = {
        name: {
            "median_ms": round(statistics.median(values) * 1000, 1),
            "min_ms": round(min(values) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1),
            "exit_codes": sorted(codes[name]),
        }
        for name, values in samples.items()
    }
    ratio = figures["gpudiag check"]["median_ms"] / figures["nvidia-smi -q"]["median_ms"]
    for name, fig in figures.items():
        print(f"{name:15s} median {fig['median_ms']:7.1f} ms  (min {fig['min_ms']:.1f}, max {fig['max_ms']:.1f}, "
              f"exit codes {fig['exit_codes']}, {args.runs} runs)")
    verdict = "meets" if ratio <= 1.0 else "MISSES"
    print(f"ratio gpudiag/nvidia-smi = {ratio:.2f}  ({verdict} the target: no slower than nvidia-smi -q)")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "figures": figures, "ratio": round(ratio, 3)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
