"""The network checks over hostile or unusual NIC trees (issue 33, items 3-5), read by the real probe from the fake
RDMA nodes of tests/support/rdma_tree.py: what the probe could not read, or did not read, is never judged clean.

- A counter that could not be read (a directory where its file is, text no kernel prints, a negative number, more
  than a u64) makes that port's network.errors unknown, naming the counter; a port with no counter readable is
  unknown with the reason, not skipped as "exposes no link error counter".
- More RDMA devices than a host with few VFs (an SR-IOV host reaches 140) are all read; what the probe leaves unread
  (its cap, its deadline) is said as unknown in every check that would have judged it.
- A NIC whose PCI location cannot be read makes its GPU's topology.gpu_nic_affinity unknown, not fail; a RoCE port
  whose interface is gone from /sys/class/net is unknown, not up."""

from __future__ import annotations

import dataclasses
import errno
import os

import pytest

from gpudiag.model import Status
from gpudiag.probe.network import rdma
from tests.checks.network.test_family import HGX_PROFILE, IDS, about, not_passing, run, run_all
from tests.support import rdma_tree
from tests.support.network_nodes import clear_counters, snapshot
from tests.support.rdma_tree import Nic
from tests.support.snapshots import assert_actionable
from tests.support.sysfs_tree import deny_reads

NIC = "mlx5_4"


def _hgx(tmp_path) -> rdma_tree.Node:
    return clear_counters(rdma_tree.hgx_h100_ib(tmp_path))


def _errors_of(tmp_path, nic: str = NIC) -> list:
    return about(run(snapshot(tmp_path), "network.errors"), nic)


# -- item 3: counters that could not be read ------------------------------------------------------------------------


def _directory(path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("spoil,why", [
    (_directory, "is a directory"),
    (lambda p: p.write_text("garbage\n"), "'garbage'"),
    (lambda p: p.write_text("-5\n"), "'-5'"),
    (lambda p: p.write_text("99999999999999999999\n"), "'99999999999999999999'"),  # 20 digits, past a u64
    (lambda p: p.write_text(""), "empty"),
], ids=["directory", "garbage", "negative", "overflow", "empty"])
def test_a_counter_that_could_not_be_read_makes_that_port_unknown_naming_it(tmp_path, spoil, why):
    node = _hgx(tmp_path)
    spoil(node.tree.port_file(NIC, 1, "counters/symbol_error"))
    (result,) = _errors_of(tmp_path)
    assert result.status == Status.UNKNOWN, result.message
    assert "symbol_error" in result.message and why in result.message
    assert result.observed["unreadable"] == {"counters/symbol_error": result.observed["unreadable"][
        "counters/symbol_error"]} and why in result.observed["unreadable"]["counters/symbol_error"]
    assert "link_downed" in result.observed["counters"]  # the rest was read, and judged
    assert_actionable(result, Status.UNKNOWN)
    others = [r for r in run(snapshot(tmp_path), "network.errors") if r.observed.get("nic") != NIC]
    assert {r.status for r in others} == {Status.PASS}


def test_a_counter_that_fails_with_eio_is_unknown(tmp_path, monkeypatch):
    node = _hgx(tmp_path)
    rdma_tree.deny_counter(monkeypatch, node, NIC, "link_downed", errno.EIO)
    (result,) = _errors_of(tmp_path)
    assert result.status == Status.UNKNOWN and "link_downed" in result.message
    assert "Input/output error" in result.message


def test_an_unread_counter_does_not_hide_a_failure_read_beside_it(tmp_path):
    node = _hgx(tmp_path)
    node.tree.port_file(NIC, 1, "counters/symbol_error").write_text("garbage\n")
    from tests.support.network_nodes import read
    from gpudiag.probe.network.history import CounterHistory

    history = CounterHistory()
    read(tmp_path, history)
    rdma_tree.link_errors(node, NIC, link_downed=1)
    snap = snapshot(tmp_path, info=read(tmp_path, history))
    (result,) = about(run(snap, "network.errors"), NIC)
    assert result.status == Status.FAIL and "link downs" in result.message and "symbol_error" in result.message


def test_a_port_with_every_counter_unreadable_is_unknown_with_the_true_reason(tmp_path):
    node = _hgx(tmp_path)
    for directory in ("counters", "hw_counters"):
        for path in node.tree.port_file(NIC, 1, directory).iterdir():
            if path.name != "lifespan":
                path.write_text("garbage\n")
    (result,) = _errors_of(tmp_path)
    assert result.status == Status.UNKNOWN, result.message
    assert "exposes no link error counter" not in result.message and "'garbage'" in result.message


def test_a_counters_directory_that_cannot_be_listed_is_unknown_not_absent(tmp_path, monkeypatch):
    node = _hgx(tmp_path)
    denied = node.tree.port_file(NIC, 1, "counters"), node.tree.port_file(NIC, 1, "hw_counters")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) in {os.fspath(p) for p in denied}:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    (result,) = _errors_of(tmp_path)
    assert result.status == Status.UNKNOWN and "permission denied" in result.message.lower()
    assert "exposes no link error counter" not in result.message


def test_a_nic_with_no_counters_at_all_is_still_skipped(tmp_path):
    """Pollara (ionic) has an empty counters/ and no error hw_counters: nothing was refused, nothing to judge."""
    from tests.support.rdma_tree_amd import mi355x_pollara

    mi355x_pollara(tmp_path)
    results = run(snapshot(tmp_path, amd=True), "network.errors")
    assert {r.status for r in results} == {Status.SKIP}


# -- item 4: no silent cap ----------------------------------------------------------------------------------------


