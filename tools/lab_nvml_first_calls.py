#!/usr/bin/env python3
"""Which of a cold probe's NVML calls cost the most the first time a process makes them, field by field for the
batched nvmlDeviceGetFieldValues (issue 36, item 9: the probe's NVML reads are the collecting child's critical path).

On the lab GPU, from the repository root:  PYTHONPATH=. python3 tools/lab_nvml_first_calls.py [ROUNDS]

Each round is a fresh process (NVML keeps per-process caches: a call's first answer can cost ms where its second
costs µs): (a) the probe's whole field batch in one call, then again; (b) in another fresh process, each field of
the batch alone, in the batch's order, then the batch; (c) the probe's other first calls one by one. Prints medians
(ms) over the rounds.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

ROUND = r"""
import json, sys, time
import pynvml as n
from gpudiag.probe.nvml.fields import _FIXED_IDS, device_fields
mode = sys.argv[1]
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
version = n.nvmlSystemGetDriverVersion()
DEVICE_FIELDS = device_fields(version.decode() if isinstance(version, bytes) else version)
ids = [_FIXED_IDS.get(name) or getattr(n, name) for name in DEVICE_FIELDS]
out = {}
def timed(label, fn, *a):
    t = time.perf_counter()
    try:
        fn(*a)
    except n.NVMLError as exc:
        label += " (" + type(exc).__name__ + ")"
    out[label] = (time.perf_counter() - t) * 1e3
if mode == "batch":
    timed("batch, first", n.nvmlDeviceGetFieldValues, h, ids)
    timed("batch, second", n.nvmlDeviceGetFieldValues, h, ids)
elif mode == "fields":
    for name, fid in zip(DEVICE_FIELDS, ids):
        timed("field " + name, n.nvmlDeviceGetFieldValues, h, [fid])
    timed("batch after each alone", n.nvmlDeviceGetFieldValues, h, ids)
else:
    calls = [("MaxClockInfo GRAPHICS", n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_GRAPHICS),
             ("MaxClockInfo SM", n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
             ("MaxClockInfo MEM", n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM),
             ("InforomVersion OEM", n.nvmlDeviceGetInforomVersion, h, n.NVML_INFOROM_OEM),
             ("InforomVersion ECC", n.nvmlDeviceGetInforomVersion, h, n.NVML_INFOROM_ECC),
             ("InforomVersion POWER", n.nvmlDeviceGetInforomVersion, h, n.NVML_INFOROM_POWER),
             ("InforomImageVersion", n.nvmlDeviceGetInforomImageVersion, h),
             ("VbiosVersion", n.nvmlDeviceGetVbiosVersion, h),
             ("TemperatureThreshold SHUTDOWN", n.nvmlDeviceGetTemperatureThreshold, h, 0),
             ("TemperatureThreshold SLOWDOWN", n.nvmlDeviceGetTemperatureThreshold, h, 1),
             ("ClockInfo GRAPHICS", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_GRAPHICS),
             ("ClockInfo MEM", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
             ("BAR1MemoryInfo", n.nvmlDeviceGetBAR1MemoryInfo, h),
             ("PowerUsage", n.nvmlDeviceGetPowerUsage, h),
             ("CurrPcieLinkGeneration", n.nvmlDeviceGetCurrPcieLinkGeneration, h),
             ("MigMode", n.nvmlDeviceGetMigMode, h),
             ("Temperature", n.nvmlDeviceGetTemperature, h, 0)]
    for label, fn, *a in calls:
        timed(label, fn, *a)
    for label, fn, *a in calls:
        timed(label + ", second", fn, *a)
print(json.dumps(out))
"""


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    seen: dict[str, list[float]] = {}
    for _ in range(rounds):
        for mode in ("batch", "fields", "calls"):
            done = subprocess.run([sys.executable, "-c", ROUND, mode], capture_output=True, text=True, timeout=60)
            if done.returncode:
                print(f"{mode}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
                continue
            for label, ms in json.loads(done.stdout).items():
                seen.setdefault(label, []).append(ms)
    for label, values in seen.items():
        print(f"{statistics.median(values):8.2f} ms  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
