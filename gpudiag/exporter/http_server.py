"""The HTTP side: `/metrics` and `/healthz`, GET and HEAD only, with TLS and basic auth when configured.

Defences for a daemon on every GPU node:
- bounded concurrency: at most `max_connections` connections are served at once; one more is closed at accept
  (no thread is started for it), so a flood costs the node nothing but a refused connection;
- timeouts: every socket operation (TLS handshake, reading a request, writing a response, waiting for the next
  keep-alive request) gives up after `request_timeout_seconds`, and a reaper closes the connection of any request
  (handshake included) still in progress after `max_request_seconds`, so a client that trickles one byte at a
  time cannot hold a slot either; an idle keep-alive connection is never cut in the middle of a request;
- nothing is resolved: the listen address is bound as given (http.server would look up its FQDN in DNS at start-up,
  which hangs on a node whose resolver is down);
- handler errors are logged, never printed as tracebacks on stderr.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable, Optional, Union
from urllib.parse import urlsplit

from gpudiag.exporter.web_config import WebConfig

log = logging.getLogger(__name__)

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"
ALLOWED_METHODS = "GET, HEAD"


class Routes:
    """What the handler serves; plain callables so that the HTTP layer knows nothing of collections."""

    def __init__(self, metrics: Callable[[], list[bytes]], health: Callable[[], tuple[bool, str]]):
        self.metrics = metrics
        self.health = health


class Handler(BaseHTTPRequestHandler):
    server: "ExporterHTTPServer"
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection between scrapes
    server_version = "gpudiag"
    sys_version = ""

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_seconds
        self.request.settimeout(self.timeout)
        # The body goes out in several writes (headers, metrics, process metrics): without NODELAY the last small
        # segment waits for the client's delayed ACK, 40 ms on Linux.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.server.web.tls is not None:
            # The handshake runs here, on the connection's own thread and under its timeout, not in the accept loop.
            self.request = self.server.web.tls.wrap_socket(self.request, server_side=True)
        super().setup()

    def handle_one_request(self) -> None:
        self.server.track(self.connection)  # from the first byte of this request to the end of its response
        try:
            super().handle_one_request()
        finally:
            self.server.untrack(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self.server.web.tls is not None:
                self.request.close()

    def do_GET(self) -> None:
        if not self._authorised():
            return
        path = urlsplit(self.path).path
        routes = self.server.routes
        if path == "/metrics":
            self._send(200, routes.metrics(), CONTENT_TYPE_METRICS)
        elif path == "/healthz":
            healthy, message = routes.health()
            self._send(200 if healthy else 503, message.encode() + b"\n")
        else:
            self._send(404, b"not found\n")

    do_HEAD = do_GET  # _send leaves the body out

    def _not_allowed(self) -> None:
        # Whatever body the request carries is not read: the connection closes after the answer, so that its
        # bytes are never taken for the next request.
        self.close_connection = True
        if self._authorised():
            path = urlsplit(self.path).path
            if path in ("/metrics", "/healthz"):
                self._send(405, b"method not allowed\n", extra={"Allow": ALLOWED_METHODS})
            else:
                self._send(404, b"not found\n")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    def _authorised(self) -> bool:
        auth = self.server.web.auth
        if auth is None or auth.check(self.headers.get("Authorization")):
            return True
        self._send(401, b"unauthorized\n", extra={"WWW-Authenticate": 'Basic realm="gpudiag"'})
        return False

    def _send(self, code: int, body: Union[bytes, list[bytes]], content_type: str = "text/plain; charset=utf-8",
              extra: Optional[dict[str, str]] = None) -> None:
        chunks = [body] if isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(sum(len(chunk) for chunk in chunks)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        if self.server.stopping or self.close_connection:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            for chunk in chunks:
                self.wfile.write(chunk)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the name http.server uses
        log.debug("%s %s", self.address_string(), format % args)


class ExporterHTTPServer(HTTPServer):
    daemon_threads = True

    def __init__(self, family: socket.AddressFamily, address: tuple, routes: Routes, web: WebConfig,
                 max_connections: int = 16, request_timeout_seconds: float = 10.0,
                 max_request_seconds: float = 30.0):
        self.address_family = family
        self.routes = routes
        self.web = web
        self.request_timeout_seconds = request_timeout_seconds
        self.max_request_seconds = max_request_seconds
        self.stopping = False
        self.rejected_connections = 0
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: dict[socket.socket, float] = {}
        self._open_lock = threading.Lock()
        super().__init__(address, Handler, bind_and_activate=False)
        try:
            if family == socket.AF_INET6 and address[0] == "::":
                # Dual stack: one socket for IPv4 and IPv6 clients ("::" alone would be IPv6-only on some hosts).
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise
        threading.Thread(target=self._reap, name="gpudiag-http-reaper", daemon=True).start()

    def server_bind(self) -> None:
        # TCPServer's bind, without HTTPServer's getfqdn() (a DNS lookup).
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = host, port

    def process_request(self, request, client_address) -> None:
        if self.stopping or not self._slots.acquire(blocking=False):
            self.rejected_connections += 1
            self.shutdown_request(request)
            return
        self.track(request)  # the TLS handshake counts as part of the first request
        threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True).start()

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception as exc:  # noqa: BLE001 - a broken client connection is not the exporter's failure
            log.debug("connection from %s: %s: %s", client_address, type(exc).__name__, exc)
        finally:
            self.shutdown_request(request)
            self.untrack(request)
            self._slots.release()

    def track(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open[sock] = time.monotonic()

    def untrack(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.pop(sock, None)

    def _reap(self) -> None:
        period = min(1.0, self.max_request_seconds / 2)
        while not self.stopping:
            time.sleep(period)
            now = time.monotonic()
            with self._open_lock:
                expired = [s for s, since in self._open.items() if now - since > self.max_request_seconds]
                for sock in expired:
                    self._open.pop(sock, None)
            for sock in expired:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the handler blocked on it; it then cleans up
                except OSError:
                    pass

    def handle_error(self, request, client_address) -> None:
        log.debug("error serving %s", client_address, exc_info=True)
