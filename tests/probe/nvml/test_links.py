"""NVLink links and GPU pairs (topology, P2P) as NvmlBackend reports them (over the fake libnvidia-ml)."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from gpudiag.model import PeerLink
from tests.support.fakes.fake_nvml import FakeGpu, FakeNode, FakeNvLink, installed
from tests.support.probe_nvml import probe


def test_nvlink_down_is_reported_and_lowers_the_pair_link_count():
    node = FakeNode.hgx_h200(2)
    node.gpus[0].nvlink_down(3, 7)
    node.gpus[0].nvlinks[5].errors = {"replay": 4, "crc_flit": 9}
    result = probe(node)
    links = result.devices[0].links

    assert [link.index for link in links if not link.up] == [3, 7]
    down = links[3]
    assert (down.version, down.remote_pci_bus_id, down.remote_device_type) == (None, None, None)
    assert down.error_counters["recovery"] == 0  # counters are read on a down link too
    assert links[5].error_counters == {"replay": 4, "recovery": 0, "crc_flit": 9, "crc_data": 0}
    assert (result.peers[0].path, result.peers[0].link_count) == ("nvlink", 16)


def test_gpu_without_nvlink_has_no_links_and_costs_one_link_call():
    result = probe(FakeNode(gpus=[FakeGpu()]))  # a lone GPU: the node gives it no NVLink
    assert result.devices[0].links == []
    assert result.lib.calls["nvmlDeviceGetNvLinkState"] == 1


def test_without_the_link_count_field_the_walk_stops_past_the_last_link():
    node = FakeNode.hgx_h200(1)
    node.gpus[0].nvlinks = [FakeNvLink() for _ in range(18)]
    node.gpus[0].field_errors = {pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: pynvml.NVML_ERROR_NOT_SUPPORTED}
    result = probe(node)
    assert [link.index for link in result.devices[0].links] == list(range(18))
    assert result.lib.calls["nvmlDeviceGetNvLinkState"] == 19  # link 18 answers INVALID_ARGUMENT
    assert result.devices[0].errors == []


def test_bridged_pair_counts_the_links_between_them():
    gpus = [FakeGpu(bus_id="00000000:19:00.0", nvlinks=[]), FakeGpu(bus_id="00000000:3B:00.0", nvlinks=[])]
    for me, other in ((gpus[0], gpus[1]), (gpus[1], gpus[0])):
        me.nvlinks = [FakeNvLink(remote_bus_id=other.bus_id, remote_type=pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)
                      for _ in range(4)]
    result = probe(FakeNode(gpus=gpus, default_topology=pynvml.NVML_TOPOLOGY_SYSTEM))
    assert result.devices[0].links[0].remote_device_type == "gpu"
    assert (result.peers[0].path, result.peers[0].link_count) == ("nvlink", 4)


def test_pair_without_nvlink_reports_pcie_topology_and_p2p_status():
    node = FakeNode(gpus=[FakeGpu(nvlinks=[]), FakeGpu(bus_id="00000000:3B:00.0", nvlinks=[])],
                    default_topology=pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
                    p2p={(0, 1): {pynvml.NVML_P2P_CAPS_INDEX_WRITE: pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
                                  pynvml.NVML_P2P_CAPS_INDEX_NVLINK: pynvml.NVML_P2P_STATUS_NOT_SUPPORTED}})
    assert probe(node).peers == [PeerLink(0, 1, path="phb", p2p_read="ok", p2p_write="chipset_not_supported",
                                          p2p_nvlink="not_supported", p2p_atomics="ok", link_count=None)]


def test_the_fake_refuses_pynvmls_read_index_tuple_as_ctypes_would():
    assert pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)  # the binding's trailing-comma bug the backend works around
    with installed(FakeNode.hgx_h200(2)):
        pynvml.nvmlInit()
        a, b = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        with pytest.raises(ctypes.ArgumentError):
            pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ)
        assert pynvml.nvmlDeviceGetP2PStatus(a, b, 0) == pynvml.NVML_P2P_STATUS_OK
        pynvml.nvmlShutdown()


def test_an_nvswitch_end_nvml_cannot_name_is_no_bus_id():
    # What the lab's H200s answered for every link (tests/fixtures/h200x2/nvml-survey.json): all ones.
    node = FakeNode.hgx_h200(2)
    node.gpus[0].nvlinks[0].remote_bus_id = "FFFFFFFF:FF:FF.0"
    link = probe(node).devices[0].links[0]
    assert (link.up, link.remote_pci_bus_id, link.remote_device_type) == (True, None, "switch")
