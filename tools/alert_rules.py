"""The alert rule files: the core monitoring/prometheus/gpudiag-alerts.yml and one file per family that has alerts of
its own, gpudiag-alerts-<family>.yml (with its promtool unit tests in gpudiag-alerts-<family>.test.yml), found by
their names. Everything that loads the alerts (the PrometheusRule generator, the alert reference, the test
Prometheus and Alertmanager setups) loads all of them through here, so a family adds its alerts without editing a
central file (issue 34, item 2). Prometheus itself takes them with `rule_files: [gpudiag-alerts.yml,
gpudiag-alerts-*.yml]` (a glob; the unit-test files end in .test.yml and are left out by name)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS = REPO / "monitoring" / "prometheus"
CORE = "gpudiag-alerts.yml"


def alert_rule_files(directory: Path = PROMETHEUS) -> list[Path]:
    """The core rule file first, then each family's, in name order."""
    families = sorted(path for path in directory.glob("gpudiag-alerts-*.yml") if not path.name.endswith(".test.yml"))
    return [directory / CORE, *families]


def alert_test_files(directory: Path = PROMETHEUS) -> list[Path]:
    """The promtool unit tests of each rule file (gpudiag-alerts.test.yml, gpudiag-alerts-<family>.test.yml)."""
    return [path.with_suffix(".test.yml") for path in alert_rule_files(directory)]


def alert_groups(directory: Path = PROMETHEUS) -> list[dict]:
    """Every rule group of every alert rule file, in file order."""
    import yaml

    return [group for path in alert_rule_files(directory) for group in yaml.safe_load(path.read_text())["groups"]]
