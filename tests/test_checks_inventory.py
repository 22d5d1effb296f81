import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, ProbeError, Status
from tests.snapshots import (
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
