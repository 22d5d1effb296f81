"""The services family (issue 34, done means b): the probe part reads systemd's unit state through `systemctl show`
(a fake systemctl under the fake root, printing what systemd 255 prints for `systemctl show -p
Id,LoadState,ActiveState,SubState,NRestarts` on a unit that runs, one that failed and one not installed) and /proc,
/dev; the checks judge it against the profile; the metrics and the fleet fact come from the family's own modules."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from gpudiag.checks import DRIFT_FACTS, run_checks
from gpudiag.expect import DEFAULT_EXPECTATIONS, with_settings
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.node_metrics import add_snapshot
from gpudiag.model import NodeSnapshot
from gpudiag.model.device import DriverHealth, FabricInfo
from gpudiag.probe.collector import CollectOptions
from gpudiag.probe.services import part
from tests.support.snapshots import amd_mi300x_node, nvidia_h200_node

SHOW = {
    "nvidia-fabricmanager.service": ("loaded", "failed", "failed", "4"),
    "nvidia-persistenced.service": ("loaded", "active", "running", "0"),
    "nvidia-imex.service": ("not-found", "inactive", "dead", "0"),
    "rdc.service": ("not-found", "inactive", "dead", "0"),
}


def fake_systemctl(root: Path, show: dict = SHOW, exit_code: int = 0, sleep: float = 0) -> None:
    blocks = "\n".join(f"Id={unit}\nLoadState={load}\nActiveState={active}\nSubState={sub}\nNRestarts={restarts}\n"
                       for unit, (load, active, sub, restarts) in show.items())
    program = root / "usr" / "bin" / "systemctl"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!/bin/sh\nsleep {sleep}\ncat <<'EOF'\n{blocks}EOF\nexit {exit_code}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)


def read(root: Path, until: float = 5.0) -> NodeSnapshot:
    snapshot = NodeSnapshot()
    options = CollectOptions(root=root)
    part.store(snapshot, part.collect(snapshot, options, time.monotonic() + until), None)
    return snapshot


def results(snapshot: NodeSnapshot, expectations=DEFAULT_EXPECTATIONS) -> dict:
    return {r.check: r for r in run_checks(snapshot, expectations, only=["services"])}


def in_fabric(snapshot: NodeSnapshot) -> NodeSnapshot:
    for device in snapshot.devices:
        device.driver_health = DriverHealth(fabric=FabricInfo(state="completed", status="success"))
    return snapshot


def test_systemctl_show_is_read_unit_by_unit(tmp_path):
    fake_systemctl(tmp_path)
    reading = read(tmp_path).parts["services"]
    assert reading["error"] is None
    assert reading["units"]["nvidia-fabricmanager.service"] == {"load": "loaded", "active": "failed", "sub": "failed",
                                                               "restarts": 4}


@pytest.mark.parametrize("exit_code,sleep,why", [(1, 0, "exited 1"), (0, 3, "did not answer")])
def test_a_systemctl_that_fails_or_hangs_leaves_the_units_unread_and_the_checks_unknown(tmp_path, exit_code, sleep,
                                                                                         why):
    fake_systemctl(tmp_path, exit_code=exit_code, sleep=sleep)
    snapshot = nvidia_h200_node()
    started = time.monotonic()
    snapshot.parts["services"] = read(tmp_path, until=1.0).parts["services"]
    assert time.monotonic() - started < 2.5  # bounded by the deadline, not by systemctl
    assert why in snapshot.parts["services"]["error"]
    assert results(snapshot)["services.persistenced"].status.value == "unknown"


def test_fabricmanager_down_on_an_nvswitch_node_fails_beside_the_fabric_state(tmp_path):
    fake_systemctl(tmp_path)
    snapshot = in_fabric(nvidia_h200_node())
    snapshot.parts["services"] = read(tmp_path).parts["services"]
    found = results(snapshot)
    fm = found["services.fabricmanager"]
    assert (fm.status.value, fm.fault_code) == ("fail", "GPUDIAG-SERVICES-UNIT-DOWN")
    assert fm.observed["fabric_state"] == {"0": "completed", "1": "completed"}
    assert found["services.persistenced"].status.value == "pass"
    # not expected (the profile, not installed): what systemd says is shown, nothing is judged against it
    assert found["services.imex"].status.value == "pass" and found["services.rdc"].status.value == "pass"


def test_fabricmanager_on_a_node_without_a_fabric_is_not_expected(tmp_path):
    fake_systemctl(tmp_path)
    snapshot = nvidia_h200_node()
    snapshot.parts["services"] = read(tmp_path).parts["services"]
    assert results(snapshot)["services.fabricmanager"].status.value == "pass"


def test_imex_where_the_profile_expects_it_and_restarts_warn(tmp_path):
    show = dict(SHOW, **{"nvidia-imex.service": ("loaded", "active", "running", "7")})
    fake_systemctl(tmp_path, show)
    snapshot = nvidia_h200_node()
    snapshot.parts["services"] = read(tmp_path).parts["services"]
    imex = results(snapshot, with_settings(DEFAULT_EXPECTATIONS, imex_expected=True))["services.imex"]
    assert (imex.status.value, imex.fault_code) == ("warn", "GPUDIAG-SERVICES-RESTARTING")


def test_peermem_where_expected_is_read_from_proc_modules(tmp_path):
    fake_systemctl(tmp_path)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "modules").write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia 2 1 nvidia_uvm, Live 0x0\n")
    snapshot = nvidia_h200_node()
    snapshot.parts["services"] = read(tmp_path).parts["services"]
    expectations = with_settings(DEFAULT_EXPECTATIONS, peermem_expected=True)
    assert results(snapshot, expectations)["services.peermem"].status.value == "fail"
    assert results(snapshot)["services.peermem"].status.value == "skip"


def test_amd_device_nodes_and_rdc_where_installed(tmp_path):
    show = dict(SHOW, **{"rdc.service": ("loaded", "inactive", "dead", "0")})
    fake_systemctl(tmp_path, show)
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    (tmp_path / "dev" / "dri" / "renderD128").write_text("")
    snapshot = amd_mi300x_node()
    snapshot.parts["services"] = read(tmp_path).parts["services"]
    found = results(snapshot)
    assert found["services.amd_devices"].status.value == "fail"  # no /dev/kfd, one render node for 8 GPUs
    rdc = found["services.rdc"]
    assert (rdc.status.value, rdc.fault_code) == ("fail", "GPUDIAG-SERVICES-RDC-DOWN")
    assert found["services.persistenced"].status.value == "pass"  # not an NVIDIA node: not expected


def test_a_snapshot_without_the_reading_skips_rather_than_passes():
    assert {r.status.value for r in results(nvidia_h200_node()).values()} == {"skip"}


def test_the_metrics_and_the_fleet_fact(tmp_path):
    fake_systemctl(tmp_path)
    snapshot = read(tmp_path)
    fs = MetricSet()
    add_snapshot(fs, snapshot)
    body = fs.exposition().decode()
    assert 'gpudiag_service_unit_active{unit="nvidia-fabricmanager.service"} 0' in body
    assert 'gpudiag_service_unit_restarts_total{unit="nvidia-fabricmanager.service"} 4' in body
    assert "nvidia-imex.service" not in body  # not installed: no series
    fact = DRIFT_FACTS["services.fabricmanager"]
    assert fact.read({"unit": "nvidia-fabricmanager.service", "active": "failed"}) == \
        "nvidia-fabricmanager.service=failed"
    assert fact.read({"unit": ["x"]}) is None


def test_a_profile_value_out_of_the_choices_is_refused():
    from gpudiag.expect import ExpectationError

    with pytest.raises(ExpectationError, match="fabricmanager_expected"):
        with_settings(DEFAULT_EXPECTATIONS, fabricmanager_expected="sometimes")


def test_a_node_without_systemctl_skips_the_units_and_one_whose_systemctl_failed_does_not(tmp_path):
    snapshot = nvidia_h200_node()
    snapshot.parts["services"] = read(tmp_path).parts["services"]  # no systemctl under the root
    assert results(snapshot)["services.persistenced"].status.value == "skip"
