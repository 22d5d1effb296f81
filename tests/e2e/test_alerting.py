"""The shipped alerting end to end, wired as a site wires it (issue 23): a real Prometheus loading
monitoring/prometheus/gpudiag-alerts.yml, a real Alertmanager with monitoring/alertmanager/gpudiag-alertmanager.yml
(its inhibitions unchanged, its receivers pointed at a webhook in this test), and one `gpudiag serve` per
single-fault node of tests/support/alerting_nodes.py, both vendors, plus a healthy node of each, all scraped at once.

Durations are scaled down by SCALE (tests/support/rule_scaling.py, itself tested): 15-second scrapes become 1 s (and the
rules' 15 minutes 60 s), so that the whole run takes about two minutes. For each fault: its own alert fires with
the right name, severity and GPU labels within its `for` plus three scrapes; at most three alerts reach the
receiver; none resolves while the fault lasts. Healthy nodes fire nothing. One more node's exporter is killed once
its alert fires: its GPU alert holds until GpudiagExporterDown fires, so that the node never goes without a page.

Skipped only when prometheus / prometheus-alertmanager are not installed (`apt-get install prometheus
prometheus-alertmanager`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.alerting_nodes import SCENARIOS, Scenario
from tests.support.exporter import wait_for
from tests.support.prometheus import (
    ALERTMANAGER,
    PROMETHEUS,
    WebhookReceiver,
    api,
    query,
    start_alertmanager,
    start_prometheus,
    stop,
)
from tests.support.paths import REPO
from tests.support.rule_scaling import parse_ms, scale_alertmanager, scale_duration, write_scaled_rules

pytestmark = [pytest.mark.slow,  # end to end: real servers and processes (tests/README.md)
              pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None,
                                 reason="prometheus / prometheus-alertmanager not installed")]

RULES = REPO / "monitoring" / "prometheus" / "gpudiag-alerts.yml"
ALERTMANAGER_CONFIG = REPO / "monitoring" / "alertmanager" / "gpudiag-alertmanager.yml"
SCALE = 15  # 15 s scrapes (docs/monitoring.md) → 1 s: every window holds as many samples as in production
SCRAPE_SECONDS = 1.0
# The exporters collect every 2 s (the checks judge each collection; a fault already there is in the first one), half
# the CPU of collecting at every scrape: 37 exporters share the machine. Their deadline leaves room for a loaded one.
COLLECT_SECONDS, DEADLINE_SECONDS = 2, 6
# After the last node's first collection: long enough for every consequence of a fault to fire were it not
# inhibited or left out (the catch-alls' 15 minutes → 60 s, then Alertmanager's group_wait, 2 s).
OBSERVE_SECONDS = 70.0
MAX_RECEIVED = 3
STOPPED = "exporter-stopped"  # the node whose exporter is killed (a copy of nvidia-ecc-uncorrected)
EMPTY_PLACEHOLDER = re.compile(r"\(\)|GPU \(|GPU ,|  |on ,|, $|\s$")


def rule_for_seconds(alertname: str, severity: str) -> float:
    """The scaled `for` of the rule that raises `alertname` at `severity` (a templated severity matches both)."""
    found = []
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alertname and (rule["labels"]["severity"] == severity or "{{" in rule["labels"][
                    "severity"]):
                found.append(parse_ms(rule.get("for", "0s")) / 1000 / SCALE)
    assert found, (alertname, severity)
    return min(found)


def start_node(scenario: str, root: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.alerting_nodes", scenario, str(root), "--",
         "--listen", "127.0.0.1:0", "--interval", str(COLLECT_SECONDS), "--timeout", str(DEADLINE_SECONDS)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("w"), env={**os.environ, "PYTHONPATH": str(REPO)})


def listening_on(log: Path) -> str | None:
    found = re.search(r"serving https?://(\S+)/metrics", log.read_text()) if log.exists() else None
    return found.group(1) if found else None


def first_sample(prometheus: str, selector: str) -> float | None:
    """The timestamp of the earliest raw sample other than 0 that Prometheus holds for `selector` (any series): a
    state set's series is there from the start, at 0 until its state is."""
    times = [float(t) for series in query(prometheus, f"{selector}[10m]") for t, v in series["values"] if v != "0"]
    return min(times) if times else None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Run everything once; the tests below judge what was recorded."""
    tmp = tmp_path_factory.mktemp("alerting")
    nodes = {s.name: s.name for s in SCENARIOS} | {STOPPED: "nvidia-ecc-uncorrected"}
    procs: dict[str, subprocess.Popen] = {}
    prometheus = alertmanager = None
    with WebhookReceiver() as receiver:
        try:
            for label, scenario in nodes.items():
                procs[label] = start_node(scenario, tmp / label, tmp / f"{label}.log")
            config = scale_alertmanager(yaml.safe_load(ALERTMANAGER_CONFIG.read_text()), SCALE)
            for receiver_config in config["receivers"]:
                for webhook in receiver_config.get("webhook_configs", []):
                    webhook["url"] = receiver.url
            alertmanager, alertmanager_url = start_alertmanager(tmp, config)
            targets = wait_for(lambda: (lambda found: found if all(found.values()) else None)(
                {label: listening_on(tmp / f"{label}.log") for label in nodes}), timeout=120, interval=0.5)
            rules = write_scaled_rules(RULES, tmp, SCALE)
            interval = f"{int(SCRAPE_SECONDS * 1000)}ms"
            prometheus, prometheus_url = start_prometheus(tmp, {
                "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
                "rule_files": [str(rules)],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager_url[7:]]}]}]},
                "scrape_configs": [{"job_name": "gpudiag", "static_configs": [
                    {"targets": [target], "labels": {"scenario": label}} for label, target in targets.items()]}],
            }, f"--rules.alert.resend-delay={scale_duration('1m', SCALE)}",
                f"--query.lookback-delta={scale_duration('5m', SCALE)}", log=tmp / "prometheus.log")
            result = Recording(prometheus_url, receiver)

            def collected():
                try:
                    return all(first_sample(prometheus_url, f'gpudiag_last_collection_timestamp_seconds{{scenario="{n}"}}')
                               for n in nodes)
                except OSError:
                    return False  # Prometheus still starting

            wait_for(collected, timeout=120, interval=0.5)
            started = time.monotonic()
            killed = False
            while time.monotonic() - started < OBSERVE_SECONDS:
                result.poll()
                if not killed and result.firing_now(STOPPED, "GpudiagEccUncorrectedErrors"):
                    procs[STOPPED].send_signal(signal.SIGKILL)  # a crash: no goodbye to anyone
                    result.killed_at = time.time()
                    killed = True
                time.sleep(0.5)
            result.finish()
            (tmp / "scenarios.txt").write_text(scenario_table(result) + "\n")
            print(f"\n{scenario_table(result)}\n(also in {tmp / 'scenarios.txt'})")
            yield result
        finally:
            for proc in [prometheus, alertmanager, *procs.values()]:
                if proc is not None:
                    stop(proc)


class Recording:
    """What Prometheus said about its alerts while the nodes ran (polled), and what the receiver got."""

    def __init__(self, prometheus: str, receiver: WebhookReceiver):
        self.prometheus, self.receiver = prometheus, receiver
        self.polls: list[tuple[float, set[tuple]]] = []  # (time, firing alerts as sorted label items)
        self.killed_at: float | None = None
        self.first_fired: dict[tuple, float] = {}
        self.visible_at: dict[str, float] = {}
        self.failed_scrapes: dict[str, int] = {}
        self.scrapes: dict[str, list[float]] = {}  # each node's scrape times
        self.slowest_scrape: dict[str, float] = {}

    def poll(self) -> None:
        alerts = api(self.prometheus, "/api/v1/alerts")["alerts"]
        firing = {tuple(sorted(a["labels"].items())) for a in alerts if a["state"] == "firing"}
        self.polls.append((time.time(), firing))

    def firing_now(self, scenario: str, alertname: str) -> bool:
        return any(dict(a).get("scenario") == scenario and dict(a)["alertname"] == alertname
                   for a in (self.polls[-1][1] if self.polls else ()))

    def finish(self) -> None:
        """Fire and visibility times from Prometheus's own samples (its clock, its evaluations)."""
        for series in query(self.prometheus, 'ALERTS{alertstate="firing"}[10m]'):
            labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "alertstate")}
            self.first_fired[tuple(sorted(labels.items()))] = min(float(t) for t, _ in series["values"])
        for scenario in SCENARIOS:
            self.visible_at[scenario.name] = first_sample(self.prometheus,
                                                          _with_scenario(scenario.evidence, scenario.name))
        self.visible_at[STOPPED] = first_sample(
            self.prometheus, f'gpudiag_last_collection_timestamp_seconds{{scenario="{STOPPED}"}}')
        # How the scrapes went, per node: when, how many failed, the slowest (what a loaded machine stretches).
        for series in query(self.prometheus, "up[10m]"):
            node = series["metric"].get("scenario", "")
            self.scrapes[node] = sorted(float(t) for t, _ in series["values"])
            self.failed_scrapes[node] = sum(1 for _, up in series["values"] if up == "0")
        for series in query(self.prometheus, 'max_over_time(scrape_duration_seconds[10m])'):
            self.slowest_scrape[series["metric"].get("scenario", "")] = float(series["value"][1])

    def scrapes_past(self, scenario: str, since: float, until: float) -> int:
        """Scrapes of the node after `since` and before `until`: the issue's measure of lateness, which a loaded
        machine (scrapes that start late) does not stretch as it does seconds."""
        return sum(1 for at in self.scrapes.get(scenario, ()) if since < at < until)

    def fired(self, scenario: str) -> dict[tuple, float]:
        return {labels: at for labels, at in self.first_fired.items() if dict(labels).get("scenario") == scenario}

    def received(self, scenario: str) -> list[tuple[float, dict]]:
        return [(at, alert) for at, alert in self.receiver.alerts() if alert["labels"].get("scenario") == scenario]


