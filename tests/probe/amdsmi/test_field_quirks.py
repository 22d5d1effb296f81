"""AMD false alarms on healthy nodes (issue 21, item 6), through the real amdsmi 7.0.2 wrapper over the fake
libamd_smi.so and the amdgpu sysfs tree: each quirk passes on the healthy node and the true fault beside it still
fails (tests/support/fakes/amd_node.py cites each quirk's source)."""

from __future__ import annotations

import pytest

from gpudiag.checks import run_checks
from gpudiag.expect.profile import load_expectations
from gpudiag.model import Status
from gpudiag.probe.collector import CollectOptions, collect
from tests.probe.amdsmi.test_end_to_end import node_root, not_passing, only
from tests.probe.amdsmi.test_real_nodes import PROFILE, check, on
from tests.support.fakes import amd_node
from tests.support.fakes.fake_amdsmi import installed

# ---------------------------------------------------------------------------------------------------------------
# Violation counters that count every tick (idle MI300X, amdgpu DKMS 6.10.5)


def test_an_idle_mi300x_whose_violation_counters_count_every_tick_is_not_thermally_throttled(tmp_path):
    node = amd_node.mi300x_node()
    amd_node.violation_counters_without_throttling(node)
    snapshot, results = check(tmp_path, node)

    assert {d.clocks.throttle_reasons == ["socket_thermal", "vr_thermal", "hbm_thermal"]
            for d in snapshot.devices} == {True}  # what amdsmi says
    assert not_passing(results) == []
    result = on(results, "thermal.throttle", 3)
    # the sensor closest to its limit is the HBM (39 °C of 95 °C); the junction reads 42 °C of 100 °C
    assert "nothing throttles the GPU: vram 39°C of its 95°C slowdown limit, 180 W of 750 W, 0% busy" in result.message
    assert "residency counters for socket_thermal, vr_thermal, hbm_thermal equal the accumulation counter" in (
        result.message)
    assert result.observed["quirk"] == "violation counters without throttling"
    assert result.observed["residency_share"] == {"socket_thermal": 1.0, "vr_thermal": 1.0, "hbm_thermal": 1.0}


def test_a_hot_gpu_with_the_same_flags_is_still_thermally_throttled(tmp_path):
    node = amd_node.mi300x_node()
    amd_node.violation_counters_without_throttling(node)
    node.gpus[5].temperatures["hotspot"].current = 97  # 3 °C under its 100 °C slowdown limit
    _, results = check(tmp_path, node)
    assert ("thermal.throttle", Status.WARN, 5) in not_passing(results)
    assert "thermally throttled: socket_thermal" in on(results, "thermal.throttle", 5).message
    assert on(results, "thermal.throttle", 4).status == Status.PASS


def test_prochot_on_a_hot_gpu_still_fails(tmp_path):
    node = amd_node.mi300x_node()
    node.gpus[2].violations = {"active_prochot_thrm"}
    node.gpus[2].temperatures["hotspot"].current = 99
    _, results = check(tmp_path, node)
    assert on(results, "thermal.throttle", 2).status == Status.FAIL


def test_a_busy_gpu_held_below_its_clock_is_throttled_even_when_cool(tmp_path):
    node = amd_node.mi300x_node()
    gpu = node.gpus[1]
    gpu.violations, gpu.gfx_activity_percent = {"active_socket_thrm"}, 97
    gpu.clocks_mhz[0] = (1300, 2100)  # 62 % of its peak engine clock under load
    gpu.temperatures["hotspot"].current = 70
    _, results = check(tmp_path, node)
    assert on(results, "thermal.throttle", 1).status == Status.WARN


def test_a_throttle_flag_that_cannot_be_checked_against_temperature_stands():
    from gpudiag.checks.amd_throttle import unbacked
    from tests.support.snapshots import amd_mi300x_node

    device = amd_mi300x_node().devices[0]
    device.clocks.throttle_reasons = ["socket_thermal"]
    device.temperatures = {}
    assert unbacked(device, ["socket_thermal"]) is None


# ---------------------------------------------------------------------------------------------------------------
# gpu_metrics v1.9: judged from what the library returned, not from the version


def test_gpu_metrics_v1_9_that_the_library_decodes_passes(tmp_path):
    """ROCm 7.2's libamd_smi reads MI350 / VF v1.9 tables: every value arrives, so nothing is skewed."""
    node = amd_node.mi355x_node()
    amd_node.old_gpu_metrics(node, (1, 9))
    node.metrics_decoded_up_to = (1, 9)
    snapshot, results = check(tmp_path, node)

    assert not_passing(results) == []
    metrics = only(results, "driver.gpu_metrics_version")
    assert {r.status for r in metrics} == {Status.PASS} and "v1.9, decoded by amdsmi" in metrics[0].message
    assert all(d.power.draw_watts == 180 and d.pcie.replay_count == 0 for d in snapshot.devices)


def test_gpu_metrics_v1_9_on_a_vf_whose_library_decodes_it_passes(tmp_path):
    node = amd_node.vf_guest(amd_node.mi355x_node())
    amd_node.old_gpu_metrics(node, (1, 9))
    node.metrics_decoded_up_to = (1, 9)
    _, results = check(tmp_path, node)
    assert {r.status for r in only(results, "driver.gpu_metrics_version")} == {Status.PASS}


