"""workload.*: what runs on the GPUs: who is on each GPU, GPUs starved by their host CPUs, memory held by nobody."""

from __future__ import annotations

import math

from gpudiag.checks.common import (
    Check,
    device_check,
    for_each_device,
    not_available,
    passed,
    reset_command,
    skipped,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.expect import GIB, Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, Status, Vendor

PROCESSES = "workload.processes"
CPU_STARVED = "workload.cpu_starved"
LEAKED_MEMORY = "workload.leaked_memory"

_PROCESS_TOPICS = ("process", "compute")
_USAGE_TOPICS = ("utilization", "usage", "busy", "activity", "metrics")
_MEMORY_TOPICS = ("memory", "vram")


def _process_list(device: DeviceSnapshot) -> list[dict]:
    return [{"pid": p.pid, "name": p.name, "user": p.user, "kind": p.kind, "used_memory_bytes": p.used_memory_bytes}
            for p in device.processes or []]


def _processes(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    if device.processes is None:
        return not_available(PROCESSES, device, "process list", _PROCESS_TOPICS)
    names = ", ".join(f"{p.name or '?'}[{p.pid}]" + (f" ({p.user})" if p.user else "") for p in device.processes)
    count = len(device.processes)
    message = f"{device.label}: {count} process(es): {names}" if count else f"{device.label}: no process"
    return passed(PROCESSES, device, message, observed=_process_list(device))


def _local_cpus(device: DeviceSnapshot, snapshot: NodeSnapshot) -> list[int]:
    return device.cpu_affinity or []


def _cpu_starved(device: DeviceSnapshot, snapshot: NodeSnapshot, expect: Expectations) -> CheckResult:
    util = device.utilization.gpu_percent
    if util is None:
        return not_available(CPU_STARVED, device, "GPU utilisation", _USAGE_TOPICS)
    if util >= expect.gpu_idle_percent:
        return passed(CPU_STARVED, device, f"{device.label} is busy ({util}%)", observed={"gpu_percent": util})
    if device.processes == []:
        return passed(CPU_STARVED, device, f"{device.label} is idle with no process on it",
                      observed={"gpu_percent": util})
    per_cpu = snapshot.host.per_cpu_percent
    if not per_cpu:
        return skipped(CPU_STARVED, device, "host per-CPU load was not collected")
    local = [c for c in _local_cpus(device, snapshot) if c < len(per_cpu)]
    scope = "its local CPUs" if local else "the host's CPUs (GPU locality unknown)"
    loads = [per_cpu[c] for c in local] if local else per_cpu
    load = math.fsum(loads) / len(loads)  # statistics.fmean's formula, without importing statistics for every check
    observed = {"gpu_percent": util, "local_cpus": local or None, "local_cpu_percent": round(load, 1),
                "processes": _process_list(device)}
    expected = f"GPU >= {expect.gpu_idle_percent}% busy, or {scope} below {expect.host_cpu_busy_percent:g}%"
    if load < expect.host_cpu_busy_percent:
        return passed(CPU_STARVED, device, f"{device.label} is near idle ({util}%) and {scope} are not saturated "
                                           f"({load:.0f}%)", observed=observed, expected=expected)
    node = device.numa_node
    pin = f"numactl --cpunodebind={node} --membind={node}" if node is not None else "numactl/taskset"
    return warned(CPU_STARVED, device, f"{device.label} is near idle ({util}%) while {scope} are {load:.0f}% busy: "
                                       f"the job is starved by CPU-side work",
                  observed=observed, expected=expected,
                  remediation=("The input pipeline cannot feed the GPU. Find what holds the CPUs (`top -H`, "
                               "`pidstat -t 5`); give the data loader more workers or move decoding/augmentation to "
                               "the GPU (e.g. DALI); use pinned memory and prefetching; pin the job to the GPU's local "
                               f"CPUs ({pin}); move unrelated CPU-heavy processes off this socket."))


def cpu_starved(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_device(snapshot, CPU_STARVED, lambda d: _cpu_starved(d, snapshot, expect), partitions=True)


def _leaked_memory(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    if device.memory.used_bytes is None:
        return not_available(LEAKED_MEMORY, device, "GPU memory usage", _MEMORY_TOPICS)
    if device.processes is None:
        return not_available(LEAKED_MEMORY, device, "process list", _PROCESS_TOPICS)
    # used_bytes leaves out what the driver reserves where the library reports that apart (NVML v2 memory info);
    # elsewhere it includes it, and the threshold sits above what a driver reserves.
    held = device.memory.used_bytes
    observed = {"used_bytes": held, "reserved_bytes": device.memory.reserved_bytes,
                "processes": len(device.processes)}
    expected = f"<= {expect.leaked_memory_warn_bytes} bytes in use with no process"
    if device.processes or held <= expect.leaked_memory_warn_bytes:
        return passed(LEAKED_MEMORY, device, f"{device.label}: {held / GIB:.1f} GiB in use by "
                                             f"{len(device.processes)} process(es)",
                      observed=observed, expected=expected)
    if device.vendor == Vendor.NVIDIA:
        find = "`nvidia-smi --query-compute-apps=pid,used_memory --format=csv` and `fuser -v /dev/nvidia*`"
    else:
        find = "`amd-smi process` and `fuser -v /dev/kfd /dev/dri/renderD*`"
    return warned(LEAKED_MEMORY, device, f"{device.label}: {held / GIB:.1f} GiB of GPU memory in use but no process "
                                         f"is listed",
                  observed=observed, expected=expected,
                  remediation=(f"Either a process in another PID namespace (a container) holds it and the library "
                               f"cannot name it, a killed job left a stuck context or a zombie, or memory leaked. Find "
                               f"the holder with {find} (as root, on the host) and stop it. If nothing holds the GPU, "
                               f"reset it (`{reset_command(device)}`) to free the memory."))


CHECKS = (
    device_check(PROCESSES, "who is on each GPU (always passes; lists the processes)", _processes, partitions=True),
    Check(CPU_STARVED, cpu_starved, "a near-idle GPU whose local host CPUs are saturated (input pipeline starved)"),
    device_check(LEAKED_MEMORY, "GPU memory held with no process on the GPU", _leaked_memory, partitions=True),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "workload.processes": {},  # informational: always passes
    "workload.cpu_starved": {W: ("watch", "GPUDIAG-WORKLOAD-CPU-STARVED")},
    "workload.leaked_memory": {W: ("watch", "GPUDIAG-WORKLOAD-LEAKED-MEMORY")},
}
_REFERENCE = {
    "workload.processes": (
        "the processes on each GPU (library) with their user and CPU use (/proc)",
        "Nothing: it lists who is on the GPU."),
    "workload.cpu_starved": (
        "GPU utilisation and the busy share of the host CPUs local to it",
        "The input pipeline cannot keep the GPU busy: look at data loading, CPU pinning and the job's NUMA binding."),
    "workload.leaked_memory": (
        "GPU memory in use against the processes on the GPU",
        "Memory held with no process: a zombie or a container outside this PID namespace; find it or reset the GPU."),
}
_SETTINGS = {
    "workload.cpu_starved": ("gpu_idle_percent", "host_cpu_busy_percent"),
    "workload.leaked_memory": ("leaked_memory_warn_bytes",),
}
FAMILY = Family(
    "workload", order=110, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
