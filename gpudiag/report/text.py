"""The troubleshooting checklist for a terminal.

Built for a tired operator: the verdict first, then what failed (with what was seen, what was expected and what to
do), then warnings and unknowns; the passing checks fold into one line per family unless `verbose`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import textwrap
from collections import Counter, defaultdict
from typing import Any, Optional

from gpudiag.model import STATUS_SEVERITY, CheckResult, NodeSnapshot, Status
from gpudiag.report import causes, grouping
from gpudiag.report.summary import family_of, summarize

WIDTH = 100
_INDENT = " " * 6
_COLORS = {Status.FAIL: "31", Status.WARN: "33", Status.UNKNOWN: "35", Status.PASS: "32", Status.SKIP: "2"}
_TAGS = {Status.FAIL: "FAIL", Status.WARN: "WARN", Status.UNKNOWN: "UNKN", Status.PASS: "PASS", Status.SKIP: "SKIP"}

# What a terminal would act on instead of printing (ECMA-48): a CSI sequence (`ESC [ params final`, or 8-bit CSI)
# whole; a two-byte `ESC x`, which also takes the introducer off an OSC/DCS/APC string (`ESC ]0;title BEL`: the
# payload stays visible as text, so a crafted name cannot swallow the names after it); then any single C0 control
# (tab and newline too: a newline in a process name would forge a checklist line), DEL, C1 control, and the
# bidirectional overrides that reorder what is shown (CVE-2021-42574, "Trojan Source").
_UNSAFE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)
REPLACEMENT = "\ufffd"


def clean(text: str) -> str:
    """`text` safe to print on a terminal: each control character or escape sequence becomes one U+FFFD, so the
    operator sees that something was there; printable Unicode (a model name, a user's name) is kept."""
    return _UNSAFE.sub(REPLACEMENT, text)


def _cleaned(result: CheckResult) -> CheckResult:
    """The strings of a result that can come from the node (process names and users, model names, log text in
    messages, bus IDs), cleaned; observed and expected values are cleaned by _compact."""
    device = result.device
    if device is not None and device.pci_bus_id is not None:
        device = dataclasses.replace(device, pci_bus_id=clean(device.pci_bus_id))
    return dataclasses.replace(result, check=clean(result.check), message=clean(result.message),
                               remediation=clean(result.remediation), device=device)


def render_text(snapshot: NodeSnapshot, results: list[CheckResult], verbose: bool = False, color: bool = False,
                collected_by: str = "direct") -> str:
    """The checklist. Every string that comes from the node passes through clean() (the results here, the header
    in _header and _inventory_line, observed/expected in _compact): a GPU process named with escape sequences could
    otherwise rewrite the operator's terminal.

    By default a finding is said once (report/grouping.py: alike on several checks or GPUs, one block) and leads
    with its cause (report/causes.py: what follows from it is a line under it); `verbose` shows every result in
    full, each GPU on its own."""
    results = [_cleaned(r) for r in results]
    paint = _painter(color)
    lines = _header(snapshot, results, paint, collected_by)
    lines.extend(_attention(results, verbose, paint))
    lines.append("")
    lines.extend(_passed_block(results, verbose, paint))
    return "\n".join(lines) + "\n"


def _attention(results: list[CheckResult], verbose: bool, paint) -> list[str]:
    """The blocks of the results that need attention, worst first, each cause with what follows from it."""
    roots = causes.follows_from(results)
    at = {id(r): p for p, r in enumerate(results)}
    order = sorted((p for p, r in enumerate(results) if r.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)),
                   key=lambda p: -STATUS_SEVERITY[results[p].status])
    lines: list[str] = []
    if verbose:  # the long form: each GPU's results on their own, what follows from what said in words
        for found in grouping.group([results[p] for p in order], across_gpus=False):
            block = _detailed(found, paint)
            firsts = {causes.reference(results[r]) for m in found.members for r in roots[at[id(m)]]}
            if firsts:
                block[1:1] = _wrapped("follows from " + ", ".join(sorted(firsts)))
            lines += ["", *block]
        return lines
    # A result that says what its cause says (the same runtime error on every load test) joins the cause's block;
    # the others are lines under it.
    alike = {p for p in order if roots[p] and grouping.same_finding(results[p], results[roots[p][0]])}
    following = {root: [p for p in after if p not in alike] for root, after in causes.consequences(results).items()}
    for found in grouping.group([results[p] for p in order if not roots[p] or p in alike]):
        after = [results[q] for m in found.members for q in following.get(at[id(m)], [])]
        lines += ["", *_detailed(found, paint), *_consequences(after, found, paint)]
    return lines


