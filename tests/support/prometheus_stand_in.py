"""A stand-in Prometheus for what a real one rarely does on cue: slow, partial, refusing, trickling, answering
NaN or malformed samples. It answers `POST /api/v1/query` with what a test's function returns for each PromQL
query: (HTTP status, a JSON-able body, or bytes sent as they are)."""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional, Union

import pytest

from tests.support.paths import FIXTURES

TLS = FIXTURES / "tls"

Answer = Callable[[str, dict], tuple[int, Union[dict, bytes]]]


def success(result: list, **extra) -> tuple[int, dict]:
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}, **extra}


def sample(value: float, **labels: str) -> dict:
    """A sample as Prometheus writes it: the value a string, `NaN`, `+Inf` and `-Inf` spelled as Go does."""
    text = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf") if math.isinf(value) else str(value)
    return {"metric": labels, "value": [time.time(), text]}


def healthy(promql: str, *instances: str, not_ok: tuple[str, ...] = ()) -> list[dict]:
    """What a node that completed a recent collection answers to the queries that show it (fleet.prometheus):
    gpudiag series, a collection 5 s old, 40 check series of value 1 (and one of value 0 on each node of
    `not_ok`, whose failing checks are then asked for), no collector failing."""
    if "gpudiag_build_info" in promql:
        return [sample(1, instance=i) for i in instances]
    if "gpudiag_last_collection_timestamp_seconds" in promql:
        return [sample(5.0, instance=i) for i in instances]
    if promql.startswith("count_values by (instance)") and "gpudiag_check_ok" in promql:
        return [sample(40, instance=i, ok="1") for i in instances] + [sample(1, instance=i, ok="0") for i in not_ok]
    return []


def fleet_answers(promql: str, headers: dict) -> tuple[int, dict]:
    """Two nodes, one target down; the other healthy with one GPU, nothing failing."""
    if promql.startswith("up{"):
        return success([sample(1, instance="n1:9858"), sample(0, instance="n2:9858")])
    if "gpudiag_gpu_info" in promql:
        return success([sample(1, instance="n1:9858", gpu="0", pci_bus_id="0000:19:00.0", model="NVIDIA H200",
                                driver_version="580.159.04", vbios_version="96.00.A5.00.1A")])
    return success(healthy(promql, "n1:9858"))


class StandIn:
    """`trickle`: seconds between the bytes of a body (a server that sends its answer a byte at a time); only for
    the queries containing `trickle_if` where that is set."""

    def __init__(self, answer: Answer, delay: float = 0.0, tls: bool = False, trickle: float = 0.0) -> None:
        self.answer, self.delay, self.trickle, self.seen, self.location = answer, delay, trickle, [], ""
        self.trickle_if: Optional[str] = None
        self.stop = threading.Event()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                stand_in.seen.append((self.path, form, dict(self.headers)))
                time.sleep(stand_in.delay)
                promql = form["query"][0]
                code, body = stand_in.answer(promql, dict(self.headers))
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                trickle = stand_in.trickle if stand_in.trickle_if is None or stand_in.trickle_if in promql else 0.0
                self.send_response(code)
                if stand_in.location:
                    self.send_header("Location", stand_in.location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    if not trickle:
                        self.wfile.write(data)
                    for byte in (data if trickle else b""):
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        if stand_in.stop.wait(trickle):
                            return
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting, as it should

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS / "server.crt", TLS / "server.key")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.url = self.url.replace("http:", "https:")
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    made = []

    def make(answer: Answer = fleet_answers, delay: float = 0.0, tls: bool = False, trickle: float = 0.0) -> StandIn:
        made.append(StandIn(answer, delay, tls, trickle))
        return made[-1]

    yield make
    for server in made:
        server.close()
