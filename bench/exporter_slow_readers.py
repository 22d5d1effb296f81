"""`gpudiag serve` on a 64-GPU node against clients that send a request and never read (issue 24, item 18).

On a 64-GPU node /metrics is about 3.6 MB, far more than a socket's buffers hold: a client that asks for it and
never reads leaves the server's write standing still. 32 such clients (tests/support/http_attacks.py never_read: a 4 KiB
receive buffer, reconnecting as soon as they are dropped) run against the exporter as its own process over the
fake NVIDIA node (64 GPUs, no auth, the default 16 connections), while one scraper makes a valid scrape on a fresh
connection every 50 ms. Printed: the body's size, valid scrapes that succeeded (200 and the whole body within 2 s),
their p99 latency, and how many connections the attackers opened. Before connections.py made a stalled write
evictable, the 32 held every slot for the 10 s write timeout (74-82 % valid scrapes in the issue's runs).

Everything stays on loopback; the client and the server share the machine's cores.

Usage: python3 bench/exporter_slow_readers.py [--seconds 20] [--clients 32] [--gpus 64] [--receive-buffer 4096]
       [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.http_attacks import Target, never_read, scrape_once, under_attack  # noqa: E402


def run(seconds: float, clients: int, gpus: int, receive_buffer: int = 4096) -> dict:
    with tempfile.TemporaryDirectory() as root:
        target = Target(Path(root), gpus=gpus)
        try:
            deadline = time.monotonic() + 120
            while not (scrape_once(target.address, timeout=10) and target.collections() >= 1):
                if time.monotonic() > deadline:
                    raise SystemExit("the exporter never served a complete collection")
                time.sleep(0.2)
            size = len(target.get())
            attack = lambda address, until: never_read(address, until, receive_buffer)  # noqa: E731
            outcome = under_attack(target, attack, seconds, clients=clients, warm_up=2.0)
        finally:
            target.stop()
    return {"gpus": gpus, "clients": clients, "seconds": seconds, "receive_buffer": receive_buffer,
            "metrics_bytes": size,
            "scrapes": len(outcome.scrapes), "success_percent": outcome.success_rate * 100,
            "p99_ms": outcome.p99_ms(), "attack_connections": outcome.attack_requests}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the attack runs")
    parser.add_argument("--clients", type=int, default=32, help="clients that never read")
    parser.add_argument("--gpus", type=int, default=64, help="GPUs of the fake node")
    parser.add_argument("--receive-buffer", type=int, default=4096,
                        help="the attackers' SO_RCVBUF in bytes (0: the system's default)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    r = run(args.seconds, args.clients, args.gpus, args.receive_buffer)
    print(f"{r['gpus']} GPUs, /metrics {r['metrics_bytes'] / 1e6:.1f} MB, {r['clients']} clients that never read "
          f"(SO_RCVBUF {r['receive_buffer'] or 'default'}), "
          f"{r['seconds']:g} s: valid scrapes {r['success_percent']:.1f} % of {r['scrapes']}, p99 {r['p99_ms']:.0f} "
          "ms, "
          f"{r['attack_connections']} attack connections")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