def _wrapped(text: str, indent: str = _INDENT) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent)


def _consequences(after: list[CheckResult], root: grouping.Group, paint) -> list[str]:
    """A line for each thing that follows from a finding: its status, its checks, what it says (and where, when
    that is not where the finding is)."""
    if not after:
        return []
    lines = [f"{_INDENT}because of it (--verbose shows each in full):"]
    for found in grouping.group(sorted(after, key=lambda r: -STATUS_SEVERITY[r.status])):
        where = "" if found.subjects == root.subjects else f" ({found.where()})"
        if len(found.checks) > 1:
            said = f"{len(found.checks)} checks{where}: " + ", ".join(dict.fromkeys(family_of(c) for c in found.checks))
        else:
            said = f"{found.checks[0]}{where}: {found.said()}"
        tag = _TAGS[found.status]
        wrapped = textwrap.wrap(said, WIDTH, initial_indent=f"{_INDENT}  {tag}  ", subsequent_indent=_INDENT + " " * 8)
        wrapped[0] = wrapped[0].replace(tag, paint(found.status, tag), 1)
        lines.extend(wrapped)
    return lines


def _painter(color: bool):
    def paint(status: Status, text: str) -> str:
        return f"\x1b[{_COLORS[status]}m{text}\x1b[0m" if color else text

    return paint


def _header(snapshot: NodeSnapshot, results: list[CheckResult], paint, collected_by: str) -> list[str]:
    summary = summarize(results)
    head = f"gpudiag {snapshot.gpudiag_version or ''} · {snapshot.hostname or 'unknown host'}"
    if snapshot.collected_at:
        head += f" · {snapshot.collected_at}"
    if snapshot.duration_seconds is not None:
        head += f" · probed in {snapshot.duration_seconds:.2f} s"
    head += f" · collected by {collected_by}"
    lines = [clean(head.replace("  ", " "))]
    lines.append(f"GPUs: {_inventory_line(snapshot)}")
    counts = ", ".join(
        f"{summary.counts[s]} {label}"
        for s, label in (
            (Status.FAIL, "failed"),
            (Status.UNKNOWN, "unknown"),
            (Status.WARN, "warnings" if summary.counts.get(Status.WARN, 0) != 1 else "warning"),
            (Status.PASS, "passed"),
            (Status.SKIP, "skipped"),
        )
        if summary.counts.get(s)
    )
    lines.append(f"Verdict: {paint(summary.status, summary.status.value.upper())} — {counts or 'no checks ran'}")
    return lines


def _inventory_line(snapshot: NodeSnapshot) -> str:
    models = Counter(d.name or "unknown model" for d in snapshot.devices if not d.is_logical_partition)
    gpus = ", ".join(f"{n} × {m}" for m, n in models.items()) or "none seen by a vendor library"
    if len(snapshot.pci_gpus) != sum(models.values()):
        gpus += f" ({len(snapshot.pci_gpus)} on the PCI bus)"
    stacks = []
    for backend in snapshot.backends:
        if backend.available:
            parts = [f"driver {backend.driver_version}" if backend.driver_version else None]
            if backend.runtime_version:
                parts.append(("CUDA " if backend.vendor.value == "nvidia" else "ROCm ") + backend.runtime_version)
            stacks.append(f"{backend.name}: " + ", ".join(p for p in parts if p))
    return clean(gpus + (f" — {'; '.join(stacks)}" if stacks else ""))


