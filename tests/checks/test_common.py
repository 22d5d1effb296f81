"""What every check shares (gpudiag/checks/common.py), pinned where it shows: through real checks, on the node
snapshots. A GPU that does not answer, a value a probe error explains, a node with no GPU at all."""

from __future__ import annotations

import pytest

from gpudiag.checks import CHECK_IDS, run_checks
from gpudiag.checks.common import PERMISSION_REMEDIATION
from gpudiag.checks.verdicts import is_internal_error
from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, NodeSnapshot, ProbeError, Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


def test_every_check_answers_a_node_without_gpus_with_one_node_level_skip():
    """A check that returns nothing vanishes from the report and from the exporter's series, so no alert on it can
    fire: with nothing to judge, each check says so once."""
    results = run_checks(NodeSnapshot(), Expectations(min_driver_version="550.0"))
    assert sorted(r.check for r in results) == sorted(CHECK_IDS)
    assert [r for r in results if r.status != Status.SKIP or r.device is not None or is_internal_error(r)] == []
    message = {r.check: r.message for r in results}
    assert message["pcie.link_width"] == "no GPU on this node"  # for_each_gpu: PCI bus and libraries together
    assert message["ecc.mode"] == "no GPU enumerated by a vendor library on this node"
    assert message["pcie.link_recovery"] == "no AMD GPU enumerated by a vendor library on this node"


# -- a GPU that does not answer its vendor library --------------------------------------------------------------


@pytest.mark.parametrize("build, confirm, reset", [
    (nvidia_h200_node, "Confirm with `nvidia-smi -q -i 0000:19:00.0` and `dmesg -T | grep -i -e NVRM -e Xid` "
                       "(Xid 79: the GPU fell off the bus).", "nvidia-smi -r -i 0"),
    (amd_mi300x_node, "Confirm with `amd-smi list` and `dmesg -T | grep -i amdgpu`.", "amd-smi reset --gpureset -g 0"),
], ids=["nvidia", "amd"])
def test_an_unreachable_gpu_is_unknown_with_its_vendors_commands(build, confirm, reset):
    snap = build()
    snap.devices[0].reachable = False
    snap.devices[0].errors = [ProbeError("probe", ErrorKind.GPU_LOST, "GPU is lost")]
    result = for_gpu(run(snap, "thermal.temperature"), 0)
    assert_actionable(result, Status.UNKNOWN)
    assert result.observed == {"reachable": False, "errors": ["probe: gpu_lost: GPU is lost"]}
    assert result.remediation.startswith(f"{confirm} If no process holds the GPU, reset it (`{reset}`)")
    assert for_gpu(run(snap, "thermal.temperature"), 1).status == Status.PASS


# -- a missing value that a probe error explains ----------------------------------------------------------------


@pytest.mark.parametrize("kind, remediation", [
    (ErrorKind.NO_PERMISSION, PERMISSION_REMEDIATION),
    (ErrorKind.TIMEOUT, "The driver stopped answering for this GPU: check the kernel log for Xid / amdgpu reset "
                        "messages and reset the GPU or reboot the node before trusting it."),
    (ErrorKind.ERROR, "Re-run with verbose logging to see the failing call, and check the kernel log for driver "
                      "errors."),
])
def test_the_remediation_of_an_unreadable_value_follows_the_probe_error(kind, remediation):
    snap = amd_mi300x_node()
    gpu = snap.devices[1]
    gpu.pcie.error_counters = {}
    gpu.errors = [ProbeError("amdsmi.amdsmi_get_pcie_info", kind, "the call failed")]
    result = for_gpu(run(snap, "pcie.link_recovery"), 1)
    assert_actionable(result, Status.UNKNOWN)
    assert result.message == "PCIe recovery and NAK counters of GPU 1 (0000:26:00.0) could not be read"
    assert result.remediation == remediation


# -- GPUs as the PCI bus and the vendor libraries see them together ---------------------------------------------


def test_a_gpu_on_the_bus_that_no_library_enumerated_is_named_by_its_bus_id():
    snap = nvidia_h200_node()
    snap.devices = snap.devices[:1]  # NVML lost GPU 1; sysfs still lists it
    results = run(snap, "pcie.replay_errors")
    assert [r.status for r in results] == [Status.PASS, Status.SKIP]
    assert results[0].message == "GPU 0 (0000:19:00.0): 0 PCIe replays"
    assert results[1].device is None and results[1].message == (
        "GPU at 0000:3b:00.0 (on the PCI bus, not enumerated by a vendor library): replay counters come from the "
        "vendor library")


def test_a_gpu_a_library_enumerated_but_the_pci_scan_missed_is_still_judged_by_its_bus_id():
    snap = nvidia_h200_node()
    snap.pci_gpus = snap.pci_gpus[:1]  # e.g. a --root tree with part of /sys/bus/pci
    snap.devices[1].pcie.replay_count = 101
    results = run(snap, "pcie.replay_errors")
    assert [(r.device.index, r.status) for r in results] == [(0, Status.PASS), (1, Status.WARN)]
    assert "`lspci -vvv -s 0000:3b:00.0`" in results[1].remediation
