#!/usr/bin/env python3
"""Whether NVML answers one GPU's slow calls side by side (issue 36, item 9): a fresh process's probe of GPU 0, its
slow calls made in turn as the backend makes them, or begun together on threads of their own.

A freshly opened probe of one GPU spends ~36 ms in NVML on the lab H100, most of it in a few calls: the field batch
(~17 ms), the three maximum clocks (~6.5 ms), BAR1, the InfoROM versions and the temperature thresholds
(tests/fixtures/h200/recorded/nvml-calls-per-probe.txt). If the driver serves them at once, a probe that begins them
together is done in about its longest call.

On the lab GPU, from the repository root, with gpudiag in a venv of its own (tools/lab_venv.py):

    python3 tools/lab_nvml_parallel.py /tmp/v/bin/python [ROUNDS]

Each round runs a fresh process of each variant, interleaved. In each, NVML is opened and GPU 0's handle taken first
(a check's early start does both), then the clock starts: `seq` is NvmlBackend.probe_device as shipped; in the
others some calls are begun on threads of their own at the start (the same functions with the same arguments), and
the probe, in its own order, takes their answers when it comes to them: `fields` (the field batch alone), `two` (the
field batch; the maximum clocks), `four` (the field batch; the maximum clocks; the thresholds and BAR1; the InfoROM
versions). Prints, per variant, the probe's median ms, each group's median span, and whether every call begun ahead
was taken by the probe (a call begun for nothing would be a prefetch list out of step with the backend).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

VARIANT = r"""
import ctypes, json, sys, threading, time
import pynvml
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml import fields as F
from gpudiag.probe.nvml.backend import NvmlBackend

backend = NvmlBackend()
info = backend.open(CallTracker())
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
names = tuple(n for n in F.device_fields(info.driver_version) if n in F._FIXED_IDS or hasattr(pynvml, n))
ids = [F._FIXED_IDS.get(n) or getattr(pynvml, n) for n in names]
N = pynvml
clocks = [("nvmlDeviceGetMaxClockInfo", (getattr(N, c),)) for c in ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM",
                                                                     "NVML_CLOCK_MEM")]
thresholds = [("nvmlDeviceGetTemperatureThreshold", (getattr(N, t),)) for t in (
    "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX",
    "NVML_TEMPERATURE_THRESHOLD_MEM_MAX")] + [("nvmlDeviceGetBAR1MemoryInfo", ())]
inforom = [("nvmlDeviceGetInforomVersion", (getattr(N, o),)) for o in (
    "NVML_INFOROM_OEM", "NVML_INFOROM_ECC", "NVML_INFOROM_POWER")] + [("nvmlDeviceGetInforomImageVersion", ())]
GROUPS = {"seq": [], "fields": [[("nvmlDeviceGetFieldValues", (ids,))]],
          "two": [[("nvmlDeviceGetFieldValues", (ids,))], clocks],
          "four": [[("nvmlDeviceGetFieldValues", (ids,))], clocks, thresholds, inforom]}[sys.argv[1]]

def key(function, args):
    return (function, tuple(tuple(a) if isinstance(a, list) else a for a in args))

pending = {}
spans = []
originals = {}
for group in GROUPS:
    for function, args in group:
        pending[key(function, args)] = [threading.Event(), None, None]
        if function not in originals:
            originals[function] = getattr(pynvml, function)

def run(group):
    began = time.perf_counter()
    for function, args in group:
        slot = pending[key(function, args)]
        try:
            slot[1] = originals[function](handle, *args)
        except BaseException as exc:
            slot[2] = exc
        slot[0].set()
    spans.append((group[0][0], (time.perf_counter() - began) * 1e3))

def taking(function):
    def call(h, *args):
        same = ctypes.cast(h, ctypes.c_void_p).value == ctypes.cast(handle, ctypes.c_void_p).value
        slot = pending.pop(key(function, args), None) if same else None
        if slot is None:
            return originals[function](h, *args)
        slot[0].wait()
        if slot[2] is not None:
            raise slot[2]
        return slot[1]
    return call

for function in originals:
    setattr(pynvml, function, taking(function))
started = time.perf_counter()
for group in GROUPS:
    threading.Thread(target=run, args=(group,), daemon=True).start()
device = backend.probe_device(0, CallTracker())
probed = time.perf_counter()
print(json.dumps({"probe": (probed - started) * 1e3, "spans": spans, "left": [list(map(str, k)) for k in pending],
                  "errors": [e.source for e in device.errors], "name": device.name}))
sys.stdout.flush()
import os
os._exit(0)
"""

NAMES = ("seq", "fields", "two", "four")


def main() -> int:
    python = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 11
    probes: dict = {}
    spans: dict = {}
    for round_ in range(rounds + 1):
        for name in NAMES:
            done = subprocess.run([python, "-c", VARIANT, name], capture_output=True, text=True)
            if done.returncode != 0:
                print(name, "failed:", done.stderr[-2000:])
                return 1
            answer = json.loads(done.stdout)
            if round_ == 0:
                print(name, "first run:", json.dumps(answer))
                continue  # a warm-up
            if answer["left"]:
                print(name, "calls begun ahead and never taken:", answer["left"])
            probes.setdefault(name, []).append(answer["probe"])
            for group, ms in answer["spans"]:
                spans.setdefault(name, {}).setdefault(group, []).append(ms)
    for name in NAMES:
        values = probes[name]
        groups = ", ".join(f"{group} {statistics.median(ms):.1f}" for group, ms in spans.get(name, {}).items())
        print(f"{name:7} probe median {statistics.median(values):6.1f} ms (min {min(values):.1f}, "
              f"max {max(values):.1f}){'; groups: ' + groups if groups else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
