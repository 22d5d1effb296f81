"""network.driver_errors (gpudiag/checks/network/driver.py, issue 32 items 6 and 7): a NIC its driver could not take
fails, an error-level NIC driver record no rule names warns with its line, and the drivers' banners, plain dmesg,
user-space writes and a user's text inside another record stay passes. The records are read from text by the real
reader (gpudiag/probe/kernel_log/reader.py); each is verbatim from the source named beside it."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import pytest

from gpudiag.model import KernelLogInfo, Status
from gpudiag.probe.kernel_log.reader import read_kernel_log
from gpudiag.report.subject import subject
from tests.support.network_nodes import hgx_h100
from tests.support.paths import FIXTURES
from tests.support.snapshots import nvidia_h200_node, run

CHECK = "network.driver_errors"
HOSTILE = FIXTURES / "kmsg-hostile"

# A ConnectX-5 (15b3:1017) whose probe fails on 5.10.65+, both functions: Patrick McLean's report to netdev,
# "mlx5_core 5.10 stable series regression starting at 5.10.65" (2021-09-20, Message-ID
# <BY5PR13MB3604D3031E984CA34A57B7C9EEA09@BY5PR13MB3604.namprd13.prod.outlook.com>), quoted in Greg KH's reply
# <YUxfP7K7jABqk6VE@kroah.com>; the lines verbatim (the reply's quote marks removed).
NETDEV_5_10_65 = """\
[   13.409473] mlx5_core 0000:41:00.0: firmware version: 16.31.1014
[   13.415944] mlx5_core 0000:41:00.0: 126.016 Gb/s available PCIe bandwidth (8.0 GT/s PCIe x16 link)
[   13.707425] mlx5_core 0000:41:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 24414Mbps
[   13.718221] mlx5_core 0000:41:00.0: E-Switch: Total vports 2, per vport: max uc(128) max mc(2048)
[   13.740607] mlx5_core 0000:41:00.0: Port module event: module 0, Cable plugged
[   13.759857] mlx5_core 0000:41:00.0: mlx5_pcie_event:294:(pid 586): PCIe slot advertised sufficient power (75W).
[   17.986973] mlx5_core 0000:41:00.0: E-Switch: cleanup
[   18.686204] mlx5_core 0000:41:00.0: init_one:1371:(pid 803): mlx5_load_one failed with error code -22
[   18.701352] mlx5_core: probe of 0000:41:00.0 failed with error -22
[   18.727364] mlx5_core 0000:41:00.1: firmware version: 16.31.1014
[   18.743853] mlx5_core 0000:41:00.1: 126.016 Gb/s available PCIe bandwidth (8.0 GT/s PCIe x16 link)
[   19.015349] mlx5_core 0000:41:00.1: Rate limit: 127 rates are supported, range: 0Mbps to 24414Mbps
[   19.025157] mlx5_core 0000:41:00.1: E-Switch: Total vports 2, per vport: max uc(128) max mc(2048)
[   19.053569] mlx5_core 0000:41:00.1: Port module event: module 1, Cable unplugged
[   19.062093] mlx5_core 0000:41:00.1: mlx5_pcie_event:294:(pid 591): PCIe slot advertised sufficient power (75W).
[   22.826932] mlx5_core 0000:41:00.1: E-Switch: cleanup
[   23.544747] mlx5_core 0000:41:00.1: init_one:1371:(pid 803): mlx5_load_one failed with error code -22
[   23.555071] mlx5_core: probe of 0000:41:00.1 failed with error -22
"""
# An mlx5 error no rule names, printed by mlx5_core_err (KERN_ERR): a ConnectX-4 Lx whose IRQs cannot be allocated
# behind a ZynqMP root port, Xilinx's "DMA/Bridge Subsystem for PCIe: Root Port issues and answers" page (its dmesg
# excerpt, verbatim). As a kmsg record at its own level, 3.
NO_IRQS = "mlx5_core 0000:01:00.0: mlx5_load:1068:(pid 26): Failed to alloc IRQs"


_HGX: list = []


@pytest.fixture(autouse=True, scope="module")
def _hgx(tmp_path_factory):
    """The healthy HGX H100 with its eight ConnectX-7, read once for the module (each test takes a copy)."""
    _HGX.append(hgx_h100(tmp_path_factory.mktemp("hgx"))[1])
    yield
    _HGX.clear()


def _results(tmp_path, text: str, snap=None):
    """The check over `text` on `snap`, by default the HGX H100 (a node with NICs: one without any and without a NIC
    record skips, as the network family does)."""
    path = tmp_path / "kern.log"
    path.write_text(text, encoding="utf-8")
    snap = snap if snap is not None else copy.deepcopy(_HGX[0])
    snap.kernel_log = read_kernel_log(file=path)
    return snap.kernel_log, run(snap, CHECK)


def _only_passes(log: KernelLogInfo, results) -> bool:
    return not [e for e in log.nic_events if e.kind in ("nic_probe_failed", "nic_driver_error")] and \
        [r.status for r in results] == [Status.PASS]


def test_an_mlx5_probe_failure_fails_each_nic_it_names(tmp_path):
    log, results = _results(tmp_path, NETDEV_5_10_65)
    assert [(r.observed["pci_bus_id"], r.status, r.action, r.fault_code) for r in results] == [
        ("0000:41:00.0", Status.FAIL, "drain", "GPUDIAG-NETWORK-NIC-PROBE-FAILED"),
        ("0000:41:00.1", Status.FAIL, "drain", "GPUDIAG-NETWORK-NIC-PROBE-FAILED")]
    first = results[0]
    assert first.device is None and first.observed["probe_failures"] == 2  # the driver's line and the driver core's
    assert subject(first).label == "NIC mlx5_core (0000:41:00.0)"  # a NIC in every output, never "the GPU at"
    assert "mlx5_load_one, probe failed with error -22" in first.message and "mlx5_core" in first.remediation
    # the banners around the failure are no finding of their own
    assert {e.kind for e in log.nic_events} >= {"nic_probe_failed", "nic_module_plugged"}


def test_the_driver_core_says_it_in_either_kernel_s_words(tmp_path):
    # drivers/base/dd.c: pr_warn("%s: probe of %s failed with error %d") until 6.9 (the netdev report's line), then
    # dev_err(dev, "probe with driver %s failed with error %d") under the device's prefix (built from that format)
    for line in ("[   18.701352] mlx5_core: probe of 0000:41:00.0 failed with error -22",
                 "[   18.701352] mlx5_core 0000:41:00.0: probe with driver mlx5_core failed with error -22"):
        _, (result,) = _results(tmp_path, line + "\n")
        assert (result.status, result.observed["pci_bus_id"]) == (Status.FAIL, "0000:41:00.0"), line


def test_a_nic_registered_now_after_an_earlier_probe_failure_only_warns(tmp_path):
    snap = copy.deepcopy(_HGX[0])
    nic = snap.network.devices[0]
    _, (result,) = _results(tmp_path, f"[   18.686204] mlx5_core {nic.pci_bus_id}: init_one:1371:(pid 803): "
                                      f"mlx5_load_one failed with error code -22\n", snap)
    assert (result.status, result.action, result.fault_code) == (Status.WARN, "watch",
                                                                 "GPUDIAG-NETWORK-NIC-PROBE-FAILED")
    assert f"registered now ({nic.name})" in result.message and result.observed["nic"] == nic.name


def test_an_error_level_nic_record_no_rule_names_warns_with_its_line(tmp_path):
    log, (result,) = _results(tmp_path, f"3,1200,5278293,-;{NO_IRQS}\n")
    assert [e.kind for e in log.nic_events] == ["nic_driver_error"] and log.events == []
    assert (result.status, result.action, result.fault_code) == (Status.WARN, "watch",
                                                                 "GPUDIAG-NETWORK-NIC-DRIVER-ERROR")
    assert "unrecognised NIC driver error" in result.message and "Failed to alloc IRQs" in result.message
    assert result.observed["unrecognised_lines"] == [NO_IRQS] and result.observed["pci_bus_id"] == "0000:01:00.0"


# The NIC records of tests/fixtures/rdma/kernel-log-nic.json (each with its source there) that a rule reads: the faults
# warn, the rest (link and port state, cable plugged, command failures a restricted PF logs all day, the PCIe
# bandwidth line) pass.
NIC_RECORDS = [(r["id"], r["log"], r["expect"][0]["kind"]) for s in json.loads(
    (FIXTURES / "rdma" / "kernel-log-nic.json").read_text())["sources"] for r in s["records"] if r["expect"]]
FAULT_KINDS = {"nic_health_compromised", "nic_command_timeout", "nic_pcie_power_insufficient", "nic_module_error"}


@pytest.mark.parametrize("line, kind", [(log, kind) for _, log, kind in NIC_RECORDS],
                         ids=[i for i, _, _ in NIC_RECORDS])
def test_the_faults_a_rule_names_warn_and_the_rest_pass(tmp_path, line, kind):
    _, (result,) = _results(tmp_path, line + "\n")
    if kind in FAULT_KINDS:
        assert (result.status, result.fault_code) == (Status.WARN, "GPUDIAG-NETWORK-NIC-DRIVER-ERROR"), result.message
        assert "its driver reported" in result.message and result.observed["faults"] == 1
    else:
        assert result.status == Status.PASS, result.message


def test_every_fault_kind_the_check_names_is_one_the_probe_gives():
    from gpudiag.checks.network.driver import _FAULTS
    from gpudiag.probe.network.kernel_log import NIC_EVENT_KINDS

    assert set(_FAULTS) <= set(NIC_EVENT_KINDS) and FAULT_KINDS <= set(_FAULTS)
    assert {k for _, _, k in NIC_RECORDS} & set(_FAULTS) == FAULT_KINDS  # every recorded fault kind is tested


def _from_formats(kind: str, index: int = 0) -> str:
    """A line tests/probe/network/test_kernel_log.py builds from the driver's printk format (its source cited there)."""
    from tests.probe.network.test_kernel_log import FROM_FORMATS

    return [line for line, k, _ in FROM_FORMATS if k == kind][index]


