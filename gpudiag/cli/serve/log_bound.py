"""A bound on how often one thing is told, so that a flapping state cannot flood the journal.

Each key (one GPU, one check on one GPU, the journal file, the TLS certificate) may have PER_WINDOW lines in a
window of WINDOW_SECONDS that starts with its first line. Past that its lines are held back and counted, the latest
kept: when the window ends, that latest line is told with `suppressed=K`, the number of lines of the key that were
not told (it among them), so the journal always ends on the state as it is. A state change is told once anyway
(gpudiag/cli/serve/changes.py); the bound is for one that changes back and forth, collection after collection: at the
default 15 s interval a GPU that drops and returns every other collection makes 4 lines and one summary every 5
minutes, not 20.

For records logged elsewhere, `extra={"bound": KEY}` puts them under the same bound through BoundFilter; their
count of held-back lines goes onto the next line of the key that is told (a filter cannot write a line of its own).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Hashable, Optional

PER_WINDOW = 4
WINDOW_SECONDS = 300.0
MAX_KEYS = 10_000  # keys are GPUs, checks × GPUs and a few files: bounded by the node, and by this all the same


@dataclass
class _Window:
    """One key's rate window: when it began, lines told and held back, the latest held."""
    started: float
    told: int = 1
    held: int = 0
    latest: object = None  # the latest line held back


class RateBound:
    def __init__(self, per_window: int = PER_WINDOW, window_seconds: float = WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.per_window = per_window
        self.window_seconds = window_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[Hashable, _Window] = {}

    def admit(self, key: Hashable, line: object = None) -> Optional[int]:
        """None: hold `line` back (it is counted, and kept as the key's latest); else tell it, and the number is
        how many lines of the key were held back before it."""
        with self._lock:
            now = self._clock()
            window = self._windows.get(key)
            if window is None or now - window.started >= self.window_seconds:
                if window is None and len(self._windows) >= MAX_KEYS:
                    self._forget_quiet(now)
                self._windows[key] = _Window(now)
                return window.held if window is not None else 0
            if window.told < self.per_window:
                window.told += 1
                return 0
            window.held += 1
            window.latest = line
            return None

    def due(self) -> list[tuple[Hashable, object, int]]:
        """(key, its latest line held back, how many were held back) for every key whose window has ended with
        lines held back; each such line starts the key's next window. Keys whose window ended quietly are
        forgotten."""
        with self._lock:
            now = self._clock()
            out = []
            for key, window in list(self._windows.items()):
                if now - window.started < self.window_seconds:
                    continue
                if window.held:
                    out.append((key, window.latest, window.held))
                    self._windows[key] = _Window(now)
                else:
                    del self._windows[key]
            return out

    def _forget_quiet(self, now: float) -> None:
        for key, window in list(self._windows.items()):
            if now - window.started >= self.window_seconds and not window.held:
                del self._windows[key]
        while len(self._windows) >= MAX_KEYS:  # every key busy: the oldest window goes
            del self._windows[min(self._windows, key=lambda k: self._windows[k].started)]


class BoundFilter(logging.Filter):
    """Holds back records with a `bound` key past the key's rate; the next one told carries `suppressed`."""

    def __init__(self, bound: Optional[RateBound] = None):
        super().__init__()
        self.bound = bound or RateBound()

    def filter(self, record: logging.LogRecord) -> bool:
        key = getattr(record, "bound", None)
        if key is None:
            return True
        held = self.bound.admit(key)
        if held is None:
            return False
        if held:
            record.suppressed = held
        return True
