"""amdgpu's link DPM end to end: the real collector over the fake libamd_smi.so and an amdgpu sysfs tree with
pp_dpm_pcie, then the pcie checks. Only a DPM level below the top one excuses a lower link."""

from __future__ import annotations

from gpudiag.checks import run_checks
from gpudiag.model import Status
from gpudiag.probe.collector import CollectOptions, collect
from tests.support.fakes.amd_node import mi300x_node
from tests.support.fakes.amdgpu_sysfs_tree import add_amdgpu_node
from tests.support.fakes.fake_amdsmi import installed
from tests.support.sysfs_tree import SysfsTree


def _verdicts(tmp_path, node, dpm: dict[int, str]):
    tree = SysfsTree(tmp_path / "root")
    devices = add_amdgpu_node(tree, node)
    for gpu, text in dpm.items():
        (devices[gpu] / "pp_dpm_pcie").write_text(text)
    with installed(node):
        snapshot = collect(CollectOptions(root=tree.root, read_kernel_log=False, timeout_seconds=20))
    return {(r.check, r.device.index): r for r in run_checks(snapshot)
            if r.check.startswith("pcie.link_") and r.device is not None}


def test_gen4_link_with_the_top_dpm_level_in_use_fails_and_a_lower_level_warns(tmp_path):
    node = mi300x_node(4)
    node.gpus[1].pcie_mts = 16000  # Gen5 GPU in a Gen5 slot, trained at Gen4
    node.gpus[2].pcie_mts = 16000
    node.gpus[3].pcie_mts = 2500  # parked by link DPM
    verdicts = _verdicts(tmp_path, node, {
        2: "0: 2.5GT/s, x16 619Mhz \n1: 16.0GT/s, x16 1143Mhz *\n",  # the top level is what it trained at
        3: "0: 2.5GT/s, x16 619Mhz *\n1: 32.0GT/s, x16 1143Mhz \n",
    })
    assert verdicts[("pcie.link_generation", 0)].status == Status.PASS
    assert verdicts[("pcie.link_generation", 1)].status == Status.FAIL  # no pp_dpm_pcie: nothing excuses it
    assert verdicts[("pcie.link_generation", 2)].status == Status.FAIL
    assert verdicts[("pcie.link_generation", 3)].status == Status.WARN
    assert verdicts[("pcie.link_generation", 3)].observed["pcie_dpm_top"] == "Gen5 x16"
