"""The process that screens one GPU: `python -m gpudiag.active.screen.worker REQUEST RESULT`.

It reads its request (the GPU as the probe saw it, the tests, the stress length, the memory bound) from the JSON file
REQUEST, opens the GPU, measures what its own context took, sizes the tests to fit the bound (footprint.py), runs
them, and writes what they found to RESULT. SIGTERM (or SIGINT) is a stop: the tests end at their next launch
boundary (each launch lasts about LAUNCH_MS), free what they took and release the context, and the process exits,
which gives the GPU back whole. The supervisor kills a worker that does not go in time; the kernel driver frees a
killed process's GPU memory.

A separate process per GPU, not a thread of `gpudiag screen`: the only way to be sure that nothing of a screen stays
on the GPU is for its process to be gone, and the vendor's process list then shows exactly that.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Optional

from gpudiag.active.options import ActiveOptions
from gpudiag.active.plan import runtime_ordinals
from gpudiag.active.runner import default_runtime, run_active
from gpudiag.active.runtime import GpuCallError, RuntimeUnavailable
from gpudiag.active.screen.footprint import footprint, sized_tests
from gpudiag.active.session import Control
from gpudiag.model import DeviceSnapshot, NodeSnapshot, from_dict, to_dict
from gpudiag.probe.deadline import CallTracker

# Each stress launch lasts about this long: a stop waits for at most two (the one running and the one queued behind
# it). 20 ms keeps the launch overhead under 1 % (a launch costs ~10 µs) and a stop well under 0.1 s.
LAUNCH_MS = 20.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m gpudiag.active.screen.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    control = Control(until=None)
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda number, frame: control.request_stop("stop requested"))
    request = json.loads(Path(argv[0]).read_text())
    _die_with_parent(request.get("parent_pid"))
    os.dup2(2, 1)  # whatever a vendor library prints goes to stderr; the result goes to its file
    answer = screen(request, control)
    _write(Path(argv[1]), answer)
    return 0


def screen(request: dict, control: Control) -> dict:
    """Run the request's tests on its GPU; the answer holds the results, the footprint and what went wrong."""
    device = from_dict(DeviceSnapshot, request["device"])
    answer: dict = {"results": None, "problem": None, "footprint": None, "tests": []}
    try:
        runtime = default_runtime(device.vendor, CallTracker())
    except (RuntimeUnavailable, GpuCallError) as exc:
        answer["problem"] = str(exc)
        return answer
    try:
        ordinal = runtime_ordinals(runtime, runtime.device_count()).get(device.pci_bus_id)
        if ordinal is None:
            answer["problem"] = f"the {runtime.name} runtime does not see {device.pci_bus_id}"
            return answer
        runtime.use(ordinal)
        free_now, total = runtime.memory_info()
        fit = footprint(total, request["memory_fraction"], request.get("free_before_bytes"), free_now)
        tests, sizes = sized_tests(tuple(request["tests"]), fit.budget_bytes)
        answer["footprint"] = {"limit_bytes": fit.limit_bytes, "context_bytes": fit.context_bytes,
                               "measured": fit.measured, "budget_bytes": fit.budget_bytes}
        answer["tests"] = list(tests)
        if not tests:
            answer["problem"] = (f"no test fits: the context takes {fit.context_bytes / 2**20:.0f} MiB of the "
                                 f"screen's {fit.limit_bytes / 2**20:.0f} MiB bound")
            return answer
        options = ActiveOptions.for_level(
            2, request["stress_seconds"], tests=tests, deadline_seconds=request["deadline_seconds"],
            progress=sys.stderr, stress_launch_ms=LAUNCH_MS, memtest_fraction=0.98, grace_seconds=5.0,
            runtime_factory=lambda vendor, tracker: runtime, **sizes)
        results = run_active(NodeSnapshot(hostname=request.get("hostname"), devices=[device]), options, control)
        answer["results"] = to_dict(results)
    except (RuntimeUnavailable, GpuCallError, ValueError) as exc:
        answer["problem"] = str(exc)
    finally:
        try:
            runtime.close()  # run_active closed it already; a second close releases nothing twice
        except Exception:  # noqa: BLE001 - the process exits next: the driver frees what is left
            pass
    return answer


def _write(path: Path, answer: dict) -> None:
    text = json.dumps(answer)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _die_with_parent(parent: Optional[int]) -> None:
    """If `gpudiag screen` dies (killed by systemd, say), the kernel kills this worker too: a screen never outlives
    the process that would have stopped it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own cleanup still kills it
        pass
    if parent is not None and os.getppid() != parent:  # the parent was gone before prctl took effect
        os._exit(3)


def run(argv: Optional[list[str]] = None) -> None:
    code = main(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: the GPU is already given back, and nothing may hang the exit


if __name__ == "__main__":
    run()
