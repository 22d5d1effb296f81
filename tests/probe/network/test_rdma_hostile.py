"""The RDMA NIC probe against a hostile or broken node: unreadable files, files the kernel refuses (EINVAL, EIO, "N/A
(no PMA)"), values no kernel prints, oversized files, symlink loops, more devices and ports than any host has, and a
deadline that has passed. Every one is a probe error, an unsupported value or a cap said in `incomplete`, never an
exception."""

from __future__ import annotations

import errno
import os
import time

import pytest

from gpudiag.model import ErrorKind
from gpudiag.probe.network.rdma import MAX_DEVICES, MAX_PORTS, read_network
from tests.probe.network.test_rdma import all_errors, read
from tests.support.rdma_tree import deny_counter, hgx_h100_ib, link_errors
from tests.support.sysfs_tree import SysfsTree, deny_reads


def _deny(function, *paths):
    denied = {os.fspath(p) for p in paths}

    def guarded(path, *args, **kwargs):
        if os.fspath(path) in denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return function(path, *args, **kwargs)

    return guarded


def test_an_unlistable_class_directory_is_unreadable(tmp_path, monkeypatch):
    hgx_h100_ib(tmp_path)
    monkeypatch.setattr(os, "scandir", _deny(os.scandir, tmp_path / "sys/class/infiniband"))
    info = read(tmp_path)
    assert not info.readable and info.class_present is True and info.devices == []
    assert [e.kind for e in info.errors] == [ErrorKind.NO_PERMISSION]


def test_unreadable_files_are_probe_errors_on_their_device(tmp_path, monkeypatch):
    node = hgx_h100_ib(tmp_path)
    nic = node.tree.nic_dirs
    deny_reads(monkeypatch, nic["mlx5_0"] / "fw_ver", nic["mlx5_1"] / "ports/1/counters/symbol_error",
               nic["mlx5_4"] / "ports/1/state")
    monkeypatch.setattr(os, "scandir", _deny(os.scandir, nic["mlx5_5"] / "ports"))
    info = read(tmp_path)
    assert info.device("mlx5_0").fw_ver is None
    assert "symbol_error" not in info.device("mlx5_1").ports[0].counters
    assert info.device("mlx5_4").ports[0].state is None
    assert info.device("mlx5_5").ports == []
    for name in ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"):
        (error,) = info.device(name).errors
        assert error.kind == ErrorKind.NO_PERMISSION and error.source.startswith("sysfs:/sys/")
    assert not info.device("mlx5_6").errors


def test_a_counter_a_restricted_pf_refuses_is_unsupported_and_not_read_again(tmp_path, monkeypatch):
    """EINVAL on a counter: mlx5's ACCESS_REG refused on a restricted PF (GPUd issue 1164); each read would log it."""
    node = hgx_h100_ib(tmp_path)
    path = deny_counter(monkeypatch, node, "mlx5_0", "port_xmit_wait", errno.EINVAL)
    skip: set[str] = set()
    info = read(tmp_path, skip=skip)
    port = info.device("mlx5_0").ports[0]
    assert "port_xmit_wait" in port.counters_unsupported and "port_xmit_wait" not in port.counters
    assert not all_errors(info) and skip == {os.fspath(path)}
    monkeypatch.undo()
    again = read(tmp_path, skip=skip).device("mlx5_0").ports[0]
    assert "port_xmit_wait" in again.counters_unsupported  # not read again, though it would answer now


def test_a_nic_that_fell_off_the_bus_reads_as_errors(tmp_path, monkeypatch):
    node = hgx_h100_ib(tmp_path)
    deny_counter(monkeypatch, node, "mlx5_0", "symbol_error", errno.EIO)
    (error,) = read(tmp_path).device("mlx5_0").errors
    assert error.kind == ErrorKind.ERROR and "Input/output error" in error.message


def test_no_pma_reads_as_unsupported(tmp_path):
    node = hgx_h100_ib(tmp_path)
    link_errors(node, "mlx5_0", symbol_error="N/A (no PMA)")
    port = read(tmp_path).device("mlx5_0").ports[0]
    assert port.counters_unsupported == ["symbol_error"] and "symbol_error" not in port.counters


@pytest.mark.parametrize("text", ["18446744073709551616", "99999999999999999999999", "١٢٣", "-5", "1e9", "0x10",
                                  "12 34", "\x00\x01\x02"])
def test_hostile_counter_values_are_recorded_not_taken(tmp_path, text):
    node = hgx_h100_ib(tmp_path)
    link_errors(node, "mlx5_0", symbol_error=text)
    device = read(tmp_path).device("mlx5_0")
    assert "symbol_error" not in device.ports[0].counters
    assert [e.kind for e in device.errors] == [ErrorKind.ERROR]


