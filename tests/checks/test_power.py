import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, ProbeError, Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


def test_power_brake_fails_pointing_at_psu_and_cable():
    snap = nvidia_h200_node()
    snap.devices[1].clocks.throttle_reasons = ["hw_slowdown", "hw_power_brake"]
    results = run(snap, "power.brake")
    brake = for_gpu(results, 1)
    assert_actionable(brake, Status.FAIL)
    assert "PSU" in brake.remediation and "cable" in brake.remediation
    assert for_gpu(results, 0).status == Status.PASS


def test_power_capped_at_the_limit_under_load_is_normal():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    device.clocks.throttle_reasons = ["sw_power_cap"]
    device.power.draw_watts = 699.0
    draw = for_gpu(run(snap, "power.draw"), 0)
    assert draw.status == Status.PASS and "normal under load" in draw.message
    assert for_gpu(run(snap, "power.brake"), 0).status == Status.PASS
    assert for_gpu(run(snap, "thermal.throttle"), 0).status == Status.PASS


def test_limit_below_default_warns_with_the_restore_command():
    snap = nvidia_h200_node()
    snap.devices[0].power.limit_watts = 500.0
    result = for_gpu(run(snap, "power.limit"), 0)
    assert_actionable(result, Status.WARN)
    assert "nvidia-smi -i 0 -pl 700" in result.remediation
    assert result.observed == {"limit_watts": 500.0, "default_limit_watts": 700.0}

    amd = amd_mi300x_node()
    amd.devices[7].power.limit_watts = 600.0
    assert "amd-smi set -g 7 --power-cap 750" in for_gpu(run(amd, "power.limit"), 7).remediation
    # 690 W of 700 W is within the default ratio (95%).
    snap.devices[0].power.limit_watts = 690.0
    assert for_gpu(run(snap, "power.limit"), 0).status == Status.PASS
    strict = dataclasses.replace(Expectations(), power_limit_warn_ratio=1.0)
    assert for_gpu(run(snap, "power.limit", strict), 0).status == Status.WARN


def test_draw_well_over_the_limit_warns():
    snap = nvidia_h200_node()
    snap.devices[1].power.draw_watts = 800.0
    result = for_gpu(run(snap, "power.draw"), 1)
    assert_actionable(result, Status.WARN)
    assert result.observed["draw_watts"] == 800.0


def test_missing_power_values_skip():
    snap = amd_mi300x_node()
    snap.devices[0].power.default_limit_watts = None
    snap.devices[0].power.draw_watts = None
    assert for_gpu(run(snap, "power.limit"), 0).status == Status.SKIP
    assert for_gpu(run(snap, "power.draw"), 0).status == Status.SKIP


def test_limit_at_exactly_the_warn_floor_passes_and_just_under_warns():
    # 95 % of the default 700 W is 665 W: the floor itself is allowed, a watt under it is a cap.
    snap = nvidia_h200_node()
    snap.devices[0].power.limit_watts = 665.0
    assert for_gpu(run(snap, "power.limit"), 0).status == Status.PASS
    snap.devices[0].power.limit_watts = 664.0
    assert for_gpu(run(snap, "power.limit"), 0).status == Status.WARN


def test_limit_against_the_profile_passes_at_the_tolerance_and_fails_past_it():
    # The profile's 700 W ± 5 W: 695 W and 705 W are the edges that pass; 694 W is drift.
    profile = dataclasses.replace(Expectations(), expected_power_limit_watts=700.0)
    snap = nvidia_h200_node()
    for watts, status in ((695.0, Status.PASS), (705.0, Status.PASS), (694.0, Status.FAIL), (706.0, Status.FAIL)):
        snap.devices[0].power.limit_watts = watts
        result = for_gpu(run(snap, "power.limit", profile), 0)
        assert result.status == status, watts
    assert result.expected == "700 W ± 5 W"


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py) found unpinned.


