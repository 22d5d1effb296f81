"""What a CPER record means for its GPU (issue 32, item 9): gpudiag/checks/kernel_log/cper.py. The severities are
amdsmi's (amdsmi.h amdsmi_cper_sev_t; amdsmi's RAS page: 0 recoverable/non-fatal uncorrected, 1 fatal, 2
corrected, 3 informational); a fatal record makes the GPU unhealthy in AMD's device-metrics-exporter."""

from __future__ import annotations

from gpudiag.checks.kernel_log.cper import verdict, worst
from gpudiag.model import Status
from gpudiag.model.cper import CperRecord, CperSection


def record(severity: str, afids=()) -> CperRecord:
    return CperRecord(severity, "1:1", "MCE", (CperSection("crashdump", severity),), tuple(afids))


def test_each_severity_has_its_status_action_and_fault_code():
    got = {s: verdict(record(s))[:3] for s in ("fatal", "non-fatal-uncorrected", "corrected", "informational", "?")}
    assert got == {"fatal": (Status.FAIL, "reset", "GPUDIAG-CPER-FATAL"),
                   "non-fatal-uncorrected": (Status.WARN, "watch", "GPUDIAG-CPER-UNCORRECTED"),
                   "corrected": (Status.PASS, "none", ""), "informational": (Status.PASS, "none", ""),
                   "?": (Status.WARN, "watch", "GPUDIAG-CPER-UNKNOWN")}


def test_the_afids_are_shown_and_the_worst_record_decides():
    assert "AFID 28, 30" in verdict(record("fatal", [28, 30])).description
    assert worst([record("corrected"), record("fatal"), record("non-fatal-uncorrected")]).status is Status.FAIL
    assert worst([]).status is Status.PASS
