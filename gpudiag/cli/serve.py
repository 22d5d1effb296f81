"""`gpudiag serve`'s command line; gpudiag/cli/serving.py assembles what it runs."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpudiag.cli.node_collect import collect_options
from gpudiag.cli.node_collect import expectations as read_expectations
from gpudiag.cli.options import (BaselineOption, KernelLogOption, LogFormat, LogLevel, ParamOption, ProfileOption,
                                 RootOption, SocketOption, TimeoutOption)


def serve(
    # The default is gpudiag.exporter.listen.DEFAULT_LISTEN, spelled out so that the CLI does not import the
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
    from gpudiag.cli.serving import serve as run_exporter
    from gpudiag.exporter.log_format import daemon_logging
    from gpudiag.service import socket_path, state_dir as journal_dir

    with daemon_logging(log_level.value, log_format.value):  # what changes is told on stderr (docs/monitoring.md)
        expectations = read_expectations(profile, params or [], baseline_file)  # a bad profile stops it: exit 2
        options = collect_options(root, kernel_log, timeout, state_dir=state_dir)
        code = run_exporter(listen, web_config, options, interval, expectations, socket_path(root, socket),
                            journal_dir(root, state_dir), socket is not None)
    raise typer.Exit(code)
