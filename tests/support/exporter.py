"""Helpers for the exporter tests: reading the Prometheus text format back, and waiting for a condition."""

from __future__ import annotations

import time
from typing import Callable, Optional

from prometheus_client.parser import text_string_to_metric_families

Labels = dict[str, str]


def parse(text: str) -> list[tuple[str, Labels, float]]:
    """Every sample as (name, labels, value), through prometheus_client's own parser (so a malformed body fails)."""
    return [
        (s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text) for s in family.samples
    ]


def series(text: str, name: str, **match: str) -> list[tuple[Labels, float]]:
    """Samples of `name` whose labels include `match`."""
    return [(labels, value) for sample, labels, value in parse(text)
            if sample == name and all(labels.get(k) == v for k, v in match.items())]


def value(text: str, name: str, **match: str) -> Optional[float]:
    """The one sample of `name` matching `match`, or None when there is none; two matches is a test error."""
    found = series(text, name, **match)
    assert len(found) <= 1, f"{name}{match} matches {len(found)} series: {found}"
    return found[0][1] if found else None


def names(text: str) -> set[str]:
    return {sample for sample, _, _ in parse(text)}


def wait_for(condition: Callable[[], object], timeout: float = 5.0, interval: float = 0.02) -> object:
    """Poll until `condition()` is truthy; returns its value, or fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)
