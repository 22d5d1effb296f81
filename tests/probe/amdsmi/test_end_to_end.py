"""AMD nodes end to end: the real collector over a fake libamd_smi.so (under the real amdsmi wrapper) and an amdgpu
sysfs tree, then the real checks. The same check IDs as on NVIDIA, judged from AMD data."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gpudiag.checks import run_checks
from gpudiag.cli.app import main
from gpudiag.model import CheckResult, NodeSnapshot, Status
from gpudiag.probe.collector import CollectOptions, collect
from tests.support.fakes import amd_node
from tests.support.fakes.amd_node import FakeAmdNode, mi300x_node
from tests.support.fakes.amdgpu_sysfs_tree import add_amdgpu_node
from tests.support.fakes.fake_amdsmi import installed
from tests.support.sysfs_tree import SysfsTree

BOOT_LOG = [
    "[    4.812345] [drm] amdgpu kernel modesetting enabled.",
    "[    9.021337] amdgpu 0000:05:00.0: amdgpu: SMU is initialized successfully!",
]
RESET_LOG = [
    "[ 8123.456789] amdgpu 0000:85:00.0: amdgpu: GPU reset begin!",
    "[ 8125.012345] amdgpu 0000:85:00.0: amdgpu: GPU reset(2) succeeded!",
]


def node_root(tmp_path: Path, node: FakeAmdNode, log_lines: list[str] = BOOT_LOG) -> tuple[Path, Path]:
    tree = SysfsTree(tmp_path / "root")
    add_amdgpu_node(tree, node)
    tree.add_numa_nodes(2)
    kernel_log = tmp_path / "dmesg.txt"
    kernel_log.write_text("".join(f"{line}\n" for line in log_lines))
    return tree.root, kernel_log


def check_node(tmp_path: Path, node: FakeAmdNode,
               log_lines: list[str] = BOOT_LOG) -> tuple[NodeSnapshot, list[CheckResult]]:
    root, kernel_log = node_root(tmp_path, node, log_lines)
    with installed(node):
        snapshot = collect(CollectOptions(root=root, kernel_log_file=kernel_log, timeout_seconds=20))
    return snapshot, run_checks(snapshot)


def not_passing(results: list[CheckResult]) -> list[tuple[str, Status, int | None]]:
    """(check, status, GPU index) of every warn/fail/unknown; workload checks judge the live test machine's CPUs."""
    return [(r.check, r.status, r.device.index if r.device else None) for r in results
            if r.status in (Status.WARN, Status.FAIL, Status.UNKNOWN) and not r.check.startswith("workload.")]


def only(results: list[CheckResult], check: str) -> list[CheckResult]:
    return [r for r in results if r.check == check]


def test_healthy_mi300x_node_passes_every_check(tmp_path):
    snapshot, results = check_node(tmp_path, mi300x_node())

    assert [(b.name, b.available) for b in snapshot.backends] == [("amdsmi", True)]
    assert len(snapshot.devices) == 8 and {d.source for d in snapshot.devices} == {"amdsmi"}
    assert not_passing(results) == []
    assert not any(r.status == Status.FAIL for r in results)
    passed = {r.check for r in results if r.status == Status.PASS}
    # every family of the NVIDIA checklist judged the AMD data (not merely skipped it)
    assert {"driver.library", "inventory.gpus_visible", "pcie.link_generation", "pcie.link_width", "ecc.uncorrected",
            "memory.bad_pages", "thermal.temperature", "power.limit", "topology.links_up", "topology.p2p",
            "firmware.vbios_consistent", "kernel_log.amdgpu_errors", "host.large_bar"} <= passed


def test_gen5_gpu_trained_at_gen4_on_a_gen4_board(tmp_path):
    node = mi300x_node()
    amd_node.pcie_trained_gen4_on_gen4_board(node, 3)
    _, results = check_node(tmp_path, node)

    assert not_passing(results) == [("pcie.link_generation", Status.FAIL, 3)]
    (failure,) = [r for r in only(results, "pcie.link_generation") if r.status == Status.FAIL]
    assert "Gen4 x16" in failure.message and "Gen5 x16" in failure.message
    assert "GPU 3" in failure.message and "0000:65:00.0" in failure.message  # the GPU
    assert "0000:64:00.0" in failure.message  # the slot (its upstream port)
    assert "BIOS" in failure.remediation and "riser" in failure.remediation
    assert "current_link_speed" in failure.remediation  # how to confirm with sysfs


def test_uncorrectable_ecc_fails_that_gpu(tmp_path):
    node = mi300x_node()
    amd_node.uncorrectable_ecc(node, 1, count=2)
    _, results = check_node(tmp_path, node)
    assert not_passing(results) == [("ecc.uncorrected", Status.FAIL, 1)]


def test_pending_bad_pages_warn(tmp_path):
    node = mi300x_node()
    amd_node.pending_bad_pages(node, 6, count=3)
    _, results = check_node(tmp_path, node)
    assert not_passing(results) == [("memory.bad_pages", Status.WARN, 6)]
    assert "3 bad page(s) pending" in [r for r in only(results, "memory.bad_pages") if r.device.index == 6][0].message


