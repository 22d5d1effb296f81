"""ras.*: what an AMD GPU's own RAS records say (issue 32, item 9): the CPER records amdgpu keeps in its ring since
the driver loaded, as amdsmi hands them out (`amd-smi ras --cper`; gpudiag/probe/amdsmi/cper_entries.py).

ras.cper judges each GPU by its worst record (gpudiag/checks/ras/cper.py): a fatal record fails with the
action and fault code its AFIDs call for (gpudiag/checks/ras/afid_catalog.py, AMD's AFID table), an uncorrected one
warns, corrected and informational ones pass. A GPU whose records could not be read is unknown; one whose amdsmi or
kernel has no CPER ring, or whose ring only root may read, is a skip that says which. Records stay in the ring until
the driver reloads, as amdgpu's own error counts do (ecc.uncorrected), so a fatal record fails the GPU until then.
"""

from __future__ import annotations

from gpudiag.checks.common import device_check, failed, not_available, passed, skipped, unknown, warned
from gpudiag.checks.family import Family
from gpudiag.checks.ras.cper import verdict, worst
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, Status, Vendor
from gpudiag.model.cper import CperRecord

CPER = "ras.cper"
_TOPICS = ("cper",)
_SHOWN = 5  # records (and problems) listed in `observed`; the counts cover them all


def _record(record: CperRecord) -> dict:
    shown = {"severity": record.severity, "record_id": record.record_id, "notify": record.notify,
             "afids": list(record.afids), "timestamp": record.timestamp}
    return {key: value for key, value in shown.items() if value not in ("", [])}


def _cper(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    log = device.cper
    if log is None:
        if device.source != "amdsmi":
            return skipped(CPER, device, f"CPER records are read through amdsmi; {device.label} was read through "
                                         f"{device.source} (install amd-smi-lib to read them)")
        return not_available(CPER, device, "CPER records", _TOPICS)
    records = log.records
    counts = {severity: sum(r.severity == severity for r in records)
              for severity in ("fatal", "non-fatal-uncorrected", "corrected", "informational", "unknown")}
    judged = [r for r in records if verdict(r).status != Status.PASS]
    observed = {"records": len(records), **{k: v for k, v in counts.items() if v},
                "worst": [_record(r) for r in judged[-_SHOWN:]], "complete": log.complete,
                "problems": log.problems[:_SHOWN]}
    if log.source:
        observed["source"] = log.source  # root's record: this process may not read the ring itself
    expected = "no fatal or uncorrected CPER record since the driver loaded"
    confirm = f"Confirm with `amd-smi ras --cper -g {device.index}` (as root)."
    found = worst(records)
    if found.status in (Status.FAIL, Status.WARN):
        same = [r for r in records if verdict(r) == found]
        latest = same[-1]
        when = f" at {latest.timestamp}" if latest.timestamp else ""
        message = (f"{device.label}: {len(same)} CPER record(s) of {found.description}; the latest, record "
                   f"{latest.record_id or '?'}{when}")
        if found.status == Status.FAIL:
            advice = found.advice or _RESET_ADVICE
            result = failed(CPER, device, message, observed=observed, expected=expected,
                            remediation=f"{advice} {confirm}")
        else:
            result = warned(CPER, device, message, observed=observed, expected=expected,
                            remediation=f"A contained error (poison consumed by one process): watch for more, and "
                                        f"for ecc.* and memory.bad_pages on this GPU. {confirm}")
        return with_verdict(result, found.action, found.fault_code)
    if not log.complete:
        return unknown(CPER, device, f"{device.label}: the CPER records were read only in part "
                                     f"({len(records)} read, none fatal or uncorrected)",
                       observed=observed, expected=expected,
                       remediation=f"Read them again (a later amdsmi call failed: {'; '.join(log.problems[-1:])}). "
                                   f"{confirm}")
    what = f"{len(records)} CPER record(s), none fatal or uncorrected" if records else "no CPER record"
    return passed(CPER, device, f"{device.label}: {what}", observed=observed, expected=expected)


_RESET_ADVICE = ("A fatal hardware error: drain the GPU and reset it (`amd-smi reset --gpureset -g N`, or reboot if "
                 "the reset fails); one that comes back is an RMA candidate (open it with the CPER records).")

CHECKS = (
    device_check(CPER, "no fatal or uncorrected CPER record since the driver loaded (AMD; amd-smi ras --cper)",
                 _cper, vendor=Vendor.AMD),
)

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN
FAMILY = Family(
    "ras", order=42, checks=CHECKS,
    # Per-record verdicts come from the record's severity and AFIDs (checks/ras/cper.py); these are the
    # fallback and the unreadable case.
    verdicts={CPER: {F: ("reset", "GPUDIAG-CPER-FATAL"), W: ("watch", "GPUDIAG-CPER-UNCORRECTED"),
                     U: ("watch", "GPUDIAG-CPER-UNREADABLE")}},
    reference={CPER: (
        "amdgpu's CPER records through amdsmi_get_gpu_cper_entries (debugfs amdgpu_ring_cper: root, Linux 6.15+), "
        "each record's severity and the AMD Field IDs amdsmi decodes from it (AMD's AFID table)",
        "A fatal record: drain and reset the GPU, or what its AFID calls for (a cold boot for a boot-time or PCIe "
        "failure, an RMA at the HBM bad-page threshold); an uncorrected one: watch.")},
    probe_parts={"ras": ("ras.",)},
    note="AMD Instinct GPUs (MI300 series and later) keep a UEFI CPER record of every RAS event since the driver "
         "loaded; `amd-smi ras --cper` shows them.",
)
