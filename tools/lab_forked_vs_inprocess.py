#!/usr/bin/env python3
"""On a real node: does `gpudiag check --direct` say the same with its collection in a forked child
(gpudiag/cli/check/early_collect.py) as with the collection in its own process? Runs each as the user runs it
(`python3 -m gpudiag check --direct --json`, the second with the fork turned off), `rounds` times interleaved, and
compares every result's check, device, status, action and fault code (the verdict; a message that quotes a figure
read at another moment, the host's CPU use say, may differ between any two runs and is listed apart). Prints the
differences (none is the answer wanted) and writes both reports under $OUT.

    OUT=/tmp/out PYTHONPATH=. python3 tools/lab_forked_vs_inprocess.py [rounds]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

IN_PROCESS = ("import sys, gpudiag.cli.check.direct as d\nd.forks_the_collection = lambda root: False\n"
              "from gpudiag.cli.check.fastpath import run\nrun()\n")


def results(report: dict) -> dict:
    return {(r["check"], json.dumps(r.get("device"), sort_keys=True)): (r["status"], r.get("action"),
                                                                          r.get("fault_code"))
            for r in report["results"]}


def messages(report: dict) -> dict:
    return {(r["check"], json.dumps(r.get("device"), sort_keys=True)): r.get("message") for r in report["results"]}


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    out = Path(os.environ.get("OUT") or "/tmp/forked_vs_inprocess")
    out.mkdir(parents=True, exist_ok=True)
    commands = {"forked": [sys.executable, "-m", "gpudiag", "check", "--direct", "--json"],
                "in-process": [sys.executable, "-c", IN_PROCESS, "check", "--direct", "--json"]}
    differences = 0
    for number in range(rounds):
        reports = {}
        for name, command in commands.items():
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            (out / f"{name}-{number}.json").write_text(done.stdout)
            reports[name] = (done.returncode, json.loads(done.stdout), done.stderr)
        (code_a, a, err_a), (code_b, b, err_b) = reports["forked"], reports["in-process"]
        ra, rb = results(a), results(b)
        changed = sorted(k for k in set(ra) | set(rb) if ra.get(k) != rb.get(k))
        print(f"round {number}: exit {code_a} / {code_b}, {len(ra)} / {len(rb)} results, "
              f"status {a['status']} / {b['status']}, {len(changed)} differ; stderr {err_a!r} / {err_b!r}")
        for key in changed:
            print(f"  {key}: forked {ra.get(key)} / in-process {rb.get(key)}")
        ma, mb = messages(a), messages(b)
        for key in sorted(k for k in set(ma) & set(mb) if ma[k] != mb[k]):
            print(f"  message only, {key}: forked {ma[key]!r} / in-process {mb[key]!r}")
        differences += len(changed) + (code_a != code_b)
    print("the same" if differences == 0 else f"{differences} differences")
    return 0 if differences == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