def _with_scenario(selector: str, scenario: str) -> str:
    if "{" in selector:
        return selector.replace("{", f'{{scenario="{scenario}",', 1)
    return f'{selector}{{scenario="{scenario}"}}'


def _own(recording: Recording, scenario: Scenario) -> tuple[dict, float] | None:
    """The scenario's own alert as Prometheus fired it (labels, first firing time), if it did."""
    for labels, at in sorted(recording.fired(scenario.name).items(), key=lambda item: item[1]):
        labels = dict(labels)
        if labels["alertname"] == scenario.alert:
            return labels, at
    return None


FAULTS = [s for s in SCENARIOS if s.alert is not None]
HEALTHY = [s for s in SCENARIOS if s.alert is None]


def test_the_run_covers_at_least_sixteen_single_faults_of_both_vendors():
    assert len(FAULTS) >= 16 and {s.vendor for s in FAULTS} == {"nvidia", "amd"}
    assert {s.vendor for s in HEALTHY} == {"nvidia", "amd"}


@pytest.mark.parametrize("scenario", FAULTS, ids=[s.name for s in FAULTS])
def test_each_fault_fires_its_own_alert_in_time_with_its_severity_and_gpu(run, scenario):
    own = _own(run, scenario)
    assert own is not None, f"{scenario.alert} never fired; fired: {sorted(dict(k)['alertname'] for k in run.fired(scenario.name))}"
    labels, fired_at = own
    assert labels["severity"] == scenario.severity
    if scenario.gpu_labels:
        assert (labels.get("gpu"), labels.get("pci_bus_id")) == ("1", scenario.bus_id)
    due = run.visible_at[scenario.name] + rule_for_seconds(scenario.alert, scenario.severity)
    late = run.scrapes_past(scenario.name, due, fired_at)
    assert late <= 3, (f"fired {fired_at - run.visible_at[scenario.name]:.1f} s after the fault was visible, {late} "
                       f"scrapes after its `for` had passed")


