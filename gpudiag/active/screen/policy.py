"""Which GPUs to screen now: a pure function of the time, the state of every GPU's screens, and what each GPU shows
(its processes, utilisation and memory), so that a week of policy runs in a test in a second with a clock the test
holds.

A GPU is screened when all of these hold:
- it is due: never verified, or 3/4 of `every` has passed since its last verified screen (a screen is attempted well
  before the period ends, so that a busy week still leaves idle windows to find; the GPU is *overdue* past `every`);
- it is idle now: no process on it, utilisation 0, no memory held by a process the library does not list, and all of
  these could be read (a GPU that cannot be seen is not idle: fail closed);
- no job has held it for `idle_after`: the last time one was seen (or a scheduler said one was coming, `gpudiag
  screen --stop`) is that long ago, and screening has watched it at least that long;
- its last completed screen did not fail: wrong results stay on record until someone tests it on purpose
  (`gpudiag screen --now`), so that a GPU that computed wrong is drained, not screened back into service;
- its last screen did not end in an error within ERROR_RETRY_SECONDS (a GPU the runtime refuses is not hammered).
The most overdue GPUs go first (never verified before all), at most `max_gpus` of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gpudiag.model import DeviceSnapshot
from gpudiag.model.screen import ERROR, FAILED, ScreenGpu, ScreenState

START_FRACTION = 0.75
ERROR_RETRY_SECONDS = 3600.0
# Memory held on a GPU with no process listed, above which someone is using it (a job in another container, whose
# processes the driver does not show here): as the workload family's leaked-memory threshold, 1 GiB.
HELD_MEMORY_BYTES = 1024**3


@dataclass(frozen=True)
class ScreenPolicy:
    """How often each GPU is screened, after how long idle, and how many at once."""
    every_seconds: float = 7 * 86400.0
    idle_after_seconds: float = 600.0
    max_gpus: int = 1


@dataclass
class Observation:
    """What one GPU shows now, reduced to what the policy needs."""
    pci_bus_id: str
    index: Optional[int] = None
    uuid: Optional[str] = None
    busy: Optional[str] = None  # why the GPU is in use now (a process, utilisation, held memory); None: idle
    unusable: Optional[str] = None  # why it cannot be screened at all (MIG, a partition, not answering)


@dataclass
class Decision:
    """Whether one GPU is screened now, and why (not)."""
    pci_bus_id: str
    index: Optional[int]
    screen: bool
    reason: str  # why (not): "due: never verified", "busy: pid 4242 on it", "not due until …"


@dataclass
class Plan:
    """One decision per GPU."""
    decisions: list[Decision] = field(default_factory=list)

    @property
    def chosen(self) -> list[Decision]:
        return [d for d in self.decisions if d.screen]


def observe(device: DeviceSnapshot) -> Observation:
    """A GPU's screening view of a fresh probe reading."""
    seen = Observation(device.pci_bus_id or "", device.index, device.uuid)
    if not device.reachable:
        seen.unusable = "it does not answer its vendor library"
    elif device.pci_bus_id is None:
        seen.unusable = "its PCI bus ID is unknown"
    elif device.is_logical_partition:
        seen.unusable = f"it is a partition of {device.physical_pci_bus_id}; partitions are not screened one by one"
    elif device.mig_enabled:
        seen.unusable = "MIG mode is enabled: a screen needs the whole GPU"
    if device.processes is None:
        seen.busy = "its processes could not be read"
    elif device.processes:
        pids = ", ".join(str(p.pid) for p in device.processes[:4])
        seen.busy = f"{len(device.processes)} process(es) on it (pid {pids})"
    elif device.utilization.gpu_percent is None:
        seen.busy = "its utilisation could not be read"
    elif device.utilization.gpu_percent > 0:
        seen.busy = f"{device.utilization.gpu_percent}% utilised"
    else:
        memory = device.memory
        held = None if memory.used_bytes is None else memory.used_bytes - (memory.reserved_bytes or 0)
        if held is not None and held > HELD_MEMORY_BYTES:
            seen.busy = f"{held / 1024**3:.1f} GiB of its memory held with no process listed (another container?)"
    return seen


