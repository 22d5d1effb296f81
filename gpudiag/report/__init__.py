"""Renderers of check results: the text checklist, the JSON report and JUnit XML.

All three share the verdict and ordering defined here, so they can never disagree about a node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpudiag.model import STATUS_SEVERITY, CheckResult, NodeSnapshot, Status


@dataclass(frozen=True)
class Summary:
    """How many results of each status, and the verdict they add up to."""
    status: Status  # the node's verdict
    counts: dict[Status, int]

    @property
    def failed(self) -> bool:
        return self.counts.get(Status.FAIL, 0) > 0


def node_status(results: list[CheckResult]) -> Status:
    """The worst result decides; a node with nothing but skips is `unknown`, not `pass`."""
    judged = [r.status for r in results if r.status is not Status.SKIP]
    if not judged:
        return Status.UNKNOWN
    return max(judged, key=STATUS_SEVERITY.__getitem__)


def summarize(results: list[CheckResult]) -> Summary:
    return Summary(node_status(results), dict(Counter(r.status for r in results)))


def family_of(check_id: str) -> str:
    return check_id.split(".", 1)[0]


def worst_first(results: list[CheckResult]) -> list[CheckResult]:
    """Failures first, then unknowns and warnings; stable within a status (family order, then GPU index)."""
    return sorted(results, key=lambda r: -STATUS_SEVERITY[r.status])


def render(fmt: str, snapshot: NodeSnapshot, results: list[CheckResult], collected_by: str = "direct",
           **options: object) -> str:
    """`collected_by`: how the node was read, direct | service | replay (the JSON key and the text header)."""
    if fmt == "json":
        from gpudiag.report.json_report import render_json

        return render_json(snapshot, results, collected_by)
    if fmt == "junit":
        from gpudiag.report.junit import render_junit

        return render_junit(snapshot, results)
    from gpudiag.report.text import render_text

    return render_text(snapshot, results, collected_by=collected_by, **options)  # type: ignore[arg-type]