# ---------------------------------------------------------------------------------------------------------------
# amdsmi without libdrm: garbage BDFs (ROCm/rocm-systems PR 2987, PR 8427)


def _calls(tmp_path, node):
    root, kernel_log = node_root(tmp_path, node)
    with installed(node) as library:
        snapshot = collect(CollectOptions(root=root, kernel_log_file=kernel_log, timeout_seconds=20))
    return snapshot, run_checks(snapshot, PROFILE), library.calls


def test_garbage_bdfs_cost_only_what_libdrm_gives_and_say_libdrm(tmp_path):
    node = amd_node.mi300x_node()
    node.libdrm_missing = True
    snapshot, results, calls = _calls(tmp_path, node)

    assert snapshot.backend("amdsmi").available
    assert [d.source for d in snapshot.devices] == ["amdsmi"] * 8
    assert [d.pci_bus_id for d in snapshot.devices] == [g.bdf for g in node.gpus]  # from the KFD location ID
    (library,) = only(results, "driver.library")[:1]
    assert library.status == Status.WARN and library.fault_code == "GPUDIAG-DRIVER-LIBRARY-DEGRADED"
    assert "libdrm_amdgpu" in library.message and "695f7570672f:31:05.7" in library.message
    # The checks on what amdsmi reads without libdrm are judged on every GPU; those on what it lacks say why.
    for check_id in ("ecc.uncorrected", "thermal.temperature", "power.limit", "topology.links_up",
                     "memory.bad_pages", "kernel_log.amdgpu_errors"):
        assert {r.status for r in only(results, check_id)} == {Status.PASS}, check_id
    unknown = [r for r in results if r.status == Status.UNKNOWN]
    assert unknown and all("libdrm_amdgpu" in str(r.observed) for r in unknown)
    assert calls.count("amdsmi_init") == calls.count("amdsmi_shut_down") == 1


def test_the_same_node_with_libdrm_has_nothing_unknown(tmp_path):
    snapshot, results, calls = _calls(tmp_path, amd_node.mi300x_node())
    assert not any(r.status == Status.UNKNOWN for r in results)
    assert calls.count("amdsmi_init") == calls.count("amdsmi_shut_down") == 1


@pytest.mark.parametrize("failure", ["no handles", "enumeration raises"])
def test_amdsmi_init_is_balanced_by_shut_down_on_every_failed_open(tmp_path, monkeypatch, failure):
    from gpudiag.probe.amdsmi import backend as amdsmi_backend

    node = amd_node.mi300x_node()
    if failure == "no handles":
        node.failing_calls = {"amdsmi_get_processor_handles": 7}
    else:
        def broken(processors):
            raise RuntimeError("a wrapper slip while grouping partitions")
        monkeypatch.setattr(amdsmi_backend, "_group_partitions", broken)
    snapshot, _, calls = _calls(tmp_path, node)
    assert not snapshot.backend("amdsmi").available
    assert calls.count("amdsmi_init") >= 1 and calls.count("amdsmi_shut_down") == calls.count("amdsmi_init")


# ---------------------------------------------------------------------------------------------------------------
# The default bad-page threshold, per part (amdgpu_ras_validate_threshold)


@pytest.mark.parametrize("mp0, reserved, status, threshold", [
    ((13, 0, 6), 150, Status.FAIL, 128),  # MI300X
    ((13, 0, 12), 150, Status.FAIL, 128),
    ((13, 0, 14), 150, Status.PASS, 256),  # twice the reserved VRAM: 150 is not near 256
    ((13, 0, 14), 240, Status.WARN, 256),
    (None, 150, Status.FAIL, 128),  # no IP discovery in sysfs: the lower MI300/MI350-series default
])
def test_the_default_bad_page_threshold_follows_the_parts_mp0_version(tmp_path, mp0, reserved, status, threshold):
    node = amd_node.mi300x_node()
    node.root = False  # only root reads the driver's own value
    for gpu in node.gpus:
        gpu.mp0_version = mp0
    amd_node.reserved_bad_pages(node, 6, reserved)
    snapshot, results = check(tmp_path, node)
    assert snapshot.devices[6].memory_health.bad_page_threshold == threshold
    result = on(results, "memory.bad_pages", 6)
    assert result.status == status
    part = f"MP0 {'.'.join(map(str, mp0))}" if mp0 else "gfx942 (its MP0 version unknown"
    assert f"threshold {threshold} is amdgpu's default for {part}" in result.expected


def test_the_drivers_own_threshold_wins_over_the_default(tmp_path):
    node = amd_node.mi300x_node()
    for gpu in node.gpus:
        gpu.mp0_version, gpu.bad_page_threshold = (13, 0, 14), 64  # amdgpu.bad_page_threshold=64, read as root
    amd_node.reserved_bad_pages(node, 0, 70)
    snapshot, results = check(tmp_path, node, load_expectations())
    assert snapshot.devices[0].memory_health.bad_page_threshold_source == "driver"
    assert on(results, "memory.bad_pages", 0).status == Status.FAIL
