"""The screening policy's rules one by one (gpudiag/active/screen/policy.py; docs/screening.md "The policy"): what is
due, what is idle, how long it must have been, how many at once, and what stays on record."""

from __future__ import annotations

import dataclasses

from gpudiag.active.screen.policy import ERROR_RETRY_SECONDS, ScreenPolicy, mark_used, observe, plan, record_use
from gpudiag.model import GpuProcess, MemoryUsage, Utilization
from gpudiag.model.screen import ERROR, FAILED, VERIFIED, ScreenGpu, ScreenRun, ScreenState
from tests.support.active import idle_device

HOUR, DAY = 3600.0, 86400.0
POLICY = ScreenPolicy(every_seconds=7 * DAY, idle_after_seconds=600.0, max_gpus=1)
BUS = ("0000:3b:00.0", "0000:5e:00.0")


def devices(**changes):
    return [idle_device(i, uuid=f"GPU-{i}", **changes) for i in range(2)]


def decide(state, found, now, **kwargs):
    seen = [observe(d) for d in found]
    record_use(state, seen, now)
    return {d.pci_bus_id: d for d in plan(state, seen, kwargs.pop("policy", POLICY), now, **kwargs).decisions}


def test_nothing_is_screened_before_screening_has_watched_the_gpus_for_idle_after():
    state = ScreenState()
    first = decide(state, devices(), 0.0)
    assert not any(d.screen for d in first.values()) and first[BUS[0]].reason.startswith("watched for 0 s only")
    later = decide(state, devices(), 601.0)
    assert [b for b, d in later.items() if d.screen] == [BUS[0]]  # one at a time, the lowest index first
    assert later[BUS[1]].reason.startswith("waits: 1 GPU(s) at once")


def test_a_gpu_in_use_is_not_screened_and_not_until_idle_after_has_passed_since():
    state = ScreenState()
    decide(state, devices(), 0.0)
    busy = devices()
    busy[0] = dataclasses.replace(busy[0], processes=[GpuProcess(4242, "compute", 2**30)])
    at_1000 = decide(state, busy, 1000.0)
    assert not at_1000[BUS[0]].screen and at_1000[BUS[0]].reason == "busy: 1 process(es) on it (pid 4242)"
    assert not decide(state, devices(), 1500.0)[BUS[0]].screen  # 500 s after the job
    assert decide(state, devices(), 1601.0)[BUS[0]].screen


def test_utilisation_held_memory_and_what_cannot_be_read_are_not_idle():
    for changes, reason in ((dict(utilization=Utilization(gpu_percent=3)), "3% utilised"),
                            (dict(utilization=Utilization(gpu_percent=None)), "its utilisation could not be read"),
                            (dict(processes=None), "its processes could not be read"),
                            (dict(memory=MemoryUsage(total_bytes=80 * 2**30, used_bytes=6 * 2**30, reserved_bytes=0)),
                             "6.0 GiB of its memory held with no process listed")):
        assert observe(idle_device(0, **changes)).busy.startswith(reason), changes
    assert observe(idle_device(0, mig_enabled=True)).unusable.startswith("MIG mode")


def test_due_at_three_quarters_of_the_period_and_most_overdue_first():
    state = ScreenState(gpus=[ScreenGpu(BUS[0], "GPU-0", 0, first_seen=0.0, last_verified=10 * DAY - 5 * DAY),
                              ScreenGpu(BUS[1], "GPU-1", 1, first_seen=0.0, last_verified=10 * DAY - 6 * DAY)])
    found = decide(state, devices(), 10 * DAY, policy=dataclasses.replace(POLICY, max_gpus=1))
    assert found[BUS[0]].reason.startswith("not due") and found[BUS[1]].screen  # 6 d ≥ 0.75 × 7 d; 5 d is not
    both = decide(state, devices(), 10 * DAY + 2 * DAY, policy=dataclasses.replace(POLICY, max_gpus=2))
    assert both[BUS[0]].screen and both[BUS[1]].screen


def test_a_failed_gpu_stays_on_record_until_screened_on_purpose_and_an_error_is_retried_an_hour_later():
    state = ScreenState()
    decide(state, devices(), 0.0)
    state.gpus[0].record(ScreenRun(BUS[0], 700, 760, FAILED, "SM 17", index=0))
    state.gpus[1].record(ScreenRun(BUS[1], 700, 710, ERROR, "cuInit failed", index=1))
    found = decide(state, devices(), 800.0)
    assert found[BUS[0]].reason.startswith("its last screen failed (SM 17)")
    assert found[BUS[1]].reason.startswith("its last screen ended in an error")
    assert decide(state, devices(), 710 + ERROR_RETRY_SECONDS + 1)[BUS[1]].screen
    assert decide(state, devices(), 9 * DAY, now_requested=True)[BUS[0]].screen  # --now, after the repair


def test_a_scheduler_mark_holds_screens_off_and_a_swapped_gpu_starts_afresh():
    state = ScreenState()
    decide(state, devices(), 0.0)
    state.gpus[0].record(ScreenRun(BUS[0], 700, 760, VERIFIED, "ok", index=0))
    mark_used(state, [BUS[1]], 1000.0)
    assert decide(state, devices(), 1200.0)[BUS[1]].reason.startswith("in use 200 s ago")
    swapped = devices()
    swapped[0] = dataclasses.replace(swapped[0], uuid="GPU-new")
    decide(state, swapped, 2000.0)
    gpu = state.gpu(BUS[0])
    assert gpu.uuid == "GPU-new" and gpu.last_verified is None and gpu.first_seen == 2000.0

