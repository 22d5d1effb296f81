"""gpudiag against Prometheus's own tools: promtool lints real /metrics output and tests the alert rules, and a
real Prometheus server (Debian's `prometheus` package) scrapes `gpudiag serve` on loopback and is queried back.

Skipped only when promtool / prometheus are not installed (`apt-get install prometheus` provides both).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request

import bcrypt
import pytest
import yaml

from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter import metric_modules
from gpudiag.exporter.textfile import render_textfile
from gpudiag.exporter.web.config import WebConfig
from gpudiag.probe.collector import CollectOptions, Collector
from tests.support.exporter import wait_for
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.fakes.fake_nvml_events import nvml_events
from tests.support.tools import load_tool
from tools.alert_rules import alert_groups, alert_rule_files, alert_test_files
# free_port, query, start_prometheus and stop are imported from here by other tests too (fleet, GPU-less node).
from tests.support.prometheus import PROMETHEUS, free_port, query, start_prometheus, stop  # noqa: F401
from tests.support.paths import FIXTURES, REPO
from tests.support.snapshots import amd_mi300x_node, cpx_partitioned

pytestmark = pytest.mark.slow  # end to end: real servers and processes (tests/README.md)

DASHBOARD = REPO / "monitoring" / "grafana" / "gpudiag-dashboard.json"
TLS = FIXTURES / "tls"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)"
)

METRIC_NAME = re.compile(r"\b((?:gpudiag|process)_[a-z0-9_]+)\b")
# What prometheus_client's ProcessCollector exports (the exporter's own CPU and memory).
PROCESS_METRICS = {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                   "process_start_time_seconds", "process_open_fds", "process_max_fds"}


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60)


# -- promtool ---------------------------------------------------------------------------------------------------


@needs_promtool
def test_promtool_lints_the_live_metrics_of_a_faulty_node(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].pcie_downtrained(generation=4, width=8).thermal_slowdown()
    tree = fake_root(tmp_path, node)
    with installed(node) as lib:
        collector = Collector(CollectOptions(root=tmp_path, timeout_seconds=2))
        exporter = ServeDaemon("127.0.0.1:0", WebConfig(), collector.collect, 0.1, 2).start()
        try:
            wait_for(lambda: exporter.state.watcher and exporter.state.watcher.status().healthy, timeout=10)
            nvml_events(lib).emit(1, 79)
            tree.add_kmsg([xid_line(9, 9_000_000, "0000:19:00.0", 13)])
            body = wait_for(lambda: (lambda b: b if "gpudiag_gpu_xid_errors_total{" in b else None)(
                urllib.request.urlopen(exporter.url + "/metrics", timeout=5).read().decode()), timeout=10)
        finally:
            exporter.stop()
            collector.close()
    assert "gpudiag_check_ok{" in body and "gpudiag_gpu_throttle_reason_active{" in body
    assert 'gpudiag_gpu_throttle_seconds_total{gpu="0"' in body  # the fake H200's perf-policy counters
    result = promtool("check", "metrics", stdin=body)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_promtool
def test_promtool_lints_the_textfile_of_a_partitioned_amd_node():
    from gpudiag.checks import run_checks

    snapshot = cpx_partitioned(amd_mi300x_node())
    clocks = snapshot.devices[0].clocks
    clocks.throttle_accumulation, clocks.throttle_residency = 764_653, {"ppt_power": 1_204, "hbm_thermal": 0}
    body = render_textfile(snapshot, run_checks(snapshot))
    assert "gpudiag_gpu_throttle_residency_total{" in body and "gpudiag_gpu_throttle_accumulation_total{" in body
    result = promtool("check", "metrics", stdin=body)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_promtool
def test_alert_rules_are_valid_and_pass_their_unit_tests():
    checked = promtool("check", "rules", *map(str, alert_rule_files()))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for unit_tests in alert_test_files():  # the core rules' and each family's
        tested = promtool("test", "rules", str(unit_tests))
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "SUCCESS" in tested.stdout


def test_every_alert_rule_is_unit_tested():
    rules = {r["alert"] for g in alert_groups() for r in g["rules"]}
    tests = [t for path in alert_test_files() for t in yaml.safe_load(path.read_text())["tests"]]
    firing = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case["exp_alerts"]}
    assert rules == firing


def _xid_code_regexes() -> dict[str, set[str]]:
    """alert → the code regexes its expression uses (code=~"…" for critical, code!~"…" for the rest)."""
    rules = {r["alert"]: r["expr"] for g in alert_groups() for r in g["rules"]}
    return {name: set(re.findall(r'code[!=]~"([^"]+)"', rules[name])) for name in ("GpudiagXidCritical",
                                                                                     "GpudiagXidError")}


def test_every_xid_pages_at_the_severity_kernel_log_xid_gives_it():
    """An Xid that fails kernel_log.xid (reset, reboot, RMA: xid_catalog) pages critical, and one that only warns
    (an application fault, or 61, which often precedes 62 on a failing GSP but alone is informational) pages as the
    warning (issue 23: severity = the check's)."""
    from gpudiag.checks.kernel_log.xid_catalog import XID_CATALOG
    from gpudiag.model import Status

    regexes = _xid_code_regexes()
    (critical,) = regexes["GpudiagXidCritical"]
    assert regexes["GpudiagXidError"] == {critical}  # the two alerts split the codes between them
    failing = sorted(code for code, info in XID_CATALOG.items() if info.severity == Status.FAIL)
    assert [code for code in failing if not re.fullmatch(critical, str(code))] == []
    warning = sorted(code for code, info in XID_CATALOG.items() if info.severity == Status.WARN)
    assert warning and [code for code in warning if re.fullmatch(critical, str(code))] == []
    assert not re.fullmatch(critical, "13") and not re.fullmatch(critical, "31")  # application faults stay warnings


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    return queries


def test_rules_and_dashboard_use_only_metrics_gpudiag_exports():
    known = set(metric_modules.all_metrics()) | PROCESS_METRICS
    rule_exprs = [r["expr"] for g in alert_groups() for r in g["rules"]]
    queries = dashboard_queries()
    assert len(queries) > 25
    used = {name for expr in rule_exprs + queries for name in METRIC_NAME.findall(expr)}
    assert used - known == set()
    # the alerts the rules raise are on it too, by the names the rules give them
    assert any('ALERTS{alertname=~"Gpudiag.*",alertstate="firing"' in q for q in queries)
    # the core of the schema is on the dashboard
    assert {"gpudiag_device_up", "gpudiag_check_ok", "gpudiag_gpu_xid_errors_total",
            "gpudiag_gpu_temperature_celsius", "gpudiag_gpu_pcie_link_width_lanes"} <= used


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path):
    """promtool parses each query, wrapped as a recording rule, with Grafana's variables filled in."""
    substitutions = {"$__rate_interval": "5m", "$instance": ".*", "$gpu": ".*", "$job": ".*"}
    rules = []
    for index, promql in enumerate(dashboard_queries()):
        if promql.startswith("label_values("):
            promql = re.match(r"label_values\((.*), \w+\)$", promql).group(1)
        for variable, value in substitutions.items():
            promql = promql.replace(variable, value)
        rules.append({"record": f"dashboard:query_{index}", "expr": promql})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# -- a real Prometheus server -------------------------------------------------------------------------------------


