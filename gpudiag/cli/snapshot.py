"""`gpudiag snapshot`: everything the probes read, as JSON (a bug report's attachment, a recording for `check
--replay`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpudiag.cli.shared import habits, node_collect
from gpudiag.cli.shared.options import KernelLogOption, RootOption, TimeoutOption, write_output
from gpudiag.exitcodes import ExitCode


def snapshot(
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the snapshot to this file (atomically, mode 0600; - is stdout) instead of "
                                     "stdout."
    ),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
) -> None:
    """Print everything the probes read, as JSON: what a bug report needs, and a recording `check --replay` reads."""
    from gpudiag.model.recording import snapshot_json

    node = node_collect.collect(root, kernel_log, timeout)
    write_output(output, snapshot_json(node), "snapshot")
    raise habits.nothing_probed_exit() if habits.nothing_probed(node) else typer.Exit(ExitCode.OK)
