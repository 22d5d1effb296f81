"""The host around the GPUs: kernel, driver modules, IOMMU, NUMA (sysfs/procfs under `root`) and CPU, memory and
processes (psutil).

`root` redirects only the file reads. psutil always describes the live machine it runs on (it reads the real
/proc), so with `--root DIR` the CPU, memory, load and boot-time figures, and the process descriptions, are those
of the machine running gpudiag, not of the tree under DIR.

Probes return `(value, errors)`: the errors are `ProbeError`s for files that exist but could not be read and for
psutil calls that failed; a missing file is simply None. Nothing here raises.
"""

from __future__ import annotations

import re
import shlex
import socket
import time
from pathlib import Path
from typing import Callable, Optional, TypeVar

import psutil

from gpudiag.model import ErrorKind, GpuProcess, HostInfo, ProbeError
from gpudiag.model.vocabulary import MODULES_OF_INTEREST
from gpudiag.probe.files import FileReader
from gpudiag.probe.pci import probe_pci_gpus  # noqa: F401 - the collector reaches both host probes here

T = TypeVar("T")

# Kernel modules whose presence and version matter to a GPU node. amdkfd is not listed: it has been built into
# amdgpu since Linux 4.20, so its absence says nothing.
IOMMU_CMDLINE_KEYS = ("intel_iommu", "amd_iommu", "iommu")

# /proc/driver/nvidia/version, first line (docs/vendor-api.md §1):
#   NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024
#   NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@…)  …
_NVIDIA_PROC_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def probe_host(root: Path = Path("/")) -> tuple[HostInfo, list[ProbeError]]:
    reader = FileReader(root)
    cmdline = reader.line(reader.path("proc/cmdline"))
    host = HostInfo(
        hostname=reader.line(reader.path("proc/sys/kernel/hostname")),
        kernel_release=reader.line(reader.path("proc/sys/kernel/osrelease")),
        kernel_cmdline=cmdline,
        os_name=_os_name(reader),
        modules_loaded=_modules(reader),
        nvidia_proc_version=_nvidia_proc_version(reader),
        iommu_enabled=_iommu_enabled(reader),
        iommu_cmdline=iommu_cmdline(cmdline or ""),
        numa_nodes=_numa_nodes(reader),
        boot_id=_boot_id(reader),
    )
    if host.hostname is None and Path(root) == Path("/"):
        host.hostname = socket.gethostname()
    _psutil_figures(host, reader.errors)
    return host, reader.errors


def iommu_cmdline(cmdline: str) -> dict[str, str]:
    """`"… intel_iommu=on iommu=pt"` → `{"intel_iommu": "on", "iommu": "pt"}`; the last occurrence wins, as the
    kernel applies each in turn."""
    found = {}
    for token in cmdline.split():
        key, _, value = token.partition("=")
        if key in IOMMU_CMDLINE_KEYS:
            found[key] = value
    return found


