"""`gpudiag fleet --prometheus`: end to end against a real Prometheus scraping three `gpudiag serve` processes over
fake nodes, and against a stand-in Prometheus (tests/support/prometheus_stand_in.py) for what a real one rarely does on
cue (slow, partial, refusing)."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudiag.cli import app as cli
from gpudiag.fleet import NodeFacts
from gpudiag.fleet.prometheus import read_prometheus
from gpudiag.fleet.prometheus_api import Connection
from gpudiag.fleet.report_facts import node_facts
from tests.support.exporter import wait_for
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.fleet import run
from tests.support.nvidia_node import sysfs_for
from tests.support.prometheus_stand_in import TLS, fleet_answers, healthy, stand_in  # noqa: F401 - stand_in: a fixture
from tests.e2e.test_prometheus import free_port, needs_prometheus, query, start_prometheus, stop
from tests.support.paths import REPO
from tests.support.prometheus_stand_in import sample as _sample
from tests.support.prometheus_stand_in import success as _success



# -- a real Prometheus over three `gpudiag serve` ------------------------------------------------------------------


def _serve(root: Path, *node_args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.exporter_node", str(root), "2", *node_args, "--",
                             "--listen", "127.0.0.1:0", "--interval", "0.5", "--timeout", "2"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    target = re.search(r"serving https?://(\S+)/metrics", proc.stderr.readline()).group(1)
    return proc, target


NODES = (("healthy", ()), ("downtrained", ("--downtrain", "1")), ("older", ("--driver", "535.183.01")))


@needs_prometheus
@pytest.mark.slow
def test_fleet_names_the_failing_gpu_and_the_drifting_driver_from_a_real_prometheus(capsys, tmp_path):
    procs, targets = [], {}
    prometheus = None
    try:
        for name, args in NODES:
            proc, targets[name] = _serve(tmp_path / name, *args)
            procs.append(proc)
        scrape = {"job_name": "gpudiag", "scrape_interval": "1s", "scrape_timeout": "1s",
                  "static_configs": [{"targets": sorted(targets.values()), "labels": {"cluster": "a"}}]}
        prometheus, api = start_prometheus(tmp_path, {"global": {"evaluation_interval": "1s"},
                                                      "scrape_configs": [scrape]})

        def all_scraped():
            try:
                return len(query(api, 'count by (instance) (gpudiag_check_status{job="gpudiag"})')) == 3
            except OSError:
                return False  # Prometheus still starting

        wait_for(all_scraped, timeout=60, interval=0.3)
        code, out, err = run(capsys, "--prometheus", api, "--selector", '{job="gpudiag", cluster="a"}', "--json")
        text_code, text, _ = run(capsys, "--prometheus", api, "--selector", '{job="gpudiag",cluster="a"}')
        from_prometheus, _ = read_prometheus(Connection(api), '{job="gpudiag"}')
    finally:
        if prometheus is not None:
            stop(prometheus)
        for proc in procs:
            stop(proc)
    assert code == 1 == text_code, err
    verdict = json.loads(out)
    assert verdict["complete"] is True and verdict["warnings"] == []
    nodes = {n["node"]: n for n in verdict["nodes"]}
    assert set(nodes) == set(targets.values())
    assert nodes[targets["healthy"]]["status"] == "pass" and nodes[targets["healthy"]]["findings"] == []
    failing = nodes[targets["downtrained"]]
    assert failing["status"] == "fail"
    assert {(f["check"], f["gpu"], f["pci_bus_id"], f["action"]) for f in failing["findings"]} == {
        ("pcie.link_generation", 1, "0000:3b:00.0", "drain")}
    (drift,) = verdict["drift"]
    assert (drift["model"], drift["property"], drift["expected"], drift["expected_count"]) == \
        ("NVIDIA H200", "driver_version", "550.127.05", 2)
    assert drift["minority"] == [{"value": "535.183.01", "count": 1,
                                  "nodes": [{"node": targets["older"], "gpus": None}]}]
    assert nodes[targets["older"]]["status"] == "drift"
    assert f"  {targets['downtrained']} GPU 1 (0000:3b:00.0): pcie.link_generation: fails -> drain\n" in text
    assert f"  {targets['older']}: driver_version: driver version 535.183.01" in text

    # The same three nodes' `gpudiag check --format json` reports normalise to the same facts: one judgement.
    by_instance = {facts.node: facts for facts in from_prometheus}
    for name, facts in ((name, report_facts(capsys, tmp_path / f"{name}-report", *args))
                        for name, args in NODES):
        seen = by_instance[targets[name]]
        # Firmware components are in reports only: no metric carries them (docs/fleet.md).
        reported = {gpu: {k: v for k, v in props.items() if not k.startswith("firmware:")}
                    for gpu, props in facts.gpu_properties.items()}
        assert (seen.model, seen.properties, seen.gpu_properties, seen.bus_ids) == \
            (facts.model, facts.properties, reported, facts.bus_ids), name
        assert set(facts.gpu_properties[0]) - set(reported[0]) == {"firmware:inforom_ecc", "firmware:inforom_image",
                                                                   "firmware:inforom_oem"}
        assert [(f.check, f.gpu, f.action) for f in seen.failures] == [(f.check, f.gpu, f.action) for f in facts.failures]
    assert by_instance[targets["downtrained"]].failures and by_instance[targets["healthy"]].gpu_properties[1] == {
        "vbios_version": "96.00.A5.00.01", "pcie_slot_max": "Gen5 x16", "power_limit": "700 W", "ecc_mode": "enabled"}


def report_facts(capsys, root: Path, *node_args: str) -> NodeFacts:
    """The facts of the report `gpudiag check --format json` gives over the fake node tests.support.exporter_node
    serves."""
    node = FakeNode.hgx_h200(2)
    if "--driver" in node_args:
        node.driver_version = node_args[node_args.index("--driver") + 1]
    if "--downtrain" in node_args:
        node.gpus[int(node_args[node_args.index("--downtrain") + 1])].pcie_downtrained(generation=4, width=16)
    sysfs_for(node, root)
    with installed(node):
        cli.main(["check", "--root", str(root), "--format", "json"])
    return node_facts(json.loads(capsys.readouterr().out), "report")[0]


# -- a stand-in Prometheus ------------------------------------------------------------------------------------------

def test_a_fixed_handful_of_queries_names_the_down_target(capsys, stand_in):
    server = stand_in()
    code, out, _ = run(capsys, "--prometheus", server.url, "--json")
    verdict = json.loads(out)
    assert code == 1
    assert {n["node"]: n["status"] for n in verdict["nodes"]} == {"n1:9858": "pass", "n2:9858": "silent"}
    assert "scrape target down" in verdict["nodes"][1]["findings"][0]["message"]
    queries = [form["query"][0] for _, form, _ in server.seen]
    assert len(queries) <= 18 and all(path == "/api/v1/query" for path, _, _ in server.seen)
    assert all('job=~"gpudiag.*"' in q for q in queries if "{" in q)  # the default selector everywhere


def test_failing_checks_come_from_check_ok_and_undecided_ones_are_told_apart(capsys, stand_in):
    odd = 'rack "7".n1:9858'  # a name that is a regex and a quoting hazard

    def answers(promql, headers):
        if promql.startswith("up{"):
            return _success([_sample(1, instance=odd), _sample(1, instance="n2:9858")])
        if healthy(promql, odd):
            return _success(healthy(promql, odd, "n2:9858", not_ok=(odd,)))
        if "gpudiag_check_ok" in promql:
            return _success([_sample(0, instance=odd, check="pcie.link_width", gpu="1"),
                             _sample(0, instance=odd, check="kernel_log.xid", gpu="")])
        if "gpudiag_check_status" in promql:
            assert 'status="unknown"' in promql and 'instance=~"rack \\"7\\"\\\\.n1:9858"' in promql, promql
            return _success([_sample(1, instance=odd, check="kernel_log.xid", gpu="", status="unknown")])
        if "gpudiag_gpu_info" in promql:
            return _success([_sample(1, instance=odd, gpu="1", pci_bus_id="0000:3b:00.0", model="NVIDIA H200",
                                     driver_version="580.159.04", vbios_version="v")])
        return _success([])

    code, out, _ = run(capsys, "--prometheus", stand_in(answers).url, "--json")
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert code == 1 and nodes["n2:9858"]["status"] == "pass"
    found = {(f["kind"], f["check"], f["gpu"], f["pci_bus_id"], f["action"], f["fault_code"])
             for f in nodes[odd]["findings"]}
    assert found == {("fail", "pcie.link_width", 1, "0000:3b:00.0", "drain", "GPUDIAG-PCIE-WIDTH-DEGRADED"),
                     ("unknown", "kernel_log.xid", None, None, "watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")}


def test_basic_auth_and_bearer_token_come_from_files(capsys, stand_in, tmp_path):
    server = stand_in()
    (tmp_path / "password").write_text("s3cret\n")
    (tmp_path / "token").write_text("tok-en\n")
    run(capsys, "--prometheus", server.url, "--username", "fleet", "--password-file", str(tmp_path / "password"))
    assert server.seen[0][2]["Authorization"] == "Basic " + base64.b64encode(b"fleet:s3cret").decode()
    server.seen.clear()
    run(capsys, "--prometheus", server.url, "--bearer-token-file", str(tmp_path / "token"))
    assert server.seen[0][2]["Authorization"] == "Bearer tok-en"


def test_a_partial_answer_is_reported_and_not_a_pass(capsys, stand_in):
    def partial(promql, headers):
        code, body = fleet_answers(promql, headers)
        if promql.startswith("up{"):
            body["data"]["result"] = body["data"]["result"][:1]  # the one target up: sound, as far as it goes
        if "gpudiag_check_ok" in promql:
            body.update(warnings=["store eu-2 unreachable"], partial_response=True)
        return code, body

    code, out, err = run(capsys, "--prometheus", stand_in(partial).url, "--json")
    verdict = json.loads(out)
    (node,) = verdict["nodes"]  # its failing checks were not all read: not shown sound
    assert node["status"] == "unknown" and [f["kind"] for f in node["findings"]] == ["unread"]
    assert "its check results: a partial answer" in node["findings"][0]["message"]
    assert (code, verdict["status"], verdict["complete"]) == (1, "unknown", False)
    assert any("store eu-2 unreachable" in w for w in verdict["warnings"]) and "partial response" in err
    whole = json.loads(run(capsys, "--prometheus", stand_in(
        lambda q, h: fleet_answers(q, h) if not q.startswith("up{") else _success([_sample(1, instance="n1:9858")]))
        .url, "--json")[1])
    assert (whole["status"], whole["complete"]) == ("pass", True)  # the same fleet, answered in full


@pytest.mark.slow
def test_a_slow_prometheus_is_given_up_on_and_the_verdict_is_incomplete(capsys, stand_in):
    calls = []

    def slow_checks(promql, headers):
        calls.append(promql)
        if "gpudiag_check_ok" in promql:
            time.sleep(3)
        return fleet_answers(promql, headers)

    started = time.monotonic()
    code, out, err = run(capsys, "--prometheus", stand_in(slow_checks).url, "--timeout", "1.5", "--json")
    assert time.monotonic() - started < 5
    verdict = json.loads(out)
    assert code == 1 and verdict["complete"] is False
    assert any(w.startswith("incomplete:") and "no complete answer within" in w for w in verdict["warnings"])
    text = run(capsys, "--prometheus", stand_in(slow_checks).url, "--timeout", "1.5")[1]
    assert text.startswith("gpudiag fleet: FAIL INCOMPLETE (see SOURCE): 2 node(s): 1 silent, 1 unknown")


def test_unreachable_is_nothing_to_judge_exit_3(capsys):
    code, out, err = run(capsys, "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert (code, out) == (3, "") and "unreachable" in err and err.count("\n") == 1


def test_no_gpudiag_series_is_nothing_to_judge_exit_3(capsys, stand_in):
    code, out, err = run(capsys, "--prometheus", stand_in(lambda q, h: _success([])).url)
    assert (code, out) == (3, "") and "no gpudiag series" in err
    # targets that answer, none of them with gpudiag series: a selector that picks the wrong job
    others = stand_in(lambda q, h: _success([_sample(1, instance="n1:9100")] if q.startswith("up{") else []))
    code, out, err = run(capsys, "--prometheus", others.url)
    assert (code, out) == (3, "") and "no gpudiag series" in err


def test_one_target_without_gpudiag_series_among_gpudiag_ones_is_silent(capsys, stand_in):
    def answers(promql, headers):
        if promql.startswith("up{"):
            return _success([_sample(1, instance="n1:9858"), _sample(1, instance="n3:9858")])
        return fleet_answers(promql, headers)

    verdict = json.loads(run(capsys, "--prometheus", stand_in(answers).url, "--json")[1])
    assert {n["node"]: n["status"] for n in verdict["nodes"]} == {"n1:9858": "pass", "n3:9858": "silent"}
    assert verdict["nodes"][1]["findings"][0]["message"] == "the target answers but exports no gpudiag series"


def test_every_target_down_is_a_verdict_not_nothing_to_judge(capsys, stand_in):
    down = stand_in(lambda q, h: _success([_sample(0, instance="n1:9858")] if q.startswith("up{") else []))
    code, out, _ = run(capsys, "--prometheus", down.url, "--json")
    assert code == 1 and json.loads(out)["nodes"][0]["status"] == "silent"


def test_refused_credentials_are_a_usage_error(capsys, stand_in):
    server = stand_in(lambda q, h: (401, {"status": "error", "error": "unauthorized"}))
    code, out, err = run(capsys, "--prometheus", server.url)
    assert (code, out) == (2, "") and "HTTP 401" in err and err.count("\n") == 1


def test_tls_is_verified_against_the_ca_file_unless_told_not_to(capsys, stand_in):
    server = stand_in(tls=True)
    code, out, err = run(capsys, "--prometheus", server.url)
    assert (code, out) == (2, "") and "TLS" in err and "CERTIFICATE_VERIFY_FAILED" in err and err.count("\n") == 1
    assert run(capsys, "--prometheus", server.url, "--ca-file", str(TLS / "ca.crt"))[0] == 1  # n2 is down
    assert run(capsys, "--prometheus", server.url, "--insecure-skip-verify")[0] == 1
    code, _, err = run(capsys, "--prometheus", server.url, "--ca-file", str(TLS / "missing.crt"))
    assert code == 2 and "--ca-file" in err


def test_a_redirect_is_not_followed_with_the_credentials(capsys, stand_in, tmp_path):
    elsewhere = stand_in()
    (tmp_path / "token").write_text("tok-en\n")
    server = stand_in(lambda q, h: (302, {}))
    server.location = elsewhere.url + "/api/v1/query"
    code, out, err = run(capsys, "--prometheus", server.url, "--bearer-token-file", str(tmp_path / "token"))
    assert (code, out) == (2, "") and "redirected (HTTP 302)" in err and elsewhere.url in err
    assert elsewhere.seen == []


def test_the_default_selector_is_the_prometheus_modules():
    from gpudiag.cli import fleet as cli_fleet
    from gpudiag.fleet import prometheus

    assert cli_fleet.DEFAULT_SELECTOR == prometheus.DEFAULT_SELECTOR


@pytest.mark.parametrize("selector", ['job="gpudiag"', '{job="a"} or vector(1) or {x="y"}', '{job=gpudiag}',
                                      '{job="a" instance="b"}'])
def test_a_selector_that_is_not_label_matchers_is_refused(capsys, selector):
    code, out, err = run(capsys, "--prometheus", "http://127.0.0.1:9", "--selector", selector)
    assert (code, out) == (2, "") and "--selector" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, fragment", [
    (("--prometheus", "ftp://x"), "not an http"),
    (("--prometheus", "http://127.0.0.1:9", "--password-file", "/etc/hostname"), "needs --username"),
    (("--prometheus", "http://127.0.0.1:9", "--bearer-token-file", "{missing}"), "cannot read"),
])
def test_bad_connection_options_are_one_line_exit_2(capsys, tmp_path, argv, fragment):
    code, out, err = run(capsys, *(arg.replace("{missing}", str(tmp_path / "missing")) for arg in argv))
    assert (code, out) == (2, "") and fragment in err and err.count("\n") == 1


def test_a_failing_network_check_names_its_nic_port_as_the_checklist_does(capsys, stand_in):
    """Issue 36 item 4: a network check's result is node-level (gpu=""); gpudiag_nic_check_status names the port."""
    def answers(promql, headers):
        if promql.startswith("up{"):
            return _success([_sample(1, instance="n1:9858")])
        if healthy(promql, "n1:9858"):
            return _success(healthy(promql, "n1:9858", not_ok=("n1:9858",)))
        if "gpudiag_check_ok" in promql:
            return _success([_sample(0, instance="n1:9858", check="network.nics", gpu="")])
        if "gpudiag_nic_check_status" in promql:
            assert 'status=~"fail|unknown"' in promql, promql
            return _success([_sample(1, instance="n1:9858", check="network.nics", nic="mlx5_4",
                                     pci_bus_id="0000:3b:00.0", port="1")])
        return _success([])

    code, out, _ = run(capsys, "--prometheus", stand_in(answers).url, "--json")
    (node,) = json.loads(out)["nodes"]
    (finding,) = node["findings"]
    assert code == 1 and finding["check"] == "network.nics" and finding["pci_bus_id"] is None
    assert finding["message"] == "fails on NIC mlx5_4 (0000:3b:00.0) port 1"
