"""Which results follow from which (report/causes.py), the JSON report's `caused_by`, and the grouping of results
that say one thing across checks and GPUs (report/grouping.py)."""

from __future__ import annotations

import json

import pytest

from gpudiag.checks import run_checks
from gpudiag.checks.verdicts import UNREACHABLE
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceRef, ErrorKind, ProbeError, Status, Vendor
from gpudiag.report import causes, grouping
from gpudiag.report.json_report import render_json
from gpudiag.report.text import render_text
from tests.support.snapshots import nvidia_h200_node


def _lost(snapshot, index: int = 1):
    device = snapshot.devices[index]
    device.reachable = False
    device.errors.append(ProbeError("nvml.device", ErrorKind.GPU_LOST, "the GPU is lost"))
    return device


def test_the_renderer_spells_the_unreachable_fault_code_as_the_checks_do():
    assert causes.UNREACHABLE_CODE == UNREACHABLE[1]


def test_a_lost_gpu_makes_its_other_checks_and_the_short_count_consequences():
    snapshot = nvidia_h200_node()
    _lost(snapshot)
    results = run_checks(snapshot, Expectations(expected_gpu_count=2))
    by = {(r.check, r.device.index if r.device else None): c for r, c in zip(results, causes.caused_by(results))}
    root = "inventory.gpus_visible 0000:3b:00.0"
    assert by[("inventory.gpus_visible", 1)] == []
    unknown_on_1 = [r for r in results if r.status is Status.UNKNOWN and r.device and r.device.index == 1]
    assert len(unknown_on_1) > 20 and all(by[(r.check, 1)] == [root] for r in unknown_on_1)
    assert by[("inventory.gpu_count", None)] == [root]
    # what GPU 0 shows is its own, whatever GPU 1 does
    assert all(c == [] for (check, index), c in by.items() if index == 0)


def test_json_keeps_every_result_and_names_what_each_follows_from():
    snapshot = nvidia_h200_node()
    _lost(snapshot)
    results = run_checks(snapshot)
    report = json.loads(render_json(snapshot, results))
    assert report["schema_version"] == 1 and len(report["results"]) == len(results)
    assert all(isinstance(r["caused_by"], list) for r in report["results"])
    references = {f"{r['check']} {(r['device'] or {}).get('pci_bus_id') or 'node'}" for r in report["results"]}
    followed = {c for r in report["results"] for c in r["caused_by"]}
    assert followed == {"inventory.gpus_visible 0000:3b:00.0"} and followed <= references
    assert sum(bool(r["caused_by"]) for r in report["results"]) == sum(
        r["status"] == "unknown" for r in report["results"])


def test_the_kernel_logs_record_of_the_loss_follows_from_it_and_another_xid_does_not():
    snapshot = nvidia_h200_node()
    device = _lost(snapshot)
    ref = DeviceRef.of(device)
    visible = CheckResult("inventory.gpus_visible", Status.FAIL, "lost", ref, observed={"reachable": False})
    fell_off = CheckResult("kernel_log.xid", Status.FAIL, "Xid 79", ref, fault_code="GPUDIAG-XID-79")
    dbe = CheckResult("kernel_log.xid", Status.FAIL, "Xid 48", ref, fault_code="GPUDIAG-XID-48")
    assert causes.follows_from([visible, fell_off, dbe]) == [[], [0], []]


def test_a_shared_runtime_error_is_said_by_the_first_result_carrying_it():
    error = {"error": "cuda.load: libcuda.so.1 could not be loaded"}
    results = [CheckResult(f"active.{name}", Status.UNKNOWN, "could not run", DeviceRef(i, None, f"0000:{i}b:00.0",
                                                                                         Vendor.NVIDIA, None),
                           observed=dict(error)) for name in ("memtest", "stress") for i in (0, 1)]
    results.append(CheckResult("active.stress", Status.UNKNOWN, "x", None, observed={"error": "another"}))
    assert causes.follows_from(results) == [[], [0], [0], [0], []]


def test_a_failed_library_explains_the_gpus_it_left_unenumerated():
    library = CheckResult("driver.library", Status.FAIL, "nvml failed", observed={
        "error": "not_found: …", "gpus_on_bus": ["0000:19:00.0", "0000:3b:00.0"]})
    missing = [CheckResult("inventory.gpus_visible", Status.UNKNOWN, f"GPU at {bus}: no NVIDIA library",
                           observed={"pci_bus_id": bus}) for bus in ("0000:19:00.0", "0000:3b:00.0", "0000:5d:00.0")]
    assert causes.follows_from([library, *missing]) == [[], [0], [0], []]


