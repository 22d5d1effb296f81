"""Clients that send a request and never read (issue 24, item 18): on a 64-GPU node /metrics is 3.2-3.6 MB, more
than a socket's buffers hold, so the server's write to such a client stands still; 32 of them held every slot for
the 10 s write timeout. A write that makes no progress is evictable now (gpudiag/exporter/web/connections.py).

Here the HTTP server alone (gpudiag/exporter/web/http_server.py, no collector) serves a 4 MB body from 4 connection
slots to 8 such clients (tests/support/http_attacks.py never_read) while a scraper scrapes;
bench/exporter_slow_readers.py measures the same against a real 64-GPU `gpudiag serve`."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from typing import Iterator

import pytest

from gpudiag.exporter.web.config import WebConfig
from gpudiag.exporter.web.http_server import ExporterHTTPServer, Routes
from tests.support.http_attacks import never_read

pytestmark = pytest.mark.slow  # end to end: real servers and processes (tests/README.md)

BODY = b"# a 64-GPU node's worth of series\n" + b"gpudiag_build_info 1\n" * 200_000  # 4.2 MB
SLOTS, ATTACKERS = 4, 8


@contextlib.contextmanager
def attacked(max_connections: int, attackers: int, seconds: float) -> Iterator[ExporterHTTPServer]:
    """The HTTP server serving BODY, with `attackers` clients that never read for `seconds`; stopped after."""
    server = ExporterHTTPServer(socket.AF_INET, ("127.0.0.1", 0), Routes(lambda: [BODY], lambda: (True, "ok")),
                                WebConfig(), max_connections=max_connections, request_timeout_seconds=10.0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=never_read, args=(server.server_address[:2], until), daemon=True)
               for _ in range(attackers)]
    try:
        for thread in threads:
            thread.start()
        yield server
        for thread in threads:
            thread.join(timeout=5)
    finally:
        server.stopping = True
        server.shutdown()
        server.server_close()


def scrape(address, timeout: float = 3.0) -> tuple[bool, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        ok = response.status == 200 and response.read() == BODY
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        conn.close()
    return ok, time.monotonic() - started


def test_clients_that_never_read_cannot_starve_scrapes():
    with attacked(SLOTS, ATTACKERS, seconds=4.0) as server:
        address = server.server_address[:2]
        until = time.monotonic() + 3.5
        time.sleep(1.0)  # every slot taken, every attacker's write standing still
        assert server.connections.count() >= SLOTS
        results = []
        while time.monotonic() < until:
            results.append(scrape(address))
            time.sleep(0.05)
    assert len(results) >= 10
    assert all(ok for ok, _ in results), results  # within 3 s each, the whole 4.2 MB
    assert server.connections.evicted > 0


def test_a_reading_scraper_is_never_the_one_evicted():
    """Newcomers evict the write that has stood still longest: a scraper that reads, however many arrive while it
    does, keeps its slot and gets the whole body."""
    with attacked(max_connections=2, attackers=4, seconds=3.0) as server:
        time.sleep(0.5)
        slow = []
        for _ in range(5):
            conn = http.client.HTTPConnection(*server.server_address[:2], timeout=5)
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            body = b""
            while chunk := response.read(256 * 1024):  # a scraper that reads, not at once
                body += chunk
                time.sleep(0.01)
            conn.close()
            slow.append(body == BODY)
    assert slow == [True] * 5
