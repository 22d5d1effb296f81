"""Golden baselines: what is recorded, the file format, and the baseline.* drift report."""

import dataclasses
import json

import pytest

from gpudiag.checks import run_checks
from gpudiag.checks.baseline_of import baseline_of
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.expect.baseline import BaselineError, load_baseline, save_baseline
from gpudiag.model import ErrorKind, ProbeError, Status, Vendor
from tests.support.acceptance_nodes import nvidia_h200_8x
from tests.support.snapshots import amd_mi300x_node, assert_actionable, cpx_partitioned, nvidia_h200_node


def judge(snapshot, golden):
    results = run_checks(snapshot, dataclasses.replace(DEFAULT_EXPECTATIONS, baseline=golden), only=["baseline"])
    assert results and all(r.check.startswith("baseline.") for r in results)
    return results


def failures(results):
    return [r for r in results if r.status == Status.FAIL]


def test_a_baseline_records_capability_not_the_idle_link():
    snap = nvidia_h200_node()
    for device, pci in zip(snap.devices, snap.pci_gpus):  # idle GPUs downshift to Gen1
        device.pcie.current_generation = pci.current_link_generation = 1
    golden = baseline_of(snap)
    assert golden.vendors == {Vendor.NVIDIA} and len(golden.gpus) == 2
    gpu = golden.gpus[0]
    assert (gpu.pci_bus_id, gpu.model, gpu.index) == ("0000:19:00.0", "NVIDIA H200", 0)
    assert (gpu.pcie_max_generation, gpu.pcie_max_width, gpu.slot_max_generation, gpu.slot_max_width) == (5, 16, 5, 16)
    assert (gpu.numa_node, gpu.links_up, len(gpu.link_remotes)) == (0, 18, 18)
    assert gpu.vbios_version == "96.00.9F.00.01" and gpu.firmware_versions["image"] == "G520.0282.02.02"
    assert (gpu.mig_enabled, gpu.partitions, gpu.compute_partition) == (False, None, None)
    assert golden.driver_versions == {"nvml": "560.35.03"}
    assert [(p.pci_bus_id_a, p.pci_bus_id_b, p.path, p.link_count) for p in golden.peers] == [
        ("0000:19:00.0", "0000:3b:00.0", "nvlink", 18)]


def test_partitioned_gpus_are_recorded_once_with_their_partition_count():
    golden = baseline_of(cpx_partitioned(amd_mi300x_node()))
    assert len(golden.gpus) == 8
    assert {(g.compute_partition, g.memory_partition, g.partitions) for g in golden.gpus} == {("CPX", "NPS1", 8)}


def test_the_file_round_trips_and_is_written_atomically(tmp_path):
    golden = baseline_of(amd_mi300x_node())
    path = tmp_path / "golden.json"
    save_baseline(golden, path)
    assert load_baseline(path) == golden
    assert json.loads(path.read_text())["kind"] == "gpudiag-baseline"
    assert [p.name for p in tmp_path.iterdir()] == ["golden.json"]  # no temporary file left behind


def test_a_node_matches_its_own_baseline():
    for snap in (nvidia_h200_8x(), amd_mi300x_node(), cpx_partitioned(amd_mi300x_node())):
        results = judge(snap, baseline_of(snap))
        assert {r.status for r in results} == {Status.PASS}
        assert {r.check for r in results} == {"baseline.inventory", "baseline.pcie", "baseline.numa", "baseline.fabric",
                                              "baseline.firmware", "baseline.driver", "baseline.partition"}


