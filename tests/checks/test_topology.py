import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, PeerLink, ProbeError, Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, nvidia_h200_node, run


def test_gpu_with_fewer_links_than_its_peers_fails_naming_the_down_links():
    snap = nvidia_h200_node()
    for link in snap.devices[1].links[16:]:
        link.up = False
    results = run(snap, "topology.links_up")
    short = for_gpu(results, 1)
    assert_actionable(short, Status.FAIL)
    assert "16 of 18 NVLink links active; down: 16, 17" in short.message
    assert short.observed["down_links"] == [16, 17]
    assert "nvidia-smi nvlink -s -i 1" in short.remediation and "fabricmanager" in short.remediation
    assert for_gpu(results, 0).status == Status.PASS


def test_expected_link_count_catches_a_node_wide_shortfall():
    snap = nvidia_h200_node()
    for device in snap.devices:
        del device.links[12:]
    # Peers agree with each other: without an expectation that is the board's wiring.
    assert {r.status for r in run(snap, "topology.links_up")} == {Status.PASS}
    hgx = dataclasses.replace(Expectations(), expected_links_per_gpu=18)
    assert {r.status for r in run(snap, "topology.links_up", hgx)} == {Status.FAIL}


def test_amd_xgmi_link_down():
    snap = amd_mi300x_node()
    snap.devices[3].links[5].up = False
    result = for_gpu(run(snap, "topology.links_up"), 3)
    assert_actionable(result, Status.FAIL)
    assert "6 of 7 XGMI links" in result.message and "amd-smi xgmi" in result.remediation


def test_links_of_unknown_state_do_not_count_as_down():
    snap = nvidia_h200_node()
    snap.devices[1].links[17].up = None
    result = for_gpu(run(snap, "topology.links_up"), 1)
    assert_actionable(result, Status.UNKNOWN)
    assert result.observed["unknown_links"] == [17]
    snap.devices[1].links[16].up = False  # one down for certain: 16 + 1 unknown < 18
    assert for_gpu(run(snap, "topology.links_up"), 1).status == Status.FAIL


def test_every_link_state_unreadable_on_every_gpu_is_unknown_not_a_pass():
    # No profile: the expected count comes from the peers, and none of them has a link known to be up. That is a
    # node whose link states could not be read (NVML answered an error for each), not a node with 0 links to hold.
    snap = nvidia_h200_node()
    for device in snap.devices:
        for link in device.links:
            link.up = None
        device.errors.append(ProbeError("nvml.nvmlDeviceGetNvLinkState[link 0]", ErrorKind.ERROR, "Unknown Error"))
    results = run(snap, "topology.links_up")
    assert {r.status for r in results} == {Status.UNKNOWN}
    assert for_gpu(results, 0).observed["unknown_links"] == list(range(18))


def test_links_unreadable_is_unknown():
    snap = nvidia_h200_node()
    snap.devices[0].links = []
    snap.devices[0].errors.append(ProbeError("nvml.nvmlDeviceGetNvLinkState", ErrorKind.ERROR, "Unknown Error"))
    assert_actionable(for_gpu(run(snap, "topology.links_up"), 0), Status.UNKNOWN)


def test_pcie_only_node_skips_link_checks():
    snap = nvidia_h200_node()
    for device in snap.devices:
        device.links = []
    (links,) = run(snap, "topology.links_up")
    (errors,) = run(snap, "topology.link_errors")
    assert links.status == errors.status == Status.SKIP


def test_link_error_counters_above_threshold_warn():
    snap = nvidia_h200_node()
    snap.devices[0].links[3].error_counters["crc_flit"] = 512
    result = for_gpu(run(snap, "topology.link_errors"), 0)
    assert_actionable(result, Status.WARN)
    assert "link 3: 512 crc_flit" in result.message
    assert for_gpu(run(snap, "topology.link_errors"), 1).status == Status.PASS


def test_amd_xgmi_error_status_warns_with_the_clear_command():
    snap = amd_mi300x_node()
    snap.devices[6].xgmi_error_status = "multiple_errors"
    results = run(snap, "topology.link_errors")
    flagged = for_gpu(results, 6)
    assert_actionable(flagged, Status.WARN)
    assert "XGMI error status multiple_errors" in flagged.message
    assert "amd-smi reset --xgmierr -g 6" in flagged.remediation
    assert for_gpu(results, 5).status == Status.PASS


def test_link_error_counters_missing_are_unknown_or_skipped():
    snap = nvidia_h200_node()
    for link in snap.devices[1].links:
        link.error_counters = {}
    assert for_gpu(run(snap, "topology.link_errors"), 1).status == Status.SKIP
    snap.devices[1].errors.append(ProbeError("nvml.nvmlDeviceGetNvLinkErrorCounter", ErrorKind.ERROR, "Unknown"))
    assert_actionable(for_gpu(run(snap, "topology.link_errors"), 1), Status.UNKNOWN)


