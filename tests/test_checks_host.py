from gpudiag.model import Status
from tests.snapshots import GIB, MIB, amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


def test_persistence_mode_off_warns():
    snap = nvidia_h200_node()
    snap.devices[0].persistence_mode = False
    results = run(snap, "host.persistence_mode")
    assert_actionable(for_gpu(results, 0), Status.WARN)
    assert "nvidia-persistenced" in for_gpu(results, 0).remediation
    assert for_gpu(results, 1).status == Status.PASS


def test_persistence_mode_is_nvidia_only():
    (result,) = run(amd_mi300x_node(), "host.persistence_mode")
    assert result.status == Status.SKIP and result.device is None


def test_translated_iommu_domain_warns():
    snap = amd_mi300x_node()
    snap.pci_gpus[4].iommu_domain_type = "DMA-FQ"
    results = run(snap, "host.iommu")
    result = for_gpu(results, 4)
    assert_actionable(result, Status.WARN)
    assert "iommu=pt" in result.remediation and "GPUDirect" in result.remediation
    assert for_gpu(results, 3).status == Status.PASS


def test_iommu_off_or_unknown():
    snap = nvidia_h200_node()
    for pci in snap.pci_gpus:
        pci.iommu_domain_type = None
    snap.host.iommu_enabled = False
    assert {r.status for r in run(snap, "host.iommu")} == {Status.PASS}
    snap.host.iommu_enabled = None
    assert {r.status for r in run(snap, "host.iommu")} == {Status.SKIP}


def test_small_bar_fails_with_the_bios_settings():
    snap = nvidia_h200_node()
    snap.devices[1].memory.bar1_total_bytes = 256 * MIB
    snap.pci_gpus[1].bar_sizes_bytes = {0: 16 * MIB, 1: 256 * MIB, 3: 32 * MIB}
    results = run(snap, "host.large_bar")
    small = for_gpu(results, 1)
    assert_actionable(small, Status.FAIL)
    assert "Above 4G Decoding" in small.remediation and "Resizable BAR" in small.remediation
    assert small.observed == {"bar_bytes": 256 * MIB, "memory_bytes": 143771 * MIB}
    assert for_gpu(results, 0).status == Status.PASS


def test_amd_bar_comes_from_sysfs():
    snap = amd_mi300x_node()
    snap.pci_gpus[0].bar_sizes_bytes = {0: 256 * MIB, 2: 2 * MIB, 5: 1 * MIB}
    results = run(snap, "host.large_bar")
    assert for_gpu(results, 0).status == Status.FAIL
    assert for_gpu(results, 1).status == Status.PASS and for_gpu(results, 1).observed["bar_bytes"] == 256 * GIB


def test_bar_check_without_sizes_skips():
    snap = amd_mi300x_node()
    snap.pci_gpus[0].bar_sizes_bytes = {}
    assert for_gpu(run(snap, "host.large_bar"), 0).status == Status.SKIP
