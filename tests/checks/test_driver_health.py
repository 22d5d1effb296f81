"""The driver's own health verdicts (issue 9, items 3 and 4), end to end over the fake libnvidia-ml: the NVSwitch
fabric state (topology.fabric), the recovery action (driver.recovery_action), SRAM ECC (ecc.sram) and unrepairable
memory (memory.unrepairable). Each fault is read through the real pynvml, judged, and checked in `gpudiag check
--json` (status, GPU, action, exit code) and in the exporter's series; the healthy side must pass or skip, never
fail or go unknown."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pynvml
import pytest

from gpudiag.checks import run_checks
from gpudiag.cli.app import main
from gpudiag.expect import Expectations
from gpudiag.model import NodeSnapshot, Status
from gpudiag.model.recording import load_snapshot, save_snapshot
from gpudiag.probe import procfs
from gpudiag.probe.collector import CollectOptions, collect
from tests.support.exporter import series, value
from tests.support.fakes.fake_nvml import FakeGpu, FakeNode, installed
from tests.support.nvidia_node import sysfs_for
from tests.support.paths import FIXTURES
from tests.support.probe_nvml import probe, probe_one

SURVEY = FIXTURES / "h200" / "nvml-health-survey.json"
NEW_CHECKS = ("driver.recovery_action", "ecc.sram", "memory.unrepairable", "topology.fabric")
HOUR = 3600.0


@pytest.fixture
def booted(monkeypatch):
    """The host booted `seconds` before now (the live machine's boot time, probe/procfs.py; the grace needs control)."""

    def set_uptime(seconds: float) -> None:
        monkeypatch.setattr(procfs, "boot_time", lambda: time.time() - seconds)

    set_uptime(HOUR)
    return set_uptime


def check_json(node: FakeNode, root: Path, capsys, *extra: str) -> tuple[int, dict]:
    sysfs_for(node, root)
    with installed(node):
        code = main(["check", "--json", "--root", str(root), "--only", ",".join(NEW_CHECKS), *extra])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


def result_of(report: dict, check: str, gpu: int) -> dict:
    (found,) = [r for r in report["results"] if r["check"] == check and r["device"] and r["device"]["index"] == gpu]
    return found


def textfile(node: FakeNode, tmp_path: Path) -> str:
    root = tmp_path / "root"
    sysfs_for(node, root)
    target = tmp_path / "gpudiag.prom"
    with installed(node):
        assert main(["textfile", "--output", str(target), "--root", str(root), "--timeout", "5"]) == 0
    return target.read_text()


def judged(node: FakeNode, tmp_path: Path, check: str, expect: Expectations | None = None) -> dict[int, object]:
    sysfs_for(node, tmp_path)
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path, read_kernel_log=False))
    return {r.device.index: r for r in run_checks(snapshot, expect, only=[check]) if r.device is not None}


# -- healthy: the recorded answers and the default fakes ------------------------------------------------------


def _recorded_h200() -> FakeGpu:
    """A GPU answering what the lab's 1x H200 (a VM slice, driver 580.159.04) answered (nvml-health-survey.json)."""
    answers = json.loads(SURVEY.read_text())["devices"][0]
    gpu = FakeGpu()
    fabric = answers["fabric_v"]["value"]
    gpu.health.fabric_state, gpu.health.fabric_status = fabric["state"], fabric["status"]
    gpu.health.fabric_health_mask, gpu.health.fabric_health_summary = fabric["healthMask"], fabric["healthSummary"]
    gpu.health.unrepairable_memory = answers["unrepairable_memory"]["value"]
    gpu.health.sram = {k: v for k, v in answers["sram_ecc_status"]["value"].items() if k != "version"}
    (action,) = [value for field_id, code, _, value in answers["fields_health"]["value"] if field_id == 230]
    gpu.health.recovery_action = action
    return gpu


