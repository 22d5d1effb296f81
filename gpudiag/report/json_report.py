"""The versioned JSON report (docs/architecture.md, "The outward contract")."""

from __future__ import annotations

import json
from typing import Optional

from gpudiag.model import REPORT_SCHEMA_VERSION, CheckResult, NodeSnapshot, to_dict
from gpudiag.report.summary import summarize
from gpudiag.report.causes import caused_by


def report_dict(snapshot: NodeSnapshot, results: list[CheckResult], collected_by: str = "direct") -> dict:
    summary = summarize(results)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "hostname": snapshot.hostname or "",
        "status": summary.status.value,
        "collected_by": collected_by,  # how the node was read: direct | service | replay
        "collected_at": snapshot.collected_at,
        "gpudiag_version": snapshot.gpudiag_version,
        "summary": {status.value: count for status, count in sorted(summary.counts.items(), key=lambda i: i[0].value)},
        # every result, each with the results it follows from (report/causes.py; [] for a finding of its own)
        "results": [result_dict(result, causes) for result, causes in zip(results, caused_by(results))],
    }


def result_dict(result: CheckResult, follows_from: Optional[list[str]] = None) -> dict:
    """One result, keys in the documented order; `since` only where the service said when the state began.
    `caused_by`: the results this one follows from, as `"<check> <bus ID | GPU n | node>"` (report/causes.py)."""
    out = {
        "check": result.check,
        "status": result.status.value,
        "device": to_dict(result.device),
        "observed": to_dict(result.observed),
        "expected": to_dict(result.expected),
        "message": result.message,
        "remediation": result.remediation,
        "action": result.action or "none",  # what automation does: checks/verdicts.py ACTIONS
        "fault_code": result.fault_code,
        "caused_by": list(follows_from or []),
    }
    if result.since is not None:
        out["since"] = result.since
    return out


def render_json(snapshot: NodeSnapshot, results: list[CheckResult], collected_by: str = "direct") -> str:
    return json.dumps(report_dict(snapshot, results, collected_by), indent=2, sort_keys=False, default=str) + "\n"
