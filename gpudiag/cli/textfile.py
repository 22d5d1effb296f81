"""`gpudiag textfile`: the metrics and check results written once, for node_exporter's textfile collector."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag.cli.shared import habits, node_collect
from gpudiag.cli.shared.node_collect import UsageProblem
from gpudiag.cli.shared.node_collect import expectations as read_expectations
from gpudiag.cli.shared.options import (BaselineOption, KernelLogOption, ParamOption, ProfileOption, RootOption,
                                        StateDirOption, StressSecondsOption, LevelTimeoutOption)
from gpudiag.exitcodes import ExitCode


log = logging.getLogger("gpudiag")


def textfile(
    output: Path = typer.Option(
        ..., "--output", "-o", help="The .prom file to replace atomically, in node_exporter's textfile directory."
    ),
    timeout: Optional[float] = LevelTimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
    level: int = typer.Option(
        1, "--level", min=1, max=3, help="2: also load-test idle GPUs and export what they measured (acceptance "
                                         "windows); 3: the soak."
    ),
    stress_seconds: Optional[float] = StressSecondsOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
    baseline_file: Optional[Path] = BaselineOption,
    state_dir: Optional[Path] = StateDirOption,
) -> None:
    """Write the metrics and check results once, for node_exporter's textfile collector (gpudiag-check.timer)."""
    from gpudiag.checks import run_checks
    from gpudiag.exporter.textfile import write_textfile

    habits.refuse_stress_without_load_tests(level)
    if output.suffix != ".prom" and str(output) != "-":
        log.warning("--output %s: node_exporter's textfile collector reads only *.prom files", output)
    expectations = read_expectations(profile, params or [], baseline_file)
    node = node_collect.collect(root, kernel_log, timeout, level, stress_seconds=stress_seconds, state_dir=state_dir)
    results = run_checks(node, expectations)
    try:
        write_textfile(output, node, results)
    except OSError as exc:
        raise UsageProblem(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    from gpudiag.report.verdict import tell_ending

    code = tell_ending(node, results)
    # the failures are in the file
    raise typer.Exit(ExitCode.NOTHING_PROBED if code == ExitCode.NOTHING_PROBED else ExitCode.OK)
