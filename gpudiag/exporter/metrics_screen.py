"""The screen family's metrics, found by this module's name (exporter/catalog.py): each GPU's idle-time screens from
the record `gpudiag screen` keeps (snapshot.screening, docs/screening.md): when it was last verified and when it is
due, how its last screen ended and how long it took, how often jobs preempted it, what a screen held on the GPU, and
what the last completed screen found wrong (the silent-data-corruption alert reads gpudiag_screen_mismatches).

Nothing when screening is not set up or its record cannot be read (the checks say which): "not screened" and "not
known" are never a 0. A GPU never verified has no gpudiag_screen_last_verified_timestamp_seconds, but has its
gpudiag_screen_due_timestamp_seconds (a period after screening first saw it) and gpudiag_screen_overdue_seconds, which
GpudiagScreeningOverdue watches: a duration the alert compares with a duration, so that the rule holds whatever the
clock of the Prometheus that evaluates it (and scales with the rest in tests/rule_scaling.py).
"""

from __future__ import annotations

from typing import Optional

from gpudiag.exporter import catalog
from gpudiag.exporter.metric_set import MetricSet, gpu_labels
from gpudiag.model import NodeSnapshot
from gpudiag.model.screen import FAILED, OUTCOMES, VERIFIED, ScreenGpu, ScreenState


def _gpu(name: str, kind: str, help_text: str, extra: tuple[str, ...] = ()) -> catalog.MetricSpec:
    assert name.startswith("gpudiag_screen_"), name  # the family's prefix; catalog checks the rest
    return catalog.gpu_metric(name, kind, help_text, extra)


def _node(name: str, help_text: str) -> catalog.MetricSpec:
    assert name.startswith("gpudiag_screen_"), name
    return catalog.define(name, "gauge", help_text)


LAST_VERIFIED = _gpu("gpudiag_screen_last_verified_timestamp_seconds", "gauge",
                     "Unix time at which the GPU's last verified idle-time screen finished (none: never verified).")
DUE = _gpu("gpudiag_screen_due_timestamp_seconds", "gauge",
           "Unix time by which the GPU must be verified again: screen_every after its last verified screen, or after "
           "screening first saw it.")
OVERDUE = _gpu("gpudiag_screen_overdue_seconds", "gauge",
               "How far past its due time the GPU is at this collection, without a verified screen (0: not due yet).")
LAST_RUN = _gpu("gpudiag_screen_last_run_timestamp_seconds", "gauge",
                "Unix time at which the GPU's last screen ended, however it ended.")
LAST_DURATION = _gpu("gpudiag_screen_last_duration_seconds", "gauge", "How long the GPU's last screen ran.")
LAST_RESULT = _gpu("gpudiag_screen_last_result", "gauge",
                   "How the GPU's last screen ended, a state set: 1 for its result (verified, failed, preempted, "
                   "error), 0 for the others.", ("result",))
RUNS = _gpu("gpudiag_screen_runs_total", "counter", "The GPU's screens by how they ended, since screening first saw "
                                                    "it.", ("result",))
PREEMPTIONS = _gpu("gpudiag_screen_preemptions_total", "counter",
                   "Screens of the GPU that gave it back to a job (its process appeared, or `gpudiag screen --stop`).")
LAST_YIELD = _gpu("gpudiag_screen_last_yield_seconds", "gauge",
                  "From the job seen (or the stop asked) to the screen gone with its memory, in its last preemption.")
FOOTPRINT = _gpu("gpudiag_screen_footprint_bytes", "gauge",
                 "The GPU memory the last screen held at most, its context included, as the vendor's process list "
                 "showed it.")
MEMORY_TESTED = _gpu("gpudiag_screen_memory_tested_ratio", "gauge",
                     "The share of the GPU's memory the pattern test of its last verified screen covered.")
MISMATCHES = _gpu("gpudiag_screen_mismatches", "gauge",
                  "Wrong results of the GPU's last completed screen: kind tensor (block results that differed from "
                  "their siblings'), stream (streamed HBM reads), memory (pattern-test words). Above 0 is silent "
                  "data corruption.", ("kind",))
MISMATCH_SM = _gpu("gpudiag_screen_mismatch_sm_launches", "gauge",
                   "Launches of the last completed screen in which a block on this SM (AMD: XCC/SE/SH/CU) computed "
                   "other bits than its siblings.", ("sm",))
EVERY = _node("gpudiag_screen_every_seconds", "The screening policy: every GPU verified at least this often "
                                              "(screen_every).")
IDLE_AFTER = _node("gpudiag_screen_idle_after_seconds", "The screening policy: a GPU is screened only after no job "
                                                        "held it for this long (screen_idle_after).")
MAX_GPUS = _node("gpudiag_screen_max_gpus", "The screening policy: GPUs screened at once (screen_max_gpus).")


def add(fs: MetricSet, snapshot: NodeSnapshot) -> None:
    info = snapshot.screening
    if info is None or info.error is not None or info.state is None:
        return
    state = info.state
    fs.add(EVERY, (), state.every_seconds)
    fs.add(IDLE_AFTER, (), state.idle_after_seconds)
    fs.add(MAX_GPUS, (), state.max_gpus)
    devices = {d.pci_bus_id: d for d in snapshot.devices if d.pci_bus_id}
    for gpu in state.gpus:
        device = devices.get(gpu.pci_bus_id)
        ids = gpu_labels(device) if device is not None else (
            "" if gpu.index is None else str(gpu.index), gpu.uuid or "", gpu.pci_bus_id)
        _add_gpu(fs, ids, gpu, state, info.read_at)


def _add_gpu(fs: MetricSet, ids: tuple, gpu: ScreenGpu, state: ScreenState, now: Optional[float]) -> None:
    due = gpu.due_at(state.every_seconds)
    fs.add(LAST_VERIFIED, ids, gpu.last_verified)
    fs.add(DUE, ids, due)
    if due is not None and now is not None:
        fs.add(OVERDUE, ids, round(max(0.0, now - due), 3))
    fs.add(PREEMPTIONS, ids, gpu.preemptions)
    for outcome in OUTCOMES:
        fs.add(RUNS, ids + (outcome,), gpu.runs.get(outcome, 0))
    last = gpu.last_run
    if last is not None:
        fs.add(LAST_RUN, ids, last.finished_at)
        fs.add(LAST_DURATION, ids, round(last.duration_seconds, 3))
        for outcome in OUTCOMES:
            fs.add(LAST_RESULT, ids + (outcome,), int(outcome == last.outcome))
        fs.add(FOOTPRINT, ids, last.footprint_bytes)
    fs.add(LAST_YIELD, ids, _last_yield(gpu))
    completed = gpu.last_completed
    if completed is not None and completed.outcome == VERIFIED and completed.memory_total_bytes:
        fs.add(MEMORY_TESTED, ids, round(completed.memory_tested_bytes / completed.memory_total_bytes, 6))
    if completed is not None and completed.outcome in (VERIFIED, FAILED):
        fs.add(MISMATCHES, ids + ("tensor",), completed.mismatched_blocks)
        fs.add(MISMATCHES, ids + ("stream",), completed.stream_mismatches)
        fs.add(MISMATCHES, ids + ("memory",), completed.memory_mismatched_words)
        for sm in completed.mismatched_sms:
            fs.add(MISMATCH_SM, ids + (sm.location,), sm.launches)


def _last_yield(gpu: ScreenGpu) -> Optional[float]:
    last = gpu.last_run
    return last.yield_seconds if last is not None and last.outcome == "preempted" else None
