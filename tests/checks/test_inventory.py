import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, ProbeError, Status
from tests.support.snapshots import (
    amd_mi300x_node,
    assert_actionable,
    cpx_partitioned,
    for_gpu,
    node_level,
    nvidia_h200_node,
    run,
)


def test_gpu_on_the_bus_but_not_enumerated_fails_by_bus_id():
    snap = nvidia_h200_node()
    del snap.devices[1]
    results = run(snap, "inventory.gpus_visible")
    (missing,) = node_level(results)
    assert_actionable(missing, Status.FAIL)
    assert "0000:3b:00.0" in missing.message
    assert missing.observed["pci_bus_id"] == "0000:3b:00.0"
    assert for_gpu(results, 0).status == Status.PASS


def test_lost_gpu_fails_with_the_probe_reason():
    snap = amd_mi300x_node()
    snap.devices[6].reachable = False
    snap.devices[6].errors.append(ProbeError("amdsmi.amdsmi_get_gpu_metrics_info", ErrorKind.GPU_LOST,
                                             "AMDSMI_STATUS_AMDGPU_RESTART_ERR"))
    results = run(snap, "inventory.gpus_visible")
    lost = for_gpu(results, 6)
    assert_actionable(lost, Status.FAIL)
    assert "AMDGPU_RESTART_ERR" in str(lost.observed)
    assert "amd-smi reset --gpureset -g 6" in lost.remediation
    assert sum(r.status == Status.PASS for r in results) == 7


def test_without_a_library_the_missing_gpu_is_unknown_not_fail():
    snap = nvidia_h200_node()
    snap.devices = []
    snap.backends[0].available = False
    results = run(snap, "inventory.gpus_visible")
    assert [r.status for r in results] == [Status.UNKNOWN, Status.UNKNOWN]


def test_pci_scan_missing_is_unknown():
    snap = nvidia_h200_node()
    snap.pci_gpus = []
    (result,) = run(snap, "inventory.gpus_visible")
    assert_actionable(result, Status.UNKNOWN)


def test_logical_partitions_count_as_their_physical_gpu():
    results = run(cpx_partitioned(amd_mi300x_node()), "inventory.gpus_visible")
    assert len(results) == 8 and {r.status for r in results} == {Status.PASS}


def test_expected_gpu_count():
    expect = dataclasses.replace(Expectations(), expected_gpu_count=8)
    (short,) = run(nvidia_h200_node(), "inventory.gpu_count", expect)
    assert_actionable(short, Status.FAIL)
    assert short.observed == {"pci_bus": 2, "enumerated": 2} and short.expected == 8
    (ok,) = run(amd_mi300x_node(), "inventory.gpu_count", expect)
    assert ok.status == Status.PASS
    snap = amd_mi300x_node()
    snap.devices[2].reachable = False
    assert run(snap, "inventory.gpu_count", expect)[0].status == Status.FAIL
    assert run(snap, "inventory.gpu_count")[0].status == Status.SKIP


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py, issue 16) found unpinned.

def test_enumerated_gpu_says_whether_the_pci_scan_listed_it():
    snap = nvidia_h200_node()
    del snap.pci_gpus[1]
    results = run(snap, "inventory.gpus_visible")
    listed, unlisted = for_gpu(results, 0), for_gpu(results, 1)
    assert listed.status == unlisted.status == Status.PASS
    assert listed.message == "GPU 0 (0000:19:00.0) is on the PCI bus and enumerated by nvml"
    assert listed.observed == {"enumerated": True, "on_pci_bus": True}
    assert unlisted.message == "GPU 1 (0000:3b:00.0) is enumerated (the PCI scan did not list it) by nvml"
    assert unlisted.observed == {"enumerated": True, "on_pci_bus": False}


def test_a_node_without_any_gpu_skips_visibility():
    snap = nvidia_h200_node()
    snap.pci_gpus, snap.devices = [], []
    (result,) = run(snap, "inventory.gpus_visible")
    assert result.status == Status.SKIP
    assert result.message == "no GPU on the PCI bus or in any vendor library"


def _model(name):
    snap = nvidia_h200_node()
    snap.devices[0].name = name
    return snap


def test_model_name_not_reported_is_skipped_and_unreadable_is_unknown():
    expect = dataclasses.replace(Expectations(), expected_gpu_model="NVIDIA H200")
    snap = _model(None)
    results = run(snap, "inventory.gpu_model", expect)
    assert for_gpu(results, 0).status == Status.SKIP
    assert for_gpu(results, 0).message == "GPU model name is not supported on GPU 0 (0000:19:00.0) (unknown model)"
    assert for_gpu(results, 1).status == Status.PASS
    snap.devices[0].errors.append(ProbeError("nvml.nvmlDeviceGetName", ErrorKind.ERROR, "Unknown Error"))
    assert_actionable(for_gpu(run(snap, "inventory.gpu_model", expect), 0), Status.UNKNOWN)


def _partitions(**wanted):
    return dataclasses.replace(Expectations(), **wanted)


def test_partition_mode_without_a_profile_is_one_skip():
    (result,) = run(amd_mi300x_node(), "inventory.partition_mode")
    assert result.status == Status.SKIP and result.device is None
    assert result.message == ("no partition mode configured (expected_compute_partition, expected_memory_partition, "
                              "expected_mig_enabled)")


def test_partition_mode_configured_for_the_other_vendor_only_skips_naming_the_vendor():
    results = run(amd_mi300x_node(), "inventory.partition_mode", _partitions(expected_mig_enabled=False))
    assert {r.status for r in results} == {Status.SKIP} and len(results) == 8
    assert for_gpu(results, 0).message == "no partition mode configured for AMD GPUs"


def test_partition_mode_not_reported_is_skipped_not_a_mismatch():
    snap = amd_mi300x_node()
    snap.devices[3].compute_partition = snap.devices[3].memory_partition = None
    results = run(snap, "inventory.partition_mode", _partitions(expected_compute_partition="SPX",
                                                                 expected_memory_partition="NPS1"))
    assert for_gpu(results, 3).status == Status.SKIP
    assert for_gpu(results, 3).message.startswith("partition mode is not supported on GPU 3 ")
    assert for_gpu(results, 2).status == Status.PASS
    assert for_gpu(results, 2).message == "GPU 2 (0000:46:00.0): compute_partition SPX, memory_partition NPS1"
