"""The live machine's CPU count and times, memory, load and boot time, read from /proc as psutil reads them
(psutil/_pslinux.py: cpu_times, per_cpu_times, virtual_memory, boot_time; cpu_count and getloadavg are the os
module's), without importing psutil: its import (with subprocess, locale and its named tuples) was about 20 ms of a
cold `gpudiag check`'s CPU on the dev VM (issue 36, item 9). psutil is still used where it does more than read a file
(the processes on the GPUs, probe/host.py) and for the rare kernel without MemAvailable (its estimate of free memory).

Always the real /proc, never one under --root: like psutil, these describe the machine gpudiag runs on. Each raises
OSError (PermissionError where it is not allowed) or ValueError for a file it cannot read or parse; probe/host.py
turns that into a ProbeError.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

PROC = "/proc"
# /proc/stat's CPU columns (proc(5)), in USER_HZ ticks; a kernel that prints fewer leaves the rest 0.
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


class CpuTimes(NamedTuple):
    """Seconds, as psutil.cpu_times() gives them on Linux."""
    user: float = 0.0
    nice: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0
    guest: float = 0.0
    guest_nice: float = 0.0


def cpu_count() -> Optional[int]:
    """Logical CPUs online (psutil.cpu_count(): sysconf(_SC_NPROCESSORS_ONLN))."""
    return os.sysconf("SC_NPROCESSORS_ONLN")


def load_average() -> list[float]:
    return list(os.getloadavg())


def cpu_times() -> tuple[CpuTimes, list[CpuTimes]]:
    """The whole machine's CPU times and each CPU's, from one read of /proc/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    host, per_cpu = None, []
    with open(f"{PROC}/stat", "rb") as stat:
        for line in stat:
            if not line.startswith(b"cpu"):
                break  # the cpu lines come first
            name, *values = line.split()
            times = CpuTimes(*(float(v) / ticks for v in values[:len(_CPU_FIELDS)]))
            if name == b"cpu":
                host = times
            else:
                per_cpu.append(times)
    if host is None:
        raise ValueError(f"{PROC}/stat has no cpu line")
    return host, per_cpu


def boot_time() -> float:
    """Seconds since the epoch (psutil.boot_time(): /proc/stat's btime)."""
    with open(f"{PROC}/stat", "rb") as stat:
        for line in stat:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise ValueError(f"{PROC}/stat has no btime line")


def memory() -> tuple[int, int]:
    """(total, available) bytes, as psutil.virtual_memory() reports them: MemTotal and MemAvailable (kernel 3.14+),
    available capped at total; psutil's own estimate where MemAvailable is missing or 0 (psutil issue 1915)."""
    fields = {}
    with open(f"{PROC}/meminfo", "rb") as meminfo:
        for line in meminfo:
            name, _, rest = line.partition(b":")
            if name in (b"MemTotal", b"MemAvailable"):
                fields[name] = int(rest.split()[0]) * 1024
    total, available = fields[b"MemTotal"], fields.get(b"MemAvailable")
    if not available:
        import psutil  # its estimate from the other fields (procps' "free")

        return total, psutil.virtual_memory().available
    return total, min(available, total)
