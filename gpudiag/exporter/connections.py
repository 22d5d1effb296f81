"""The exporter's connection slots: how many connections it serves at once, and who gives way when they are full.

A connection is either *waiting* (TLS handshake, reading a request head, idle between keep-alive requests) or
*serving* (a complete request being answered). At most `max_connections` are open. When a new connection finds
them all taken, the one that has been waiting longest is evicted (its socket shut down, which wakes its thread)
and the newcomer takes its slot; only when every slot is serving a complete request is the newcomer refused.

Why evict rather than refuse: a scraper sends its whole request with the connection, so it waits for
microseconds, while a slowloris client or an idle connection waits for seconds; the longest waiter is always an
attacker or an idle keep-alive connection (which its client simply reopens). Refusing newcomers instead let 16
slow clients hold every slot (issue 10, item 7). Serving slots are bounded by what a request can cost: the head
is capped, bcrypt checks are serialised and their queue is short (web_config.BasicAuth), and every write has a
timeout. The reaper closes any connection still in one phase after `max_phase_seconds` (a TLS handshake or a write
that a socket timeout does not bound as a whole).
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Connection:
    sock: socket.socket
    since: float = field(default_factory=time.monotonic)  # when it entered its current phase
    serving: bool = False
    evicted: bool = False
    ident: int = 0


def _shut(sock: socket.socket) -> None:
    try:
        # socket.socket's own shutdown, also for an SSLSocket: a raw shutdown wakes the thread blocked in it
        # without touching the TLS object that thread is using.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class Connections:
    def __init__(self, max_connections: int, max_phase_seconds: float):
        self.max_connections = max_connections
        self.max_phase_seconds = max_phase_seconds
        self.refused = 0
        self.evicted = 0
        self._open: dict[int, Connection] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def admit(self, sock: socket.socket) -> Optional[Connection]:
        """A slot for `sock`, evicting the longest-waiting connection if need be; None when all are serving."""
        with self._lock:
            live = [c for c in self._open.values() if not c.evicted]
            # evicted connections still hold a thread until it notices: bounded too, at as many again
            if len(live) >= self.max_connections:
                waiting = [c for c in live if not c.serving]
                if not waiting or len(self._open) >= 2 * self.max_connections:
                    self.refused += 1
                    return None
                victim = min(waiting, key=lambda c: c.since)
                victim.evicted = True
                self.evicted += 1
                _shut(victim.sock)
            conn = Connection(sock, ident=next(self._ids))
            self._open[conn.ident] = conn
            return conn

    def replace_socket(self, conn: Connection, sock: socket.socket) -> bool:
        """The connection is now spoken through `sock` (TLS); False if it was evicted meanwhile."""
        with self._lock:
            conn.sock = sock
            return not conn.evicted

    def serving(self, conn: Connection) -> bool:
        """The connection's request is complete: it may no longer be evicted. False if it was evicted first."""
        with self._lock:
            if conn.evicted:
                return False
            conn.serving, conn.since = True, time.monotonic()
            return True

    def waiting(self, conn: Connection) -> None:
        with self._lock:
            conn.serving, conn.since = False, time.monotonic()

    def release(self, conn: Connection) -> None:
        """Idempotent; called before the socket is closed, so that an eviction never shuts down a reused fd."""
        with self._lock:
            self._open.pop(conn.ident, None)

    def count(self) -> int:
        with self._lock:
            return len(self._open)

    def reap(self) -> None:
        """Shut down every connection stuck in one phase for longer than max_phase_seconds."""
        now = time.monotonic()
        with self._lock:
            for conn in self._open.values():
                if not conn.evicted and now - conn.since > self.max_phase_seconds:
                    conn.evicted = True
                    _shut(conn.sock)
