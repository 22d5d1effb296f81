"""Where does NVML probe time go on a real node? Prints one line per measurement (milliseconds).

Usage: PYTHONPATH=. python3 tools/nvml_timing.py
"""

from __future__ import annotations

import collections
import threading
import time

t0 = time.perf_counter()
import pynvml as n  # noqa: E402

print(f"import pynvml {1000 * (time.perf_counter() - t0):.1f}")
t0 = time.perf_counter()
n.nvmlInit()
print(f"nvmlInit {1000 * (time.perf_counter() - t0):.1f}")


def ms(fn, *a):
    t = time.perf_counter()
    try:
        value = fn(*a)
    except n.NVMLError as exc:
        value = type(exc).__name__
    return 1000 * (time.perf_counter() - t), value


h = n.nvmlDeviceGetHandleByIndex(0)
total = sum(ms(n.nvmlDeviceGetNvLinkErrorCounter, h, link, c)[0] for link in range(18) for c in range(5))
print(f"18x5 NvLinkErrorCounter calls {total:.1f}")
total = sum(ms(n.nvmlDeviceGetNvLinkState, h, link)[0] for link in range(18))
print(f"18 NvLinkState calls {total:.1f}")
for label, fields in {
    "totals 38,45,52,59,160": [38, 45, 52, 59, 160],
    "scoped 213-221 x18 links": [(f, link) for f in (213, 214, 215, 219, 221) for link in range(18)],
    "legacy per-lane L0-L11 (60 fields)": list(range(32, 38))
    + list(range(39, 45))
    + list(range(46, 52))
    + list(range(53, 59))
    + list(range(94, 120))
    + list(range(148, 160)),
}.items():
    took, values = ms(n.nvmlDeviceGetFieldValues, h, fields)
    if isinstance(values, str):
        print(f"fields {label}: {took:.1f} -> {values}")
        continue
    answered = [(v.fieldId, v.scopeId, v.value.ullVal) for v in values if v.nvmlReturn == 0]
    print(f"fields {label}: {took:.1f} ms, {len(answered)}/{len(values)} answered, first {answered[:6]}")

from gpudiag.probe.nvml import call as nvml_call  # noqa: E402
from gpudiag.probe.deadline import CallTracker  # noqa: E402
from gpudiag.probe.nvml.backend import NvmlBackend  # noqa: E402

spent: collections.Counter = collections.Counter()
original = nvml_call.NvmlCall.attempt


def timed_attempt(self, function, *args):
    t = time.perf_counter()
    try:
        return original(self, function, *args)
    finally:
        spent[function] += 1000 * (time.perf_counter() - t)


nvml_call.NvmlCall.attempt = timed_attempt
backend = NvmlBackend()
backend.open(CallTracker())
for i in range(n.nvmlDeviceGetCount()):
    t = time.perf_counter()
    backend.probe_device(i, CallTracker())
    print(f"probe_device({i}) sequential {1000 * (time.perf_counter() - t):.1f}")
print("top calls:", ", ".join(f"{k} {v:.1f}" for k, v in spent.most_common(12)))
threads = [
    threading.Thread(target=backend.probe_device, args=(i, CallTracker())) for i in range(n.nvmlDeviceGetCount())
]
t = time.perf_counter()
for th in threads:
    th.start()
for th in threads:
    th.join()
print(f"probe_device all GPUs in threads {1000 * (time.perf_counter() - t):.1f}")
t = time.perf_counter()
from gpudiag.probe.kernel_log.reader import read_kernel_log  # noqa: E402
from pathlib import Path  # noqa: E402

info = read_kernel_log(Path("/"))
print(f"kernel log alone {1000 * (time.perf_counter() - t):.1f} ({info.lines_scanned} lines)")
