"""Exporter manners: gzip on /metrics from a per-collection cache, the landing page at `/`, `/livez` that answers
whatever the collector is doing, and `/healthz` kept for readiness."""

from __future__ import annotations

import gzip
import http.client
import threading
import time
import zlib

import pytest

from gpudiag import __version__
from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import WebConfig
from gpudiag.exporter.web.responses import GzipCache, accepts_gzip
from tests.support.exporter import parse, value, wait_for
from tests.support.snapshots import amd_mi300x_node, nvidia_h200_node


def start(collect=nvidia_h200_node, **kwargs) -> ServeDaemon:
    return ServeDaemon("127.0.0.1:0", WebConfig(), collect, interval_seconds=60, collect_timeout_seconds=2,
                    watcher_factory=None, **kwargs).start()


def request(exporter: ServeDaemon, method: str, path: str, headers=None):
    host, port = exporter.address
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response, response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def exporter():
    exporter = start(amd_mi300x_node)  # 8 GPUs and the real checks: the gpudiag_check_status state set
    wait_for(lambda: exporter.state.health()[0])
    yield exporter
    exporter.stop()


def _without_process(text: str) -> list:
    return [s for s in parse(text) if not s[0].startswith("process_")]


def test_metrics_gzip_when_asked(exporter):
    plain_response, plain = request(exporter, "GET", "/metrics")
    assert plain_response.getheader("Content-Encoding") is None
    assert plain_response.getheader("Vary") == "Accept-Encoding"
    response, body = request(exporter, "GET", "/metrics", {"Accept-Encoding": "gzip, deflate"})
    assert response.status == 200 and response.getheader("Content-Encoding") == "gzip"
    assert int(response.getheader("Content-Length")) == len(body)
    assert len(body) * 10 < len(plain), (len(body), len(plain))  # 8 GPUs: hundreds of KB of text
    one_stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
    text = one_stream.decompress(body).decode()
    assert one_stream.eof and one_stream.unused_data == b""  # a single gzip member, trailer included
    assert _without_process(text) == _without_process(plain.decode())
    assert value(text, "process_resident_memory_bytes") > 0  # the per-scrape part is inside the stream
    assert value(text, "gpudiag_device_up", gpu="7") == 1


def test_gzip_is_compressed_once_per_collection(exporter):
    before = exporter.http.routes.gzip.compressions
    for _ in range(4):
        assert gzip.decompress(request(exporter, "GET", "/metrics", {"Accept-Encoding": "gzip"})[1])
    assert exporter.http.routes.gzip.compressions - before <= 1


@pytest.mark.parametrize("header,expected", [
    ("gzip", True), ("GZIP;q=0.5", True), ("deflate, x-gzip", True), ("br, gzip;q=1.0", True),
    ("gzip;q=0", False), ("identity", False), ("", False), (None, False), ("gzip;q=nonsense", False),
])
def test_accept_encoding(header, expected):
    assert accepts_gzip(header) is expected


def test_gzip_cache_recompresses_only_a_new_body():
    cache = GzipCache()
    body = b"a 1\n" * 1000
    first = cache.compress([body, b"process 1\n"])
    second = cache.compress([body, b"process 2\n"])
    assert cache.compressions == 1 and first[0] is second[0]
    assert gzip.decompress(b"".join(second)) == body + b"process 2\n"
    third = cache.compress([b"b 2\n" * 10, b"process 3\n"])
    assert cache.compressions == 2 and gzip.decompress(b"".join(third)) == b"b 2\n" * 10 + b"process 3\n"


def test_head_gzip_sends_headers_only(exporter):
    response, body = request(exporter, "HEAD", "/metrics", {"Accept-Encoding": "gzip"})
    assert response.status == 200 and body == b"" and response.getheader("Content-Encoding") == "gzip"


def test_landing_page(exporter):
    response, body = request(exporter, "GET", "/")
    assert response.status == 200 and response.getheader("Content-Type") == "text/html; charset=utf-8"
    page = body.decode()
    for path in ("/metrics", "/healthz", "/livez"):
        assert f'href="{path}"' in page
    assert __version__ in page and len(body) < 4096
    assert request(exporter, "POST", "/")[0].status == 405


def test_livez_and_healthz(exporter):
    response, body = request(exporter, "GET", "/livez")
    assert (response.status, body) == (200, b"ok\n")
    assert request(exporter, "HEAD", "/livez")[1] == b""
    assert request(exporter, "GET", "/healthz")[0].status == 200
    response, _ = request(exporter, "DELETE", "/livez")
    assert response.status == 405 and response.getheader("Allow") == "GET, HEAD"


def test_livez_answers_while_the_collector_hangs():
    """A wedged driver: nvmlInit never returns. Readiness fails; liveness still answers, so the kubelet does not
    restart the pod into a fresh hung nvmlInit (and lose its Xid counters)."""
    release = threading.Event()

    def hung():
        release.wait(30)
        return nvidia_h200_node()

    exporter = start(collect=hung)
    try:
        time.sleep(0.2)
        started = time.monotonic()
        assert request(exporter, "GET", "/livez")[0].status == 200
        assert time.monotonic() - started < 1.0
        assert request(exporter, "GET", "/healthz")[0].status == 503
        # /livez never consults the collection state: even a state that raises leaves it answering
        exporter.http.routes.health = exporter.http.routes.metrics = lambda: 1 / 0
        assert request(exporter, "GET", "/livez")[0].status == 200
    finally:
        release.set()
        exporter.stop()
