"""Fake AMD Instinct nodes with their RDMA NICs (the sources and what is constructed: tests/support/rdma_tree.py's
docstring): an MI300X node with Broadcom THOR2 (bnxt_re) NICs and an MI355X node with AMD Pensando Pollara 400 (ionic)
NICs."""

from __future__ import annotations

from pathlib import Path

from tests.support.rdma_tree import Nic, Node, Pair, RdmaTree, bus_of


# bnxt_re's hw_counters (drivers/infiniband/hw/bnxt_re/hw_counters.c, Broadcom/linux-rdma-nxt): the names, in order.
BNXT_RE_HW_COUNTERS = (
    "active_pds", "active_ahs", "active_qps", "active_srqs", "active_cqs", "active_mrs", "active_mws", "rx_pkts",
    "rx_bytes", "tx_pkts", "tx_bytes", "recoverable_errors", "rx_roce_drops", "rx_roce_discards", "to_retransmits",
    "seq_err_naks_rcvd", "max_retry_exceeded", "rnr_naks_rcvd", "missing_resp", "unrecoverable_err", "bad_resp_err",
    "local_qp_op_err", "local_protection_err", "mem_mgmt_op_err", "remote_invalid_req_err", "remote_access_err",
    "remote_op_err", "dup_req", "res_exceed_max", "res_length_mismatch", "res_exceeds_wqe", "res_opcode_err",
    "res_rx_invalid_rkey", "res_rx_domain_err", "res_rx_no_perm", "res_rx_range_err", "res_tx_invalid_rkey",
    "res_tx_domain_err", "res_tx_no_perm", "res_tx_range_err", "res_irrq_oflow", "res_unsup_opcode",
    "res_unaligned_atomic", "res_rem_inv_err", "res_mem_err", "res_srq_err", "res_cmp_err", "res_invalid_dup_rkey",
    "res_wqe_format_err", "res_cq_load_err", "res_srq_load_err", "res_tx_pci_err", "res_rx_pci_err",
    "oos_drop_count")
MI300X_GPUS = ("0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0",
               "0000:85:00.0", "0000:a6:00.0", "0000:c6:00.0", "0000:e5:00.0")  # tests/support/snapshots.py


def amd_pair(gpu: str, nic: Nic) -> Pair:
    """The constructed layout of an AMD node: one root complex per quadrant (0x00, 0x20, …), a switch below its root
    port, the GPU and the NIC on two of its downstream ports."""
    top = bus_of(gpu) & 0xE0
    return Pair(gpu, nic, f"0000:{top:02x}:01.1", f"0000:{top + 1:02x}:00.0", f"0000:{top + 2:02x}:00.0",
                f"0000:{top + 2:02x}:01.0")


def mi300x_thor2(root: Path, gpus: bool = True) -> Node:
    """`gpus`: RdmaTree's (False: the OAMs are written by tests/support/fakes/amdgpu_sysfs_tree.py,
    tests/support/fabric_nodes.py)."""
    tree = RdmaTree(root, gpus)
    pairs = []
    for index, gpu in enumerate(MI300X_GPUS):
        nic_bdf = f"0000:{bus_of(gpu) + 1:02x}:00.0"
        ifname = f"enp{bus_of(nic_bdf)}s0np0"
        files = {"fw_ver": "231.0.154.0", "hca_type": "Broadcom NetXtreme-C/E RoCE Driver HCA", "hw_rev": "0x14e4",
                 "node_type": "1: CA", "node_guid": f"8e84:74ff:fe1f:25{index:02x}",
                 "sys_image_guid": f"8e84:74ff:fe1f:25{index:02x}",
                 "ports/1/state": "4: ACTIVE", "ports/1/phys_state": "5: LinkUp",
                 "ports/1/rate": "400 Gb/sec (4X NDR)", "ports/1/link_layer": "Ethernet", "ports/1/lid": "0x0",
                 "ports/1/sm_lid": "0x0", "ports/1/gid_attrs/ndevs/0": ifname,
                 "ports/1/hw_counters/lifespan": "10"}
        for name in BNXT_RE_HW_COUNTERS:
            files[f"ports/1/hw_counters/{name}"] = "0"
        nic = Nic(name=f"bnxt_re{index}", bdf=nic_bdf, files=files, vendor="0x14e4", device="0x1760",
                  class_code="0x020000", driver="bnxt_en", numa_node=index // 4,
                  netdevs={ifname: {"operstate": "up", "carrier": "1", "carrier_changes": "2", "speed": "400000",
                                    "mtu": "9000"}})
        pair = amd_pair(gpu, nic)
        tree.add_pair(pair, vendor="0x1002", device="0x74a1", class_code="0x120000", driver="amdgpu")
        pairs.append(pair)
    node = Node(tree, pairs).finish()
    tree.add_modules("ib_core", "ib_uverbs", "bnxt_en", "bnxt_re", "amdgpu")
    tree.sys.write("sys/kernel/mm/memory_peers/amdkfd/version", "1.0")
    tree.sys.set_kernel_release("5.15.0-119-generic")  # constructed: an Ubuntu 22.04 kernel, as MLNX OFED runs on
    return node


def mi355x_pollara(root: Path, gpus: bool = True) -> Node:
    tree = RdmaTree(root, gpus)
    pairs = []
    for index, gpu in enumerate(MI300X_GPUS):
        nic_bdf = f"0000:{bus_of(gpu) + 1:02x}:00.0"
        bus = bus_of(nic_bdf)
        files = {"fw_ver": "1.110.1-a-1", "node_type": "1: CA", "node_guid": f"0690:81ff:fe2c:77{index:02x}",
                 "ports/1/state": "4: ACTIVE", "ports/1/phys_state": "5: LinkUp",
                 "ports/1/rate": "400 Gb/sec (4X NDR)", "ports/1/link_layer": "Ethernet",
                 "ports/1/gid_attrs/ndevs/0": f"enp{bus}s0",
                 "ports/1/hw_counters/rx_rdma_ucast_bytes": "0", "ports/1/hw_counters/rx_rdma_mcast_bytes": "0",
                 "ports/1/hw_counters/tx_rdma_ucast_bytes": "0", "ports/1/hw_counters/tx_rdma_mcast_bytes": "0"}
        nic = Nic(name=f"rocep{bus}s0", bdf=nic_bdf, files=files, vendor="0x1dd8", device="0x1002",
                  class_code="0x020000", driver="ionic", numa_node=index // 4,
                  netdevs={f"enp{bus}s0": {"operstate": "up", "carrier": "1", "speed": "400000", "mtu": "9000"}})
        pair = amd_pair(gpu, nic)
        tree.add_pair(pair, vendor="0x1002", device="0x75a3", class_code="0x120000", driver="amdgpu")
        (tree.nic_dirs[nic.name] / "ports" / "1" / "counters").mkdir()  # "is empty" (omnistat PR 301)
        pairs.append(pair)
    node = Node(tree, pairs).finish()  # the switch ports' ACS as on the THOR2 node (constructed)
    tree.add_modules("ib_core", "ionic", "ionic_rdma", "amdgpu")
    tree.sys.set_kernel_release("6.8.0-60-generic")  # constructed: an Ubuntu 24.04 kernel, as ROCm 6.4 supports
    return node
