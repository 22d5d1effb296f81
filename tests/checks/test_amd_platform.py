"""The AMD-only checks (gpudiag/checks/amd_platform.py) at their boundaries, on the MI300X snapshot:
driver.gpu_metrics_version, inventory.partitions and pcie.link_recovery.

Expected values come from the documented contract: node-scraper's L0 -> Recovery thresholds (warn above 1, error
above 3 a day since boot, nodescraper/plugins/inband/amdsmi/analyzer_args.py), NAKs judged like the replay count
(warn above Expectations.pcie_replay_warn_count = 100), CPX = 8 partitions on MI300X, MI300A not judged.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from gpudiag.model import Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, cpx_partitioned, for_gpu, run

METRICS_SKEW = ("the driver's gpu_metrics v1.9 is newer than this amdsmi decodes (v1.8): upgrade amd-smi-lib")
# A snapshot recorded earlier and judged now (`check --snapshot`): its own collection time, not the clock, bounds the
# span the cumulative counters cover.
COLLECTED_AT = "2024-06-01T00:00:00+00:00"
DAY = 86400.0


# -- driver.gpu_metrics_version ---------------------------------------------------------------------------------


def test_a_table_amdsmi_decodes_passes():
    snap = amd_mi300x_node()
    snap.devices[0].metrics_version = "1.8"
    result = for_gpu(run(snap, "driver.gpu_metrics_version"), 0)
    assert result.status == Status.PASS
    assert result.message == f"{snap.devices[0].label}: gpu_metrics v1.8, decoded by amdsmi"


def test_no_table_version_is_a_skip_not_a_pass():
    snap = amd_mi300x_node()
    snap.devices[0].metrics_version = None  # e.g. the sysfs fallback, which does not decode gpu_metrics
    result = for_gpu(run(snap, "driver.gpu_metrics_version"), 0)
    assert result.status == Status.SKIP
    assert result.message == "gpu_metrics table version is not supported on GPU 0 (0000:05:00.0) (AMD Instinct MI300X)"


def test_a_newer_table_warns_naming_exactly_the_values_that_vanished():
    snap = amd_mi300x_node()
    for device in snap.devices[:3]:
        device.metrics_version = "1.9"
        device.unsupported["amdsmi.amdsmi_get_gpu_metrics_info"] = METRICS_SKEW
    # GPU 0: power, XGMI and throttle status gone, the PCIe replay counter still read (0 is a value, not absent).
    first = snap.devices[0]
    first.power.draw_watts, first.links, first.clocks.throttle_reasons = None, [], None
    first.pcie.replay_count = 0
    # GPU 1: only the PCIe counters gone; throttle status read as "none active" ([] is a value, not absent).
    snap.devices[1].pcie.replay_count = None
    snap.devices[1].clocks.throttle_reasons = []
    results = run(snap, "driver.gpu_metrics_version")

    zero, one, two = (for_gpu(results, i) for i in range(3))
    assert_actionable(zero, Status.WARN)
    assert zero.observed["missing"] == ["power draw", "XGMI link status", "throttle/violation status"]
    assert zero.message == (f"{first.label}: gpu_metrics v1.9 is newer than amdsmi decodes; checks on power draw, "
                            f"XGMI link status, throttle/violation status skip")
    assert zero.remediation.startswith(METRICS_SKEW + ". Install the amd-smi-lib")
    assert zero.action == "watch"
    assert one.observed["missing"] == ["PCIe counters"]
    # Nothing vanished (yet): the warning still stands, in general words.
    assert two.observed["missing"] == [] and "checks on its values skip" in two.message
    assert {for_gpu(results, i).status for i in range(3, 8)} == {Status.SKIP}  # no table version read


# -- inventory.partitions ---------------------------------------------------------------------------------------


def test_mi300a_is_not_judged_against_the_mi300x_partition_count():
    """MI300A has 6 XCDs: 6 CPX partitions is its full count, not 6 of 8 (AMD "GPU partitioning" docs)."""
    snap = cpx_partitioned(amd_mi300x_node(), partitions=6)
    for device in snap.devices:
        device.name = "AMD Instinct MI300A"
    results = run(snap, "inventory.partitions")
    assert len(results) == 8
    assert {r.status for r in results} == {Status.SKIP}
    # The mode is read; the skip must not claim it is unsupported.
    assert results[0].message == ("GPU 0 (0000:05:00.0): an MI300A's partition count is not judged (6 XCDs, not the "
                                  "8 of MI300X / MI325X / MI355X)")


def test_a_mi300x_with_six_cpx_partitions_fails_for_the_two_missing():
    snap = cpx_partitioned(amd_mi300x_node(), partitions=6)
    results = run(snap, "inventory.partitions")
    assert {r.status for r in results} == {Status.FAIL}
    assert "6 of 8 CPX partitions enumerated; missing: 6, 7" in results[0].message


@pytest.mark.parametrize("mode", [None, "XPX"], ids=["no-mode", "unknown-mode"])
def test_a_partition_mode_that_is_not_read_or_not_known_skips(mode):
    snap = amd_mi300x_node()
    for device in snap.devices:
        device.physical_pci_bus_id = device.pci_bus_id  # enumerated by amdsmi, as SPX shows it
        device.compute_partition = mode
    results = run(snap, "inventory.partitions")
    assert len(results) == 8 and {r.status for r in results} == {Status.SKIP}
    assert results[0].message.startswith("compute partition mode is not supported on GPU 0")


def test_the_sysfs_fallback_does_not_enumerate_partitions_so_it_skips():
    results = run(amd_mi300x_node(), "inventory.partitions")  # no physical_pci_bus_id: not read through amdsmi
    assert {r.status for r in results} == {Status.SKIP} and len(results) == 8
    assert results[0].message == "GPU 0 (0000:05:00.0): partitions are enumerated only through amdsmi"


def test_spx_shows_one_partition_and_passes():
    snap = amd_mi300x_node()
    for device in snap.devices:
        device.physical_pci_bus_id = device.pci_bus_id
    result = for_gpu(run(snap, "inventory.partitions"), 0)
    assert result.status == Status.PASS and result.message.endswith(": 1 SPX partition(s)")


# -- pcie.link_recovery -----------------------------------------------------------------------------------------


def _recovery(counters: dict[str, int], days_up: float | None = None):
    snap = amd_mi300x_node()
    if days_up is not None:
        snap.collected_at = COLLECTED_AT
        snap.host.boot_time = datetime.fromisoformat(COLLECTED_AT).timestamp() - days_up * DAY
    snap.devices[2].pcie.error_counters = dict(counters)
    results = run(snap, "pcie.link_recovery")
    assert {r.status for r in results if r.device.index != 2} == {Status.PASS}
    return for_gpu(results, 2)


def test_no_recovery_or_nak_counter_is_a_skip_not_a_pass():
    result = _recovery({})
    assert result.status == Status.SKIP
    assert result.message == ("PCIe recovery and NAK counters is not supported on GPU 2 (0000:46:00.0) (AMD Instinct "
                              "MI300X)")


def test_counters_lost_to_a_newer_gpu_metrics_table_skip_saying_why():
    snap = amd_mi300x_node()
    snap.devices[2].pcie.error_counters = {}
    snap.devices[2].unsupported["amdsmi.amdsmi_get_gpu_metrics_info"] = METRICS_SKEW
    result = for_gpu(run(snap, "pcie.link_recovery"), 2)
    assert result.status == Status.SKIP
    assert result.message == ("PCIe recovery and NAK counters is not supported on GPU 2 (0000:46:00.0) (AMD Instinct "
                              f"MI300X): {METRICS_SKEW}")


def test_a_healthy_link_passes_with_its_counts():
    result = _recovery({"l0_to_recovery": 1, "nak_sent": 0, "nak_received": 0})
    assert result.status == Status.PASS and result.remediation == ""
    assert result.message == "GPU 2 (0000:46:00.0): PCIe link stable (1 recoveries, 0 NAKs since the driver loaded)"


def test_recoveries_are_judged_without_nak_counters():
    result = _recovery({"l0_to_recovery": 2})
    assert_actionable(result, Status.WARN)
    assert result.message == ("GPU 2 (0000:46:00.0): PCIe link retraining: 2 L0->Recovery transitions since the "
                              "driver loaded")


def test_naks_are_judged_without_a_recovery_counter():
    assert _recovery({"nak_received": 101}).status == Status.WARN
    assert _recovery({"nak_received": 100}).status == Status.PASS


@pytest.mark.parametrize("days_up, count, status", [
    (None, 3, Status.WARN), (None, 4, Status.FAIL),  # boot time unknown: one day, error above 3
    (10, 30, Status.WARN), (10, 31, Status.FAIL),  # ten days up: error above 30
])
def test_recovery_error_limit_scales_with_the_days_since_boot(days_up, count, status):
    result = _recovery({"l0_to_recovery": count, "nak_sent": 0, "nak_received": 0}, days_up)
    assert_actionable(result, status)
    assert result.action == ("drain" if status == Status.FAIL else "watch")
    assert ("more than" in result.message) == (status == Status.FAIL)
    if days_up is not None:
        assert result.observed["days_since_boot"] == days_up


@pytest.mark.parametrize("sent, received, status", [(60, 40, Status.PASS), (60, 41, Status.WARN)])
def test_naks_against_the_replay_warn_count(sent, received, status):
    result = _recovery({"l0_to_recovery": 0, "nak_sent": sent, "nak_received": received})
    assert result.status == status
    if status == Status.WARN:
        assert result.message == ("GPU 2 (0000:46:00.0): PCIe link retraining: 101 PCIe NAKs since the driver "
                                  "loaded")


def test_naks_do_not_lower_a_recovery_failure():
    result = _recovery({"l0_to_recovery": 31, "nak_sent": 101, "nak_received": 0}, days_up=10)
    assert_actionable(result, Status.FAIL)
    assert result.message == ("GPU 2 (0000:46:00.0): PCIe link retraining: 31 L0->Recovery transitions (more than "
                              "30); 101 PCIe NAKs since the driver loaded")
    assert result.action == "drain"