@pytest.mark.parametrize("line, status", [
    # bnxt_en's reset notices: a fatal one warns, a non-fatal one (a planned reset: a firmware update) passes
    (_from_formats("nic_firmware_reset", 0), Status.WARN),
    (_from_formats("nic_firmware_reset", 1), Status.PASS),
    # mlx5 print_health_info: the severity is a syslog level; an error (3) warns, a notice (5) does not
    (_from_formats("nic_health_syndrome"), Status.WARN),
    (_from_formats("nic_health_syndrome").replace("severity(3) ERROR", "severity(5) NOTICE"), Status.PASS),
    (_from_formats("nic_pci_unavailable"), Status.WARN),
])
def test_a_fault_s_own_words_say_whether_it_counts(tmp_path, line, status):
    _, (result,) = _results(tmp_path, line + "\n")
    assert result.status == status, result.message


@pytest.mark.skipif(shutil.which("dmesg") is None, reason="util-linux dmesg is not installed")
def test_the_level_comes_from_dmesg_x_as_the_real_dmesg_writes_it(tmp_path):
    raw = tmp_path / "raw"
    raw.write_text(f"<3>[    5.278293] {NO_IRQS}\n<6>[    5.278294] {NO_IRQS.replace('26', '27')}\n")
    text = subprocess.run(["dmesg", "-F", str(raw), "-x"], capture_output=True, text=True, check=True).stdout
    assert text.startswith("kern  :err   : ")
    log, (result,) = _results(tmp_path, text)
    assert [(e.kind, e.message) for e in log.nic_events] == [("nic_driver_error", NO_IRQS)]  # not the info one
    assert result.status == Status.WARN


@pytest.mark.parametrize("text", [
    # the netdev report's banners at the level mlx5 prints them (mlx5_core_info: KERN_INFO): firmware version, PCIe
    # bandwidth, E-Switch, the cable plugged, the slot's power
    "".join(f"6,{n},{n},-;{line.split('] ', 1)[1]}\n" for n, line in enumerate(NETDEV_5_10_65.splitlines()[:7])),
    # "Link up" (mlx5e_update_carrier, netdev_info) as GPUd's infiniband kmsg matcher tests quote it
    "6,1,1,-;mlx5_core 0000:19:00.0 enp25s0np0: Link up\n",
    f"6,1200,5278293,-;{NO_IRQS}\n",  # the error's words at the info level
    f"[    5.278293] {NO_IRQS}\n",  # plain dmesg carries no level: nothing is guessed from the text
    f"11,1201,5278294,-;{NO_IRQS}\n",  # user space at the error level (facility 1): never a driver record
    # a restricted PF refusing a register read, at the error level (mlx5_cmd_out_err): a rule names it, a command
    # failure GPUd calls benign (tests/fixtures/rdma/kernel-log-nic.json, GPUd issue 1164)
    "3,1202,5278295,-;mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 268269): ACCESS_REG(0x805) op_mod(0x1) "
    "failed, status bad resource(0x5), syndrome (0x305684), err(-22)\n",
])
def test_banners_plain_dmesg_user_space_and_named_records_stay_passes(tmp_path, text):
    assert _only_passes(*_results(tmp_path, text))


@pytest.mark.parametrize("name", ["segfault-mlx5-name.kmsg", "segfault-mlx5-name.dmesg", "segfault-mlx5-name.dmesg-x",
                                  "segfault-mlx5-name.dmesg-json", "user-write-mlx5.kmsg"])
def test_a_users_mlx5_text_fails_no_nic(tmp_path, name):
    """A program named `x\\nmlx5_core 0000:03:00.0: mlx5_load_one failed …\\nmlx5_core: probe of 0000:03:00.0 failed
    …`, run as nobody: the kernel's segfault report carries the name inside its own record (facility 0, info); and
    the same line written to /dev/kmsg from user space. Real records, tests/fixtures/kmsg-hostile/README.md."""
    text = (HOSTILE / name).read_text(encoding="utf-8")
    assert "mlx5_load_one failed" in text
    assert _only_passes(*_results(tmp_path, text))


def test_a_flood_of_one_new_nic_wording_is_bounded_apart_from_the_gpus(tmp_path):
    from gpudiag.probe.kernel_log.events import MAX_UNRECOGNISED

    flood = "".join(f"3,{n},{n},-;mlx5_core 0000:01:00.0: someNewStep:{n}:(pid 26): failed\n" for n in range(500))
    gpu = "3,999,999,-;NVRM: GPU 0000:3b:00.0: someNewFailure_IMPL: step failed\n"  # after the NIC's flood
    log, (result,) = _results(tmp_path, flood + gpu)
    assert len(log.nic_events) == MAX_UNRECOGNISED
    assert [e.kind for e in log.events] == ["driver_error"]  # the GPUs' own bound: the NIC flood hides no GPU error
    assert result.status == Status.WARN and len(result.observed["unrecognised_lines"]) == 3
    assert result.message.count("someNewStep") == 1


def test_an_unread_log_skips_and_an_unreadable_one_is_unknown_where_there_are_nics(tmp_path):
    snap = copy.deepcopy(_HGX[0])
    snap.kernel_log = KernelLogInfo()
    assert [r.status for r in run(snap, CHECK)] == [Status.SKIP]
    snap.kernel_log = read_kernel_log(root=tmp_path)  # no dev/kmsg under it
    (result,) = run(snap, CHECK)
    assert (result.status, result.fault_code) == (Status.UNKNOWN, "GPUDIAG-KERNEL-LOG-UNREADABLE")


def test_a_node_without_nics_or_nic_records_skips_as_the_family_does_but_a_record_is_judged(tmp_path):
    snap = nvidia_h200_node()  # its NICs not read: network None
    snap.kernel_log = read_kernel_log(root=tmp_path)
    assert [r.status for r in run(snap, CHECK)] == [Status.SKIP]
    _, (result,) = _results(tmp_path, NETDEV_5_10_65.splitlines()[8] + "\n", nvidia_h200_node())
    assert (result.status, result.observed["pci_bus_id"]) == (Status.FAIL, "0000:41:00.0")
