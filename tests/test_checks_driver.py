from gpudiag.model import ErrorKind, ProbeError, Status
from tests.snapshots import AMDGPU_DKMS, NVIDIA_DRIVER, amd_mi300x_node, assert_actionable, nvidia_h200_node, run


def _without_nvidia_module(snap):
    del snap.host.modules_loaded["nvidia"]
    snap.backends[0].available = False
    snap.backends[0].error = ProbeError("nvml.nvmlInit", ErrorKind.ERROR, "Driver Not Loaded")
    snap.devices = []


def test_module_not_loaded_fails_naming_the_gpus():
    snap = nvidia_h200_node()
    _without_nvidia_module(snap)
    (result,) = run(snap, "driver.module_loaded")
    assert_actionable(result, Status.FAIL)
    assert "0000:19:00.0" in result.message and "0000:3b:00.0" in result.message
    assert "modprobe nvidia" in result.remediation and "dkms status" in result.remediation


def test_module_state_unreadable_is_unknown_not_fail():
    snap = nvidia_h200_node()
    _without_nvidia_module(snap)
    snap.errors.append(ProbeError("sysfs:/sys/module", ErrorKind.NO_PERMISSION, "Permission denied"))
    (result,) = run(snap, "driver.module_loaded")
    assert_actionable(result, Status.UNKNOWN)


def test_a_working_library_proves_the_module_is_loaded():
    snap = nvidia_h200_node()
    snap.host.modules_loaded = {}  # e.g. a --root tree without /sys/module
    (result,) = run(snap, "driver.module_loaded")
    assert result.status == Status.PASS and "nvml answers" in result.message


def test_module_loaded_passes_per_vendor():
    (nvidia,) = run(nvidia_h200_node(), "driver.module_loaded")
    (amd,) = run(amd_mi300x_node(), "driver.module_loaded")
    assert (nvidia.status, amd.status) == (Status.PASS, Status.PASS)
    assert "nvidia" in nvidia.message and "amdgpu" in amd.message


def test_binding_to_the_wrong_driver():
    snap = nvidia_h200_node()
    snap.pci_gpus[0].driver = "nouveau"
    snap.pci_gpus[1].driver = None
    nouveau, unbound = run(snap, "driver.device_bound")
    assert_actionable(nouveau, Status.FAIL)
    assert "blacklist nouveau" in nouveau.remediation
    assert_actionable(unbound, Status.FAIL)
    assert "not bound" in unbound.message and "Above 4G Decoding" in unbound.remediation
    snap.pci_gpus[0].driver = "vfio-pci"
    assert run(snap, "driver.device_bound")[0].status == Status.WARN


def test_library_missing_while_module_loaded_points_at_the_userspace_package():
    snap = nvidia_h200_node()
    snap.backends[0].available = False
    snap.backends[0].error = ProbeError("nvml.nvmlInit", ErrorKind.NOT_FOUND, "NVML Shared Library Not Found")
    result = next(r for r in run(snap, "driver.library") if "nvml" in r.message)
    assert_actionable(result, Status.FAIL)
    assert "libnvidia-ml" in result.remediation
    assert result.observed["gpus_on_bus"] == ["0000:19:00.0", "0000:3b:00.0"]


def test_library_failure_without_the_module_points_at_modprobe_and_dkms():
    snap = nvidia_h200_node()
    _without_nvidia_module(snap)
    result = next(r for r in run(snap, "driver.library") if "nvml" in r.message)
    assert_actionable(result, Status.FAIL)
    assert "modprobe nvidia" in result.remediation and "uname -r" in result.remediation


def test_library_version_mismatch_and_init_failure_have_their_own_remediation():
    snap = nvidia_h200_node()
    snap.backends[0].available = False
    mismatch = "RM has detected an NVML/RM version mismatch."
    snap.backends[0].error = ProbeError("nvml.nvmlInit", ErrorKind.ERROR, mismatch)
    mismatch = next(r for r in run(snap, "driver.library") if "nvml" in r.message)
    assert_actionable(mismatch, Status.FAIL)
    assert "/proc/driver/nvidia/version" in mismatch.remediation and "reboot" in mismatch.remediation

    snap.backends[0].error = ProbeError("nvml.nvmlInit", ErrorKind.ERROR, "Unknown Error")
    init = next(r for r in run(snap, "driver.library") if "nvml" in r.message)
    assert_actionable(init, Status.FAIL)
    assert "Above 4G Decoding" in init.remediation and "RmInitAdapter" in init.remediation


def test_no_false_alarm_for_the_other_vendors_library():
    # On an AMD node NVML is not installed: that is not a problem.
    results = run(amd_mi300x_node(), "driver.library")
    nvml = next(r for r in results if "nvml" in r.message)
    assert nvml.status == Status.SKIP
    assert {r.status for r in results if r is not nvml} == {Status.PASS}


def test_amdsmi_missing_with_sysfs_fallback_warns():
    snap = amd_mi300x_node()
    amdsmi = snap.backend("amdsmi")
    amdsmi.available = False
    amdsmi.error = ProbeError("amdsmi.import", ErrorKind.NOT_FOUND, "libamd_smi.so not found")
    result = next(r for r in run(snap, "driver.library") if r.message.startswith("amdsmi"))
    assert_actionable(result, Status.WARN)
    assert "amdgpu-sysfs" in result.message and "amd-smi-lib" in result.remediation


def test_driver_versions_must_agree():
    snap = nvidia_h200_node()
    snap.host.nvidia_proc_version = "550.54.15"
    (result,) = run(snap, "driver.version_consistent")
    assert_actionable(result, Status.FAIL)
    assert "550.54.15" in result.observed.values() and NVIDIA_DRIVER in result.observed.values()
    (ok,) = run(nvidia_h200_node(), "driver.version_consistent")
    assert ok.status == Status.PASS and len(ok.observed) == 3


def test_in_tree_amdgpu_is_not_a_version_mismatch():
    snap = amd_mi300x_node()
    snap.host.modules_loaded["amdgpu"] = None  # in-tree: no /sys/module/amdgpu/version
    snap.backend("amdsmi").driver_version = snap.host.kernel_release  # what amdsmi reports then
    (result,) = run(snap, "driver.version_consistent")
    # The in-tree driver's version is the kernel release, and amdsmi agrees with it.
    assert result.status == Status.PASS
    assert result.observed["in-tree amdgpu (kernel release)"] == snap.host.kernel_release
    # A DKMS module that disagrees with amdsmi is a mismatch.
    snap.host.modules_loaded["amdgpu"] = AMDGPU_DKMS
    snap.backend("amdsmi").driver_version = "6.8.5"
    assert run(snap, "driver.version_consistent")[0].status == Status.FAIL
