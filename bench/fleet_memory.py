"""`gpudiag fleet`'s memory at its input caps: peak RSS for answers near the 64 MiB cap and for a large report.

Three cases, each `gpudiag fleet` in its own process, its peak RSS read from the kernel's accounting of that
process alone (wait4), its wall time from outside:

- `report`: one report of 435,000 failing results (14.8 MB, as in issue 24: the size a node that fails everything
  on a 64-device node, or a hostile one, can write within the 16 MiB report cap), judged from a directory.
- `answers-narrow` / `answers-wide`: a stand-in Prometheus (in this process, on loopback) that lists NODES targets
  and answers every other query with a body of ANSWER_MIB (default 60, under the 64 MiB cap) of samples over those
  targets: narrow samples (instance, check, gpu: ~90 bytes each) or wide ones (every label the fleet view reads:
  ~330 bytes each). A Prometheus does not answer this way; a misconfigured or hostile one can, and the cap is what
  bounds what fleet holds.

The figures are what docs/fleet.md states as the memory bound; tests/e2e/test_fleet_memory.py holds the bound at a
smaller size. Usage: python3 bench/fleet_memory.py [--nodes 2000] [--answer-mib 60] [--results 435000]
[--cases report,answers-narrow,answers-wide] [--large-for PROMQL-PIECE] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_prometheus import timed  # noqa: E402 - the sibling benchmark's harness

REPO = Path(__file__).resolve().parent.parent


def large_report(path: Path, results: int) -> int:
    """A schema-1 report of `results` failing results, compact as `jq -c` writes it; returns its size."""
    head = '{"schema_version":1,"hostname":"gpu-node-big","status":"fail","collected_at":"2026-12-01T00:00:00+00:00",' \
           '"results":['
    with open(path, "w") as out:
        out.write(head)
        out.write(",".join(f'{{"check":"c{i}","status":"fail"}}' for i in range(results)))
        out.write("]}")
    return path.stat().st_size


def _body(samples) -> bytes:
    return (b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join(samples) + b"]}}")


def answers(nodes: int, answer_bytes: int, wide: bool) -> tuple[bytes, bytes, dict[str, bytes]]:
    """(the `up` answer, the large answer, and what a sound node answers to the queries that show it sound)."""
    names = [f"gpu-node-{i:05d}:9858" for i in range(nodes)]

    def each(value: str, extra: str = "") -> bytes:
        return _body(f'{{"metric":{{"instance":"{n}"{extra}}},"value":[1.0,"{value}"]}}'.encode() for n in names)

    up = each("1")
    sound = {"gpudiag_build_info": each("1"), "gpudiag_last_collection_timestamp_seconds": each("5"),
             "count_values": each("40", ',"ok":"1"')}
    samples, size, i = [], 0, 0
    while size < answer_bytes:
        node, gpu = names[i % nodes], i // nodes
        if wide:
            sample = (f'{{"metric":{{"instance":"{node}","gpu":"{gpu}","pci_bus_id":"0000:{gpu % 256:02x}:00.0",'
                      f'"check":"c.{gpu:06d}","status":"unknown","model":"NVIDIA H200","vbios_version":'
                      f'"96.00.A5.00.1A","driver_version":"580.159.04","runtime_version":"13.0","kind":"max",'
                      f'"direction":"h2d","collector":"collection"}},"value":[1.0,"0"]}}')
        else:
            sample = f'{{"metric":{{"instance":"{node}","check":"c.{gpu:06d}","gpu":"{gpu}"}},"value":[1.0,"0"]}}'
        samples.append(sample.encode())
        size += len(samples[-1]) + 1
        i += 1
    return up, _body(samples), sound


EMPTY = _body([])


class StandIn:
    """`up` to the targets query; `other` to the queries whose PromQL contains `large_for` (every one, if None);
    the rest what sound nodes answer (`sound`, by a piece of the PromQL), or an empty vector."""

    def __init__(self, up: bytes, other: bytes, sound: dict[str, bytes], large_for: str | None = None) -> None:
        def body_for(promql: str) -> bytes:
            if promql.startswith("up{"):
                return up
            if large_for is None or large_for in promql:
                return other
            return next((body for piece, body in sound.items() if piece in promql), EMPTY)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                body = body_for(form["query"][0])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fleet(*argv: str) -> dict:
    wall, rss, code, out, err = timed([sys.executable, "-m", "gpudiag", "fleet", *argv, "--json"],
                                      cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    verdict = json.loads(out) if out.startswith("{") else {}
    return {"wall_seconds": round(wall, 2), "peak_rss_mib": round(rss / 1024, 1), "exit": code,
            "judged": len(verdict.get("nodes", [])), "status": verdict.get("status"),
            "stderr": err.strip().splitlines()[-1][:200] if err.strip() else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--answer-mib", type=float, default=60.0)
    parser.add_argument("--results", type=int, default=435_000)
    parser.add_argument("--cases", default="report,answers-narrow,answers-wide")
    parser.add_argument("--large-for", help="only queries containing this get the large answer (default: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures: dict[str, dict] = {}
    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory(prefix="gpudiag-fleet-memory-") as tmp:
        if "report" in cases:
            reports = Path(tmp) / "reports"
            reports.mkdir()
            size = large_report(reports / "gpu-node-big.json", args.results)
            figures["report"] = {"results": args.results, "report_bytes": size, **fleet(str(reports))}
        for case in ("answers-narrow", "answers-wide"):
            if case not in cases:
                continue
            up, other, sound = answers(args.nodes, int(args.answer_mib * (1 << 20)), wide=case.endswith("wide"))
            server = StandIn(up, other, sound, args.large_for)
            try:
                figures[case] = {"nodes": args.nodes, "answer_bytes": len(other), "large_for": args.large_for,
                                 **fleet("--prometheus", server.url, "--timeout", "300")}
            finally:
                server.close()
    for case, row in figures.items():
        what = (
            f"one report of {row['results']:,} failing results ({row['report_bytes'] / 1e6:.1f} MB)"
            if case == "report"
            else f"{row['nodes']:,} targets, "
            f"{'every other answer' if not row['large_for'] else 'the answer to ' + row['large_for']} "
            f"{row['answer_bytes'] / (1 << 20):.1f} MiB ({case[len('answers-') :]} samples)"
        )
        print(f"{case}: {what}: peak RSS {row['peak_rss_mib']:.0f} MiB, {row['wall_seconds']:.1f} s wall, "
              f"exit {row['exit']}, {row['judged']} node(s) judged, status {row['status']}"
              + (f"; stderr: {row['stderr']}" if row["stderr"] and row["exit"] not in (0, 1) else ""))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
