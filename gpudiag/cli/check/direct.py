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
import time

from gpudiag.exitcodes import ExitCode

# Where the last direct check of this process spent its time, for bench/check_vs_nvidia_smi.py's breakdown of a cold
# check (issue 36, item 9): (step, time.perf_counter() at its end) in order, and the probe's parts (their names and
# seconds, as the snapshot records them). Filling them costs a few microseconds.
MARKS: list = []
PROBE_PARTS: dict = {}
CHILD_MARKS: list = []  # the forked children's own, as they sent them (gpudiag/cli/check/early_collect.py)
# The forked vendor child's NVML early-start window (gpudiag/probe/nvml/early.py WINDOW), kept here: importing that
# module would import the whole probe package into this process, which otherwise needs none of it.
NVML_WINDOW: list = []


def mark(step: str) -> None:
    MARKS.append((step, time.perf_counter()))


def check(request: dict, root: str, timeout: "float | None") -> int:
    """`gpudiag check` with the fields of a fast-path request (gpudiag/cli/check/fastpath.py), probed in this process
    (or its child, gpudiag/cli/check/early_collect.py); the same messages and exit codes as gpudiag/cli/app.py's
    `main`."""
    mark("entered")
    debug = bool(os.environ.get("GPUDIAG_DEBUG"))
    # Forked first, while this process has no thread and has written nothing: the child inherits neither.
    early = _collect_early(request, root, timeout)
    if root == "/" and early is None:
        from gpudiag.probe.nvml.early import start_nvml_init

        start_nvml_init()  # the driver's 28 ms beside the imports below
    try:
        from gpudiag.cli.shared.node_collect import exit_for_failure, start_logging

        start_logging(debug)
        try:
            return _check(request, root, timeout, early)
        except KeyboardInterrupt:  # as click turns it into an Abort
            print("gpudiag: aborted", file=sys.stderr)
            return ExitCode.ABORTED
        except Exception as exc:  # noqa: BLE001 - the contract promises exit 4, not a traceback
            return exit_for_failure(exc, debug)
    finally:
        if early is not None:
            early.close()


def forks_the_collection(root: str) -> bool:
    """Whether the collection runs in a child beside the imports: on the node itself, where the probe waits for the
    driver (a --root tree is read from files)."""
    return root == "/"


def _collect_early(request: dict, root: str, timeout: "float | None"):
    """The collection started now, in a child beside this process's imports (gpudiag/cli/check/early_collect.py),
    where the selection cannot change what is probed: neither --only nor --skip. None otherwise: probed here after
    the selection is known."""
    if request["only"] or request["skip"] or not forks_the_collection(root):
        return None
    from gpudiag.cli.check.early_collect import ForkedCollection

    try:
        return ForkedCollection(root, timeout)
    except Exception:  # noqa: BLE001 - no process or pipe to be had (a limit on processes), or the probe's modules
        # would not import: probed here, as without the fork (where what failed is reported as any failure is)
        return None


def _check(request: dict, root: str, timeout: "float | None", early) -> int:
    from pathlib import Path

    from gpudiag.checks import probe_parts_for
    from gpudiag.cli.shared.node_collect import UsageProblem, collect, expectations
    from gpudiag.report.selection import select_checks
    from gpudiag.report.verdict import print_verdict, ready_to_print

    mark("imported")
    only, skip = request["only"], request["skip"]
    try:
        selected = select_checks(only, skip)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    expected = expectations(request["profile"], request["params"], None)
    node_root = Path(root)
    if early is not None:
        ready_to_print(request["format"])  # while the children collect
        snapshot = early.snapshot()
        MARKS.append(("answer read", early.answered_at))  # then the side parts joined to it
        NVML_WINDOW[:] = early.nvml_window
        CHILD_MARKS[:] = early.child_marks
    else:
        snapshot = collect(node_root, None, timeout, 1, probe_parts_for(selected))
    mark("probed")
    PROBE_PARTS.update((run.name, run.duration_seconds) for run in snapshot.collectors)
    code = print_verdict(snapshot, expected, only, skip, [], "direct", request["format"], request["verbose"],
                         request["color"])
    mark("judged and written")
    return code
