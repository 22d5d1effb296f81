"""A real Prometheus server and Alertmanager (Debian's `prometheus` and `prometheus-alertmanager`) on loopback for the
tests, and a webhook receiver standing in for a pager: what tests/e2e/test_prometheus.py and tests/e2e/test_alerting.py
run gpudiag's exporter, rules and Alertmanager example against."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

import yaml

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_prometheus(tmp_path: Path, config: dict, *flags: str,
                     log: Optional[Path] = None) -> tuple[subprocess.Popen, str]:
    """A Prometheus server on loopback with `config` as its prometheus.yml: the process and its API's base URL."""
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *flags],
        stdout=subprocess.DEVNULL, stderr=log.open("w") if log else subprocess.PIPE, text=True)
    return proc, f"http://127.0.0.1:{port}"


def start_alertmanager(tmp_path: Path, config: dict) -> tuple[subprocess.Popen, str]:
    """An Alertmanager on loopback, not clustered, with `config` as its alertmanager.yml: the process and its URL."""
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "alertmanager.log").open("w"), text=True)
    return proc, f"http://127.0.0.1:{port}"


def api(base: str, path: str, timeout: float = 5) -> object:
    with urllib.request.urlopen(base + path, timeout=timeout) as response:
        answer = json.load(response)
    assert answer.get("status", "success") == "success", answer
    return answer.get("data", answer)


def query(prometheus: str, promql: str) -> list[dict]:
    return api(prometheus, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["result"]


class WebhookReceiver:
    """What Alertmanager's webhook receiver posts, with when it arrived: a pager that only writes things down."""

    def __init__(self) -> None:
        self.notifications: list[tuple[float, dict]] = []
        lock = self._lock = threading.Lock()
        received = self.notifications

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    received.append((time.time(), body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def alerts(self) -> list[tuple[float, dict]]:
        """Every alert of every notification, with its arrival time, in order."""
        with self._lock:
            return [(at, alert) for at, body in self.notifications for alert in body["alerts"]]
