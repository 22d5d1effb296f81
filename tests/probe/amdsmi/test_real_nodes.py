"""AMD Instinct nodes as real MI300X / MI325X / MI355X nodes answer (gpudiag issues 9 and 15): the real collector
over the fake libamd_smi.so bent to each quirk seen on real nodes (tests/support/fakes/amd_node.py cites them), then the
real checks. Healthy nodes of every kind must pass with nothing unknown; each fault fails on its GPU."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import pytest

from gpudiag.checks import run_checks
from gpudiag.expect import Expectations
from gpudiag.expect.profile import load_expectations
from gpudiag.model import CheckResult, Status
from gpudiag.probe.collector import CollectOptions, collect
from tests.probe.amdsmi.test_end_to_end import node_root, not_passing, only
from tests.support.fakes import amd_node
from tests.support.fakes.amd_node import FakeAmdNode
from tests.support.fakes.fake_amdsmi import installed

# What an 8-GPU MI3xx profile asserts about links and ECC.
PROFILE = load_expectations(params=["expected_links_per_gpu=7", "expected_ecc_enabled=true"])


def check(tmp_path, node: FakeAmdNode, expect: Expectations = PROFILE):
    root, kernel_log = node_root(tmp_path, node)
    with installed(node):
        snapshot = collect(CollectOptions(root=root, kernel_log_file=kernel_log, timeout_seconds=20))
    return snapshot, run_checks(snapshot, expect)


def on(results: list[CheckResult], check_id: str, gpu: int) -> CheckResult:
    (result,) = [r for r in results if r.check == check_id and r.device is not None and r.device.index == gpu]
    return result


def _cpx(node: FakeAmdNode) -> FakeAmdNode:
    amd_node.cpx_mode(node)
    return node


def _cpx_function_zero(node: FakeAmdNode) -> FakeAmdNode:
    amd_node.cpx_mode(node)
    node.partitions_at_function_zero = True
    return node


def _metrics(version: tuple[int, int]) -> Callable[[FakeAmdNode], FakeAmdNode]:
    def apply(node: FakeAmdNode) -> FakeAmdNode:
        amd_node.old_gpu_metrics(node, version)
        return node
    return apply


def _non_root(node: FakeAmdNode) -> FakeAmdNode:
    node.root = False
    return node


HEALTHY = {
    "mi300x-metrics-1.8": (amd_node.mi300x_node, lambda n: n),
    "mi300x-metrics-1.6": (amd_node.mi300x_node, _metrics((1, 6))),
    "mi300x-cpx": (amd_node.mi300x_node, _cpx),
    "mi300x-cpx-function-zero": (amd_node.mi300x_node, _cpx_function_zero),
    "mi300x-vf": (amd_node.mi300x_node, amd_node.vf_guest),
    "mi300x-non-root": (amd_node.mi300x_node, _non_root),
    "mi325x": (amd_node.mi325x_node, lambda n: n),
    "mi355x": (amd_node.mi355x_node, lambda n: n),
    "mi355x-cpx": (amd_node.mi355x_node, _cpx),
    "mi355x-vf": (amd_node.mi355x_node, amd_node.vf_guest),
}


@pytest.mark.parametrize("kind", sorted(HEALTHY))
def test_healthy_node_of_each_kind_passes_with_nothing_unknown(tmp_path, kind):
    make, bend = HEALTHY[kind]
    snapshot, results = check(tmp_path, bend(make()))

    assert not_passing(results) == []
    assert all(d.errors == [] for d in snapshot.devices)
    # every GPU judged its ECC and its XGMI health (from XGMI_WAFL, as xgmi_error answers INVAL on these parts)
    physical = [d for d in snapshot.devices if not d.is_logical_partition]
    assert len(physical) == 8
    for device in physical:
        assert on(results, "ecc.uncorrected", device.index).status == Status.PASS
        assert on(results, "ecc.mode", device.index).status == Status.PASS
    if "vf" not in kind:
        assert {r.status for r in only(results, "topology.link_errors")} == {Status.PASS}
        assert {r.status for r in only(results, "memory.bad_pages")} == {Status.PASS}


def test_healthy_mi300x_judges_xgmi_health_from_xgmi_wafl_not_unknown(tmp_path):
    """Issue 9 item 2: amdsmi_gpu_xgmi_error_status answers INVAL on every healthy gfx942/gfx950 GPU."""
    _, results = check(tmp_path, amd_node.mi300x_node())
    for result in only(results, "topology.link_errors"):
        assert result.status == Status.PASS
        assert result.observed["xgmi_wafl"] == {"corrected": 0, "uncorrected": 0, "deferred": 0}


def test_uncorrectable_xgmi_wafl_errors_fail_that_gpu_with_a_reboot(tmp_path):
    node = amd_node.mi300x_node()
    amd_node.xgmi_wafl_errors(node, 3, uncorrected=2)
    _, results = check(tmp_path, node)

    # amdsmi's total ECC count includes the XGMI_WAFL block: ecc.uncorrected names where the errors are
    assert not_passing(results) == [("ecc.uncorrected", Status.FAIL, 3), ("topology.link_errors", Status.FAIL, 3)]
    assert "(in xgmi_wafl)" in on(results, "ecc.uncorrected", 3).message
    failure = on(results, "topology.link_errors", 3)
    assert failure.action == "reboot" and failure.fault_code == "GPUDIAG-FABRIC-XGMI-UNCORRECTABLE"
    assert "2 uncorrectable XGMI error(s)" in failure.message


def test_correctable_xgmi_wafl_errors_over_threshold_warn(tmp_path):
    node = amd_node.mi355x_node()
    amd_node.xgmi_wafl_errors(node, 5, corrected=500)
    _, results = check(tmp_path, node)
    assert not_passing(results) == [("topology.link_errors", Status.WARN, 5)]


def test_xgmi_error_status_still_judged_where_amdgpu_supports_it(tmp_path):
    node = amd_node.mi250x_node(2)
    node.gpus[1].xgmi_error_status = 2
    _, results = check(tmp_path, node, load_expectations())
    assert on(results, "topology.link_errors", 1).status == Status.WARN
    assert on(results, "topology.link_errors", 0).status == Status.PASS


@pytest.mark.parametrize("blocks, status", [((amd_node.BLOCK_UMC,), Status.UNKNOWN),
                                            ((amd_node.BLOCK_SDMA,), Status.WARN)])
def test_ecc_total_over_blocks_that_did_not_all_answer_is_not_a_clean_bill(tmp_path, blocks, status):
    """Issue 15 item 2: "Query currently inaccessible" → NOT_SUPPORTED per block, SUCCESS 0/0/0 in total."""
    node = amd_node.mi300x_node()
    amd_node.ras_inaccessible(node, 2, blocks)
    snapshot, results = check(tmp_path, node)

    assert snapshot.devices[2].ecc.volatile_uncorrected == 0  # what amdsmi's total says
    assert not_passing(results) == [("ecc.uncorrected", status, 2)]
    result = on(results, "ecc.uncorrected", 2)
    name = {amd_node.BLOCK_UMC: "umc", amd_node.BLOCK_SDMA: "sdma"}[blocks[0]]
    assert name in result.message and result.observed["unreadable_blocks"] == [name]
    assert "reset" in result.remediation


def test_inaccessible_xgmi_wafl_makes_xgmi_health_unknown_not_pass(tmp_path):
    node = amd_node.mi300x_node()
    amd_node.ras_inaccessible(node, 6, (amd_node.BLOCK_XGMI_WAFL,))
    _, results = check(tmp_path, node)
    assert ("topology.link_errors", Status.UNKNOWN, 6) in not_passing(results)


@pytest.mark.parametrize("mask_zero", [False, True])
def test_ras_switched_off_fails_ecc_mode_when_the_profile_expects_ecc(tmp_path, mask_zero):
    """Issue 15 item 7: no ras/features → NOT_SUPPORTED; mask 0 → API_FAILED. Neither is skip or unknown."""
    node = amd_node.mi300x_node()
    amd_node.ras_disabled(node, 4, mask_zero=mask_zero)
    snapshot, results = check(tmp_path, node)

    mode = on(results, "ecc.mode", 4)
    assert mode.status == Status.FAIL and mode.action == "reset"
    assert "ras_enable" in mode.remediation
    assert snapshot.devices[4].errors == []
    assert not_passing(results) == [("ecc.mode", Status.FAIL, 4)]


def test_ras_switched_off_in_the_sysfs_fallback_fails_too(tmp_path):
    node = amd_node.mi300x_node()
    node.library_present = False
    amd_node.ras_disabled(node, 4)
    _, results = check(tmp_path, node)
    assert on(results, "ecc.mode", 4).status == Status.FAIL


@pytest.mark.parametrize("root", [True, False])
def test_150_reserved_bad_pages_fail_as_root_and_as_non_root(tmp_path, root):
    """Issue 15 item 5: the threshold is root-only (debugfs); the MI300 default of 128 stands in, and says so."""
    node = amd_node.mi300x_node()
    node.root = root
    amd_node.reserved_bad_pages(node, 7, 150)
    _, results = check(tmp_path, node)

    assert not_passing(results) == [("memory.bad_pages", Status.FAIL, 7)]
    failure = on(results, "memory.bad_pages", 7)
    assert failure.action == "rma" and "threshold of 128" in failure.message
    assert ("amdgpu's default for MP0 13.0.6" in failure.expected) is (not root)


def test_older_gpu_metrics_without_link_status_is_skipped_with_the_reason_not_failed(tmp_path):
    """Issue 15 item 3: every link reads X on gpu_metrics v1.6 — not reported is not down."""
    node = amd_node.mi300x_node()
    amd_node.old_gpu_metrics(node, (1, 6))
    _, results = check(tmp_path, node)

    links = only(results, "topology.links_up")
    assert {r.status for r in links} == {Status.SKIP}
    assert "v1.6" in links[0].message and "v1.7" in links[0].message


def test_a_real_link_down_still_fails_on_metrics_v1_8(tmp_path):
    node = amd_node.mi355x_node()
    amd_node.xgmi_link_down(node, 1, link=4)
    _, results = check(tmp_path, node)
    assert not_passing(results) == [("topology.links_up", Status.FAIL, 1)]


def test_vf_guest_skips_what_a_vf_cannot_report_with_the_reason(tmp_path):
    """Issue 15 item 10: power not reported, link status UNEXPECTED_DATA, no bad-page threshold of its own."""
    snapshot, results = check(tmp_path, amd_node.vf_guest(amd_node.mi300x_node()))

    assert {d.virtualization for d in snapshot.devices} == {"guest"}
    power = on(results, "power.limit", 0)
    assert power.status == Status.SKIP and "SR-IOV VF" in power.message
    links = on(results, "topology.links_up", 0)
    assert links.status == Status.SKIP and "UNEXPECTED_DATA" in links.message
    assert not any(r.status == Status.UNKNOWN for r in results)


def test_vf_guest_still_fails_a_real_fault(tmp_path):
    node = amd_node.vf_guest(amd_node.mi300x_node())
    amd_node.uncorrectable_ecc(node, 2)
    _, results = check(tmp_path, node)
    assert not_passing(results) == [("ecc.uncorrected", Status.FAIL, 2)]


def test_cpx_partitions_at_function_zero_are_grouped_by_partition_id(tmp_path):
    """Issue 15 item 4: all 64 partitions at function .0 must not become 64 physical GPUs."""
    snapshot, results = check(tmp_path, _cpx_function_zero(amd_node.mi300x_node()))

    assert len(snapshot.devices) == 64 and {d.pci_bus_id.endswith(".0") for d in snapshot.devices} == {True}
    assert sum(not d.is_logical_partition for d in snapshot.devices) == 8
    assert len(snapshot.peers) == 28
    per_check = Counter(r.check for r in results if r.device is not None and not r.check.startswith("workload."))
    assert set(per_check.values()) == {8}, per_check
    assert only(results, "inventory.gpus_visible") and not_passing(results) == []


def test_a_missing_cpx_partition_fails_its_gpu(tmp_path):
    """The known 63-of-64 case: another driver holds one partition's DRM node."""
    node = _cpx(amd_node.mi300x_node())
    node.gpus[6].missing_partitions = {5}
    snapshot, results = check(tmp_path, node)

    assert len(snapshot.devices) == 63
    assert not_passing(results) == [("inventory.partitions", Status.FAIL, 6 * 8)]
    failure = [r for r in results if r.check == "inventory.partitions" and r.status == Status.FAIL][0]
    assert "7 of 8 CPX partitions" in failure.message and "missing: 5" in failure.message
    assert failure.action == "reboot"


