#!/usr/bin/env python3
"""Which power reading `nvidia-smi dmon` prints, with the moment it reads found rather than assumed (issue 36, item 1).

tools/lab_dmon_sources.py compares each dmon line with the reads nearest the line's labelled second or over the second
before it; but dmon reads somewhere inside its second, and at a load's edges where in the second decides the value.
This takes that tool's output (reads.json with the sample buffer read as it went, and dmon.txt) and, for each
candidate, the moment after the labelled second (0 to 1.5 s, 20 ms steps) at which it agrees with dmon best:

- `GetPowerUsage` / field POWER_INSTANT read nearest that moment;
- the mean of nvmlDeviceGetSamples' power samples over the 0.5, 1 or 2 s before it;

and prints each candidate's mean and largest absolute difference from dmon there, best first; then how far
nvmlDeviceGetPowerUsage at each read lies from the mean of the samples over the second before it (the driver documents
its reading as a one-second average on Ampere and later GPUs but GA100, instantaneous before).

    python3 tools/lab_dmon_phase.py DIR   (DIR: lab_dmon_sources.py's $OUT; dmon's times read as UTC, as on the lab's)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_top_vs_dmon import parse  # noqa: E402

SAMPLES = "pwr GetSamples TOTAL_POWER"
PHASES = [step / 50 for step in range(0, 76)]  # 0 to 1.5 s after the labelled second


def _mean(values: list[float]):
    return statistics.mean(values) if values else None


def candidates(reads: list, samples: list) -> dict:
    """name -> function(moment) -> the candidate's value at that moment (None: nothing read then)."""
    found = {}
    for name in ("pwr GetPowerUsage", "pwr field POWER_INSTANT"):
        series = [(t, r[name]) for t, r in reads if name in r]
        if series:
            found[f"{name} (nearest read)"] = lambda at, s=series: min(s, key=lambda p: abs(p[0] - at))[1]
    for width in (0.5, 1.0, 2.0):
        found[f"{SAMPLES} (mean of the {width:g} s before)"] = (
            lambda at, w=width: _mean([v for t, v in samples if at - w <= t < at]))
    return found


def best_phases(rows: list[dict], day: float, found: dict) -> list[tuple]:
    """(mean |difference|, max, lines, name, phase) at each candidate's best phase, best first."""
    best = []
    for name, value_at in found.items():
        scored = []
        for phase in PHASES:
            diffs = []
            for row in rows:
                value = value_at(day + row["_second"] + phase)
                if value is not None:
                    diffs.append(abs(value - float(row["pwr"])))
            if len(diffs) == len(rows):
                scored.append((statistics.mean(diffs), max(diffs), len(diffs), name, phase))
        if scored:
            best.append(min(scored))
    return sorted(best)


def usage_vs_samples(reads: list, samples: list) -> list[float]:
    """|GetPowerUsage at a read - the samples' mean over the second before it|, for reads with a full second."""
    diffs = []
    for t, r in reads:
        window = [v for ts, v in samples if t - 1 <= ts < t]
        if "pwr GetPowerUsage" in r and len(window) >= 40:
            diffs.append(abs(statistics.mean(window) - r["pwr GetPowerUsage"]))
    return sorted(diffs)


def report(directory: Path) -> list[str]:
    data = json.loads((directory / "reads.json").read_text())
    reads, samples = data["reads"], data["samples"].get(SAMPLES, [])
    rows = [row for row in parse((directory / "dmon.txt").read_text()) if row.get("pwr") is not None]
    day = reads[0][0] - reads[0][0] % 86400
    lines = [f"{len(rows)} dmon lines, {len(reads)} reads, {len(samples)} power samples; each candidate at the moment "
             f"after dmon's labelled second where it agrees best: mean |difference| W (max), moment"]
    for mean, largest, _, name, phase in best_phases(rows, day, candidates(reads, samples)):
        lines.append(f"  {name:55} {mean:6.2f}  (max {largest:5.1f})  +{phase:.2f} s")
    diffs = usage_vs_samples(reads, samples)
    if diffs:
        lines.append(f"GetPowerUsage against the samples' mean over the second before it, {len(diffs)} reads: median "
                     f"{statistics.median(diffs):.2f} W, mean {statistics.mean(diffs):.2f}, "
                     f"95th percentile {diffs[int(0.95 * len(diffs))]:.1f}, max {diffs[-1]:.1f}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print("\n".join(report(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
