"""The time compression tests/e2e/test_alerting.py runs the shipped alerting under (tests/support/rule_scaling.py):
exact on the literals, and faithful on the rules as a whole, since the promtool suite of the shipped rules passes at
every scale on the scaled rules with its times scaled alike, and fails when only the rules are scaled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.rule_scaling import (
    parse_ms,
    scale_alertmanager,
    scale_duration,
    scale_expr,
    scale_rule_tests,
    scale_rules,
    write_scaled_rules,
)
from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # end to end: real servers and processes (tests/README.md)

PROMETHEUS_DIR = REPO / "monitoring" / "prometheus"
ALERTMANAGER = REPO / "monitoring" / "alertmanager" / "gpudiag-alertmanager.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")


@pytest.mark.parametrize("duration, factor, scaled", [
    ("10m", 20, "30s"), ("15m", 20, "45s"), ("30s", 20, "1500ms"), ("6h", 20, "18m"), ("1h30m", 30, "3m"),
    ("4h", 20, "12m"), ("1m", 60, "1s"), ("0s", 20, "0s"), ("2d", 48, "1h"),
])
def test_durations_are_divided_exactly(duration, factor, scaled):
    assert scale_duration(duration, factor) == scaled
    assert parse_ms(scaled) * factor == parse_ms(duration)


@pytest.mark.parametrize("duration, factor", [("1ms", 20), ("10m", 7), ("ten", 2), ("5", 2), ("5m3", 2)])
def test_a_duration_that_does_not_divide_or_parse_is_refused(duration, factor):
    with pytest.raises(ValueError):
        scale_duration(duration, factor)


@pytest.mark.parametrize("expr, scaled", [
    ("increase(x[10m]) > 0 or (x unless x offset 10m)", "increase(x[30s]) > 0 or (x unless x offset 30s)"),
    ("max_over_time(count without (gpu) (up)[6h:5m]) > 0.9 * 300", "max_over_time(count without (gpu) (up)[18m:15s]) > "
                                                                   "0.9 * 300"),
    ("max_over_time(rate(x[5m])[1h:])", "max_over_time(rate(x[15s])[3m:])"),
    ('x{kind="[10m]", code=~"46|48"}[2m] offset -1m', 'x{kind="[10m]", code=~"46|48"}[6s] offset -3s'),
    ("changes(y[ 5m ])", "changes(y[15s])"),
])
def test_expressions_scale_their_ranges_subqueries_and_offsets_and_nothing_else(expr, scaled):
    assert scale_expr(expr, 20) == scaled


def test_an_expression_on_time_in_seconds_is_refused():
    with pytest.raises(ValueError, match="time"):
        scale_expr("time() - gpudiag_last_collection_timestamp_seconds > 300", 20)
    assert scale_expr('x{name="time()"}', 20) == 'x{name="time()"}'  # a string is no call


def test_the_shipped_rules_scale_with_every_duration_divided():
    rules = yaml.safe_load((PROMETHEUS_DIR / "gpudiag-alerts.yml").read_text())
    scaled = scale_rules(rules, 20)
    for group, scaled_group in zip(rules["groups"], scaled["groups"]):
        for rule, scaled_rule in zip(group["rules"], scaled_group["rules"]):
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    assert parse_ms(scaled_rule[key]) * 20 == parse_ms(rule[key])
            assert scaled_rule["labels"] == rule["labels"] and scaled_rule["annotations"] == rule["annotations"]
            assert scaled_rule["expr"].count("[") == rule["expr"].count("[")
    assert scaled != rules  # something was scaled


def test_alertmanager_timings_scale_on_every_route():
    config = {"global": {"resolve_timeout": "5m"},
              "route": {"receiver": "a", "group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h",
                        "routes": [{"receiver": "b", "group_wait": "10s", "matchers": ['severity="critical"']}]}}
    scaled = scale_alertmanager(config, 20)
    assert scaled["global"]["resolve_timeout"] == "15s"
    assert (scaled["route"]["group_wait"], scaled["route"]["group_interval"], scaled["route"]["repeat_interval"]) == (
        "1500ms", "15s", "12m")
    assert scaled["route"]["routes"][0] == {"receiver": "b", "group_wait": "500ms", "matchers": ['severity="critical"']}
    shipped = yaml.safe_load(ALERTMANAGER.read_text())
    assert scale_alertmanager(shipped, 20)["inhibit_rules"] == shipped["inhibit_rules"]


def _promtool_at_scale(tmp_path: Path, name: str, factor: int, scale_tests: bool) -> subprocess.CompletedProcess:
    rules = write_scaled_rules(PROMETHEUS_DIR / f"{name}.yml", tmp_path, factor)
    tests = yaml.safe_load((PROMETHEUS_DIR / f"{name}.test.yml").read_text())
    if scale_tests:
        tests = scale_rule_tests(tests, factor, [rules.name])
    else:
        tests = dict(tests, rule_files=[rules.name])
    path = tmp_path / f"{name}.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)


@needs_promtool
@pytest.mark.parametrize("name", ["gpudiag-alerts", "gpudiag-fleet-rules"])
@pytest.mark.parametrize("factor", [15, 20, 60])
def test_the_promtool_suite_passes_on_the_scaled_rules_at_scaled_times(tmp_path, name, factor):
    result = _promtool_at_scale(tmp_path, name, factor, scale_tests=True)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@needs_promtool
def test_scaled_rules_under_unscaled_times_fail_the_suite(tmp_path):
    """The check above is not vacuous: the scaled rules really run on other times (their `for`s end 20 times
    sooner, their windows are 20 times shorter), which the unscaled expectations catch."""
    result = _promtool_at_scale(tmp_path, "gpudiag-alerts", 20, scale_tests=False)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
