"""What an AMD CPER record means for its GPU (issue 32, item 9): a status, an action and a fault code per record,
from the record's own severity (gpudiag/model/cper.py).

- fatal: the GPU met an uncorrectable error it could not contain; amdgpu resets the GPU (MI300: a mode-1 reset of
  the hive) and AMD's device-metrics-exporter marks the GPU unhealthy (isFatalCPERActionable,
  pkg/amdgpu/gpuagent/gpuagent_health.go): fail, reset.
- non-fatal uncorrected ("recoverable", amdsmi's RAS page): an uncorrected error that was contained (poison
  consumed by one process): warn, watch.
- corrected and informational: corrected by hardware, nothing to do: pass.
- a severity the record does not name: warn (fail closed: gpudiag cannot tell it is harmless).
The AFIDs a record carries are shown with the finding; their meaning is AMD's AFID event list (AMD Field ID
70122), which gpudiag does not carry.
"""

from __future__ import annotations

from typing import NamedTuple

from gpudiag.model import Status
from gpudiag.model.cper import CperRecord


class CperVerdict(NamedTuple):
    status: Status
    action: str
    fault_code: str
    description: str


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
        description += f", AFID {', '.join(str(a) for a in record.afids)}"
    return CperVerdict(status, action, code, description)


def worst(records: list[CperRecord]) -> CperVerdict:
    """The verdict of a GPU's records: the most severe of them; a pass when there are none."""
    order = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}
    verdicts = [verdict(r) for r in records]
    return max(verdicts, key=lambda v: order[v.status], default=CperVerdict(Status.PASS, "none", "", "no CPER record"))
