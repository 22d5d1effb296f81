"""The `gpudiag` command. The only place that exits; exit codes are part of the contract (docs/architecture.md):

0 no check failed (warnings allowed) · 1 at least one check failed · 2 usage or configuration error ·
3 nothing could be probed (no usable backend and no GPU on the PCI bus) · 4 internal error.

Nothing probed is 3 only while no check failed: where the profile or baseline expects GPUs, a node with none is
a verdict (inventory.gpu_count / baseline.inventory fail), exit 1, as the JSON report's status says.
"""

from __future__ import annotations

import logging
import os
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag import cli_habits as habits
from gpudiag.install import install_service
# cli_service and cli_fleet import UsageProblem from here
from gpudiag.node_collect import UsageProblem, collect, collect_options, exit_for_failure, start_logging
from gpudiag.node_collect import expectations as read_expectations

try:  # typer 0.2x ships its own copy of click; older typer uses click itself
    from typer import _click as click
except ImportError:  # pragma: no cover - depends on the installed typer
    import click

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING_PROBED, EXIT_INTERNAL = 0, 1, 2, 3, 4

app = typer.Typer(
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings=habits.CONTEXT_SETTINGS,  # -h too
    help="GPU node health and diagnostics for AMD and NVIDIA nodes.",
)
log = logging.getLogger("gpudiag")


@app.callback(invoke_without_command=True)
def _gpudiag(ctx: typer.Context, version: bool = habits.VersionOption) -> None:
    habits.help_when_bare(ctx)  # bare `gpudiag`: the help on stdout, exit 0


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


# -- shared options ---------------------------------------------------------------------------------------------

RootOption = typer.Option(Path("/"), "--root", help="Read ROOT/sys, ROOT/proc and ROOT/dev/kmsg (a test seam).")
KernelLogOption = typer.Option(
    None, "--kernel-log", help="Scan this saved dmesg / kmsg / journalctl -k text instead of the live kernel log."
)
TimeoutOption = typer.Option(
    None, "--timeout", min=0.1, help="Deadline in seconds for probing the node (default 10; 600 with --level 2; the stress + 300 with --level 3)."
)
# What the node should be: `check`, `serve` and `textfile` judge against the same expectations (node_collect.py).
ProfileOption = typer.Option(None, "--profile", help="Node profile: a shipped profile's name (h200-8x, mi300x-8x, …), or a TOML file named with a slash or a .toml suffix (./site, site.toml).")
ParamOption = typer.Option(None, "--param", "-p", help="Override one profile setting: KEY=VALUE (repeatable).")
StressSecondsOption = typer.Option(None, "--stress-seconds", min=1.0, max=86400.0, help="How long the stress runs with --level 2|3 (default 30; 600 at level 3).")
BaselineOption = typer.Option(None, "--baseline", help="Golden baseline (gpudiag baseline --output): fail on every drift from it.")
SocketOption = typer.Option(None, "--socket", help="The service's Unix socket (default /run/gpudiag/gpudiag.sock; under --root DIR, DIR/run/gpudiag/gpudiag.sock).")


def _split_ids(values: Optional[List[str]]) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _load_replay(path: Path):
    from gpudiag.recording import RecordingError, load_snapshot

    try:
        return load_snapshot(path)
    except RecordingError as exc:
        raise UsageProblem(str(exc)) from None


