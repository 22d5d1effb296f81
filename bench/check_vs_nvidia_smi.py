"""Wall time of the full `gpudiag check` against `nvidia-smi -q` on the same node, in one run.

Target (issue: the checklist on NVIDIA nodes): gpudiag's full checklist no slower than `nvidia-smi -q`.
Both commands run as fresh processes, interleaved so that both see the same machine state; the figure is the
median of N runs of each, after one warm-up run of each (page cache, driver state).

Python modules are byte-compiled first, as `pip install` does on a real node: the lab machines set
PYTHONDONTWRITEBYTECODE=1 and ship nvidia-ml-py without .pyc files, so without this step every run would
recompile pynvml (6,000 lines) and gpudiag from source. `--no-compile` measures that case too.

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


def interleaved(commands: dict[str, list[str]], runs: int, env: dict) -> tuple[dict, dict]:
    """One warm-up run of each command, then `runs` rounds of each in turn: wall times and exit codes by name."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    for cmd in commands.values():
        timed(cmd, env)
    for _ in range(runs):
        for name, cmd in commands.items():
            seconds, rc = timed(cmd, env)
            samples[name].append(seconds)
            codes[name].add(rc)
    return samples, codes


# What `gpudiag check` imports (gpudiag itself and its dependencies), byte-compiled before timing.
MODULES = ("gpudiag", "pynvml", "psutil", "typer", "click", "rich", "pydantic", "pydantic_core", "shellingham",
           "annotated_doc", "typing_extensions")


def precompile() -> list[str]:
    import compileall
    import importlib.util

    compiled = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            continue
        target = Path(spec.origin)
        ok = compileall.compile_dir(str(target.parent), quiet=2) if target.name == "__init__.py" else \
            compileall.compile_file(str(target), quiet=2)
        compiled.append(name if ok else f"{name} (not writable)")
    return compiled


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile the modules first")
    parser.add_argument("--only", help="time `gpudiag check --only ONLY` instead of the full checklist")
    args = parser.parse_args()
    import shutil

    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: this benchmark runs on an NVIDIA node", file=sys.stderr)
        return 2
    if not args.no_compile:
        sys.path.insert(0, str(REPO))
        print("byte-compiled:", ", ".join(precompile()))

    env = dict(os.environ, PYTHONPATH=str(REPO))
    commands = {
        "gpudiag check": [sys.executable, "-m", "gpudiag", "check", "--format", "json"]
        + (["--only", args.only] if args.only else []),
        "nvidia-smi -q": ["nvidia-smi", "-q"],
    }
    samples, codes = interleaved(commands, args.runs, env)

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
    what = f"--only {args.only}" if args.only else "full checklist"
    print(f"ratio gpudiag/nvidia-smi = {ratio:.2f}  ({what}; {verdict} the target: no slower than nvidia-smi -q)")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "figures": figures, "ratio": round(ratio, 3)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
