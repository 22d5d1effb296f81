"""`gpudiag check`: the troubleshooting checklist, through the running service when one answers
(gpudiag/cli/check/through_service.py).

The fast path (gpudiag/cli/check/fastpath.py) answers the simple checks before typer is imported; its table of the
options it handles is kept equal to this command's by tests/cli/check/test_options.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag.cli.shared import habits, node_collect
from gpudiag.cli.shared.completion import complete_checks
from gpudiag.cli.shared.node_collect import UsageProblem
from gpudiag.cli.shared.node_collect import expectations as read_expectations
from gpudiag.cli.shared.options import (BaselineOption, KernelLogOption, OutputFormat, ParamOption, ProfileOption,
                                        RootOption, SocketOption, StressSecondsOption, LevelTimeoutOption, load_replay,
                                        split_ids)


def check(
    fmt: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="Output format."),
    as_json: bool = typer.Option(False, "--json", help="Short for --format json."),
    only: Optional[List[str]] = typer.Option(
        None, "--only", autocompletion=complete_checks, help="Run only these check IDs or families (repeat or "
                                                             "comma-separate)."
    ),
    skip: Optional[List[str]] = typer.Option(
        None, "--skip", autocompletion=complete_checks, help="Skip these check IDs or families."
    ),
    gpu: Optional[List[str]] = typer.Option(
        None, "--gpu", "-i", help="Judge only these GPUs: index, PCI bus ID or UUID (repeat or comma-separate); the "
                                  "node-level checks (driver, host, GPU count, kernel log) still count."
    ),
    timeout: Optional[float] = LevelTimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
    replay: Optional[Path] = typer.Option(None, "--replay", help="Judge a recorded snapshot instead of this node."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List passing checks one by one."),
    color: Optional[bool] = typer.Option(
        None, "--color/--no-color", help="Colour the checklist (default: when a terminal)."
    ),
    level: int = typer.Option(
        1, "--level", min=1, max=3,
        help="1: read the node (passive, fast). 2: also load-test idle GPUs (copy bandwidth, P2P, HBM, memory test, "
             "stress at the power limit). 3: the soak (10-minute stress, memory test with moving inversions).",
    ),
    stress_seconds: Optional[float] = StressSecondsOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
    baseline_file: Optional[Path] = BaselineOption,
    direct: bool = typer.Option(
        False, "--direct", help="Probe the GPUs in this process even when the service answers."
    ),
    socket: Optional[Path] = SocketOption,
    state_dir: Optional[Path] = typer.Option(
        None, "--state-dir", help="Read the service's journal and the screens' record here, probing in this process "
                                  "(default /var/lib/gpudiag, or the service's)."
    ),
) -> None:
    """Run every check and print the troubleshooting checklist (through the running service when one answers)."""
    from gpudiag.checks import probe_parts_for
    from gpudiag.cli.check.through_service import obtain
    from gpudiag.report.selection import EMPTY_ONLY, select_checks
    from gpudiag.report.verdict import print_verdict

    habits.refuse_ignored_options(replay, as_json, fmt.value)
    habits.refuse_stress_without_load_tests(level)
    only_ids, skip_ids = split_ids(only), split_ids(skip)
    if only is not None and not only_ids:
        raise UsageProblem(EMPTY_ONLY)
    try:
        selected = select_checks(only_ids, skip_ids)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    expectations = read_expectations(profile, params or [], baseline_file)
    if replay is not None and level >= 2:
        raise UsageProblem("--level 2 load-tests this node's GPUs; a --replay recording cannot be load-tested")

    # Pay only for what the selection judges: `--only pcie` reads no NVLink counters, peers or kernel log.
    parts = probe_parts_for(selected)
    snapshot, collected_by, open_checks = (load_replay(replay), "replay", []) if replay is not None else obtain(
        root, socket, timeout, level, direct or state_dir is not None, kernel_log,
        lambda: node_collect.collect(root, kernel_log, timeout, level, parts, stress_seconds,
                                     **({"state_dir": state_dir} if state_dir is not None else {})),
        stress_seconds)
    output_format = "json" if as_json else fmt.value
    use_color = sys.stdout.isatty() and "NO_COLOR" not in os.environ if color is None else color
    try:
        code = print_verdict(snapshot, expectations, only_ids, skip_ids, open_checks, collected_by, output_format,
                             verbose, use_color, split_ids(gpu) or None)
    except ValueError as exc:  # a --gpu this node does not have (report/gpu_selection.py): nothing was printed
        raise UsageProblem(str(exc)) from None
    raise typer.Exit(code)
