#!/usr/bin/env python3
"""Which NVML reads does `nvidia-smi dmon` print? For `gpudiag top` to agree with dmon within one sample (issue 36,
item 1) it must show the same quantities: an instantaneous read and a one-second average differ by tens of MHz and
watts under a power cap.

On the lab GPU (root, nvidia-smi, torch), from the repository root:

    OUT=/tmp/out PYTHONPATH=. python3 tools/lab_dmon_sources.py

While a load comes and goes (tools/lab_top_vs_dmon.py's), `nvidia-smi dmon -s pucm -d 1 -o DT` runs and this process
reads GPU 0 every 50 ms through pynvml: each candidate source of dmon's pwr, gtemp, pclk, mclk and sm columns
(instant calls, NVML_FI_DEV_POWER_AVERAGE / _INSTANT, nvmlDeviceGetSamples' buffered samples). For each dmon line
and candidate it takes (a) the read nearest the line's second, (b) the mean of the reads over the second before it,
and prints each candidate's mean absolute difference from dmon over the loaded seconds; the smallest names the
source. Writes dmon.txt, reads.json and sources.txt under $OUT. About 25 s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_top_vs_dmon import parse  # noqa: E402

SECONDS = 20


def candidates(nvml, handle) -> dict:
    found = {}

    def put(name, function):
        try:
            found[name] = float(function())
        except Exception:  # noqa: BLE001 - a candidate this GPU lacks is left out
            pass

    put("pwr GetPowerUsage", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
    for field, name in ((185, "pwr field POWER_AVERAGE"), (186, "pwr field POWER_INSTANT")):
        def read(field=field):
            value = nvml.nvmlDeviceGetFieldValues(handle, [field])[0]
            if value.nvmlReturn != 0:
                raise RuntimeError(value.nvmlReturn)
            return value.value.uiVal / 1000
        put(name, read)
    put("gtemp GetTemperature", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    put("pclk ClockInfo GRAPHICS", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_GRAPHICS))
    put("pclk ClockInfo SM", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    put("mclk ClockInfo MEM", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))
    put("sm UtilizationRates", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    for clock, clock_name in ((nvml.NVML_CLOCK_GRAPHICS, "GRAPHICS"), (nvml.NVML_CLOCK_SM, "SM")):
        for clock_id, id_name in ((nvml.NVML_CLOCK_ID_CURRENT, "CURRENT"),
                                  (nvml.NVML_CLOCK_ID_APP_CLOCK_TARGET, "APP_CLOCK_TARGET")):
            put(f"pclk GetClock {clock_name} {id_name}",
                lambda c=clock, i=clock_id: nvml.nvmlDeviceGetClock(handle, c, i))
    return found


def buffered(nvml, handle, since_us: dict, errors: dict) -> dict:
    """nvmlDeviceGetSamples' samples newer than the last one seen of each kind (`since_us`, updated), per kind:
    [(timestamp s, value)]; a kind that raised is counted in `errors` by its error's name."""
    kinds = {"pwr GetSamples TOTAL_POWER": (nvml.NVML_TOTAL_POWER_SAMPLES, 1e-3),
             "pclk GetSamples PROCESSOR_CLK": (nvml.NVML_PROCESSOR_CLK_SAMPLES, 1.0),
             "mclk GetSamples MEMORY_CLK": (nvml.NVML_MEMORY_CLK_SAMPLES, 1.0),
             "sm GetSamples GPU_UTILIZATION": (nvml.NVML_GPU_UTILIZATION_SAMPLES, 1.0)}
    found = {}
    for name, (kind, scale) in kinds.items():
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(handle, kind, since_us.get(name, 0))
        except Exception as exc:  # noqa: BLE001
            errors[f"{name}: {type(exc).__name__} {exc}"] = errors.get(f"{name}: {type(exc).__name__} {exc}", 0) + 1
            continue
        member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}.get(value_type, "uiVal")
        found[name] = [(s.timeStamp / 1e6, getattr(s.sampleValue, member) * scale) for s in samples]
        if samples:
            since_us[name] = max(s.timeStamp for s in samples)
    return found


def main() -> int:
    import pynvml as nvml

    out = Path(os.environ.get("OUT") or "/tmp/dmon_sources")
    out.mkdir(parents=True, exist_ok=True)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    started = time.time()
    tool = Path(__file__).resolve().parent / "lab_top_vs_dmon.py"
    load = subprocess.Popen([sys.executable, str(tool), "--load", str(started + 5), str(started + 14)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with (out / "dmon.txt").open("w") as dmon_out:
        dmon = subprocess.Popen(["nvidia-smi", "dmon", "-s", "pucm", "-d", "1", "-c", str(SECONDS), "-o", "DT"],
                                stdout=dmon_out, stderr=subprocess.STDOUT)
        reads, samples, since, errors = [], {}, {}, {}
        while dmon.poll() is None and time.time() < started + SECONDS + 10:
            reads.append((time.time(), candidates(nvml, handle)))
            for name, values in buffered(nvml, handle, since, errors).items():
                samples.setdefault(name, []).extend(values)
            time.sleep(0.05)
        load.wait(timeout=30)
    dmon_rows = parse((out / "dmon.txt").read_text())
    day = time.mktime(time.localtime(started)[:3] + (0, 0, 0, 0, 0, -1))  # local midnight: dmon prints local time
    column = {"pwr": "pwr", "gtemp": "gtemp", "pclk": "pclk", "mclk": "mclk", "sm": "sm"}
    scores: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}  # the lines with the load on for 2 s and still on 1 s later
    for row in dmon_rows:
        at = day + row["_second"]
        for name in {n for _, r in reads for n in r} | set(samples):
            theirs = float(row[column[name.split()[0]]])
            series = samples.get(name) or [(t, r[name]) for t, r in reads if name in r]
            nearest = min(series, key=lambda p: abs(p[0] - at), default=None)
            before = [v for t, v in series if at - 1 <= t < at]
            loaded = started + 7 <= at <= started + 13
            if nearest is not None:
                scores.setdefault(f"{name} (nearest read)", []).append(abs(nearest[1] - theirs))
                if loaded:
                    steady.setdefault(f"{name} (nearest read)", []).append(nearest[1] - theirs)
            if before:
                scores.setdefault(f"{name} (mean of the second before)", []).append(
                    abs(statistics.mean(before) - theirs))
                if loaded:
                    steady.setdefault(f"{name} (mean of the second before)", []).append(
                        statistics.mean(before) - theirs)
    lines = [f"{len(dmon_rows)} dmon lines, {len(reads)} reads every 50 ms; mean |difference| from dmon, by column:"]
    for name, diffs in sorted(scores.items(), key=lambda kv: (kv[0].split()[0], statistics.mean(kv[1]))):
        lines.append(f"  {name:60} {statistics.mean(diffs):8.2f}  (max {max(diffs):.1f}, {len(diffs)} lines)")
    lines.append("under steady load (7 s to 13 s in): median signed difference (ours - dmon's), by column:")
    for name, diffs in sorted(steady.items(), key=lambda kv: (kv[0].split()[0], abs(statistics.median(kv[1])))):
        lines.append(f"  {name:60} {statistics.median(diffs):+8.2f}  ({len(diffs)} lines)")
    lines += [f"sample buffer errors: {what} x{times}" for what, times in errors.items()]
    (out / "sources.txt").write_text("\n".join(lines) + "\n")
    (out / "reads.json").write_text(json.dumps({"reads": reads, "samples": samples, "errors": errors}) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