def test_recorded_h200_answers_pass_or_skip_never_unknown(tmp_path, capsys, booted):
    code, report = check_json(FakeNode(gpus=[_recorded_h200()]), tmp_path, capsys)
    assert code == 0
    statuses = {r["check"]: r["status"] for r in report["results"]}
    assert statuses == {"driver.recovery_action": "pass", "ecc.sram": "pass", "memory.unrepairable": "pass",
                        "topology.fabric": "skip"}
    fabric = result_of(report, "topology.fabric", 0)
    assert "not part of an NVSwitch fabric" in fabric["message"]


def test_healthy_hgx_fabric_passes_and_exports_completed(tmp_path, capsys, booted):
    node = FakeNode.hgx_h200(2)
    code, report = check_json(node, tmp_path / "check", capsys)
    assert code == 0 and report["status"] == "pass"
    fabric = result_of(report, "topology.fabric", 1)
    assert fabric["status"] == "pass" and fabric["observed"]["state"] == "completed"
    text = textfile(FakeNode.hgx_h200(2), tmp_path)
    assert value(text, "gpudiag_gpu_fabric_state", gpu="1", state="completed") == 1
    assert value(text, "gpudiag_gpu_fabric_state", gpu="1", state="not_started") == 0
    assert value(text, "gpudiag_gpu_recovery_action", gpu="0", action="none") == 1
    assert value(text, "gpudiag_gpu_recovery_action", gpu="0", action="gpu_reset") == 0
    assert value(text, "gpudiag_gpu_unrepairable_memory", gpu="0") == 0
    assert value(text, "gpudiag_gpu_sram_threshold_exceeded", gpu="0") == 0
    assert value(text, "gpudiag_gpu_ecc_block_errors_total", gpu="0", block="sram", severity="uncorrected") == 0
    assert value(text, "gpudiag_gpu_ecc_block_errors_total", gpu="0", block="dram", severity="uncorrected") == 0
    assert not series(text, "gpudiag_gpu_fabric_health_summary")  # the 580 driver on H200 reports no summary
    assert value(text, "gpudiag_check_ok", check="topology.fabric", gpu="0") == 1


def test_pcie_card_without_fabric_skips_and_exports_no_fabric_series(tmp_path):
    text = textfile(FakeNode(gpus=[FakeGpu()]), tmp_path)  # a lone GPU: NOT_SUPPORTED
    assert not series(text, "gpudiag_gpu_fabric_state")
    assert value(text, "gpudiag_check_ok", check="topology.fabric", gpu="0") == 1


# -- item 3: the fabric ---------------------------------------------------------------------------------------


def test_fabric_manager_down_fails_that_gpu_with_the_fm_remediation_and_exit_1(tmp_path, capsys, booted):
    node = FakeNode.hgx_h200(4)
    node.gpus[2].health.fabric_state = pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED
    code, report = check_json(node, tmp_path / "check", capsys)
    assert code == 1 and report["status"] == "fail"
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert [(r["check"], r["device"]["index"]) for r in failed] == [("topology.fabric", 2)]
    (result,) = failed
    assert result["action"] == "drain" and result["fault_code"] == "GPUDIAG-FABRIC-NOT-STARTED"
    for hint in ("systemctl status nvidia-fabricmanager", "/var/log/fabricmanager.log", "nv-fabricmanager --version",
                 "nvidia-smi -q -i 2 | grep -A8 Fabric", "802"):
        assert hint in result["remediation"]
    assert result["observed"]["state"] == "not_started" and result["observed"]["seconds_since_boot"] >= 3599
    node = FakeNode.hgx_h200(4)
    node.gpus[2].health.fabric_state = pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED
    text = textfile(node, tmp_path)
    assert value(text, "gpudiag_gpu_fabric_state", gpu="2", state="not_started") == 1
    assert value(text, "gpudiag_gpu_fabric_state", gpu="2", state="completed") == 0
    assert value(text, "gpudiag_check_ok", check="topology.fabric", gpu="2") == 0
    assert value(text, "gpudiag_check_ok", check="topology.fabric", gpu="1") == 1