def test_every_drift_names_the_gpu_the_field_and_golden_vs_now():
    golden = baseline_of(amd_mi300x_node())
    snap = amd_mi300x_node()
    snap.pci_gpus[1].upstream_max_link_generation = 4  # a Gen4 riser in slot 1
    snap.devices[2].numa_node = snap.pci_gpus[2].numa_node = 1
    snap.devices[3].links[6].up = False
    snap.devices[4].firmware_versions["SMC"] = "85.121.0"
    snap.devices[5].memory_partition = "NPS4"
    snap.backends[1].driver_version = "6.12.12"
    results = judge(snap, golden)
    by_check = {r.check: r for r in failures(results)}
    assert set(by_check) == {"baseline.pcie", "baseline.numa", "baseline.fabric", "baseline.firmware",
                             "baseline.partition", "baseline.driver"}
    pcie = by_check["baseline.pcie"]
    assert_actionable(pcie, Status.FAIL)
    assert pcie.device.pci_bus_id == "0000:26:00.0"
    assert "slot_max_generation: golden 5, now 4" in pcie.message and "0000:26:00.0" in pcie.message
    assert (pcie.observed, pcie.expected) == ({"slot_max_generation": 4}, {"slot_max_generation": 5})
    assert (pcie.action, pcie.fault_code) == ("drain", "GPUDIAG-BASELINE-PCIE-DRIFT")
    assert "numa_node: golden 0, now 1" in by_check["baseline.numa"].message
    fabric = [r for r in failures(results) if r.check == "baseline.fabric"]
    assert len(fabric) == 1 and fabric[0].device.index == 3
    assert "links_up: golden 7, now 6" in fabric[0].message and "link_remotes: missing 0000:e5:00.0 ×1" in \
        fabric[0].message
    assert "firmware_versions.SMC: golden 85.120.0, now 85.121.0" in by_check["baseline.firmware"].message
    assert "memory_partition: golden NPS1, now NPS4" in by_check["baseline.partition"].message
    driver = by_check["baseline.driver"]
    assert driver.device is None and "amdsmi: golden 6.10.5, now 6.12.12" in driver.message
    # Every other GPU still matches, and says so.
    assert sum(r.status == Status.PASS for r in results if r.check == "baseline.pcie") == 7


def test_a_missing_gpu_and_a_value_no_longer_reported():
    golden = baseline_of(nvidia_h200_8x())
    snap = nvidia_h200_8x()
    del snap.devices[7], snap.pci_gpus[7]
    snap.devices[0].vbios_version = None
    results = judge(snap, golden)
    inventory = [r for r in failures(results) if r.check == "baseline.inventory"]
    assert len(inventory) == 1 and inventory[0].device is None
    assert "GPU count: golden 8, now 7" in inventory[0].message and "not on this node: 0000:db:00.0" in \
        inventory[0].message
    firmware = [r for r in failures(results) if r.check == "baseline.firmware"]
    assert [r.device.index for r in firmware] == [0]
    assert "vbios_version: golden 96.00.9F.00.01, now not reported" in firmware[0].message
    peers = [r for r in failures(results) if r.check == "baseline.fabric"]
    # every pair of the missing GPU said once, by the GPU (issue 36, item 6); each pair is in observed/expected
    assert len(peers) == 1 and ("GPU peer paths drifted from the baseline on 7 of 28 pairs: 0000:db:00.0 with 7 "
                                "GPU(s) (golden nvlink ×18, now not reported)") in peers[0].message
    assert peers[0].observed["0000:19:00.0<->0000:db:00.0"] is None
    assert peers[0].expected["0000:19:00.0<->0000:db:00.0"] == "nvlink ×18" and len(peers[0].expected) == 7


def test_pairs_drifting_apart_are_named_alone_and_mixed_changes_counted():
    golden = baseline_of(nvidia_h200_8x())
    snap = nvidia_h200_8x()
    snap.peers[0].link_count = 12  # 0000:19:00.0<->0000:3b:00.0
    snap.peers[-1].path = "node"  # 0000:cb:00.0<->0000:db:00.0
    (drift,) = [r for r in failures(judge(snap, golden)) if r.check == "baseline.fabric"]
    assert drift.message.startswith("GPU peer paths drifted from the baseline on 2 of 28 pairs: "
                                    "0000:19:00.0<->0000:3b:00.0: golden nvlink ×18, now nvlink ×12; "
                                    "0000:cb:00.0<->0000:db:00.0: golden nvlink ×18, now node ×18")
    snap = nvidia_h200_8x()
    snap.peers = [p for p in snap.peers if 0 not in (p.gpu_a, p.gpu_b) or p.gpu_b != 1]  # one pair of GPU 0 lost
    for peer in snap.peers:
        if 0 in (peer.gpu_a, peer.gpu_b):
            peer.link_count = 6
    (drift,) = [r for r in failures(judge(snap, golden)) if r.check == "baseline.fabric"]
    assert ("on 7 of 28 pairs: 0000:19:00.0 with 7 GPU(s) (golden nvlink ×18, now not reported (1 pair); golden "
            "nvlink ×18, now nvlink ×6 (6 pairs))") in drift.message


