import pytest

from gpudiag.checks.common import PERMISSION_REMEDIATION
from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, NodeSnapshot, ProbeError, Status
from tests.support.snapshots import (AMDGPU_DKMS, NVIDIA_DRIVER, amd_mi300x_node, assert_actionable, nvidia_h200_node,
                                     run)


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


def _nvml_failed(kind: ErrorKind, message: str):
    """driver.library's result for NVML on the H200 node (module loaded) when nvmlInit fails so."""
    snap = nvidia_h200_node()
    snap.backends[0].available = False
    snap.backends[0].error = ProbeError("nvml.nvmlInit", kind, message)
    return next(r for r in run(snap, "driver.library") if "nvml" in r.message)


def test_library_missing_while_module_loaded_points_at_the_userspace_package():
    result = _nvml_failed(ErrorKind.NOT_FOUND, "NVML Shared Library Not Found")
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


# -- boundaries the mutation run found unpinned (issue 16) -------------------------------------------------------

IN_TREE = "in-tree amdgpu (kernel release)"
DKMS_MODULE = "kernel module (/sys/module/amdgpu/version)"


@pytest.mark.parametrize("check_id, message", [
    ("driver.module_loaded", "no GPU on the PCI bus or in any vendor library"),
    ("driver.device_bound", "no GPU found on the PCI bus"),
    ("driver.library", "no vendor library was tried"),
    ("driver.version_consistent", "no GPU on this node"),
    ("driver.version", "no GPU on this node"),
])
def test_a_node_without_gpus_gets_one_node_level_skip_per_driver_check(check_id, message):
    """A check that answers nothing vanishes from the report and the exporter: it must say why it skipped."""
    (result,) = run(NodeSnapshot(), check_id, Expectations(min_driver_version="550.0"))
    assert (result.status, result.device, result.message) == (Status.SKIP, None, message)


def test_library_refused_for_permissions_says_to_run_as_root_not_to_fix_the_driver():
    result = _nvml_failed(ErrorKind.NO_PERMISSION, "Insufficient Permissions")
    assert_actionable(result, Status.FAIL)
    assert result.remediation == PERMISSION_REMEDIATION


def _amd_without_amdsmi(modules: dict):
    """amdsmi not installed (the sysfs fallback serves the GPUs), so no library reports a driver version."""
    snap = amd_mi300x_node()
    amdsmi = snap.backend("amdsmi")
    amdsmi.available, amdsmi.driver_version = False, None
    amdsmi.error = ProbeError("amdsmi.import", ErrorKind.NOT_FOUND, "libamd_smi.so not found")
    snap.host.modules_loaded = modules
    return snap


def test_a_dkms_amdgpu_is_judged_by_its_module_version_not_the_kernel_release():
    snap = _amd_without_amdsmi({"amdgpu": AMDGPU_DKMS})
    (consistent,) = run(snap, "driver.version_consistent")
    assert consistent.status == Status.PASS and consistent.observed == {DKMS_MODULE: AMDGPU_DKMS}
    (version,) = run(snap, "driver.version", Expectations(min_driver_version="6.10.0"))
    assert version.status == Status.PASS
    assert version.message == f"AMD driver {AMDGPU_DKMS} as expected (>= 6.10.0)"


def test_an_in_tree_amdgpu_without_amdsmi_is_judged_by_the_kernel_release():
    snap = _amd_without_amdsmi({"amdgpu": None})  # loaded, no /sys/module/amdgpu/version
    release = snap.host.kernel_release
    (consistent,) = run(snap, "driver.version_consistent")
    assert consistent.status == Status.PASS and consistent.observed == {IN_TREE: release}
    (new_enough,) = run(snap, "driver.version", Expectations(min_driver_version="6.8.0"))
    assert new_enough.status == Status.PASS
    (too_old,) = run(snap, "driver.version", Expectations(min_driver_version="6.10.5"))
    assert_actionable(too_old, Status.FAIL)
    assert too_old.message == f"AMD driver {release} is older than the required 6.10.5"


def test_no_module_list_and_no_amdsmi_is_not_taken_for_an_in_tree_driver():
    """Without /sys/module nor amdsmi nothing says which amdgpu runs: the kernel release is no evidence."""
    snap = _amd_without_amdsmi({})
    (consistent,) = run(snap, "driver.version_consistent")
    assert (consistent.status, consistent.message) == (Status.SKIP, "no AMD driver version is reported on this node")
    (version,) = run(snap, "driver.version", Expectations(min_driver_version="6.8.0"))
    assert_actionable(version, Status.UNKNOWN)
    assert version.message == ("no AMD driver version is reported, so it cannot be compared with >= 6.8.0 (the "
                               "in-tree amdgpu has no version of its own: pin the kernel)")


@pytest.mark.parametrize("expect", [Expectations(expected_driver_version=NVIDIA_DRIVER),
                                    Expectations(min_driver_version="550.0")], ids=["exact", "minimum"])
def test_no_nvidia_driver_version_anywhere_is_unknown_not_a_mismatch(expect):
    snap = nvidia_h200_node()
    snap.host.modules_loaded["nvidia"] = None
    snap.host.nvidia_proc_version = None
    snap.backends[0].driver_version = None
    (result,) = run(snap, "driver.version", expect)
    assert_actionable(result, Status.UNKNOWN)
    wanted = expect.expected_driver_version or f">= {expect.min_driver_version}"
    assert result.message == f"no NVIDIA driver version is reported, so it cannot be compared with {wanted}"
    assert result.remediation.startswith("Fix the driver first")


@pytest.mark.parametrize("build, confirm", [
    (nvidia_h200_node, "Confirm with `modinfo -F version nvidia` and `cat /proc/driver/nvidia/version`."),
    (amd_mi300x_node, "Confirm with `modinfo -F version amdgpu` and `amd-smi version`."),
], ids=["nvidia", "amd"])
def test_an_unexpected_driver_names_the_vendors_own_commands(build, confirm):
    (result,) = run(build(), "driver.version", Expectations(expected_driver_version="999.1"))
    assert_actionable(result, Status.FAIL)
    assert result.remediation.endswith(confirm)


@pytest.mark.parametrize("vendor, grep", [("nvidia", "dmesg -T | grep -i -e NVRM -e Xid"),
                                          ("amd", "dmesg -T | grep -i amdgpu")])
def test_a_missing_module_points_at_the_vendors_kernel_log_lines(vendor, grep):
    snap = nvidia_h200_node() if vendor == "nvidia" else amd_mi300x_node()
    snap.host.modules_loaded = {}
    for backend in snap.backends:
        backend.available, backend.device_count = False, 0
    snap.devices = []
    (result,) = run(snap, "driver.module_loaded")
    assert_actionable(result, Status.FAIL)
    module = "nvidia" if vendor == "nvidia" else "amdgpu"
    assert f"Load it with `modprobe {module}` and read why it failed with `{grep}`." in result.remediation


def test_a_loaded_module_passes_even_when_the_library_fails():
    """The module list is the evidence: a failing NVML is driver.library's finding, not a missing module."""
    snap = nvidia_h200_node()
    snap.backends[0].available, snap.backends[0].device_count = False, 0
    snap.backends[0].error = ProbeError("nvml.nvmlInit", ErrorKind.ERROR, "Unknown Error")
    (result,) = run(snap, "driver.module_loaded")
    assert (result.status, result.message) == (Status.PASS, "kernel module nvidia is loaded")
    assert result.observed == {"nvidia": NVIDIA_DRIVER}
