"""The network checks (checks/network*.py) on nodes read by the real probes from fake sysfs trees built from public
recordings (tests/support/rdma_tree*.py, tests/support/network_nodes.py): healthy nodes of each NIC kind pass with
nothing unknown, and each fault fails or warns on the NIC (or GPU) that has it, saying what to do."""

from __future__ import annotations

import dataclasses

import pytest

from gpudiag.checks import VERDICTS
from gpudiag.checks.network import family as network, affinity as network_affinity
from gpudiag.checks.verdicts import assign
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.expect.network_settings import NetworkSettings
from gpudiag.model import NodeSnapshot, Status
from gpudiag.model.network import NetworkInfo
from gpudiag.probe.network.history import CounterHistory
from tests.support import rdma_tree
from tests.support.network_nodes import clear_counters, hgx_h100, read, snapshot
from tests.support.rdma_tree import GPUD_HCAS, HGX_GPUS, firmware, half_rate, link_errors, port_down
from tests.support.rdma_tree_amd import mi300x_thor2, mi355x_pollara
from tests.support.snapshots import assert_actionable

# The checks that judge the NICs /sys/class/infiniband shows; network.driver_errors reads only the kernel log (a NIC its
# driver could not take is no RDMA device) and is tested in tests/checks/network/test_driver.py.
CHECKS = tuple(c for c in network.FAMILY.checks if c.id != "network.driver_errors") + \
    network_affinity.TOPOLOGY_CHECKS
IDS = tuple(c.id for c in CHECKS)
# What the shipped HGX H100/H200 profiles set (gpudiag/profiles/h100-8x.toml), with an IB site's count and link layer.
HGX_PROFILE = NetworkSettings(nic_pci_ids=("15b3:1021",), expected_nics=8, expected_nic_rate_gbps=400.0,
                              expected_nic_link_layer="InfiniBand", gpu_nic_affinity="switch")


def run(snap: NodeSnapshot, check_id: str, settings=None) -> list:
    (check,) = [c for c in CHECKS if c.id == check_id]
    # with their verdicts, as gpudiag.checks.run_checks gives them
    return [assign(r) for r in check.run(snap, settings if settings is not None else DEFAULT_EXPECTATIONS)]


def run_all(snap: NodeSnapshot, settings=None) -> list:
    return [r for c in CHECKS for r in run(snap, c.id, settings)]


def about(results: list, nic: str) -> list:
    return [r for r in results if isinstance(r.observed, dict) and r.observed.get("nic") == nic]


def not_passing(results: list) -> list:
    return [r for r in results if r.status not in (Status.PASS, Status.SKIP)]


def test_every_check_is_one_of_the_family_and_has_its_verdict_rows():
    assert set(IDS) <= set(VERDICTS) and len(IDS) == len(set(IDS))
    assert all(i.startswith("network.") or i == "topology.gpu_nic_affinity" for i in IDS)


# ---------------------------------------------------------------------------------------------------------------
# Healthy nodes of each kind


@pytest.mark.parametrize("settings", [None, HGX_PROFILE], ids=["no-profile", "hgx-profile"])
def test_healthy_connectx7_infiniband_node_passes_with_nothing_unknown(tmp_path, settings):
    _, snap = hgx_h100(tmp_path)
    results = run_all(snap, settings)
    assert not not_passing(results), [(r.check, r.message) for r in not_passing(results)]
    assert {r.check for r in results if r.status == Status.PASS} == set(IDS)
    affinity = run(snap, "topology.gpu_nic_affinity", settings)
    assert [(r.device.index, r.observed["nic"], r.observed["relation"]) for r in affinity] == \
        [(i, GPUD_HCAS[i], "PIX") for i in range(8)]


def test_the_hgx_profile_leaves_the_front_end_bluefield_out_and_counts_the_eight_connectx7(tmp_path):
    _, snap = hgx_h100(tmp_path)
    (count,) = [r for r in run(snap, "network.nics", HGX_PROFILE) if "fabric_nics" in r.observed]
    assert count.status == Status.PASS and count.observed["fabric_nics"] == sorted(GPUD_HCAS)
    assert count.observed["other_rdma_devices"] == ["mlx5_bond_0"]
    assert not about(run_all(snap, HGX_PROFILE), "mlx5_bond_0")


