"""A family's alert rules live in a rule file of their own (monitoring/prometheus/gpudiag-alerts-<family>.yml, its
promtool tests beside it in .test.yml) and everything that loads the alerts finds it by name (tools/alert_rules.py):
the PrometheusRule generator, the alert reference, the test Prometheus setups (issue 34, item 2)."""

from __future__ import annotations

from tools import alert_rules
from tools.alert_rules import alert_rule_files

CORE = "groups:\n  - name: core\n    rules:\n      - alert: GpudiagCore\n        expr: vector(1)\n"
TOY = "groups:\n  - name: toy\n    rules:\n      - alert: GpudiagToyDown\n        expr: vector(1)\n"


def test_a_family_rule_file_is_found_by_its_name_and_its_unit_tests_are_not_rules(tmp_path):
    (tmp_path / "gpudiag-alerts.yml").write_text(CORE)
    (tmp_path / "gpudiag-alerts-toy.yml").write_text(TOY)
    (tmp_path / "gpudiag-alerts-toy.test.yml").write_text("tests: []\n")
    (tmp_path / "gpudiag-fleet-rules.yml").write_text("groups: []\n")
    assert [p.name for p in alert_rule_files(tmp_path)] == ["gpudiag-alerts.yml", "gpudiag-alerts-toy.yml"]
    assert [p.name for p in alert_rules.alert_test_files(tmp_path)] == ["gpudiag-alerts.test.yml",
                                                                        "gpudiag-alerts-toy.test.yml"]
    assert [g["name"] for g in alert_rules.alert_groups(tmp_path)] == ["core", "toy"]


def test_the_prometheusrule_and_the_alert_reference_load_every_rule_file(monkeypatch, tmp_path):
    from tests.support.tools import load_tool

    (tmp_path / "gpudiag-alerts.yml").write_text(CORE)
    (tmp_path / "gpudiag-alerts-toy.yml").write_text(TOY)
    generator = load_tool("gen_prometheusrule")
    monkeypatch.setattr(generator, "alert_groups", lambda: alert_rules.alert_groups(tmp_path))
    assert "GpudiagToyDown" in generator.render()
    assert set(alert_rule_files()) <= set(load_tool("alert_docs").RULE_FILES)

