"""A `gpudiag serve` process for the exporter benchmarks: start it, scrape it on a keep-alive connection, read its
CPU and memory from outside (psutil), stop it. Standard library and psutil only."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
from pathlib import Path
from typing import Optional

import psutil

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


class ExporterProcess:
    def __init__(self, argv: list[str]):
        """`argv` starts `gpudiag serve --listen 127.0.0.1:0 …` (directly or through a wrapper); the address is read
        from its "serving …" line on stderr."""
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        line = self.proc.stderr.readline()
        match = re.search(r"serving https?://([\d.]+):(\d+)/metrics", line)
        if not match:
            self.stop()
            raise SystemExit(f"gpudiag serve did not start: {line!r}")
        self.address = (match.group(1), int(match.group(2)))
        self.conn = http.client.HTTPConnection(*self.address, timeout=30)
        self.process = psutil.Process(self.proc.pid)

    def get(self, path: str = "/metrics") -> bytes:
        for attempt in (1, 2):
            try:
                self.conn.request("GET", path)
                response = self.conn.getresponse()
                body = response.read()
                if response.status != 200:
                    raise SystemExit(f"GET {path}: HTTP {response.status}")
                return body
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()  # the server closed an idle keep-alive connection: reconnect once
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def sample(self, name: str, **labels: str) -> Optional[float]:
        """The value of one series in a fresh scrape (labels in the order gpudiag writes them)."""
        wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
        pattern = rf"^{name}{{{wanted}}} (\S+)$" if labels else rf"^{name} (\S+)$"
        found = re.search(pattern, self.get().decode(), re.M)
        return float(found.group(1)) if found else None

    def collections(self) -> int:
        return int(self.sample("gpudiag_collections_total", outcome="complete") or 0)

    def cpu_seconds(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def rss_mib(self) -> float:
        return self.process.memory_info().rss / MIB

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
