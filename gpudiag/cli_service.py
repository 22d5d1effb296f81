"""`gpudiag check` through the running service, and `gpudiag history` (docs/service.md).

`check` asks the service on its socket for a collection (at most a second old) when one answers, and judges it
exactly as it would judge its own probe: the same run_checks with the check's own profile and selection. Nothing
here imports the probe layer on that path, so pynvml and amdsmi are never loaded.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from enum import Enum
from pathlib import Path
from typing import Callable, Optional

import typer

from gpudiag.exitcodes import ExitCode
from gpudiag.cli import RootOption, SocketOption, UsageProblem, app

log = logging.getLogger("gpudiag")

DIRECT, SERVICE = "direct", "service"


def obtain(root: Path, socket: Optional[Path], timeout: Optional[float], level: int, direct: bool,
           kernel_log: Optional[Path], probe: Callable[[], object],
           stress_seconds: Optional[float] = None) -> tuple[object, str, list]:
    """(the node's snapshot, how it was collected, the service's open check episodes for `since`): from the
    service when it answers, else `probe()` (a collection of our own)."""
    if direct or kernel_log is not None:  # the service reads the live log, not the file given
        return probe(), DIRECT, []
    from gpudiag.service import socket_path
    from gpudiag.service.client import ServiceError, ask

    path = socket_path(root, socket)
    # A collection already running when we ask ends within the service's own probe deadline (10 s by default):
    # wait that long and a second more, no longer.
    wait = (10.0 if timeout is None else min(timeout, 10.0)) + 1.0
    try:
        answer = ask(path, {"op": "snapshot", "wait": wait}, timeout=wait + 1.0)
    except ServiceError as exc:
        log.warning("the service at %s could not collect (%s): probing directly", path, exc)
        answer = None
    if answer is not None and not answer.get("fresh"):
        # Its last complete collection could pass a node that has hung since: never judge a stale one.
        log.warning("the service's collection did not finish (%s): probing directly", answer.get("problem"))
        answer = None
    snapshot = _snapshot_of(answer) if answer is not None else None
    if snapshot is None:
        return probe(), DIRECT, []
    if level >= 2:
        _load_test(snapshot, path, timeout, level, stress_seconds)
    return snapshot, SERVICE, answer.get("open") or []


def _snapshot_of(answer: dict):
    from gpudiag.model import NodeSnapshot, SchemaError, from_dict

    if answer is None:
        return None
    try:
        return from_dict(NodeSnapshot, answer.get("snapshot"))
    except (SchemaError, TypeError, ValueError) as exc:  # a service of another gpudiag version
        log.warning("the service's snapshot does not fit this gpudiag (%s): probing directly", exc)
        return None


def _load_test(snapshot, path: Path, timeout: Optional[float], level: int, stress_seconds: Optional[float]) -> None:
    """`--level 2|3`: the load tests run here (the service never loads a GPU); what they watch while they run
    (clocks, link, ECC, the kernel log's driver events) is read through the service too, so this process still
    opens no vendor library."""
    from gpudiag.active import ActiveOptions, run_active
    from gpudiag.active.options import default_deadline
    from gpudiag.node_collect import UsageProblem, stdout_to_stderr
    from gpudiag.service.client import ask

    def fresh():
        return _snapshot_of(ask(path, {"op": "snapshot", "max_age": 0.2}, timeout=5.0))

    def reader(device):
        now = fresh()
        match = next((d for d in (now.devices if now else []) if d.vendor == device.vendor
                      and d.index == device.index), None)
        if match is None:
            raise RuntimeError("the service did not report this GPU")
        return match

    def kernel_events():
        now = fresh()
        log_info = now.kernel_log if now is not None else None
        return log_info.events if log_info is not None and log_info.readable else None

    deadline = default_deadline(level, stress_seconds) if timeout is None else timeout
    try:
        options = ActiveOptions.for_level(level, stress_seconds, deadline_seconds=deadline, progress=sys.stderr,
                                          reader=reader, kernel_events=kernel_events)
    except ValueError as exc:  # a GPUDIAG_VALIDATION_ONLY_* variable that does not parse
        raise UsageProblem(str(exc)) from None
    with stdout_to_stderr():
        snapshot.active = run_active(snapshot, options)


# -- gpudiag history ---------------------------------------------------------------------------------------------


class HistoryFormat(str, Enum):
    text = "text"
    json = "json"


def parse_since(text: Optional[str]) -> Optional[float]:
    """`30m`, `24h`, `7d`, `90s` or plain seconds → seconds."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise UsageProblem(f"--since {text!r}: expected a duration such as 30m, 24h or 7d") from None
    if not 0 <= seconds <= 10 * 365 * 86400:
        raise UsageProblem(f"--since {text!r}: out of range")
    return seconds


@app.command()
def history(
    since: Optional[str] = typer.Option(None, "--since", help="Only what happened in this last while: 30m, 24h, 7d."),
    gpu: Optional[int] = typer.Option(None, "--gpu", min=0, help="Only entries about this GPU index."),
    fmt: HistoryFormat = typer.Option(HistoryFormat.text, "--format", "-f", help="Output format."),
    root: Path = RootOption,
    socket: Optional[Path] = SocketOption,
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="Read the journal here when no service answers (default /var/lib/gpudiag)."),
) -> None:
    """Print what the service saw change: checks failing and recovering, Xids and resets, GPUs lost, throttling."""
    from gpudiag.service import socket_path
    from gpudiag.service.client import ServiceError, ask

    seconds = parse_since(since)
    request = {"op": "history", "since_seconds": seconds, "gpu": gpu}
    try:
        answer = ask(socket_path(root, socket), request, timeout=10.0)
    except ServiceError as exc:  # busy, or a service of another version: the journal file says the same
        log.warning("the service did not answer (%s): reading the journal file", exc)
        answer = None
    source = "service"
    if answer is None:
        entries, source = _read_journal(root, state_dir, seconds, gpu), "journal file"
    else:
        entries = answer.get("entries") or []
    if fmt is HistoryFormat.json:
        sys.stdout.write(json.dumps({"schema_version": 1, "source": source, "entries": entries}, indent=2) + "\n")
    else:
        from gpudiag.service.history_text import render_history

        sys.stdout.write(render_history(entries, source))
    raise typer.Exit(ExitCode.OK)


def _read_journal(root: Path, state_dir: Optional[Path], seconds: Optional[float], gpu: Optional[int]) -> list:
    from gpudiag.fileio import DocumentError, read_bytes
    from gpudiag.service import state_dir as default_state_dir
    from gpudiag.service.journal import CURRENT, DEFAULT_MAX_BYTES, PREVIOUS, by_time, parse_lines, select

    directory = default_state_dir(root, state_dir)
    entries = []
    for name in (PREVIOUS, CURRENT):
        path = directory / name
        if not path.exists():
            continue
        try:
            # Line by line, as the service reads it: a bad byte or a cut last line costs that line only.
            entries += parse_lines(read_bytes(path, 4 * DEFAULT_MAX_BYTES, truncate=True)[:4 * DEFAULT_MAX_BYTES])[0]
        except DocumentError as exc:
            raise UsageProblem(f"{path}: {exc}") from None
    if not entries and not (directory / CURRENT).exists():
        log.warning("no service answers and no journal in %s", directory)
    since = None if seconds is None else datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds)
    return select(sorted(entries, key=by_time), since, gpu)
