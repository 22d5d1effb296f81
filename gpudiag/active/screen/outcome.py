"""What a screen's results mean: one ScreenRun per GPU, verified only when every test ran to its end and every result
checked out. Wrong results decide over everything else: a screen that saw a block compute other bits before a job
preempted it failed, it was not merely preempted (evidence is not thrown away because the run was cut short)."""

from __future__ import annotations

from typing import Optional

from gpudiag.model import ActiveDevice, ActiveResults
from gpudiag.model.screen import ERROR, FAILED, PREEMPTED, VERIFIED, ScreenRun

WANTED = ("hbm", "memtest", "stress")  # what a screen runs: the verified tests of `check --level 2`


def fill_run(run: ScreenRun, results: Optional[ActiveResults], tests: tuple[str, ...], stop_reason: Optional[str],
             problem: Optional[str]) -> ScreenRun:
    """Fill `run` (its times, GPU and footprint already set) from a worker's results. `stop_reason`: why the
    supervisor stopped the screen (a job, `gpudiag screen --stop`), None when it ran to its end. `problem`: what went
    wrong outside the tests (the worker died, wrote no results, its memory stayed on the GPU)."""
    run.tests = list(tests)
    entry = _entry(results, run.pci_bus_id)
    if entry is not None:
        _copy_figures(run, entry)
    wrong = _wrong(run, entry)
    if wrong:
        run.outcome, run.reason = FAILED, wrong
    elif stop_reason:
        run.outcome, run.reason = PREEMPTED, stop_reason
    elif problem:
        run.outcome, run.reason = ERROR, problem
    else:
        unfinished = _unfinished(results, entry, tests)
        run.outcome, run.reason = (ERROR, unfinished) if unfinished else (VERIFIED, _verified(run))
    return run


def _entry(results: Optional[ActiveResults], pci_bus_id: str) -> Optional[ActiveDevice]:
    if results is None:
        return None
    return next((d for d in results.devices if d.pci_bus_id == pci_bus_id), None)


def _copy_figures(run: ScreenRun, entry: ActiveDevice) -> None:
    stress, memtest, hbm = entry.stress, entry.memtest, entry.hbm
    if stress is not None:
        run.kernel, run.stress_seconds = stress.kernel, stress.seconds
        check = stress.verification
        if check is not None:
            run.launches_verified = check.launches_verified
            run.mismatched_blocks = check.mismatched_blocks
            run.stream_mismatches = check.stream_mismatches
            run.mismatched_sms = list(check.mismatched_sms)
            run.validation_fault = check.validation_fault
    if memtest is not None:
        run.memory_tested_bytes = memtest.bytes_tested if memtest.passes_completed else 0
        run.memory_total_bytes = memtest.total_bytes
        run.memory_mismatched_words = memtest.mismatched_words
        run.memory_patterns = list(memtest.patterns)
    if hbm is not None:
        run.hbm_gb_per_second = hbm.gb_per_second


def _wrong(run: ScreenRun, entry: Optional[ActiveDevice]) -> Optional[str]:
    """What the GPU computed or stored wrong, in one line; None when nothing was."""
    found = []
    if run.mismatched_blocks:
        where = ", ".join(s.location for s in run.mismatched_sms) or "no SM to blame (no majority)"
        found.append(f"{run.mismatched_blocks} tensor result(s) differed from their siblings' on {where}")
    check = entry.stress.verification if entry is not None and entry.stress is not None else None
    if check is not None and check.launches_without_majority and not run.mismatched_blocks:
        found.append(f"{check.launches_without_majority} launch(es) whose blocks shared no result")
    if check is not None and check.hot_reference_matches is False:
        found.append("the reference launch computed other bits hot than cold")
    if run.stream_mismatches:
        found.append(f"{run.stream_mismatches} streamed HBM word(s) read back wrong")
    if run.memory_mismatched_words:
        found.append(f"{run.memory_mismatched_words} memory word(s) read back wrong in the pattern test")
    return "; ".join(found) or None


def _unfinished(results: Optional[ActiveResults], entry: Optional[ActiveDevice], tests: tuple[str, ...]
                ) -> Optional[str]:
    """Why the screen cannot count as verified although nothing was wrong; None when it can."""
    if results is None or entry is None:
        errors = "; ".join(e.message for e in (results.errors if results else []))
        return f"the GPU was not tested{': ' + errors if errors else ''}"
    if entry.skipped:
        return f"the GPU was not tested: {entry.skipped}"
    if not tests:
        return "no test fits in the screen's memory bound"
    for name in tests:
        result = getattr(entry, name, None)
        if result is None:
            return f"{name} did not run"
        if result.error is not None:
            return f"{name}: {result.error.message}"
    if "stress" in tests:
        check = entry.stress.verification
        if check is None:
            return (f"the stress kernel ({entry.stress.kernel}) is not verified on this GPU: it cannot prove its "
                    f"results (a tensor-core GPU is needed: NVIDIA sm_80+, AMD gfx942/gfx950)")
        if not check.launches_verified or check.hot_reference_matches is None:
            return "no stress launch was verified"
    if "memtest" in tests and entry.memtest.passes_completed < entry.memtest.passes_requested:
        return f"the pattern test completed {entry.memtest.passes_completed} of {entry.memtest.passes_requested} passes"
    return None


def _verified(run: ScreenRun) -> str:
    share = (f" ({100 * run.memory_tested_bytes / run.memory_total_bytes:.1f} % of its memory)"
             if run.memory_total_bytes else "")
    return (f"{run.launches_verified} stress launches verified bit for bit; {run.memory_tested_bytes / 1e9:.2f} GB "
            f"tested in {len(run.memory_patterns)} patterns{share}")
