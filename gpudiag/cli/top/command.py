"""`gpudiag top`: the live view, one row per GPU of either vendor with its verdict, every `-d` seconds.

On a terminal a full-screen view (gpudiag/cli/top/screen.py: q quits, exit 0; Ctrl-C exit 130; the terminal
restored either way); on a pipe dmon-style lines a script can read (gpudiag/report/live_text.py: the `#` header
once, then one line per GPU per sample). The samples come from the running service when one answers, else from a
collection of this process's own per sample (gpudiag/cli/top/source.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag.cli.shared.options import RootOption, SocketOption, TimeoutOption, finite, split_ids
from gpudiag.exitcodes import ExitCode

_sleep = time.sleep  # between samples (a test's seam: its samples need not wait out -d)


def top(
    delay: float = typer.Option(1.0, "--delay", "-d", min=1.0, max=86400.0, callback=finite, help="Seconds between samples (default 1)."),
    count: Optional[int] = typer.Option(None, "--count", "-c", min=1, help="Stop after this many samples (default: until q or Ctrl-C)."),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", "-i", help="Show only these GPUs: index, PCI bus ID or UUID (repeat or comma-separate), as check -i."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    direct: bool = typer.Option(False, "--direct", help="Probe the GPUs in this process even when the service answers."),
    socket: Optional[Path] = SocketOption,
) -> None:
    """Watch every GPU live with its verdict: full-screen on a terminal, dmon-style lines on a pipe."""
    from gpudiag.cli.top.source import Sampler

    sampler = Sampler(root, socket, timeout, direct, split_ids(gpu) or None, delay)
    try:
        first = sampler.sample()  # before the screen: a GPU -i names that is not there is one line, exit 2
        if first.nothing_probed and not first.rows:
            from gpudiag.cli.shared.habits import nothing_probed_exit

            raise nothing_probed_exit()
        if sys.stdout.isatty() and sys.stdin.isatty():
            from gpudiag.cli.top.screen import watch

            code = watch(sampler, first, delay, count)
        else:
            code = _lines(sampler, first, delay, count)
    finally:
        sampler.close()
    raise typer.Exit(code)


def _lines(sampler, sample, delay: float, count: Optional[int]) -> int:
    """The pipe: the header once, then each sample's lines as soon as it is read (flushed: a script reads them
    live). A reader that leaves (`| head`) ends it, exit 0."""
    from gpudiag.report.live_text import header_lines, sample_lines

    try:
        _write(header_lines())
        taken, due = 0, time.monotonic()
        while True:
            _write(sample_lines(sample.rows, sample.taken_at))
            taken += 1
            if count is not None and taken >= count:
                return ExitCode.OK
            due += delay
            now = time.monotonic()
            if due < now:  # a slow collection: the next sample now, not a burst of the missed ones
                due = now
            _sleep(due - now)
            sample = sampler.sample()
    except BrokenPipeError:
        # Nothing more can be written; stdout's last flush at exit must not fail again on the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return ExitCode.OK


def _write(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