def _write_output(output: Optional[Path], text: str, what: str) -> None:
    """`text` to stdout (no --output, or `-`), or atomically to a file only its owner can read (gpudiag.fileio)."""
    if output is None:
        sys.stdout.write(text)
        return
    from gpudiag.fileio import PRIVATE, write_output

    try:
        write_output(output, text, PRIVATE)
    except OSError as exc:
        raise UsageProblem(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    log.info("%s written to %s", what, output)


# -- commands ---------------------------------------------------------------------------------------------------


@app.command()
def check(
    fmt: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="Output format."),
    as_json: bool = typer.Option(False, "--json", help="Short for --format json."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Run only these check IDs or families (repeat or comma-separate)."),
    skip: Optional[List[str]] = typer.Option(None, "--skip", help="Skip these check IDs or families."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
    replay: Optional[Path] = typer.Option(None, "--replay", help="Judge a recorded snapshot instead of this node."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List passing checks one by one."),
    color: Optional[bool] = typer.Option(None, "--color/--no-color", help="Colour the checklist (default: when a terminal)."),
    level: int = typer.Option(
        1, "--level", min=1, max=3,
        help="1: read the node (passive, fast). 2: also load-test idle GPUs (copy bandwidth, P2P, HBM, memory test, stress at the power limit). 3: the soak (10-minute stress, memory test with moving inversions).",
    ),
    stress_seconds: Optional[float] = StressSecondsOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
    baseline_file: Optional[Path] = BaselineOption,
    direct: bool = typer.Option(False, "--direct", help="Probe the GPUs in this process even when the service answers."),
    socket: Optional[Path] = SocketOption,
) -> None:
    """Run every check and print the troubleshooting checklist (through the running service when one answers)."""
    from gpudiag.cli_service import obtain
    from gpudiag.checks import probe_parts_for, resolve_selection
    from gpudiag.report.verdict import print_verdict

    habits.refuse_ignored_options(replay, as_json, fmt.value)
    only_ids, skip_ids = _split_ids(only), _split_ids(skip)
    try:
        selected = resolve_selection(only_ids, skip_ids)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    expectations = read_expectations(profile, params or [], baseline_file)
    if replay is not None and level >= 2:
        raise UsageProblem("--level 2 load-tests this node's GPUs; a --replay recording cannot be load-tested")

    # Pay only for what the selection judges: `--only pcie` reads no NVLink counters, peers or kernel log.
    parts = probe_parts_for(selected)
    snapshot, collected_by, open_checks = (_load_replay(replay), "replay", []) if replay is not None else obtain(
        root, socket, timeout, level, direct, kernel_log,
        lambda: collect(root, kernel_log, timeout, level, parts, stress_seconds), stress_seconds)
    output_format = "json" if as_json else fmt.value
    use_color = sys.stdout.isatty() and "NO_COLOR" not in os.environ if color is None else color
    raise typer.Exit(print_verdict(snapshot, expectations, only_ids, skip_ids, open_checks, collected_by,
                                   output_format, verbose, use_color))


@app.command()
def snapshot(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the snapshot to this file (atomically, mode 0600; - is stdout) instead of stdout."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
) -> None:
    """Print everything the probes read, as JSON: what a bug report needs, and a recording `check --replay` reads."""
    from gpudiag.recording import snapshot_json

    node = collect(root, kernel_log, timeout)
    _write_output(output, snapshot_json(node), "snapshot")
    raise habits.nothing_probed_exit() if habits.nothing_probed(node) else typer.Exit(EXIT_OK)


@app.command()
def baseline(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the baseline to this file (atomically, mode 0600; - is stdout) instead of stdout."),
    replay: Optional[Path] = typer.Option(None, "--replay", help="Make the baseline from a recorded snapshot instead of this node."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
) -> None:
    """Record this known-good node as a golden baseline (JSON) that `check --baseline FILE` compares its siblings with."""
    from gpudiag.baseline import baseline_json
    from gpudiag.checks import run_checks
    from gpudiag.checks.baseline_of import baseline_of
    from gpudiag.report import summarize

    habits.refuse_ignored_options(replay)
    node = _load_replay(replay) if replay is not None else collect(root, kernel_log, timeout)
    if habits.nothing_probed(node):
        print("gpudiag: error: nothing could be probed: no GPU to record a baseline of", file=sys.stderr)
        raise typer.Exit(EXIT_NOTHING_PROBED)
    failing = sorted({r.check for r in run_checks(node) if summarize([r]).failed})
    if failing:  # a baseline is only as good as the node it was taken from
        log.warning("this node fails %s: is it really known-good?", ", ".join(failing))
    golden = baseline_of(node)
    _write_output(output, baseline_json(golden), f"baseline of {len(golden.gpus)} GPU(s)")
    raise typer.Exit(EXIT_OK)


@app.command()
def serve(
    # The default is gpudiag.exporter.server.DEFAULT_LISTEN, spelled out so that the CLI does not import the
    # exporter (and prometheus_client) for every command; a test keeps the two equal.
    listen: str = typer.Option(":9858", "--listen", help="HOST:PORT to serve /metrics and /healthz on; :PORT is every interface."),
    web_config: Optional[Path] = typer.Option(None, "--web-config", "--web.config.file", help="TLS, basic auth, rate limit, headers (exporter-toolkit web-config YAML)."),
    interval: float = typer.Option(15.0, "--interval", min=0.5, help="Seconds between collections."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
    baseline_file: Optional[Path] = BaselineOption,
    socket: Optional[Path] = SocketOption,
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="Keep the event journal here (default /var/lib/gpudiag; under --root DIR, DIR/var/lib/gpudiag)."),
    log_level: LogLevel = typer.Option(LogLevel.info, "--log.level", help="The least severe lines logged on stderr: debug, info (every change told once: a GPU lost and back, a check failing and passing again), warn (only what went wrong), error."),
    log_format: LogFormat = typer.Option(LogFormat.logfmt, "--log.format", help="Log lines as logfmt (key=value, as node_exporter writes them) or one JSON object each."),
) -> None:
    """Serve Prometheus metrics until SIGTERM; collection runs in the background, so a scrape never waits on a GPU."""
    from gpudiag.exporter import serve as run_exporter
    from gpudiag.exporter.log_format import daemon_logging
    from gpudiag.service import socket_path, state_dir as journal_dir

    with daemon_logging(log_level.value, log_format.value):  # what changes is told on stderr (docs/monitoring.md)
        expectations = read_expectations(profile, params or [], baseline_file)  # a bad profile stops it: exit 2
        options = collect_options(root, kernel_log, timeout, state_dir=state_dir)
        code = run_exporter(listen, web_config, options, interval, expectations, socket_path(root, socket),
                            journal_dir(root, state_dir), socket is not None)
    raise typer.Exit(code)


@app.command()
def textfile(
    output: Path = typer.Option(..., "--output", "-o", help="The .prom file to replace atomically, in node_exporter's textfile directory."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
    level: int = typer.Option(
        1, "--level", min=1, max=3, help="2: also load-test idle GPUs and export what they measured (acceptance windows); 3: the soak."
    ),
    stress_seconds: Optional[float] = StressSecondsOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
    baseline_file: Optional[Path] = BaselineOption,
) -> None:
    """Write the metrics and check results once, for node_exporter's textfile collector (gpudiag-check.timer)."""
    from gpudiag.checks import run_checks
    from gpudiag.exporter.textfile import write_textfile

    if output.suffix != ".prom" and str(output) != "-":
        log.warning("--output %s: node_exporter's textfile collector reads only *.prom files", output)
    expectations = read_expectations(profile, params or [], baseline_file)
    node = collect(root, kernel_log, timeout, level, stress_seconds=stress_seconds)
    results = run_checks(node, expectations)
    try:
        write_textfile(output, node, results)
    except OSError as exc:
        raise UsageProblem(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    from gpudiag.report.verdict import tell_ending

    code = tell_ending(node, results)
    raise typer.Exit(EXIT_NOTHING_PROBED if code == EXIT_NOTHING_PROBED else EXIT_OK)  # the failures are in the file


@app.command()
def version() -> None:
    """Print gpudiag's version."""
    from gpudiag import __version__

    print(__version__)


app.command("install-service")(install_service)  # gpudiag/install.py
from gpudiag import cli_fleet  # noqa: E402,F401 - registers `gpudiag fleet` (gpudiag/cli_fleet.py)
import gpudiag.cli_service  # noqa: E402,F401 - registers `history` (it imports this module's app)

# -- entry point ------------------------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    debug = bool(os.environ.get("GPUDIAG_DEBUG"))
    habits.degrade_unencodable_streams()  # PYTHONIOENCODING=ascii: "->" for "→", not a UnicodeEncodeError
    start_logging(debug)
    try:
        # With standalone_mode=False click returns the code of a typer.Exit instead of exiting.
        return app(args=argv, prog_name="gpudiag", standalone_mode=False) or EXIT_OK
    except typer.Exit as exc:
        return exc.exit_code
    except click.exceptions.UsageError as exc:
        print(f"gpudiag: error: {exc.format_message()}", file=sys.stderr)
        return EXIT_USAGE
    except typer.Abort:
        print("gpudiag: aborted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the contract promises exit 4, not a traceback
        return exit_for_failure(exc, debug)


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