def test_p2p_not_ok_over_nvlink_fails_but_pcie_paths_are_tolerated():
    snap = nvidia_h200_node()
    snap.peers[0].p2p_read = "not_supported"
    (result,) = run(snap, "topology.p2p")
    assert_actionable(result, Status.FAIL)
    assert "GPU 0 ↔ GPU 1" in result.message and result.observed["read"] == "not_supported"

    snap.peers = [PeerLink(0, 1, path="sys", p2p_read="chipset_not_supported", p2p_write="chipset_not_supported")]
    (ok,) = run(snap, "topology.p2p")
    assert ok.status == Status.PASS and ok.observed["other_paths"] == {"sys": 1}


def test_p2p_on_amd_names_each_failing_pair():
    snap = amd_mi300x_node()
    for peer in snap.peers:
        if 2 in (peer.gpu_a, peer.gpu_b):
            peer.p2p_write = "not_supported"
    results = run(snap, "topology.p2p")
    assert len(results) == 7 and {r.status for r in results} == {Status.FAIL}
    assert all(r.device is None for r in results)


def test_numa_unknown_on_a_multi_socket_host_warns():
    snap = amd_mi300x_node()
    snap.devices[5].numa_node = None
    snap.pci_gpus[5].numa_node = None
    result = for_gpu(run(snap, "topology.numa"), 5)
    assert_actionable(result, Status.WARN)
    assert "SRAT" in result.remediation and "0000:a6:00.0/numa_node" in result.remediation
    snap.host.numa_nodes = 1
    assert for_gpu(run(snap, "topology.numa"), 5).status == Status.PASS


def test_numa_from_sysfs_when_the_library_has_none():
    snap = nvidia_h200_node()
    snap.devices[1].numa_node = None
    result = for_gpu(run(snap, "topology.numa"), 1)
    assert result.status == Status.PASS and result.observed["numa_node"] == 1
    assert node_level(run(snap, "topology.numa")) == []


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py, issue 16) found unpinned.

def test_links_are_compared_with_gpus_of_the_same_model_only():
    # Another model on the node is wired differently: its 18 links set no bar for an H200 that has 12 (and 6 down
    # on every GPU of its own model, here the only one).
    snap = nvidia_h200_node()
    for link in snap.devices[0].links[12:]:
        link.up = False
    snap.devices[1].name = "NVIDIA H100 80GB HBM3"
    result = for_gpu(run(snap, "topology.links_up"), 0)
    assert result.status == Status.PASS
    assert result.message == ("GPU 0 (0000:19:00.0): 12 NVLink links active "
                              "(6 further link(s) report down, as on its peers)")
    assert result.expected == "12 active links"


def test_a_healthy_gpu_passes_with_no_note_about_down_links():
    result = for_gpu(run(nvidia_h200_node(), "topology.links_up"), 0)
    assert result.status == Status.PASS
    assert result.message == "GPU 0 (0000:19:00.0): 18 NVLink links active"


def test_a_gpu_that_reports_no_links_where_its_peers_have_them_fails():
    # No probe error and no recorded reason: the GPU lists no link at all, while its peers have 7 up.
    snap = amd_mi300x_node()
    snap.devices[2].links = []
    result = for_gpu(run(snap, "topology.links_up"), 2)
    assert_actionable(result, Status.FAIL)
    assert result.message.endswith("has 0 of 7 XGMI links active")


def test_xgmi_link_state_not_reported_is_skipped_with_the_reason():
    # A VF / pre-v1.7 gpu_metrics table has no xgmi_link_status (probe/amdsmi/ras.py records why): not down.
    snap = amd_mi300x_node()
    snap.devices[2].links = []
    snap.devices[2].unsupported["amdsmi.amdsmi_get_gpu_xgmi_link_status"] = "an SR-IOV VF has no link status"
    results = run(snap, "topology.links_up")
    skipped = for_gpu(results, 2)
    assert skipped.status == Status.SKIP
    assert skipped.message == ("XGMI link state is not supported on GPU 2 (0000:46:00.0) (AMD Instinct MI300X): "
                               "an SR-IOV VF has no link status")
    assert for_gpu(results, 1).status == Status.PASS


def test_a_reason_recorded_for_link_status_does_not_hide_links_that_were_read():
    snap = amd_mi300x_node()
    snap.devices[2].unsupported["amdsmi.amdsmi_get_gpu_xgmi_link_status"] = "partly reported"
    snap.devices[2].links[4].up = False
    assert for_gpu(run(snap, "topology.links_up"), 2).status == Status.FAIL