def test_fabric_in_progress_fails_past_the_grace_and_warns_within_it(tmp_path, booted):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].health.fabric_state = pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
    late = judged(node, tmp_path / "late", "topology.fabric")
    assert late[0].status == Status.FAIL and late[0].fault_code == "GPUDIAG-FABRIC-NOT-COMPLETED"
    assert late[1].status == Status.PASS
    booted(60)  # just booted: the fabric manager may not be done yet
    early = judged(node, tmp_path / "early", "topology.fabric")
    assert early[0].status == Status.WARN and early[0].action == "watch"
    assert "60 s after boot" in early[0].message or "59 s after boot" in early[0].message
    strict = judged(node, tmp_path / "strict", "topology.fabric", Expectations(fabric_setup_grace_seconds=30))
    assert strict[0].status == Status.FAIL


def test_fabric_not_set_up_with_the_boot_time_unknown_fails_rather_than_being_excused(tmp_path, monkeypatch):
    def no_boot_time() -> float:
        raise PermissionError("/proc/stat")

    monkeypatch.setattr(procfs, "boot_time", no_boot_time)
    node = FakeNode.hgx_h200(2)
    node.gpus[1].health.fabric_state = pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
    results = judged(node, tmp_path, "topology.fabric")
    assert results[1].status == Status.FAIL and "time since boot unknown" in results[1].message
    assert results[1].observed["seconds_since_boot"] is None


@pytest.mark.parametrize("status, mask, summary, finding", [
    (pynvml.NVML_ERROR_NOT_READY, 0, 0, "completed with an error (NVML_ERROR_NOT_READY)"),
    (pynvml.NVML_SUCCESS, 0, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY, "health summary unhealthy"),
    (pynvml.NVML_SUCCESS, 0, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY, "limited_capacity"),
    # degraded bandwidth TRUE (bits 0-1 = 1), other fields FALSE / configuration NONE
    (pynvml.NVML_SUCCESS, 0x1 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY,
     "degraded bandwidth: true"),
    (pynvml.NVML_SUCCESS, 2 | 2 << 2 | 2 << 4 | 2 << 6 | 5 << 8, 0, "incorrect configuration: insufficient_nvlinks"),
])
def test_completed_fabric_with_a_failure_status_or_bad_health_fails(tmp_path, booted, status, mask, summary, finding):
    node = FakeNode.hgx_h200(2)
    health = node.gpus[1].health
    health.fabric_status, health.fabric_health_mask, health.fabric_health_summary = status, mask, summary
    results = judged(node, tmp_path, "topology.fabric")
    assert results[0].status == Status.PASS
    assert results[1].status == Status.FAIL and results[1].action == "drain", results[1].message
    assert finding in results[1].message


def test_healthy_mask_and_summary_pass(tmp_path, booted):
    node = FakeNode.hgx_h200(2)
    for gpu in node.gpus:  # every health field reported and fine, partition assigned, GFM connected
        gpu.health.fabric_health_mask = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8 | 1 << 12 | 1 << 14
        gpu.health.fabric_health_summary = pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
    results = judged(node, tmp_path, "topology.fabric")
    assert {r.status for r in results.values()} == {Status.PASS}
    assert results[0].observed["health"]["degraded_bandwidth"] == "false"


def test_fabric_info_falls_back_to_older_structs_and_calls(booted):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].health.fabric_struct_version = 2  # an R535-era driver: v3 is a version mismatch
    old = probe(node)
    assert old.devices[0].driver_health.fabric.state == "completed"
    assert old.devices[0].driver_health.fabric.health_summary is None and not old.devices[0].errors
    node = FakeNode.hgx_h200(2, missing_symbols={"nvmlDeviceGetGpuFabricInfoV"})  # R525: unversioned call only
    oldest = probe(node)
    assert oldest.devices[0].driver_health.fabric.state == "completed" and not oldest.devices[0].errors
    assert oldest.lib.calls["nvmlDeviceGetGpuFabricInfo"] == 2
    node = FakeNode.hgx_h200(2, missing_symbols={"nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"})
    none = probe(node)
    assert none.devices[0].driver_health.fabric is None and not none.devices[0].errors


