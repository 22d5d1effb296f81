"""`gpudiag serve` assembled: the one place that wires collection (gpudiag/daemon/), the exporter
(collector → poller → state → HTTP) and the local service (socket, journal) together, and runs them until SIGTERM.

Where it listens and why: gpudiag/exporter/web/listen.py."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

from gpudiag.cli.serve.changes import ChangeLog
from gpudiag.daemon.fresh import FreshCollections
from gpudiag.daemon.follower import KernelLogFollower
from gpudiag.daemon.poller import Poller, collect_and_judge
from gpudiag.exitcodes import ExitCode
from gpudiag.exporter.state import ExporterState, WatcherFactory
from gpudiag.exporter.web.config import WebConfig, WebConfigError, load_web_config
from gpudiag.exporter.web.http_server import ExporterHTTPServer, Routes
from gpudiag.exporter.web.listen import ListenError, bind, parse_listen, split_addresses, systemd_sockets
from gpudiag.model import CheckResult, NodeSnapshot
from gpudiag.probe import deadline
from gpudiag.probe.nvml.events import XidWatcher
from gpudiag.service.runtime import Service
from gpudiag.service.socket_server import SocketBindError

if TYPE_CHECKING:
    from gpudiag.expect import Expectations
    from gpudiag.probe.collector import CollectOptions

log = logging.getLogger(__name__)


def _default_judge(snapshot: NodeSnapshot) -> list[CheckResult]:
    from gpudiag.checks import run_checks

    return run_checks(snapshot)


def judge_against(expectations: Optional["Expectations"]) -> Callable[[NodeSnapshot], list[CheckResult]]:
    """The checks against the node's profile and baseline (`serve --profile/-p/--baseline`), as `check` runs them:
    without them a node that lost every GPU has nothing to fail against."""
    if expectations is None:
        return _default_judge
    from gpudiag.checks import run_checks

    return lambda snapshot: run_checks(snapshot, expectations)


class ServeDaemon:
    """Everything `gpudiag serve` runs, startable and stoppable in-process (tests and benchmarks use it so)."""

    def __init__(
        self,
        listen: Union[str, Sequence[str]],
        web: WebConfig,
        collect: Callable[[], NodeSnapshot],
        interval_seconds: float,
        collect_timeout_seconds: float,
        judge: Callable[[NodeSnapshot], list[CheckResult]] = _default_judge,
        watcher_factory: Optional[WatcherFactory] = XidWatcher,
        max_connections: int = 16,
        request_timeout_seconds: float = 10.0,
        max_request_seconds: float = 5.0,
        socket_path: Optional[Path] = None,
        state_dir: Optional[Path] = None,
        socket_required: bool = True,
        service_options: Optional[dict] = None,  # the socket's bounds (gpudiag.service.runtime.Service)
        listening: Sequence["socket.socket"] = (),  # systemd's sockets (--web.systemd-socket), served instead
    ):
        # The Collector bounds itself to collect_timeout_seconds; the margin covers the checks and bookkeeping.
        cycle_deadline = collect_timeout_seconds + max(2.0, collect_timeout_seconds / 2)
        self.state = ExporterState(stale_after_seconds=2 * interval_seconds + cycle_deadline,
                                   watcher_factory=watcher_factory)
        # One collection at a time, shared by the poller and the socket's clients (gpudiag/daemon/fresh.py).
        # One kernel-log follower: the exporter's counters and the service journal take what is new from it.
        follower = KernelLogFollower()
        self.collections = FreshCollections(lambda: collect_and_judge(collect, judge, follower))
        self.changes = ChangeLog()  # what changed, told once per change on the log (gpudiag/cli/serve/changes.py)
        self.poller = Poller(self.collections.collect, self._on_cycle, interval_seconds, cycle_deadline)
        self.service: Optional[Service] = None
        if socket_path is not None:
            try:
                self.service = Service(self.collections, socket_path, state_dir, collect_wait_seconds=cycle_deadline,
                                       **(service_options or {}))
            except SocketBindError as exc:
                if socket_required:
                    raise  # before the HTTP port is bound: nothing to close
                # The default path, not writable (not root, no RuntimeDirectory=): metrics still, local clients
                # probe directly.
                log.warning("no local socket: %s; `gpudiag check` will probe directly", exc.strerror)
        routes = Routes(self.state.body, self._health)

        def server(family, address, listening=None) -> ExporterHTTPServer:
            return ExporterHTTPServer(family, address, routes, web, max_connections=max_connections,
                                      request_timeout_seconds=request_timeout_seconds,
                                      max_request_seconds=max_request_seconds, listening=listening)

        # Every address bound before any is served: one that cannot be refuses them all (nothing half-served).
        self.servers: list[ExporterHTTPServer] = []
        try:
            for sock in listening:
                self.servers.append(server(sock.family, sock.getsockname(), sock))
            for address in ([] if listening else split_addresses([listen] if isinstance(listen, str) else listen)):
                try:
                    host, port = parse_listen(address)
                except ValueError:
                    raise ListenError(address, "expected HOST:PORT, [IPV6]:PORT or :PORT") from None
                try:
                    self.servers.append(bind(host, port, server))
                except OSError as exc:
                    raise ListenError(address, exc.strerror or str(exc)) from None
            if not self.servers:
                raise ListenError("--listen", "no address to listen on")
        except BaseException:
            for bound in self.servers:
                bound.server_close()
            if self.service is not None:  # no socket left behind by a service that never ran
                self.service.stop()
            raise
        self.http = self.servers[0]  # the first address: what `address` and `url` name
        self.scheme = "https" if web.tls is not None else "http"
        self._http_threads = [threading.Thread(target=bound.serve_forever, kwargs={"poll_interval": 0.2},
                                               name="gpudiag-http", daemon=True) for bound in self.servers]

    @property
    def address(self) -> tuple[str, int]:
        return self.http.server_address[0], self.http.server_address[1]

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        """Every address served, in the order given."""
        found = []
        for bound in self.servers:
            host, port = bound.server_address[0], bound.server_address[1]
            found.append(f"{self.scheme}://{f'[{host}]' if ':' in host else host}:{port}")
        return found

    def start(self) -> "ServeDaemon":
        if self.service is not None:
            self.service.start()
        self.poller.start()
        for thread in self._http_threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Prompt, whatever is hung: nothing here waits on a vendor call."""
        for bound in self.servers:
            bound.stopping = True
        self.poller.stop()
        if self.service is not None:
            self.service.stop()
        if self.state.watcher is not None:
            self.state.watcher.stop(timeout_seconds=1.0)
        for bound, thread in zip(self.servers, self._http_threads):
            if thread.is_alive():
                bound.shutdown()  # returns within one poll interval
            bound.server_close()

    def _on_cycle(self, cycle) -> None:
        self.state.on_cycle(cycle)  # first: it gives a lost GPU the identity it had, which its log line names
        self.changes.observe(cycle)

    def _health(self) -> tuple[bool, str]:
        if not self.poller.alive:
            return False, "the collection loop is not running"
        return self.state.health()