def test_healthy_roce_connectx_node_passes(tmp_path):
    clear_counters(rdma_tree.h200_roce(tmp_path))
    results = run_all(snapshot(tmp_path))
    assert not not_passing(results), [(r.check, r.message) for r in not_passing(results)]
    nics = run(snapshot(tmp_path), "network.nics", dataclasses.replace(HGX_PROFILE, expected_nic_link_layer="Ethernet"))
    assert {r.status for r in nics} == {Status.PASS} and len(nics) == 9


@pytest.mark.parametrize("build", [mi300x_thor2, mi355x_pollara], ids=["thor2", "pollara"])
def test_healthy_amd_node_with_broadcom_or_pensando_nics_passes(tmp_path, build):
    build(tmp_path)
    results = run_all(snapshot(tmp_path, amd=True))
    assert not not_passing(results), [(r.check, r.message) for r in not_passing(results)]
    (stack,) = [r for r in run(snapshot(tmp_path, amd=True), "network.gpudirect") if r.device is None]
    assert stack.status == Status.PASS and "AMD" in stack.message


def test_thor2_error_counters_are_its_hw_counters_and_pollara_says_it_has_none(tmp_path):
    mi300x_thor2(tmp_path / "thor2")
    mi355x_pollara(tmp_path / "pollara")
    thor2 = run(snapshot(tmp_path / "thor2", amd=True), "network.errors")
    assert {r.status for r in thor2} == {Status.PASS}
    assert "hw:max_retry_exceeded" in thor2[0].observed["counters"]
    pollara = run(snapshot(tmp_path / "pollara", amd=True), "network.errors")
    assert {r.status for r in pollara} == {Status.SKIP} and "ionic exposes no link error counter" in pollara[0].message


# ---------------------------------------------------------------------------------------------------------------
# Faults, each on the right NIC


