"""The HTTP side: `/metrics` (gzip when asked), `/healthz` (readiness: a recent collection succeeded), `/livez`
(liveness: this loop answers; it never touches the collector or a GPU) and a landing page at `/`; GET and HEAD
only, with the web config's TLS, basic auth, rate limit and response headers when configured.

Defences for a daemon on every GPU node, where any local user and anything on the network may be hostile
(issue 10, items 5-8; the limits are listed in docs/exporter-security.md):
- a request head is read whole before anything parses it, capped at 8 KiB (request line 4 KiB): more is answered
  431 (414) and the connection closed (http_head.py);
- the head must arrive within `max_request_seconds` (5 s) of the connection being accepted (TLS handshake
  included) or of its first byte on a reused connection, however it trickles; a client silent for
  `request_timeout_seconds` is dropped, and every write gives up after as long;
- at most `max_connections` connections at once; when all are taken, the one that has waited longest for its
  request gives way to the newcomer, or else the one whose answer has stood still longest (a client that does not
  read), so a slow, idle or non-reading client can never lock a scraper out (connections.py);
- a GET or HEAD with a body is refused (400, closed), and so is anything sent after a request before its answer
  (answered, then closed): no request is ever read out of another one's bytes;
- basic auth runs bcrypt one check at a time with bounded caches and a short queue (web_config.BasicAuth);
- a configured rate_limit is checked before authentication, as the toolkit does, on every path but /livez, which
  is exempt from authentication too (it answers "ok" and nothing else; a liveness probe answered 401 or 429 would
  restart a healthy pod);
- the listen backlog is the kernel's maximum, not http.server's 5;
- nothing is resolved: the listen address is bound as given (http.server would look up its FQDN in DNS at start-up,
  which hangs on a node whose resolver is down);
- handler errors are logged, never printed as tracebacks on stderr.
"""

from __future__ import annotations

import io
import logging
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable, Optional, Union
from urllib.parse import urlsplit

from gpudiag import __version__
from gpudiag.exporter.web.config import AuthBusy, WebConfig
from gpudiag.exporter.web.connections import Connection, Connections
from gpudiag.exporter.web.http_head import HeadRejected, HeadTimeout, read_head
from gpudiag.exporter.web.responses import GzipCache, accepts_gzip, landing_page

log = logging.getLogger(__name__)

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"
ALLOWED_METHODS = "GET, HEAD"
LINGER_SECONDS, LINGER_BYTES = 0.5, 65536  # after a 431/414: how long and how much is read and discarded
WRITE_CHUNK = 64 * 1024  # an answer's body is sent in pieces this large at most, each one marking progress


PATHS = {
    "/metrics": "Prometheus metrics (gzip when the scraper accepts it)",
    "/healthz": "readiness: 200 while the last collection is recent and complete, else 503",
    "/livez": "liveness: 200 while this HTTP server answers (never waits on a GPU)",
}
LANDING = landing_page(__version__, list(PATHS.items()))


class Routes:
    """What the handler serves; plain callables so that the HTTP layer knows nothing of collections.

    `metrics` returns the body as [the part cached per collection, per-scrape parts]: its gzip is cached likewise."""

    def __init__(self, metrics: Callable[[], list[bytes]], health: Callable[[], tuple[bool, str]]):
        self.metrics = metrics
        self.health = health
        self.gzip = GzipCache()

    def metrics_gzip(self) -> list[bytes]:
        return self.gzip.compress(self.metrics())


