from gpudiag.model import Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, nvidia_h200_node, run


def test_vbios_mismatch_warns_listing_which_gpu_has_which():
    snap = amd_mi300x_node()
    snap.devices[5].vbios_version = "113-M3000100-101"
    (result,) = run(snap, "firmware.vbios_consistent")
    assert_actionable(result, Status.WARN)
    assert result.observed == {"113-M3000100-102": [0, 1, 2, 3, 4, 6, 7], "113-M3000100-101": [5]}
    assert "113-M3000100-101 on GPU 5" in result.message
    assert "amd-smi static --vbios" in result.remediation


def test_firmware_component_mismatch_names_the_component():
    snap = nvidia_h200_node()
    snap.devices[1].firmware_versions["image"] = "G520.0280.00.03"
    (result,) = run(snap, "firmware.versions_consistent")
    assert_actionable(result, Status.WARN)
    assert "image firmware version" in result.message
    assert result.observed == {"G520.0282.02.02": [0], "G520.0280.00.03": [1]}


def test_consistent_firmware_is_one_pass_per_model():
    (result,) = run(amd_mi300x_node(), "firmware.versions_consistent")
    assert result.status == Status.PASS and "4 firmware component(s) match on all 8 GPU(s)" in result.message


def test_single_gpu_and_mixed_models_have_nothing_to_compare():
    snap = nvidia_h200_node()
    snap.devices[1].name = "NVIDIA H100 80GB HBM3"
    snap.devices[1].vbios_version = "96.00.30.00.01"
    (result,) = run(snap, "firmware.vbios_consistent")
    assert result.status == Status.SKIP


def test_unreachable_gpu_is_unknown_and_the_rest_are_compared():
    snap = amd_mi300x_node()
    snap.devices[2].reachable = False
    snap.devices[2].vbios_version = None
    lost, compared = run(snap, "firmware.vbios_consistent")
    assert lost.status == Status.UNKNOWN and lost.device.index == 2
    assert compared.status == Status.PASS and compared.observed == {"113-M3000100-102": [0, 1, 3, 4, 5, 6, 7]}


# Issue 16: the survivors of tools/mutate.py in gpudiag/checks/firmware.py


def test_the_update_advice_names_the_vendors_tools():
    snap = nvidia_h200_node()
    snap.devices[1].vbios_version = "96.00.9F.00.02"
    (nvidia,) = run(snap, "firmware.vbios_consistent")
    assert nvidia.status == Status.WARN
    assert "HGX firmware bundle / nvfwupd" in nvidia.remediation and "'VBIOS Version'" in nvidia.remediation
    assert "amd-smi" not in nvidia.remediation
    amd = amd_mi300x_node()
    amd.devices[3].firmware_versions["SMC"] = "85.118.0"
    (amd_result,) = run(amd, "firmware.versions_consistent")
    assert amd_result.status == Status.WARN
    assert "(PLDM / amdfwflash)" in amd_result.remediation and "nvidia-smi" not in amd_result.remediation


def test_no_gpu_of_a_model_reporting_a_vbios_skips_rather_than_warns():
    snap = amd_mi300x_node()
    for device in snap.devices:
        device.vbios_version = None
    (result,) = run(snap, "firmware.vbios_consistent")
    assert result.status == Status.SKIP and result.message == "no VBIOS version reported"
    # one GPU reporting it is a pass for that one: nothing differs
    snap.devices[4].vbios_version = "113-M3000100-102"
    (one,) = run(snap, "firmware.vbios_consistent")
    assert one.status == Status.PASS and one.observed == {"113-M3000100-102": [4]}
    assert "113-M3000100-102 on all 1 GPU(s) that report it" in one.message


def test_nothing_to_compare_says_why():
    snap = nvidia_h200_node()
    snap.devices[1].name = "NVIDIA H100 80GB HBM3"
    (result,) = run(snap, "firmware.vbios_consistent")
    assert result.message == "fewer than two reachable GPUs of one model: no VBIOS version to compare"
    (versions,) = run(snap, "firmware.versions_consistent")
    assert versions.message == "fewer than two reachable GPUs of one model: no firmware version to compare"
