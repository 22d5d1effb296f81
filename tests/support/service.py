"""Helpers for the service tests: `gpudiag serve` in-process over the fake NVIDIA node, with its socket and journal
under the test's root directory (as `--root DIR` puts them), and a raw client for the socket."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import WebConfig
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.service import socket_path, state_dir
from gpudiag.service.protocol import MAX_REQUEST_BYTES

from tests.support.exporter import wait_for


@contextlib.contextmanager
def running_service(
    root: Path, timeout: float = 1.0, interval: float = 0.2, power_samples: bool = False, **service: object
) -> Iterator[ServeDaemon]:
    collector = Collector(CollectOptions(root=root, timeout_seconds=timeout, power_samples=power_samples))
    exporter = ServeDaemon("127.0.0.1:0", WebConfig(), collector.collect, interval, timeout,
                        socket_path=socket_path(root), state_dir=state_dir(root), service_options=service)
    exporter.start()
    try:
        # healthy once the poller has absorbed its first cycle (and started the Xid watcher: stopping the exporter
        # between the watcher's creation and its start would join a thread not yet started)
        wait_for(lambda: exporter.state.health()[0], timeout=10)
        yield exporter
    finally:
        exporter.stop()
        collector.close()


def raw(path: Path, payload: bytes, timeout: float = 5.0, close_write: bool = True) -> tuple[dict, float]:
    """Send `payload` as it is; the answer and the seconds it took."""
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        if payload:
            sock.sendall(payload)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return json.loads(data), time.monotonic() - started


def verdicts(report: dict) -> list[tuple]:
    return sorted((r["check"], r["status"], (r["device"] or {}).get("index")) for r in report["results"])


def collections_done(exporter: ServeDaemon) -> Optional[float]:
    latest = exporter.collections.latest
    return latest.finished_at if latest else None


def stand_in(path: Path, answers: list[dict], requests: Optional[list] = None) -> threading.Thread:
    """A stand-in service at `path` that answers each request with the next of `answers`, then closes (a
    collection that failed or went stale, an older service); the requests it got are appended to `requests`."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(len(answers))

    def serve():
        for answer in answers:
            conn, _ = listener.accept()
            request = conn.recv(MAX_REQUEST_BYTES)
            if requests is not None:
                requests.append(json.loads(request))
            conn.sendall(json.dumps(answer).encode() + b"\n")
            conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread
