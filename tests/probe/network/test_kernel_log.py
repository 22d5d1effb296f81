"""The RDMA NIC drivers' kernel-log records (gpudiag/probe/network/kernel_log.py): the real lines of
tests/fixtures/rdma/kernel-log-nic.json read as their sources say, kept apart from the GPU events, and nothing read
from user space or from driver text inside another message."""

from __future__ import annotations

import json
import time

import pytest

from gpudiag.model import KernelLogInfo
from gpudiag.probe.kernel_log.events import parse_event
from gpudiag.probe.kernel_log.reader import read_kernel_log, scan
from gpudiag.probe.network.kernel_log import NIC_EVENT_KINDS
from tests.support.paths import FIXTURES
from tests.support.sysfs_tree import SysfsTree

CORPUS = json.loads((FIXTURES / "rdma" / "kernel-log-nic.json").read_text())
RECORDS = [(source["source"], record) for source in CORPUS["sources"] for record in source["records"]]


def nic_events(lines: list[str]) -> KernelLogInfo:
    return scan(lines, KernelLogInfo())


def shape(event) -> dict:
    return {key: value for key, value in (("kind", event.kind), ("pci_bus_id", event.pci_bus_id),
                                          ("code", event.code), ("count", event.count), ("detail", event.detail),
                                          ("decoded", event.decoded))}


@pytest.mark.parametrize("source, record", RECORDS, ids=[r["id"] for _, r in RECORDS])
def test_recorded_lines_read_as_their_sources_say(source, record):
    info = nic_events([record["log"]])
    expected = [{"code": None, "count": None, "detail": None, "decoded": None, **e} for e in record["expect"]]
    assert [shape(e) for e in info.nic_events] == expected
    assert info.events == []  # never among the GPU events the GPU checks, exporter and journal read
    for event in info.nic_events:
        assert event.vendor is None and event.kind in NIC_EVENT_KINDS and event.message in record["log"]


def test_the_corpus_covers_every_vendor_and_the_kinds_it_claims():
    kinds = {e["kind"] for _, r in RECORDS for e in r["expect"]}
    assert {"nic_port_state", "nic_link_up", "nic_module_plugged", "nic_module_unplugged", "nic_module_error",
            "nic_health_compromised", "nic_command_timeout", "nic_command_failed", "nic_pcie_power_insufficient",
            "nic_pcie_bandwidth_limited"} <= kinds
    assert any(r["log"].find("bnxt_en ") >= 0 and r["expect"] for _, r in RECORDS)


# Lines built from the drivers' printk formats where no pasted record was found (probe/network/kernel_log.py cites
# each).
FROM_FORMATS = [
    ("bnxt_en 0000:06:00.0 enp6s0np0: NIC Link is Down", "nic_link_down", None),
    ("bnxt_en 0000:06:00.0 enp6s0np0: NIC Link is Up, 400000 Mbps (PAM4 112Gbps) full duplex, Flow control: none",
     "nic_link_up", 400000),
    ("ionic 0000:e5:00.0 enp229s0: Link up - 400 Gbps", "nic_link_up", 400000),
    ("ionic 0000:e5:00.0 enp229s0: Link down", "nic_link_down", None),
    ("mlx5_core 0000:19:00.0 enp25s0np0: Link down", "nic_link_down", None),
    ("bnxt_en 0000:41:00.0 rocep65s0f0: Port: 1 Link DOWN", "nic_port_state", 1),
    ("mlx5_core 0000:73:00.0: print_health_info:431:(pid 0): Health issue observed, firmware internal error, "
     "severity(3) ERROR:", "nic_health_syndrome", 3),
    ("mlx5_core 0000:73:00.0: print_health_info:428:(pid 0): PCI slot is unavailable", "nic_pci_unavailable", None),
    ("mlx5_core 0000:01:00.0: wait_func_handle_exec_timeout:1106:(pid 77): cmd[4]: DESTROY_EQ(0x302) No done "
     "completion", "nic_command_timeout", None),
    ("mlx5_core 0000:01:00.0: cb_timeout_handler:891:(pid 0): cmd[2]: 2ERR_QP(0x507) Async, timeout. Will cause a "
     "leak of a command resource", "nic_command_timeout", None),
    ("bnxt_en 0000:06:00.0 enp6s0np0: Fatal firmware reset event, data1: 0x1, data2: 0x0, min wait 1000 ms, "
     "max wait 6000 ms", "nic_firmware_reset", None),
    ("bnxt_en 0000:06:00.0 enp6s0np0: Firmware non-fatal reset event received, max wait time 6000 msec",
     "nic_firmware_reset", None),
]


