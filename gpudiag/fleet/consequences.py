"""What follows from what in the fleet view: a node's findings that follow from another of its findings are said
under it, in one line, as `gpudiag check` says them (report/causes.py), not each as a finding with its paragraph (a
lost GPU was three findings a node, each with the same advice: issue 36, item 6). The JSON and JUnit keep every
finding; each JSON finding names what it follows from (`caused_by`).

From reports a finding's causes are the report's own `caused_by`. Prometheus carries no such thing, so the rule
that its series can decide is applied here: on a GPU that fails `inventory.gpus_visible` (it does not answer its
vendor library), the checks that could not decide, the kernel log's record of that GPU falling off the bus (Xid 79,
read from `gpudiag_gpu_xid_errors_total`) and the GPU's own silence (`gpudiag_device_up` 0) follow from it.
"""

from __future__ import annotations

from gpudiag.report.causes import GPUS_VISIBLE, LOSS_RECORDS


def reference(finding: dict) -> str:
    """A finding as report/causes.py names a result: `"<check> <bus ID | GPU n | node>"` ("" without a check)."""
    check = finding.get("check")
    if not check:
        return ""
    if finding.get("pci_bus_id"):
        return f"{check} {finding['pci_bus_id']}"
    return f"{check} GPU {finding['gpu']}" if finding.get("gpu") is not None else f"{check} node"


def link(findings: list[dict]) -> None:
    """Give every finding of one node its `caused_by`: the report's where it said (a list already), else (a
    Prometheus finding: None or absent) what the lost-GPU rule above finds, [] for a finding of its own."""
    lost = {f["gpu"]: reference(f) for f in findings
            if f.get("check") == GPUS_VISIBLE and f["kind"] == "fail" and f.get("gpu") is not None}
    for finding in findings:
        if isinstance(finding.get("caused_by"), list):
            continue
        root = lost.get(finding.get("gpu")) if finding.get("gpu") is not None else None
        follows = root is not None and finding.get("check") != GPUS_VISIBLE and (
            finding["kind"] in ("unknown", "silent") or finding.get("fault_code") in LOSS_RECORDS)
        finding["caused_by"] = [root] if follows else []


def under_causes(findings: list[dict]) -> dict[int, list[dict]]:
    """id(root) → the node's findings that follow from it. A finding's cause is the first of its `caused_by` that is
    another finding of this node; followed cause to cause, the chain must end at a finding with no cause (a root),
    or the finding stands on its own: a report that names causes in a circle (forged, or another gpudiag's) cannot
    hide a finding from the text. Nothing is dropped either way: the node's status counts every finding."""
    by_reference: dict[str, dict] = {}
    for finding in findings:
        by_reference.setdefault(reference(finding), finding)
    cause_of = {id(f): next((by_reference[r] for r in f.get("caused_by") or () if r in by_reference
                             and by_reference[r] is not f), None) for f in findings}
    under: dict[int, list[dict]] = {}
    for finding in findings:
        seen, cause = {id(finding)}, cause_of[id(finding)]
        while cause is not None and id(cause) not in seen and cause_of[id(cause)] is not None:
            seen.add(id(cause))
            cause = cause_of[id(cause)]
        if cause is not None and cause_of[id(cause)] is None:
            under.setdefault(id(cause), []).append(finding)
    return under