def test_in_tree_amdgpu_version_is_the_kernel_release(tmp_path):
    """Issue 15 item 6: amdsmi reports the whole /proc/version (ROCm/k8s-device-plugin#157)."""
    node = amd_node.mi300x_node()
    amd_node.in_tree_amdgpu(node)
    expect = load_expectations(params=["min_driver_version=6.10.5"])
    snapshot, results = check(tmp_path, node, expect)

    assert snapshot.backend("amdsmi").driver_version == "6.8.0-79-generic"
    assert only(results, "driver.version_consistent")[0].status == Status.PASS
    (version,) = only(results, "driver.version")
    assert version.status == Status.FAIL and "6.8.0-79-generic is older than the required 6.10.5" in version.message
    expect = load_expectations(params=["min_driver_version=6.8.0"])
    assert only(check(tmp_path / "new", node, expect)[1], "driver.version")[0].status == Status.PASS


def test_gpu_metrics_newer_than_amdsmi_decodes_warns_and_says_which_version(tmp_path):
    """Issue 15 item 8: v1.9 on 2026 kernels is unknown to amdsmi 7.0.2: values vanish, checks skip."""
    node = amd_node.mi355x_node()
    amd_node.old_gpu_metrics(node, (1, 9))
    _, results = check(tmp_path, node)

    metrics = only(results, "driver.gpu_metrics_version")
    assert {r.status for r in metrics} == {Status.WARN} and len(metrics) == 8
    assert "v1.9" in metrics[0].message and "power draw" in metrics[0].message
    assert "(power draw, PCIe counters) came back N/A" in metrics[0].remediation  # issue 21: what decides
    assert {c for c, _, _ in not_passing(results)} == {"driver.gpu_metrics_version"}
    assert "v1.9" in on(results, "topology.links_up", 0).message  # the skip says why
    healthy = only(check(tmp_path / "ok", amd_node.mi355x_node())[1], "driver.gpu_metrics_version")
    assert {r.status for r in healthy} == {Status.PASS} and "v1.8" in healthy[0].message


