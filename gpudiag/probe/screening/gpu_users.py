"""Who uses a GPU right now, read fast and often: the process lists a screen watches every 100 ms to give the GPU back
when a job opens it (gpudiag/active/screen/supervisor.py, docs/screening.md "How it yields").

- NVIDIA: NVML's compute, graphics and MPS-client process lists of each GPU (nvmlDeviceGet{Compute,Graphics,
  MPSCompute}RunningProcesses, docs/vendor-api.md), with each process's GPU memory where the driver reports it.
  A process is listed from the moment its CUDA context exists on the GPU (about the job's first CUDA call) until
  the context is destroyed, which frees its memory.
- AMD: KFD's per-process directories, /sys/class/kfd/kfd/proc/<pid>/, which hold a `vram_<gpu_id>` file for each GPU
  the process has opened (amdkfd's kfd_process.c, kfd_procfs_add_sysfs_files: "proc/<pid>/vram_<gpuid>"; the file
  holds the bytes of VRAM the process has on that GPU). A KFD gpu_id is mapped to its PCI function through the
  topology nodes: nodes/<n>/gpu_id, and `domain` and `location_id` (bus << 8 | devfn) in nodes/<n>/properties, the
  lines libhsakmt reads (ROCR-Runtime libhsakmt/src/topology.c, topology_sysfs_get_node_props). A ROCm process
  opens every GPU it can see, so a job confined to one GPU by ROCR_VISIBLE_DEVICES shows on that one only, while
  one that sees all GPUs shows on all of them: the screen then yields on every GPU, which errs the safe way.

Also the processes a screen started (its worker and the worker's children): those are the screen's own, never a job.
"""

from __future__ import annotations

import os
from dataclasses import field
from pathlib import Path
from typing import Any, Optional, Protocol

from gpudiag.model import ProbeError, normalize_pci_bus_id
from gpudiag.model.records import dataclass
from gpudiag.probe.deadline import CallTracker

KFD = Path("sys/class/kfd/kfd")
_MAX_SYSFS_BYTES = 4096


@dataclass
class GpuUse:
    """One GPU's users at one moment. `pids` None: the list could not be read (a job could not be seen)."""
    pids: Optional[list[int]] = None
    memory_bytes: dict[int, int] = field(default_factory=dict)  # per process, where the driver says
    error: Optional[str] = None


class UsageReader(Protocol):
    def read(self) -> dict[str, GpuUse]: ...  # normalised PCI bus ID -> its users now
    def close(self) -> None: ...


class NvmlUsage:
    """NVML opened once for the whole screen; each read asks every watched GPU for its three process lists."""

    def __init__(self, bus_ids: list[str]):
        import pynvml

        from gpudiag.probe.nvml.call import NvmlCall

        self._nvml = pynvml
        self._errors: list[ProbeError] = []
        self._call = NvmlCall(pynvml, CallTracker(), self._errors)
        pynvml.nvmlInit()
        self._handles: dict[str, Any] = {}
        wanted = set(bus_ids)
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus_id = normalize_pci_bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            if bus_id in wanted:
                self._handles[bus_id] = handle

    def read(self) -> dict[str, GpuUse]:
        found = {}
        for bus_id, handle in self._handles.items():
            found[bus_id] = self._read_one(handle)
        return found

    def _read_one(self, handle: Any) -> GpuUse:
        from gpudiag.probe.base import DeviceLost

        use = GpuUse(pids=[])
        del self._errors[:]
        for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                         "nvmlDeviceGetMPSComputeRunningProcesses"):
            try:  # None: not supported (the MPS list on old drivers), or failed (then recorded in _errors)
                processes = self._call(function, handle)
            except DeviceLost as lost:
                return GpuUse(error=str(lost))
            for process in processes or []:
                pid = int(process.pid)
                if pid not in use.pids:
                    use.pids.append(pid)
                used = getattr(process, "usedGpuMemory", None)
                if isinstance(used, int):
                    use.memory_bytes[pid] = max(used, use.memory_bytes.get(pid, 0))
        if self._errors:  # a list that failed (not merely unsupported): what it would have shown is unknown
            use.pids, use.error = None, "; ".join(e.message for e in self._errors)
        return use

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


