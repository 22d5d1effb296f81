"""tools/lab_top_vs_dmon.py's reading and comparison, without a GPU: dmon's output as its format has it
(tests/fixtures/dmon/, built to the format, not recorded: see its README) beside lines gpudiag's own renderer
prints."""

from __future__ import annotations

import time

from gpudiag.report.live_text import header_lines, sample_lines
from tests.support.paths import FIXTURES
from tests.support.tools import load_tool

DMON = (FIXTURES / "dmon/h100-pucvmet-DT.built-to-format.txt").read_text()
MiB = 1 << 20


def tool():
    return load_tool("lab_top_vs_dmon")


def top_output(dmon_rows: list[dict], late: int = 1, change=None) -> str:
    """What `gpudiag top` would print had it read dmon's values `late` seconds after dmon did."""
    lines = header_lines()
    for row in dmon_rows:
        hours, minutes, seconds = (int(p) for p in row["Time"].split(":"))
        taken_at = time.mktime((2026, 12, 5, hours, minutes, seconds + late, 0, 0, -1))
        values = {"index": int(row["gpu"]), "pci_bus_id": "0000:19:00.0", "power_watts": float(row["pwr"]),
                  "power_limit_watts": 700.0, "gpu_temperature_celsius": float(row["gtemp"]),
                  "memory_temperature_celsius": float(row["mtemp"]), "sm_clock_mhz": int(row["pclk"]),
                  "memory_clock_mhz": int(row["mclk"]), "gpu_utilization_percent": int(row["sm"]),
                  "memory_utilization_percent": int(row["mem"]), "memory_used_bytes": int(row["fb"]) * MiB,
                  "throttle_reasons": [], "verdict": {}}
        if change is not None:
            change(row, values)
        lines += sample_lines([values], taken_at)
    return "\n".join(lines) + "\n"


def test_dmon_s_lines_are_read_by_their_header_s_names():
    rows = tool().parse(DMON)
    assert len(rows) == 20
    first = rows[0]
    assert (first["Date"], first["Time"], first["gpu"], first["pwr"], first["mclk"], first["pclk"], first["fb"]) == (
        "20261205", "14:02:10", "0", "71", "2619", "345", "0")
    assert first["_second"] == 14 * 3600 + 2 * 60 + 10


def test_reordered_columns_a_repeated_header_a_dash_and_a_cut_line():
    head = ("#Time         gpu    pwr  gtemp  mtemp  rxpci  txpci  sbecc  dbecc\n"
            "#HH:MM:SS     Idx      W      C      C   MB/s   MB/s   errs   errs\n")
    text = head + " 04:12:44       0    130     37      -    248     34      0      0\n" + head + \
        " 04:12:45       0    100     37     37    268     39      1      0\n 04:12:46       0    1^C\n"
    rows = tool().parse(text)
    assert [(r["Time"], r["pwr"], r["mtemp"], r["sbecc"]) for r in rows] == [
        ("04:12:44", "130", None, "0"), ("04:12:45", "100", "37", "1")]


def test_gpudiag_s_lines_read_one_second_late_agree_in_every_column():
    lab = tool()
    dmon_rows = lab.parse(DMON)
    top_rows = lab.parse(top_output(dmon_rows, late=1))
    assert len(top_rows) == 20 and top_rows[0]["verdict"] == "ok"
    results = lab.compare(top_rows, dmon_rows)
    assert [(r["column"], r["agreed"], r["compared"]) for r in results] == [
        (name, 20, 20) for name in ("pwr", "gtemp", "mtemp", "pclk", "mclk", "sm", "mem", "fb")]
    assert lab.agree(results)
    power = next(r for r in results if r["column"] == "pwr")
    assert power["top_range"] == [71.0, 699.0]  # the values moved: the comparison saw the load come and go
    assert all(line.split()[1] == "AGREE:" for line in lab.verdict_lines(results))


def test_a_value_off_by_more_than_one_sample_is_told_with_its_time():
    lab = tool()
    dmon_rows = lab.parse(DMON)

    def hotter(row, values):
        if row["Time"] == "14:02:20":
            values["power_watts"] = 350.0  # dmon saw 698-699 W from :19 to :23

    results = lab.compare(lab.parse(top_output(dmon_rows, change=hotter)), dmon_rows)
    power = next(r for r in results if r["column"] == "pwr")
    assert (power["agreed"], power["compared"]) == (19, 20)
    assert power["misses"] == [{"time": "14:02:21", "gpu": "0", "top": 350.0, "dmon": [699.0, 697.0, 698.0]}]
    assert not lab.agree(results)
    assert "pwr    DIFFER: 19/20" in "\n".join(lab.verdict_lines(results))


def test_two_samples_apart_is_not_within_one_sample():
    lab = tool()
    dmon_rows = lab.parse(DMON)
    results = lab.compare(lab.parse(top_output(dmon_rows, late=3)), dmon_rows)
    power = next(r for r in results if r["column"] == "pwr")
    assert power["compared"] == 18 and power["agreed"] < power["compared"]  # the load's edges are 3 s off


def test_dmon_s_power_is_nvml_s_one_second_reading_at_dmon_s_own_moment():
    # issue 36, item 1: tools/lab_dmon_phase.py over the two H100 recordings (see their READMEs)
    phase = load_tool("lab_dmon_phase")
    for directory, moment in (("h100/recorded/device-2026-12-06/dmon_sources", 0.86),
                              ("h100/recorded/lab-2026-12-06b/dmon_sources", 0.20)):
        lines = phase.report(FIXTURES / directory)
        best = lines[1].split()
        assert best[:3] == ["pwr", "GetPowerUsage", "(nearest"] and float(best[4]) < 1.0, lines
        assert best[-2] == f"+{moment:.2f}", lines
    recorded = (FIXTURES / "h100/recorded/device-2026-12-06/dmon_sources/phase.txt").read_text()
    assert recorded == "\n".join(phase.report(FIXTURES / "h100/recorded/device-2026-12-06/dmon_sources")) + "\n"
