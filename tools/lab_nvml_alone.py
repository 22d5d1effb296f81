#!/usr/bin/env python3
"""How soon a fresh process that does nothing but NVML's part of a cold check has its answer, against `nvidia-smi -q`
(issue 36, item 9): the GPUs' chain of the check with nothing beside it on its GIL.

On the lab GPU, from the repository root, with gpudiag in a venv of its own (tools/lab_venv.py):

    python3 tools/lab_nvml_alone.py /tmp/v/bin/python [ROUNDS]

Each round runs, interleaved, fresh processes of each variant, and `nvidia-smi -q` and `python -c pass`; a variant
prints its steps (time.perf_counter(), CLOCK_MONOTONIC on Linux: the clock of this process too), which are reported
in ms since this process started it. Variants: `early` (NVML's early start on its thread, gpudiag/probe/nvml/early.py,
then the backend imported, opened, every GPU probed, the peers, the answer pickled), `plain` (the same without the
early start). Prints medians.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

VARIANT = r"""
import sys, time
marks = [("started", time.perf_counter())]
if sys.argv[1] == "early":
    from gpudiag.probe.nvml.early import start_nvml_init
    start_nvml_init()
    marks.append(("early started", time.perf_counter()))
from gpudiag.probe.deadline import CallTracker
marks.append(("deadline imported", time.perf_counter()))
import gpudiag.model
marks.append(("model imported", time.perf_counter()))
from gpudiag.probe.nvml.backend import NvmlBackend
marks.append(("backend imported", time.perf_counter()))
import pynvml
marks.append(("pynvml imported", time.perf_counter()))
backend = NvmlBackend()
info = backend.open(CallTracker())
marks.append(("opened", time.perf_counter()))
devices = [backend.probe_device(i, CallTracker()) for i in range(backend.device_count() or 0)] if info.available else []
marks.append(("probed", time.perf_counter()))
peers = backend.probe_peers(devices, CallTracker())
marks.append(("peers", time.perf_counter()))
import pickle
data = pickle.dumps((info, devices, peers))
marks.append(("pickled", time.perf_counter()))
import json
print(json.dumps(marks))
sys.stdout.flush()
import os
os._exit(0)
"""


def main() -> int:
    python = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 11
    steps: dict = {}
    walls: dict = {}
    for round_ in range(rounds + 1):
        for name in ("early", "plain"):
            started = time.perf_counter()
            done = subprocess.run([python, "-c", VARIANT, name], capture_output=True, text=True)
            wall = time.perf_counter() - started
            if round_ == 0:
                continue  # a warm-up
            if done.returncode != 0:
                print(name, "failed:", done.stderr[-2000:])
                return 1
            walls.setdefault(name, []).append(wall * 1e3)
            for label, at in json.loads(done.stdout):
                steps.setdefault(name, {}).setdefault(label, []).append((at - started) * 1e3)
        for name, cmd in (("nvidia-smi -q", ["nvidia-smi", "-q"]), ("python -c pass", [python, "-c", "pass"])):
            started = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if round_:
                walls.setdefault(name, []).append((time.perf_counter() - started) * 1e3)
    for name, values in walls.items():
        median = statistics.median(values)
        print(f"{name:16} wall median {median:7.1f} ms  (min {min(values):.1f}, max {max(values):.1f})")
    for name, labels in steps.items():
        medians = (f"{label} {statistics.median(values):.1f}" for label, values in labels.items())
        print(f"{name}: " + ", ".join(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
