"""Time compression for the shipped alerting: the rule files, their promtool tests and the Alertmanager example with
every duration divided by one factor, so that a real Prometheus and Alertmanager run their 15-minute alerts in seconds
(tests/e2e/test_alerting.py). The transformation is tested (tests/e2e/test_rule_scaling.py): the promtool suite passes
on the scaled rules with its own times scaled alike, and fails on scaled rules with unscaled times.

Scaled: `for`, `keep_firing_for`, range selectors and subqueries (`[10m]`, `[6h:5m]`), `offset`; in promtool tests
`evaluation_interval`, `interval` and `eval_time`; in an Alertmanager configuration `group_wait`, `group_interval`,
`repeat_interval` and `resolve_timeout`. Values and thresholds are not durations and stay. An expression that
compares with time() (a number of seconds that no duration literal shows) cannot be scaled: it is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# Prometheus durations (model.ParseDuration): units from years down to milliseconds, largest first.
_UNITS_MS = {"y": 365 * 86_400_000, "w": 7 * 86_400_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000,
             "ms": 1}
_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_DURATION = r"(?:\d+(?:ms|y|w|d|h|m|s))+"
_RANGE = re.compile(rf"\[\s*({_DURATION})\s*(?::\s*({_DURATION})?\s*)?\]")
_OFFSET = re.compile(rf"\boffset\s+(-?)({_DURATION})")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')


def parse_ms(duration: str) -> int:
    position, total = 0, 0
    for match in _PART.finditer(duration):
        if match.start() != position:
            break
        total += int(match.group(1)) * _UNITS_MS[match.group(2)]
        position = match.end()
    if position != len(duration) or not duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return total


def format_ms(ms: int) -> str:
    """The shortest spelling in one unit: 30000 → "30s", 1500 → "1500ms", 0 → "0s"."""
    if ms == 0:
        return "0s"
    for unit in ("h", "m", "s", "ms"):
        if ms % _UNITS_MS[unit] == 0:
            return f"{ms // _UNITS_MS[unit]}{unit}"
    raise AssertionError("unreachable: every integer is a whole number of ms")


def scale_duration(duration: str, factor: int) -> str:
    ms = parse_ms(duration)
    if ms % factor:
        raise ValueError(f"{duration} is not a whole number of milliseconds once divided by {factor}")
    return format_ms(ms // factor)


def scale_expr(expr: str, factor: int) -> str:
    """The PromQL expression with its range, subquery and offset durations divided by `factor` (strings kept)."""
    if re.search(r"\btime\s*\(", _STRING.sub('""', expr)):
        raise ValueError(f"compares with time() in seconds, which no duration shows: {expr!r}")

    def ranges(match: re.Match) -> str:
        step = match.group(2)
        if ":" not in match.group(0):
            return f"[{scale_duration(match.group(1), factor)}]"
        return f"[{scale_duration(match.group(1), factor)}:{scale_duration(step, factor) if step else ''}]"

    def offsets(match: re.Match) -> str:
        return f"offset {match.group(1)}{scale_duration(match.group(2), factor)}"

    pieces, last = [], 0
    for string in _STRING.finditer(expr):
        pieces.append(_OFFSET.sub(offsets, _RANGE.sub(ranges, expr[last:string.start()])))
        pieces.append(string.group(0))
        last = string.end()
    pieces.append(_OFFSET.sub(offsets, _RANGE.sub(ranges, expr[last:])))
    return "".join(pieces)


def scale_rules(document: dict, factor: int) -> dict:
    """A rule file (its parsed YAML) with every rule's durations divided by `factor`."""
    groups = []
    for group in document["groups"]:
        group = dict(group)
        if "interval" in group:
            group["interval"] = scale_duration(group["interval"], factor)
        rules = []
        for rule in group["rules"]:
            rule = dict(rule, expr=scale_expr(rule["expr"], factor))
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = scale_duration(rule[key], factor)
            rules.append(rule)
        group["rules"] = rules
        groups.append(group)
    return {**document, "groups": groups}


def scale_rule_tests(document: dict, factor: int, rule_files: list[str]) -> dict:
    """A promtool test file with its times divided by `factor`, reading `rule_files` (the scaled rules)."""
    scaled: dict[str, Any] = dict(document, rule_files=rule_files)
    if "evaluation_interval" in scaled:
        scaled["evaluation_interval"] = scale_duration(scaled["evaluation_interval"], factor)
    tests = []
    for test in document["tests"]:
        test = dict(test)
        if "interval" in test:
            test["interval"] = scale_duration(test["interval"], factor)
        for key in ("alert_rule_test", "promql_expr_test"):
            if key in test:
                test[key] = [dict(case, eval_time=scale_duration(case["eval_time"], factor),
                                  **({"expr": scale_expr(case["expr"], factor)} if "expr" in case else {}))
                             for case in test[key]]
        tests.append(test)
    scaled["tests"] = tests
    return scaled


_ALERTMANAGER_TIMES = ("group_wait", "group_interval", "repeat_interval")


def scale_alertmanager(document: dict, factor: int) -> dict:
    """An Alertmanager configuration with its route timings (every route) and resolve_timeout divided by `factor`."""

    def route(node: dict) -> dict:
        node = {key: scale_duration(value, factor) if key in _ALERTMANAGER_TIMES else value
                for key, value in node.items()}
        if "routes" in node:
            node["routes"] = [route(child) for child in node["routes"]]
        return node

    scaled = dict(document, route=route(document["route"]))
    if "resolve_timeout" in scaled.get("global", {}):
        scaled["global"] = dict(scaled["global"],
                                resolve_timeout=scale_duration(scaled["global"]["resolve_timeout"], factor))
    return scaled


def write_scaled_rules(source: Path, directory: Path, factor: int) -> Path:
    import yaml

    target = directory / source.name
    target.write_text(yaml.safe_dump(scale_rules(yaml.safe_load(source.read_text()), factor), sort_keys=False))
    return target
