"""Golden baselines: what is recorded, the file format, and the baseline.* drift report."""

import dataclasses
import json

import pytest

from gpudiag.baseline import BaselineError, load_baseline, save_baseline
from gpudiag.checks import run_checks
from gpudiag.checks.baseline_of import baseline_of
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.model import ErrorKind, ProbeError, Status, Vendor
from tests.acceptance_nodes import nvidia_h200_8x
from tests.snapshots import amd_mi300x_node, assert_actionable, cpx_partitioned, nvidia_h200_node


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
    assert len(peers) == 1 and "0000:19:00.0<->0000:db:00.0: golden nvlink ×18, now not reported" in peers[0].message


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
    assert (firmware[1].action, firmware[1].fault_code) == ("reset", "GPUDIAG-GPU-UNREACHABLE")


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