def _crc(counts: dict[str, int]):
    snap = nvidia_h200_node()
    snap.devices[0].links[3].error_counters.update(counts)
    return for_gpu(run(snap, "topology.link_errors"), 0)


def test_link_error_counter_at_the_threshold_passes_one_above_warns():
    # Expectations.link_error_warn_count (100): "every error counter <= 100".
    at = _crc({"crc_flit": 100})
    assert at.status == Status.PASS
    assert at.message == "GPU 0 (0000:19:00.0): NVLink error counters within threshold"
    above = _crc({"crc_flit": 101, "replay": 100})
    assert_actionable(above, Status.WARN)
    # Only the counter over the limit is named; the one at it is not.
    assert above.message == "GPU 0 (0000:19:00.0) NVLink link errors: link 3: 101 crc_flit"


def _xgmi_wafl(gpu: int, **counts: int):
    snap = amd_mi300x_node()
    snap.devices[gpu].ecc.by_block["xgmi_wafl"] = {"corrected": 0, "uncorrected": 0, "deferred": 0, **counts}
    return snap


def test_correctable_xgmi_wafl_errors_at_the_threshold_pass_one_above_warn():
    at = for_gpu(run(_xgmi_wafl(4, corrected=100), "topology.link_errors"), 4)
    assert at.status == Status.PASS and at.observed["xgmi_wafl"]["corrected"] == 100
    above = for_gpu(run(_xgmi_wafl(4, corrected=101), "topology.link_errors"), 4)
    assert_actionable(above, Status.WARN)
    assert above.message == "GPU 4 (0000:85:00.0) XGMI link errors: 101 correctable XGMI_WAFL errors"


def test_uncorrectable_xgmi_wafl_errors_fail_with_a_reboot():
    results = run(_xgmi_wafl(4, uncorrected=2), "topology.link_errors")
    result = for_gpu(results, 4)
    assert result.status == Status.FAIL
    assert (result.action, result.fault_code) == ("reboot", "GPUDIAG-FABRIC-XGMI-UNCORRECTABLE")
    assert result.message == ("GPU 4 (0000:85:00.0): 2 uncorrectable XGMI error(s) (XGMI_WAFL RAS block) since the "
                              "driver loaded")
    assert "amd-smi metric --ecc-blocks -g 4" in result.remediation
    assert for_gpu(results, 3).status == Status.PASS
    assert for_gpu(run(_xgmi_wafl(4), "topology.link_errors"), 4).status == Status.PASS


def test_xgmi_wafl_unreadable_without_an_error_status_is_unknown():
    snap = amd_mi300x_node()
    snap.devices[1].xgmi_error_status = None
    snap.devices[1].ecc.unreadable_blocks = ["xgmi_wafl"]
    result = for_gpu(run(snap, "topology.link_errors"), 1)
    assert_actionable(result, Status.UNKNOWN)
    assert "the XGMI_WAFL RAS counts could not be read" in result.message
    # With the XGMI error status read, that status judges the links.
    snap.devices[1].xgmi_error_status = "no_errors"
    assert for_gpu(run(snap, "topology.link_errors"), 1).status == Status.PASS


def test_p2p_without_pairs_is_skipped_not_a_pass():
    snap = nvidia_h200_node()
    snap.peers = []
    (result,) = run(snap, "topology.p2p")
    assert result.status == Status.SKIP
    assert result.message == "no GPU pairs reported (fewer than two GPUs, or no peer probe)"


def test_p2p_failure_names_the_fabric():
    snap = nvidia_h200_node()
    snap.peers[0].p2p_nvlink = "not_supported"
    (nvidia,) = run(snap, "topology.p2p")
    assert nvidia.message == "GPU 0 ↔ GPU 1 are joined by NVLink but P2P is not ok: nvlink not_supported"
    assert nvidia.expected == "P2P ok over NVLink"
    snap = amd_mi300x_node()
    snap.peers[0].p2p_read = "not_supported"
    (amd,) = run(snap, "topology.p2p")
    assert amd.message == "GPU 0 ↔ GPU 1 are joined by XGMI but P2P is not ok: read not_supported"


def test_p2p_pass_counts_the_fabric_pairs_only():
    snap = nvidia_h200_node()
    # One NVLink pair and two pairs over the host (GPUs 2 and 3 of a mixed node hang off PCIe only).
    snap.peers += [PeerLink(0, 2, path="sys", p2p_read="chipset_not_supported"),
                   PeerLink(1, 3, path="sys", p2p_read="chipset_not_supported")]
    (result,) = run(snap, "topology.p2p")
    assert result.status == Status.PASS
    assert result.message == "P2P ok on all 1 NVLink/XGMI pair(s)"
    assert result.observed == {"fabric_pairs": 1, "other_paths": {"sys": 2}}
