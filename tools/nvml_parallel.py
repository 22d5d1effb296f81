"""Does NVML serialise across processes as it does across threads? Probe every GPU (a) in one process, one after
the other, (b) in one process on one thread per GPU, (c) in one process per GPU at once; print the wall times.

Usage: PYTHONPATH=. python3 tools/nvml_parallel.py
"""

from __future__ import annotations

import multiprocessing
import threading
import time

from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.backend import NvmlBackend


def probe_in_new_process(index: int, started: "multiprocessing.synchronize.Event", out) -> None:
    backend = NvmlBackend()
    backend.open(CallTracker())
    started.wait()
    t = time.perf_counter()
    backend.probe_device(index, CallTracker())
    out.put((index, time.perf_counter() - t))
    backend.close()


def main() -> None:
    backend = NvmlBackend()
    backend.open(CallTracker())
    count = backend.device_count()
    for _ in range(2):  # the first round warms the driver
        t = time.perf_counter()
        for i in range(count):
            backend.probe_device(i, CallTracker())
        sequential = time.perf_counter() - t
        threads = [threading.Thread(target=backend.probe_device, args=(i, CallTracker())) for i in range(count)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        threaded = time.perf_counter() - t
    backend.close()

    ctx = multiprocessing.get_context("spawn")
    started, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=probe_in_new_process, args=(i, started, out)) for i in range(count)]
    for p in procs:
        p.start()
    time.sleep(3)  # every process has opened NVML
    t = time.perf_counter()
    started.set()
    results = [out.get(timeout=60) for _ in procs]
    parallel = time.perf_counter() - t
    for p in procs:
        p.join()
    print(f"{count} GPUs: one process sequential {1000 * sequential:.0f} ms; threads {1000 * threaded:.0f} ms; "
          f"one process per GPU {1000 * parallel:.0f} ms (each {[round(1000 * s) for _, s in sorted(results)]} ms)")


if __name__ == "__main__":
    main()
