"""Judging a snapshot and rendering the verdict: one function for `gpudiag check` and for the service when it
judges a check on a client's behalf (docs/service.md "The fast path"), so that both write the same bytes."""

from __future__ import annotations

from typing import Optional

from gpudiag.exitcodes import ExitCode
from gpudiag.model import CheckResult, NodeSnapshot

NOTHING_PROBED = "nothing could be probed: no usable GPU library and no GPU on the PCI bus"


def nothing_probed(snapshot: NodeSnapshot) -> bool:
    """No usable GPU library and no GPU on the PCI bus: exit 3's condition."""
    return not snapshot.pci_gpus and not any(b.available for b in snapshot.backends) and not snapshot.devices


def ending(snapshot: NodeSnapshot, results: list) -> tuple[int, Optional[str]]:
    """`gpudiag check`'s exit code, and the warning that goes with it: 1 on a failure, else 0; 3 (its line is
    NOTHING_PROBED) when nothing could be probed and no check could fail for it. A profile or baseline that expects
    GPUs makes a node without any a FAIL (exit 1, with the warning): zero GPUs where eight should be is a verdict,
    not a probe problem."""
    from gpudiag.report.summary import summarize

    failed = summarize(results).failed
    if not nothing_probed(snapshot):
        return (ExitCode.FAILED if failed else ExitCode.OK), None
    if failed:
        return ExitCode.FAILED, ("nothing could be probed (no usable GPU library and no GPU on the PCI bus): judged "
                                 "against the "
                   "expected node, that fails")
    return ExitCode.NOTHING_PROBED, None


def tell_ending(snapshot: NodeSnapshot, results: list) -> int:
    """`ending`'s exit code, its warning logged and exit 3's line on stderr."""
    import logging
    import sys

    code, warning = ending(snapshot, results)
    if warning:
        logging.getLogger("gpudiag").warning(warning)
    if code == ExitCode.NOTHING_PROBED:
        print(f"gpudiag: error: {NOTHING_PROBED}", file=sys.stderr)
    return code


def add_since(results: list, open_checks: list) -> None:
    """Each warn/fail/unknown result the service has seen in the same state gets `since` (its first sighting)."""
    first_seen = {(e.get("check"), e.get("pci_bus_id"), e.get("status")): e.get("first_seen") for e in open_checks}
    for result in results:
        bus = result.device.pci_bus_id if result.device is not None else None
        since = first_seen.get((result.check, bus, result.status.value))
        if since:
            result.since = since


def judge_and_render(snapshot: NodeSnapshot, expectations: Optional[object], only: list[str], skip: list[str],
                     open_checks: list, collected_by: str, fmt: str, verbose: bool,
                     color: bool, gpus: Optional[list[str]] = None) -> tuple[list[CheckResult], str]:
    """(the results, the report in `fmt`): run_checks, `since` from the service's open episodes, render; with
    `gpus`, only those GPUs' results and the node-level ones (ValueError for a GPU not on the node)."""
    from gpudiag.checks import run_checks
    from gpudiag.report import render

    selected = None
    if gpus:
        from gpudiag.report.gpu_selection import about_selected, select_gpus

        selected = select_gpus(snapshot, gpus)  # before judging: an unknown GPU is refused, nothing printed
    results = run_checks(snapshot, expectations, only=only, skip=skip)
    if selected is not None:
        results = about_selected(results, *selected)
    add_since(results, open_checks)
    return results, render(fmt, snapshot, results, collected_by, verbose=verbose, color=color)


def ready_to_print(fmt: str) -> None:
    """Import now what print_verdict needs to write a report in `fmt`, rather than while it writes: a forked check
    (gpudiag/cli/check/direct.py) does it while it waits for its children's answers anyway."""
    from gpudiag import stdout  # noqa: F401
    from gpudiag.report import causes  # noqa: F401 - every renderer's
    if fmt == "json":
        from gpudiag.report import json_report  # noqa: F401
    elif fmt == "junit":
        from gpudiag.report import junit  # noqa: F401
    else:
        from gpudiag.report import text  # noqa: F401


def print_verdict(snapshot: NodeSnapshot, expectations: Optional[object], only: list[str], skip: list[str],
                  open_checks: list, collected_by: str, fmt: str, verbose: bool, color: bool,
                  gpus: Optional[list[str]] = None) -> int:
    """`gpudiag check`'s ending, for the typer CLI and gpudiag/cli/check/direct.py alike: the report on stdout, then
    `tell_ending`. `gpus` (check -i/--gpu): only those GPUs' results and the node's (report/gpu_selection.py). The
    report is written whole or not at all as far as the exit code goes (gpudiag/stdout.py: Unwritable, exit 4)."""
    from gpudiag import stdout

    results, text = judge_and_render(snapshot, expectations, only, skip, open_checks, collected_by, fmt, verbose,
                                     color, gpus)
    stdout.write(text, "the report")
    return tell_ending(snapshot, results)
