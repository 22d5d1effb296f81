"""Where a cold `gpudiag check --direct` spends its time, and which NVML calls one probe makes (issue: one NVML
client per node; docs/service.md "Why a cold --direct check stays above nvidia-smi -q").

1. Phases: fresh processes run the direct check's steps one after the other (NVML initialised in turn, not early,
   so that no phase hides another's cost) and time each: gpudiag's imports, the pynvml import, the probe, the
   judging and rendering. Beside them, `python -c pass` and `nvidia-smi -q`. The CPU-bound part (interpreter,
   imports, rendering) is the floor under any arrangement of the same work in one Python process: threads overlap
   only the waits inside the driver.
2. NVML calls: every pynvml call of one collection, timed, first with a freshly opened library (a one-shot check)
   and then twice more through the same open collector (the exporter and the service); and any call made twice
   with the same arguments within one collection.

    python3 bench/direct_breakdown.py --python /opt/gpudiag/bin/python   # the interpreter pip installed into
    python3 bench/direct_breakdown.py                                    # this tree, under this interpreter
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_vs_nvidia_smi import timed  # noqa: E402 - the sibling benchmark's harness

PHASES = ("start", "gpudiag imports", "pynvml import", "probe", "judge and render")


def child_phases() -> dict:
    """The direct check (gpudiag/cli/check/direct.py) in steps, timed; run in a fresh process."""
    marks = [time.perf_counter()]
    import io
    from contextlib import redirect_stdout

    from gpudiag.checks import probe_parts_for, resolve_selection
    from gpudiag.cli.shared.node_collect import collect, expectations
    from gpudiag.probe import host  # noqa: F401 - imported by the probe at its start otherwise
    from gpudiag.probe.kernel_log import reader as kernel_log  # noqa: F401
    from gpudiag.probe.nvml import backend as nvml  # noqa: F401
    from gpudiag.report.verdict import print_verdict
    marks.append(time.perf_counter())
    import pynvml  # noqa: F401 - what NvmlBackend.open imports
    marks.append(time.perf_counter())
    snapshot = collect(Path("/"), None, None, 1, probe_parts_for(resolve_selection([], [])))
    marks.append(time.perf_counter())
    with redirect_stdout(io.StringIO()):
        print_verdict(snapshot, expectations(None, [], None), [], [], [], "direct", "text", False, False)
    marks.append(time.perf_counter())
    phases = {name: (b - a) * 1e3 for name, a, b in zip(PHASES[1:], marks, marks[1:])}
    phases["probe parts"] = {run.name: run.duration_seconds * 1e3 for run in snapshot.collectors}
    return phases


def child_calls() -> dict:
    """Every pynvml call of three collections through one open Collector, timed."""
    import pynvml

    made: list[tuple[str, float, str]] = []
    inside = threading.local()  # pynvml calls itself (nvmlInit → nvmlInitWithFlags): count the outer call only

    def timed_call(function, name):
        def call(*args, **kwargs):
            if getattr(inside, "depth", 0):
                return function(*args, **kwargs)
            inside.depth, started = 1, time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                inside.depth = 0
                made.append((name, (time.perf_counter() - started) * 1e3, repr(args)))
        return call

    for name in dir(pynvml):
        if name.startswith("nvml") and name[4:5].isupper() and callable(getattr(pynvml, name)):
            setattr(pynvml, name, timed_call(getattr(pynvml, name), name))
    from gpudiag.probe.collector import CollectOptions, Collector

    rounds = []
    with Collector(CollectOptions()) as collector:
        for _ in range(3):
            made.clear()
            started = time.perf_counter()
            collector.collect()
            wall = (time.perf_counter() - started) * 1e3
            by_name: dict = collections.defaultdict(lambda: [0, 0.0])
            for name, took, _ in made:
                by_name[name][0] += 1
                by_name[name][1] += took
            again = collections.Counter((name, args) for name, _, args in made)
            rounds.append({"collection_ms": wall, "calls": len(made), "in_nvml_ms": sum(t for _, t, _ in made),
                           "by_call": {n: {"count": c, "ms": round(t, 3)} for n, (c, t) in by_name.items()},
                           "repeated": [f"{n}{a}" for (n, a), c in again.items() if c > 1 and n != "nvmlShutdown"]})
    return {"rounds": rounds}


def run_child(python: str, mode: str) -> dict:
    env = dict(os.environ)
    if python == sys.executable:
        env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run([python, __file__, "--child", mode], capture_output=True, text=True, env=env, cwd="/tmp")
    if done.returncode != 0:
        raise SystemExit(f"the {mode} child failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter gpudiag is installed for")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", choices=("phases", "calls"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_phases() if args.child == "phases" else child_calls()))
        return 0

    if shutil.which("nvidia-smi") is None:
        parser.error("nvidia-smi is not on PATH: run this on an NVIDIA GPU node")
    phases, start, smi = [], [], []
    for _ in range(args.runs + 1):  # the first of each is a warm-up
        phases.append(run_child(args.python, "phases"))
        start.append(timed([args.python, "-c", "pass"], dict(os.environ))[0] * 1e3)
        smi.append(timed(["nvidia-smi", "-q"], dict(os.environ))[0] * 1e3)
    phases, start, smi = phases[1:], start[1:], smi[1:]
    median = {name: statistics.median(p[name] for p in phases) for name in PHASES[1:]}
    median["python -c pass"], median["nvidia-smi -q"] = statistics.median(start), statistics.median(smi)
    print(f"cold direct check in steps, medians of {args.runs} fresh processes ({args.python}):")
    for name, value in median.items():
        print(f"  {name:18} {value:7.1f} ms")
    parts = collections.defaultdict(list)
    for p in phases:
        for name, took in p["probe parts"].items():
            parts[name].append(took)
    print("  probe parts:       " + ", ".join(f"{n} {statistics.median(v):.1f} ms" for n, v in parts.items()))
    floor = median["python -c pass"] + median["gpudiag imports"] + median["pynvml import"] + median["judge and render"]
    print(f"CPU-bound floor (start + imports + pynvml import + judge and render): {floor:.1f} ms = "
          f"{floor / median['nvidia-smi -q']:.2f} × nvidia-smi -q, before any NVML call")

    calls = run_child(args.python, "calls")
    for number, item in enumerate(calls["rounds"], 1):
        opened = "a freshly opened NVML" if number == 1 else "the same open collector"
        print(f"collection {number} through {opened}: {item['collection_ms']:.1f} ms, {item['calls']} NVML calls, "
              f"{item['in_nvml_ms']:.1f} ms in them; asked twice with the same arguments: "
              f"{', '.join(item['repeated']) or 'none'}")
        slowest = sorted(item["by_call"].items(), key=lambda kv: -kv[1]["ms"])[:8]
        print("  slowest: " + ", ".join(f"{n} {v['count']}× {v['ms']:.2f} ms" for n, v in slowest))
    if args.json:
        args.json.write_text(json.dumps({"phases_median_ms": median, "cpu_floor_ms": floor, "runs": phases,
                                         "nvml_calls": calls}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
