"""The verdict and ordering every renderer shares (gpudiag/report/__init__.py re-exports them), in a module of its
own so that the renderers, which the package imports lazily, need not import the package back."""

from __future__ import annotations

from collections import Counter

from gpudiag.model import STATUS_SEVERITY, CheckResult, Status
from gpudiag.model.records import dataclass


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