def test_power_brake_names_the_vendor_query_that_shows_it():
    snap = nvidia_h200_node()
    snap.devices[1].clocks.throttle_reasons = ["hw_slowdown", "hw_power_brake"]
    brake = for_gpu(run(snap, "power.brake"), 1)
    assert "Confirm with `nvidia-smi -q -i 1 -d POWER,PERFORMANCE` (HW Power Brake Slowdown: Active)." \
        in brake.remediation
    amd = amd_mi300x_node()
    amd.devices[2].clocks.throttle_reasons = ["hw_power_brake"]
    assert "Confirm with `amd-smi metric --power -g 2`" in for_gpu(run(amd, "power.brake"), 2).remediation


def test_power_brake_without_throttle_reasons_skips_or_is_unknown_on_a_failed_read():
    snap = amd_mi300x_node()
    snap.devices[0].clocks.throttle_reasons = None
    result = for_gpu(run(snap, "power.brake"), 0)
    assert result.status == Status.SKIP
    assert result.message == "throttle reasons is not supported on GPU 0 (0000:05:00.0) (AMD Instinct MI300X)"
    snap.devices[0].errors.append(ProbeError("amdsmi.amdsmi_get_violation_status", ErrorKind.ERROR,
                                             "AMDSMI_STATUS_IO"))
    assert_actionable(for_gpu(run(snap, "power.brake"), 0), Status.UNKNOWN)


def test_profile_limit_without_a_limit_reading_skips():
    profile = dataclasses.replace(Expectations(), expected_power_limit_watts=700.0)
    snap = nvidia_h200_node()
    snap.devices[0].power.limit_watts = None
    result = for_gpu(run(snap, "power.limit", profile), 0)
    assert result.status == Status.SKIP
    assert result.message == "power limit is not supported on GPU 0 (0000:19:00.0) (NVIDIA H200)"


def test_profile_limit_within_tolerance_of_the_gpu_maximum_can_still_be_set():
    # The H200's maximum is 700 W and the tolerance 5 W: a profile of 705 W is the maximum as read, so the advice is
    # to set it; a profile of 706 W asks for more than the board allows: another SKU or a VBIOS cap.
    snap = nvidia_h200_node()
    snap.devices[0].power.limit_watts = 600.0
    at_edge = for_gpu(run(snap, "power.limit", Expectations(expected_power_limit_watts=705.0)), 0)
    assert_actionable(at_edge, Status.FAIL)
    assert at_edge.remediation.startswith("Set it with `nvidia-smi -i 0 -pl 705`")
    beyond = for_gpu(run(snap, "power.limit", Expectations(expected_power_limit_watts=706.0)), 0)
    assert_actionable(beyond, Status.FAIL)
    assert beyond.remediation.startswith("The GPU cannot be set that high (its maximum is 700 W)")


def test_draw_notes_a_power_cap_only_when_one_is_active():
    snap = nvidia_h200_node()  # busy, no throttle reason
    draw = for_gpu(run(snap, "power.draw"), 0)
    assert draw.status == Status.PASS
    assert draw.message == "GPU 0 (0000:19:00.0) draws 585.4 W of 700 W"
    assert draw.observed["power_capped"] is False
    amd = amd_mi300x_node()
    amd.devices[3].clocks.throttle_reasons = ["ppt_power"]
    draw = for_gpu(run(amd, "power.draw"), 3)
    assert draw.message == "GPU 3 (0000:65:00.0) draws 142 W of 750 W (power-capped at its limit: normal under load)"
    assert draw.observed["power_capped"] is True


def test_draw_at_exactly_the_ceiling_passes_and_above_it_warns():
    # 125 % of 700 W is 875 W exactly (a ratio a binary float holds), so the edge is the edge.
    ratio = Expectations(power_over_limit_warn_ratio=1.25)
    snap = nvidia_h200_node()
    snap.devices[0].power.draw_watts = 875.0
    result = for_gpu(run(snap, "power.draw", ratio), 0)
    assert result.status == Status.PASS and result.expected == "<= 875 W (125% of the limit)"
    snap.devices[0].power.draw_watts = 875.5
    assert_actionable(for_gpu(run(snap, "power.draw", ratio), 0), Status.WARN)
