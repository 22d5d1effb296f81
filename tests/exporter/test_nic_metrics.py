"""The gpudiag_nic_* series (exporter/metrics_network.py) over the fake NIC trees: each fault shows on its NIC's series,
the text passes prometheus_client's parser and `promtool check metrics`, and what was not read has no series."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.metrics_network import SPECS, add
from gpudiag.model.network import NetworkInfo
from tests.support import rdma_tree
from tests.support.exporter import parse as samples
from tests.support.network_nodes import clear_counters, snapshot
from tests.support.rdma_tree import GPUD_HCAS, firmware, half_rate, port_down
from tests.support.rdma_tree_amd import mi355x_pollara


def exposition(snap) -> str:
    fs = MetricSet()
    add(fs, snap)
    return fs.exposition().decode()


def values(text: str, name: str) -> dict:
    return {(labels["nic"], labels.get("port")): value for sample, labels, value in samples(text) if sample == name}


def test_every_spec_is_named_and_typed_as_the_catalog_requires():
    assert len({s.name for s in SPECS}) == len(SPECS)
    assert all(s.name.startswith("gpudiag_nic_") for s in SPECS)


def test_a_healthy_infiniband_node_shows_every_port_up_at_400g(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    text = exposition(snapshot(tmp_path))
    up, rate = values(text, "gpudiag_nic_port_up"), values(text, "gpudiag_nic_port_rate_bytes_per_second")
    assert {k: v for k, v in up.items() if k[0] in GPUD_HCAS} == {(n, "1"): 1.0 for n in GPUD_HCAS}
    assert {k: v for k, v in rate.items() if k[0] in GPUD_HCAS} == {(n, "1"): 5e10 for n in GPUD_HCAS}
    assert rate[("mlx5_bond_0", "1")] == 2.5e10  # the front-end BlueField-3 at 200 Gb/s, as recorded
    info = [labels for name, labels, _ in samples(text) if name == "gpudiag_nic_info" and labels["nic"] == "mlx5_0"]
    assert info == [{"nic": "mlx5_0", "pci_bus_id": "0000:19:00.0", "model": "ConnectX-7", "pci_id": "15b3:1021",
                     "board_id": "MT_0000000838", "firmware_version": "28.41.1000", "driver": "mlx5_core",
                     "numa_node": "0"}]
    data = {labels["direction"]: value for name, labels, value in samples(text)
            if name == "gpudiag_nic_port_data_bytes_total" and labels["nic"] == "mlx5_0"}
    assert data == {"rx": 4 * 230539874932483, "tx": 4 * 230442669431839}  # 4-octet words, as recorded


def test_faults_show_on_their_nics_series(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    port_down(node, "mlx5_4")
    half_rate(node, "mlx5_7")
    firmware(node, "mlx5_6", "28.39.1002")
    text = exposition(snapshot(tmp_path))
    up = values(text, "gpudiag_nic_port_up")
    assert [k for k, v in up.items() if v == 0] == [("mlx5_4", "1")]
    assert values(text, "gpudiag_nic_port_state")[("mlx5_4", "1")] == 1  # DOWN
    assert values(text, "gpudiag_nic_port_phys_state")[("mlx5_4", "1")] == 3  # Disabled
    assert values(text, "gpudiag_nic_port_rate_bytes_per_second")[("mlx5_7", "1")] == 2.5e10
    assert values(text, "gpudiag_nic_port_width_lanes")[("mlx5_7", "1")] == 2
    firmware_of = {labels["nic"]: labels["firmware_version"] for name, labels, _ in samples(text)
                   if name == "gpudiag_nic_info"}
    assert firmware_of["mlx5_6"] == "28.39.1002" and firmware_of["mlx5_5"] == "28.41.1000"


def test_a_saturated_counter_is_said_so(tmp_path):
    rdma_tree.hgx_h100_ib(tmp_path)  # GPUd's counters as recorded: mlx5_1 link_downed 255
    text = exposition(snapshot(tmp_path))
    saturated = {(labels["nic"], labels["counter"]): value for name, labels, value in samples(text)
                 if name == "gpudiag_nic_port_pma_saturated"}
    assert saturated[("mlx5_1", "link_downed")] == 1 and saturated[("mlx5_0", "link_downed")] == 0
    assert saturated[("mlx5_0", "excessive_buffer_overrun_errors")] == 1  # 15: the 4-bit top


def test_pollara_ports_have_hw_counters_and_no_port_counters(tmp_path):
    mi355x_pollara(tmp_path)
    text = exposition(snapshot(tmp_path, amd=True))
    names = {name for name, _, _ in samples(text)}
    assert "gpudiag_nic_port_hw_total" in names and "gpudiag_nic_port_pma_total" not in names
    assert "gpudiag_nic_netdev_speed_bytes_per_second" in names


def test_no_series_when_not_read_and_a_zero_count_when_there_are_none(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    snap = snapshot(tmp_path)
    snap.network = None
    assert exposition(snap) == ""
    snap.network = NetworkInfo(readable=False)
    assert exposition(snap) == ""
    snap.network = NetworkInfo(readable=True, class_present=False)
    assert samples(exposition(snap)) == [("gpudiag_nic_devices", {}, 0.0)]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_text(tmp_path):
    rdma_tree.h200_roce(tmp_path)
    text = exposition(snapshot(tmp_path))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