def _os_name(reader: FileReader) -> Optional[str]:
    text = reader.text(reader.path("etc/os-release"))
    for line in (text or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PRETTY_NAME":
            try:
                words = shlex.split(value)  # os-release values are shell-quoted
            except ValueError:
                words = [value.strip("\"'")]
            return " ".join(words) or None
    return None


def _modules(reader: FileReader) -> dict[str, Optional[str]]:
    """Modules of interest → version (sys/module/<m>/version, absent for in-tree builds). A module missing from
    /proc/modules but present under /sys/module is built into the kernel, which counts as loaded."""
    listed = {line.split(" ", 1)[0] for line in (reader.text(reader.path("proc/modules")) or "").splitlines()}
    loaded = {}
    for name in MODULES_OF_INTEREST:
        module_dir = reader.path(f"sys/module/{name}")
        if name in listed or module_dir.is_dir():
            loaded[name] = reader.line(module_dir / "version")
    return loaded


def read_boot_id(root: Path = Path("/")) -> Optional[str]:
    """This boot's ID under `root` (None where the kernel does not say or under a tree without one)."""
    return _boot_id(FileReader(root))


def _boot_id(reader: FileReader) -> Optional[str]:
    """/proc/sys/kernel/random/boot_id (a UUID the kernel draws at boot), as journald writes it: 32 hex digits."""
    text = (reader.line(reader.path("proc/sys/kernel/random/boot_id")) or "").replace("-", "").lower()
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


def _nvidia_proc_version(reader: FileReader) -> Optional[str]:
    match = _NVIDIA_PROC_VERSION.search(reader.text(reader.path("proc/driver/nvidia/version")) or "")
    return match.group(1) if match else None


def _iommu_enabled(reader: FileReader) -> Optional[bool]:
    """An IOMMU registers itself under /sys/class/iommu (dmar0, ivhd0, smmu3.0x…). Without sysfs at all there is
    nothing to say (None); a sysfs without that class means none is active (a kernel built without IOMMU support
    has no such directory)."""
    entries = reader.entries(reader.path("sys/class/iommu"))
    if entries is None:
        return False if reader.path("sys/class").is_dir() else None
    return bool(entries)


def _numa_nodes(reader: FileReader) -> Optional[int]:
    entries = reader.entries(reader.path("sys/devices/system/node"))
    if entries is None:
        return None
    return sum(1 for name in entries if re.fullmatch(r"node\d+", name))


def _psutil_call(errors: list[ProbeError], name: str, call: Callable[[], T]) -> Optional[T]:
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - psutil raises OSError, AccessDenied, RuntimeError…: all become data
        kind = ErrorKind.NO_PERMISSION if isinstance(exc, (PermissionError, psutil.AccessDenied)) else ErrorKind.ERROR
        errors.append(ProbeError(source=f"psutil.{name}", kind=kind, message=f"{type(exc).__name__}: {exc}"))
        return None


def _psutil_figures(host: HostInfo, errors: list[ProbeError]) -> None:
    host.cpu_count = _psutil_call(errors, "cpu_count", psutil.cpu_count)
    load = _psutil_call(errors, "getloadavg", psutil.getloadavg)
    host.load_average = list(load) if load is not None else None
    memory = _psutil_call(errors, "virtual_memory", psutil.virtual_memory)
    if memory is not None:
        host.memory_total_bytes = memory.total
        host.memory_available_bytes = memory.available
    host.boot_time = _psutil_call(errors, "boot_time", psutil.boot_time)


# ---------------------------------------------------------------------------------------------------------------
# CPU utilisation over the collection window


def _busy_and_total(times) -> tuple[float, float]:
    """psutil's own accounting (psutil/__init__.py, _cpu_busy_time): guest time is already inside user/nice on
    Linux, so it is taken out of the total; idle and iowait are not busy."""
    total = sum(times)
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    return total - times.idle - getattr(times, "iowait", 0.0), total


def _percent(before, after) -> Optional[float]:
    busy_before, total_before = _busy_and_total(before)
    busy_after, total_after = _busy_and_total(after)
    elapsed = total_after - total_before
    if elapsed <= 0:
        return None  # not a single clock tick passed: no measurement, not 0 %
    return round(min(100.0, max(0.0, (busy_after - busy_before) / elapsed * 100.0)), 1)


class CpuSampler:
    """CPU utilisation over the collector's own run: `start()` when collection begins, `finish()` when it ends.
    Two reads of the kernel's CPU time counters, no sleeping (unlike `psutil.cpu_percent(interval=…)`).

    `finish()` returns `(host_percent, per_cpu_percents)`; either is None when it could not be measured (no
    `start()`, a window shorter than one clock tick, CPUs hot-plugged in between, psutil failing)."""

    def __init__(self) -> None:
        self._before = None

    def start(self) -> None:
        self._before = self._read()

    def finish(self) -> tuple[Optional[float], Optional[list[float]]]:
        after = self._read()
        if self._before is None or after is None:
            return None, None
        (host_before, cpus_before), (host_after, cpus_after) = self._before, after
        host = _percent(host_before, host_after)
        per_cpu: Optional[list] = None
        if len(cpus_before) == len(cpus_after):
            per_cpu = [_percent(b, a) for b, a in zip(cpus_before, cpus_after)]
            if any(p is None for p in per_cpu):
                per_cpu = None
        return host, per_cpu

    @staticmethod
    def _read():
        try:
            return psutil.cpu_times(), psutil.cpu_times(percpu=True)
        except Exception:  # noqa: BLE001 - a failed sample is "not measured", reported as None
            return None


# ---------------------------------------------------------------------------------------------------------------
# Processes on the GPUs


def describe_processes(processes: list[GpuProcess]) -> None:
    """Fill `name`, `user` and `cpu_percent` of each GPU process from psutil, in place.

    A PID that is not visible here (it exited, or lives in another PID namespace: NVML reports host PIDs, which a
    container cannot see) keeps None. Each attribute is read on its own, so an AccessDenied on one (hidepid=2,
    another user's process) keeps the others. `cpu_percent` is the average over the process's lifetime, as `ps`
    shows it — a point-in-time figure would need a second sample and a sleep.
    """
    for gpu_process in processes:
        try:
            process = psutil.Process(gpu_process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            continue
        with process.oneshot():
            gpu_process.name = _attribute(process.name)
            gpu_process.user = _attribute(process.username)
            gpu_process.cpu_percent = _attribute(lambda: _lifetime_cpu_percent(process))


def _attribute(read: Callable[[], T]) -> Optional[T]:
    try:
        return read()
    except (psutil.Error, OSError):  # NoSuchProcess, ZombieProcess (exited meanwhile), AccessDenied
        return None


def _lifetime_cpu_percent(process: psutil.Process) -> Optional[float]:
    times = process.cpu_times()
    alive = time.time() - process.create_time()
    if alive <= 0:
        return None
    return round((times.user + times.system) / alive * 100.0, 1)
