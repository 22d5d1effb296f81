"""The exporter's connection slots: how many connections it serves at once, and who gives way when they are full.

A connection is either *waiting* (TLS handshake, reading a request head, idle between keep-alive requests) or
*serving* (a complete request being answered). At most `max_connections` are open. When a new connection finds
them all taken, the one that has been waiting longest is evicted (its socket shut down, which wakes its thread)
and the newcomer takes its slot; failing that, the serving connection whose answer has made no progress for the
longest (its client does not read: blocked in a write for at least STALL_SECONDS); only when every slot is serving
and every answer moving is the newcomer refused.

Why a stalled writer is evictable: on a 64-GPU node /metrics is 3.6 MB, far more than a socket's buffers hold, so
32 clients that send a request and never read held every slot for the 10 s write timeout and valid scrapes fell to
74-82 % (issue 24, item 18). A scraper reads as fast as the answer comes, so its write is never the one that has
stood still longest; the attacker's, once its buffers are full, stands still from then on.

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


STALL_SECONDS = 0.1  # an answer whose write has not moved for this long may give way to a newcomer


@dataclass
class Connection:
    """One client connection and the phase it is in."""
    sock: socket.socket
    since: float = field(default_factory=time.monotonic)  # when it entered its current phase
    serving: bool = False
    evicted: bool = False
    ident: int = 0
    writing: bool = False  # in the middle of writing an answer's body
    progress: float = 0.0  # when that write last moved (time.monotonic())

    def wrote(self) -> None:
        """Called around every send of an answer: the write is moving (one float store, no lock: read under the
        Connections lock, and a stale value only makes the connection look stalled a moment longer)."""
        self.progress = time.monotonic()


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
                victim = None if len(self._open) >= 2 * self.max_connections else self._victim(live)
                if victim is None:
                    self.refused += 1
                    return None
                victim.evicted = True
                self.evicted += 1
                _shut(victim.sock)
            conn = Connection(sock, ident=next(self._ids))
            self._open[conn.ident] = conn
            return conn

    @staticmethod
    def _victim(live: list[Connection]) -> Optional[Connection]:
        """The longest-waiting connection; else the serving one whose write has stood still longest, if that is at
        least STALL_SECONDS; else None."""
        waiting = [c for c in live if not c.serving]
        if waiting:
            return min(waiting, key=lambda c: c.since)
        stalled = [c for c in live if c.writing and time.monotonic() - c.progress >= STALL_SECONDS]
        return min(stalled, key=lambda c: c.progress) if stalled else None

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
