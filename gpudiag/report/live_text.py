"""The live view's rows as text (`gpudiag top`): dmon-style lines on a pipe, the table of the full-screen view.

The pipe form is nvidia-smi dmon's: two `#` lines once (the column names, then their units), then one line per GPU
per sample, columns in fixed places, separated by spaces, no value holding a space, `-` for a value the device does
not report (never 0). Where a quantity is the one dmon shows, the column has dmon's name (pwr, gtemp, mtemp, sm, mem,
mclk, pclk, fb, sbecc, dbecc), so that a script written for dmon reads it by the same name. The verdict comes last:
`ok`, or the check IDs by status, worst first (`fail:pcie.link_generation;warn:thermal.temperature`); `unjudged`
where the checks could not run, `gone` for a GPU an earlier sample showed and this one does not."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

MiB = 1 << 20
UNSUPPORTED = "-"


def _number(key: str, scale: float = 1.0) -> Callable[[dict], Optional[str]]:
    def get(row: dict) -> Optional[str]:
        value = row.get(key)
        return None if value is None else str(int(round(value / scale)))
    return get


def _text(key: str) -> Callable[[dict], Optional[str]]:
    return lambda row: None if row.get(key) is None else str(row[key])


def throttle_text(row: dict) -> Optional[str]:
    reasons = row.get("throttle_reasons")
    if reasons is None:
        return None
    return ",".join(reasons) or "none"


def verdict_text(row: dict) -> str:
    """`ok`, `fail:a,b;unknown:c;warn:d`, `unjudged` (no verdict: the checks did not run) or `gone`."""
    if row.get("gone"):
        return "gone"
    verdict = row.get("verdict")
    if verdict is None:
        return "unjudged"
    return ";".join(f"{status}:{','.join(ids)}" for status, ids in verdict.items()) or "ok"


@dataclass(frozen=True)
class Column:
    """One column of the live view: its name, unit, how its cell is read, its width and alignment."""
    name: str
    unit: str
    get: Callable[[dict], Optional[str]]
    width: int = 0  # at least; the name and unit widen it
    left: bool = False  # text, aligned left; numbers right

    @property
    def size(self) -> int:
        return max(self.width, len(self.name), len(self.unit))

    def cell(self, row: dict) -> str:
        value = self.get(row)
        text = UNSUPPORTED if value is None or value == "" else value.replace(" ", "_")
        return text.ljust(self.size) if self.left else text.rjust(self.size)


COLUMNS = (
    Column("gpu", "Idx", _text("index"), 3),
    Column("bus", "ID", _text("pci_bus_id"), 12, left=True),
    Column("pwr", "W", _number("power_watts"), 4),
    Column("plim", "W", _number("power_limit_watts"), 4),
    Column("gtemp", "C", _number("gpu_temperature_celsius")),
    Column("mtemp", "C", _number("memory_temperature_celsius")),
    Column("pclk", "MHz", _number("sm_clock_mhz"), 4),
    Column("mclk", "MHz", _number("memory_clock_mhz"), 4),
    Column("sm", "%", _number("gpu_utilization_percent"), 3),
    Column("mem", "%", _number("memory_utilization_percent"), 3),
    Column("fb", "MiB", _number("memory_used_bytes", MiB), 6),
    Column("sbecc", "errs", _number("ecc_corrected")),
    Column("dbecc", "errs", _number("ecc_uncorrected")),
    Column("remap", "rows/pg", _number("retired")),
    Column("pcig", "gen", _number("pcie_generation")),
    Column("pciw", "lanes", _number("pcie_width")),
    Column("thrtl", "reasons", throttle_text, 8, left=True),
    Column("verdict", "checks", verdict_text, left=True),
)
TIME = Column("Time", "HH:MM:SS", lambda row: row.get("_time"), 8, left=True)


def header_lines(columns: tuple[Column, ...] = (TIME, *COLUMNS)) -> list[str]:
    """The two `#` lines: names, then units (as dmon's `#Time  gpu …` and `#HH:MM:SS  Idx …` with -o T)."""
    names = " ".join(c.name.ljust(c.size) if c.left else c.name.rjust(c.size) for c in columns)
    units = " ".join(c.unit.ljust(c.size) if c.left else c.unit.rjust(c.size) for c in columns)
    return [("#" + names).rstrip(), ("#" + units).rstrip()]


def row_line(row: dict, columns: tuple[Column, ...] = (TIME, *COLUMNS)) -> str:
    """One GPU's line, a space first where the header has its `#`."""
    return (" " + " ".join(c.cell(row) for c in columns)).rstrip()


def sample_lines(rows: list[dict], taken_at: float) -> list[str]:
    """One line per GPU of a sample read at `taken_at` (Unix time; printed as local HH:MM:SS, as dmon does)."""
    clock = time.strftime("%H:%M:%S", time.localtime(taken_at))
    return [row_line({**row, "_time": clock}) for row in rows]
