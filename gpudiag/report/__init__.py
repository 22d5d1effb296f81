"""Renderers of check results: the text checklist, the JSON report and JUnit XML.

All three share the verdict and ordering defined here, so they can never disagree about a node.
"""

from __future__ import annotations

from gpudiag.model import CheckResult, NodeSnapshot
from gpudiag.report.summary import Summary, family_of, node_status, summarize, worst_first

__all__ = ["Summary", "family_of", "node_status", "render", "summarize", "worst_first"]


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