def test_xgmi_link_down_fails_topology(tmp_path):
    node = mi300x_node()
    amd_node.xgmi_link_down(node, 2, link=3)
    _, results = check_node(tmp_path, node)
    assert not_passing(results) == [("topology.links_up", Status.FAIL, 2)]
    (failure,) = [r for r in only(results, "topology.links_up") if r.status == Status.FAIL]
    assert "6 of 7 XGMI links" in failure.message and "down: 3" in failure.message


def test_hotspot_over_critical_fails_thermal(tmp_path):
    node = mi300x_node()
    amd_node.hotspot_over_critical(node, 4)
    _, results = check_node(tmp_path, node)
    assert ("thermal.temperature", Status.FAIL, 4) in not_passing(results)
    assert {check for check, _, gpu in not_passing(results)} <= {"thermal.temperature", "thermal.throttle"}


def test_gpu_reset_in_the_kernel_log_is_reported_on_that_gpu(tmp_path):
    _, results = check_node(tmp_path, mi300x_node(), BOOT_LOG + RESET_LOG)
    findings = [r for r in only(results, "kernel_log.amdgpu_errors") if r.status != Status.PASS]
    assert [r.device.pci_bus_id for r in findings] == ["0000:85:00.0"]
    # A reset that succeeded warns (its jobs were killed); only a failed reset fails (kernel_log.amdgpu_errors).
    assert [(r.status, r.action, r.fault_code) for r in findings] == [
        (Status.WARN, "watch", "GPUDIAG-AMDGPU-GPU-RESET")
    ]


def test_lost_gpu_is_unknown_never_a_pass(tmp_path):
    node = mi300x_node()
    amd_node.lose_gpu(node, 5)
    snapshot, results = check_node(tmp_path, node)

    assert not snapshot.devices[5].reachable
    about_gpu5 = {r.check: r.status for r in results if r.device and r.device.index == 5}
    assert about_gpu5["inventory.gpus_visible"] == Status.FAIL
    for check in ("ecc.uncorrected", "memory.bad_pages", "thermal.temperature", "power.limit", "topology.links_up"):
        assert about_gpu5[check] == Status.UNKNOWN
    # what still passes comes from sysfs and the kernel log, which do not go through the lost library
    still_passing = {c for c, s in about_gpu5.items() if s == Status.PASS}
    assert still_passing <= {"pcie.aer", "kernel_log.amdgpu_errors", "host.iommu"}
    assert all(r.status == Status.PASS for r in only(results, "thermal.temperature") if r.device.index != 5)


def test_cpx_mode_judges_each_physical_gpu_once(tmp_path):
    node = mi300x_node()
    amd_node.cpx_mode(node)
    snapshot, results = check_node(tmp_path, node)

    assert len(snapshot.devices) == 64
    assert not_passing(results) == []
    physical = {d.index for d in snapshot.devices if not d.is_logical_partition}
    assert len(physical) == 8
    per_check = Counter(r.check for r in results if r.device is not None and not r.check.startswith("workload."))
    assert per_check and all(count == 8 for count in per_check.values()), per_check
    assert {r.device.index for r in results if r.device and not r.check.startswith("workload.")} == physical


def test_without_libamd_smi_the_sysfs_fallback_judges_the_node_and_stdout_stays_json(tmp_path, capfd):
    node = mi300x_node()
    node.library_present = False
    amd_node.pcie_trained_gen4_on_gen4_board(node, 3)
    root, kernel_log = node_root(tmp_path, node)

    with installed(node):
        code = main(["check", "--json", "--root", str(root), "--kernel-log", str(kernel_log)])
    out = capfd.readouterr().out

    report = json.loads(out)  # nothing the wrapper printed reached stdout
    assert code == 1 and report["status"] == "fail"
    failures = [r for r in report["results"] if r["status"] == "fail"]
    assert [(r["check"], r["device"]["pci_bus_id"]) for r in failures] == [("pcie.link_generation", "0000:65:00.0")]
    library = [r for r in report["results"] if r["check"] == "driver.library"]
    assert library and "amdgpu-sysfs" in json.dumps(library)  # the report says which source was used


@pytest.mark.parametrize("scenario", ["uncorrectable_ecc", "hotspot_over_critical"])
def test_sysfs_fallback_finds_the_same_faults(tmp_path, scenario):
    node = mi300x_node()
    node.library_present = False
    getattr(amd_node, scenario)(node, 1)
    snapshot, results = check_node(tmp_path, node)

    assert [(b.name, b.available) for b in snapshot.backends] == [("amdsmi", False), ("amdgpu-sysfs", True)]
    assert {d.source for d in snapshot.devices} == {"amdgpu-sysfs"}
    expected = {"uncorrectable_ecc": "ecc.uncorrected", "hotspot_over_critical": "thermal.temperature"}[scenario]
    assert (expected, Status.FAIL, 1) in not_passing(results)
    assert all(gpu == 1 for _, status, gpu in not_passing(results) if status == Status.FAIL)