@pytest.mark.parametrize("scenario", FAULTS, ids=[s.name for s in FAULTS])
def test_each_fault_reaches_the_receiver_as_at_most_three_alerts_and_none_resolves(run, scenario):
    received = run.received(scenario.name)
    names = {alert["labels"]["alertname"] for _, alert in received}
    distinct = {tuple(sorted(alert["labels"].items())) for _, alert in received}
    assert scenario.alert in names, f"{scenario.alert} did not reach the receiver; got {sorted(names)}"
    assert len(distinct) <= MAX_RECEIVED, sorted(names)
    assert [a["labels"]["alertname"] for _, a in received if a["status"] == "resolved"] == []
    # Prometheus's side: an alert once seen firing (its API answers after the rule group's evaluation, a little
    # after the sample time of ALERTS) is firing at every later poll while the fault lasts
    for labels in run.fired(scenario.name):
        seen = [labels in firing for _, firing in run.polls]
        if True not in seen:  # it fired after the last poll
            assert run.first_fired[labels] > run.polls[-1][0] - 2 * SCRAPE_SECONDS, dict(labels)
            continue
        assert all(seen[seen.index(True):]), f"{dict(labels)['alertname']} stopped firing while the fault lasted"


@pytest.mark.parametrize("scenario", FAULTS, ids=[s.name for s in FAULTS])
def test_alert_texts_have_no_empty_placeholders(run, scenario):
    for _, alert in run.received(scenario.name):
        for name in ("summary", "description"):
            text = alert["annotations"][name]
            assert not EMPTY_PLACEHOLDER.search(text), (alert["labels"]["alertname"], text)
        assert alert["annotations"]["runbook_url"].startswith("docs/runbook.md#")


@pytest.mark.parametrize("scenario, held_back", [
    ("nvidia-driver-not-loaded", "GpudiagGpuDown"),  # both GPUs on the bus unanswered: BackendDown's consequence
    ("nvidia-gpu-hung", "GpudiagCollectorFailing"),  # the nvml collector fails because GPU 1 hangs
    ("amd-gpu-hung", "GpudiagCollectorFailing"),
])
def test_the_shipped_inhibitions_hold_back_what_prometheus_fired(run, scenario, held_back):
    """Not vacuous: Prometheus did fire these consequences; Alertmanager's inhibitions kept them from the receiver."""
    assert held_back in {dict(labels)["alertname"] for labels in run.fired(scenario)}
    assert held_back not in {alert["labels"]["alertname"] for _, alert in run.received(scenario)}


