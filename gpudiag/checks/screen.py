"""screen.coverage, screen.result: every GPU proven correct lately by an idle-time screen, and what its last screen
found (docs/screening.md).

`gpudiag screen` (gpudiag-screen.timer) runs the verified load tests on idle GPUs by policy and keeps each GPU's
record in the state directory; the probe part (probe/screening/part.py) reads it into the snapshot. A node without
that record has not set screening up: both checks skip. A record that cannot be read is unknown: nobody can say
whether the GPUs were proven.

- screen.coverage warns for a GPU past `screen_every` without a verified screen (never screened, or its last one too
  old): it has not been proven lately, typically because jobs kept it busy. The alert GpudiagScreeningOverdue says
  the same from the metrics, past a day's grace.
- screen.result fails for a GPU whose last completed screen found wrong results (a block that computed other bits
  than its siblings, names its SM; a memory word that read back wrong): silent data corruption, drain it. A screen
  that could not run or judge (the runtime refused, the worker died) warns. A preempted screen judges nothing: the
  last completed one stands.
"""

from __future__ import annotations

import datetime
from typing import Optional

from gpudiag.checks.common import Check, failed, passed, skipped, unknown, warned
from gpudiag.checks.family import Family
from gpudiag.expect.screen_settings import settings_of
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, Status
from gpudiag.model.screen import ERROR, FAILED, ScreenGpu, ScreenRun, ScreeningInfo

COVERAGE, RESULT = "screen.coverage", "screen.result"
SETUP = ("idle-time screening is not set up on this node: enable it with `systemctl enable --now "
         "gpudiag-screen.timer` (docs/screening.md)")


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(0.0, seconds):.0f} s"


def _when(stamp: Optional[float]) -> Optional[str]:
    if stamp is None:
        return None
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).isoformat(timespec="seconds")


def _now(snapshot: NodeSnapshot, info: ScreeningInfo) -> float:
    if info.read_at is not None:
        return info.read_at
    try:
        return datetime.datetime.fromisoformat(snapshot.collected_at or "").timestamp()
    except ValueError:
        return 0.0


def _node_level(check_id: str, snapshot: NodeSnapshot) -> Optional[CheckResult]:
    """The node-level result when the record is missing or unreadable; None when the GPUs can be judged."""
    info = snapshot.screening
    if info is None:
        return skipped(check_id, None, "the screens' record was not read (no state directory given, or a snapshot "
                                       "recorded before gpudiag read it)")
    if info.error is not None:
        return unknown(check_id, None, f"the screens' record cannot be read: {info.error.message}",
                       observed={"path": info.path, "error": info.error.message}, expected="a readable state file",
                       remediation=f"Check {info.path}: its owner (gpudiag), its mode, the disk. Moving it aside "
                                   f"makes the screens start again (every GPU is then screened anew).")
    if info.state is None:
        return skipped(check_id, None, SETUP)
    return None


def _gpus(snapshot: NodeSnapshot) -> list[DeviceSnapshot]:
    return [d for d in snapshot.devices if d.pci_bus_id and not d.is_logical_partition]