@pytest.mark.parametrize("line, kind, number", FROM_FORMATS)
def test_lines_in_the_drivers_formats(line, kind, number):
    event = parse_event(line, 12.5)
    assert event.kind == kind and event.timestamp_seconds == 12.5
    assert (event.count if kind == "nic_link_up" else event.code) == number
    if kind == "nic_firmware_reset":
        assert event.detail == ("fatal" if "Fatal" in line else "nonfatal")


def test_health_syndrome_names_the_syndrome():
    event = parse_event(FROM_FORMATS[6][0])
    assert (event.detail, event.code, event.pci_bus_id) == ("firmware internal error", 3, "0000:73:00.0")


# ---------------------------------------------------------------------------------------------------------------
# Hostile input


def test_records_written_from_user_space_are_not_nic_records(tmp_path):
    line = "mlx5_core 0000:19:00.0 enp25s0np0: Link down"
    tree = SysfsTree(tmp_path)
    tree.add_kmsg([f"14,100,5000000,-;{line}",  # echo "…" > /dev/kmsg: facility user
                   f"6,101,5000001,-;{line.replace('19:00', '29:00')}"])  # the driver's own (facility 0, info)
    info = read_kernel_log(tmp_path)
    assert [e.pci_bus_id for e in info.nic_events] == ["0000:29:00.0"] and info.records_not_kernel == 1


@pytest.mark.parametrize("line", [
    "Aug 17 06:18:01 host myapp[42]: mlx5_core 0000:19:00.0: Port module event: module 0, Cable unplugged",
    "python[3734]: segfault at 0 ip 0 sp 0 error 4 in mlx5_core 0000:19:00.0 enp25s0np0: Link down[7f00+1000]",
    "[ 12.3] audit: type=1400 msg='bnxt_en 0000:06:00.0 enp6s0np0: NIC Link is Down'",
    "mlx5_core 0000:19:00.0 enp25s0np0: Link down because of the user",
    "mlx5_core 0000:19:00.0: Port: ١ Link DOWN",  # non-ASCII digits
    "mlx5_core 0000:19:00.0 mlx5_0: Port: 1234 Link DOWN",  # no port number a host has
    "mlx5_core 0000:19:00.0: Detected insufficient power on the PCIe slot (123456W).",
    "mlx5_core 0000:19:00.0: Port module event: module 0, Cable exploded",
    "mlx5_core0: INFO: mlx5_port_module_event:710:(pid 11): Module 0, status: plugged and enabled",  # FreeBSD's
    "notmlx5_core 0000:19:00.0 enp25s0np0: Link down",
])
def test_forged_and_foreign_lines_are_not_read(line):
    assert nic_events([line]).nic_events == []


def test_a_record_with_a_number_no_driver_prints_is_not_taken():
    info = nic_events(["[ 1.0] ionic 0000:e5:00.0 enp229s0: Link up - 4000000 Gbps",
                       "[ 2.0] ionic 0000:e5:00.0 enp229s0: Link down"])
    assert [e.kind for e in info.nic_events] == ["nic_link_down"]  # the first is in no format the driver prints


def test_long_lines_are_read_in_linear_time():
    bodies = ["Port module event[error]: module 0, Cable error, " + "a" * 9000,
              "Port: 1 Link " + "A" * 9000, "cmd[1]: " + "A" * 9000 + "(0x1) timeout",
              "0" * 9000, "enp " * 2000 + ": Link up"]
    started = time.monotonic()
    for body in bodies:
        for _ in range(5):
            nic_events([f"[ 1.0] mlx5_core 0000:19:00.0: {body}", f"[ 1.0] mlx5_core 0000:19:00.0 {body}"])
    assert time.monotonic() - started < 2.0  # 50 lines of 8 KiB; a backtracking pattern takes seconds each
