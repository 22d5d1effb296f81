"""`curve_preferences` with one curve as with several, on every Python the exporter meets (issue 24, item 19).

`tls_server_config.curve_preferences: [X25519]` is valid (node_exporter serves it), but a single curve used to go
through ssl.SSLContext.set_ecdh_curve, which on Debian 12's python3 (3.11.2; EC_KEY_new_by_curve_name, which knows
only elliptic curves) raises `SSLError: [EC: UNKNOWN_GROUP]` for X25519, so `serve` exited 4. One path now sets
every list, one name or four, through SSL_CTX_set1_groups_list (gpudiag/exporter/web/openssl_ctx.py).
"""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from bench.exporter_process import ExporterProcess
from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import load_web_config
from tests.exporter.web.test_config_toolkit import REFUSED, TOOLKIT, client, get
from tests.support.exporter import wait_for
from tests.support.paths import REPO
from tests.support.snapshots import nvidia_h200_node

# Debian 12's own interpreter, whose ssl module is the one that refuses X25519 through set_ecdh_curve.
SYSTEM_PYTHON = Path("/usr/bin/python3")


def web_config(directory: Path, *curves: str) -> Path:
    for name in ("server.crt", "server.key"):
        shutil.copy(TOOLKIT / name, directory / name)
    config = directory / "web.yml"
    config.write_text('tls_server_config:\n  cert_file: "server.crt"\n  key_file: "server.key"\n'
                      "  curve_preferences:\n" + "".join(f"    - {c}\n" for c in curves))
    return config


def _system_python_refuses_x25519_by_name() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    done = subprocess.run([str(SYSTEM_PYTHON), "-c", "import ssl\nc = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
                           "try:\n    c.set_ecdh_curve('X25519')\nexcept ssl.SSLError:\n    print('refused')\n"],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() == "refused"


@pytest.mark.parametrize("curves, accepted, refused", [
    (("X25519",), ["X25519"], ["prime256v1", "secp384r1"]),
    (("CurveP384",), ["secp384r1"], ["X25519", "prime256v1"]),
    (("CurveP256", "X25519"), ["prime256v1", "X25519"], ["secp384r1"]),
])
def test_one_curve_or_several_limit_the_handshake(tmp_path, monkeypatch, curves, accepted, refused):
    """Whatever the number of curves, the server offers exactly those; set_ecdh_curve (one elliptic curve, by a
    name some OpenSSL builds do not map to X25519) is never the path."""
    def not_this_path(self, name):
        raise AssertionError(f"set_ecdh_curve({name!r}) called: a single curve must take the groups-list path")

    monkeypatch.setattr(ssl.SSLContext, "set_ecdh_curve", not_this_path)
    exporter = ServeDaemon("127.0.0.1:0", load_web_config(web_config(tmp_path, *curves)), nvidia_h200_node,
                        interval_seconds=60, collect_timeout_seconds=2, judge=lambda s: [],
                        watcher_factory=None).start()
    monkeypatch.undo()
    try:
        wait_for(lambda: exporter.state.health()[0])
        for curve in accepted:
            assert get(exporter, client(curve=curve))[0].status == 200, curve
        for curve in refused:
            with pytest.raises(REFUSED):
                get(exporter, client(curve=curve))
    finally:
        exporter.stop()


@pytest.mark.skipif(not _system_python_refuses_x25519_by_name(),
                    reason="no /usr/bin/python3 whose set_ecdh_curve refuses X25519 (Debian 12's does)")
@pytest.mark.slow
def test_a_real_serve_on_debians_python_serves_x25519_alone(tmp_path):
    """`gpudiag serve --web-config` with `curve_preferences: [X25519]` as its own process under Debian 12's
    python3 (gpudiag's dependencies from this venv): it serves, over X25519 and nothing else."""
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    launcher = tmp_path / "python3"
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}:{site}" exec {SYSTEM_PYTHON} "$@"\n')
    launcher.chmod(0o755)
    config = web_config(tmp_path, "X25519")
    # exits with the line serve printed (today: exit 4, "SSLError: [EC: UNKNOWN_GROUP]") if it does not serve
    served = ExporterProcess([str(launcher), "-m", "tests.support.exporter_node", str(tmp_path / "root"), "1", "--",
                              "--listen", "127.0.0.1:0", "--interval", "1", "--timeout", "5",
                              "--web-config", str(config)])
    try:
        assert _tls_status(served.address, client(curve="X25519")) == 200
        with pytest.raises(REFUSED):
            _tls_status(served.address, client(curve="secp384r1"))
    finally:
        served.stop()


def _tls_status(address: tuple[str, int], context: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("localhost", address[1], timeout=10, context=context)
    try:
        conn.request("GET", "/livez")
        return conn.getresponse().status
    finally:
        conn.close()
