"""The kernel log scanner on hostile inputs: seconds per scan, and what it found, for each.

Issue 10 (items 2 and 3): before the fix a 200 KB line took 14 s and an 11 MB line over 300 s (a quadratic
"fallen off the bus" pattern), and a 4,301-digit number made the whole log unreadable. Each input below ends with
one real Xid 79, which must still be found; the time of a plain 32 MiB boot log (the largest default ring buffer)
is the baseline. The tests bound the worst case loosely (tests/probe/kernel_log/test_hostile.py); this prints the
figures.

Usage: python3 bench/kernel_log_scan.py [--mib 32] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudiag.probe.kernel_log.reader import read_kernel_log  # noqa: E402

XID_79 = "[ 9.0] NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"


def inputs(mib: int) -> dict[str, Callable[[], str]]:
    boot = "[ 1.000000] pci 0000:3b:00.0: [10de:2335] type 00 class 0x030200\n"
    amd = "[ 2.000000] amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!\n"
    # Issue 21: the saved formats the scanner now reads, with a driver line on every line (each one parsed).
    iso = "kern  :info  : 2026-12-01T22:49:29,238898+00:00 NVRM: loading NVIDIA UNIX Open Kernel Module 580.159.04\n"
    journal = "Dec 01 22:49:29 gpu-node-07 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module 580.159.04\n"
    return {
        f"plain boot log, {mib} MiB": lambda: boot * (mib * 2**20 // len(boot)),
        f"amdgpu chatter, {mib} MiB (every line parsed)": lambda: amd * (mib * 2**20 // len(amd)),
        f"dmesg -x --time-format iso NVRM chatter, {mib} MiB": lambda: iso * (mib * 2**20 // len(iso)),
        f"journalctl -k short NVRM chatter, {mib} MiB": lambda: journal * (mib * 2**20 // len(journal)),
        "one 200 KB NVRM line": lambda: "[ 1.0] NVRM: " + "NVRM: x " * 25_000 + "\n",
        "one 11 MB NVRM line": lambda: "[ 1.0] NVRM: " + "NVRM: x " * (11 * 2**20 // 8) + "\n",
        "100,000 lines of 8 KiB of NVRM text": lambda: ("[ 1.0] NVRM: " + "NVRM: x " * 1000 + "\n") * 100_000,
        "10,000 records with 5,000-digit numbers": lambda: (
            f"[ 1.0] NVRM: Xid (PCI:0000:3b:00): {'9' * 5000}, pid=1, name=x, y\n" * 10_000),
        "100,000 forged Xids inside segfault reports": lambda: (
            "[ 1.0] python[1]: segfault at 0 in NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, y\n" * 100_000),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="size of the plain logs (default 32 MiB)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "kern.log"
        for name, make in inputs(args.mib).items():
            text = make() + XID_79
            saved.write_text(text)
            started = time.perf_counter()
            info = read_kernel_log(file=saved)
            seconds = time.perf_counter() - started
            found = [(e.kind, e.code, e.pci_bus_id) for e in info.events]
            rows.append({"input": name, "bytes": len(text), "seconds": round(seconds, 3),
                         "xid79_found": ("xid", 79, "0000:19:00.0") in found, "events": len(found),
                         "skipped": info.records_skipped, "truncated": info.lines_truncated,
                         "incomplete": info.incomplete})
            print(f"{seconds:8.3f} s  {name:48s} events={len(found)} skipped={info.records_skipped} "
                  f"truncated={info.lines_truncated} xid79={'found' if rows[-1]['xid79_found'] else 'MISSED'}"
                  + (f" ({info.incomplete})" if info.incomplete else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["xid79_found"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