def record_use(state: ScreenState, observations: list[Observation], now: float) -> None:
    """Remember what was seen: every GPU's first sighting, and the last time each was in use. A GPU whose UUID
    changed in its slot was swapped: its record starts again."""
    for seen in observations:
        gpu = state.gpu(seen.pci_bus_id)
        if gpu is not None and seen.uuid and gpu.uuid and gpu.uuid != seen.uuid:
            state.gpus.remove(gpu)
            gpu = None
        if gpu is None:
            gpu = ScreenGpu(seen.pci_bus_id, uuid=seen.uuid, index=seen.index, first_seen=now)
            state.gpus.append(gpu)
        gpu.index, gpu.uuid = seen.index, seen.uuid or gpu.uuid
        if seen.busy is not None:
            gpu.last_used = now


def mark_used(state: ScreenState, pci_bus_ids: list[str], now: float) -> None:
    """A scheduler says a job is coming to (or just left) these GPUs: they are in use as of now."""
    for bus_id in pci_bus_ids:
        gpu = state.gpu(bus_id)
        if gpu is None:
            gpu = ScreenGpu(bus_id, first_seen=now)
            state.gpus.append(gpu)
        gpu.last_used = now


def plan(state: ScreenState, observations: list[Observation], policy: ScreenPolicy, now: float,
         now_requested: bool = False) -> Plan:
    """Decide, for every observed GPU, whether to screen it now. `now_requested` (`gpudiag screen --now`): screen
    whatever is idle, due or not and whatever its last result; the idle rules still hold."""
    result, candidates = Plan(), []
    for seen in observations:
        gpu = state.gpu(seen.pci_bus_id) or ScreenGpu(seen.pci_bus_id, first_seen=now)
        why_not = _why_not(gpu, seen, policy, now, now_requested)
        decision = Decision(seen.pci_bus_id, seen.index, False, why_not or _why_due(gpu, now, now_requested))
        result.decisions.append(decision)
        if why_not is None:
            candidates.append((gpu.last_verified if gpu.last_verified is not None else float("-inf"),
                               seen.index if seen.index is not None else 0, decision))
    for _, _, decision in sorted(candidates, key=lambda c: (c[0], c[1]))[:policy.max_gpus]:
        decision.screen = True
    for _, _, decision in sorted(candidates, key=lambda c: (c[0], c[1]))[policy.max_gpus:]:
        decision.reason = f"waits: {policy.max_gpus} GPU(s) at once ({decision.reason})"
    return result


def _why_not(gpu: ScreenGpu, seen: Observation, policy: ScreenPolicy, now: float, now_requested: bool
             ) -> Optional[str]:
    if seen.unusable:
        return f"not screened: {seen.unusable}"
    if seen.busy:
        return f"busy: {seen.busy}"
    watched_since = gpu.first_seen if gpu.first_seen is not None else now
    last_used = max(gpu.last_used if gpu.last_used is not None else watched_since, watched_since)
    if now - last_used < policy.idle_after_seconds:
        if gpu.last_used is not None and gpu.last_used >= watched_since:
            return (f"in use {now - last_used:.0f} s ago: screens wait until no job has held it for "
                    f"{policy.idle_after_seconds:.0f} s")
        return (f"watched for {now - last_used:.0f} s only: screens wait until it has been seen idle for "
                f"{policy.idle_after_seconds:.0f} s")
    if now_requested:
        return None
    completed = gpu.last_completed
    if completed is not None and completed.outcome == FAILED:
        return f"its last screen failed ({completed.reason}): drain and repair it, then `gpudiag screen --now`"
    last = gpu.last_run
    if last is not None and last.outcome == ERROR and now - last.finished_at < ERROR_RETRY_SECONDS:
        return f"its last screen ended in an error {now - last.finished_at:.0f} s ago ({last.reason}); retried later"
    if gpu.last_verified is not None and now < gpu.last_verified + START_FRACTION * policy.every_seconds:
        return f"not due: verified {now - gpu.last_verified:.0f} s ago"
    return None


def _why_due(gpu: ScreenGpu, now: float, now_requested: bool) -> str:
    if now_requested:
        return "asked for now (--now)"
    if gpu.last_verified is None:
        return "due: never verified"
    return f"due: last verified {now - gpu.last_verified:.0f} s ago"