def test_a_port_down_fails_on_that_nic_naming_cable_optic_and_switch_port(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    port_down(node, "mlx5_4")
    snap = snapshot(tmp_path)
    results = run(snap, "network.nics")
    (down,) = not_passing(results)
    assert_actionable(down, Status.FAIL)
    assert down.observed["nic"] == "mlx5_4" and down.observed["phys_state"] == "Disabled"
    assert down.fault_code == "GPUDIAG-NETWORK-NIC-DOWN" and down.action == "drain"
    assert "disabled" in down.message and "ibportstate" in down.remediation
    (rate,) = about(run(snap, "network.rate"), "mlx5_4") or [r for r in run(snap, "network.rate")
                                                               if "mlx5_4" in r.message]
    assert rate.status == Status.SKIP


def test_a_port_without_link_names_the_cable_the_optic_and_the_switch_port(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    node.tree.set_port("mlx5_6", 1, "state", "1: DOWN")
    node.tree.set_port("mlx5_6", 1, "phys_state", "2: Polling")
    (down,) = not_passing(run(snapshot(tmp_path), "network.nics"))
    assert down.observed["nic"] == "mlx5_6" and "sibling" in down.message
    assert all(word in down.remediation for word in ("cable", "optic", "switch port"))


def test_a_port_at_half_rate_fails_with_the_lanes_and_the_suspects(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    half_rate(node, "mlx5_7")
    snap = snapshot(tmp_path)
    for settings in (None, HGX_PROFILE):  # against the profile's 400 Gb/s, and against its seven siblings
        (slow,) = not_passing(run(snap, "network.rate", settings))
        assert_actionable(slow, Status.FAIL)
        assert slow.observed["nic"] == "mlx5_7" and slow.observed["rate_gbps"] == 200.0
        assert "2 of 4 lanes" in slow.message and "400" in slow.expected
        assert "cable or optic" in slow.remediation and "switch port" in slow.remediation
        assert slow.fault_code == "GPUDIAG-NETWORK-RATE-DEGRADED"


def test_symbol_errors_since_boot_above_the_ibta_bound_warn(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    link_errors(node, "mlx5_5", symbol_error=5000)  # in a day: 208/h, above 120/h
    (result,) = not_passing(run(snapshot(tmp_path), "network.errors"))
    assert_actionable(result, Status.WARN)
    assert result.observed["nic"] == "mlx5_5" and "5,000 symbol errors since boot" in result.message
    assert "cable" in result.remediation and "perfquery" in result.remediation


def test_rising_symbol_errors_between_collections_fail_at_nvsentinels_rate(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    clock = iter([1000.0, 1060.0])
    history = CounterHistory(clock=lambda: next(clock))
    read(tmp_path, history)
    link_errors(node, "mlx5_8", symbol_error=1200)  # 20/s over the minute: above 10/s
    snap = snapshot(tmp_path, info=read(tmp_path, history))
    assert snap.network.previous is not None and snap.network.previous.seconds_before == 60.0
    (result,) = not_passing(run(snap, "network.errors"))
    assert_actionable(result, Status.FAIL)
    assert result.observed["nic"] == "mlx5_8" and "since the last collection" in result.message
    assert result.observed["seconds_since_previous"] == 60.0


def test_a_link_down_between_collections_fails_and_counted_since_boot_only_warns(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    link_errors(node, "mlx5_0", link_downed=1)
    clock = iter([0.0, 30.0])
    history = CounterHistory(clock=lambda: next(clock))
    alone = run(snapshot(tmp_path, info=read(tmp_path, history)), "network.errors")
    assert [r.status for r in not_passing(alone)] == [Status.WARN]  # one link down since the counters were cleared
    link_errors(node, "mlx5_0", link_downed=2)
    (result,) = not_passing(run(snapshot(tmp_path, info=read(tmp_path, history)), "network.errors"))
    assert result.status == Status.FAIL and "1 new link downs" in result.message


def test_gpuds_recording_as_it_is_warns_on_its_saturated_counters_and_says_at_least(tmp_path):
    rdma_tree.hgx_h100_ib(tmp_path)  # counters as recorded: excessive_buffer_overrun_errors 15, link_downed 255
    results = run(snapshot(tmp_path), "network.errors")
    assert {r.status for r in results} == {Status.WARN}
    (mlx5_1,) = about(results, "mlx5_1")
    assert "at least 255 link downs (the counter's top)" in mlx5_1.message
    assert "at least 15 buffer overruns" in mlx5_1.message


def test_a_saturated_counter_does_not_hide_behind_a_zero_increase(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    link_errors(node, "mlx5_9", symbol_error=65535)
    clock = iter([0.0, 60.0])
    history = CounterHistory(clock=lambda: next(clock))
    read(tmp_path, history)
    (result,) = not_passing(run(snapshot(tmp_path, info=read(tmp_path, history)), "network.errors"))
    assert result.status in (Status.WARN, Status.FAIL) and "the counter's top" in result.message


def test_a_flapping_port_fails_and_a_single_flap_warns(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    line = "mlx5_core 0000:5c:00.0 mlx5_5: Port: 1 Link {}"  # ib_cache_update's record, as GPUd PR 1209 shows it
    flapping = snapshot(tmp_path, nic_log=tuple(line.format(s) for s in ("DOWN", "ACTIVE") * 3))
    (result,) = not_passing(run(flapping, "network.flaps"))
    assert_actionable(result, Status.FAIL)
    assert result.observed["nic"] == "mlx5_5" and result.observed["link_downs"] == 3
    assert result.fault_code == "GPUDIAG-NETWORK-LINK-FLAPPING"
    once = snapshot(tmp_path, nic_log=("mlx5_core 0000:5c:00.0 ibp92s0: Link down",
                                       "mlx5_core 0000:5c:00.0 ibp92s0: Link up"))
    (single,) = not_passing(run(once, "network.flaps"))
    assert single.status == Status.WARN and single.observed["nic"] == "mlx5_5"


def test_flaps_outside_the_window_do_not_count(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    snap = snapshot(tmp_path, nic_log=("mlx5_core 0000:5c:00.0 mlx5_5: Port: 1 Link DOWN",))
    short = NetworkSettings(nic_flap_window_seconds=600.0)  # the record is an hour old
    assert not not_passing(run(snap, "network.flaps", short))


def test_an_unreadable_kernel_log_makes_flaps_unknown(tmp_path):
    _, snap = hgx_h100(tmp_path)
    snap.kernel_log.readable = False
    (result,) = run(snap, "network.flaps")
    assert_actionable(result, Status.UNKNOWN)


def test_a_firmware_outlier_warns_on_that_nic_and_the_profiles_version_fails_it(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path))
    firmware(node, "mlx5_6", "28.39.1002")  # imbue's CX7 firmware, beside GPUd's 28.41.1000
    snap = snapshot(tmp_path)
    (outlier,) = not_passing(run(snap, "network.firmware"))
    assert_actionable(outlier, Status.WARN)
    assert outlier.observed["nic"] == "mlx5_6" and "7 of its 8 ConnectX-7 (MT_0000000838) siblings run 28.41.1000" \
        in outlier.message
    assert "mlxfwmanager" in outlier.remediation
    pinned = NetworkSettings(expected_nic_firmware=("MT_0000000838=28.41.1000",))
    (wrong,) = not_passing(run(snap, "network.firmware", pinned))
    assert wrong.status == Status.FAIL and wrong.observed["nic"] == "mlx5_6"


def test_a_gpu_without_its_nic_below_its_switch_fails_on_that_gpu(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path, nic_elsewhere=2))
    snap = snapshot(tmp_path)
    for settings in (None, HGX_PROFILE):
        (result,) = not_passing(run(snap, "topology.gpu_nic_affinity", settings))
        assert_actionable(result, Status.FAIL)
        assert result.device.index == 2 and result.device.pci_bus_id == HGX_GPUS[2]
        assert result.observed["relation"] in ("NODE", "SYS") and "nvidia-smi topo -m" in result.remediation


def test_a_profile_pair_names_the_nic_a_gpu_must_have(tmp_path):
    _, snap = hgx_h100(tmp_path)
    wrong = NetworkSettings(gpu_nic_pairs=(f"{HGX_GPUS[0]}=mlx5_9",))  # mlx5_9 sits below GPU 7's switch
    (result,) = not_passing(run(snap, "topology.gpu_nic_affinity", wrong))
    assert result.device.index == 0 and result.observed["nic"] == "mlx5_9"


def test_missing_nvidia_peermem_fails_without_dmabuf_and_passes_with_it(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path, peermem=False))
    snap = snapshot(tmp_path)
    (stack,) = [r for r in run(snap, "network.gpudirect") if r.device is None]
    assert stack.status == Status.PASS and "dma-buf" in stack.message  # open kernel modules on Linux 6.8
    (required,) = not_passing(run(snap, "network.gpudirect", NetworkSettings(gpudirect_path="peermem")))
    assert_actionable(required, Status.FAIL)
    assert "nvidia_peermem not loaded" in required.message and "modprobe nvidia_peermem" in required.remediation
    snap.network.host.nvidia_open_kernel_module = False  # the proprietary modules: no dma-buf
    (missing,) = not_passing(run(snap, "network.gpudirect"))
    assert missing.status == Status.FAIL and missing.fault_code == "GPUDIAG-NETWORK-GPUDIRECT-UNAVAILABLE"


def test_acs_redirect_on_a_switch_between_a_gpu_and_its_nic_warns_on_that_gpu(tmp_path):
    node, _ = hgx_h100(tmp_path)
    pair = node.pairs[3]
    node.tree.set_config(pair.gpu_down, rdma_tree.config_space(0x1000, 0xC030, rdma_tree.ACS_CTRL_REDIRECT))
    (result,) = not_passing(run(snapshot(tmp_path), "network.gpudirect"))
    assert_actionable(result, Status.WARN)
    assert result.device.index == 3 and pair.gpu_down in result.observed["redirect"]
    assert result.fault_code == "GPUDIAG-NETWORK-ACS-REDIRECT"


def test_acs_unreadable_without_root_is_one_unknown_never_a_pass(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path, privileged=False))
    results = run(snapshot(tmp_path), "network.gpudirect")
    (unread,) = not_passing(results)
    assert_actionable(unread, Status.UNKNOWN)
    assert len(unread.observed["gpus"]) == 8 and "root" in unread.remediation
    assert not [r for r in results if r.device is not None]  # no GPU's path is called clean


# ---------------------------------------------------------------------------------------------------------------
# No NICs, NICs not read, NICs unreadable


def test_a_node_without_rdma_devices_skips_the_family_and_fails_only_when_the_profile_expects_nics(tmp_path):
    rdma_tree.RdmaTree(tmp_path).add_gpu("0000:18:00.0", bridges=("0000:15:01.0",), upstream="0000:16:00.0")
    snap = snapshot(tmp_path)
    assert snap.network.readable and snap.network.class_present is False
    results = run_all(snap)
    assert {r.status for r in results} == {Status.SKIP} and len(results) == len(IDS)
    assert all("no RDMA device" in r.message or "no fabric NIC" in r.message for r in results)
    expecting = run_all(snap, NetworkSettings(expected_nics=8))
    (fail,) = not_passing(expecting)
    assert_actionable(fail, Status.FAIL)
    assert fail.check == "network.nics" and "the profile expects 8" in fail.message


def test_nics_not_collected_skip_and_are_unknown_when_the_profile_expects_some(tmp_path):
    _, snap = hgx_h100(tmp_path)
    snap.network = None
    assert {r.status for r in run_all(snap)} == {Status.SKIP}
    (result,) = not_passing(run_all(snap, NetworkSettings(expected_nics=8)))
    assert result.status == Status.UNKNOWN and result.check == "network.nics"


def test_unreadable_sysfs_is_unknown_for_every_check(tmp_path):
    _, snap = hgx_h100(tmp_path)
    snap.network = NetworkInfo(readable=False)
    assert {r.status for r in run_all(snap)} == {Status.UNKNOWN}


def test_an_unreadable_port_state_is_unknown_not_a_pass(tmp_path):
    node, _ = hgx_h100(tmp_path)
    node.tree.port_file("mlx5_4", 1, "state").unlink()
    node.tree.port_file("mlx5_4", 1, "phys_state").unlink()
    results = run(snapshot(tmp_path), "network.nics")
    (result,) = about(not_passing(results), "mlx5_4")
    assert result.status == Status.UNKNOWN


def test_fewer_nics_than_the_profile_expects_fails(tmp_path):
    _, snap = hgx_h100(tmp_path)
    snap.network.devices = [d for d in snap.network.devices if d.name != "mlx5_9"]
    (count,) = not_passing(run(snap, "network.nics", HGX_PROFILE))
    assert_actionable(count, Status.FAIL)
    assert "7 fabric NICs (15b3:1021) of 8 expected" in count.message


def test_every_non_passing_result_has_a_family_fault_code(tmp_path):
    node = clear_counters(rdma_tree.hgx_h100_ib(tmp_path, nic_elsewhere=1, peermem=False))
    port_down(node, "mlx5_4")
    half_rate(node, "mlx5_7")
    firmware(node, "mlx5_6", "28.39.1002")
    link_errors(node, "mlx5_5", symbol_error=60000)
    snap = snapshot(tmp_path)
    snap.network.host.nvidia_open_kernel_module = False
    results = not_passing(run_all(snap, HGX_PROFILE))
    assert {r.check for r in results} >= {"network.nics", "network.rate", "network.firmware", "network.errors",
                                          "network.gpudirect", "topology.gpu_nic_affinity"}
    for result in results:
        assert (result.action, result.fault_code) == VERDICTS[result.check][result.status], result.message
        assert result.remediation.strip()
