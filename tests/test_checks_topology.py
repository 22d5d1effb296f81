import dataclasses

from gpudiag.expect import Expectations
from gpudiag.model import ErrorKind, PeerLink, ProbeError, Status
from tests.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, nvidia_h200_node, run


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
