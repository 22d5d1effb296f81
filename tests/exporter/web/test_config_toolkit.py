"""exporter-toolkit's own web-config test data (tests/fixtures/exporter-toolkit, with its licence) fed to gpudiag:
accepted or refused as the toolkit's tests say, refused for the same class of reason, and the toolkit's handshake
cases replayed against the exporter (client certificates, SANs, ciphers, curves, inline PEM, headers, rate limit,
basic auth), plus certificate rotation."""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web import errors as E
from gpudiag.exporter.web import openssl_ctx
from gpudiag.exporter.web.config import WebConfigError, load_web_config
from tests.support.exporter import wait_for
from tests.support.paths import FIXTURES, REPO
from tests.support.snapshots import nvidia_h200_node

TOOLKIT = FIXTURES / "exporter-toolkit"
OWN_TLS = FIXTURES / "tls"

# file → None (accepted) or the class of error; from web/tls_config_test.go (TestYAMLFiles, TestServerBehaviour,
# TestUsers, TestConfigReloading) and, for the two files no test names, from what ConfigToTLSConfig does.
EXPECTED = {
    "web_config_empty.yml": None,
    "web_config_junk.yml": E.YAML,
    "web_config_junk_key.yml": E.YAML,
    "web_config_noAuth_certPath_empty.bad.yml": E.MISSING_CERT,
    "web_config_noAuth_cert_empty.bad.yml": E.MISSING_CERT,
    "web_config_noAuth_keyPath_empty.bad.yml": E.MISSING_KEY,
    "web_config_noAuth_key_empty.bad.yml": E.MISSING_KEY,
    "web_config_noAuth_certPath_keyPath_empty.bad.yml": E.MISSING_CERT,
    "web_config_noAuth_certPath_invalid.bad.yml": E.NO_SUCH_FILE,
    "web_config_noAuth_keyPath_invalid.bad.yml": E.NO_SUCH_FILE,
    "web_config_noAuth_certPath_keyPath_invalid.bad.yml": E.NO_SUCH_FILE,
    "web_config_noAuth.bad.yml": E.CA_WITHOUT_POLICY,
    "web_config_auth_clientCAs_invalid.bad.yml": E.NO_SUCH_FILE,
    "web_config_auth_user_list_invalid.bad.yml": E.BAD_PASSWORD,
    "web_config_noAuth_inventedCiphers.bad.yml": E.UNKNOWN_CIPHER,
    "web_config_noAuth_inventedCurves.bad.yml": E.UNKNOWN_CURVE,
    "web_config_noAuth_wrongTLSVersion.bad.yml": E.UNKNOWN_TLS_VERSION,
    "web_config_noAuth.good.yml": None,
    "web_config_noAuth_tlsInline.good.yml": None,
    "web_config_noAuth_allCiphers.good.yml": None,
    "web_config_noAuth_someCiphers.good.yml": None,
    "web_config_noAuth_someCiphers_noOrder.good.yml": None,
    "web_config_noAuth_allCurves.good.yml": None,
    "web_config_noAuth_someCurves.good.yml": None,
    "web_config_noAuth_noHTTP2.good.yml": None,
    "web_config_noAuth_noHTTP2Cipher.bad.yml": E.NO_HTTP2_CIPHER,  # ServeTLS: http2.ConfigureServer refuses it
    "web_config_headers.good.yml": None,
    "web_config_headers_content_type_options.bad.yml": E.INVALID_VALUE,
    "web_config_headers_frame_options.bad.yml": E.INVALID_VALUE,
    "web_config_headers_extra_header.bad.yml": E.INVALID_HEADER,
    "tls_config_noAuth.requireanyclientcert.good.yml": None,
    "tls_config_noAuth.requireanyclientcertkeyinline.good.yml": None,
    "tls_config_noAuth.requireandverifyclientcert.good.yml": None,
    "web_config_auth_client_san.good.yaml": None,
    "web_config_auth_client_san.bad.yaml": None,  # loads; the handshake is refused (test below)
    "web_config_rate_limiter_nonblocking.yaml": None,
    "web_config_rate_limiter_one_second.yaml": None,
    "web_config_users.good.yml": None,
    "web_config_users_noTLS.good.yml": None,
    "web_config_noAuth.good.blocking.yml": None,  # TestConfigReloading starts a server on it
    # Named by no test. ConfigToTLSConfig accepts it (a nil ClientCAs: Go verifies against the system roots).
    "web_config_auth_clientCAs_missing.bad.yml": None,
    "web-config.yml": None,  # the toolkit's sample (server.crt and server.key beside it, as here)
}


