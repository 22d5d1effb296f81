"""What a CPER record means for its GPU (issue 32, item 9): gpudiag/checks/ras/cper.py. The severities are
amdsmi's (amdsmi.h amdsmi_cper_sev_t; amdsmi's RAS page: 0 recoverable/non-fatal uncorrected, 1 fatal, 2
corrected, 3 informational); a fatal record makes the GPU unhealthy in AMD's device-metrics-exporter."""

from __future__ import annotations

from gpudiag.checks.ras.cper import verdict, worst
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
    assert "AFID 28 (Device Internal Errors: All Others, Uncorrected, Non-fatal); AFID 30 (" in verdict(
        record("fatal", [28, 30])).description
    assert worst([record("corrected"), record("fatal"), record("non-fatal-uncorrected")]).status is Status.FAIL
    assert worst([]).status is Status.PASS


def test_a_fatal_records_afid_gives_its_action_and_fault_code():
    """AMD's AFID table (gpudiag/checks/ras/afid_catalog.py): 19 is HBM at the bad-page retirement threshold, 14 a fatal
    PCIe AER error, 30 a fatal device-internal error; 34 ("Unidentified Error") names nothing."""
    assert verdict(record("fatal", [19]))[:3] == (Status.FAIL, "rma", "GPUDIAG-CPER-AFID-19")
    assert verdict(record("fatal", [14]))[:3] == (Status.FAIL, "reboot", "GPUDIAG-CPER-AFID-14")
    assert verdict(record("fatal", [28, 30]))[:3] == (Status.FAIL, "reset", "GPUDIAG-CPER-AFID-30")
    assert verdict(record("fatal", [34]))[:3] == (Status.FAIL, "reset", "GPUDIAG-CPER-FATAL")
    assert verdict(record("non-fatal-uncorrected", [22]))[:3] == (Status.WARN, "watch", "GPUDIAG-CPER-AFID-22")
    # the strongest action decides among a GPU's fatal records
    assert worst([record("fatal", [30]), record("fatal", [19]), record("fatal")]).fault_code == "GPUDIAG-CPER-AFID-19"