class KfdUsage:
    """KFD's process directories, read through sysfs (under `root`, a test seam)."""

    def __init__(self, bus_ids: list[str], root: Path = Path("/")):
        self._root = Path(root) / KFD
        self._wanted = set(bus_ids)
        self._gpu_ids = kfd_gpu_ids(Path(root))  # gpu_id -> bus ID

    def read(self) -> dict[str, GpuUse]:
        found = {bus_id: GpuUse(pids=[]) for bus_id in self._wanted}
        try:
            entries = list(os.scandir(self._root / "proc"))
        except OSError as exc:
            error = f"{self._root / 'proc'}: {exc.strerror or exc}"
            return {bus_id: GpuUse(error=error) for bus_id in self._wanted}
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                names = os.listdir(entry.path)
            except OSError:
                continue  # the process ended between the two reads
            for name in names:
                if not name.startswith("vram_"):
                    continue
                bus_id = self._gpu_ids.get(name[5:])
                if bus_id not in found:
                    continue
                found[bus_id].pids.append(pid)
                vram = _read_int(Path(entry.path) / name)
                if vram is not None:
                    found[bus_id].memory_bytes[pid] = vram
        return found

    def close(self) -> None:
        pass


def kfd_gpu_ids(root: Path) -> dict[str, str]:
    """KFD gpu_id (as text) -> the normalised PCI bus ID of that GPU, from the topology nodes."""
    nodes = Path(root) / KFD / "topology" / "nodes"
    found = {}
    try:
        entries = sorted(os.listdir(nodes))
    except OSError:
        return found
    for name in entries:
        gpu_id = _read_text(nodes / name / "gpu_id")
        if not gpu_id or gpu_id == "0":  # CPU nodes have gpu_id 0
            continue
        properties = _properties(_read_text(nodes / name / "properties") or "")
        location, domain = properties.get("location_id"), properties.get("domain", 0)
        if location is None:
            continue
        found[gpu_id] = f"{domain:04x}:{location >> 8 & 0xff:02x}:{location >> 3 & 0x1f:02x}.{location & 0x7}"
    return found


def open_usage_reader(vendor: str, bus_ids: list[str], root: Path = Path("/")) -> UsageReader:
    """The reader for `vendor`'s GPUs ("nvidia" | "amd"); raises when it cannot be opened (the screen then does not
    start: a GPU whose users cannot be watched is not screened)."""
    return NvmlUsage(bus_ids) if vendor == "nvidia" else KfdUsage(bus_ids, root)


def own_processes(pid: int, root: Path = Path("/")) -> set[int]:
    """`pid` and every process below it (/proc/<pid>/task/<tid>/children, recursively; a process that ended
    meanwhile simply has no children)."""
    found, queue = set(), [pid]
    while queue and len(found) < 4096:
        current = queue.pop()
        if current in found:
            continue
        found.add(current)
        tasks = Path(root) / "proc" / str(current) / "task"
        try:
            threads = os.listdir(tasks)
        except OSError:
            continue
        for tid in threads:
            text = _read_text(tasks / tid / "children") or ""
            queue.extend(int(child) for child in text.split() if child.isdigit())
    return found


def pid_visible(pid: int, root: Path = Path("/")) -> bool:
    """Whether process `pid` exists in this process's PID namespace (/proc/<pid>). The driver lists processes by
    their PID in the host's namespace: from inside a container a listed PID may name no process here at all."""
    return os.path.exists(Path(root) / "proc" / str(pid))


def process_command(pid: int, root: Path = Path("/")) -> Optional[list[str]]:
    """The command line of process `pid` (/proc/<pid>/cmdline), or None when there is no such process."""
    try:
        with open(Path(root) / "proc" / str(pid) / "cmdline", "rb") as handle:
            raw = handle.read(_MAX_SYSFS_BYTES)
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _properties(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if value.strip().isdigit():
            values[name] = int(value.strip())
    return values


def _read_text(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return handle.read(_MAX_SYSFS_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> Optional[int]:
    text = _read_text(path)
    return int(text) if text and text.isdigit() else None
