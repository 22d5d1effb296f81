"""The RDMA NIC probe (gpudiag/probe/network/rdma.py) on trees built from real recordings (tests/support/rdma_tree.py):
it reads every recorded value exactly, places each NIC on its PCI path, reads the bridges' ACS where it can and says so
where it cannot, and turns unreadable, hostile or missing files into probe errors or None, never into an exception."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gpudiag.model import ErrorKind, NetworkInfo, NodeSnapshot, from_dict, to_dict
from gpudiag.probe.network.formats import parse_rate, parse_state
from gpudiag.probe.network.rdma import read_network
from gpudiag.probe.pci import probe_pci_gpus
from tests.support import rdma_tree
from tests.support.rdma_tree import (GPUD_HCAS, HGX_GPUS, HGX_NICS, ROCE_GUIDS, config_space, firmware, gpud_h100_files,
                                     half_rate, hgx_h100_ib, h200_roce, link_errors, port_down)
from tests.support.paths import FIXTURES
from tests.support.rdma_tree_amd import BNXT_RE_HW_COUNTERS, mi300x_thor2, mi355x_pollara
from tests.support.sysfs_tree import SysfsTree


def read(root: Path, **kwargs) -> NetworkInfo:
    return read_network(root, time.monotonic() + 10, **kwargs)


def all_errors(info: NetworkInfo) -> list:
    return info.errors + [e for d in info.devices for e in d.errors]


# ---------------------------------------------------------------------------------------------------------------
# Healthy nodes, read exactly


def test_hgx_h100_every_recorded_value_is_read_as_recorded(tmp_path):
    hgx_h100_ib(tmp_path)
    info = read(tmp_path)
    assert info.readable and info.class_present and not all_errors(info) and info.incomplete is None
    assert [d.name for d in info.devices] == sorted([*GPUD_HCAS, "mlx5_bond_0"])
    for name, files in gpud_h100_files().items():
        device = info.device(name)
        assert (device.fw_ver, device.board_id, device.hca_type) == (files["fw_ver"], files["board_id"],
                                                                     files["hca_type"])
        assert device.node_guid is None  # the recording has none: absent, not made up
        (port,) = device.ports
        assert port.number == 1
        assert (port.state_code, port.state) == parse_state(files["ports/1/state"])
        assert (port.phys_state_code, port.phys_state) == parse_state(files["ports/1/phys_state"])
        assert port.rate_text == files["ports/1/rate"]
        assert (port.rate_gbps, port.width_lanes, port.speed) == parse_rate(files["ports/1/rate"])
        assert port.link_layer == files["ports/1/link_layer"]
        counters = {k.rsplit("/", 1)[1]: int(v) for k, v in files.items() if k.startswith("ports/1/counters/")}
        hw = {k.rsplit("/", 1)[1]: int(v) for k, v in files.items()
              if k.startswith("ports/1/hw_counters/") and not k.endswith("/lifespan")}
        assert port.counters == counters and port.hw_counters == hw
        assert port.rcv_data_bytes == 4 * counters["port_rcv_data"]
        assert port.xmit_data_bytes == 4 * counters["port_xmit_data"]
    # mlx5_0: "400 Gb/sec (4X NDR)", 21 PortCounters, 25 hw_counters (lifespan left out): the recording's figures.
    port = info.device("mlx5_0").ports[0]
    assert (port.rate_gbps, port.width, port.speed, len(port.counters), len(port.hw_counters)) == (400.0, "4X", "NDR",
                                                                                                    21, 25)
    # mlx5_1's link_downed reads 255: the 8-bit PMA counter (sysfs.c PORT_PMA_ATTR(link_downed, 2, 8, 56)) at its top.
    assert info.device("mlx5_1").ports[0].counters["link_downed"] == 255


def test_hgx_h100_nics_sit_on_their_pci_paths_below_their_gpus_switches(tmp_path):
    node = hgx_h100_ib(tmp_path)
    info = read(tmp_path)
    gpus = {g.pci_bus_id: g for g in probe_pci_gpus(tmp_path)[0]}
    assert sorted(gpus) == sorted(HGX_GPUS)
    for pair in node.pairs:
        nic = info.device(pair.nic.name)
        assert nic.pci_bus_id == pair.nic.bdf and nic.vendor_id == "0x15b3" and nic.device_id == "0x1021"
        assert nic.driver == "mlx5_core" and not nic.virtual_function
        assert nic.upstream_ports == [pair.nic_down, pair.switch_up, pair.root_port]
        assert (nic.current_link_generation, nic.current_link_width) == (5, 16)
        assert nic.numa_node == pair.nic.numa_node
        # The relation a check draws: GPU and NIC share the switch's upstream port, below the root port.
        assert pair.switch_up in set(gpus[pair.gpu].upstream_ports) & set(nic.upstream_ports)
    assert [d.pci_bus_id for d in info.devices if d.name in GPUD_HCAS] == list(HGX_NICS)


def test_the_bridges_acs_is_read_as_root_reads_config_space(tmp_path):
    node = hgx_h100_ib(tmp_path)
    bridges = {b.pci_bus_id: b for b in read(tmp_path).bridges}
    assert set(bridges) == node.root_ports | node.switch_ports  # every bridge on a NIC's or a GPU's path, once
    for bdf, bridge in bridges.items():
        assert bridge.acs_state == "present" and bridge.acs.offset == 0x170 and bridge.config_bytes_read == 4096
        assert bridge.acs.capability == {name: True for name in bridge.acs.capability}
        assert bridge.root_port == (bdf in node.root_ports)
        redirect = bridge.acs.control["ReqRedir"] and bridge.acs.control["CmpltRedir"]
        assert redirect == (bdf in node.root_ports)  # the root ports' "SrcValid+ … ReqRedir+ CmpltRedir+ UpstreamFwd+"
        assert (bridge.vendor_id, bridge.device_id) == (("0x8086", "0x352a") if bridge.root_port else
                                                        ("0x1000", "0xc030"))


def test_without_root_the_acs_state_is_unreadable_never_absent_or_off(tmp_path):
    hgx_h100_ib(tmp_path, privileged=False)  # 64 bytes: what pci_read_config gives a user without CAP_SYS_ADMIN
    for bridge in read(tmp_path).bridges:
        assert (bridge.acs_state, bridge.acs, bridge.config_bytes_read) == ("unreadable", None, 64)


def test_acs_absent_and_malformed_capability_lists(tmp_path):
    node = hgx_h100_ib(tmp_path)
    switch = sorted(node.switch_ports)[0]
    node.tree.set_config(switch, config_space(0x1000, 0xC030, None))  # extended space without ACS
    looped = bytearray(config_space(0x1000, 0xC030, 0))
    looped[0x100:0x104] = (0x0001 | (2 << 16) | (0x100 << 20)).to_bytes(4, "little")  # AER → itself
    other = sorted(node.switch_ports)[1]
    node.tree.set_config(other, bytes(looped))
    info = read(tmp_path)
    bridges = {b.pci_bus_id: b for b in info.bridges}
    assert bridges[switch].acs_state == "absent" and bridges[switch].acs is None
    assert bridges[other].acs_state == "error"
    assert any("loops at 0x100" in e.message for e in info.errors)


def test_roce_node_ports_their_netdevs_and_guids(tmp_path):
    node = h200_roce(tmp_path)
    info = read(tmp_path)
    assert not all_errors(info)
    for pair in node.pairs:
        device = info.device(pair.nic.name)
        (port,) = device.ports
        assert port.link_layer == "Ethernet" and (port.lid, port.sm_lid) == (0, 0)
        assert (port.rate_gbps, port.width_lanes, port.speed) == (400.0, 4, "NDR")
        (ifname, attributes), = pair.nic.netdevs.items()
        assert port.netdev.name == ifname and port.netdev.found_by == "gid_attrs"
        assert (port.netdev.operstate, port.netdev.carrier, port.netdev.speed_mbps, port.netdev.mtu_bytes,
                port.netdev.carrier_changes) == ("up", True, 400000, 9000, 2)
        assert port.netdev.pci_bus_id == pair.nic.bdf
        assert device.node_guid == ROCE_GUIDS.get(device.name)
    assert info.device("mlx5_7").ports[0].netdev.name == "enp218s0np0"  # the node's own NCCL_SOCKET_IFNAME


def test_netdev_is_found_below_the_pci_function_when_the_gid_table_names_none(tmp_path):
    node = h200_roce(tmp_path)
    os.remove(node.tree.port_file("mlx5_0", 1, "gid_attrs/ndevs/0"))
    node.tree.set_port("mlx5_1", 1, "gid_attrs/ndevs/0", "../../../etc/passwd")  # a hostile "name"
    info = read(tmp_path)
    for name in ("mlx5_0", "mlx5_1"):
        netdev = info.device(name).ports[0].netdev
        assert (
            netdev.found_by == "device/net"
            and netdev.name == f"enp{int(node.pairs[int(name[-1])].nic.bdf[5:7], 16)}s0np0"
        )


def test_front_end_bond_has_no_pci_function_behind_its_netdev(tmp_path):
    hgx_h100_ib(tmp_path)
    port = read(tmp_path).device("mlx5_bond_0").ports[0]
    assert (port.rate_gbps, port.width, port.link_layer) == (200.0, "2X", "Ethernet")  # GPUd: "200 Gb/sec (2X NDR)"
    assert port.netdev.name == "bond0" and port.netdev.pci_bus_id is None


def test_thor2_node_bnxt_re_without_pma_counters(tmp_path):
    node = mi300x_thor2(tmp_path)
    info = read(tmp_path)
    assert not all_errors(info) and len(info.devices) == 8
    for pair in node.pairs:
        device = info.device(pair.nic.name)
        assert (device.driver, device.vendor_id, device.device_id) == ("bnxt_en", "0x14e4", "0x1760")
        assert device.hca_type == "Broadcom NetXtreme-C/E RoCE Driver HCA" and device.board_id is None
        assert (device.fw_ver, device.hw_rev) == ("231.0.154.0", "0x14e4")
        (port,) = device.ports
        assert port.counters == {} and port.counters_unsupported == []  # no counters/ at all: nothing to read
        assert sorted(port.hw_counters) == sorted(BNXT_RE_HW_COUNTERS)
        assert port.netdev.name.startswith("enp") and port.netdev.speed_mbps == 400000
    assert info.host.memory_peers == {"amdkfd": "1.0"} and "bnxt_re" in info.host.modules_loaded


def test_pollara_node_empty_counters_and_byte_hw_counters(tmp_path):
    mi355x_pollara(tmp_path)
    info = read(tmp_path)
    assert not all_errors(info) and len(info.devices) == 8
    for device in info.devices:
        assert device.driver == "ionic" and device.fw_ver == "1.110.1-a-1" and device.name.startswith("rocep")
        (port,) = device.ports
        assert port.counters == {} and port.rcv_data_bytes is None  # "is empty" (omnistat PR 301)
        assert set(port.hw_counters) == {"rx_rdma_ucast_bytes", "rx_rdma_mcast_bytes", "tx_rdma_ucast_bytes",
                                         "tx_rdma_mcast_bytes"}


# ---------------------------------------------------------------------------------------------------------------
# Fault variants read as faults


def test_fault_variants_are_read_on_the_right_device(tmp_path):
    node = hgx_h100_ib(tmp_path)
    port_down(node, "mlx5_4")
    half_rate(node, "mlx5_5")
    link_errors(node, "mlx5_6", symbol_error=65535, link_error_recovery=17, link_downed=3)
    firmware(node, "mlx5_7", "28.39.2048")
    info = read(tmp_path)
    down = info.device("mlx5_4").ports[0]
    assert (down.state_code, down.state, down.phys_state_code, down.phys_state) == (1, "DOWN", 3, "Disabled")
    half = info.device("mlx5_5").ports[0]
    assert (half.rate_gbps, half.width_lanes, half.speed) == (200.0, 2, "NDR")
    errors = info.device("mlx5_6").ports[0].counters
    assert (errors["symbol_error"], errors["link_error_recovery"], errors["link_downed"]) == (65535, 17, 3)
    assert {d.fw_ver for d in info.devices if d.name in GPUD_HCAS} == {"28.41.1000", "28.39.2048"}
    healthy = info.device("mlx5_0").ports[0]
    assert (healthy.state, healthy.rate_gbps) == ("ACTIVE", 400.0)


def test_a_nic_moved_below_another_switch(tmp_path):
    node = hgx_h100_ib(tmp_path, nic_elsewhere=2)
    info = read(tmp_path)
    gpus = {g.pci_bus_id: g for g in probe_pci_gpus(tmp_path)[0]}
    moved = node.pairs[2]
    nic = info.device(moved.nic.name)
    shared = set(gpus[moved.gpu].upstream_ports) & set(nic.upstream_ports)
    assert moved.switch_up not in nic.upstream_ports and not shared  # not even the root port: another switch
    assert node.pairs[3].switch_up in nic.upstream_ports


def test_missing_nvidia_peermem_is_read_as_not_loaded(tmp_path):
    hgx_h100_ib(tmp_path, peermem=False)
    host = read(tmp_path).host
    assert "nvidia_peermem" not in host.modules_loaded and "nvidia" in host.modules_loaded
    assert host.memory_peers == {} and host.nvidia_open_kernel_module is True
    assert len(host.verbs_devices) == 9


# ---------------------------------------------------------------------------------------------------------------
# Nothing there, nothing readable


def test_a_node_without_rdma_devices_reads_as_none_not_as_an_error(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_pci_gpu("0000:3b:00.0")
    info = read(tmp_path)
    assert (info.readable, info.class_present, info.devices, all_errors(info)) == (True, False, [], [])
    assert info.bridges == []  # the GPU hangs off the root complex here: no bridge above it


def test_no_sysfs_at_all_is_unreadable(tmp_path):
    info = read(tmp_path)
    assert not info.readable and info.class_present is None
    assert [e.kind for e in info.errors] == [ErrorKind.NOT_FOUND]


# ---------------------------------------------------------------------------------------------------------------
# The snapshot's JSON


def test_network_round_trips_through_the_snapshot_json(tmp_path):
    hgx_h100_ib(tmp_path)
    snapshot = NodeSnapshot(network=read(tmp_path))
    again = from_dict(NodeSnapshot, json.loads(json.dumps(to_dict(snapshot))))
    assert again == snapshot and again.network.device("mlx5_0").ports[0].counters["port_rcv_data"] > 0


def test_older_snapshots_without_network_still_load():
    data = json.loads((FIXTURES / "h200" / "snapshot.json").read_text())
    assert "network" not in data
    snapshot = from_dict(NodeSnapshot, data)
    assert snapshot.network is None and snapshot.kernel_log.nic_events == []


def test_the_fakes_name_their_sources():
    """Every fixture the fakes are built from says where it comes from."""
    for path in rdma_tree.FIXTURES.glob("*.json"):
        document = json.loads(path.read_text())
        assert document.get("source") or all(s.get("source") for s in document.get("sources", [])), path.name