@needs_prometheus
@pytest.mark.parametrize("secured", [False, True], ids=["plain", "tls-basic-auth"])
def test_prometheus_scrapes_gpudiag_serve(tmp_path, secured):
    serve_args = ["--listen", "127.0.0.1:0", "--interval", "0.5", "--timeout", "2"]
    scrape: dict = {"job_name": "gpudiag", "scrape_interval": "1s", "scrape_timeout": "1s"}
    if secured:
        password_hash = bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(4)).decode()
        for name in ("server.crt", "server.key", "ca.crt"):
            shutil.copy(TLS / name, tmp_path / name)
        (tmp_path / "web.yml").write_text(yaml.safe_dump({
            "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
            "basic_auth_users": {"prometheus": password_hash}}))
        serve_args += ["--web-config", str(tmp_path / "web.yml")]
        scrape.update(
            {
                "scheme": "https",
                "tls_config": {"ca_file": str(tmp_path / "ca.crt"), "server_name": "localhost"},
                "basic_auth": {"username": "prometheus", "password": "scrape-me"},
            }
        )
    root = tmp_path / "root"
    exporter = subprocess.Popen([sys.executable, "-m", "tests.support.exporter_node", str(root), "2", "--",
                                 *serve_args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    prometheus = None
    try:
        target = re.search(r"serving https?://(\S+)/metrics", exporter.stderr.readline()).group(1)
        scrape["static_configs"] = [{"targets": [target]}]
        prometheus, api = start_prometheus(tmp_path, {"global": {"evaluation_interval": "1s"},
                                                      "scrape_configs": [scrape]})

        def gpus_up():
            try:
                found = query(api, "gpudiag_device_up == 1")
            except OSError:
                return None  # Prometheus still starting
            return found if len(found) == 2 else None

        found = wait_for(gpus_up, timeout=60, interval=0.5)
        assert {r["metric"]["pci_bus_id"] for r in found} == {"0000:19:00.0", "0000:3b:00.0"}
        assert all(r["metric"]["job"] == "gpudiag" and r["metric"]["instance"] == target for r in found)
        (up,) = query(api, 'up{job="gpudiag"}')
        assert up["value"][1] == "1"
        info = query(api, 'gpudiag_gpu_info{gpu="1"}')
        assert info[0]["metric"]["model"] == "NVIDIA H200" and info[0]["metric"]["driver_version"] == "550.127.05"
        temperature = query(api, 'gpudiag_gpu_temperature_celsius{sensor="gpu"}')
        assert sorted(float(r["value"][1]) for r in temperature) == [27.0, 27.0]
        assert query(api, 'gpudiag_collector_success{collector="collection"} == 1')
    finally:
        if prometheus is not None:
            stop(prometheus)
        stop(exporter)


# -- how the rules are built (issue 23) ---------------------------------------------------------------------------


def _alert_rules() -> list[dict]:
    return [r for g in alert_groups() for r in g["rules"] if "alert" in r]


def _group(name: str) -> list[dict]:
    (group,) = [g for g in alert_groups() if g["name"] == name]
    return group["rules"]


def _seconds(duration: str) -> float:
    from tests.support.rule_scaling import parse_ms

    return parse_ms(duration) / 1000


def test_an_alert_on_a_check_pages_at_the_check_s_severity():
    """fail → critical, warn → warning: a rule on one status carries that severity, a rule on both the template that
    picks it from the status label (item 4: six alerts on failing checks paged as warnings)."""
    by_status = '{{ if eq $labels.status "fail" }}critical{{ else }}warning{{ end }}'
    checked = 0
    for rule in _alert_rules():
        statuses = set(re.findall(r'gpudiag_check_status\{[^}]*status=~?"([^"]+)"', rule["expr"]))
        if not statuses or rule["alert"] in ("GpudiagCheckUnknown", "GpudiagGpuMissing"):
            continue
        checked += 1
        wanted = {frozenset({"fail"}): "critical", frozenset({"warn"}): "warning"}.get(
            frozenset(s for value in statuses for s in value.split("|")), by_status)
        if rule["alert"] in ("GpudiagXidCritical", "GpudiagXidError"):
            continue  # the code decides (test_every_xid_pages_at_the_severity_kernel_log_xid_gives_it)
        assert rule["labels"]["severity"] == wanted, rule["alert"]
    assert checked > 25


def test_the_catch_all_leaves_out_exactly_the_checks_other_alerts_stand_for():
    alert_docs = load_tool("alert_docs")
    rules = _alert_rules()
    (catch_all,) = [r for r in rules if r["alert"] == "GpudiagCheckFailing"]
    left_out = set(re.search(r'check!~"([^"]+)"', catch_all["expr"]).group(1).split("|"))
    covered = {c for r in rules if r["alert"] not in ("GpudiagCheckFailing", "GpudiagCheckUnknown")
               for c in alert_docs.checks_of(r["alert"], [r])}
    assert left_out == covered
    from gpudiag.checks import CHECK_IDS

    assert covered <= set(CHECK_IDS)


def test_gpu_alerts_hold_until_the_exporter_s_own_alerts_have_fired():
    """Item 6: a stopped exporter (scrapes fail) or a wedged one (no collection completes, GPU series withheld) must
    not resolve a GPU's alerts before GpudiagExporterDown / GpudiagCollectionStale fire: each GPU alert keeps firing
    longer than they take (their `for` plus the window their expression looks back over)."""
    self_rules = {r["alert"]: r for r in _group("gpudiag-self")}

    def takes(rule):
        windows = [_seconds(w) for w in re.findall(r"\[(\w+)\]", rule["expr"])]
        return _seconds(rule.get("for", "0s")) + max(windows, default=0)

    needed = max(takes(self_rules["GpudiagExporterDown"]), takes(self_rules["GpudiagCollectionStale"]))
    assert needed <= 6 * 60
    for rule in _group("gpudiag-gpu"):
        assert _seconds(rule.get("keep_firing_for", "0s")) > needed, rule["alert"]