@pytest.mark.parametrize("scenario", HEALTHY, ids=[s.name for s in HEALTHY])
def test_a_healthy_node_fires_nothing(run, scenario):
    assert run.fired(scenario.name) == {}
    assert run.received(scenario.name) == []
    assert run.visible_at[scenario.name] is not None  # it was scraped all along


def test_a_killed_exporter_leaves_its_gpu_alert_firing_until_exporter_down_fires(run):
    assert run.killed_at is not None, "the GPU alert of the node to stop never fired"
    fired = {dict(labels)["alertname"]: at for labels, at in run.fired(STOPPED).items()}
    assert "GpudiagExporterDown" in fired, sorted(fired)
    after = [(at, {dict(a)["alertname"] for a in firing if dict(a).get("scenario") == STOPPED})
             for at, firing in run.polls if at >= run.killed_at]
    assert after and all(names for _, names in after), "a moment with nothing firing for a failing GPU"
    down_seen = min(at for at, names in after if "GpudiagExporterDown" in names)
    assert all("GpudiagEccUncorrectedErrors" in names for at, names in after if at <= down_seen)
    # and the receiver never heard the GPU alert resolve before the exporter was reported down
    resolved = [at for at, alert in run.received(STOPPED)
                if alert["status"] == "resolved" and alert["labels"]["alertname"] == "GpudiagEccUncorrectedErrors"]
    assert all(at > down_seen for at in resolved)


def scenario_table(recording: "Recording") -> str:
    """The figures the issue asks for: fault → its alert, severity, time to fire, alerts received."""
    lines = [f"{'fault':30} {'alert':36} {'severity':8} {'fired after':>11} {'for':>5} {'late':>4} {'fired':>5}  received"
             f"  (scrapes failed, slowest)"]
    for scenario in [*SCENARIOS, STOPPED]:
        name = scenario if isinstance(scenario, str) else scenario.name
        alert = "GpudiagEccUncorrectedErrors" if isinstance(scenario, str) else scenario.alert
        own = next(((dict(k), at) for k, at in sorted(recording.fired(name).items(), key=lambda i: i[1])
                    if dict(k)["alertname"] == alert), None)
        received = recording.received(name)
        names = sorted({a["labels"]["alertname"] for _, a in received})
        visible = recording.visible_at.get(name)
        took = f"{own[1] - visible:.1f} s" if own and visible else "-"
        due = rule_for_seconds(alert, own[0]["severity"]) if own else None
        allowed = f"{due:.1f}s" if own else "-"
        late = str(recording.scrapes_past(name, visible + due, own[1])) if own and visible else "-"
        count = len({tuple(sorted(a["labels"].items())) for _, a in received})
        lines.append(f"{name:30} {alert or '(nothing)':36} {own[0]['severity'] if own else '-':8} {took:>11} "
                     f"{allowed:>5} {late:>4} {len(recording.fired(name)):>5}  {count}: {', '.join(names) or '-'}  "
                     f"({recording.failed_scrapes.get(name, 0)}, {recording.slowest_scrape.get(name, 0):.2f} s)")
    return "\n".join(lines)


ONCE = [s for s in SCENARIOS if s.pages_once is not None]
# What Prometheus fires for a fault besides its cause, held back by the shipped inhibitions (not vacuous).
CONSEQUENCES = {"nvidia-gpu-lost-watched": {"GpudiagXidCritical", "GpudiagGpuMissing"}}


@pytest.mark.parametrize("scenario", ONCE, ids=[s.name for s in ONCE])
def test_a_fault_while_watched_pages_once_first_as_its_cause_naming_its_device(run, scenario):
    """Issue 36 item 2: a GPU lost while watched paged three times (Xid 79 first, GpudiagGpuDown, then
    GpudiagGpuMissing); a NIC port down paged without naming the NIC."""
    received = sorted(run.received(scenario.name), key=lambda item: item[0])
    pages = {tuple(sorted(alert["labels"].items())) for _, alert in received
             if alert["labels"].get("severity") == "critical"}
    assert len(pages) == 1, sorted(dict(page)["alertname"] for page in pages)
    page = dict(next(iter(pages)))
    assert {name: page.get(name) for name in scenario.pages_once} == scenario.pages_once
    assert received[0][1]["labels"]["alertname"] == scenario.pages_once["alertname"]  # the cause is the first word
    fired = {dict(labels)["alertname"] for labels in run.fired(scenario.name)}
    assert CONSEQUENCES.get(scenario.name, set()) <= fired, sorted(fired)
