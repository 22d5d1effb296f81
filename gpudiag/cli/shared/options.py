"""What several commands share: the output formats, the options of `--root`, `--timeout`, `--profile` … (one
declaration each), and reading a recording or writing an output file as every command does."""

from __future__ import annotations

import logging
import math
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag import DEFAULT_DEADLINE_SECONDS
from gpudiag.cli.shared.completion import complete_profile
from gpudiag.cli.shared.node_collect import UsageProblem


log = logging.getLogger("gpudiag")


class LogLevel(str, Enum):
    debug = "debug"
    info = "info"
    warn = "warn"
    error = "error"


class LogFormat(str, Enum):
    logfmt = "logfmt"
    json = "json"


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    junit = "junit"


def finite(param: typer.CallbackParam, value: Optional[float]) -> Optional[float]:
    """A number option's value, refused when it is not finite: typer's min/max let nan through (every comparison with
    it is false), and an infinite deadline or a nan threshold is no number to judge by (issue 33, item 6)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number", param=param)
    return value


RootOption = typer.Option(Path("/"), "--root", help="Read ROOT/sys, ROOT/proc and ROOT/dev/kmsg (a test seam).")
KernelLogOption = typer.Option(
    None, "--kernel-log", help="Scan this saved dmesg / kmsg / journalctl -k text instead of the live kernel log."
)
# Only the commands with --level (check, textfile) mention it: the others have no load tests to wait for.
TimeoutOption = typer.Option(None, "--timeout", min=0.1, callback=finite, help="Deadline in seconds for probing the "
                                                                               "node (default "
                                                                               f"{DEFAULT_DEADLINE_SECONDS:g}).")
LevelTimeoutOption = typer.Option(
    None, "--timeout", min=0.1, callback=finite, help="Deadline in seconds for probing the node (default "
                                                      f"{DEFAULT_DEADLINE_SECONDS:g}; 600 with --level 2; the stress + "
                                                      "300 with --level 3)."
)
# What the node should be: `check`, `serve` and `textfile` judge against the same expectations (node_collect.py).
ProfileOption = typer.Option(None, "--profile", autocompletion=complete_profile, help="Node profile: a shipped "
                                                                                      "profile's name (h200-8x, "
                                                                                      "mi300x-8x, …), or a TOML file "
                                                                                      "named with a slash or a .toml "
                                                                                      "suffix (./site, site.toml).")
ParamOption = typer.Option(None, "--param", "-p", help="Override one profile setting: KEY=VALUE (repeatable).")
StressSecondsOption = typer.Option(
    None,
    "--stress-seconds",
    min=1.0,
    max=86400.0,
    callback=finite,
    help="How long the stress runs with --level 2|3 (default 30; 600 at level 3).",
)
BaselineOption = typer.Option(None, "--baseline", help="Golden baseline (gpudiag baseline --output): fail on every "
                                                       "drift from it.")
# Where the service keeps its journal and `gpudiag screen` its record (read for earlier boots' faults and the screens).
StateDirOption = typer.Option(None, "--state-dir", help="Read the service's journal and the screens' record here "
                                                        "(default /var/lib/gpudiag; under --root DIR, "
                                                        "DIR/var/lib/gpudiag).")
SocketOption = typer.Option(None, "--socket", help="The service's Unix socket (default /run/gpudiag/gpudiag.sock; "
                                                   "under --root DIR, DIR/run/gpudiag/gpudiag.sock).")


def split_ids(values: Optional[List[str]]) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def load_replay(path: Path):
    from gpudiag.model.recording import RecordingError, load_snapshot

    try:
        return load_snapshot(path)
    except RecordingError as exc:
        raise UsageProblem(str(exc)) from None


def write_output(output: Optional[Path], text: str, what: str, detail: str = "") -> None:
    """`text` (the `what`: snapshot, baseline) to stdout (no --output, or `-`: whole, or Unwritable and exit 4,
    gpudiag/stdout.py), or atomically to a file only its owner can read (gpudiag.fileio)."""
    if output is None or str(output) == "-":
        from gpudiag import stdout

        stdout.write(text, f"the {what}")
        return
    from gpudiag.fileio import PRIVATE, write_output

    try:
        write_output(output, text, PRIVATE)
    except OSError as exc:
        raise UsageProblem(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    log.info("%s%s written to %s", what, detail, output)
