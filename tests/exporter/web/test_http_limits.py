"""The exporter's HTTP limits (issue 10, items 5, 7 and 8), in-process on loopback: the header cap, the whole-request
deadline, bodies and pipelining never read as requests, slots that cannot leak, and a listen backlog that holds a
burst. tests/e2e/test_exporter_attacks.py runs the same defences as a real `gpudiag serve` under attack."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import WebConfig, load_web_config
from tests.support.exporter import wait_for
from tests.support.http_attacks import read_all
from tests.support.snapshots import nvidia_h200_node
from tests.exporter.web.test_http import (  # noqa: F401 - exporter is a fixture
    client_context, closed_by_server, exporter, request, served, start, web_config,
)


def test_a_thread_that_fails_to_start_does_not_leak_its_slot(monkeypatch):
    from gpudiag.exporter.web import http_server

    exporter = start(max_connections=2)
    try:
        wait_for(lambda: served(exporter))

        class NoThreads(threading.Thread):
            def start(self):
                raise RuntimeError("can't start new thread")

        monkeypatch.setattr(http_server.threading, "Thread", NoThreads)
        for _ in range(5):  # more than there are slots
            sock = socket.create_connection(exporter.address)
            assert closed_by_server(sock, within=2)
            sock.close()
        monkeypatch.undo()
        # Every slot comes back: the refused ones at once, the first scrape's when its handler thread has seen the
        # client close (asynchronously, so a loaded machine may take a moment).
        wait_for(lambda: exporter.http.connections.count() == 0, timeout=5)
        assert served(exporter)
    finally:
        monkeypatch.undo()
        exporter.stop()


def test_the_listen_backlog_holds_a_burst_of_connections():
    exporter = ServeDaemon("127.0.0.1:0", WebConfig(), nvidia_h200_node, interval_seconds=60, collect_timeout_seconds=2,
                        judge=lambda s: [], watcher_factory=None)  # not started: nothing accepts, the backlog fills
    socks = []
    try:
        for _ in range(64):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(exporter.address)
            socks.append(sock)
        time.sleep(0.5)
        # a connection the kernel has queued is writable; one whose SYN was dropped (backlog 5) is not
        _, writable, _ = select.select([], socks, [], 0.5)
        assert len(writable) == 64
    finally:
        for sock in socks:
            sock.close()
        exporter.stop()


def exchange(exporter: ServeDaemon, data: bytes) -> bytes:
    sock = socket.create_connection(exporter.address, timeout=5)
    sock.sendall(data)
    return read_all(sock)


@pytest.mark.parametrize("framing", [b"Content-Length: 25\r\n", b"Transfer-Encoding: chunked\r\n"],
                         ids=["content-length", "chunked"])
def test_a_get_with_a_body_is_refused_and_its_body_never_served(exporter, framing):
    smuggled = b"GET /healthz HTTP/1.1\r\n\r\n"  # 25 bytes
    body = smuggled if b"Content-Length" in framing else b"%x\r\n%s\r\n0\r\n\r\n" % (len(smuggled), smuggled)
    reply = exchange(exporter, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + body)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in reply
    assert reply.count(b"HTTP/1.1 ") == 1


def test_an_empty_content_length_on_get_is_fine(exporter):
    assert request(exporter, "GET", "/healthz", {"Content-Length": "0"})[0].status == 200


def test_pipelined_requests_get_one_answer_and_a_close(exporter):
    reply = exchange(exporter, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in reply
    assert reply.count(b"HTTP/1.1 ") == 1


def test_a_head_up_to_the_cap_is_served(exporter):
    response, _ = request(exporter, "GET", "/healthz", {"X-Padding": "p" * 7000})
    assert response.status == 200


@pytest.mark.parametrize("head,status", [
    (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
    (b"GET /metrics HTTP/1.1\r\n" + b"X-Many: a\r\n" * 1000, b"431"),  # never finished: cut at the cap
    (b"GET /" + b"m" * 5000 + b" HTTP/1.1\r\n\r\n", b"414"),
], ids=["one-big-header", "many-headers-unfinished", "long-request-line"])
def test_heads_over_the_cap_are_refused_early(exporter, head, status):
    reply = exchange(exporter, head)
    assert reply.startswith(b"HTTP/1.1 " + status + b" ") and b"Connection: close" in reply


def test_heads_over_the_cap_are_refused_behind_tls_too(tmp_path):
    exporter = start(load_web_config(web_config(tmp_path, "tls_server_config:\n  cert_file: server.crt\n"
                                                          "  key_file: server.key\n")))
    try:
        sock = client_context().wrap_socket(socket.create_connection(exporter.address, timeout=5),
                                            server_hostname="localhost")
        sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")
        reply = read_all(sock)
        assert reply.startswith(b"HTTP/1.1 431 ")
        assert request(exporter, "GET", "/metrics", context=client_context())[0].status == 200
    finally:
        exporter.stop()