def test_driver_without_fabric_calls_skips_not_unknown(tmp_path, booted):
    node = FakeNode.hgx_h200(2, missing_symbols={"nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"})
    results = judged(node, tmp_path, "topology.fabric")
    assert {r.status for r in results.values()} == {Status.SKIP}


def test_a_failing_fabric_call_is_unknown_not_pass(tmp_path, booted):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].failures["nvmlDeviceGetGpuFabricInfoV"] = pynvml.NVML_ERROR_NO_PERMISSION
    results = judged(node, tmp_path, "topology.fabric")
    assert results[0].status == Status.UNKNOWN and results[1].status == Status.PASS


# -- item 4: the recovery action, SRAM, unrepairable memory -----------------------------------------------------


@pytest.mark.parametrize("action, expected", [
    (pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "reset"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, "reboot"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, "drain"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET, "reset"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN, "drain"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_BUS_RESET, "reset"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT, "reboot"),
])
def test_a_recovery_action_fails_that_gpu_with_the_action_the_driver_asked(tmp_path, capsys, booted, action, expected):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].health.recovery_action = action
    code, report = check_json(node, tmp_path / "check", capsys)
    assert code == 1
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert [(r["check"], r["device"]["index"], r["action"]) for r in failed] == [
        ("driver.recovery_action", 1, expected)]
    assert failed[0]["fault_code"].startswith("GPUDIAG-DRIVER-RECOVERY-")
    assert "Recovery Action" in failed[0]["remediation"]
    assert result_of(report, "driver.recovery_action", 0)["status"] == "pass"
    text = textfile(node, tmp_path)
    name = {v: k for k, v in vars(pynvml).items() if k.startswith("NVML_GPU_RECOVERY_ACTION_")}[action]
    assert value(text, "gpudiag_gpu_recovery_action", gpu="1",
                 action=name.removeprefix("NVML_GPU_RECOVERY_ACTION_").lower()) == 1
    assert value(text, "gpudiag_gpu_recovery_action", gpu="1", action="none") == 0
    assert value(text, "gpudiag_check_ok", check="driver.recovery_action", gpu="1") == 0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT])
def test_a_driver_without_field_230_skips_not_fails_or_unknown(tmp_path, capsys, booted, code):
    node = FakeNode.hgx_h200(2)
    for gpu in node.gpus:
        gpu.field_errors[pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = code
    exit_code, report = check_json(node, tmp_path / "check", capsys)
    assert exit_code == 0
    assert {r["status"] for r in report["results"] if r["check"] == "driver.recovery_action"} == {"skip"}
    text = textfile(node, tmp_path)
    assert not series(text, "gpudiag_gpu_recovery_action")


def test_recovery_action_is_read_in_the_existing_field_batch():
    probed = probe(FakeNode.hgx_h200(2))
    assert probed.lib.calls["nvmlDeviceGetFieldValues"] == 2  # one batch per GPU, field 230 included
    assert probed.devices[0].driver_health.recovery_action == "none"


@pytest.mark.parametrize("sram, check_word", [
    ({"aggregateUncParity": 1, "aggregateUncBucketL2": 1}, "1 uncorrectable SRAM ECC error(s) (1 l2)"),
    ({"volatileUncSecDed": 2, "aggregateUncSecDed": 2, "aggregateUncBucketSm": 2}, "2 uncorrectable SRAM"),
    ({"bThresholdExceeded": 1, "aggregateCor": 5000}, "field-diagnostic threshold"),
])
def test_sram_uncorrectable_errors_are_an_rma(tmp_path, capsys, booted, sram, check_word):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].health.sram = sram
    code, report = check_json(node, tmp_path / "check", capsys)
    assert code == 1
    result = result_of(report, "ecc.sram", 0)
    assert result["status"] == "fail" and result["action"] == "rma" and check_word in result["message"]
    assert result_of(report, "ecc.sram", 1)["status"] == "pass"
    text = textfile(node, tmp_path)
    assert value(text, "gpudiag_gpu_ecc_block_errors_total", gpu="0", block="sram", severity="uncorrected") == (
        sram.get("aggregateUncParity", 0) + sram.get("aggregateUncSecDed", 0))
    assert value(text, "gpudiag_gpu_sram_threshold_exceeded", gpu="0") == sram.get("bThresholdExceeded", 0)


