"""`gpudiag serve`'s command line; gpudiag/cli/serve/serving.py assembles what it runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag.cli.shared.node_collect import UsageProblem, collect_options
from gpudiag.cli.shared.node_collect import expectations as read_expectations
from gpudiag.cli.shared.options import (BaselineOption, KernelLogOption, LogFormat, LogLevel, ParamOption,
                                        ProfileOption, RootOption, SocketOption, TimeoutOption, finite)


# gpudiag.exporter.web.listen.DEFAULT_LISTEN, spelled out so that the CLI does not import the exporter (and
# prometheus_client) for every command; a test keeps the two equal.
DEFAULT_LISTEN = ":9858"
LISTEN_ENV = "GPUDIAG_LISTEN"


def listen_addresses(given: Optional[List[str]], environ=os.environ) -> list[str]:
    """Where to listen: the flags, else $GPUDIAG_LISTEN (what /etc/default/gpudiag-exporter sets, now read by a
    hand-started serve too), else every interface on :9858. Either may list several addresses, comma-separated."""
    def split(values: List[str]) -> list[str]:
        return [part for value in values for part in value.replace(",", " ").split()]

    if given:
        return split(given)  # `--listen ''` is no address at all: refused, never the default
    return split([environ.get(LISTEN_ENV, "")]) or [DEFAULT_LISTEN]


def serve(
    listen: Optional[List[str]] = typer.Option(
        None, "--listen", "--web.listen-address",
        help="HOST:PORT to serve /metrics, /healthz, /livez and a landing page at / on; :PORT is every interface. "
             "Repeat it (or comma-separate) to serve on several; one that cannot be bound refuses them all. Default: "
             "$GPUDIAG_LISTEN, else :9858."),
    systemd_socket: bool = typer.Option(
        False, "--web.systemd-socket", help="Serve on the listening socket(s) systemd passes (socket activation: "
                                            "gpudiag.socket owns the port) instead of --listen / $GPUDIAG_LISTEN."
    ),
    web_config: Optional[Path] = typer.Option(
        None, "--web-config", "--web.config.file", help="TLS, basic auth, rate limit, headers (exporter-toolkit "
                                                        "web-config YAML)."
    ),
    interval: float = typer.Option(15.0, "--interval", min=0.5, callback=finite, help="Seconds between collections."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    kernel_log: Optional[Path] = KernelLogOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
    baseline_file: Optional[Path] = BaselineOption,
    socket: Optional[Path] = SocketOption,
    state_dir: Optional[Path] = typer.Option(
        None, "--state-dir", help="Keep the event journal here (default /var/lib/gpudiag; under --root DIR, "
                                  "DIR/var/lib/gpudiag)."
    ),
    log_level: LogLevel = typer.Option(
        LogLevel.info, "--log.level", help="The least severe lines logged on stderr: debug, info (every change told "
                                           "once: a GPU lost and back, a check failing and passing again), warn (only "
                                           "what went wrong), error."
    ),
    log_format: LogFormat = typer.Option(
        LogFormat.logfmt, "--log.format", help="Log lines as logfmt (key=value, as node_exporter writes them) or one "
                                               "JSON object each."
    ),
) -> None:
    """Serve Prometheus metrics until SIGTERM; collection runs in the background, so a scrape never waits on a GPU."""
    from gpudiag.cli.serve.log_format import daemon_logging
    from gpudiag.cli.serve.serving import serve as run_exporter
    from gpudiag.service import socket_path, state_dir as journal_dir

    if systemd_socket and listen:
        raise UsageProblem("--listen and --web.systemd-socket both say where to listen: give one")
    if socket is not None and not socket.parent.exists():
        # The socket is made here, its directory is not: a typo must not leave a tree of directories behind.
        raise UsageProblem(f"--socket {socket}: no such directory {socket.parent}")
    with daemon_logging(log_level.value, log_format.value):  # what changes is told on stderr (docs/monitoring.md)
        expectations = read_expectations(profile, params or [], baseline_file)  # a bad profile stops it: exit 2
        # power_samples: `top` through the socket shows the mean power since the service's previous collection
        options = collect_options(root, kernel_log, timeout, state_dir=state_dir, power_samples=True)
        code = run_exporter(listen_addresses(listen), web_config, options, interval, expectations,
                            socket_path(root, socket), journal_dir(root, state_dir), socket is not None,
                            systemd_socket=systemd_socket)
    raise typer.Exit(code)
