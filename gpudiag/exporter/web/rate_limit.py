"""`rate_limit` of an exporter-toolkit web config: a token bucket over every request, as the toolkit's handler runs
golang.org/x/time/rate (web/handler.go: rate.NewLimiter(rate.Every(interval), burst), Allow() or 429).

One token is added every `interval`, up to `burst`; the bucket starts full; a request takes one or is answered
429 Too Many Requests. As in x/time/rate, a burst of 0 allows nothing, and an interval of 0 (or none) turns the
limit off.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Optional

from gpudiag.exporter.web.errors import WebConfigError

# Go's time.ParseDuration units, in seconds
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(value: Any, what: str) -> float:
    """Seconds from a Go duration as yaml.v2 decodes it: a string ("1s", "1m30s", "250ms") or an integer, which
    is nanoseconds."""
    if isinstance(value, bool) or value is None:
        raise WebConfigError(f"{what}: expected a duration such as 1s or 250ms")
    if isinstance(value, int):
        return value * 1e-9
    text = str(value).strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    seconds, pos = 0.0, 0
    while pos < len(body):
        match = _PART.match(body, pos)
        if not match:
            raise WebConfigError(f"{what}: {text!r} is not a duration such as 1s or 250ms")
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body:
        raise WebConfigError(f"{what}: {text!r} is not a duration such as 1s or 250ms")
    return sign * seconds


class TokenBucket:
    def __init__(self, interval_seconds: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.interval = interval_seconds
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()
        self.refused = 0

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) / self.interval)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            self.refused += 1
            return False


def parse_rate_limit(section: Any) -> Optional[TokenBucket]:
    if section is None:
        return None
    if not isinstance(section, dict):
        raise WebConfigError("rate_limit must be a mapping")
    unknown = sorted(str(k) for k in section if k not in ("interval", "burst"))
    if unknown:
        raise WebConfigError(f"unknown setting rate_limit.{unknown[0]} (known: burst, interval)")
    burst = section.get("burst", 0)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        raise WebConfigError("rate_limit.burst must be a whole number, 0 or more")
    interval = parse_go_duration(section.get("interval", 0), "rate_limit.interval")
    if interval <= 0:  # the toolkit: Interval 0 is no limiter; a negative one is rate.Inf, no limit either
        return None
    return TokenBucket(interval, burst)
