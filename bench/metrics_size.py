"""How large `/metrics` is: `gpudiag serve` over the fake 8-GPU HGX H200 node of the tests
(tests/support/exporter_node.py: the real pynvml over the fake libnvidia-ml), scraped as Prometheus scrapes it, plain
and with `Accept-Encoding: gzip`. Prints the bytes of each body and the number of samples. The README's figure.

Usage: PYTHONPATH=. python3 bench/metrics_size.py [--devices 8]   (from the repository root)
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.exporter_process import ExporterProcess  # noqa: E402


def scrape(address: tuple[str, int], gzipped: bool) -> tuple[int, bytes]:
    """(bytes on the wire, the body as text) of one GET /metrics."""
    conn = http.client.HTTPConnection(*address, timeout=30)
    try:
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if gzipped else {})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"GET /metrics: HTTP {response.status}")
        encoded = response.getheader("Content-Encoding") == "gzip"
        return len(body), gzip.decompress(body) if encoded else body
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        target = ExporterProcess([sys.executable, "-m", "tests.support.exporter_node", root, str(args.devices), "--",
                                  "--listen", "127.0.0.1:0", "--interval", "1", "--timeout", "10"])
        try:
            while target.collections() < 2:  # a complete collection, and its checks, in the body
                time.sleep(0.2)
            plain, text = scrape(target.address, gzipped=False)
            wire, unpacked = scrape(target.address, gzipped=True)
        finally:
            target.stop()
    samples = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(f"{args.devices} GPUs: /metrics {plain:,} B plain, {wire:,} B gzip ({len(unpacked):,} B unpacked), "
          f"{samples:,} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
