"""How long the rest of a load-test run should take: the estimate the progress lines end with ("about 1 min 5 s
left").

A run is a sequence of phases (the host copies one GPU at a time, the GPU pairs, then the HBM copy, the memory test
and the stress on every GPU at once). Each phase starts with a planned duration worked out from what it will move
at a deliberately slow pace (PACES: the figure is an upper estimate until measured), and is re-estimated from its
own pace as it goes: a phase `fraction` done after `t` seconds takes t / fraction in all (the slowest GPU's, for the
phases all GPUs run at once). What is left is the current phase's rest plus the planned durations of the phases after
it, never past the run's deadline.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

# Slow paces for the first estimate, in bytes a second: a host copy or a peer copy over PCIe Gen4 x16 carries about
# 25 GB/s (Gen5 and NVLink/XGMI much more), an HBM copy kernel on an H100/H200/MI300X more than 1 TB/s, the memory
# test's fill and check kernels (each a sweep over the memory) several hundred GB/s.
PACES = {"copy": 20e9, "hbm": 1000e9, "memtest": 500e9}
STRESS_OVERHEAD_SECONDS = 2.0  # the kernel's calibration launch and the last samples around the stress itself


class Remaining:
    """The phases of one run and how far each has come; safe to update from the test threads."""

    def __init__(self, until: Optional[float] = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._until, self._clock = until, clock
        self._planned: dict[str, float] = {}
        self._order: list[str] = []
        self._current: Optional[str] = None
        self._began = 0.0
        self._estimate = 0.0  # the current phase's whole duration, as now estimated
        self._measured: dict[object, float] = {}  # of the current phase: each GPU's own estimate of it
        self._lock = threading.Lock()

    def plan(self, phases: list[tuple[str, float]]) -> None:
        """(name, planned seconds) of every phase to come, in order."""
        with self._lock:
            self._planned = dict(phases)
            self._order = [name for name, _ in phases]

    def begin(self, name: str) -> None:
        with self._lock:
            if name in self._planned:
                self._current, self._began, self._estimate = name, self._clock(), self._planned[name]
                self._measured = {}

    def advance(self, name: str, fraction: float, key: object = None) -> None:
        """`name` is `fraction` done: of `key`'s share (a GPU's) for a phase the GPUs run at once, where the slowest
        GPU decides."""
        with self._lock:
            if name != self._current or not 0 < fraction <= 1:
                return
            self._measured[key] = (self._clock() - self._began) / fraction
            self._estimate = max(self._measured.values())

    def expect(self, name: str, seconds: float, key: object = None) -> None:
        """`key`'s share of `name` is to last `seconds` more (a stress planned for its length)."""
        with self._lock:
            if name == self._current:
                self._measured[key] = (self._clock() - self._began) + seconds
                self._estimate = max(self._measured.values())

    def seconds_left(self) -> Optional[float]:
        """What is left of the run, or None before it is planned."""
        with self._lock:
            if not self._order:
                return None
            now = self._clock()
            later = self._order[self._order.index(self._current) + 1:] if self._current in self._order else self._order
            left = sum(self._planned[name] for name in later)
            if self._current is not None:
                left += max(0.0, self._estimate - (now - self._began))
            if self._until is not None:
                left = min(left, max(0.0, self._until - now))
            return left


def human(seconds: float) -> str:
    """`45 s`, `3 min 20 s`, `1 h 5 min`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s" if seconds % 60 else f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
