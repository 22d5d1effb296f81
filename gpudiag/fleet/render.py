"""The fleet verdict three ways: a text summary for the operator, JSON (schema_version 1, docs/fleet.md) for
automation, JUnit (a testsuite per node) for acceptance pipelines. All three read the same FleetVerdict.

Node names, messages and values can come from reports anyone on a node could have written: the text is cleaned of
terminal controls (gpudiag.report.text.clean) and the XML of characters XML 1.0 cannot carry (report.junit).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from typing import TextIO

from gpudiag.fleet.consequences import under_causes
from gpudiag.fleet.model import FLEET_SCHEMA_VERSION, NODE_STATUSES, FleetVerdict, NodeVerdict
from gpudiag.report.junit import _xml as xml_text
from gpudiag.report.grouping import gpu_ranges
from gpudiag.report.text import clean


def render(fmt: str, verdict: FleetVerdict) -> str:
    return {"json": render_json, "junit": render_junit}.get(fmt, render_text)(verdict)


def write(fmt: str, verdict: FleetVerdict, out: TextIO) -> None:
    """render() to `out`; JSON piece by piece (json.dumps with an indent would hold every piece of a large verdict
    in a list before joining them: several times the output's size)."""
    if fmt == "json":
        json.dump(as_dict(verdict), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(fmt, verdict))


def counts(verdict: FleetVerdict) -> dict[str, int]:
    found = Counter(n.status for n in verdict.nodes)
    return {status: found[status] for status in NODE_STATUSES if found[status]}


def as_dict(verdict: FleetVerdict) -> dict:
    return {
        "schema_version": FLEET_SCHEMA_VERSION,
        "status": verdict.status,
        "source": verdict.source,
        "complete": verdict.complete,
        "threshold": verdict.threshold,
        "summary": {"nodes": len(verdict.nodes), **counts(verdict)},
        "nodes": [{"node": n.node, "status": n.status, "findings": n.findings} for n in verdict.nodes],
        "drift": verdict.drift,
        "outliers": verdict.outliers,
        "warnings": verdict.warnings,
    }


def render_json(verdict: FleetVerdict) -> str:
    return json.dumps(as_dict(verdict), indent=2, ensure_ascii=False) + "\n"


# -- text -------------------------------------------------------------------------------------------------------

_SECTIONS = (("fail", "FAILING", ("fail", "unknown")), ("silent", "SILENT", ("silent",)),
             ("drift", "DRIFTING", ("drift",)), ("lag", "LAGGING", ("lag",)),
             ("unknown", "NOT SHOWN SOUND", ("unread",)), ("conflict", "CONFLICTING REPORTS", ("conflict",)),
             ("screening", "NOT PROVEN BY A SCREEN LATELY", ("screening", "unscreened")))


def _where(finding: dict) -> str:
    gpus = finding.get("gpus")
    if gpus and len(gpus) > 1:
        return f" GPUs {', '.join(map(str, gpus))}"
    if finding.get("gpu") is not None:
        bus = f" ({finding['pci_bus_id']})" if finding.get("pci_bus_id") else ""
        return f" GPU {finding['gpu']}{bus}"
    return f" {finding['pci_bus_id']}" if finding.get("pci_bus_id") else ""


# Where a remediation names its finding's check (`gpudiag check --only pcie.link_width`, the Prometheus source's):
# findings alike but for their check are one line, the command naming them all.
_CHECK = "\x00check\x00"


def _alike(finding: dict) -> tuple:
    check = finding.get("check") or ""
    advice = finding.get("remediation") or ""
    return (finding["kind"], finding["message"], finding["action"], advice.replace(check, _CHECK) if check else advice,
            finding.get("more"), check == "")


def _grouped(findings: list[dict]) -> list[tuple[list[str], list[dict]]]:
    """One node's findings as (checks, findings) groups: alike findings (_alike) of the same checks on several GPUs,
    and of several checks on the same GPUs, are one group (a lost GPU's 27 undecided checks; one check failing on
    each of eight GPUs); a group never claims a check on a GPU it was not found on."""
    by_key: dict[tuple, dict[str, list[dict]]] = {}
    for finding in findings:
        by_key.setdefault(_alike(finding), {}).setdefault(_what(finding), []).append(finding)
    groups: list[tuple[list[str], list[dict]]] = []
    for per_check in by_key.values():
        by_gpus: dict[tuple, tuple[list[str], list[dict]]] = {}
        for check, found in per_check.items():
            gpus = tuple(dict.fromkeys((f.get("gpu"), f.get("pci_bus_id")) for f in found))
            if gpus not in by_gpus:
                by_gpus[gpus] = ([], [])
                groups.append(by_gpus[gpus])
            by_gpus[gpus][0].append(check)
            by_gpus[gpus][1].extend(found)
    return sorted(groups, key=lambda group: group[1][0]["kind"] != "fail")  # what failed leads, then the undecided


def _group_where(found: list[dict]) -> str:
    gpus = list(dict.fromkeys((f.get("gpu"), f.get("pci_bus_id")) for f in found))
    if len(gpus) == 1 or any(gpu is None for gpu, _ in gpus):
        return _where(found[0])
    buses = [bus for _, bus in gpus if bus]
    listed = f" ({', '.join(buses)})" if buses and len(buses) <= 3 else ""
    return f" GPUs {gpu_ranges([gpu for gpu, _ in gpus])}{listed}"


def _families(checks: list[str]) -> list[str]:
    return list(dict.fromkeys(c.split(".", 1)[0] for c in checks))


def _group_advice(checks: list[str], finding: dict) -> str:
    """The advice of a group: a command naming the finding's check names them all (families, past three), as
    `gpudiag check --only` takes them."""
    advice = finding.get("remediation") or ""
    check = finding.get("check")
    if not check or len(checks) == 1:
        return advice
    return advice.replace(check, ",".join(checks if len(checks) <= 3 else _families(checks)))


def render_text(verdict: FleetVerdict) -> str:
    tally = ", ".join(f"{count} {status}" for status, count in counts(verdict).items())
    incomplete = "" if verdict.complete else " INCOMPLETE (see SOURCE)"
    lines = [f"gpudiag fleet: {verdict.status.upper()}{incomplete}: {len(verdict.nodes)} node(s): {tally} "
             f"({verdict.source})"]
    under = {node.node: under_causes(node.findings) for node in verdict.nodes}
    following = {id(f) for found in under.values() for after in found.values() for f in after}
    for _, title, kinds in _SECTIONS:
        rows = [(node, [f for f in node.findings if f["kind"] in kinds and id(f) not in following])
                for node in verdict.nodes]
        rows = [(node, found) for node, found in rows if found]
        if not rows:
            continue
        lines += ["", f"{title} ({len(rows)} node(s))"]
        advice_given: set[str] = set()
        for node, found in rows:
            for checks, group in _grouped(found):
                finding = group[0]
                lines.append(f"  {node.node}{_group_where(group)}: {_said_what(checks)}: {finding['message']} -> "
                             f"{finding['action']}")
                advice = _group_advice(checks, finding)
                if advice and (finding["kind"] in ("fail", "unknown") or advice not in advice_given):
                    lines.append(f"      {advice}")
                    advice_given.add(advice)
                after = [f for member in group for f in under[node.node].get(id(member), [])]
                if after:
                    lines.append(f"      because of it: {_consequences(after, group)}")
    if verdict.drift:
        lines += ["", "DRIFT BY MODEL"]
        for group in verdict.drift:
            expected = (f"{group['expected']} on {group['expected_count']}" if group["expected"] is not None
                        else "no majority")
            others = "; ".join(f"{m['value']} on {_members(m['nodes'])}" for m in group["minority"])
            lines.append(f"  {group['model']}: {group['description']}: {expected}; {others}")
    warned = [n.node for n in verdict.nodes if n.status == "warn"]
    if warned:
        lines += ["", f"WARNING ({len(warned)} node(s), no action needed now): {_names(warned)}"]
    if verdict.warnings:
        lines += ["", "SOURCE"] + [f"  {w}" for w in verdict.warnings]
    return "\n".join(clean(line) for line in lines) + "\n"


def _said_what(checks: list[str]) -> str:
    return checks[0] if len(checks) == 1 else f"{len(checks)} checks ({', '.join(_families(checks))})"


_TAGS = {"fail": "FAIL", "unknown": "UNKN", "silent": "SILENT"}


def _consequences(after: list[dict], cause: list[dict]) -> str:
    """What follows from a cause, in one line: each group of alike consequences by its status and checks (and where,
    when it is not where the cause is); `gpudiag check` on the node says each in full."""
    said = []
    for checks, group in _grouped(after):
        where = _group_where(group)
        where = f" ({where.strip() or 'node'})" if where != _group_where(cause) else ""
        what = _said_what(checks) if group[0].get("check") else group[0]["message"]
        said.append(f"{_TAGS.get(group[0]['kind'], group[0]['kind'].upper())} {what}{where}")
    return "; ".join(said)


def _members(members: list[dict], limit: int = 10) -> str:
    named = [m["node"] + (f" (GPU {', '.join(map(str, m['gpus']))})" if m.get("gpus") else "") for m in members]
    return _names(named, limit)


def _names(names: list[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _what(finding: dict) -> str:
    """What a finding is about: the check, the drifting property, the lagging figure, or its kind."""
    if finding.get("more"):
        return "more"
    return finding.get("check") or finding.get("property") or finding.get("figure") or finding["kind"]


# -- JUnit ------------------------------------------------------------------------------------------------------

# A finding's JUnit element: a failure, an error where gpudiag could not see (a check that could not decide, a part
# of the node not read), none for a note (conflicting reports: the worst was judged).
_FAILING_KINDS = {"fail": "failure", "silent": "failure", "drift": "failure", "lag": "failure", "unknown": "error",
                  "unread": "error", "conflict": None, "screening": None, "unscreened": None}


def _case_name(finding: dict) -> str:
    what = _what(finding)
    what = f"{finding['kind']}.{what}" if finding["kind"] in ("drift", "lag") else what
    return what + (f"[{_where(finding).strip()}]" if _where(finding) else "")


def _suite(root: ET.Element, node: NodeVerdict) -> None:
    findings = node.findings
    suite = ET.SubElement(root, "testsuite", name=xml_text(f"gpudiag.fleet.{node.node}"), hostname=xml_text(node.node),
                          tests=str(max(1, len(findings))), time="0",
                          failures=str(sum(_FAILING_KINDS[f["kind"]] == "failure" for f in findings)),
                          errors=str(sum(_FAILING_KINDS[f["kind"]] == "error" for f in findings)), skipped="0")
    if not findings:
        case = ET.SubElement(suite, "testcase", classname="gpudiag.fleet", name="sound", time="0")
        if node.status == "warn":
            ET.SubElement(case, "system-out").text = "WARN: some checks warned on this node"
        return
    for finding in findings:
        case = ET.SubElement(suite, "testcase", classname="gpudiag.fleet", name=xml_text(_case_name(finding)),
                             time="0")
        text = "\n".join(p for p in (finding["message"], finding.get("remediation") or "",
                                     f"action: {finding['action']}") if p)
        element = _FAILING_KINDS[finding["kind"]]
        if element is None:
            ET.SubElement(case, "system-out").text = xml_text(text)
            continue
        ET.SubElement(case, element, message=xml_text(finding["message"]),
                      type=xml_text(finding.get("fault_code") or finding["kind"])).text = xml_text(text)


def render_junit(verdict: FleetVerdict) -> str:
    root = ET.Element("testsuites", name="gpudiag.fleet")
    for node in verdict.nodes:
        _suite(root, node)
    totals = {key: sum(int(s.get(key)) for s in root) for key in ("tests", "failures", "errors")}
    root.attrib.update({k: str(v) for k, v in totals.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
