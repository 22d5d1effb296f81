"""Screening records for the checks, metrics and fleet tests: the 8x H200 snapshot with a week-policy record in
which every GPU was verified a day ago, and edits that make one GPU overdue, never verified, or failed."""

from __future__ import annotations

from gpudiag.model import SmMismatch
from gpudiag.model.screen import FAILED, PREEMPTED, VERIFIED, ScreenGpu, ScreeningInfo, ScreenRun, ScreenState
from tests.support.acceptance_nodes import nvidia_h200_8x

DAY = 86400.0
NOW = 1_800_000_000.0


def verified(bus: str, at: float, gpu: int) -> ScreenRun:
    return ScreenRun(bus, at - 60, at, VERIFIED, "600 stress launches verified bit for bit", index=gpu,
                     tests=["hbm", "memtest", "stress"], launches_verified=600, memory_tested_bytes=4 * 10**9,
                     memory_total_bytes=80 * 10**9, footprint_bytes=3 * 2**30)


def screened_node(edit=None):
    """The 8-GPU H200 snapshot with a week-policy record: every GPU verified a day ago, unless `edit` says."""
    snapshot = nvidia_h200_8x()
    state = ScreenState(every_seconds=7 * DAY, updated_at=NOW)
    for device in snapshot.devices:
        gpu = ScreenGpu(device.pci_bus_id, device.uuid, device.index, first_seen=NOW - 30 * DAY)
        gpu.record(verified(device.pci_bus_id, NOW - DAY, device.index))
        state.gpus.append(gpu)
    if edit is not None:
        edit(state)
    snapshot.screening = ScreeningInfo(path="/var/lib/gpudiag/screen/state.json", state=state, read_at=NOW)
    return snapshot


def never_verified(index: int):
    def edit(state: ScreenState) -> None:
        gpu = state.gpus[index]
        gpu.last_verified = gpu.last_completed = gpu.last_run = None
        gpu.runs = {}
    return edit


def overdue(index: int, days: float):
    def edit(state: ScreenState) -> None:
        gpu = state.gpus[index]
        gpu.last_verified = NOW - days * DAY
        gpu.record(ScreenRun(gpu.pci_bus_id, NOW - 3600, NOW - 3590, PREEMPTED, "a job opened the GPU (pid 4242)",
                             index=index, preempted_by=[4242], yield_seconds=0.6))
    return edit


def failed_on(index: int, sm: int = 17):
    def edit(state: ScreenState) -> None:
        gpu = state.gpus[index]
        gpu.record(ScreenRun(gpu.pci_bus_id, NOW - 600, NOW - 540, FAILED,
                             f"3 tensor result(s) differed from their siblings' on SM {sm}", index=index,
                             launches_verified=40, mismatched_blocks=3,
                             mismatched_sms=[SmMismatch(f"SM {sm}", sm, 3, 1)],
                             memory_mismatched_words=2))
    return edit


