"""`gpudiag serve` under attack: valid-scrape success rate and p99 latency while hostile clients hammer it, and the
server's RSS peak and CPU (issue 10, items 5-8).

The exporter runs as its own process over the fake NVIDIA node (tests/support/exporter_node.py), with basic auth on (one
user, a bcrypt hash of cost 10, as the unit's comment tells operators to make one), so that every attack meets the
full request path. One scraper with the valid credentials scrapes /metrics on a fresh connection every 50 ms while
`--clients` attackers run one attack (tests/support/http_attacks.py):

- none: the baseline;
- header flood: request heads of 97 headers × 65,000 B;
- bcrypt flood: basic auth with a new wrong password each time;
- slowloris: a request head trickled a header line every 2 s (`--slowloris-every`), never finished;
- connection flood: 4 idle connections per client, reopened as soon as the server drops them.

A fresh server per attack, so that one attack's after-effects do not count against the next. Everything stays on
loopback; each attack stops after `--seconds`. The client and the server share the machine's cores: on a small
machine the figures include the attackers' own CPU.

Usage: python3 bench/exporter_attack.py [--seconds 10] [--clients 16] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bcrypt  # noqa: E402

from tests.support.http_attacks import (  # noqa: E402
    Target, basic_auth, bcrypt_flood, connection_flood, header_flood, scrape_once, slowloris, under_attack,
)

USER, PASSWORD = "prometheus", "bench-password"


def attacks(slowloris_every: float) -> dict:
    return {
        "none": lambda address, until: 0,
        "header flood": header_flood,
        "bcrypt flood": bcrypt_flood(USER),
        "slowloris": slowloris(every=slowloris_every),
        "connection flood": connection_flood,
    }


def run(name: str, attack, seconds: float, clients: int) -> dict:
    with tempfile.TemporaryDirectory() as root:
        config = Path(root) / "web.yml"
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
        config.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
        target = Target(Path(root), ("--web-config", str(config)))
        authorization = basic_auth(USER, PASSWORD)
        try:
            deadline = time.monotonic() + 30
            while not scrape_once(target.address, authorization):
                if time.monotonic() > deadline:
                    raise SystemExit("the exporter never served a scrape")
                time.sleep(0.1)
            time.sleep(1.0)
            baseline, cpu_before = target.rss_mib(), target.cpu_seconds()
            outcome = under_attack(target, attack, seconds, clients=clients if name != "none" else 0,
                                   authorization=authorization)
            cpu = (target.cpu_seconds() - cpu_before) / seconds
        finally:
            target.stop()
    return {
        "attack": name,
        "scrapes": len(outcome.scrapes),
        "success_percent": outcome.success_rate * 100,
        "p99_ms": outcome.p99_ms(),
        "rss_baseline_mib": baseline,
        "rss_peak_mib": outcome.peak_rss_mib,
        "server_cpu_percent_of_one_core": cpu * 100,
        "attack_connections": outcome.attack_requests,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each attack runs")
    parser.add_argument("--clients", type=int, default=16, help="attacking clients")
    parser.add_argument("--slowloris-every", type=float, default=2.0, help="seconds between slowloris header lines")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = []
    print(f"{'attack':<17} {'scrapes':>7} {'success':>8} {'p99 ms':>8} {'RSS MiB (peak)':>15} {'CPU':>6}"
          f" {'attack conns':>12}")
    for name, attack in attacks(args.slowloris_every).items():
        r = run(name, attack, args.seconds, args.clients)
        results.append(r)
        print(f"{name:<17} {r['scrapes']:>7} {r['success_percent']:>7.1f}% {r['p99_ms']:>8.1f}"
              f" {r['rss_baseline_mib']:>6.1f} ({r['rss_peak_mib']:>5.1f}) {r['server_cpu_percent_of_one_core']:>5.0f}%"
              f" {r['attack_connections']:>12}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
