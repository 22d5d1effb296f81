"""`gpudiag fleet`: judge many nodes at once, from their `gpudiag check --format json` reports or from the
Prometheus that scrapes them. Registered on the app by gpudiag/cli/app.py.

Exit codes as `check`: 0 every node sound (warnings allowed) · 1 some node fails, is silent, drifts or lags, or the
answer was incomplete · 2 usage (a bad flag, selector, report or credential file) · 3 nothing to judge (Prometheus
unreachable, no gpudiag series, no reports).
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from gpudiag.cli.shared.node_collect import UsageProblem
from gpudiag.cli.shared.options import OutputFormat, finite
from gpudiag.exitcodes import ExitCode

DEFAULT_THRESHOLD_PERCENT = 5.0
DEFAULT_SELECTOR = '{job=~"gpudiag.*"}'  # as gpudiag.fleet.prometheus (not imported here: the CLI starts fast)


def fleet(
    reports: Optional[List[str]] = typer.Argument(
        None, metavar="[REPORT]...", help="`gpudiag check --format json` reports: files, directories of *.json, or - "
                                          "for a stream of them on standard input."),
    expected_nodes: Optional[str] = typer.Option(
        None, "--nodes", help="With reports: a file of the hostnames that should have reported, one a line (`scontrol "
                              "show hostnames`); a missing one is silent."
    ),
    prometheus: Optional[str] = typer.Option(
        None, "--prometheus", help="Read the fleet from this Prometheus (its URL)."
    ),
    selector: str = typer.Option(DEFAULT_SELECTOR, "--selector", help="Label matchers that pick the fleet's series."),
    username: Optional[str] = typer.Option(None, "--username", help="Basic auth user for Prometheus."),
    password_file: Optional[str] = typer.Option(None, "--password-file", help="File holding the basic auth password."),
    bearer_token_file: Optional[str] = typer.Option(None, "--bearer-token-file", help="File holding a bearer token."),
    ca_file: Optional[str] = typer.Option(
        None, "--ca-file", help="CA certificate(s) to verify Prometheus's TLS certificate."
    ),
    insecure: bool = typer.Option(False, "--insecure-skip-verify", help="Do not verify Prometheus's TLS certificate."),
    timeout: float = typer.Option(
        30.0, "--timeout", min=0.5, callback=finite, help="Seconds for all Prometheus queries together."
    ),
    stale_after: float = typer.Option(
        600.0, "--stale-after", min=1.0, callback=finite, help="A node whose last collection is older than this many "
                                                               "seconds is silent."
    ),
    threshold: float = typer.Option(
        DEFAULT_THRESHOLD_PERCENT, "--threshold", min=0.0, max=100.0, callback=finite, help="Percent below the peers' "
                                                                                            "median at which a "
                                                                                            "load-test figure lags."
    ),
    fmt: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="Output format."),
    as_json: bool = typer.Option(False, "--json", help="Short for --format json."),
) -> None:
    """Judge many nodes at once: which fail, which are silent, which drift from their peers, which lag behind them."""
    from gpudiag import stdout
    from gpudiag.fleet import NothingToJudge, SourceError, judge
    from gpudiag.fleet.render import write
    from gpudiag.report.text import clean

    if bool(prometheus) == bool(reports):
        raise UsageProblem("give either --prometheus URL or report files / directories / - (not both, not neither)")
    given = [flag for flag, value in (("--username", username), ("--password-file", password_file),
                                      ("--bearer-token-file", bearer_token_file), ("--ca-file", ca_file),
                                      ("--insecure-skip-verify", insecure or None),
                                      ("--selector", None if selector == DEFAULT_SELECTOR else selector))
             if value is not None]
    if reports and given:
        raise UsageProblem(f"{', '.join(given)}: only with --prometheus")
    if prometheus and expected_nodes:
        raise UsageProblem("--nodes: only with reports (from Prometheus, a node that does not report is `up == 0`)")
    try:
        if prometheus:
            from gpudiag.fleet.prometheus import read_prometheus
            from gpudiag.fleet.prometheus_api import Connection

            connection = Connection(prometheus, username, password_file, bearer_token_file, ca_file, insecure, timeout)
            nodes, warnings = read_prometheus(connection, selector, stale_after)
            source = f"prometheus {prometheus} {selector}"
        else:
            from gpudiag.fleet.reports import read_expected, read_reports

            expected = read_expected(expected_nodes) if expected_nodes else None
            nodes, warnings = read_reports(reports, sys.stdin.buffer, expected)
            source = f"{len(nodes)} report(s)"
    except SourceError as exc:
        raise UsageProblem(str(exc)) from None
    except NothingToJudge as exc:
        print(f"gpudiag: error: nothing to judge: {exc}", file=sys.stderr)
        raise typer.Exit(ExitCode.NOTHING_PROBED)
    complete = not any(w.startswith("incomplete:") for w in warnings)
    verdict = judge(nodes, threshold / 100.0, source, warnings, complete, from_reports=not prometheus)
    for warning in warnings:  # hostnames and skipped text come from the input: no terminal controls
        print(f"gpudiag: warning: {clean(warning)}", file=sys.stderr)
    out = stdout.Stream("the fleet verdict")  # written whole, or exit 4 (gpudiag/stdout.py)
    write("json" if as_json else fmt.value, verdict, out)
    out.close()
    raise typer.Exit(ExitCode.OK if verdict.status in ("pass", "warn") else ExitCode.FAILED)
