"""The `--level 2|3` progress lines end with an estimate of the time left (issue 27, item 6): active/eta.py over a
fake clock, and a whole run over the fake CUDA runtime (tests/support/fakes/libcuda.py)."""

from __future__ import annotations

import io
import re
import time

import pytest

from gpudiag.active import run_active
from gpudiag.active.eta import Remaining, human
from tests.support.active import fast_options, idle_device, install_cuda, sim_devices, snapshot_of

LEFT = re.compile(r" \(about (?:(\d+) h )?(?:(\d+) min ?)?(?:(\d+) s)? left\)$")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_what_is_left_is_the_current_phase_as_measured_and_the_later_ones_as_planned():
    clock = Clock()
    remaining = Remaining(clock=clock)
    assert remaining.seconds_left() is None  # before the run is planned: no estimate, no suffix
    remaining.plan([("pcie", 10.0), ("memtest", 20.0), ("stress", 30.0)])
    assert remaining.seconds_left() == 60.0
    remaining.begin("pcie")
    clock.now += 4
    assert remaining.seconds_left() == 56.0
    remaining.advance("pcie", 0.25)  # a quarter in 4 s: 16 s in all, 12 s more
    assert remaining.seconds_left() == 62.0
    clock.now += 20
    assert remaining.seconds_left() == 50.0  # late: the phase is taken as ending now, never below zero
    remaining.begin("memtest")
    clock.now += 5
    remaining.advance("memtest", 0.5, key=0)
    remaining.advance("memtest", 0.25, key=1)  # the slower GPU decides: 20 s in all
    assert remaining.seconds_left() == 45.0
    remaining.begin("stress")
    remaining.expect("stress", 31.0, key=0)
    assert remaining.seconds_left() == 31.0


def test_the_deadline_bounds_the_estimate():
    clock = Clock()
    remaining = Remaining(until=clock.now + 25, clock=clock)
    remaining.plan([("stress", 600.0)])
    assert remaining.seconds_left() == 25.0
    clock.now += 30
    assert remaining.seconds_left() == 0.0


@pytest.mark.parametrize("seconds, said", [(0.4, "0 s"), (45, "45 s"), (60, "1 min"), (200, "3 min 20 s"),
                                           (3900, "1 h 5 min")])
def test_times_are_said_as_an_operator_reads_them(seconds, said):
    assert human(seconds) == said


class Timed(io.StringIO):
    """A progress stream that notes when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.lines += [(time.monotonic(), line) for line in text.splitlines()]
        return super().write(text)


def _seconds(line: str) -> float:
    hours, minutes, seconds = LEFT.search(line).groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)


@pytest.mark.slow
def test_every_line_of_a_run_says_what_is_left_and_the_stress_lines_are_near_the_truth(monkeypatch):
    install_cuda(monkeypatch, sim_devices(2))
    stream = Timed()
    options = fast_options(progress=stream, stress_seconds=2.0, progress_interval_seconds=0.5, deadline_seconds=60)
    started = time.monotonic()
    results = run_active(snapshot_of(idle_device(0), idle_device(1)), options)
    ended = time.monotonic()
    assert all(d.stress is not None and d.stress.error is None for d in results.devices)
    lines = stream.lines
    assert len(lines) > 8 and all(LEFT.search(line) for _, line in lines), [line for _, line in lines]
    assert _seconds(lines[0][1]) >= 2  # the stress lies ahead: the first estimate counts it
    assert _seconds(lines[0][1]) <= 60 - (lines[0][0] - started) + 1  # and never past the deadline
    stress = [(at, line) for at, line in lines if ": stress " in line and "done" not in line]
    assert stress, [line for _, line in lines]
    for at, line in stress:  # the stress's own plan: no less than what was really left, no more than 3 s beyond
        assert ended - at - 1.5 <= _seconds(line) <= ended - at + 3.5, (line, ended - at)
