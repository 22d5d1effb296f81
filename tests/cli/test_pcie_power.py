"""The downtrained-link verdict end to end: real pynvml over the fake libnvidia-ml, `gpudiag check` JSON and exit
code, and the exporter's series (issue: an idle GPU at Gen4 in P0 must not pass, an idle P8 GPU at Gen1 must not
fail)."""

from __future__ import annotations

import json

from gpudiag.cli import app as cli
from gpudiag.cli.app import main
from tests.support.exporter import value
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for


def _check(capsys, node, root):
    with installed(node):
        code = cli.main(["check", "--root", str(root), "--format", "json"])
    report = json.loads(capsys.readouterr()[0])
    return code, {(r["check"], r["device"]["index"]): r for r in report["results"] if r["device"]}


def test_idle_gpu_in_p0_trained_at_gen4_fails_the_node(capsys, tmp_path):
    node = FakeNode.hgx_h200(2)  # idle: gpu_idle clock-event reason, 0 % utilisation, P0 (as the lab's H200s)
    node.gpus[1].pcie_downtrained(generation=4, width=16)
    sysfs_for(node, tmp_path)
    code, results = _check(capsys, node, tmp_path)
    generation = results[("pcie.link_generation", 1)]
    assert code == 1
    assert (generation["status"], generation["action"], generation["device"]["pci_bus_id"]) == (
        "fail", "drain", "0000:3b:00.0")
    assert generation["observed"]["performance_state"] == "P0"
    assert results[("pcie.link_generation", 0)]["status"] == "pass"
    assert results[("pcie.link_width", 1)]["status"] == "pass"


def test_idle_gpus_in_p8_at_gen1_do_not_fail(capsys, tmp_path):
    node = FakeNode.hgx_h200(2)
    for gpu in node.gpus:
        gpu.pcie_downtrained(generation=1, width=16)
        gpu.performance_state = 8
    sysfs_for(node, tmp_path)
    code, results = _check(capsys, node, tmp_path)
    pcie = [r for (check, _), r in results.items() if check.startswith("pcie.")]
    assert all(r["status"] in ("pass", "warn") for r in pcie), [(r["check"], r["status"]) for r in pcie]
    assert results[("pcie.link_generation", 0)]["status"] == "warn"
    assert "--level 2" in results[("pcie.link_generation", 0)]["remediation"]
    assert not any(r["status"] == "fail" and r["check"].startswith("pcie.") for r in results.values())
    assert code == 0  # warnings only: the node passes


def test_the_exporter_marks_the_downtrained_p0_link_not_ok(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].pcie_downtrained(generation=4, width=16)
    sysfs_for(node, tmp_path / "root")
    target = tmp_path / "gpudiag.prom"
    with installed(node):
        assert main(["textfile", "--output", str(target), "--root", str(tmp_path / "root"), "--timeout", "5"]) == 0
    text = target.read_text()
    assert value(text, "gpudiag_check_ok", check="pcie.link_generation", gpu="1") == 0
    assert value(text, "gpudiag_check_ok", check="pcie.link_generation", gpu="0") == 1
