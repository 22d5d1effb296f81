"""Hostile HTTP clients against a real `gpudiag serve`, and a scraper that counts how many valid scrapes still succeed.

Shared by tests/e2e/test_exporter_attacks.py (short runs, asserted) and bench/exporter_attack.py (longer runs, printed).
Everything stays on loopback and stops by itself: each attack runs until `until` (a time.monotonic() value), each
of its clients makes a bounded number of attempts, and every socket has a timeout.

The attacks are the ones a red-team pass reproduced against the exporter (issue 10, items 5-8):
- header flood: request heads of up to 97 headers of 65,000 bytes, parsed before authentication;
- bcrypt flood: basic-auth requests with a new wrong password each time, so that no cache can answer them;
- slowloris: a request head trickled one header line at a time, never finished;
- connection flood: connections opened and left idle, reopened as soon as the server drops them.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from bench.exporter_process import ExporterProcess
MAX_ATTEMPTS = 100_000  # per attacking client: a bound on the loop whatever the clock does


def basic_auth(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Target(ExporterProcess):
    """`gpudiag serve` over the fake NVIDIA node (tests/support/exporter_node.py) as its own process on loopback, as the
    exporter benchmarks run it."""

    def __init__(self, root: Path, serve_args: tuple[str, ...] = (), gpus: int = 2):
        super().__init__([sys.executable, "-m", "tests.support.exporter_node", str(root), str(gpus), "--", "--listen",
                          "127.0.0.1:0", "--interval", "1", "--timeout", "5", *serve_args])
        # stderr is drained so that a chatty server can never block on a full pipe
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()


def scrape_once(address: tuple[str, int], authorization: Optional[str] = None, timeout: float = 2.0) -> bool:
    """One valid scrape on a fresh connection: 200 with a complete body within `timeout`."""
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": authorization} if authorization else {})
        response = conn.getresponse()
        return response.status == 200 and b"gpudiag_build_info" in response.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


@dataclass
class Outcome:
    scrapes: list[tuple[bool, float]] = field(default_factory=list)  # (succeeded, seconds)
    rss_mib: list[float] = field(default_factory=list)
    attack_requests: int = 0

    @property
    def success_rate(self) -> float:
        return sum(ok for ok, _ in self.scrapes) / max(1, len(self.scrapes))

    def p99_ms(self) -> float:
        ordered = sorted(seconds for _, seconds in self.scrapes)
        return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))] * 1000 if ordered else 0.0

    @property
    def peak_rss_mib(self) -> float:
        return max(self.rss_mib, default=0.0)


def under_attack(target: Target, attack: Callable[[tuple[str, int], float], int], seconds: float,
                 clients: int = 16, scrape_every: float = 0.05, authorization: Optional[str] = None,
                 warm_up: float = 0.5) -> Outcome:
    """Run `clients` copies of `attack` for `seconds` while one scraper scrapes every `scrape_every` seconds and the
    server's RSS is sampled; scraping starts `warm_up` seconds in, once the attackers hold what they can."""
    outcome = Outcome()
    started = time.monotonic()
    until = started + seconds
    counts: list[int] = []

    def attacker() -> None:
        counts.append(attack(target.address, until))

    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    next_scrape = started + warm_up
    while time.monotonic() < until:
        outcome.rss_mib.append(target.rss_mib())
        now = time.monotonic()
        if now >= next_scrape:
            t0 = time.monotonic()
            ok = scrape_once(target.address, authorization)
            outcome.scrapes.append((ok, time.monotonic() - t0))
            next_scrape = t0 + scrape_every
        else:
            time.sleep(min(0.01, next_scrape - now))
    for thread in threads:
        thread.join(timeout=10)
    outcome.rss_mib.append(target.rss_mib())
    outcome.attack_requests = sum(counts)
    return outcome


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset or TLS error after its answer ends it too); closes."""
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    finally:
        sock.close()
    return reply


def _connect(address: tuple[str, int], timeout: float = 2.0) -> Optional[socket.socket]:
    try:
        return socket.create_connection(address, timeout=timeout)
    except OSError:
        return None


def _sessions(address: tuple[str, int], until: float, session: Callable[[socket.socket], None]) -> int:
    """Connect, run `session` until the server drops it (or the attack ends), reconnect; the number of connections."""
    opened = 0
    while time.monotonic() < until and opened < MAX_ATTEMPTS:
        sock = _connect(address)
        if sock is None:
            time.sleep(0.01)
            continue
        opened += 1
        try:
            session(sock)
        except OSError:
            pass  # cut off by the server: the point of the defence
        finally:
            sock.close()
    return opened


def header_flood(address: tuple[str, int], until: float, headers: int = 97, size: int = 65_000) -> int:
    """Request heads of `headers` × `size` bytes (the issue's 97 × 65,000 B, just under http.server's per-line and
    per-count limits), sent as fast as the server takes them."""
    line = b"X-Flood: " + b"a" * size + b"\r\n"

    def session(sock: socket.socket) -> None:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(headers):
            if time.monotonic() >= until:
                return
            sock.sendall(line)
        sock.sendall(b"\r\n")
        sock.recv(1024)

    return _sessions(address, until, session)


def bcrypt_flood(user: str) -> Callable[[tuple[str, int], float], int]:
    """Basic-auth requests for `user` with a different wrong password each time: every one needs a bcrypt check."""
    counter = iter(range(MAX_ATTEMPTS * 64))

    def attack(address: tuple[str, int], until: float) -> int:
        sent = 0
        while time.monotonic() < until and sent < MAX_ATTEMPTS:
            password = f"wrong-{next(counter)}-{os.getpid()}"
            conn = http.client.HTTPConnection(*address, timeout=5)
            sent += 1
            try:
                conn.request("GET", "/metrics", headers={"Authorization": basic_auth(user, password)})
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                conn.close()
        return sent

    return attack


def slowloris(every: float = 0.3) -> Callable[[tuple[str, int], float], int]:
    """A request head sent one header line every `every` seconds, never finished; reconnects when dropped."""

    def session(sock: socket.socket, until: float) -> None:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        n = 0
        while time.monotonic() < until:
            time.sleep(every)
            n += 1
            sock.sendall(b"X-Slow-%d: y\r\n" % n)

    return lambda address, until: _sessions(address, until, lambda sock: session(sock, until))


def connection_flood(address: tuple[str, int], until: float, held: int = 4) -> int:
    """`held` idle connections per client, each reopened as soon as the server drops it."""
    opened = 0
    socks: list[socket.socket] = []
    try:
        while time.monotonic() < until and opened < MAX_ATTEMPTS:
            while len(socks) < held and time.monotonic() < until:
                sock = _connect(address)
                if sock is None:
                    time.sleep(0.01)
                    break
                sock.setblocking(False)
                socks.append(sock)
                opened += 1
            time.sleep(0.02)
            for sock in list(socks):
                try:
                    if sock.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue  # still open
                except OSError:
                    pass
                sock.close()
                socks.remove(sock)
    finally:
        for sock in socks:
            sock.close()
    return opened


def never_read(address: tuple[str, int], until: float, receive_buffer: int = 4096) -> int:
    """A GET /metrics sent whole, then nothing read: the answer fills the socket's buffers (a small receive buffer,
    as an attacker sets it) and the server's write stands still. Reconnects as soon as the server drops it (seen
    as POLLRDHUP, which needs no read), so that it holds what it can for the whole attack."""
    import select

    opened = 0
    while time.monotonic() < until and opened < MAX_ATTEMPTS:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:  # 0: the system's default
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(2.0)
        try:
            sock.connect(address)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        except OSError:
            sock.close()
            time.sleep(0.01)
            continue
        opened += 1
        poller = select.poll()
        poller.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        try:
            while time.monotonic() < until and not poller.poll(100):
                pass
        finally:
            sock.close()
    return opened
