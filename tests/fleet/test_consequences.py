"""gpudiag/fleet/consequences.py: which of a node's findings the fleet text says under another (issue 36, item 6)."""

from __future__ import annotations

from gpudiag.fleet.consequences import link, reference, under_causes


def _finding(check, kind="fail", gpu=None, bus=None, caused_by=None, fault_code=None) -> dict:
    found = {"kind": kind, "check": check, "gpu": gpu, "pci_bus_id": bus, "fault_code": fault_code,
             "message": "fails", "action": "drain"}
    if caused_by is not None:
        found["caused_by"] = caused_by
    return found


def test_from_prometheus_a_gpu_that_does_not_answer_explains_its_unknowns_its_xid_79_and_its_silence():
    lost = _finding("inventory.gpus_visible", gpu=1, bus="0000:3b:00.0")
    unknown = _finding("thermal.temperature", "unknown", gpu=1, bus="0000:3b:00.0")
    xid79 = _finding("kernel_log.xid", gpu=1, bus="0000:3b:00.0", fault_code="GPUDIAG-XID-79")
    xid48 = _finding("kernel_log.xid", gpu=0, bus="0000:19:00.0", fault_code="GPUDIAG-XID-48")
    silent = {"kind": "silent", "check": None, "gpu": 1, "pci_bus_id": "0000:3b:00.0", "message": "GPU does not answer"}
    width = _finding("pcie.link_width", gpu=1, bus="0000:3b:00.0")  # a failure of its own, read before the loss
    findings = [lost, unknown, xid79, xid48, silent, width]
    link(findings)
    root = reference(lost)
    assert root == "inventory.gpus_visible 0000:3b:00.0"
    assert [f["caused_by"] for f in findings] == [[], [root], [root], [], [root], []]
    assert under_causes(findings) == {id(lost): [unknown, xid79, silent]}


def test_a_reports_own_causes_are_kept_and_a_circle_of_causes_hides_nothing():
    a = _finding("pcie.link_width", gpu=0, bus="0000:19:00.0", caused_by=["pcie.aer 0000:19:00.0"])
    b = _finding("pcie.aer", gpu=0, bus="0000:19:00.0", caused_by=["pcie.link_width 0000:19:00.0"])
    c = _finding("thermal.temperature", "unknown", gpu=0, bus="0000:19:00.0", caused_by=["pcie.aer 0000:19:00.0"])
    own = _finding("inventory.gpu_count", caused_by=["inventory.gpus_visible 0000:99:00.0"])  # a cause not reported
    findings = [a, b, c, own]
    link(findings)
    assert [f["caused_by"] for f in findings][3] == ["inventory.gpus_visible 0000:99:00.0"]
    assert under_causes(findings) == {}  # a and b name each other: both stand, and so does what follows them