class Handler(BaseHTTPRequestHandler):
    server: "ExporterHTTPServer"
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection between scrapes
    server_version = "gpudiag"
    sys_version = ""

    def __init__(self, request, client_address, server: "ExporterHTTPServer", conn: Connection):
        self.conn = conn
        self._pending = b""  # bytes read after the last head
        # The first request's head is due this long after the accept, the TLS handshake included.
        self._deadline: Optional[float] = conn.since + server.max_request_seconds
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_seconds
        self.request.settimeout(self.timeout)
        # The body goes out in several writes (headers, metrics, process metrics): without NODELAY the last small
        # segment waits for the client's delayed ACK, 40 ms on Linux.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.server.web.tls is not None:
            # The handshake runs here, on the connection's own thread and within the first request's deadline.
            self.request.settimeout(max(0.001, self._deadline - time.monotonic()))
            self.request = self.server.web.tls.wrap_socket(self.request, server_side=True)
            if not self.server.connections.replace_socket(self.conn, self.request):
                self.request.close()
                raise ConnectionAbortedError("evicted during the TLS handshake")
            self.request.settimeout(self.timeout)
        super().setup()
        self.rfile.close()  # heads are read by read_head; each is parsed from its own bytes
        self.rfile = io.BytesIO()

    def handle_one_request(self) -> None:
        self.close_connection = True  # unless a complete, acceptable request says otherwise
        try:
            got = read_head(self.connection, self._pending, self._deadline, self.server.max_request_seconds,
                            self.timeout)
        except HeadRejected as exc:
            self._reject(exc.status, exc.reason)
            return
        except (HeadTimeout, OSError):
            return
        finally:
            self._deadline = None  # later requests: from their first byte
        if got is None or not self.server.connections.serving(self.conn):
            return
        head, self._pending = got
        try:
            self.rfile = io.BytesIO(head)
            super().handle_one_request()
        finally:
            self.server.connections.waiting(self.conn)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.command in ("GET", "HEAD") and (
                any(v.strip() != "0" for v in self.headers.get_all("Content-Length", []))
                or "Transfer-Encoding" in self.headers):
            # A body nobody reads would be taken for the next request: two answers to one request, a smuggling
            # primitive behind a proxy (issue 10, item 8). Scrapers never send one.
            self.close_connection = True
            self._send(400, b"a GET or HEAD request has no body\n")
            return False
        if self._pending:
            self.close_connection = True  # pipelined: this request is answered, the rest is never read
        return True

    def _reject(self, status: int, reason: str) -> None:
        """Answer a head that breaks a limit, before parsing it, and close. The client may still be sending: stop
        writing, then read and discard a bounded amount for a moment, so that the answer is not lost to a reset."""
        body = f"{reason}\n".encode()
        try:
            self.connection.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            socket.socket.shutdown(self.connection, socket.SHUT_WR)
            until, drained = time.monotonic() + LINGER_SECONDS, 0
            while drained < LINGER_BYTES and (left := until - time.monotonic()) > 0:
                self.connection.settimeout(left)
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass

    def finish(self) -> None:
        self.server.connections.release(self.conn)  # before any close: see Connections.release
        try:
            super().finish()
        finally:
            if self.server.web.tls is not None:
                self.request.close()

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if not self._admitted(path):
            return
        routes = self.server.routes
        if path == "/metrics":
            if accepts_gzip(self.headers.get("Accept-Encoding")):
                self._send(200, routes.metrics_gzip(), CONTENT_TYPE_METRICS,
                           {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
            else:
                self._send(200, routes.metrics(), CONTENT_TYPE_METRICS, {"Vary": "Accept-Encoding"})
        elif path == "/healthz":
            healthy, message = routes.health()
            self._send(200 if healthy else 503, message.encode() + b"\n")
        elif path == "/livez":
            self._send(200, b"ok\n")  # this thread answering is the whole check: no lock, no collector, no GPU
        elif path == "/":
            self._send(200, LANDING, "text/html; charset=utf-8")
        else:
            self._send(404, b"not found\n")

    do_HEAD = do_GET  # _send leaves the body out

    def _not_allowed(self) -> None:
        # Whatever body the request carries is not read: the connection closes after the answer, so that its
        # bytes are never taken for the next request.
        self.close_connection = True
        path = urlsplit(self.path).path
        if self._admitted(path):
            if path in PATHS or path == "/":
                self._send(405, b"method not allowed\n", extra={"Allow": ALLOWED_METHODS})
            else:
                self._send(404, b"not found\n")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    def _admitted(self, path: str) -> bool:
        """The rate limit, then authentication; False once the refusal is answered. /livez is exempt from both: it
        says "ok" and nothing else, and a kubelet probe has no password (a 401 or 429 would restart the pod)."""
        if path == "/livez":
            return True
        limiter = self.server.web.limiter
        if limiter is not None and not limiter.allow():
            self._send(429, b"Too Many Requests\n")
            return False
        return self._authorised()

    def _authorised(self) -> bool:
        auth = self.server.web.auth
        try:
            if auth is None or auth.check(self.headers.get("Authorization")):
                return True
        except AuthBusy:
            self.close_connection = True
            self._send(429, b"too many password checks queued; retry\n", extra={"Retry-After": "1"})
            return False
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
        for name, value in self.server.web.headers.items():  # http_server_config.headers, on every answer
            self.send_header(name, value)
        if self.server.stopping or self.close_connection:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self._write_body(chunks)

    def _write_body(self, chunks: list[bytes]) -> None:
        """The body in sends of at most WRITE_CHUNK bytes, each marking the connection's progress: a client that
        stops reading leaves its connection stalled, and evictable (connections.py)."""
        conn, sock = self.conn, self.connection
        conn.wrote()
        conn.writing = True
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    sent = sock.send(view[:WRITE_CHUNK])
                    conn.wrote()
                    view = view[sent:]
        finally:
            conn.writing = False

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the name http.server uses
        log.debug("%s %s", self.address_string(), format % args)


class ExporterHTTPServer(HTTPServer):
    daemon_threads = True
    # http.server's default is 5: at 8-16 concurrent scrapes, SYN retries gave a p99 of 1 s (issue 10, item 8).
    # The kernel caps it at net.core.somaxconn.
    request_queue_size = socket.SOMAXCONN

    def __init__(self, family: socket.AddressFamily, address: tuple, routes: Routes, web: WebConfig,
                 max_connections: int = 16, request_timeout_seconds: float = 10.0,
                 max_request_seconds: float = 5.0, listening: Optional[socket.socket] = None):
        """Bind `address`; or, given `listening` (a socket systemd passed, bound and listening already), serve on
        that one as it is."""
        self.address_family = family
        self.routes = routes
        self.web = web
        self.request_timeout_seconds = request_timeout_seconds
        self.max_request_seconds = max_request_seconds
        self.stopping = False
        # One phase (waiting for a head, or answering one) never lasts longer than this.
        self.connections = Connections(max_connections, request_timeout_seconds + max_request_seconds)
        super().__init__(address, Handler, bind_and_activate=False)
        if listening is not None:  # bound and listening by systemd: taken as it is
            self.socket.close()
            self.socket = listening
            self.server_address = listening.getsockname()
            self.server_name, self.server_port = self.server_address[:2]
        else:
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

    @property
    def rejected_connections(self) -> int:
        return self.connections.refused

    def server_bind(self) -> None:
        # TCPServer's bind, without HTTPServer's getfqdn() (a DNS lookup).
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = host, port

    def process_request(self, request, client_address) -> None:
        conn = None if self.stopping else self.connections.admit(request)
        if conn is None:
            self.shutdown_request(request)
            return
        try:
            threading.Thread(target=self._serve_one, args=(request, client_address, conn), daemon=True).start()
        except BaseException as exc:  # noqa: BLE001 - "can't start new thread" must not leak the slot (item 8)
            self.connections.release(conn)
            self.shutdown_request(request)
            log.warning("connection from %s refused: cannot start its thread: %s", client_address, exc,
                        extra={"bound": ("http thread",)})

    def _serve_one(self, request, client_address, conn: Connection) -> None:
        try:
            self.RequestHandlerClass(request, client_address, self, conn)
        except Exception as exc:  # noqa: BLE001 - a broken client connection is not the exporter's failure
            log.debug("connection from %s: %s: %s", client_address, type(exc).__name__, exc)
        finally:
            self.connections.release(conn)
            self.shutdown_request(request)

    def _reap(self) -> None:
        period = min(1.0, self.connections.max_phase_seconds / 4)
        while not self.stopping:
            time.sleep(period)
            self.connections.reap()

    def handle_error(self, request, client_address) -> None:
        log.debug("error serving %s", client_address, exc_info=True)