def _with_vfs(node: rdma_tree.Node, per_pf: int) -> list[str]:
    """SR-IOV: `per_pf` ConnectX virtual functions (15b3:101e) on each PF, at the PF's bus with ARI function numbers,
    each an RDMA device with the PF's files (constructed), as mlx5_core registers them on the host."""
    files = rdma_tree.gpud_h100_files()
    names, number = [], 10  # after the PFs mlx5_0 … mlx5_9
    for pair in node.pairs:
        bus = pair.nic.bdf[:7]
        for vf in range(1, per_pf + 1):
            name = f"mlx5_{number}"
            nic = Nic(name=name, bdf=f"{bus}:{vf // 8:02x}.{vf % 8}", files=dict(files[pair.nic.name]),
                      device="0x101e", numa_node=pair.nic.numa_node)
            function = node.tree.add_nic(nic, bridges=(pair.root_port, pair.switch_up), upstream=pair.nic_down)
            os.symlink(os.path.realpath(node.tree.nic_dirs[pair.nic.name] / "device"),
                       os.path.realpath(function / "device") + "/physfn")
            names.append(name)
            number += 1
    return names


def test_an_sriov_host_of_140_rdma_devices_is_read_whole_and_a_port_down_past_128_fails(tmp_path):
    node = _hgx(tmp_path)
    vfs = _with_vfs(node, 17)  # 136 VFs: 145 RDMA devices
    assert len(node.nics) + len(vfs) >= 140
    last = sorted(vfs)[-1]  # past the old cap of 128 in the order the class directory is read
    rdma_tree.port_down(node, last)
    snap = snapshot(tmp_path)
    assert snap.network.devices_skipped == 0 and snap.network.incomplete is None
    assert snap.network.device(last).virtual_function
    (down,) = about(not_passing(run(snap, "network.nics")), last)
    assert down.status == Status.FAIL and "Disabled" in down.message


@pytest.mark.parametrize("cause", ["cap", "deadline"])
def test_devices_left_unread_are_unknown_in_every_check_that_would_judge_them(tmp_path, monkeypatch, cause):
    _hgx(tmp_path)
    if cause == "cap":
        monkeypatch.setattr(rdma, "MAX_DEVICES", 4)
        snap = snapshot(tmp_path)
    else:
        snap = snapshot(tmp_path)
        kept = snap.network.devices[:6]
        snap.network = dataclasses.replace(snap.network, devices=kept, devices_skipped=3,
                                           incomplete="the deadline passed after 6 of 9 RDMA devices")
    info = snap.network
    assert info.devices and info.devices_skipped
    results = run_all(snap)
    unread = [r for r in results if r.device is None and r.status == Status.UNKNOWN
              and f"{info.devices_skipped} RDMA device(s) were not read" in r.message]
    judging = {"network.nics", "network.rate", "network.errors", "network.flaps", "network.firmware",
               "network.gpudirect", "topology.gpu_nic_affinity"}
    assert {r.check for r in unread} == judging <= set(IDS)
    assert all(info.incomplete in r.message and r.remediation for r in unread)


# -- item 5 and the RoCE interface: where the NIC is, and its interface --------------------------------------------


def _unlocated(tmp_path, monkeypatch, nic: str = "mlx5_0") -> None:
    deny_reads(monkeypatch, tmp_path / f"sys/class/infiniband/{nic}/device")


def test_a_nic_whose_pci_location_cannot_be_read_makes_its_gpus_affinity_unknown_not_fail(tmp_path, monkeypatch):
    _hgx(tmp_path)
    _unlocated(tmp_path, monkeypatch)
    snap = snapshot(tmp_path)
    assert snap.network.device("mlx5_0").pci_bus_id is None
    assert "permission denied" in snap.network.device("mlx5_0").pci_unreadable
    results = run(snap, "topology.gpu_nic_affinity", HGX_PROFILE)
    (gpu0,) = [r for r in results if r.device.index == 0]
    assert gpu0.status == Status.UNKNOWN and "mlx5_0" in gpu0.message and "permission denied" in gpu0.message
    assert {r.status for r in results if r.device.index != 0} == {Status.PASS}
    without_profile = [r for r in run(snap, "topology.gpu_nic_affinity") if r.device.index == 0]
    assert [r.status for r in without_profile] == [Status.UNKNOWN]


def test_a_nic_whose_pci_location_cannot_be_read_makes_the_count_unknown_not_fail(tmp_path, monkeypatch):
    _hgx(tmp_path)
    _unlocated(tmp_path, monkeypatch)
    (count,) = [r for r in run(snapshot(tmp_path), "network.nics", HGX_PROFILE) if "fabric_nics" in r.observed]
    assert count.status == Status.UNKNOWN and "mlx5_0" in count.message


def test_a_nic_whose_device_link_names_a_function_that_is_gone_is_unlocated(tmp_path):
    node = _hgx(tmp_path)
    link = node.tree.nic_dirs["mlx5_0"] / "device"
    os.remove(link)
    os.symlink("../../../0000:ff:00.0", link)
    snap = snapshot(tmp_path)
    assert "not there" in snap.network.device("mlx5_0").pci_unreadable
    (gpu0,) = [r for r in run(snap, "topology.gpu_nic_affinity", HGX_PROFILE) if r.device.index == 0]
    assert gpu0.status == Status.UNKNOWN


def test_a_roce_port_whose_interface_is_missing_from_sys_class_net_is_unknown_not_up(tmp_path):
    clear_counters(rdma_tree.h200_roce(tmp_path))
    (tmp_path / "sys/class/net/enp25s0np0").unlink()
    results = run(snapshot(tmp_path), "network.nics")
    (result,) = about(not_passing(results), "mlx5_0")
    assert result.status == Status.UNKNOWN and "enp25s0np0" in result.message
    assert "/sys/class/net/enp25s0np0" in " ".join(result.observed["errors"])
