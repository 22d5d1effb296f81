"""What an AMD CPER record means for its GPU (issue 32, item 9): a status, an action and a fault code per record,
from the record's own severity (gpudiag/model/cper.py), named more closely by the AFIDs amdsmi decoded from it.

- fatal: the GPU met an uncorrectable error it could not contain; amdgpu resets the GPU (MI300: a mode-1 reset of
  the hive) and AMD's device-metrics-exporter marks the GPU unhealthy (isFatalCPERActionable,
  pkg/amdgpu/gpuagent/gpuagent_health.go): fail, reset; where an AFID of the record names the fault
  (gpudiag/checks/ras/afid_catalog.py), its action and the fault code GPUDIAG-CPER-AFID-<n> (e.g. AFID 19, HBM at the
  bad-page threshold: rma).
- non-fatal uncorrected ("recoverable", amdsmi's RAS page): an uncorrected error that was contained (poison
  consumed by one process): warn, watch (the code names the AFID where AMD's table has it).
- corrected and informational: corrected by hardware, nothing to do: pass.
- a severity the record does not name: warn (fail closed: gpudiag cannot tell it is harmless).
"""

from __future__ import annotations

from typing import NamedTuple

from gpudiag.checks.ras.afid_catalog import ACTIONS, AFIDS, describe
from gpudiag.checks.verdicts import ACTION_RANK
from gpudiag.model import Status
from gpudiag.model.cper import CperRecord

_UNIDENTIFIED = range(31, 35)  # AMD's CPER-format and "Unidentified Error" AFIDs name no fault


class CperVerdict(NamedTuple):
    status: Status
    action: str
    fault_code: str
    description: str
    advice: str = ""  # what to do, where an AFID says more than the severity


_BY_SEVERITY = {
    "fatal": (Status.FAIL, "reset", "GPUDIAG-CPER-FATAL", "a fatal hardware error (CPER)"),
    "non-fatal-uncorrected": (Status.WARN, "watch", "GPUDIAG-CPER-UNCORRECTED",
                              "an uncorrected, contained hardware error (CPER)"),
    "corrected": (Status.PASS, "none", "", "a corrected hardware error (CPER)"),
    "informational": (Status.PASS, "none", "", "an informational hardware record (CPER)"),
}


def verdict(record: CperRecord) -> CperVerdict:
    status, action, code, description = _BY_SEVERITY.get(
        record.severity, (Status.WARN, "watch", "GPUDIAG-CPER-UNKNOWN", "a CPER record of no known severity"))
    if record.afids:
        description += ", " + "; ".join(describe(a) for a in record.afids)
    named = [a for a in record.afids if a in AFIDS and a not in _UNIDENTIFIED]
    if status == Status.FAIL and any(a in ACTIONS for a in named):
        afid = max((a for a in named if a in ACTIONS), key=lambda a: ACTION_RANK[ACTIONS[a][0]])
        action, advice = ACTIONS[afid]
        return CperVerdict(status, action, f"GPUDIAG-CPER-AFID-{afid}", description, advice)
    if status in (Status.FAIL, Status.WARN) and named:
        code = f"GPUDIAG-CPER-AFID-{named[0]}"
    return CperVerdict(status, action, code, description)


def worst(records: list[CperRecord]) -> CperVerdict:
    """The verdict of a GPU's records: the most severe of them (then the strongest action); a pass when none."""
    order = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}
    verdicts = [verdict(r) for r in records]
    return max(verdicts, key=lambda v: (order[v.status], ACTION_RANK[v.action]),
               default=CperVerdict(Status.PASS, "none", "", "no CPER record"))
