"""Where `gpudiag serve` listens (issue 27, item 3): exporter-toolkit's spellings (`--web.listen-address`,
repeatable, beside `--listen`), every address served or none, `GPUDIAG_LISTEN` read by serve itself (flag > env >
default), and socket activation (`--web.systemd-socket`: the sockets systemd passes, LISTEN_FDS/LISTEN_PID from
descriptor 3, here passed to a child process exactly as systemd passes them)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from gpudiag.cli import app as cli
from gpudiag.cli.serve.command import listen_addresses
from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import WebConfig
from tests.support.exporter import wait_for
from tests.support.paths import REPO
from tests.support.snapshots import nvidia_h200_node



def taken_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def free_port() -> int:
    sock, port = taken_port()
    sock.close()
    return port


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.status, answer.read()


# -- where: flag > GPUDIAG_LISTEN > :9858 ---------------------------------------------------------------------------


@pytest.mark.parametrize("given, environ, expected", [
    (None, {}, [":9858"]),
    (None, {"GPUDIAG_LISTEN": "10.0.0.5:9858"}, ["10.0.0.5:9858"]),
    (None, {"GPUDIAG_LISTEN": "127.0.0.1:9858, [::1]:9858"}, ["127.0.0.1:9858", "[::1]:9858"]),
    (None, {"GPUDIAG_LISTEN": "  "}, [":9858"]),  # the unit's empty default is no address: the default
    (["127.0.0.1:1"], {"GPUDIAG_LISTEN": "10.0.0.5:9858"}, ["127.0.0.1:1"]),
    (["127.0.0.1:1", "[::1]:2,127.0.0.2:3"], {}, ["127.0.0.1:1", "[::1]:2", "127.0.0.2:3"]),
    ([""], {"GPUDIAG_LISTEN": ":1"}, []),  # `--listen ''` is refused (no address), not the environment's
])
def test_where_serve_listens(given, environ, expected):
    assert listen_addresses(given, environ) == expected


def test_serve_reads_gpudiag_listen_itself_and_a_flag_overrides_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "sys").mkdir()
    blocker, port = taken_port()
    try:
        monkeypatch.setenv("GPUDIAG_LISTEN", f"127.0.0.1:{port}")
        assert cli.main(["serve", "--root", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err == f"gpudiag: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
        monkeypatch.setenv("GPUDIAG_LISTEN", "not an address")
        assert cli.main(["serve", "--root", str(tmp_path), "--web.listen-address", f"127.0.0.1:{port}"]) == 2
        assert f"cannot listen on 127.0.0.1:{port}:" in capsys.readouterr().err
    finally:
        blocker.close()


# -- several addresses ----------------------------------------------------------------------------------------------


def test_every_address_given_is_served():
    exporter = ServeDaemon(["127.0.0.1:0", "127.0.0.2:0"], WebConfig(), nvidia_h200_node, interval_seconds=60,
                        collect_timeout_seconds=2, judge=lambda s: [], watcher_factory=None).start()
    try:
        wait_for(lambda: exporter.state.health()[0])
        assert len(exporter.urls) == 2 and exporter.urls[0] != exporter.urls[1] and exporter.url == exporter.urls[0]
        for url in exporter.urls:
            status, body = get(url + "/metrics")
            assert status == 200 and b"gpudiag_" in body
    finally:
        exporter.stop()
    for url in exporter.urls:  # all closed on stop
        with pytest.raises(OSError):
            get(url + "/livez")


def test_one_address_that_cannot_be_bound_refuses_them_all(tmp_path, capsys):
    (tmp_path / "sys").mkdir()
    blocker, taken = taken_port()
    first = free_port()
    try:
        code = cli.main(["serve", "--root", str(tmp_path), "--listen", f"127.0.0.1:{first}",
                         "--web.listen-address", f"127.0.0.1:{taken}"])
    finally:
        blocker.close()
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"gpudiag: error: cannot listen on 127.0.0.1:{taken}: Address already in use\n"
    probe = socket.socket()  # the first address, bound before the second failed, was let go
    probe.bind(("127.0.0.1", first))
    probe.close()


def test_a_malformed_address_is_named(tmp_path, capsys):
    (tmp_path / "sys").mkdir()
    assert cli.main(["serve", "--root", str(tmp_path), "--listen", "127.0.0.1:0", "--listen", "host:http"]) == 2
    assert capsys.readouterr().err == ("gpudiag: error: cannot listen on host:http: expected HOST:PORT, "
                                       "[IPV6]:PORT or :PORT\n")


# -- socket activation ----------------------------------------------------------------------------------------------


def test_systemd_socket_without_systemd_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "sys").mkdir()
    for name in ("LISTEN_PID", "LISTEN_FDS"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["serve", "--root", str(tmp_path), "--web.systemd-socket"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("gpudiag: error: --web.systemd-socket: systemd passed no socket")
    assert len(err.splitlines()) == 1


def test_systemd_socket_and_listen_are_one_or_the_other(tmp_path, capsys):
    (tmp_path / "sys").mkdir()
    assert cli.main(["serve", "--root", str(tmp_path), "--web.systemd-socket", "--listen", ":1"]) == 2
    assert "give one" in capsys.readouterr().err


def as_systemd_would(fd: int, serve_args: list[str], listen_pid: str = "$$", **popen) -> subprocess.Popen:
    """`gpudiag serve` with `fd` as its descriptor 3 and LISTEN_FDS=1, LISTEN_PID=its own pid (the shell's $$,
    which exec keeps), as systemd starts a socket-activated service."""
    command = (f"LISTEN_PID={listen_pid} LISTEN_FDS=1 exec {shlex.quote(sys.executable)} -m gpudiag serve "
               + " ".join(shlex.quote(a) for a in serve_args))
    return subprocess.Popen(["sh", "-c", command], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=lambda: os.dup2(fd, 3), pass_fds=(3,) if fd != 3 else (), **popen)


@pytest.mark.slow
def test_serves_on_the_socket_systemd_passes(tmp_path):
    (tmp_path / "sys").mkdir()
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    proc = as_systemd_would(listening.fileno(), ["--web.systemd-socket", "--root", str(tmp_path), "--interval", "1"],
                            stderr=subprocess.PIPE, text=True)
    listening.close()  # the child holds it now, as the service holds systemd's
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = get(f"http://127.0.0.1:{port}/livez")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
                time.sleep(0.1)
        assert (status, body) == (200, b"ok\n")
        assert get(f"http://127.0.0.1:{port}/metrics")[0] == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"serving http://127.0.0.1:{port}/metrics" in err


@pytest.mark.slow
@pytest.mark.parametrize("what, listen_pid, message", [
    ("udp", "$$", "descriptor 3: not a TCP socket"),
    ("file", "$$", "descriptor 3: not a socket"),
    ("unlistened", "$$", "descriptor 3: not listening"),
    ("tcp", "1", "LISTEN_PID='1' is not this process"),
])
def test_what_systemd_did_not_pass_is_refused(tmp_path, what, listen_pid, message):
    (tmp_path / "sys").mkdir()
    if what == "file":
        held = open(tmp_path / "file", "w")
    else:
        held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if what == "udp" else socket.SOCK_STREAM)
        held.bind(("127.0.0.1", 0))
        if what == "tcp":
            held.listen()
    try:
        proc = as_systemd_would(held.fileno(), ["--web.systemd-socket", "--root", str(tmp_path)], listen_pid,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
    finally:
        held.close()
    assert (proc.returncode, out) == (2, ""), err
    assert err.startswith("gpudiag: error: --web.systemd-socket: ") and message in err and len(err.splitlines()) == 1
