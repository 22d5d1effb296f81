"""`gpudiag history --format text`: one line per journal entry, oldest first. Entries quote kernel-log text, which
anyone who can write to the kernel log shapes: every string passes through the checklist's clean()."""

from __future__ import annotations

import datetime

from gpudiag.report.text import clean, human_duration
from gpudiag.service.journal import parse_time


def render_history(entries: list[dict], source: str) -> str:
    zone = datetime.datetime.now().astimezone().strftime("%Z") or "local time"
    lines = [f"gpudiag history · {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} · from the {source} · "
             f"times in {zone}"]
    for entry in entries:
        lines.append(clean(_line(entry)))
    return "\n".join(lines) + "\n"


def _line(entry: dict) -> str:
    when = _local(entry.get("time"))
    gpu = entry.get("gpu")
    where = f"GPU {gpu}" if gpu is not None else (entry.get("pci_bus_id") or _nic(entry) or "node")
    kind, event = entry.get("kind"), entry.get("event")
    if kind == "check":
        what = f"{entry.get('check')} {_check_event(entry)}"
    elif kind in ("gpu_lost", "throttle") and event in ("begin", "change", "end"):
        name = "lost" if kind == "gpu_lost" else f"throttled ({entry.get('reason')})"
        what = {"begin": name, "change": name, "end": f"{name} ended"}[event]
        if event == "end":
            what += _lasted(entry) + (" — found again" if kind == "gpu_lost" else "")
    elif kind == "throttle":
        what = f"throttled ({entry.get('reason')}) for {entry.get('duration_seconds')} s between collections"
    elif kind == "xid":
        what = f"Xid {entry.get('code')}"
    elif kind == "screen":  # gpudiag screen's runs (docs/screening.md)
        what = f"screen {event}{_took(entry)}"
    else:
        what = str(kind).replace("_", " ")
    if event == "repeat":  # warn-level events counted, not stored one by one (gpudiag/service/keeper.py)
        what += f" ×{entry.get('count')} more, to {_local(entry.get('last_seen'))[11:]}"
        if kind == "throttle":
            what = f"throttled ({entry.get('reason')}) between collections ×{entry.get('count')} more, " \
                   f"{entry.get('duration_seconds')} s in all, to {_local(entry.get('last_seen'))[11:]}"
    message = entry.get("message")
    tail = f": {message}" if message and kind != "throttle" else ""
    return f"{when}  {where:<8} {what}{tail}"


def _local(text: object) -> str:
    """The entry's time on this node's clock; as written when it is no time (or none this clock can show: year 1
    in a zone east of UTC)."""
    moment = parse_time(text)
    try:
        return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else str(text)
    except (OverflowError, ValueError, OSError):
        return str(text)


def _check_event(entry: dict) -> str:
    event, status = entry.get("event"), entry.get("status")
    if event == "begin":
        return f"→ {status}"
    if event == "change":
        return f"{entry.get('previous')} → {status}"
    return f"recovered (was {status}{_lasted(entry)})"


def _took(entry: dict) -> str:
    seconds = entry.get("duration_seconds")
    return f" after {human_duration(seconds)}" if isinstance(seconds, (int, float)) else ""


def _lasted(entry: dict) -> str:
    seconds = entry.get("duration_seconds")
    return f", lasted {human_duration(seconds)}" if isinstance(seconds, (int, float)) else ""


def _nic(entry: dict) -> str:
    """`NIC mlx5_4 (0000:3b:00.0) port 1` for an entry about a NIC (gpudiag/report/subject.py's words), else ""."""
    nic = entry.get("nic")
    if not isinstance(nic, str) or not nic:
        return ""
    bus, port = entry.get("nic_pci_bus_id"), entry.get("port")
    return f"NIC {nic}" + (f" ({bus})" if isinstance(bus, str) and bus else "") + (
        f" port {port}" if isinstance(port, int) else "")
