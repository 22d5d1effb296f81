"""A node that lost every GPU must not look healthy: in `check`'s exit code, in the exporter's series (`serve` and
`textfile` judge against the profile like `check`), and in the state set that tells skip and unknown from pass.

Issue 9 item 5: without a profile the exporter said `gpudiag_check_ok 1` for every check of a node with no GPU, and
`count()` over per-GPU series of such a node is no series at all, so no alert could fire.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest

from gpudiag.cli import app as cli
from gpudiag.cli.serve.serving import ServeDaemon, judge_against
from gpudiag.expect.profile import load_expectations
from gpudiag.exporter.textfile import render_textfile
from gpudiag.exporter.web.config import WebConfig
from gpudiag.model import CheckResult, DeviceRef, NodeSnapshot, Status, normalize_pci_bus_id
from gpudiag.probe.collector import CollectOptions, Collector
from tests.support.exporter import parse, series, value, wait_for
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed, library_missing
from tests.support.paths import REPO
from tests.support.snapshots import amd_mi300x_node, cpx_partitioned, nvidia_h200_node

STATUSES = {"pass", "warn", "fail", "skip", "unknown"}


def render(snapshot, results=()):
    return render_textfile(snapshot, list(results), finished_at=1_800_000_000.0)


def status_of(text: str, check: str, gpu: str = "") -> str:
    """The one status at 1 of a (check, gpu) state set; every status must be present, the others at 0."""
    states = {labels["status"]: v for labels, v in series(text, "gpudiag_check_status", check=check, gpu=gpu)}
    assert set(states) == STATUSES, states
    (current,) = [status for status, v in states.items() if v == 1]
    assert sorted(states.values()) == [0, 0, 0, 0, 1]
    return current


# -- the state set ----------------------------------------------------------------------------------------------


def test_check_status_has_every_status_and_the_gpus_identity():
    snapshot = nvidia_h200_node()
    ref0 = DeviceRef.of(snapshot.devices[0])
    text = render(snapshot, [CheckResult("ecc.uncorrected", Status.UNKNOWN, "could not read", ref0),
                             CheckResult("driver.loaded", Status.SKIP, "n/a")])
    assert (status_of(text, "ecc.uncorrected", "0"), status_of(text, "driver.loaded")) == ("unknown", "skip")
    assert {(labels["uuid"], labels["pci_bus_id"]) for labels, _ in series(text, "gpudiag_check_status", gpu="0")} == {
        (ref0.uuid, ref0.pci_bus_id)}
    # gpudiag_check_ok, kept for existing dashboards, reads the skip as 1 like a pass
    assert value(text, "gpudiag_check_ok", check="driver.loaded", gpu="") == 1


def test_a_healthy_node_has_no_status_but_pass_and_skip():
    from gpudiag.checks import run_checks

    snapshot = nvidia_h200_node()
    text = render(snapshot, run_checks(snapshot))
    current = {labels["status"] for labels, v in series(text, "gpudiag_check_status") if v == 1}
    assert current <= {"pass", "skip", "warn"} and "pass" in current


# -- the node-level GPU count -----------------------------------------------------------------------------------


def test_node_gpus_is_there_even_when_no_gpu_is():
    text = render(NodeSnapshot())
    assert value(text, "gpudiag_node_gpus", source="pci_bus") == 0
    assert value(text, "gpudiag_node_gpus", source="answering") == 0


@pytest.mark.parametrize("make, expected", [(nvidia_h200_node, 2), (lambda: cpx_partitioned(amd_mi300x_node()), 8)])
def test_node_gpus_counts_physical_gpus(make, expected):
    snapshot = make()
    text = render(snapshot)
    assert value(text, "gpudiag_node_gpus", source="answering") == expected  # CPX partitions are not GPUs
    assert value(text, "gpudiag_node_gpus", source="pci_bus") == len(snapshot.pci_gpus)


def test_node_gpus_answering_leaves_out_a_gpu_that_did_not_answer():
    snapshot = nvidia_h200_node()
    snapshot.devices[1].reachable = False
    assert value(render(snapshot), "gpudiag_node_gpus", source="answering") == 1


# -- check: zero GPUs where the profile expects some is a verdict ----------------------------------------------


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_on_a_bare_node_against_a_profile_fails_instead_of_nothing_probed(capsys, caplog, tmp_path):
    (tmp_path / "sys").mkdir()  # no GPU on the bus, no vendor library
    with library_missing():
        code, out, err = _run(capsys, "check", "--root", str(tmp_path), "--json", "--profile", "h200-8x")
    report = json.loads(out)
    assert (code, report["status"]) == (1, "fail")
    (count,) = [r for r in report["results"] if r["check"] == "inventory.gpu_count"]
    assert (count["status"], count["expected"], count["observed"]) == ("fail", 8, {"pci_bus": 0, "enumerated": 0})
    assert count["action"] == "drain" and count["fault_code"] == "GPUDIAG-INVENTORY-GPU-COUNT"
    assert "gpudiag: error" not in err and "nothing could be probed" in caplog.text  # said, not as the verdict


def test_check_on_a_bare_node_without_expectations_still_exits_3(capsys, tmp_path):
    (tmp_path / "sys").mkdir()
    with library_missing():
        code, out, err = _run(capsys, "check", "--root", str(tmp_path), "--json")
    assert code == 3 and json.loads(out)["status"] != "fail"
    assert "gpudiag: error: nothing could be probed" in err


def test_check_on_a_bare_node_against_a_baseline_fails(capsys, tmp_path):
    golden = tmp_path / "golden.json"
    assert _run(capsys, "baseline", "--replay", str(REPO / "tests/fixtures/h200x2/snapshot.json"),
                "--output", str(golden))[0] == 0
    (tmp_path / "sys").mkdir()
    with library_missing():
        code, out, _ = _run(capsys, "check", "--root", str(tmp_path), "--json", "--baseline", str(golden))
    assert code == 1
    assert any(r["check"] == "baseline.inventory" and r["status"] == "fail" for r in json.loads(out)["results"])


def test_check_with_the_driver_up_and_no_gpu_left_fails_against_the_profile(capsys, tmp_path):
    node = FakeNode.hgx_h200(0)  # NVML initialises and enumerates nothing: every GPU fell off the bus
    fake_root(tmp_path, node)
    with installed(node):
        code, out, _ = _run(capsys, "check", "--root", str(tmp_path), "--json", "-p", "expected_gpu_count=8")
    assert code == 1
    assert [r["status"] for r in json.loads(out)["results"] if r["check"] == "inventory.gpu_count"] == ["fail"]


# -- textfile ---------------------------------------------------------------------------------------------------


def test_textfile_judges_a_gpu_less_node_against_its_profile(capsys, tmp_path):
    (tmp_path / "sys").mkdir()
    target = tmp_path / "gpudiag.prom"
    with library_missing():
        code = cli.main(["textfile", "--root", str(tmp_path), "--output", str(target), "--profile", "h200-8x"])
    assert code == 0  # a verdict was written: the file, not the exit code, carries it
    text = target.read_text()
    assert status_of(text, "inventory.gpu_count") == "fail"
    assert value(text, "gpudiag_check_ok", check="inventory.gpu_count", gpu="") == 0
    assert (
        value(text, "gpudiag_node_gpus", source="pci_bus") == value(text, "gpudiag_node_gpus", source="answering") == 0
    )
    # without the profile the same node has nothing to fail against: skip, which check_ok reads as 1
    with library_missing():
        assert cli.main(["textfile", "--root", str(tmp_path), "--output", str(target)]) == 3
    text = target.read_text()
    assert status_of(text, "inventory.gpu_count") == "skip"
    assert value(text, "gpudiag_check_ok", check="inventory.gpu_count", gpu="") == 1


def test_textfile_takes_profile_overrides_and_a_baseline(tmp_path):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path / "root", node)
    target = tmp_path / "gpudiag.prom"
    with installed(node):
        code = cli.main(["textfile", "--root", str(tmp_path / "root"), "--output", str(target), "--timeout", "5",
                         "--profile", "h200-8x", "-p", "expected_gpu_count=2"])
    assert code == 0
    assert status_of(target.read_text(), "inventory.gpu_count") == "pass"  # the false-alarm side: 2 of 2 pass


@pytest.mark.parametrize("command", ["textfile", "serve"])
def test_a_bad_profile_is_a_usage_error_before_anything_runs(capsys, tmp_path, command):
    extra = ["--output", str(tmp_path / "x.prom")] if command == "textfile" else ["--listen", "127.0.0.1:0"]
    code, out, err = _run(capsys, command, *extra, "-p", "no_such_setting=1")
    assert (code, out) == (2, "")
    assert err.startswith("gpudiag: error:") and "no_such_setting" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.prom").exists()


# -- serve ------------------------------------------------------------------------------------------------------


def test_the_exporter_shows_the_last_gpu_going(tmp_path):
    """Both GPUs fall off the bus while `serve` runs against a profile expecting two."""
    node = FakeNode.hgx_h200(2)
    tree = fake_root(tmp_path, node)
    expectations = load_expectations("h200-8x", ["expected_gpu_count=2"])
    with installed(node):
        collector = Collector(CollectOptions(root=tmp_path, timeout_seconds=1))
        exporter = ServeDaemon("127.0.0.1:0", WebConfig(), collector.collect, 0.1, 1,
                            judge=judge_against(expectations)).start()
        try:
            def scrape(path="/metrics"):
                with urllib.request.urlopen(exporter.url + path, timeout=5) as response:
                    return response.read().decode()

            text = wait_for(lambda: (lambda t: t if "gpudiag_check_status{" in t else None)(scrape()), timeout=10)
            assert status_of(text, "inventory.gpu_count") == "pass"
            assert value(text, "gpudiag_node_gpus", source="answering") == 2
            for gpu in node.gpus:
                tree.path(f"sys/bus/pci/devices/{normalize_pci_bus_id(gpu.bus_id)}").unlink()
            node.gpus.clear()

            def gpu_less():
                body = scrape()
                return body if value(body, "gpudiag_node_gpus", source="pci_bus") == 0 and value(
                    body, "gpudiag_node_gpus", source="answering") == 0 else None

            text = wait_for(gpu_less, timeout=10)
            assert status_of(text, "inventory.gpu_count") == "fail"
            assert value(text, "gpudiag_check_ok", check="inventory.gpu_count", gpu="") == 0
            # NVML still lists the GPUs it enumerated at start, lost: down, not gone
            assert [v for _, v in series(text, "gpudiag_device_up")] == [0, 0]
            assert scrape("/healthz").startswith("ok")  # readiness: the exporter collects; the verdict is in metrics
        finally:
            exporter.stop()
            collector.close()


def test_gpudiag_serve_takes_the_profile_options(tmp_path):
    """The real command line: `gpudiag serve --profile NAME -p KEY=VALUE` on a node with no GPU left."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.exporter_node", str(tmp_path), "0", "--", "--listen", "127.0.0.1:0",
         "--interval", "0.5", "--timeout", "2", "--profile", "h200-8x", "-p", "expected_gpu_count=4"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        url = re.search(r"serving (\S+)/metrics", proc.stderr.readline()).group(1)

        def judged():
            try:
                body = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
            except OSError:
                return None
            return body if "gpudiag_check_status{" in body else None

        text = wait_for(judged, timeout=20)
        assert status_of(text, "inventory.gpu_count") == "fail"
        assert all(name != "gpudiag_device_up" for name, _, _ in parse(text))  # no per-GPU series to count()
        assert value(text, "gpudiag_node_gpus", source="pci_bus") == value(text, "gpudiag_node_gpus",
                                                                            source="answering") == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_lints_the_metrics_of_a_node_without_gpus(tmp_path):
    (tmp_path / "sys").mkdir()
    target = tmp_path / "gpudiag.prom"
    with library_missing():
        cli.main(["textfile", "--root", str(tmp_path), "--output", str(target), "--profile", "h200-8x"])
    done = subprocess.run(["promtool", "check", "metrics"], input=target.read_text(), capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (apt-get install prometheus)")
@pytest.mark.slow
def test_a_real_prometheus_raises_no_gpu_left_from_gpudiag_serve(tmp_path):
    """The shipped rules, evaluated by a real Prometheus over a real `gpudiag serve` on a node with no GPU: the
    alert goes pending at once (it fires after its `for: 2m`), and the one for another vendor's library does not."""
    from tests.e2e.test_prometheus import query, start_prometheus, stop
    from tools.alert_rules import alert_groups, alert_rule_files

    exporter = subprocess.Popen(
        [sys.executable, "-m", "tests.support.exporter_node", str(tmp_path / "root"), "0", "--", "--listen",
         "127.0.0.1:0", "--interval", "0.5", "--timeout", "2"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    prometheus = None
    try:
        target = re.search(r"serving https?://(\S+)/metrics", exporter.stderr.readline()).group(1)
        prometheus, api = start_prometheus(tmp_path, {
            "global": {"evaluation_interval": "1s"}, "rule_files": [str(f) for f in alert_rule_files()],
            "scrape_configs": [{"job_name": "gpudiag", "scrape_interval": "1s", "scrape_timeout": "1s",
                                "static_configs": [{"targets": [target]}]}]})

        def pending():
            try:
                found = query(api, 'ALERTS{alertname="GpudiagNoGpuLeft"}')
            except OSError:
                return None  # Prometheus still starting
            return found or None

        (alert,) = wait_for(pending, timeout=60, interval=0.5)
        assert alert["metric"]["instance"] == target and alert["metric"]["alertstate"] == "pending"
        # the AMD libraries gpudiag tried on this bare node are down (backend_up 0), and yet no library alert
        rules = {r["alert"]: r["expr"] for g in alert_groups() for r in g["rules"]}
        assert query(api, 'gpudiag_backend_up{vendor="amd"} == 0')
        assert query(api, rules["GpudiagBackendDown"]) == []
    finally:
        if prometheus is not None:
            stop(prometheus)
        stop(exporter)
