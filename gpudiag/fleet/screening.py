"""Which GPUs of the fleet no idle-time screen has proven lately (docs/screening.md): never screened, or overdue.

From reports: each GPU's screen.coverage result (warn: overdue, or never verified past its period; pass with no
last verified screen: never screened yet, not due). From Prometheus: gpudiag_screen_overdue_seconds of every GPU,
and whether it has a gpudiag_screen_last_verified_timestamp_seconds at all. A node that does not screen has neither
and is not listed: screening is opt-in. An overdue GPU makes its node `warn` (GpudiagScreeningOverdue pages past a
day's grace); a GPU never screened but not yet due is listed and changes nothing.
"""

from __future__ import annotations

from typing import Any, Optional

from gpudiag.fleet.model import MAX_LISTED, NodeFacts, Unscreened

CHECK = "screen.coverage"
OVERDUE, NEVER = "screening", "unscreened"  # the findings' kinds
_ADVICE = ("Jobs kept the GPU busy through every idle window, or its screens keep ending early (`gpudiag history "
           "--gpu N` on the node): screen it in a maintenance window, `gpudiag screen --now --gpu N --idle-after 0` "
           "on the drained node.")


def note(facts: NodeFacts, gpu: Optional[int], bus_id: Optional[str], never: bool, overdue: bool, detail: str) -> None:
    if not (never or overdue) or (gpu is not None and not facts.known_gpu(gpu)):
        return
    if len(facts.unscreened) < MAX_LISTED:
        facts.unscreened.append(Unscreened(gpu, bus_id, never, overdue, detail))


def from_report(facts: NodeFacts, result: dict, gpu: Optional[int], bus_id: Optional[str]) -> None:
    """A report's screen.coverage result of one GPU."""
    observed = result.get("observed")
    if result.get("check") != CHECK or not isinstance(observed, dict) or "last_verified" not in observed:
        return
    never = observed.get("last_verified") is None
    message = result.get("message")
    note(facts, gpu, bus_id, never, result.get("status") == "warn", message if isinstance(message, str) else "")


def from_metrics(facts: NodeFacts, gpu: int, overdue_seconds: float, verified: bool) -> None:
    """A GPU's gpudiag_screen_overdue_seconds, and whether it has a last verified screen."""
    days = overdue_seconds / 86400
    detail = ("never screened" if not verified else "not verified lately") + (
        f"; {days:.1f} d past its screening period" if overdue_seconds > 0 else "; not due yet")
    note(facts, gpu, facts.bus_ids.get(gpu), not verified, overdue_seconds > 0, detail)


def findings(facts: NodeFacts) -> list[dict[str, Any]]:
    found = []
    for entry in facts.unscreened:
        what = ("never screened" if entry.never else "overdue") + ("" if entry.overdue or not entry.never
                                                                  else " (not due yet)")
        found.append({"kind": OVERDUE if entry.overdue else NEVER, "check": CHECK, "gpu": entry.gpu,
                      "pci_bus_id": entry.pci_bus_id or facts.bus_ids.get(entry.gpu), "screening": what,
                      "action": "watch" if entry.overdue else "none",
                      "fault_code": "GPUDIAG-SCREEN-OVERDUE" if entry.overdue else None,
                      "message": f"{what}: {entry.detail}" if entry.detail else what,
                      "remediation": _ADVICE if entry.overdue else ""})
    return found
