"""`gpudiag check` probing the node itself, without typer: `--direct`, or no service listening (docs/service.md
"The fast path").

gpudiag/cli/check/fastpath.py parses the options it knows (a level-1 check with a shipped profile at most) and hands
them here; everything else goes to the full CLI (gpudiag/cli/app.py). Both collect with
gpudiag/cli/shared/node_collect.py and judge and render with gpudiag/report/verdict.py, so they write the same bytes and
exit codes (tests/cli/check/test_direct.py). What this saves is typer, click and the CLI's other commands at start-up;
and NVML's initialisation runs while Python imports the checks (gpudiag/probe/nvml/early.py).
"""

from __future__ import annotations

import os
import sys

from gpudiag.exitcodes import ExitCode


def check(request: dict, root: str, timeout: "float | None") -> int:
    """`gpudiag check` with the fields of a fast-path request (gpudiag/cli/check/fastpath.py), probed in this process;
    the same messages and exit codes as gpudiag/cli/app.py's `main`."""
    debug = bool(os.environ.get("GPUDIAG_DEBUG"))
    if root == "/":
        from gpudiag.probe.nvml.early import start_nvml_init

        start_nvml_init()  # the driver's 28 ms beside the imports below
    from gpudiag.cli.shared.node_collect import exit_for_failure, start_logging

    start_logging(debug)
    try:
        return _check(request, root, timeout)
    except KeyboardInterrupt:  # as click turns it into an Abort
        print("gpudiag: aborted", file=sys.stderr)
        return ExitCode.ABORTED
    except Exception as exc:  # noqa: BLE001 - the contract promises exit 4, not a traceback
        return exit_for_failure(exc, debug)


def _check(request: dict, root: str, timeout: "float | None") -> int:
    from pathlib import Path

    from gpudiag.checks import probe_parts_for
    from gpudiag.cli.shared.node_collect import UsageProblem, collect, expectations
    from gpudiag.report.selection import select_checks
    from gpudiag.report.verdict import print_verdict

    only, skip = request["only"], request["skip"]
    try:
        selected = select_checks(only, skip)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    expected = expectations(request["profile"], request["params"], None)
    node_root = Path(root)
    snapshot = collect(node_root, None, timeout, 1, probe_parts_for(selected))
    return print_verdict(snapshot, expected, only, skip, [], "direct", request["format"], request["verbose"],
                         request["color"])