def test_dram_uncorrectable_keeps_the_row_remap_verdicts(tmp_path, booted):
    node = FakeNode.hgx_h200(2)
    gpu = node.gpus[0]
    gpu.ecc_volatile_uncorrected = gpu.ecc_aggregate_uncorrected = gpu.health.dram_uncorrected = 1
    gpu.remap_pending = True
    sysfs_for(node, tmp_path)
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path, read_kernel_log=False))
    results = {r.check: r for r in run_checks(snapshot, only=["ecc", "memory"]) if r.device and r.device.index == 0}
    assert results["ecc.uncorrected"].action == "reset"
    assert results["ecc.uncorrected"].observed["by_block"]["dram"] == {"corrected": 0, "uncorrected": 1}
    assert results["memory.row_remap_pending"].action == "reset"
    assert results["ecc.sram"].status == Status.PASS and results["memory.unrepairable"].status == Status.PASS


def test_unrepairable_memory_is_an_rma(tmp_path, capsys, booted):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].health.unrepairable_memory = 1
    code, report = check_json(node, tmp_path / "check", capsys)
    assert code == 1
    result = result_of(report, "memory.unrepairable", 1)
    assert (result["status"], result["action"], result["fault_code"]) == ("fail", "rma", "GPUDIAG-MEMORY-UNREPAIRABLE")
    assert value(textfile(node, tmp_path), "gpudiag_gpu_unrepairable_memory", gpu="1") == 1


def test_a_driver_without_the_health_calls_skips_them(tmp_path, booted):
    """An R535-era driver: no SRAM status, no unrepairable flag, no field 230, no fabric call."""
    missing = {"nvmlDeviceGetSramEccErrorStatus", "nvmlDeviceGetUnrepairableMemoryFlag_v1",
               "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"}
    node = FakeNode.hgx_h200(2, missing_symbols=missing)
    for gpu in node.gpus:
        gpu.field_errors[pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = pynvml.NVML_ERROR_INVALID_ARGUMENT
    sysfs_for(node, tmp_path)
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path, read_kernel_log=False))
    results = run_checks(snapshot, only=list(NEW_CHECKS))
    assert {r.status for r in results} == {Status.SKIP}
    assert not any(d.errors for d in snapshot.devices)


def test_a_snapshot_recorded_before_these_fields_skips_saying_so(tmp_path):
    gpu = probe_one(FakeGpu())
    gpu.driver_health = None
    results = run_checks(NodeSnapshot(devices=[gpu]), only=list(NEW_CHECKS))
    assert {r.status for r in results} == {Status.SKIP}
    assert all("older gpudiag" in r.message for r in results)


def test_a_recorded_snapshot_replays_the_driver_health_and_its_verdicts(tmp_path, capsys, booted):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].health.fabric_state = pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED
    node.gpus[0].health.recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    sysfs_for(node, tmp_path / "root")
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path / "root", read_kernel_log=False))
    save_snapshot(snapshot, tmp_path / "node.json")
    assert load_snapshot(tmp_path / "node.json").devices[1].driver_health == snapshot.devices[1].driver_health
    code = main(["check", "--json", "--replay", str(tmp_path / "node.json"), "--only", ",".join(NEW_CHECKS)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert result_of(report, "topology.fabric", 1)["status"] == "fail"
    assert result_of(report, "driver.recovery_action", 0)["action"] == "reboot"
