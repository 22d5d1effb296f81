"""The amdgpu sysfs fallback backend against trees in the kernel's formats."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpudiag.model import ErrorKind
from gpudiag.probe.amdgpu import sysfs_formats as formats
from gpudiag.probe.amdgpu.sysfs import AmdgpuSysfsBackend
from gpudiag.probe.deadline import CallTracker
from tests.support.backend_driver import drive
from tests.support.fakes import amd_node
from tests.support.fakes.amd_node import FakeAmdNode, mi300x_node
from tests.support.fakes.amdgpu_sysfs_tree import add_amdgpu_node
from tests.support.sysfs_tree import SysfsTree, deny_reads

MI300X_BDFS = [f"0000:{bus:02x}:00.0" for bus in amd_node.MI300X_BUSES]


def build(tmp_path: Path, node: FakeAmdNode) -> tuple[SysfsTree, list[Path]]:
    tree = SysfsTree(tmp_path)
    return tree, add_amdgpu_node(tree, node)


def probe(root: Path):
    driven = drive(AmdgpuSysfsBackend(root))
    return driven.info, driven.devices


def test_healthy_mi300x_node_in_units_of_the_model(tmp_path):
    build(tmp_path, mi300x_node())
    info, devices = probe(tmp_path)

    assert info.available and info.name == "amdgpu-sysfs" and info.device_count == 8
    assert info.driver_version == "6.12.12"  # /sys/module/amdgpu/version (DKMS build)
    assert [d.pci_bus_id for d in devices] == MI300X_BDFS
    device = devices[0]
    assert device.errors == [] and device.source == "amdgpu-sysfs"
    assert (device.name, device.serial) == ("AMD Instinct MI300X", "PCB004A1X")
    assert device.vbios_version == "113-M3000100-102"
    assert (device.pcie.current_generation, device.pcie.current_width) == (5, 16)
    assert (device.pcie.device_max_generation, device.pcie.device_max_width) == (5, 16)
    assert device.temperatures["hotspot"].current_celsius == 48.0  # junction, from millidegrees
    assert (device.temperatures["vram"].slowdown_celsius, device.temperatures["vram"].shutdown_celsius) == (95.0, 105.0)
    assert "edge" not in device.temperatures  # no temp1 on MI300X
    assert (device.power.draw_watts, device.power.limit_watts) == (180.0, 750.0)  # from µW
    assert device.memory.total_bytes == 196592 * 1024 * 1024
    assert device.ecc.enabled is True and device.ecc.volatile_uncorrected == 0 and device.ecc.deferred == 0
    assert device.memory_health.bad_pages_pending == 0
    assert device.memory_health.bad_page_threshold is None  # computed by the driver; sysfs does not show it
    assert (device.compute_partition, device.memory_partition) == ("SPX", "NPS1")
    assert device.firmware_versions == {"SMC": "0x00556a00", "SOS": "0x00270082", "MEC": "0x000000b2"}
    assert device.clocks.throttle_reasons is None and device.links == []  # not in sysfs: unknown, not "none"
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_only_cards_bound_to_amdgpu_are_enumerated(tmp_path):
    tree, _ = build(tmp_path, mi300x_node(2))
    nvidia = tree.add_pci_gpu("0000:c1:00.0")
    tree.symlink("sys/class/drm/card2", f"{nvidia.relative_to(tmp_path)}/drm/card2")
    tree.symlink(f"{nvidia.relative_to(tmp_path)}/drm/card2/device", str(nvidia.relative_to(tmp_path)))
    tree.path("sys/class/drm/card0-DP-1").mkdir()  # a connector, not a card

    info, devices = probe(tmp_path)
    assert info.device_count == 2 and [d.pci_bus_id for d in devices] == MI300X_BDFS[:2]


def test_gen5_gpu_trained_at_gen4(tmp_path):
    node = mi300x_node()
    amd_node.pcie_trained_gen4_on_gen4_board(node, 3)
    build(tmp_path, node)
    device = probe(tmp_path)[1][3]
    assert (device.pcie.current_generation, device.pcie.current_width, device.pcie.device_max_generation) == (4, 16, 5)


def test_uncorrectable_ecc_per_block_and_total(tmp_path):
    node = mi300x_node(2)
    amd_node.uncorrectable_ecc(node, 1, count=2)
    build(tmp_path, node)
    device = probe(tmp_path)[1][1]
    assert device.ecc.by_block["umc"] == {"uncorrected": 2, "corrected": 0, "deferred": 0}
    assert device.ecc.volatile_uncorrected == 2


def test_ras_query_inaccessible_is_an_error_not_a_zero(tmp_path):
    _, paths = build(tmp_path, mi300x_node(1))
    (paths[0] / "ras" / "umc_err_count").write_text(formats.RAS_QUERY_INACCESSIBLE + "\n")
    device = probe(tmp_path)[1][0]

    assert "umc" not in device.ecc.by_block and "gfx" in device.ecc.by_block
    assert device.ecc.volatile_uncorrected is None and device.ecc.volatile_corrected is None
    (error,) = device.errors
    assert error.source == "sysfs:/sys/class/drm/card0/device/ras/umc_err_count" and error.kind is ErrorKind.ERROR
    assert "Query currently inaccessible" in error.message


def test_err_count_without_deferred_line_leaves_deferred_unknown(tmp_path):
    _, paths = build(tmp_path, mi300x_node(1))
    for counts in (paths[0] / "ras").glob("*_err_count"):
        counts.write_text("ue: 0\nce: 1\n")  # kernels before the deferred counter
    device = probe(tmp_path)[1][0]
    assert device.ecc.volatile_corrected == 7 and device.ecc.deferred is None


def test_bad_pages_by_flag_and_threshold_parameter(tmp_path):
    node = mi300x_node(1)
    amd_node.pending_bad_pages(node, 0, count=2)
    node.gpus[0].bad_pages += [(0x10, amd_node.PAGE_RESERVED), (0x11, amd_node.PAGE_UNRESERVABLE)]
    tree, _ = build(tmp_path, node)
    tree.write("sys/module/amdgpu/parameters/bad_page_threshold", "128")
    health = probe(tmp_path)[1][0].memory_health
    assert (health.bad_pages_reserved, health.bad_pages_pending, health.bad_pages_unreservable) == (1, 2, 1)
    assert health.bad_page_threshold == 128

    tree.write("sys/module/amdgpu/parameters/bad_page_threshold", "-1")  # the default: computed by the driver
    assert probe(tmp_path)[1][0].memory_health.bad_page_threshold is None


def test_hotspot_over_critical(tmp_path):
    node = mi300x_node(1)
    amd_node.hotspot_over_critical(node, 0)
    build(tmp_path, node)
    hotspot = probe(tmp_path)[1][0].temperatures["hotspot"]
    assert (hotspot.current_celsius, hotspot.slowdown_celsius) == (104.0, 100.0)


def test_cpx_partition_modes_on_the_physical_card(tmp_path):
    node = mi300x_node()
    amd_node.cpx_mode(node)
    build(tmp_path, node)
    info, devices = probe(tmp_path)
    assert info.device_count == 8  # the PCI cards; the partitions' render nodes are not cards
    assert {(d.compute_partition, d.memory_partition) for d in devices} == {("CPX", "NPS4")}


def test_link_from_pp_dpm_pcie_when_the_link_speed_is_unknown(tmp_path):
    _, paths = build(tmp_path, mi300x_node(1))
    (paths[0] / "current_link_speed").write_text("Unknown\n")
    (paths[0] / "pp_dpm_pcie").write_text("0: 2.5GT/s, x1 619Mhz \n1: 16.0GT/s, x16 1333Mhz *\n")
    device = probe(tmp_path)[1][0]
    assert (device.pcie.current_generation, device.pcie.current_width) == (4, 16)


def test_average_power_is_read_where_the_kernel_offers_it(tmp_path):
    _, paths = build(tmp_path, mi300x_node(1))
    hwmon = next((paths[0] / "hwmon").iterdir())
    (hwmon / "power1_average").write_text("231000000\n")
    assert probe(tmp_path)[1][0].power.draw_watts == 231.0


def test_unreadable_file_is_recorded(tmp_path, monkeypatch):
    _, paths = build(tmp_path, mi300x_node(1))
    power = next((paths[0] / "hwmon").iterdir()) / "power1_input"
    card_view = tmp_path / "sys/class/drm/card0/device/hwmon" / power.parent.name / "power1_input"
    deny_reads(monkeypatch, card_view)
    device = probe(tmp_path)[1][0]
    assert device.power.draw_watts is None and device.power.limit_watts == 750.0
    assert [e.kind for e in device.errors] == [ErrorKind.NO_PERMISSION]


def test_device_gone_from_sysfs_is_unreachable(tmp_path):
    _, paths = build(tmp_path, mi300x_node(2))
    backend = AmdgpuSysfsBackend(tmp_path)
    backend.open(CallTracker())
    shutil.rmtree(paths[1])  # the GPU fell off the bus after enumeration
    device = backend.probe_device(1, CallTracker())
    assert not device.reachable and device.errors[0].kind is ErrorKind.GPU_LOST
    assert backend.probe_device(0, CallTracker()).reachable


def test_no_drm_class_means_unavailable(tmp_path):
    info, devices = probe(tmp_path)
    assert not info.available and info.error.kind is ErrorKind.NOT_FOUND and devices == []


def test_each_file_is_named_to_the_tracker(tmp_path):
    build(tmp_path, mi300x_node(1))
    backend = AmdgpuSysfsBackend(tmp_path)
    backend.open(CallTracker())
    names: list[str] = []

    class Recording(CallTracker):
        def enter(self, name: str) -> None:
            names.append(name)
            super().enter(name)

    tracker = Recording()
    device = backend.probe_device(0, tracker)
    assert "sysfs:/sys/class/drm/card0/device/ras/umc_err_count" in names
    assert tracker.partial is device  # what a deadline miss would still report
    assert tracker.current is None and tracker.completed == len(names)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ue: 1\nce: 4\nde: 2\n", {"uncorrected": 1, "corrected": 4, "deferred": 2}),
        ("ue: 0\nce: 0\n", {"uncorrected": 0, "corrected": 0}),
        ("Query currently inaccessible\n", None),
        ("", None),
    ],
)
def test_parse_err_count(text, expected):
    assert formats.parse_err_count(text) == expected


def test_parse_bad_pages_rejects_unknown_lines():
    text = "0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n"
    assert formats.parse_bad_pages(text) == formats.BadPageCounts(reserved=1, pending=1)
    assert formats.parse_bad_pages("garbage\n") is None


def test_umc_ecc_feature_bit():
    assert formats.umc_ecc_enabled("feature mask: 0x000000fd\n") is True
    assert formats.umc_ecc_enabled("feature mask: 0x000000fe\n") is False
    assert formats.umc_ecc_enabled("") is None