def test_a_value_the_golden_node_did_not_report_is_not_compared():
    snap = nvidia_h200_node()
    snap.devices[0].numa_node = snap.pci_gpus[0].numa_node = None
    golden = baseline_of(snap)
    assert golden.gpus[0].numa_node is None
    snap.devices[0].numa_node = 1
    assert {r.status for r in judge(snap, golden) if r.check == "baseline.numa"} == {Status.PASS}


def test_a_baseline_of_another_vendor_or_count_is_a_clear_mismatch():
    golden = baseline_of(amd_mi300x_node())
    results = judge(nvidia_h200_node(), golden)
    (inventory,) = failures(results)
    assert_actionable(inventory, Status.FAIL)
    assert inventory.message.startswith("the baseline is of a AMD node, this node has NVIDIA GPUs; GPU count: golden "
                                        "8, now 2")
    assert inventory.expected["vendors"] == ["amd"] and inventory.observed["vendors"] == ["nvidia"]
    # Nothing else of another vendor's node is comparable: each other check says so once, pointing at the inventory.
    others = [r for r in results if r.check != "baseline.inventory"]
    assert {r.status for r in others} == {Status.SKIP} and {r.device for r in others} == {None}
    assert "see baseline.inventory" in " ".join(r.message for r in others)


def test_a_baseline_of_another_gpu_count_of_the_same_vendor():
    results = judge(nvidia_h200_node(), baseline_of(nvidia_h200_8x()))
    (inventory,) = [r for r in failures(results) if r.check == "baseline.inventory"]
    assert inventory.message.startswith("GPU count: golden 8, now 2; GPU(s) of the baseline not on this node: "
                                        "0000:4c:00.0, 0000:5d:00.0, 0000:9b:00.0")
    # The two GPUs both have are still compared, field by field.
    assert [r.device.index for r in results if r.check == "baseline.pcie" and r.status == Status.PASS] == [0, 1]


def test_an_unreachable_gpu_is_unknown_not_a_drift():
    golden = baseline_of(nvidia_h200_node())
    snap = nvidia_h200_node()
    snap.devices[1].reachable = False
    snap.devices[1].errors = [ProbeError("nvml.nvmlDeviceGetVbiosVersion", ErrorKind.GPU_LOST, "GPU is lost")]
    snap.devices[1].vbios_version = None
    firmware = [r for r in judge(snap, golden) if r.check == "baseline.firmware"]
    assert [r.status for r in firmware] == [Status.PASS, Status.UNKNOWN]
    assert (firmware[1].action, firmware[1].fault_code) == ("reboot", "GPUDIAG-GPU-UNREACHABLE")  # lost: cold boot


