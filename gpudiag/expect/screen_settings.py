"""The settings of the `screen` family (its profile keys): how often every GPU must be proven correct by an idle-time
screen, how long a GPU must have been free of jobs before one starts, how many GPUs a screen loads at once, and how
much of a GPU's memory a screen may hold. docs/screening.md says why each default is what it is.

`screen_every` and `screen_idle_after` are the names docs/architecture.md gives the policy; their values are
durations: "7d", "10m", "90s", "12h", "2w", or plain seconds ("600"). `gpudiag screen` takes each as a flag too
(--every, --idle-after, --max-gpus), which wins over the profile.
"""

from __future__ import annotations

import re
from gpudiag.model.records import dataclass
from typing import Any

from gpudiag.expect import ExpectationError  # defined before this module is found

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION_SECONDS = 366 * 86400.0  # a year: anything longer is a typo, not a screening policy


def duration_seconds(text: str) -> float:
    """"7d" → 604800.0; ValueError (one line) for anything that is not a duration in range."""
    found = _DURATION.match(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 7d, 12h, 10m, 90s, or seconds)")
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is longer than a year")
    return seconds


@dataclass(frozen=True)
class ScreenSettings:
    """When and how the idle GPUs are screened (gpudiag screen, gpudiag-screen.timer)."""

    # Every GPU is proven correct by a verified screen at least this often. A week: SemiAnalysis' ClusterMAX rating
    # expects "weekly scheduled active health checks on idle nodes"; a screen costs about a minute of one idle GPU.
    screen_every: str = "7d"
    # A GPU is screened only when no job has held it for this long (its processes, its utilisation, a scheduler's
    # `gpudiag screen --stop`): a GPU between two steps of a pipeline or two jobs of an array is not idle.
    screen_idle_after: str = "10m"
    # GPUs screened at once. One keeps a screen's power draw to one GPU's (700 W on an H100 SXM) and leaves the
    # others free for a job; 8 screens a whole HGX node at once, as a job would load it (shared power and cooling).
    screen_max_gpus: int = 1
    # How long the verified stress of a screen runs: the 30 s of `check --level 2`, which verifies ~600 launches.
    screen_stress_seconds: float = 30.0
    # The share of a GPU's memory a screen may hold at any moment, its own context included: a job that starts
    # while a screen still runs can take 90 % of the memory plus its context (docs/screening.md "What a screen
    # costs"). 5 % is 4 GB of an 80 GB H100, 7 GB of a 141 GB H200.
    screen_memory_fraction: float = 0.05

    def __post_init__(self) -> None:
        for name in ("screen_every", "screen_idle_after"):
            try:
                duration_seconds(getattr(self, name))
            except ValueError as exc:
                raise ExpectationError(name, str(exc)) from None
        if duration_seconds(self.screen_every) <= 0:
            raise ExpectationError("screen_every", "must be above 0")
        if not 1 <= self.screen_max_gpus <= 64:
            raise ExpectationError("screen_max_gpus", f"must be 1-64, got {self.screen_max_gpus!r}")
        if not 1 <= self.screen_stress_seconds <= 3600:
            raise ExpectationError("screen_stress_seconds", f"must be 1-3600 s, got {self.screen_stress_seconds!r}")
        if not 0.01 <= self.screen_memory_fraction <= 0.5:
            raise ExpectationError("screen_memory_fraction",
                                   f"must be in [0.01, 0.5], got {self.screen_memory_fraction!r}")

    @property
    def every_seconds(self) -> float:
        return duration_seconds(self.screen_every)

    @property
    def idle_after_seconds(self) -> float:
        return duration_seconds(self.screen_idle_after)


SETTINGS = ScreenSettings  # what gpudiag/expect/__init__.py looks for


def settings_of(expect: Any) -> ScreenSettings:
    """The family's settings as an Expectations carries them (a ScreenSettings given as it is: the tests' way)."""
    return expect if isinstance(expect, ScreenSettings) else expect.of(ScreenSettings)