def serve(listen: Union[str, Sequence[str]], web_config: Optional[Path], options: "CollectOptions",
          interval_seconds: float, expectations: Optional["Expectations"] = None, socket_path: Optional[Path] = None,
          state_dir: Optional[Path] = None, socket_required: bool = False, systemd_socket: bool = False) -> int:
    """Run the exporter until SIGTERM or SIGINT; 0 on a clean stop, 2 on a bad address, web config or socket.
    `systemd_socket`: serve on the sockets systemd passed instead of `listen` (gpudiag.socket)."""
    from gpudiag.probe.collector import Collector

    try:
        listening = systemd_sockets() if systemd_socket else []
    except ListenError as exc:
        print(f"gpudiag: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE

    try:
        web = load_web_config(web_config) if web_config is not None else WebConfig()
    except WebConfigError as exc:
        print(f"gpudiag: error: --web-config: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    collector = Collector(options)
    try:
        exporter = ServeDaemon(listen, web, collector.collect, interval_seconds, options.timeout_seconds,
                            judge=judge_against(expectations), socket_path=socket_path, state_dir=state_dir,
                            socket_required=socket_required, service_options={"expect": expectations},
                            listening=listening)
    except SocketBindError as exc:
        print(f"gpudiag: error: cannot listen on {exc.strerror}", file=sys.stderr)
        return ExitCode.USAGE
    except ListenError as exc:
        print(f"gpudiag: error: cannot listen on {exc.where}: {exc.reason}", file=sys.stderr)
        return ExitCode.USAGE
    except (ValueError, OSError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        print(f"gpudiag: error: cannot listen: {reason}", file=sys.stderr)
        return ExitCode.USAGE

    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    exporter.start()
    log.info("serving " + " ".join(f"{url}/metrics" for url in exporter.urls), extra={"fields": {
        "interval_seconds": interval_seconds, "socket": str(socket_path) if exporter.service else None}})
    while not stop.wait(1.0):
        pass
    exporter.stop()
    # Closing the vendor libraries is bounded too: a library with a hung call may hang its shutdown.
    closed = deadline.run_one(lambda tracker: collector.close(), 2.0, "close")
    if not closed.done:
        log.warning("closing the vendor libraries did not finish; exiting anyway")
    log.info("stopped")
    return ExitCode.OK
