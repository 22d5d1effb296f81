"""`gpudiag baseline`: a known-good node recorded as the golden baseline that `check --baseline FILE` compares with."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from gpudiag.cli.shared import habits, node_collect
from gpudiag.cli.shared.options import KernelLogOption, RootOption, TimeoutOption, load_replay, write_output
from gpudiag.exitcodes import ExitCode


log = logging.getLogger("gpudiag")


def baseline(
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the baseline to this file (atomically, mode 0600; - is stdout) instead of "
                                     "stdout."
    ),
    replay: Optional[Path] = typer.Option(
        None, "--replay", help="Make the baseline from a recorded snapshot instead of this node."
    ),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
) -> None:
    """Record this known-good node as a golden baseline (JSON) that `check --baseline FILE` compares siblings with."""
    from gpudiag.expect.baseline import baseline_json
    from gpudiag.checks import run_checks
    from gpudiag.checks.baseline_of import baseline_of
    from gpudiag.report import summarize

    habits.refuse_ignored_options(replay)
    node = load_replay(replay) if replay is not None else node_collect.collect(root, kernel_log, timeout)
    if habits.nothing_probed(node):
        print("gpudiag: error: nothing could be probed: no GPU to record a baseline of", file=sys.stderr)
        raise typer.Exit(ExitCode.NOTHING_PROBED)
    failing = sorted({r.check for r in run_checks(node) if summarize([r]).failed})
    if failing:  # a baseline is only as good as the node it was taken from
        log.warning("this node fails %s: is it really known-good?", ", ".join(failing))
    golden = baseline_of(node)
    write_output(output, baseline_json(golden), "baseline", f" of {len(golden.gpus)} GPU(s)")
    raise typer.Exit(ExitCode.OK)
