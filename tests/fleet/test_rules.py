"""monitoring/prometheus/gpudiag-fleet-rules.yml: valid, unit-tested with promtool, on gpudiag's own metric names."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from gpudiag.exporter import metric_modules
from tests.support.paths import REPO

RULES_DIR = REPO / "monitoring" / "prometheus"
RULES = RULES_DIR / "gpudiag-fleet-rules.yml"
RULE_TESTS = RULES_DIR / "gpudiag-fleet-rules.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


@needs_promtool
def test_fleet_rules_are_valid_and_pass_their_unit_tests():
    for args in (("check", "rules", str(RULES)), ("test", "rules", str(RULE_TESTS))):
        result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_fleet_alert_fires_in_a_unit_test_and_stays_quiet_in_another():
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    cases = [
        case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test.get("alert_rule_test", [])
    ]
    assert alerts == {c["alertname"] for c in cases if c["exp_alerts"]} == {c["alertname"] for c in cases
                                                                             if not c["exp_alerts"]}
    assert alerts == {"GpudiagFleetDriverSkew", "GpudiagFleetCopyBandwidthBelowMedian"}


def test_fleet_rules_use_only_metrics_gpudiag_exports_and_their_own_records():
    records = {rule["record"] for rule in _rules() if "record" in rule}
    used = {name for rule in _rules() for name in re.findall(r"\bgpudiag[_:][a-z0-9_:]+", rule["expr"])}
    assert used - records - set(metric_modules.all_metrics()) == set()
    assert all(re.fullmatch(r"gpudiag:[a-z0-9_]+:[a-z0-9_]+", name) for name in records)  # level:metric:operations