@pytest.mark.parametrize("blocks, follows", [({"xgmi_wafl": 3}, True), ({"xgmi_wafl": 3, "umc": 1}, False),
                                             ({"umc": 3}, False), ({"xgmi_wafl": 4}, False)])
def test_xgmi_errors_counted_again_by_ecc_follow_from_the_link(blocks, follows):
    gpu = DeviceRef(1, None, "0000:26:00.0", Vendor.AMD, "AMD Instinct MI300X")
    link = CheckResult("topology.link_errors", Status.FAIL, "3 uncorrectable XGMI errors", gpu,
                       observed={"xgmi_error_status": None, "xgmi_wafl": {"uncorrected": 3}})
    ecc = CheckResult("ecc.uncorrected", Status.FAIL, "uncorrected", gpu, observed={
        "by_block": {name: {"corrected": 0, "uncorrected": count} for name, count in blocks.items()}})
    assert causes.follows_from([ecc, link]) == [[1] if follows else [], []]


def test_gpu_ranges_are_compacted():
    assert grouping.gpu_ranges([7, 0, 1, 2, 3, 4, 5, 6]) == "0–7"
    assert grouping.gpu_ranges([0, 1, 2, 5, 7, 8]) == "0–2, 5, 7, 8"
    assert grouping.gpu_ranges([3]) == "3"


def _on(index: int, check: str = "pcie.link_width", status: Status = Status.FAIL) -> CheckResult:
    bus = f"0000:{0x19 + 0x20 * index:02x}:00.0"
    return CheckResult(check, status, f"GPU {index} ({bus}) link at x8", DeviceRef(index, None, bus, Vendor.NVIDIA,
                                                                                   "NVIDIA H200"),
                       observed={"current": "Gen5 x8"}, expected="Gen5 x16",
                       remediation=f"Reseat GPU {index}; confirm with `nvidia-smi -q -i {bus}`, reset with "
                                   f"`nvidia-smi -r -i {index}`.")


def test_one_finding_on_several_gpus_is_one_group_said_of_each():
    (found,) = grouping.group([_on(i) for i in range(4)])
    assert found.where() == "GPUs 0–3" and found.checks == ["pcie.link_width"]
    assert found.bus_ids() == ["0000:19:00.0", "0000:39:00.0", "0000:59:00.0", "0000:79:00.0"]
    assert found.text("message") == "GPU <index> (<bus ID>) link at x8"
    assert found.text("remediation") == ("Reseat GPU <index>; confirm with `nvidia-smi -q -i <bus ID>`, reset with "
                                         "`nvidia-smi -r -i <index>`.")


def test_a_group_never_claims_a_check_on_a_gpu_it_was_not_found_on():
    results = [_on(0), _on(1), _on(0, "pcie.link_generation")]
    results[2].message, results[2].remediation = results[0].message, results[0].remediation
    groups = grouping.group(results)
    assert [(g.checks, g.where()) for g in groups] == [(["pcie.link_width"], "GPUs 0, 1"),
                                                       (["pcie.link_generation"], "GPU 0 0000:19:00.0")]


def test_different_findings_stay_apart():
    other = _on(1)
    other.observed = {"current": "Gen5 x4"}
    assert len(grouping.group([_on(0), other])) == 2
    assert len(grouping.group([_on(0), _on(1, status=Status.WARN)])) == 2


def test_a_node_supplied_stand_in_cannot_merge_or_forge_text():
    """The stand-ins are NUL-delimited; clean() turns a NUL from the node into U+FFFD before grouping."""
    snapshot = nvidia_h200_node()
    results = [_on(0), _on(1)]
    results[1].message = "GPU 1 (0000:39:00.0)\x00label\x00 link at x8"
    text = render_text(snapshot, results)
    assert "\x00" not in text and "\ufffd" in text and "GPUs 0, 1" not in text


def test_a_cause_that_follows_from_another_is_never_named_as_a_cause():
    """No rule makes chains today; should one, a consequence names the first cause, whose block shows it."""
    gpu = DeviceRef(1, None, "0000:26:00.0", Vendor.AMD, "AMD Instinct MI300X")
    visible = CheckResult("inventory.gpus_visible", Status.FAIL, "lost", gpu, observed={"reachable": False})
    link = CheckResult("topology.link_errors", Status.FAIL, "xgmi", gpu, fault_code="GPUDIAG-PCIE-SLOT-LOST",
                       observed={"xgmi_wafl": {"uncorrected": 3}})
    ecc = CheckResult("ecc.uncorrected", Status.FAIL, "ecc", gpu, observed={"by_block": {"xgmi_wafl": {
        "uncorrected": 3}}})
    assert causes.follows_from([visible, link, ecc]) == [[], [0], [0]]
