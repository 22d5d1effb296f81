from gpudiag.model import ErrorKind, ProbeError, Status
from tests.support.snapshots import GIB, MIB, amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


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


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py, issue 16) found unpinned.

def test_persistence_mode_not_reported_is_skipped_and_unreadable_is_unknown():
    snap = nvidia_h200_node()
    snap.devices[0].persistence_mode = None
    skipped = for_gpu(run(snap, "host.persistence_mode"), 0)
    assert skipped.status == Status.SKIP
    assert skipped.message == "persistence mode is not supported on GPU 0 (0000:19:00.0) (NVIDIA H200)"
    snap.devices[0].errors.append(ProbeError("nvml.nvmlDeviceGetPersistenceMode", ErrorKind.ERROR, "Unknown Error"))
    assert_actionable(for_gpu(run(snap, "host.persistence_mode"), 0), Status.UNKNOWN)


def test_iommu_domain_is_named_and_a_vm_passthrough_is_noted():
    snap = nvidia_h200_node()
    snap.pci_gpus[1].iommu_domain_type = "unmanaged"  # VFIO: a VM owns the GPU
    results = run(snap, "host.iommu")
    assert for_gpu(results, 0).status == Status.PASS
    assert for_gpu(results, 0).message == "GPU 0 (0000:19:00.0): IOMMU domain identity"
    assert for_gpu(results, 1).status == Status.PASS
    assert for_gpu(results, 1).message == "GPU 1 (0000:3b:00.0): IOMMU domain unmanaged (passed through to a VM)"


def test_nvidia_bar1_size_from_nvml_is_enough_without_sysfs_bars():
    snap = nvidia_h200_node()
    snap.pci_gpus[0].bar_sizes_bytes = {}
    result = for_gpu(run(snap, "host.large_bar"), 0)
    assert result.status == Status.PASS
    assert result.observed == {"bar_bytes": 256 * GIB, "memory_bytes": 143771 * MIB}
    assert result.message == "GPU 0 (0000:19:00.0): BAR 256.0 GiB maps all 140.4 GiB of GPU memory"


def test_small_bar_message_and_where_to_confirm_it_per_vendor():
    snap = nvidia_h200_node()
    snap.devices[1].memory.bar1_total_bytes = 256 * MIB
    snap.pci_gpus[1].bar_sizes_bytes = {0: 16 * MIB, 1: 256 * MIB, 3: 32 * MIB}
    small = for_gpu(run(snap, "host.large_bar"), 1)
    assert small.message == "GPU 1 (0000:3b:00.0): BAR is 0.2 GiB, smaller than its 140.4 GiB of memory"
    assert small.remediation.endswith("and `nvidia-smi -q -d MEMORY` (BAR1 Total).")
    amd = amd_mi300x_node()
    amd.pci_gpus[0].bar_sizes_bytes = {0: 256 * MIB, 2: 2 * MIB, 5: 1 * MIB}
    small_amd = for_gpu(run(amd, "host.large_bar"), 0)
    assert small_amd.remediation.endswith("`lspci -vvv -s 0000:05:00.0 | grep -i region` and its largest region.")


def test_bar_of_a_gpu_no_library_enumerates_is_skipped():
    snap = nvidia_h200_node()
    del snap.devices[1]
    results = run(snap, "host.large_bar")
    (lost,) = [r for r in results if r.device is None]
    assert lost.status == Status.SKIP
    assert lost.message == ("GPU at 0000:3b:00.0 (on the PCI bus, not enumerated by a vendor library): GPU memory "
                            "size comes from the vendor library")
    assert for_gpu(results, 0).status == Status.PASS


def test_bar_exactly_the_memory_size_passes_one_byte_short_fails():
    # "each GPU's BAR maps all of its memory": a BAR of the memory's size maps all of it.
    snap = amd_mi300x_node()
    snap.devices[2].memory.total_bytes = 256 * GIB  # the largest sysfs BAR (BAR0) is 256 GiB
    assert for_gpu(run(snap, "host.large_bar"), 2).status == Status.PASS
    snap.devices[2].memory.total_bytes = 256 * GIB + 1
    assert_actionable(for_gpu(run(snap, "host.large_bar"), 2), Status.FAIL)