def coverage(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    node = _node_level(COVERAGE, snapshot)
    if node is not None:
        return [node]
    info = snapshot.screening
    state, now, every = info.state, _now(snapshot, info), settings_of(expect).every_seconds
    oldest = min((g.first_seen for g in state.gpus if g.first_seen is not None), default=None)
    results = []
    for device in _gpus(snapshot):
        gpu = state.gpu(device.pci_bus_id)
        if gpu is None:
            if oldest is not None and now - oldest > every:
                results.append(warned(COVERAGE, device, f"never screened: the screens, running for "
                                      f"{_ago(now - oldest)}, have no record of this GPU",
                                      observed={"last_verified": None}, expected=f"verified within {_ago(every)}",
                                      remediation=_unseen_remedy()))
            else:
                results.append(skipped(COVERAGE, device, "not seen by the screens yet (the next `gpudiag screen` "
                                                         "run watches it)"))
            continue
        results.append(_one_coverage(device, gpu, now, every))
    return results


def _one_coverage(device: DeviceSnapshot, gpu: ScreenGpu, now: float, every: float) -> CheckResult:
    due = gpu.due_at(every) or now
    observed = {"last_verified": _when(gpu.last_verified), "due": _when(due), "preemptions": gpu.preemptions,
                "last_run": gpu.last_run.outcome if gpu.last_run else None}
    expected = f"verified within {_ago(every)} (screen_every)"
    if now <= due:
        what = (f"verified {_ago(now - gpu.last_verified)} ago" if gpu.last_verified is not None
                else f"not screened yet; due in {_ago(due - now)}")
        return passed(COVERAGE, device, what, observed=observed, expected=expected)
    if gpu.last_verified is None:
        message = f"never verified in the {_ago(now - (gpu.first_seen or now))} since screening first saw it"
    else:
        message = f"overdue: last verified {_ago(now - gpu.last_verified)} ago"
    last = gpu.last_run
    if last is not None:
        message += f"; its last screen was {last.outcome} ({last.reason[:120]})"
    return warned(COVERAGE, device, message, observed=observed, expected=expected,
                  remediation="Jobs kept it busy through every idle window, or its screens ended early: see "
                              "`gpudiag history --gpu N`. Screen it in the next maintenance window: `gpudiag screen "
                              "--now --gpu N --idle-after 0` on the drained node, or `gpudiag check --level 2`.")


def _unseen_remedy() -> str:
    return ("The screens cannot see this GPU: check the screen unit's environment (CUDA_VISIBLE_DEVICES), its "
            "journal (`journalctl -u gpudiag-screen`), and `gpudiag screen --dry-run`.")


def result(snapshot: NodeSnapshot, expect) -> list[CheckResult]:
    node = _node_level(RESULT, snapshot)
    if node is not None:
        return [node]
    results = []
    for device in _gpus(snapshot):
        gpu = snapshot.screening.state.gpu(device.pci_bus_id)
        if gpu is None or (gpu.last_completed is None and gpu.last_run is None):
            results.append(skipped(RESULT, device, "no screen has run on this GPU yet"))
        else:
            results.append(_one_result(device, gpu))
    return results


def _facts(run: ScreenRun) -> dict:
    return {"outcome": run.outcome, "finished": _when(run.finished_at), "tests": run.tests,
            "launches_verified": run.launches_verified, "mismatched_blocks": run.mismatched_blocks,
            "mismatched_sms": [s.location for s in run.mismatched_sms], "stream_mismatches": run.stream_mismatches,
            "memory_mismatched_words": run.memory_mismatched_words, "memory_tested_bytes": run.memory_tested_bytes}


def _one_result(device: DeviceSnapshot, gpu: ScreenGpu) -> CheckResult:
    completed, last = gpu.last_completed, gpu.last_run
    if completed is not None and completed.outcome == FAILED:
        return failed(RESULT, device, f"its last completed screen found wrong results: {completed.reason}",
                      observed=_facts(completed), expected="every result bit for bit as its siblings'",
                      remediation="Silent data corruption: drain the GPU, confirm with `gpudiag check --level 2` and "
                                  "`dcgmi diag -r 3` (AMD: AGFHC), reset it and test again; wrong again on the same "
                                  "SM or address is an RMA case. After a repair, `gpudiag screen --now --gpu N` "
                                  "screens it again.")
    if last is not None and last.outcome == ERROR and (completed is None or last.finished_at > completed.finished_at):
        return warned(RESULT, device, f"its last screen could not run or judge: {last.reason}",
                      observed=_facts(last), expected="a screen that runs to its end",
                      remediation="See `journalctl -u gpudiag-screen` and `gpudiag history --gpu N`: a runtime that "
                                  "refuses the GPU (driver, /dev/nvidia-uvm or /dev/kfd not allowed to the unit) or "
                                  "a GPU that fails under load (Xid, reset) is not proven correct.")
    if completed is None:
        return skipped(RESULT, device, f"no screen of this GPU has completed yet (the last was {last.outcome})")
    return passed(RESULT, device, f"its last completed screen verified it: {completed.reason}",
                  observed=_facts(completed), expected="every result bit for bit as its siblings'")


CHECKS = (
    Check(COVERAGE, coverage,
          "every GPU verified by an idle-time screen within screen_every (when screening is set up)"),
    Check(RESULT, result, "the last completed idle-time screen of every GPU computed and stored every result right"),
)

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

FAMILY = Family(
    "screen", order=120, checks=CHECKS,
    verdicts={
        COVERAGE: {W: ("watch", "GPUDIAG-SCREEN-OVERDUE"), U: ("watch", "GPUDIAG-SCREEN-UNREADABLE")},
        RESULT: {F: ("drain", "GPUDIAG-SCREEN-WRONG-RESULTS"), W: ("watch", "GPUDIAG-SCREEN-ERROR"),
                 U: ("watch", "GPUDIAG-SCREEN-UNREADABLE")},
    },
    reference={
        COVERAGE: ("when each GPU's last verified idle-time screen finished, against screen_every",
                   "Overdue: jobs kept it busy or its screens ended early; screen it in a maintenance window "
                   "(`gpudiag screen --now --idle-after 0`)."),
        RESULT: ("what each GPU's last completed idle-time screen found: the stress's results bit for bit (naming "
                 "the SM), the streamed HBM words and the memory pattern test",
                 "Wrong results: drain the GPU, confirm with `gpudiag check --level 2` / `dcgmi diag -r 3`, RMA if it "
                 "repeats; a screen that could not run: see `journalctl -u gpudiag-screen`."),
    },
    # screen.coverage judges with screen_every; the others are the policy the judged screens ran under.
    settings={COVERAGE: ("screen_every", "screen_idle_after", "screen_max_gpus"),
              RESULT: ("screen_stress_seconds", "screen_memory_fraction")},
    probe_parts={"screening": ("screen.",)},
    note="Judged from the record `gpudiag screen` keeps (docs/screening.md); skipped where screening is not set up.",
)
