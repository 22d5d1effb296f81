#!/usr/bin/env python3
"""`gpudiag top` beside `nvidia-smi dmon` on the lab GPU, sampled in the same seconds while a load comes and goes:
do the two agree, column by column, within one sample?

On the one-GPU lab machine (root, nvidia-smi, torch, no network), from the repository root:

    OUT=/tmp/out PYTHONPATH=. python3 tools/lab_top_vs_dmon.py

It starts, at the same moment, `gpudiag top -d 1 -c 20` on a pipe and `nvidia-smi dmon -s pucvmet -d 1 -c 20 -o DT`
(`-o DT`: dmon's own date and time on each line, to align the samples), and a background process that multiplies
matrices with torch from about 5 s to 14 s in (and holds 4 GiB more memory meanwhile), so that power, clocks,
temperature, utilisation and memory move. It writes both outputs, the load's log and the comparison under $OUT
(top.txt, top.stderr, dmon.txt, load.txt, comparison.txt, comparison.json) and prints, for each column both show
(power, temperatures, clocks, utilisation, memory used), how many of top's samples lie within the values dmon
printed for the same GPU in the same second or the one before or after it (one sample at -d 1), with a small
tolerance for rounding. Exit 0 when every column agrees at every sample, 1 when one does not, 2 when a run failed.
The whole run takes about 30 s; every process is bounded (110 s in all).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

SAMPLES = 20
LOAD_FROM, LOAD_UNTIL = 5.0, 14.0  # seconds after the start
LIMIT_SECONDS = 110.0
# (column in top's output, column in dmon's, tolerance in the column's unit): what the two must agree on. dmon
# prints whole numbers; top rounds the same way, so ±1 covers the rounding of a value read a moment apart.
PAIRS = (("pwr", "pwr", 2), ("gtemp", "gtemp", 1), ("mtemp", "mtemp", 1), ("pclk", "pclk", 15),
         ("mclk", "mclk", 15), ("sm", "sm", 2), ("mem", "mem", 2), ("fb", "fb", 2))
WINDOW_SECONDS = 1  # within one sample of -d 1


# -- reading dmon-style output (dmon's own, and top's, which has the same form) -------------------------------


def parse(text: str) -> list[dict]:
    """Every data line as {column name: value}: names from the `#` line before the units line (repeated headers
    re-read), `-` as None, lines whose field count differs from the header's (a cut last line, `^C`) left out.
    A line gets "_second": its time of day in seconds, from its `Time` (HH:MM:SS) column where there is one."""
    names: Optional[list[str]] = None
    rows = []
    lines = text.splitlines()
    for position, line in enumerate(lines):
        if line.startswith("#"):
            following = lines[position + 1] if position + 1 < len(lines) else ""
            if following.startswith("#"):  # the names; the line after holds the units
                names = line[1:].split()
            continue
        fields = line.split()
        if names is None or len(fields) != len(names):
            continue
        row = {name: (None if value == "-" else value) for name, value in zip(names, fields)}
        clock = row.get("Time")
        if clock and clock.count(":") == 2:
            hours, minutes, seconds = (int(part) for part in clock.split(":"))
            row["_second"] = hours * 3600 + minutes * 60 + seconds
        rows.append(row)
    return rows


def _number(value: Optional[str]) -> Optional[float]:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def compare(top_rows: list[dict], dmon_rows: list[dict], pairs=PAIRS, window: int = WINDOW_SECONDS) -> list[dict]:
    """Per column: of top's samples that have a value, how many lie within [min - tolerance, max + tolerance] of
    the values dmon printed for the same GPU within `window` seconds; the samples that do not; the range each saw
    (that the values moved); and for memory, the median difference (a constant one: the two count different
    things, e.g. the driver's reserved memory)."""
    found = []
    for ours, theirs, tolerance in pairs:
        agreed, compared, misses, ours_seen, theirs_seen, differences = 0, 0, [], [], [], []
        for row in top_rows:
            value = _number(row.get(ours))
            if value is None or "_second" not in row:
                continue
            ours_seen.append(value)
            near = [_number(d.get(theirs)) for d in dmon_rows if d.get("gpu") == row.get("gpu")
                    and "_second" in d and abs(d["_second"] - row["_second"]) <= window]
            near = [v for v in near if v is not None]
            if not near:
                continue
            compared += 1
            differences.append(value - statistics.median(near))
            if min(near) - tolerance <= value <= max(near) + tolerance:
                agreed += 1
            else:
                misses.append({"time": row.get("Time"), "gpu": row.get("gpu"), "top": value, "dmon": near})
        theirs_seen = [v for v in (_number(d.get(theirs)) for d in dmon_rows) if v is not None]
        found.append({
            "column": ours, "dmon_column": theirs, "tolerance": tolerance, "compared": compared, "agreed": agreed,
            "misses": misses, "top_range": [min(ours_seen), max(ours_seen)] if ours_seen else None,
            "dmon_range": [min(theirs_seen), max(theirs_seen)] if theirs_seen else None,
            "median_difference": statistics.median(differences) if differences else None,
        })
    return found


def verdict_lines(results: list[dict]) -> list[str]:
    lines = []
    for result in results:
        name = result["column"]
        if result["compared"] == 0:
            lines.append(f"{name:6} not compared: {'dmon shows -' if result['dmon_range'] is None else 'no value'}"
                         f" (top {result['top_range']}, dmon {result['dmon_range']})")
            continue
        word = "AGREE" if result["agreed"] == result["compared"] else "DIFFER"
        lines.append(f"{name:6} {word}: {result['agreed']}/{result['compared']} samples within one sample "
                     f"(±{result['tolerance']}); top {result['top_range']}, dmon {result['dmon_range']}, median "
                     f"difference {result['median_difference']:+g}")
        for miss in result["misses"][:3]:
            lines.append(f"         {miss['time']} GPU {miss['gpu']}: top {miss['top']:g}, dmon {miss['dmon']}")
    return lines


def agree(results: list[dict]) -> bool:
    return all(r["agreed"] == r["compared"] for r in results if r["compared"])


# -- the run ------------------------------------------------------------------------------------------------------


def load(start: float, until: float) -> int:
    """The background load: matrix multiplications on GPU 0 from `start` to `until` (Unix times)."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    print(f"{time.time():.3f} ready", flush=True)
    time.sleep(max(0.0, start - time.time()))
    held = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # 4 GiB more: memory used moves too
    print(f"{time.time():.3f} load on", flush=True)
    launches = 0
    while time.time() < until:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        launches += 20
    del held
    torch.cuda.empty_cache()
    print(f"{time.time():.3f} load off after {launches} matmuls", flush=True)
    return 0


def run(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi is not on PATH: nothing to compare with", file=sys.stderr)
        return 2
    started = time.time()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or "."}
    files = {name: (out / name).open("w") for name in ("top.txt", "top.stderr", "dmon.txt", "load.txt")}
    processes = {
        "load": subprocess.Popen([sys.executable, __file__, "--load", str(started + LOAD_FROM),
                                  str(started + LOAD_UNTIL)], stdout=files["load.txt"], stderr=subprocess.STDOUT),
        "dmon": subprocess.Popen(["nvidia-smi", "dmon", "-s", "pucvmet", "-d", "1", "-c", str(SAMPLES), "-o", "DT"],
                                 stdout=files["dmon.txt"], stderr=subprocess.STDOUT),
        "top": subprocess.Popen([sys.executable, "-m", "gpudiag", "top", "-d", "1", "-c", str(SAMPLES)],
                                stdout=files["top.txt"], stderr=files["top.stderr"], env=env),
    }
    codes = {}
    for name, process in processes.items():
        try:
            codes[name] = process.wait(timeout=max(1.0, started + LIMIT_SECONDS - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()
            codes[name] = f"killed after {LIMIT_SECONDS:g} s"
    for handle in files.values():
        handle.close()
    top_rows, dmon_rows = parse((out / "top.txt").read_text()), parse((out / "dmon.txt").read_text())
    results = compare(top_rows, dmon_rows)
    loaded = codes.get("load") == 0
    report = [f"exit codes: {codes}", f"samples: top {len(top_rows)} lines, dmon {len(dmon_rows)} lines",
              *([] if loaded else ["the load did not run (load.txt says why): the values may not have moved"]),
              *verdict_lines(results), f"overall: {'AGREE' if agree(results) else 'DIFFER'} "
                                       f"({time.time() - started:.1f} s)"]
    (out / "comparison.txt").write_text("\n".join(report) + "\n")
    (out / "comparison.json").write_text(json.dumps({"exit_codes": codes, "columns": results}, indent=2) + "\n")
    print("\n".join(report))
    if codes.get("top") != 0 or codes.get("dmon") != 0 or not top_rows or not dmon_rows:
        return 2
    return 0 if agree(results) else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--load"]:
        return load(float(argv[1]), float(argv[2]))
    return run(Path(os.environ.get("OUT") or "lab-top-vs-dmon"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