def test_an_oversized_attribute_is_read_only_up_to_a_page(tmp_path, monkeypatch):
    node = hgx_h100_ib(tmp_path)
    node.tree.set_port("mlx5_0", 1, "counters/symbol_error", "1" * (8 << 20))
    sizes = []
    import builtins

    real_open = builtins.open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, limit=-1):
            data = self.handle.read(limit)
            sizes.append(len(data))
            return data

    def counting_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return Counting(handle) if "b" in mode else handle

    monkeypatch.setattr(builtins, "open", counting_open)
    device = read(tmp_path).device("mlx5_0")
    assert max(sizes) <= 4096 and "symbol_error" not in device.ports[0].counters


def test_malformed_state_rate_and_names(tmp_path):
    node = hgx_h100_ib(tmp_path)
    node.tree.set_port("mlx5_0", 1, "state", "ACTIVE")
    node.tree.set_port("mlx5_0", 1, "rate", "400 Gb/sec (4X NDR")
    node.tree.set_port("mlx5_0", 1, "counters/a b", "1")
    (node.tree.nic_dirs["mlx5_0"] / "ports" / "one").mkdir()
    device = read(tmp_path).device("mlx5_0")
    assert [p.number for p in device.ports] == [1]
    port = device.ports[0]
    assert port.state is None and port.rate_gbps is None and port.rate_text == "400 Gb/sec (4X NDR"
    assert len(device.errors) == 4


def test_symlink_loops_do_not_hang_or_crash(tmp_path):
    node = hgx_h100_ib(tmp_path)
    ib = node.tree.nic_dirs["mlx5_0"]
    os.remove(ib / "device")
    os.symlink("device", ib / "device")  # a link to itself
    loop = tmp_path / "sys/class/infiniband/mlx5_loop"
    os.symlink("mlx5_loop", loop)
    ports = node.tree.nic_dirs["mlx5_1"] / "ports" / "1" / "counters"
    for child in ports.iterdir():
        child.unlink()
    ports.rmdir()
    os.symlink("counters", ports)
    info = read(tmp_path)
    assert info.device("mlx5_0").pci_bus_id is None and info.device("mlx5_0").errors
    assert info.device("mlx5_1").ports[0].counters == {} and info.device("mlx5_1").errors
    loop_device = info.device("mlx5_loop")
    assert loop_device is not None and loop_device.ports == []


def test_caps_on_devices_and_ports(tmp_path):
    tree = SysfsTree(tmp_path)
    for number in range(MAX_DEVICES + 72):
        tree.write(f"sys/class/infiniband/dev{number:03d}/fw_ver", "1.0")
    for number in range(MAX_PORTS + 5):
        tree.write(f"sys/class/infiniband/dev000/ports/{number + 1}/state", "4: ACTIVE")
    info = read(tmp_path)
    assert len(info.devices) == MAX_DEVICES and info.devices_skipped == 72 and "only the first" in info.incomplete
    assert len(info.devices[0].ports) == MAX_PORTS and info.devices[0].ports_skipped == 5


def test_the_deadline_bounds_the_read(tmp_path):
    hgx_h100_ib(tmp_path)
    info = read_network(tmp_path, time.monotonic() - 1)
    assert info.devices == [] and info.devices_skipped == 9 and "deadline" in info.incomplete


def test_a_netdev_that_refuses_its_speed_while_down_is_read_again(tmp_path, monkeypatch):
    """net-sysfs.c speed_show: EINVAL while the interface is not running. Unlike a restricted counter it is not
    remembered: the next read, with the link up, gets the speed."""
    from tests.support.rdma_tree import h200_roce

    h200_roce(tmp_path)
    speed = tmp_path / "sys/class/net/enp25s0np0/speed"
    original = open

    def refusing(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(speed):
            raise OSError(errno.EINVAL, "Invalid argument", os.fspath(file))
        return original(file, *args, **kwargs)

    import builtins

    skip: set[str] = set()
    monkeypatch.setattr(builtins, "open", refusing)
    down = read(tmp_path, skip=skip).device("mlx5_0").ports[0].netdev
    assert down.speed_mbps is None and not skip
    monkeypatch.undo()
    assert read(tmp_path, skip=skip).device("mlx5_0").ports[0].netdev.speed_mbps == 400000


def test_a_config_space_read_that_is_denied_is_unreadable_and_recorded(tmp_path, monkeypatch):
    node = hgx_h100_ib(tmp_path)
    root_port = sorted(node.root_ports)[0]
    deny_reads(monkeypatch, tmp_path / f"sys/bus/pci/devices/{root_port}/config")
    info = read(tmp_path)
    bridge = next(b for b in info.bridges if b.pci_bus_id == root_port)
    assert bridge.acs_state == "unreadable" and bridge.acs is None
    assert [e.kind for e in info.errors] == [ErrorKind.NO_PERMISSION]
