"""The HTTP side of `gpudiag serve`: routes and methods, timeouts, bounded concurrency, TLS and basic auth."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import bcrypt
import pytest

from gpudiag.cli.serve.serving import ServeDaemon, serve
from gpudiag.exporter.web.config import WebConfig, WebConfigError, load_web_config
from gpudiag.exporter.web.listen import DEFAULT_LISTEN, parse_listen
from gpudiag.probe.collector import CollectOptions
from tests.support.exporter import value, wait_for
from tests.support.paths import FIXTURES, REPO
from tests.support.snapshots import nvidia_h200_node

TLS = FIXTURES / "tls"


def start(web: WebConfig = WebConfig(), collect=nvidia_h200_node, **kwargs) -> ServeDaemon:
    exporter = ServeDaemon("127.0.0.1:0", web, collect, interval_seconds=60, collect_timeout_seconds=2,
                        judge=lambda s: [], watcher_factory=None, **kwargs).start()
    return exporter


@pytest.fixture
def exporter():
    exporter = start()
    wait_for(lambda: exporter.state.health()[0])
    yield exporter
    exporter.stop()


def request(exporter: ServeDaemon, method: str, path: str, headers=None, context=None):
    host, port = exporter.address
    if context is None:
        conn = http.client.HTTPConnection(host, port, timeout=5)
    else:
        conn = http.client.HTTPSConnection("localhost", port, timeout=5, context=context)
    conn.request(method, path, headers=headers or {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body


# -- routes and methods -----------------------------------------------------------------------------------------


def test_metrics_and_healthz(exporter):
    response, body = request(exporter, "GET", "/metrics")
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
    assert int(response.getheader("Content-Length")) == len(body)
    assert value(body.decode(), "gpudiag_device_up", gpu="1") == 1
    response, body = request(exporter, "GET", "/healthz")
    assert (response.status, body) == (200, b"ok\n")


def test_head_sends_headers_only(exporter):
    response, body = request(exporter, "HEAD", "/metrics")
    assert response.status == 200 and body == b""
    assert int(response.getheader("Content-Length")) > 1000


def test_query_string_is_ignored(exporter):
    assert request(exporter, "GET", "/metrics?collect[]=gpu")[0].status == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_on_known_paths_are_405(exporter, method):
    response, _ = request(exporter, method, "/metrics")
    assert response.status == 405 and response.getheader("Allow") == "GET, HEAD"


def test_a_refused_request_with_a_body_closes_the_connection(exporter):
    sock = socket.create_connection(exporter.address, timeout=5)
    sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n"
                 b"GET /metrics HTTP/1.1\r\nX: y\r\n")  # a body that looks like a request is never served
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    sock.close()
    assert reply.startswith(b"HTTP/1.1 405 ") and b"Connection: close" in reply
    assert reply.count(b"HTTP/1.1") == 1


@pytest.mark.parametrize("method,path", [("GET", "/index.html"), ("GET", "/metrics/x"), ("POST", "/debug"),
                                         ("HEAD", "/x"), ("GET", "/livez/x")])
def test_unknown_paths_are_404(exporter, method, path):
    assert request(exporter, method, path)[0].status == 404


def test_keep_alive_connection_outlives_the_request_limit():
    exporter = start(max_request_seconds=0.3)
    try:
        conn = http.client.HTTPConnection(*exporter.address, timeout=5)
        for _ in range(4):  # 0.8 s on one connection: each request is short, so none is cut
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200 and response.read()
            time.sleep(0.2)
        conn.close()
    finally:
        exporter.stop()


def test_healthz_is_503_until_a_collection_completes():
    release = threading.Event()
    exporter = start(collect=lambda: release.wait(5) and nvidia_h200_node())
    try:
        response, body = request(exporter, "GET", "/healthz")
        assert (response.status, body) == (503, b"no collection has completed yet\n")
        response, body = request(exporter, "GET", "/metrics")  # self-health is served meanwhile
        assert response.status == 200 and b"gpudiag_build_info" in body and b"gpudiag_device_up" not in body
    finally:
        release.set()
        exporter.stop()


# -- timeouts and concurrency -------------------------------------------------------------------------------------


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_a_client_that_never_finishes_its_request_is_dropped():
    exporter = start(request_timeout_seconds=0.3)
    try:
        sock = socket.create_connection(exporter.address)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        started = time.monotonic()
        assert closed_by_server(sock, within=3)
        assert time.monotonic() - started < 2
        sock.close()
    finally:
        exporter.stop()


@pytest.mark.parametrize("first,chunk,every", [
    (b"", b"X", 0.05),  # one byte every 50 ms
    (b"GET /metrics HTTP/1.1\r\n", b"X-Slow: y\r\n", 0.2),  # slowloris: a header line every 200 ms
], ids=["bytes", "header-lines"])
def test_a_trickling_client_is_cut_off_when_its_request_takes_too_long(first, chunk, every):
    # a whole-request deadline, not a per-recv timeout: the client is never silent for the 1 s socket timeout
    exporter = start(request_timeout_seconds=1.0, max_request_seconds=0.4)
    try:
        sock = socket.create_connection(exporter.address)
        sock.settimeout(every)
        sock.sendall(first)
        started, cut = time.monotonic(), False
        while time.monotonic() - started < 3 and not cut:
            try:
                sock.sendall(chunk)
                cut = sock.recv(1024) == b""
            except socket.timeout:
                pass
            except OSError:
                cut = True
        assert cut and time.monotonic() - started < 2
        sock.close()
    finally:
        exporter.stop()


def served(exporter: ServeDaemon) -> bool:
    try:
        return request(exporter, "GET", "/healthz")[0].status == 200
    except (ConnectionError, http.client.HTTPException):
        return False


def test_when_every_slot_is_taken_the_longest_waiting_connection_gives_way():
    exporter = start(max_connections=2)
    try:
        held = [socket.create_connection(exporter.address) for _ in range(2)]  # idle: never send a request
        wait_for(lambda: exporter.http.connections.count() == 2)
        assert request(exporter, "GET", "/metrics")[0].status == 200  # served at once, not refused
        assert closed_by_server(held[0], within=2)  # the oldest idle connection made room
        assert exporter.http.connections.evicted == 1 and exporter.http.rejected_connections == 0
        for sock in held:
            sock.close()
    finally:
        exporter.stop()


def test_when_every_slot_is_serving_a_newcomer_is_refused_and_slots_come_back():
    exporter = start(max_connections=2)
    release = threading.Event()
    body = exporter.http.routes.metrics
    exporter.http.routes.metrics = lambda: release.wait(5) and body()
    try:
        busy = [threading.Thread(target=request, args=(exporter, "GET", "/metrics")) for _ in range(2)]
        for thread in busy:
            thread.start()
        wait_for(lambda: sum(c.serving for c in list(exporter.http.connections._open.values())) == 2)
        extra = socket.create_connection(exporter.address)
        assert closed_by_server(extra, within=2)
        extra.close()
        assert exporter.http.rejected_connections == 1
        release.set()
        for thread in busy:
            thread.join(5)
        wait_for(lambda: served(exporter), timeout=3)
    finally:
        release.set()
        exporter.stop()


# -- TLS and basic auth -----------------------------------------------------------------------------------------


def web_config(tmp_path: Path, text: str) -> Path:
    for name in ("server.crt", "server.key", "ca.crt"):
        (tmp_path / name).write_bytes((TLS / name).read_bytes())
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def client_context(cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(TLS / "ca.crt"))
    if cert:
        context.load_cert_chain(TLS / "client.crt", TLS / "client.key")
    return context


def test_tls(tmp_path):
    exporter = start(load_web_config(web_config(tmp_path, "tls_server_config:\n  cert_file: server.crt\n"
                                                          "  key_file: server.key\n")))
    try:
        assert exporter.url.startswith("https://")
        response, body = request(exporter, "GET", "/metrics", context=client_context())
        assert response.status == 200 and b"gpudiag_build_info" in body
        sock = socket.create_connection(exporter.address)  # plain HTTP to the TLS port gets nothing
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_by_server(sock, within=3)
        sock.close()
    finally:
        exporter.stop()


def test_client_certificates_required(tmp_path):
    config = web_config(tmp_path, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                  "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n")
    exporter = start(load_web_config(config))
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            request(exporter, "GET", "/metrics", context=client_context(cert=False))
        assert request(exporter, "GET", "/metrics", context=client_context(cert=True))[0].status == 200
    finally:
        exporter.stop()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth_with_bcrypt_hashes(tmp_path):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # htpasswd writes $2y$
    exporter = start(load_web_config(web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")))
    try:
        response, _ = request(exporter, "GET", "/metrics")
        assert response.status == 401 and response.getheader("WWW-Authenticate") == 'Basic realm="gpudiag"'
        assert request(exporter, "GET", "/metrics", basic("prometheus", "wrong"))[0].status == 401
        assert request(exporter, "GET", "/metrics", basic("nobody", "s3cret"))[0].status == 401
        assert request(exporter, "GET", "/healthz")[0].status == 401
        assert request(exporter, "POST", "/metrics")[0].status == 401  # no method probing without credentials
        response, body = request(exporter, "HEAD", "/metrics")
        assert response.status == 401 and body == b""
        assert request(exporter, "GET", "/metrics", basic("prometheus", "s3cret"))[0].status == 200
        assert request(exporter, "GET", "/metrics", {"Authorization": "Basic !!notbase64"})[0].status == 401
    finally:
        exporter.stop()


@pytest.mark.parametrize("text,message", [
    ("tls_server_config:\n  cert_file: server.crt\n", "missing one of key or key_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: missing.key\n", "cannot read key_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  cipher_suites: [x]\n",
     "unknown cipher 'x'"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: Maybe\n",
     "invalid ClientAuth 'Maybe'"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n",
     "without a Client Auth Policy"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_allowed_sans: [a]\n",
     "client_allowed_sans needs a client_auth_type"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: SSL3\n",
     "unknown TLS version 'SSL3'"),
    ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("http_server_config:\n  http3: true\n", "unknown setting http_server_config.http3"),
    ("http_server_config:\n  headers:\n    Strict-Transport-Security: \"a\\nb\"\n", "cannot hold a line break"),
    ("rate_limit:\n  interval: soon\n", "rate_limit.interval: 'soon' is not a duration"),
    ("rate_limit:\n  interval: 1s\n  burst: -1\n", "rate_limit.burst must be a whole number"),
    ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
    ("tls_server_config:\n  cert_file: [\n", "not valid YAML at line 3 (expected the node content"),
])
def test_bad_web_config_is_one_line(tmp_path, text, message):
    with pytest.raises(WebConfigError) as caught:
        load_web_config(web_config(tmp_path, text))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_empty_web_config_means_plain_http(tmp_path):
    config = load_web_config(web_config(tmp_path, ""))
    assert config.tls is None and config.auth is None


def test_cli_serve_with_a_bad_web_config_exits_2_with_one_line(tmp_path):
    config = web_config(tmp_path, "basic_auth_users:\n  alice: nope\n")
    proc = subprocess.run([sys.executable, "-m", "gpudiag", "serve", "--listen", "127.0.0.1:0", "--web-config",
                           str(config)], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "basic_auth_users.alice" in proc.stderr


# -- listen address ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("listen,parsed", [
    (":9858", ("", 9858)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9858", ("::1", 9858)),
    ("localhost:80", ("localhost", 80)),
])
def test_parse_listen(listen, parsed):
    assert parse_listen(listen) == parsed


@pytest.mark.parametrize("listen", ["9858", "host:", "host:http", ":70000"])
def test_parse_listen_rejects(listen):
    with pytest.raises(ValueError):
        parse_listen(listen)


def test_the_cli_default_listen_address_is_the_documented_one():
    from gpudiag.cli.serve import command as serve

    assert serve.DEFAULT_LISTEN == DEFAULT_LISTEN == ":9858"
    assert serve.listen_addresses(None, environ={}) == [DEFAULT_LISTEN]


def test_serve_reports_an_address_in_use_and_exits_2(capsys, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        code = serve(f"127.0.0.1:{taken.getsockname()[1]}", None, CollectOptions(root=tmp_path), 15)
    finally:
        taken.close()
    assert code == 2
    assert "cannot listen on 127.0.0.1:" in capsys.readouterr().err
