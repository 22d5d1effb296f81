"""Shared by the screening tests (docs/screening.md): GPUs whose process lists are live across processes, as the
driver's are, and the fake screen worker's configuration.

The fake worker (tests/support/screen_worker.py) runs in a process of its own over the fake runtimes, as the real worker
runs over libcuda / libamdhip64. While its context exists it shows in its GPU's process list, as a real one does:
- NVIDIA: it writes a file `<registry>/<bus id>/<pid>` holding the bytes it has on the GPU, and the fake NVML's
  process list of that GPU (LiveProcesses) reads the directory; a process that is gone (or a zombie) is not
  listed, as the driver frees what a dead process held;
- AMD: it makes KFD's /sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id> under the test's root, as amdkfd does.
A test's "job" is a process ID added to the list the same way.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Iterator, Optional

from tests.support.paths import REPO
WORKER = [sys.executable, "-m", "tests.support.screen_worker"]
CONFIG_ENV = "GPUDIAG_TEST_SCREEN"


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped (whose GPU memory the driver has freed already)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


# A PID above the kernel's largest (pid_max is at most 2^22): the PID a process of another PID namespace is listed
# under, as the driver lists a containerised gpudiag's worker to gpudiag itself.
FOREIGN_PID_BASE = 2**22 + 1


def _entry(pid: int, alias: Optional[int]) -> str:
    return str(pid) if alias is None else f"{alias}@{pid}"


def register(registry: Path, bus_id: str, pid: int, used_bytes: int, alias: Optional[int] = None) -> None:
    """List process `pid` on the GPU (under `alias`, a PID of another namespace, if given) while it lives."""
    directory = registry / bus_id
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{pid}.tmp"
    tmp.write_text(str(used_bytes))
    os.replace(tmp, directory / _entry(pid, alias))


def unregister(registry: Path, bus_id: str, pid: int, alias: Optional[int] = None) -> None:
    try:
        (registry / bus_id / _entry(pid, alias)).unlink()
    except FileNotFoundError:
        pass


class LiveProcesses:
    """A FakeGpu's compute_processes that reads the registry: [(pid, used bytes)] of the live registered processes.
    Read once per len() (pynvml asks for the count, then fills an array of it)."""

    def __init__(self, registry: Path, bus_id: str):
        self.directory = registry / bus_id
        self._seen: list[tuple[int, Optional[int]]] = []

    def _read(self) -> list[tuple[int, Optional[int]]]:
        found = []
        try:
            names = os.listdir(self.directory)
        except OSError:
            return found
        for name in names:
            listed, _, real = name.partition("@")
            if not listed.isdigit() or not alive(int(real or listed)):
                continue
            try:
                found.append((int(listed), int((self.directory / name).read_text() or 0)))
            except (OSError, ValueError):
                continue
        return sorted(found)

    def __len__(self) -> int:
        self._seen = self._read()
        return len(self._seen)

    def __iter__(self) -> Iterator[tuple[int, Optional[int]]]:
        return iter(self._seen)

    def __bool__(self) -> bool:
        return len(self) > 0


def kfd_tree(root: Path, gpus: dict[str, int]) -> None:
    """KFD's topology for `gpus` (bus ID -> gpu_id) under `root`, in the format amdkfd writes (a CPU node 0 with
    gpu_id 0, then one node per GPU; properties as `name value` lines: libhsakmt's topology.c reads them so)."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    (nodes / "0").mkdir(parents=True, exist_ok=True)
    (nodes / "0" / "gpu_id").write_text("0\n")
    (nodes / "0" / "properties").write_text("cpu_cores_count 64\nsimd_count 0\nlocation_id 0\ndomain 0\n")
    for number, (bus_id, gpu_id) in enumerate(sorted(gpus.items()), 1):
        domain, bus, rest = bus_id.split(":")
        device, function = rest.split(".")
        location = int(bus, 16) << 8 | int(device, 16) << 3 | int(function)
        node = nodes / str(number)
        node.mkdir(parents=True, exist_ok=True)
        (node / "gpu_id").write_text(f"{gpu_id}\n")
        (node / "properties").write_text(f"cpu_cores_count 0\nsimd_count 1216\nlocation_id {location}\n"
                                          f"domain {int(domain, 16)}\ngfx_target_version 90402\n")
    (root / "sys/class/kfd/kfd/proc").mkdir(parents=True, exist_ok=True)


def kfd_open(root: Path, pid: int, gpu_id: int, vram_bytes: int) -> None:
    directory = root / "sys/class/kfd/kfd/proc" / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pasid").write_text("32769\n")
    (directory / f"vram_{gpu_id}").write_text(f"{vram_bytes}\n")


def kfd_close(root: Path, pid: int) -> None:
    directory = root / "sys/class/kfd/kfd/proc" / str(pid)
    for child in directory.glob("*"):
        child.unlink()
    if directory.exists():
        directory.rmdir()


def worker_env(config: dict) -> dict:
    """The environment `gpudiag screen`'s workers inherit in a test: the fake worker's configuration."""
    return {**os.environ, CONFIG_ENV: json.dumps(config), "PYTHONPATH": str(REPO)}
