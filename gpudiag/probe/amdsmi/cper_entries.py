"""A GPU's CPER records read through amdsmi (issue 32, item 9), into DeviceSnapshot.cper.

amdsmi_get_gpu_cper_entries(handle, severity_mask, buffer_size=4 MiB, cursor=0) returns
`(entries, next_cursor, cper_data, status)` (amdsmi 6.4 and later; docs/vendor-api.md §5). The C library reads the
whole of amdgpu's CPER ring from debugfs (/sys/kernel/debug/dri/N/amdgpu_ring_cper, Linux 6.15 and later), keeps the
records whose `1 << severity` is in the mask, and copies those from the cursor on (the cursor counts the records
that passed the mask): at most 20 a call, which the binding asks for, answering MORE_DATA (39) when more are left and
a cursor to go on from (rocm-systems projects/amdsmi/src/amd_smi/amd_smi_cper.cc,
amdsmi_get_gpu_cper_entries_by_path). A ring file it cannot stat, which is what a reader who may not enter debugfs
(0700 root) meets as well as a kernel without the ring, answers NOT_SUPPORTED.

Outcomes, fail closed:
- the binding has no such function (amdsmi before 6.4), or the call answers NOT_SUPPORTED: `unsupported` says why;
  the check skips with the reason;
- the first call fails: the caller records the probe error (named for the call); the check is unknown;
- a later call fails, or the records run past the bound: what was read is kept, marked incomplete;
- each record's AFIDs come from amdsmi_get_afids_from_cper, whose refusal costs the record its AFIDs, nothing more.
Each call is one vendor call under the probe's deadline (the caller's tracker names it).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from gpudiag.model import DeviceSnapshot
from gpudiag.model.cper import CperLog
from gpudiag.probe.amdsmi.calls import STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED, AmdsmiCaller
from gpudiag.probe.amdsmi.cper import MAX_RECORDS, from_amdsmi

SOURCE = "amdsmi.amdsmi_get_gpu_cper_entries"
AFIDS_SOURCE = "amdsmi.amdsmi_get_afids_from_cper"
# Every severity bit, not only the three amdsmi names: a record of a severity nobody names still reaches the verdict.
EVERY_SEVERITY = 0xFFFFFFFF
BUFFER_BYTES = 4 * 1024 * 1024  # the binding's default; amdgpu's ring is far smaller
PER_CALL = 20  # records the binding asks for in one call (num_cper_hdrs in amdsmi_interface.py)
MAX_CALLS = MAX_RECORDS // PER_CALL + 1
STATUS_MORE_DATA = 39

NO_FUNCTION = ("this amdsmi has no amdsmi_get_gpu_cper_entries (amdsmi 6.4 added it): upgrade amd-smi-lib to read the "
               "GPU's CPER records")
NOT_SUPPORTED = ("amdsmi answers NOT_SUPPORTED for the CPER records: amdsmi reads them from debugfs "
                 "(/sys/kernel/debug/dri/N/amdgpu_ring_cper), which only root may enter, and amdgpu keeps that ring "
                 "from Linux 6.15 on (MI300 series and later); run `gpudiag check` as root to read them")


def fill_cper(device: DeviceSnapshot, call: AmdsmiCaller, handle: Any) -> None:
    if getattr(call.smi, "amdsmi_get_gpu_cper_entries", None) is None:
        device.unsupported[SOURCE] = NO_FUNCTION
        return
    log, cursor, afids_of = CperLog(), 0, _afids_of(call)
    for calls in range(MAX_CALLS):
        answer, code = call.answer("amdsmi_get_gpu_cper_entries", handle, EVERY_SEVERITY, BUFFER_BYTES, cursor)
        if answer is None:
            if calls == 0:
                if code in (STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED):
                    device.unsupported[SOURCE] = NOT_SUPPORTED
                return  # a failure: the caller recorded it, and device.cper stays None (unknown downstream)
            log.complete = False
            log.problems.append(f"the CPER read failed after {len(log.records)} record(s) (status {code})")
            break
        outcome = _page(answer)
        if outcome is None:
            log.complete = False
            log.problems.append(f"amdsmi answered the CPER read in a shape gpudiag does not know: {type(answer)}")
            break
        next_cursor, cper_data, status = outcome
        records, problems = from_amdsmi(cper_data, afids_of)
        log.records += records
        log.problems += problems
        if status != STATUS_MORE_DATA:
            break
        if next_cursor <= cursor or not records:  # a cursor that does not move would loop to the bound
            log.complete = False
            log.problems.append(f"amdsmi answered MORE_DATA without moving its cursor ({cursor} -> {next_cursor})")
            break
        cursor = next_cursor
    else:
        log.complete = False
        log.problems.append(f"more than {MAX_CALLS * PER_CALL} CPER records: the rest not read")
    device.cper = log


def _page(answer: Any) -> Optional[tuple[int, list, int]]:
    """(next cursor, cper_data, status) of one answer, or None for an answer of another shape."""
    if not isinstance(answer, tuple) or len(answer) != 4:
        return None
    _, next_cursor, cper_data, status = answer
    if not isinstance(next_cursor, int) or not isinstance(cper_data, list) or not isinstance(status, int):
        return None
    return next_cursor, cper_data, status


def _afids_of(call: AmdsmiCaller) -> Optional[Callable[[bytes], Any]]:
    """amdsmi_get_afids_from_cper under the deadline's tracker. Not through the caller: a record amdsmi cannot give
    the AFIDs of is no probe error of the GPU (from_amdsmi notes it beside the record)."""
    # amdsmi 7.0.2 defines it in amdsmi_interface but leaves it out of the package's own names (its __init__.py
    # imports amdsmi_get_gpu_cper_entries, not this): looked up in both.
    function = getattr(call.smi, "amdsmi_get_afids_from_cper", None) or getattr(
        getattr(call.smi, "amdsmi_interface", None), "amdsmi_get_afids_from_cper", None)
    if function is None:
        return None

    def afids(raw: bytes) -> Any:
        call.tracker.enter(AFIDS_SOURCE)
        try:
            return function(raw)
        finally:
            call.tracker.leave()

    return afids
