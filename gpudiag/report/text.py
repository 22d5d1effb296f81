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

from gpudiag.model import CheckResult, NodeSnapshot, Status
from gpudiag.report import family_of, summarize, worst_first

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
    otherwise rewrite the operator's terminal."""
    results = [_cleaned(r) for r in results]
    paint = _painter(color)
    lines = _header(snapshot, results, paint, collected_by)
    attention = [r for r in worst_first(results) if r.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)]
    for group in _same_finding(attention):
        lines.append("")
        lines.extend(_detailed(group, paint))
    lines.append("")
    lines.extend(_passed_block(results, verbose, paint))
    return "\n".join(lines) + "\n"


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
    if result.device is None:
        return "node"
    device = result.device
    return f"GPU {device.index} {device.pci_bus_id or ''}".rstrip()


def _same_finding(results: list[CheckResult]) -> list[list[CheckResult]]:
    """Results that say the same thing about the same device, differing only in the check (a GPU that stopped
    answering makes every per-device check unknown for one reason): shown once, naming every check."""
    groups: dict[tuple, list[CheckResult]] = {}
    for result in results:
        key = (result.status, _where(result), result.message, _compact(result.observed), _compact(result.expected),
               result.remediation)
        groups.setdefault(key, []).append(result)
    return list(groups.values())


def _detailed(group: list[CheckResult], paint) -> list[str]:
    result = group[0]
    checks = ", ".join(r.check for r in group)
    head = result.check if len(group) == 1 else f"{len(group)} checks"
    lines = [f"{paint(result.status, _TAGS[result.status])}  {head}  {_where(result)}"]
    if len(group) > 1:
        lines.extend(textwrap.wrap(f"checks: {checks}", WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT))
    lines.extend(textwrap.wrap(result.message, WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT) or [])
    seen = []
    if result.observed is not None:
        seen.append(f"observed: {_compact(result.observed)}")
    if result.expected is not None:
        seen.append(f"expected: {_compact(result.expected)}")
    if seen:
        lines.extend(textwrap.wrap("   ".join(seen), WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT))
    since = min((r.since for r in group if r.since), default=None)
    if since:
        lines.append(_INDENT + since_phrase(result.status, since))
    if result.remediation:
        lines.extend(
            textwrap.wrap(result.remediation, WIDTH, initial_indent=_INDENT + "→ ", subsequent_indent=_INDENT + "  ")
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
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(", ", ": "))
    text = clean(text)  # a str is printed as it is (json.dumps output is ASCII with escapes already)
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
                lines.append(f"{paint(result.status, _TAGS[result.status])}  {result.check}  {_where(result)}: {result.message}")
    return lines