def test_without_a_baseline_every_baseline_check_skips_with_the_hint():
    results = run_checks(nvidia_h200_node(), only=["baseline"])
    assert len(results) == 7 and {r.status for r in results} == {Status.SKIP}
    assert all("--baseline FILE" in r.message for r in results)


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"),
    ("[]", "kind: not a gpudiag baseline"),
    ('{"schema_version": 1, "hostname": "x", "devices": []}', "kind: not a gpudiag baseline"),
    ('{"kind": "gpudiag-baseline", "schema_version": 2}', "schema_version: 2 is not supported"),
    ('{"kind": "gpudiag-baseline", "schema_version": 1, "gpus": [{"pci_bus_id": "0000:19:00.0", "vendor": "nvidia", '
     '"pcie_max_width": "x16"}]}', "gpus[0].pcie_max_width: expected int, got str"),
    ('{"kind": "gpudiag-baseline", "schema_version": 1, "gpus": [{"pci_bus_id": "0000:19:00.0", "vendor": "intel"}]}',
     "gpus[0].vendor: 'intel' is not a valid Vendor"),
    ('{"kind": "gpudiag-baseline", "schema_version": 1, "gpus": [{"pci_bus_id": "19:00.0", "vendor": "amd"}]}',
     "gpus[0].pci_bus_id: '19:00.0' is not normalised (expected '0000:19:00.0')"),
    ('{"kind": "gpudiag-baseline", "schema_version": 1, "gpus": [{"pci_bus_id": "slot 3", "vendor": "amd"}]}',
     "gpus[0].pci_bus_id: 'slot 3' is not a PCI bus ID"),
    ('{"kind": "gpudiag-baseline", "schema_version": 1, "gpus": [{"pci_bus_id": "0000:19:00.0", "vendor": "amd"}, '
     '{"pci_bus_id": "0000:19:00.0", "vendor": "amd"}]}', "gpus[1].pci_bus_id: 0000:19:00.0 is listed twice"),
    ('{"kind": "gpudiag-baseline", "schema_version": 1, "gpu": []}', "unknown field(s) ['gpu'] for NodeBaseline"),
])
def test_malformed_baselines_are_one_line_naming_file_key_and_problem(tmp_path, text, message):
    path = tmp_path / "golden.json"
    path.write_text(text)
    with pytest.raises(BaselineError) as error:
        load_baseline(path)
    assert str(error.value).startswith(f"baseline {path}: ") and message in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


# --- branches the mutation run found unpinned (issue 16) ------------------------------------------------------


def test_a_gpu_on_the_bus_but_not_enumerated_is_unknown_never_a_match():
    golden = baseline_of(nvidia_h200_node())
    snap = nvidia_h200_node()
    del snap.devices[1]  # 0000:3b:00.0 stays on the PCI bus; its library no longer enumerates it
    results = judge(snap, golden)
    lost = [r for r in results if r.device is None and r.status == Status.UNKNOWN]
    assert [(r.check, r.message) for r in lost] == [
        ("baseline.inventory", "GPU at 0000:3b:00.0 is on the PCI bus but not enumerated by its library: its model "
                               "cannot be compared"),
        ("baseline.pcie", "GPU at 0000:3b:00.0 is on the PCI bus but not enumerated by its library: its "
                          "pcie_max_generation, pcie_max_width, slot_max_generation, slot_max_width cannot be "
                          "compared"),
        ("baseline.numa", "GPU at 0000:3b:00.0 is on the PCI bus but not enumerated by its library: its numa_node "
                          "cannot be compared"),
        ("baseline.fabric", "GPU at 0000:3b:00.0 is on the PCI bus but not enumerated by its library: its links_up, "
                            "link_remotes cannot be compared"),
        ("baseline.firmware", "GPU at 0000:3b:00.0 is on the PCI bus but not enumerated by its library: its "
                              "vbios_version, firmware_versions cannot be compared"),
        ("baseline.partition", "GPU at 0000:3b:00.0 is on the PCI bus but not enumerated by its library: its "
                               "compute_partition, memory_partition, partitions, mig_enabled cannot be compared")]
    assert lost[1].observed == {"pci_bus_id": "0000:3b:00.0", "enumerated": False}
    # The enumerated GPU is still compared and named by its label.
    numa = [r for r in results if r.check == "baseline.numa"]
    assert (numa[0].status, numa[0].message) == (Status.PASS, "GPU 0 (0000:19:00.0) matches the baseline (numa_node)")