@pytest.mark.parametrize("count, status", [(1, Status.PASS), (2, Status.WARN), (10_013_412, Status.FAIL)])
def test_pcie_l0_to_recovery_is_judged(tmp_path, count, status):
    """Issue 15 item 9: node-scraper's thresholds (warn > 1, error > 3), the error scaled by days since boot;
    10,013,412 is what a real MI3xx node showed (ROCm/device-metrics-exporter PR 191)."""
    node = amd_node.mi300x_node()
    amd_node.pcie_recoveries(node, 3, count)
    _, results = check(tmp_path, node)
    assert on(results, "pcie.link_recovery", 3).status == status
    assert all(r.status == Status.PASS for r in only(results, "pcie.link_recovery") if r.device.index != 3)


def test_pcie_naks_warn_like_replays(tmp_path):
    node = amd_node.mi300x_node()
    amd_node.pcie_recoveries(node, 0, 0, naks=228)
    _, results = check(tmp_path, node)
    result = on(results, "pcie.link_recovery", 0)
    assert result.status == Status.WARN and "228 PCIe NAKs" in result.message


def test_cpx_partition_zero_reports_the_whole_vram(tmp_path):
    """Issue 15 item 11: partition 0 reports all 192 GB, the others 24 GB."""
    snapshot, _ = check(tmp_path, _cpx(amd_node.mi300x_node(1)), load_expectations())
    totals = [d.memory.total_bytes // 2**20 for d in snapshot.devices]
    assert totals[0] == 196592 and set(totals[1:]) == {196592 // 8}


@pytest.mark.parametrize("bend", [lambda n: n, amd_node.vf_guest], ids=["bare-metal", "vf"])
def test_the_exporter_shows_a_healthy_mi300x_node_all_ok_and_xgmi_wafl_counts(tmp_path, bend):
    """Issue 9 item 2 in the exporter's series: no check of a healthy MI300X node reads 0 (unknown)."""
    from gpudiag.exporter.textfile import render_textfile
    from tests.support.exporter import series

    snapshot, results = check(tmp_path, bend(amd_node.mi300x_node()))
    text = render_textfile(snapshot, results, finished_at=1_800_000_000.0)
    not_ok = [(labels["check"], labels.get("gpu")) for labels, v in series(text, "gpudiag_check_ok") if v != 1]
    assert not_ok == []
    blocks = {labels["block"] for labels, _ in series(text, "gpudiag_gpu_ecc_block_errors_total", gpu="0")}
    assert "umc" in blocks and ("xgmi_wafl" in blocks) is (bend is not amd_node.vf_guest)


def test_sysfs_fallback_names_the_ras_blocks_it_could_not_read(tmp_path):
    node = amd_node.mi300x_node()
    node.library_present = False
    amd_node.ras_inaccessible(node, 2, (amd_node.BLOCK_UMC,))
    snapshot, results = check(tmp_path, node)

    assert snapshot.devices[2].source == "amdgpu-sysfs" and snapshot.devices[2].ecc.unreadable_blocks == ["umc"]
    result = on(results, "ecc.uncorrected", 2)
    assert result.status == Status.UNKNOWN and "umc" in result.message


def test_check_json_and_exit_code_of_a_healthy_and_a_faulty_mi300x_node(tmp_path, capsys):
    """`gpudiag check --json`: a healthy MI300X node exits 0 with status pass; an XGMI fault exits 1 on its GPU."""
    import json

    from gpudiag.cli.app import main

    for name, faulty in (("healthy", False), ("faulty", True)):
        node = amd_node.mi300x_node()
        if faulty:
            amd_node.xgmi_wafl_errors(node, 5, uncorrected=1)
        root, kernel_log = node_root(tmp_path / name, node)
        with installed(node):
            code = main(["check", "--json", "--root", str(root), "--kernel-log", str(kernel_log),
                         "-p", "expected_links_per_gpu=7", "--skip", "workload"])  # workload: this machine's CPUs
        report = json.loads(capsys.readouterr().out)
        assert not any(r["status"] == "unknown" for r in report["results"])
        if not faulty:
            assert (code, report["status"]) == (0, "pass")
            continue
        assert (code, report["status"]) == (1, "fail")
        xgmi = [r for r in report["results"] if r["check"] == "topology.link_errors" and r["status"] == "fail"]
        assert [(r["device"]["index"], r["action"]) for r in xgmi] == [(5, "reboot")]


def test_link_status_not_supported_by_a_newer_amdsmi_is_not_down(tmp_path):
    """ROCm/rocm-systems PR 2053: newer amdsmi answers NOT_SUPPORTED instead of every link "X"."""
    node = amd_node.mi300x_node()
    node.failing_calls = {"amdsmi_get_gpu_xgmi_link_status": 2}
    _, results = check(tmp_path, node)
    assert {r.status for r in only(results, "topology.links_up")} == {Status.SKIP}
    assert not_passing(results) == []