def test_every_toolkit_config_is_listed():
    assert {p.name for p in TOOLKIT.iterdir() if p.suffix in (".yml", ".yaml")} == set(EXPECTED)
    assert "Apache License" in (TOOLKIT / "LICENSE").read_text() and (TOOLKIT / "README.md").exists()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_toolkit_config_accepted_or_refused_as_the_toolkit_does(name):
    expected = EXPECTED[name]
    if expected is None:
        load_web_config(TOOLKIT / name)
        return
    with pytest.raises(WebConfigError) as caught:
        load_web_config(TOOLKIT / name)
    assert caught.value.kind == expected, str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_config_file_is_no_such_file(tmp_path):
    with pytest.raises(WebConfigError) as caught:
        load_web_config(tmp_path / "somefile")
    assert caught.value.kind == E.NO_SUCH_FILE


# -- the toolkit's server cases, against the exporter -----------------------------------------------------------


def start(config: Path) -> ServeDaemon:
    exporter = ServeDaemon("127.0.0.1:0", load_web_config(config), nvidia_h200_node, interval_seconds=60,
                        collect_timeout_seconds=2, judge=lambda s: [], watcher_factory=None).start()
    wait_for(lambda: exporter.state.health()[0])
    return exporter


def client(cert: str = "", ciphers: str = "", curve: str = "", max_version=None) -> ssl.SSLContext:
    """The toolkit's getTLSClient, presenting testdata/<cert>.pem when named. It does not verify the server: the
    toolkit's CA chain carries extended key usages OpenSSL finds unsuitable for a CA (Go does not check them);
    test_inline_certificate_is_served checks which certificate is served."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert:
        context.load_cert_chain(TOOLKIT / f"{cert}.pem", TOOLKIT / f"{cert}.key")
    if ciphers:
        context.set_ciphers(ciphers)
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    if curve:
        # Through SSL_CTX_set1_groups_list like the server: set_ecdh_curve refuses X25519 on Debian 12's python3.
        openssl_ctx.set_groups(context, [curve])
    if max_version is not None:
        context.maximum_version = max_version
    return context


def get(exporter: ServeDaemon, context=None, path="/metrics", headers=None):
    host, port = exporter.address
    conn = (http.client.HTTPSConnection("localhost", port, timeout=5, context=context) if context is not None
            else http.client.HTTPConnection(host, port, timeout=5))
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response, response.read(), conn.sock.cipher() if context is not None else None
    finally:
        conn.close()


REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, socket.timeout)


@pytest.mark.parametrize("name,cert,ok", [
    ("tls_config_noAuth.requireanyclientcert.good.yml", "client_selfsigned", True),  # any certificate, unverified
    ("tls_config_noAuth.requireanyclientcert.good.yml", "", False),  # but one is required
    ("tls_config_noAuth.requireanyclientcertkeyinline.good.yml", "client_selfsigned", True),
    ("tls_config_noAuth.requireandverifyclientcert.good.yml", "client_selfsigned", True),
    ("tls_config_noAuth.requireandverifyclientcert.good.yml", "client2_selfsigned", False),  # not from the CA
    ("web_config_auth_client_san.good.yaml", "client2_selfsigned", True),  # SAN DNS:test3 is allowed
    ("web_config_auth_client_san.bad.yaml", "client2_selfsigned", False),  # no allowed SAN
    ("web_config_noAuth.good.yml", "", True),  # VerifyClientCertIfGiven, none given
    ("web_config_noAuth_tlsInline.good.yml", "", True),
    ("web_config_noAuth.good.blocking.yml", "", False),  # RequireAndVerifyClientCert, none given
])
def test_client_certificates_as_the_toolkit(name, cert, ok):
    exporter = start(TOOLKIT / name)
    try:
        if ok:
            assert get(exporter, client(cert))[0].status == 200
        else:
            with pytest.raises(REFUSED):
                get(exporter, client(cert))
    finally:
        exporter.stop()


def test_inline_certificate_is_served():
    exporter = start(TOOLKIT / "web_config_noAuth_tlsInline.good.yml")
    try:
        assert _served_certificate(exporter) == ssl.PEM_cert_to_DER_cert((TOOLKIT / "server.crt").read_text())
    finally:
        exporter.stop()


def test_ciphers_as_the_toolkit():
    exporter = start(TOOLKIT / "web_config_noAuth_someCiphers.good.yml")
    try:
        _, _, cipher = get(exporter, client(ciphers="ECDHE-RSA-AES128-GCM-SHA256"))
        assert cipher[0] == "ECDHE-RSA-AES128-GCM-SHA256"
        with pytest.raises(REFUSED):  # "no common cipher"
            get(exporter, client(ciphers="ECDHE-RSA-AES256-SHA"))
        with pytest.raises(REFUSED):  # max_version TLS12
            get(exporter, _tls13_only())
    finally:
        exporter.stop()


def _tls13_only() -> ssl.SSLContext:
    context = client()
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


def test_curves_as_the_toolkit():
    exporter = start(TOOLKIT / "web_config_noAuth_someCurves.good.yml")  # TLS13, CurveP521 only
    try:
        assert get(exporter, client(curve="secp521r1"))[0].status == 200
        with pytest.raises(REFUSED):
            get(exporter, client(curve="secp384r1"))
    finally:
        exporter.stop()
    exporter = start(TOOLKIT / "web_config_noAuth_allCurves.good.yml")  # a list: set through SSL_CTX groups
    try:
        for curve in ("prime256v1", "secp384r1", "secp521r1", "X25519"):
            assert get(exporter, client(curve=curve))[0].status == 200
    finally:
        exporter.stop()


def test_headers_as_the_toolkit():
    exporter = start(TOOLKIT / "web_config_headers.good.yml")
    try:
        response, _, _ = get(exporter)
        assert response.status == 200
        assert response.getheader("X-Frame-Options") == "deny"
        assert response.getheader("X-Content-Type-Options") == "nosniff"
        assert response.getheader("X-XSS-Protection") == "1"
        assert response.getheader("Content-Security-Policy") == "default-src 'self' *.test.example.net"
        assert get(exporter, path="/nope")[0].getheader("X-Frame-Options") == "deny"  # every answer
    finally:
        exporter.stop()


def test_rate_limit_as_the_toolkit():
    exporter = start(TOOLKIT / "web_config_rate_limiter_one_second.yaml")  # burst 0: x/time/rate allows nothing
    try:
        assert get(exporter)[0].status == 429
        assert get(exporter, path="/livez")[0].status == 200  # never limited: a 429 would restart the pod
    finally:
        exporter.stop()
    exporter = start(TOOLKIT / "web_config_rate_limiter_nonblocking.yaml")  # interval 0: no limiter
    try:
        assert all(get(exporter)[0].status == 200 for _ in range(11))
    finally:
        exporter.stop()


def test_rate_limit_bucket_refills(tmp_path):
    config = tmp_path / "web.yml"
    config.write_text("rate_limit:\n  interval: 200ms\n  burst: 2\n")
    exporter = start(config)
    try:
        assert [get(exporter, path="/healthz")[0].status for _ in range(3)] == [200, 200, 429]
        time.sleep(0.25)
        assert get(exporter, path="/healthz")[0].status == 200
    finally:
        exporter.stop()


def test_basic_auth_as_the_toolkit():
    import base64

    exporter = start(TOOLKIT / "web_config_users.good.yml")
    try:
        def auth(user, password):
            return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
        assert get(exporter, client())[0].status == 401
        assert get(exporter, client(), headers=auth("dave", "dave123"))[0].status == 200
        assert get(exporter, client(), headers=auth("carol", "carol123"))[0].status == 200
        assert get(exporter, client(), headers=auth("dave", "bad"))[0].status == 401
        assert get(exporter, client(), path="/healthz")[0].status == 401
        assert get(exporter, client(), path="/")[0].status == 401
        response, body, _ = get(exporter, client(), path="/livez")  # no password: a kubelet probe has none
        assert (response.status, body) == (200, b"ok\n")
    finally:
        exporter.stop()


# -- certificate rotation ---------------------------------------------------------------------------------------


def _served_certificate(exporter: ServeDaemon) -> bytes:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(exporter.address, timeout=5) as raw:
        with context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def test_rotated_certificates_are_picked_up_at_the_next_handshake(tmp_path):
    for name in ("server.crt", "server.key"):
        shutil.copy(TOOLKIT / name, tmp_path / name)
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    exporter = start(config)
    try:
        first = _served_certificate(exporter)
        assert _served_certificate(exporter) == first and exporter.http.web.tls.reloads == 0  # unchanged: no reload
        # A half-done rotation (new certificate, old key) does not load: the previous pair stays in service.
        shutil.copy(OWN_TLS / "server.crt", tmp_path / "server.crt.new")
        (tmp_path / "server.crt.new").replace(tmp_path / "server.crt")
        assert _served_certificate(exporter) == first
        shutil.copy(OWN_TLS / "server.key", tmp_path / "server.key.new")
        (tmp_path / "server.key.new").replace(tmp_path / "server.key")
        second = _served_certificate(exporter)
        assert second != first and second == ssl.PEM_cert_to_DER_cert((OWN_TLS / "server.crt").read_text())
        assert exporter.http.web.tls.reloads == 1
    finally:
        exporter.stop()


# -- the command line -------------------------------------------------------------------------------------------


def test_serve_takes_web_config_file_flag_and_refuses_a_bad_file_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "gpudiag", "serve", "--listen", "127.0.0.1:0", "--web.config.file",
                           str(TOOLKIT / "web_config_noAuth.bad.yml")],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "without a Client Auth Policy" in proc.stderr


@pytest.mark.slow
def test_serve_with_the_toolkit_inline_config_answers_https(tmp_path):
    (tmp_path / "sys").mkdir()  # an empty node: no GPU, nothing to wait on
    proc = subprocess.Popen([sys.executable, "-m", "gpudiag", "serve", "--listen", "127.0.0.1:0", "--root",
                             str(tmp_path), "--web.config.file", str(TOOLKIT / "web_config_noAuth_tlsInline.good.yml")],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # msg="serving https://127.0.0.1:PORT/metrics" …
        assert "serving https://" in line, line
        port = int(line.split("https://127.0.0.1:")[1].split("/")[0])
        conn = http.client.HTTPSConnection("localhost", port, timeout=10, context=client())
        conn.request("GET", "/livez")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.mark.parametrize(
    "prefer,chosen", [(True, "ECDHE-RSA-AES256-GCM-SHA384"), (False, "ECDHE-RSA-AES128-GCM-SHA256")]
)
def test_prefer_server_cipher_suites_is_enforced(tmp_path, prefer, chosen):
    for name in ("server.crt", "server.key"):
        shutil.copy(TOOLKIT / name, tmp_path / name)
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  max_version: TLS12\n"
                      "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, "
                      "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
                      f"  prefer_server_cipher_suites: {str(prefer).lower()}\n")
    exporter = start(config)
    try:  # the client prefers AES-128; the server's order prefers AES-256
        assert get(exporter, client(ciphers="ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384"))[2][0] == chosen
    finally:
        exporter.stop()


@pytest.mark.parametrize("value,seconds", [
    ("1s", 1.0), ("250ms", 0.25), ("1m30s", 90.0), ("1.5h", 5400.0), ("0", 0.0), (0, 0.0),
    (1_000_000_000, 1.0),  # yaml.v2 decodes an integer into a time.Duration as nanoseconds
])
def test_go_durations(value, seconds):
    from gpudiag.exporter.web.rate_limit import parse_go_duration

    assert parse_go_duration(value, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "1", "s", "1 s", "1d", True, None, "1s2"])
def test_bad_go_durations(value):
    from gpudiag.exporter.web.rate_limit import parse_go_duration

    with pytest.raises(WebConfigError):
        parse_go_duration(value, "x")