def test_a_pass_shows_the_values_compared_and_leaves_out_what_the_golden_node_did_not_report():
    snap = nvidia_h200_node()
    snap.devices[0].vbios_version = None
    golden = baseline_of(snap)
    results = judge(snap, golden)
    numa = [r for r in results if r.check == "baseline.numa"][0]
    assert (numa.observed, numa.expected) == ({"numa_node": 0}, {"numa_node": 0})
    firmware = [r for r in results if r.check == "baseline.firmware"]
    assert {r.status for r in firmware} == {Status.PASS}
    assert firmware[0].observed == firmware[0].expected == {"firmware_versions": golden.gpus[0].firmware_versions}
    assert set(firmware[1].observed) == {"vbios_version", "firmware_versions"}


def test_links_no_longer_reported_are_a_drift_naming_golden_and_not_reported():
    golden = baseline_of(nvidia_h200_node())
    snap = nvidia_h200_node()
    snap.devices[1].links = []  # the library reports no NVLink at all now
    fabric = [r for r in failures(judge(snap, golden)) if r.check == "baseline.fabric" and r.device is not None]
    assert [r.device.index for r in fabric] == [1]
    assert fabric[0].message == (f"GPU 1 (0000:3b:00.0) drifted from the baseline: links_up: golden 18, now not "
                                 f"reported; link_remotes: golden {golden.gpus[1].link_remotes}, now not reported")
    assert fabric[0].observed == {"links_up": None, "link_remotes": None}


def test_another_vendors_baseline_gives_each_other_check_one_skip_saying_why():
    results = judge(nvidia_h200_node(), baseline_of(amd_mi300x_node()))
    no_common = "no GPU of the baseline is on this node (see baseline.inventory)"
    other = "the baseline is of a AMD node, this one has NVIDIA GPUs (see baseline.inventory)"
    assert [(r.check, r.message) for r in results if r.check != "baseline.inventory"] == [
        ("baseline.pcie", no_common), ("baseline.numa", no_common), ("baseline.fabric", no_common),
        ("baseline.fabric", other), ("baseline.firmware", no_common), ("baseline.driver", other),
        ("baseline.partition", no_common)]


def test_a_baseline_without_a_driver_version_skips_the_driver_comparison():
    snap = nvidia_h200_node()
    golden = dataclasses.replace(baseline_of(snap), driver_versions={})
    snap.backends[0].driver_version = "575.57.08"  # would drift, were the golden version known
    driver = [r for r in judge(snap, golden) if r.check == "baseline.driver"]
    assert [(r.status, r.message) for r in driver] == [(Status.SKIP, "the baseline recorded no driver version")]


def test_a_gpu_known_only_from_the_pci_bus_is_recorded_from_sysfs():
    snap = nvidia_h200_node()
    snap.pci_gpus[1].numa_node = 1
    del snap.devices[1]
    gpu = baseline_of(snap).gpus[1]
    assert (gpu.pci_bus_id, gpu.vendor, gpu.index, gpu.model) == ("0000:3b:00.0", Vendor.NVIDIA, None, None)
    assert (gpu.numa_node, gpu.links_up, gpu.link_remotes, gpu.pcie_max_generation) == (1, None, None, 5)


def test_numa_node_comes_from_the_library_then_from_sysfs():
    snap = nvidia_h200_node()
    snap.devices[0].numa_node, snap.pci_gpus[0].numa_node = None, 1  # the library does not report it: sysfs does
    del snap.pci_gpus[1]  # no sysfs record for the other GPU: the library's value stands
    snap.devices[1].numa_node = 1
    gpus = baseline_of(snap).gpus
    assert [(g.pci_bus_id, g.vendor, g.numa_node) for g in gpus] == [("0000:19:00.0", Vendor.NVIDIA, 1),
                                                                     ("0000:3b:00.0", Vendor.NVIDIA, 1)]


def test_a_gpu_whose_library_reports_no_links_records_none_not_zero():
    snap = nvidia_h200_node()
    snap.devices[0].links = []
    gpu = baseline_of(snap).gpus[0]
    assert (gpu.links_up, gpu.link_remotes) == (None, None)  # not reported: not compared against a later node
