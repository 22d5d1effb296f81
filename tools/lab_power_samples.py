#!/usr/bin/env python3
"""On a real NVIDIA GPU: what nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES) answers (value type, how many samples
the buffer holds and how far apart, whether their timestamps are the host's Unix time, NOT_FOUND when asked again at
once, a buffer that ran over in 5 s), then NvmlBackend(power_samples=True)'s mean over probes 0, 1, 1, 0 and 5 s apart
(issue 36, item 1). GPU 0, about 10 s; from the repository root:

    PYTHONPATH=. python3 tools/lab_power_samples.py
"""
import statistics
import time

import pynvml as nvml

nvml.nvmlInit()
h = nvml.nvmlDeviceGetHandleByIndex(0)
print("driver", nvml.nvmlSystemGetDriverVersion(), nvml.nvmlDeviceGetName(h))
now = time.time()
vtype, s = nvml.nvmlDeviceGetSamples(h, nvml.NVML_TOTAL_POWER_SAMPLES, 0)
stamps = [x.timeStamp for x in s]
print("first call: value type", vtype, "count", len(s), "oldest", stamps[0], "newest", stamps[-1],
      "span s", (stamps[-1] - stamps[0]) / 1e6, "newest - time.time() s", stamps[-1] / 1e6 - now)
gaps = [b - a for a, b in zip(stamps, stamps[1:])]
print("spacing us: median", statistics.median(gaps), "min", min(gaps), "max", max(gaps))
print("values mW (uiVal) first 5", [x.sampleValue.uiVal for x in s[:5]],
      "GetPowerUsage", nvml.nvmlDeviceGetPowerUsage(h))
last = stamps[-1]
try:
    r = nvml.nvmlDeviceGetSamples(h, nvml.NVML_TOTAL_POWER_SAMPLES, last)
    print("immediately again: count", len(r[1]))
except nvml.NVMLError as exc:
    print("immediately again:", type(exc).__name__, exc.value)
time.sleep(1.0)
vtype, s = nvml.nvmlDeviceGetSamples(h, nvml.NVML_TOTAL_POWER_SAMPLES, last)
print("after 1 s: count", len(s), "mean W", statistics.mean(x.sampleValue.uiVal for x in s) / 1000,
      "span s", (s[-1].timeStamp - last) / 1e6)
time.sleep(5.0)
vtype, s = nvml.nvmlDeviceGetSamples(h, nvml.NVML_TOTAL_POWER_SAMPLES, s[-1].timeStamp)
print("after 5 s: count", len(s), "oldest after kept s", (s[0].timeStamp - last) / 1e6)
nvml.nvmlShutdown()

from gpudiag.probe.deadline import CallTracker  # noqa: E402
from gpudiag.probe.nvml.backend import NvmlBackend  # noqa: E402

b = NvmlBackend(power_samples=True)
print(b.open(CallTracker()).available)
for wait in (0, 1, 1, 0, 5):
    time.sleep(wait)
    d = b.probe_device(0, CallTracker())
    p = d.power
    print(f"after {wait} s: draw {p.draw_watts} average {p.average_watts} over {p.average_seconds} errors {d.errors}")
b.close()
