"""contrib/kubernetes: the DaemonSet's probes, and the PodMonitor and PrometheusRule shipped with it. kubernetes-
validate knows built-in kinds only, so the two Prometheus Operator resources are validated against the operator's
own CRD schemas (tests/fixtures/prometheus-operator, with its licence), and the PrometheusRule is checked to carry
exactly the rules of monitoring/prometheus/gpudiag-alerts*.yml (tools/gen_prometheusrule.py writes it)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES, REPO

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

from gpudiag.exporter.web.http_server import PATHS  # noqa: E402
from tests.support.tools import load_tool  # noqa: E402
from tools.alert_rules import alert_groups  # noqa: E402

KUBE = REPO / "contrib" / "kubernetes"
CRDS = FIXTURES / "prometheus-operator"


def _load(path: Path) -> list[dict]:
    return list(yaml.safe_load_all(path.read_text()))


def _daemonset() -> dict:
    return next(d for d in _load(KUBE / "gpudiag-exporter.yaml") if d["kind"] == "DaemonSet")


def _validator(crd_file: str, kind: str):
    crd = yaml.safe_load((CRDS / crd_file).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    return f"{crd['spec']['group']}/{version['name']}", jsonschema.Draft7Validator(
        version["schema"]["openAPIV3Schema"])


def _errors(validator, document: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_probes_liveness_on_livez_readiness_on_healthz():
    (container,) = _daemonset()["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"/livez", "/healthz"} <= set(PATHS)  # routes the exporter serves


def test_podmonitor_matches_the_crd_and_the_daemonset():
    api_version, validator = _validator("monitoring.coreos.com_podmonitors.yaml", "PodMonitor")
    (monitor,) = _load(KUBE / "gpudiag-podmonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == (api_version, "PodMonitor")
    assert _errors(validator, monitor) == []
    daemonset = _daemonset()
    assert monitor["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    ports = {p["name"] for p in container["ports"]}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] in PATHS


def test_the_schema_check_is_not_vacuous():
    _, validator = _validator("monitoring.coreos.com_podmonitors.yaml", "PodMonitor")
    (monitor,) = _load(KUBE / "gpudiag-podmonitor.yaml")
    broken = copy.deepcopy(monitor)
    broken["spec"]["podMetricsEndpoints"] = {"port": "metrics"}  # a mapping where a list belongs
    del broken["spec"]["selector"]
    assert len(_errors(validator, broken)) >= 2


def test_prometheusrule_matches_the_crd_and_carries_the_alert_file():
    api_version, validator = _validator("monitoring.coreos.com_prometheusrules.yaml", "PrometheusRule")
    (rule,) = _load(KUBE / "gpudiag-prometheusrule.yaml")
    assert (rule["apiVersion"], rule["kind"]) == (api_version, "PrometheusRule")
    assert _errors(validator, rule) == []
    assert rule["metadata"]["namespace"] == _daemonset()["metadata"]["namespace"]
    assert rule["spec"]["groups"] == alert_groups()  # the core rules and each family's


def test_prometheusrule_is_what_the_generator_writes():
    generator = load_tool("gen_prometheusrule")
    assert (KUBE / "gpudiag-prometheusrule.yaml").read_text() == generator.render(), (
        "run python3 tools/gen_prometheusrule.py")