def _where(result: CheckResult) -> str:
    device = result.device
    return "node" if device is None else f"GPU {device.index} {device.pci_bus_id or ''}".rstrip()


def _detailed(found: grouping.Group, paint) -> list[str]:
    result = found.first
    head = found.checks[0] if len(found.checks) == 1 else f"{len(found.checks)} checks"
    lines = [f"{paint(found.status, _TAGS[found.status])}  {head}  {found.where()}"]
    if len(found.checks) > 1:
        lines.extend(_wrapped(f"checks: {', '.join(found.checks)}"))
    if found.many_gpus:
        lines.extend(_wrapped(f"bus IDs: {', '.join(found.bus_ids())}"))
    lines.extend(_wrapped(found.text("message")))
    seen = []
    for name in ("observed", "expected"):
        value = found.value(name)
        if value is not None:
            seen.append(f"{name}: {_compact(value)}")
    if seen:
        lines.extend(_wrapped("   ".join(seen)))
    since = min((r.since for r in found.members if r.since), default=None)
    if since:
        lines.append(_INDENT + since_phrase(result.status, since))
    if result.remediation:
        lines.extend(
            textwrap.wrap(found.text("remediation"), WIDTH, initial_indent=_INDENT + "→ ",
                          subsequent_indent=_INDENT + "  ")
        )
    return lines


_STATE_WORDS = {Status.FAIL: "failing", Status.WARN: "warning", Status.UNKNOWN: "unknown"}


def since_phrase(status: Status, since: str, now: Optional[datetime.datetime] = None) -> str:
    """"failing since 02:14, 6 h": the local time the service first saw this state (with the date when it was
    not today) and how long ago that is."""
    try:
        moment = datetime.datetime.fromisoformat(since)
    except ValueError:
        return clean(f"{_STATE_WORDS.get(status, status.value)} since {since}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    local = moment.astimezone()
    when = local.strftime("%H:%M") if local.date() == now.astimezone().date() else local.strftime("%Y-%m-%d %H:%M")
    return f"{_STATE_WORDS.get(status, status.value)} since {when}, {human_duration((now - moment).total_seconds())}"


def human_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _compact(value: Any, limit: int = 200) -> str:
    # Unicode as itself (`nvlink ×18`, not `nvlink \u00d718`); clean() then takes out what a terminal would act on.
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(", ", ": "),
                                                           ensure_ascii=False)
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _passed_block(results: list[CheckResult], verbose: bool, paint) -> list[str]:
    by_family: dict[str, Counter] = defaultdict(Counter)
    skip_reasons: dict[str, set[str]] = defaultdict(set)
    for result in results:
        by_family[family_of(result.check)][result.status] += 1
        if result.status is Status.SKIP:
            skip_reasons[family_of(result.check)].add(result.message)
    lines = ["Checks by family:"]
    width = max((len(f) for f in by_family), default=0)
    for family, counts in by_family.items():
        if set(counts) == {Status.SKIP} and len(skip_reasons[family]) == 1:
            # A family not asked for (load tests, a baseline) says once why, and how to ask for it.
            lines.append(f"  {family.ljust(width)}  {paint(Status.SKIP, next(iter(skip_reasons[family])))}")
            continue
        parts = [
            paint(status, f"{counts[status]} {label}")
            for status, label in (
                (Status.PASS, "passed"),
                (Status.FAIL, "failed"),
                (Status.UNKNOWN, "unknown"),
                (Status.WARN, "warn"),
                (Status.SKIP, "skipped"),
            )
            if counts[status]
        ]
        lines.append(f"  {family.ljust(width)}  " + ", ".join(parts))
    if verbose:
        lines.append("")
        for result in results:
            if result.status in (Status.PASS, Status.SKIP):
                lines.append(f"{paint(result.status, _TAGS[result.status])}  {result.check}  {_where(result)}: "
                             f"{result.message}")
    return lines
