"""What bench/screen_yield.py drives on the machine: gpudiag as a command, the job (a torch BF16 matmul, the real
one; or a stand-in over the tests' fakes with --fake), and the GPU's process list as NVML shows it.

The job waits, torch imported, for a line on its stdin, then prints a time.time() stamp (`t0`) right before its first
CUDA call (torch.cuda.init), makes its context, allocates a share of the GPU's memory (torch.empty: 90 %), and runs
8192² BF16 matmuls until t0 + SECONDS, printing the FLOP it completed (synchronised) four times a second: its
throughput over its first 30 s is what it completed by t0 + 30, whatever started on the GPU meanwhile.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent

# Both jobs: their arguments, their JSON lines, and the wait for the go (imports done, nothing on the GPU yet).
PRELUDE = r"""
import json, os, sys, time
fraction, seconds, hold = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "hold"

def say(**fields):
    print(json.dumps(fields), flush=True)
"""
GO = r"""
say(ready=time.time(), pid=os.getpid())
sys.stdin.readline()
t0 = time.time()
say(t0=t0)
"""

TORCH_JOB = PRELUDE + "import torch\n" + GO + r"""
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
say(context=time.time(), free=free, total=total)
try:
    big = torch.empty(int(fraction * total), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    say(alloc_ok=True, alloc_at=time.time(), alloc_bytes=int(fraction * total))
except RuntimeError as exc:
    say(alloc_ok=False, alloc_at=time.time(), error=str(exc)[:300])
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
torch.cuda.synchronize()
done, next_say = 0, 0.0
while time.time() < t0 + seconds:
    for _ in range(8):
        c = a @ b
    torch.cuda.synchronize()
    done += 8
    now = time.time()
    if now >= next_say:
        say(t=now, flop=done * 2 * n**3)
        next_say = now + 0.25
say(t=time.time(), flop=done * 2 * n**3)
if hold:
    sys.stdin.readline()
say(end=time.time())
"""

# The stand-in job over the tests' fakes (--fake): it lists itself on the GPU (tests/support/screen.py) 0.3 s
# after t0 as a context would appear, "allocates" if what the others hold leaves room, and "computes" at half speed
# while another process shares the GPU: the bench's arithmetic, not a GPU's.
FAKE_JOB = PRELUDE + r"""
sys.path.insert(0, os.environ["GPUDIAG_BENCH_REPO"])
from pathlib import Path
from tests.support.screen import LiveProcesses, register, unregister
registry, bus = os.environ["GPUDIAG_BENCH_REGISTRY"], os.environ["GPUDIAG_BENCH_BUS"]
total = int(os.environ["GPUDIAG_BENCH_TOTAL"])
listed = LiveProcesses(Path(registry), bus)
""" + GO + r"""
time.sleep(0.3)
register(Path(registry), bus, os.getpid(), 600 * 2**20)
say(context=time.time(), free=total, total=total)
len(listed)
others = sum(used or 0 for pid, used in listed if pid != os.getpid())
ok = others + 600 * 2**20 + fraction * total <= total
register(Path(registry), bus, os.getpid(), int(600 * 2**20 + fraction * total))
say(alloc_ok=ok, alloc_at=time.time(), alloc_bytes=int(fraction * total))
rate, flop, last = 500e12, 0.0, time.time()
while time.time() < t0 + seconds:
    time.sleep(0.05)
    now = time.time()
    len(listed)
    shared = any(pid != os.getpid() for pid, _ in listed)
    flop += rate * (0.5 if shared else 1.0) * (now - last)
    last = now
    say(t=now, flop=flop)
if hold:
    sys.stdin.readline()
unregister(Path(registry), bus, os.getpid())
say(end=time.time())
"""


class Job:
    """A job process and the JSON lines it printed (read by a thread as they come)."""

    def __init__(self, command: list[str], env: dict):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, cwd=REPO)
        self.lines: "queue.Queue[dict]" = queue.Queue()
        self.seen: list[dict] = []
        self.err: list[str] = []
        self.started = False  # given its go: any line on its stdin starts it, so one never started is killed
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                continue

    def wait_for(self, key: str, timeout: float) -> Optional[dict]:
        deadline = time.monotonic() + timeout
        for line in self.seen:
            if key in line:
                return line
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.05)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    return None
                continue
            self.seen.append(line)
            if key in line:
                return line
        return None

    def drain(self) -> None:
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                return

    def go(self) -> None:
        self.started = True
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            if self.proc.poll() is None and self.started:
                self.proc.stdin.write("end\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.drain()

    def value(self, key: str) -> Optional[object]:
        self.drain()
        return next((line[key] for line in self.seen if key in line), None)

    def throughput(self, window: float) -> Optional[float]:
        """FLOP/s over [t0, t0 + window]: what the job had completed by then, over the window."""
        self.drain()
        t0 = self.value("t0")
        samples = [(line["t"], line["flop"]) for line in self.seen if "t" in line and "flop" in line]
        if t0 is None or not samples or samples[-1][0] < t0 + window - 1.0:
            return None
        done = max((flop for t, flop in samples if t <= t0 + window), default=0.0)
        return done / window


class Machine:
    """The lab machine: gpudiag, torch and NVML for real."""

    fake = False

    def __init__(self, out: Path, gpu: int = 0):
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        bus = pynvml.nvmlDeviceGetPciInfo(self.handle).busId
        self.bus = (bus.decode() if isinstance(bus, bytes) else bus)[-12:].lower()
        self.total = pynvml.nvmlDeviceGetMemoryInfo(self.handle).total
        # gpudiag from this checkout, whatever the directory its processes start in
        path = os.environ.get("PYTHONPATH")
        self.env = {**os.environ, "GPUDIAG_BENCH_REPO": str(REPO),
                    "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}
        self.out = out

    def gpudiag(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "gpudiag", *args]

    def root_args(self) -> list[str]:
        return []

    def job(self, fraction: float, seconds: float, hold: bool = False) -> Job:
        return Job([sys.executable, "-c", TORCH_JOB, str(fraction), str(seconds), "hold" if hold else "go"], self.env)

    def listed(self) -> Optional[dict[int, int]]:
        """PID -> GPU memory of every process NVML lists on the GPU; None when the list cannot be read."""
        found: dict[int, int] = {}
        try:
            for function in (self.nvml.nvmlDeviceGetComputeRunningProcesses,
                             self.nvml.nvmlDeviceGetGraphicsRunningProcesses):
                for process in function(self.handle):
                    found[int(process.pid)] = int(process.usedGpuMemory or 0)
        except self.nvml.NVMLError:
            return None
        return found

    def utilization(self) -> Optional[int]:
        try:
            return int(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        except self.nvml.NVMLError:
            return None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - the bench is ending
            pass


class FakeMachine(Machine):
    """--fake: the tests' fake H200 node (tests/support/screen_node.py): gpudiag over the fake NVML, fake workers over
    the fake CUDA runtime, and the stand-in job. The bench's logic, not a GPU's figures."""

    fake = True

    def __init__(self, out: Path, gpu: int = 0):
        sys.path.insert(0, str(REPO))
        from tests.support.screen_node import fake_config
        from tests.support.screen import worker_env

        self.out = out
        self.work = out / "fake-node"
        self.root, self.registry = self.work / "root", self.work / "registry"
        config = fake_config(self.registry, 1)
        self.bus = config["devices"][0]["pci_bus_id"].lower()
        self.total = config["devices"][0]["total_bytes"]
        self.env = {**worker_env(config), "GPUDIAG_BENCH_REPO": str(REPO), "GPUDIAG_BENCH_REGISTRY": str(self.registry),
                    "GPUDIAG_BENCH_BUS": self.bus, "GPUDIAG_BENCH_TOTAL": str(self.total)}

    def gpudiag(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tests.support.screen_node", str(self.root), str(self.registry), "1", "--", *args]

    def root_args(self) -> list[str]:
        return ["--root", str(self.root)]

    def job(self, fraction: float, seconds: float, hold: bool = False) -> Job:
        return Job([sys.executable, "-c", FAKE_JOB, str(fraction), str(seconds), "hold" if hold else "go"], self.env)

    def listed(self) -> Optional[dict[int, int]]:
        from tests.support.screen import LiveProcesses

        processes = LiveProcesses(self.registry, self.bus)
        len(processes)
        return {pid: used or 0 for pid, used in processes}

    def utilization(self) -> Optional[int]:
        return 0

    def close(self) -> None:
        pass
