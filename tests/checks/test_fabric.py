"""topology.fabric and driver.recovery_action judged on snapshots (issue 16): each verdict at its boundary, with the
exact status, action and fault code. The end-to-end side (the fake libnvidia-ml, `gpudiag check --json`, the
exporter) is in tests/checks/test_driver_health.py."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpudiag.expect import Expectations
from gpudiag.model import DriverHealth, FabricInfo, Status
from tests.support.snapshots import for_gpu, nvidia_h200_node, run

F, W, P, S, U = Status.FAIL, Status.WARN, Status.PASS, Status.SKIP, Status.UNKNOWN
COLLECTED = "2026-11-30T11:00:00Z"  # nvidia_h200_node's collection time
COLLECTED_TS = datetime.fromisoformat(COLLECTED.replace("Z", "+00:00")).timestamp()
HEALTHY_MASK = {"degraded_bandwidth": "false", "route_recovery": "false", "route_unhealthy": "false",
                "access_timeout_recovery": "false", "incorrect_configuration": "none"}


def _fabric(uptime=3600.0, expect=None, collected_at=COLLECTED, **fields):
    snap = nvidia_h200_node()
    snap.collected_at = collected_at
    snap.host.boot_time = None if uptime is None else COLLECTED_TS - uptime
    values = dict(state="completed", status="success", status_code=0, clique_id=7,
                  cluster_uuid="c1a5e7e2-0000-4000-8000-000000000001", health=dict(HEALTHY_MASK))
    values.update(fields)
    snap.devices[0].driver_health = DriverHealth(recovery_action="none", fabric=FabricInfo(**values))
    return for_gpu(run(snap, "topology.fabric", expect), 0)


def _verdict(result):
    return result.status, result.action, result.fault_code


def test_a_healthy_fabric_passes_and_shows_what_the_driver_reported():
    result = _fabric()
    assert _verdict(result) == (P, "none", None)
    assert result.message.endswith("NVSwitch fabric set up (clique 7)")
    # fields the driver left empty (None, {}) are left out; the state comes first, then the time since boot
    assert result.observed == {"state": "completed", "seconds_since_boot": 3600, "status": "success",
                               "status_code": 0, "clique_id": 7,
                               "cluster_uuid": "c1a5e7e2-0000-4000-8000-000000000001", "health": HEALTHY_MASK}
    bare = _fabric(health={}, cluster_uuid=None, health_summary=None)
    assert bare.observed == {"state": "completed", "seconds_since_boot": 3600, "status": "success",
                             "status_code": 0, "clique_id": 7}


@pytest.mark.parametrize("state, code, what", [
    ("not_started", "GPUDIAG-FABRIC-NOT-STARTED", "the fabric manager has not started setting up its NVSwitch fabric"),
    ("in_progress", "GPUDIAG-FABRIC-NOT-COMPLETED", "its NVSwitch fabric is still being set up"),
])
@pytest.mark.parametrize("uptime, status", [(599.0, W), (600.0, F), (3600.0, F)])
def test_a_fabric_not_set_up_warns_within_the_grace_after_boot_and_fails_from_it(state, code, what, uptime, status):
    result = _fabric(uptime, state=state, status=None, status_code=None)
    assert result.observed["seconds_since_boot"] == round(uptime)
    if status == W:
        assert _verdict(result) == (W, "watch", "GPUDIAG-FABRIC-SETTING-UP")
        assert result.message.endswith(f"{what}, {uptime:.0f} s after boot (allowed 600 s)")
    else:
        assert _verdict(result) == (F, "drain", code)
        assert result.message.endswith(f"{what} {uptime:.0f} s after boot")
        assert "systemctl status nvidia-fabricmanager" in result.remediation
        assert result.remediation.endswith(
            "Confirm with `nvidia-smi -q -i 0 | grep -A8 Fabric` (State: Completed, Status: Success).")


def test_the_grace_comes_from_the_profile():
    strict = Expectations(fabric_setup_grace_seconds=30)
    assert _verdict(_fabric(29.0, strict, state="in_progress")) == (W, "watch", "GPUDIAG-FABRIC-SETTING-UP")
    assert _verdict(_fabric(30.0, strict, state="in_progress")) == (F, "drain", "GPUDIAG-FABRIC-NOT-COMPLETED")


@pytest.mark.parametrize("uptime, collected_at", [(None, COLLECTED), (60.0, ""), (60.0, "not a time")])
def test_a_fabric_not_set_up_with_the_time_since_boot_unknown_fails_rather_than_being_excused(uptime, collected_at):
    result = _fabric(uptime, collected_at=collected_at, state="in_progress")
    assert _verdict(result) == (F, "drain", "GPUDIAG-FABRIC-NOT-COMPLETED")
    assert result.message.endswith("its NVSwitch fabric is still being set up (time since boot unknown)")
    assert result.observed["seconds_since_boot"] is None


def test_a_boot_time_after_the_collection_counts_as_just_booted():
    # a clock stepped backwards: the uptime is clamped to 0, inside the grace
    result = _fabric(-30.0, state="in_progress")
    assert _verdict(result) == (W, "watch", "GPUDIAG-FABRIC-SETTING-UP")
    assert result.observed["seconds_since_boot"] == 0


def test_an_unknown_fabric_state_is_unknown_not_a_pass():
    result = _fabric(state="degraded_future_state")
    assert result.status == U
    assert "a fabric state gpudiag does not know (degraded_future_state)" in result.message


def test_a_completed_fabric_with_a_failure_status_fails():
    result = _fabric(status="NVML_ERROR_UNKNOWN", status_code=999)
    assert _verdict(result) == (F, "drain", "GPUDIAG-FABRIC-SETUP-FAILED")
    assert "the fabric set-up completed with an error (NVML_ERROR_UNKNOWN)" in result.message


@pytest.mark.parametrize("health, summary, finding", [
    ({"degraded_bandwidth": "true"}, None, "degraded bandwidth: true"),
    ({"route_recovery": "true"}, "healthy", "route recovery: true"),
    ({"route_unhealthy": "true"}, None, "route unhealthy: true"),
    ({"access_timeout_recovery": "true"}, None, "access timeout recovery: true"),
    ({"incorrect_configuration": "incompatible_gpu_fw"}, None, "incorrect configuration: incompatible_gpu_fw"),
    ({}, "unhealthy", "health summary unhealthy"),
    ({}, "limited_capacity", "health summary limited_capacity"),
    ({"degraded_bandwidth": "true"}, "limited_capacity", "health summary limited_capacity; degraded bandwidth: true"),
])
def test_a_set_up_but_unhealthy_fabric_fails(health, summary, finding):
    result = _fabric(health={**HEALTHY_MASK, **health}, health_summary=summary)
    assert _verdict(result) == (F, "drain", "GPUDIAG-FABRIC-UNHEALTHY")
    assert result.message.endswith(f"its NVSwitch fabric is set up but not healthy ({finding})")


@pytest.mark.parametrize("health, summary", [
    (HEALTHY_MASK, "healthy"), (HEALTHY_MASK, None), ({}, None),
    # not judged: partition assignment and the global fabric manager's connection (a GPU outside any partition is
    # normal on a shared-NVSwitch system)
    ({**HEALTHY_MASK, "partition_assigned": "false", "gfm_connected": "false"}, "healthy"),
])
def test_healthy_masks_and_summaries_pass(health, summary):
    assert _fabric(health=health, health_summary=summary).status == P


def test_no_fabric_to_set_up_or_no_reading_skips():
    assert _fabric(state="not_supported").status == S
    snap = nvidia_h200_node()
    snap.devices[0].driver_health = DriverHealth(recovery_action="none", fabric=None)
    assert for_gpu(run(snap, "topology.fabric"), 0).status == S  # a driver without the call
    snap.devices[0].driver_health = None
    assert for_gpu(run(snap, "topology.fabric"), 0).status == S  # a snapshot recorded by an older gpudiag


# ---------------------------------------------------------------------------------------------------------------
# driver.recovery_action: the driver's action mapped as NVIDIA "GPU Memory Error Management", Error Recovery and
# Response Flags, and nvml.h describe it (see gpudiag/checks/recovery.py)


def _recovery(action):
    snap = nvidia_h200_node()
    snap.devices[0].driver_health = DriverHealth(recovery_action=action)
    return for_gpu(run(snap, "driver.recovery_action"), 0)


@pytest.mark.parametrize("driver_action, ours, asks, todo", [
    ("gpu_reset", "reset", "a GPU reset", "Stop every process on the GPU and reset it (`nvidia-smi -r -i 0`)"),
    ("drain_and_reset", "reset", "draining peer-to-peer traffic, then a GPU reset",
     "Stop the processes that use peer-to-peer (NVLink/PCIe P2P) traffic with this GPU, then stop every process on "
     "the GPU and reset it (`nvidia-smi -r -i 0`)"),
    ("bus_reset", "reset", "a reset of the GPU's PCIe bus", "if the reset is refused, reboot the node"),
    ("node_reboot", "reboot", "a node reboot", "Drain the node and reboot it"),
    ("system_reboot", "reboot", "a system reboot", "Power-cycle it if a warm reboot does not clear it"),
    ("drain_p2p", "drain", "draining peer-to-peer traffic", "disable UVM persistence mode"),
    ("recover_imex_domain", "drain", "recovering its IMEX domain", "systemctl restart nvidia-imex"),
])
def test_each_recovery_action_fails_with_the_action_the_driver_asks(driver_action, ours, asks, todo):
    result = _recovery(driver_action)
    assert _verdict(result) == (F, ours, f"GPUDIAG-DRIVER-RECOVERY-{driver_action.upper().replace('_', '-')}")
    assert result.message.endswith(f"the driver requires {asks} before the GPU can be used again")
    assert todo in result.remediation and "Xid 154" in result.remediation
    assert result.observed == {"recovery_action": driver_action}


def test_an_action_gpudiag_does_not_know_still_fails_and_drains():
    result = _recovery("quantum_reset")
    assert _verdict(result) == (F, "drain", "GPUDIAG-DRIVER-RECOVERY-UNKNOWN")
    assert "an action gpudiag does not know (quantum_reset)" in result.message


def test_no_recovery_action_passes_and_an_unreported_one_skips():
    assert _verdict(_recovery("none")) == (P, "none", None)
    assert _recovery(None).status == S
