"""`gpudiag history`: what the service saw change, from the service or, when none answers, its journal file
(docs/service.md)."""

from __future__ import annotations

import datetime
import json
import logging
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from gpudiag.cli.shared.node_collect import UsageProblem
from gpudiag.cli.shared.options import SocketOption
from gpudiag import stdout
from gpudiag.exitcodes import ExitCode


log = logging.getLogger("gpudiag")


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


def history(
    since: Optional[str] = typer.Option(None, "--since", help="Only what happened in this last while: 30m, 24h, 7d."),
    gpu: Optional[int] = typer.Option(None, "--gpu", min=0, help="Only entries about this GPU index."),
    fmt: HistoryFormat = typer.Option(HistoryFormat.text, "--format", "-f", help="Output format."),
    root: Path = typer.Option(
        Path("/"), "--root", help="Look for the service's socket and journal under ROOT "
                                  "(ROOT/run/gpudiag/gpudiag.sock, ROOT/var/lib/gpudiag; a test seam)."
    ),
    socket: Optional[Path] = SocketOption,
    state_dir: Optional[Path] = typer.Option(
        None, "--state-dir", help="Read the journal here when no service answers (default /var/lib/gpudiag)."
    ),
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
        text = json.dumps({"schema_version": 1, "source": source, "entries": entries}, indent=2) + "\n"
    else:
        from gpudiag.service.history_text import render_history

        text = render_history(entries, source)
    stdout.write(text, "the history")
    raise typer.Exit(ExitCode.OK)


def _read_journal(root: Path, state_dir: Optional[Path], seconds: Optional[float], gpu: Optional[int]) -> list:
    """The service's journal and the screens' (`gpudiag screen`, docs/screening.md), merged oldest first."""
    from gpudiag.fileio import DocumentError
    from gpudiag.model.screen import SCREEN_DIR
    from gpudiag.service import state_dir as default_state_dir
    from gpudiag.service.journal import CURRENT, by_time, read_entries, select

    directory = default_state_dir(root, state_dir)
    entries = []
    for journal in (directory, directory / SCREEN_DIR):
        try:
            entries += read_entries(journal)
        except DocumentError as exc:
            raise UsageProblem(str(exc)) from None
    if not entries and not (directory / CURRENT).exists():
        log.warning("no service answers and no journal in %s", directory)
    since = (
        None if seconds is None else datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds)
    )
    return select(sorted(entries, key=by_time), since, gpu)
