"""The amdsmi backend against the real amdsmi 7.0.2 Python wrapper over a fake libamd_smi.so."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest

from gpudiag.model import THROTTLE_REASONS, DeviceSnapshot, ErrorKind
from gpudiag.probe.amdsmi.backend import AmdsmiBackend
from gpudiag.probe.deadline import CallTracker, run_all
from tests.support.backend_driver import Driven, drive
from tests.support.fakes import amd_node
from tests.support.fakes.amd_node import FakeAmdNode, mi300x_node
from tests.support.fakes.fake_amdsmi import FakeLibAmdSmi, installed

MIB = 1024 * 1024
MI300X_BDFS = [f"0000:{bus:02x}:00.0" for bus in amd_node.MI300X_BUSES]


class RecordingTracker(CallTracker):
    def __init__(self) -> None:
        super().__init__()
        self.entered: list[str] = []

    def enter(self, name: str) -> None:
        super().enter(name)
        self.entered.append(name)


@dataclass
class Probed(Driven):
    library: FakeLibAmdSmi


def probe(node: FakeAmdNode) -> Probed:
    with installed(node) as library:
        driven = drive(AmdsmiBackend())
    return Probed(driven.info, driven.devices, driven.peers, library)


def test_healthy_mi300x_node_identity_versions_and_no_errors():
    probed = probe(mi300x_node())

    assert probed.info.available and probed.info.error is None
    assert (probed.info.library_version, probed.info.runtime_version) == ("26.0.2", "7.0.2")
    assert probed.info.driver_version == "6.12.12"
    assert probed.info.device_count == 8
    assert [d.pci_bus_id for d in probed.devices] == MI300X_BDFS
    for device in probed.devices:
        assert device.errors == [] and device.reachable and device.source == "amdsmi"
        assert (device.name, device.architecture) == ("AMD Instinct MI300X", "gfx942")
        assert device.vbios_version == "022.042.000.002.000001"  # the version, not the part number
        assert (device.virtualization, device.metrics_version) == ("baremetal", "1.8")
        assert device.unsupported == {"amdsmi.amdsmi_gpu_xgmi_error_status": device.unsupported.get(
            "amdsmi.amdsmi_gpu_xgmi_error_status")} and "11468" in device.unsupported[
            "amdsmi.amdsmi_gpu_xgmi_error_status"]  # INVAL on gfx942 is the platform, not an error
        assert (device.partition_id, device.physical_pci_bus_id) == (0, device.pci_bus_id)
        assert not device.is_logical_partition
        assert (device.compute_partition, device.memory_partition) == ("SPX", "NPS1")
    assert len({d.uuid for d in probed.devices}) == 8
    assert probed.devices[2].serial == "PCB024A1X"
    assert [d.numa_node for d in probed.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    # fw_name comes back as an AmdSmiFwBlock member; PM is dotted decimal, SOSDRV dotted hex (the wrapper's doing)
    assert probed.devices[0].firmware_versions == {"PM": "00.85.106.00", "PSP_SOSDRV": "00.27.00.82", "CP_MEC1": "178"}
    assert probed.library.unmodelled == set()
    assert "amdsmi_shut_down" in probed.library.calls


def test_units_are_converted_once_in_the_probe():
    device = probe(mi300x_node(1)).devices[0]

    assert (device.pcie.current_generation, device.pcie.current_width) == (5, 16)  # 32000 MT/s
    assert (device.pcie.device_max_generation, device.pcie.device_max_width) == (5, 16)
    assert device.power.draw_watts == 180.0  # W from current_socket_power
    assert device.power.limit_watts == 750.0  # µW → W
    # MI300 (smu_v13_0_6_get_power_limit): minimum 0, default = the cap in force
    assert (device.power.min_limit_watts, device.power.max_limit_watts) == (0.0, 750.0)
    assert device.power.default_limit_watts == 750.0
    assert device.power.energy_joules == pytest.approx(6500, rel=1e-6)  # ticks × 15.259 µJ → J
    assert device.memory.total_bytes == 196592 * MIB and device.memory.used_bytes == 283 * MIB
    hotspot = device.temperatures["hotspot"]
    assert (hotspot.current_celsius, hotspot.slowdown_celsius, hotspot.shutdown_celsius) == (48.0, 100.0, 105.0)
    assert device.ecc.enabled is True
    assert device.memory_health.bad_page_threshold == 128  # read from the driver (as root)
    assert device.memory_health.bad_page_threshold_source == "driver"


def test_unsupported_values_are_none_never_zero():
    node = mi300x_node(1)
    node.gpus[0].pcie_mts = 0xFFFFFFFF  # gpu_metrics without a link speed: "N/A" from the wrapper
    device = probe(node).devices[0]

    assert "edge" not in device.temperatures  # MI300X has no edge sensor: NOT_SUPPORTED, not 0 °C
    assert device.pcie.current_generation is None and device.pcie.device_max_generation == 5
    assert "other_end_recovery" not in device.pcie.error_counters  # "N/A" in the metrics
    assert device.pcie.error_counters["nak_received"] == 0  # a real zero stays a zero
    assert device.errors == []


def test_average_socket_power_when_current_is_not_reported():
    node = mi300x_node(1)
    node.gpus[0].reports_average_power = True  # MI200-style power info
    assert probe(node).devices[0].power.draw_watts == 180.0


def test_gen5_gpu_trained_at_gen4():
    node = mi300x_node()
    amd_node.pcie_trained_gen4_on_gen4_board(node, 3)
    devices = probe(node).devices

    assert (devices[3].pcie.current_generation, devices[3].pcie.current_width) == (4, 16)
    assert devices[3].pcie.device_max_generation == 5
    assert all(d.pcie.current_generation == 5 for i, d in enumerate(devices) if i != 3)


def test_uncorrectable_ecc_total_and_per_block():
    node = mi300x_node()
    amd_node.uncorrectable_ecc(node, 1, count=2)
    device = probe(node).devices[1]

    assert device.ecc.volatile_uncorrected == 2 and device.ecc.volatile_corrected == 0
    assert device.ecc.by_block["umc"] == {"corrected": 0, "uncorrected": 2, "deferred": 0}
    assert set(device.ecc.by_block) == {"umc", "sdma", "gfx", "mmhub", "pcie_bif", "hdp", "xgmi_wafl"}
    assert all(counts["uncorrected"] == 0 for block, counts in device.ecc.by_block.items() if block != "umc")


def test_deferred_errors_are_counted():
    node = mi300x_node(1)
    node.gpus[0].ecc_counts[amd_node.BLOCK_UMC] = (5, 0, 3)
    device = probe(node).devices[0]
    assert (device.ecc.volatile_corrected, device.ecc.deferred) == (5, 3)
    assert device.ecc.by_block["umc"]["deferred"] == 3


def test_bad_pages_by_status():
    node = mi300x_node()
    amd_node.pending_bad_pages(node, 6, count=3)
    node.gpus[6].bad_pages += [(0x100, amd_node.PAGE_RESERVED), (0x200, amd_node.PAGE_UNRESERVABLE)]
    health = probe(node).devices[6].memory_health

    assert (health.bad_pages_reserved, health.bad_pages_pending, health.bad_pages_unreservable) == (1, 3, 1)


def test_xgmi_link_down():
    node = mi300x_node()
    amd_node.xgmi_link_down(node, 2, link=3)
    devices = probe(node).devices

    links = devices[2].links
    assert [link.up for link in links] == [True, True, True, False, True, True, True]
    assert {link.kind for link in links} == {"xgmi"}
    assert all(link.up for link in devices[0].links)


def test_xgmi_error_status_where_amdgpu_supports_it():
    node = amd_node.mi250x_node(2)  # DF 3.6: xgmi_error works
    node.gpus[1].xgmi_error_status = 1
    devices = probe(node).devices
    assert [d.xgmi_error_status for d in devices] == ["no_errors", "error"]
    assert all(d.errors == [] for d in devices)


def test_xgmi_error_status_inval_on_mi300_is_not_an_error_and_wafl_counts_are_read():
    node = mi300x_node(2)
    amd_node.xgmi_wafl_errors(node, 1, corrected=3, uncorrected=1)
    devices = probe(node).devices
    for device in devices:
        assert device.xgmi_error_status is None and device.errors == []
        assert "EINVAL" in device.unsupported["amdsmi.amdsmi_gpu_xgmi_error_status"]
    assert devices[1].ecc.by_block["xgmi_wafl"] == {"corrected": 3, "uncorrected": 1, "deferred": 0}


def test_disabled_xgmi_links_are_not_reported_as_down():
    node = mi300x_node(1)
    node.gpus[0].xgmi_links = [amd_node.XGMI_UP] * 7 + [amd_node.XGMI_DISABLED]
    links = probe(node).devices[0].links
    assert len(links) == 7 and all(link.up for link in links)


def test_hotspot_over_critical():
    node = mi300x_node()
    amd_node.hotspot_over_critical(node, 4)
    hotspot = probe(node).devices[4].temperatures["hotspot"]
    assert hotspot.current_celsius == 104.0 and hotspot.current_celsius > hotspot.slowdown_celsius


def test_violation_status_maps_to_throttle_reasons():
    node = mi300x_node(2)
    node.gpus[1].violations = {"active_ppt_pwr", "active_hbm_thrm"}
    devices = probe(node).devices

    assert devices[0].clocks.throttle_reasons == []  # readable, nothing active
    assert devices[1].clocks.throttle_reasons == ["ppt_power", "hbm_thermal"]
    assert set(devices[1].clocks.throttle_reasons) <= set(THROTTLE_REASONS)


def test_cpx_mode_enumerates_64_partitions_grouped_by_physical_gpu():
    node = mi300x_node()
    amd_node.cpx_mode(node)
    probed = probe(node)

    assert probed.info.device_count == 64 and len(probed.devices) == 64
    groups: dict[str, list[DeviceSnapshot]] = {}
    for device in probed.devices:
        groups.setdefault(device.physical_pci_bus_id, []).append(device)
    assert sorted(groups) == MI300X_BDFS
    first = groups["0000:05:00.0"]
    assert [d.pci_bus_id for d in first] == [f"0000:05:00.{p}" for p in range(8)]
    assert [d.partition_id for d in first] == list(range(8))
    assert [d.is_logical_partition for d in first] == [False] + [True] * 7
    assert len({d.uuid for d in probed.devices}) == 64  # one UUID per partition (ROCm 7.0+)
    for device in probed.devices:
        assert device.errors == []  # NOT_SUPPORTED on a secondary partition is not an error
        assert (device.compute_partition, device.memory_partition) == ("CPX", "NPS4")  # inherited from partition 0
    primary, secondary = first[0], first[5]
    assert primary.power.draw_watts == 180.0 and primary.temperatures and len(primary.links) == 7
    # device-wide data belongs to the physical GPU: absent (None), not zero, on the other partitions
    assert secondary.power.draw_watts is None and secondary.temperatures == {} and secondary.links == []
    assert secondary.ecc.volatile_uncorrected is None and secondary.memory_health.bad_pages_pending is None
    assert secondary.serial is None
    assert len(probed.peers) == 28  # pairs of physical GPUs, not of 64 partitions


def test_lost_gpu_is_unreachable_with_the_reason_and_others_are_probed():
    node = mi300x_node()
    amd_node.lose_gpu(node, 5)
    probed = probe(node)

    lost = probed.devices[5]
    assert not lost.reachable
    assert lost.pci_bus_id == MI300X_BDFS[5]  # known from enumeration
    assert [(e.kind, e.source) for e in lost.errors] == [(ErrorKind.GPU_LOST, "amdsmi.amdsmi_get_gpu_device_uuid")]
    assert "AMDGPU_RESTART_ERR" in lost.errors[0].message
    assert all(d.reachable and d.errors == [] for i, d in enumerate(probed.devices) if i != 5)
    assert len(probed.peers) == 21 and all(5 not in (p.gpu_a, p.gpu_b) for p in probed.peers)


def test_per_call_failures_are_recorded_on_the_device():
    node = mi300x_node(1)
    node.failing_calls = {
        "amdsmi_get_gpu_bad_page_info": 10,  # NO_PERM
        "amdsmi_get_power_info": 8,  # TIMEOUT
        "amdsmi_get_pcie_info": [9],  # RETRY once: the caller retries
        "amdsmi_get_gpu_vram_usage": 12,  # IO
    }
    device = probe(node).devices[0]

    kinds = {e.source: e.kind for e in device.errors}
    assert kinds == {
        "amdsmi.amdsmi_get_gpu_bad_page_info": ErrorKind.NO_PERMISSION,
        "amdsmi.amdsmi_get_power_info": ErrorKind.TIMEOUT,
        "amdsmi.amdsmi_get_gpu_vram_usage": ErrorKind.ERROR,
    }
    assert device.memory_health.bad_pages_pending is None and device.power.draw_watts is None
    assert device.memory.total_bytes is None
    assert device.pcie.current_generation == 5  # the retry succeeded
    assert device.reachable


def test_every_vendor_call_is_named_to_the_tracker():
    with installed(mi300x_node(1)) as library:
        backend = AmdsmiBackend()
        backend.open(CallTracker())
        tracker = RecordingTracker()
        backend.probe_device(0, tracker)
    device_calls = [name for name in library.calls if name not in ("amdsmi_init", "amdsmi_get_lib_version")]
    assert tracker.current is None
    assert "amdsmi.amdsmi_get_pcie_info" in tracker.entered and "amdsmi.amdsmi_get_temp_metric" in tracker.entered
    assert tracker.completed == len(tracker.entered) > 20
    assert len(device_calls) >= len(tracker.entered)


def test_init_without_permission_makes_the_backend_unavailable():
    node = mi300x_node()
    node.init_status = 10  # AMDSMI_STATUS_NO_PERM
    info = probe(node).info
    assert not info.available and info.error.kind is ErrorKind.NO_PERMISSION
    assert info.error.source == "amdsmi.amdsmi_init"


def test_missing_rocm_core_leaves_rocm_version_unknown():
    node = mi300x_node(1)
    node.rocm_version = None
    info = probe(node).info
    assert info.available and info.runtime_version is None


def test_library_missing_keeps_stdout_clean(capfd):
    node = mi300x_node()
    node.library_present = False
    # The fake reproduces the wrapper's behaviour: without the library, `import amdsmi` prints and raises KeyError.
    with installed(node), pytest.raises(KeyError, match="libamd_smi.so"):
        importlib.import_module("amdsmi")
    assert "Unable to find libamd_smi.so" in capfd.readouterr().out

    info = probe(node).info

    captured = capfd.readouterr()
    assert captured.out == ""
    assert not info.available and info.error.kind is ErrorKind.NOT_FOUND
    assert "libamd_smi.so" in info.error.message and "amd-smi-lib" in info.error.message


def test_a_hung_call_is_named_and_the_device_keeps_its_identity():
    node = mi300x_node(2)
    node.gpus[1].hang_in = "amdsmi_get_temp_metric"
    with installed(node):
        backend = AmdsmiBackend()
        backend.open(CallTracker())
        try:
            outcomes = run_all({i: (lambda t, i=i: backend.probe_device(i, t)) for i in range(2)}, 0.3)
        finally:
            node.unhang.set()

    assert outcomes[0].done and outcomes[0].value.errors == []
    hung = outcomes[1]
    assert not hung.done and hung.tracker.current == "amdsmi.amdsmi_get_temp_metric"
    assert hung.tracker.partial.pci_bus_id == MI300X_BDFS[1] and hung.tracker.partial.name == "AMD Instinct MI300X"


def test_compute_processes_with_their_vram():
    node = mi300x_node(2)
    node.gpus[1].processes = [(4242, "python3", 64 * 1024**3)]
    devices = probe(node).devices
    assert devices[0].processes == []  # read: nothing running
    (process,) = devices[1].processes
    assert (process.pid, process.kind, process.used_memory_bytes) == (4242, "compute", 64 * 1024**3)


def test_enumeration_failure_reports_it_and_shuts_the_library_down():
    node = mi300x_node()
    node.failing_calls = {"amdsmi_get_socket_handles": 18}  # AMDSMI_STATUS_INIT_ERROR
    probed = probe(node)
    assert not probed.info.available
    assert (probed.info.error.source, probed.info.error.kind) == (
        "amdsmi.amdsmi_get_processor_handles",
        ErrorKind.ERROR,
    )
    assert "INIT_ERROR" in probed.info.error.message
    assert probed.library.calls.count("amdsmi_shut_down") == 1


def test_errors_met_while_enumerating_are_kept_on_the_device():
    node = mi300x_node(1)
    node.failing_calls = {"amdsmi_get_gpu_kfd_info": 10}  # NO_PERM
    (device,) = probe(node).devices
    assert device.partition_id == 0 and device.pci_bus_id == MI300X_BDFS[0]  # from the location_id instead
    assert [(e.source, e.kind) for e in device.errors] == [("amdsmi.amdsmi_get_gpu_kfd_info", ErrorKind.NO_PERMISSION)]


def test_violation_residency_counters_and_the_accumulation_they_are_a_share_of():
    node = mi300x_node(2)
    node.gpus[1].violation_counters["acc_ppt_pwr"] = 90_000
    del node.gpus[1].violation_counters["acc_hbm_thrm"]  # UINT64_MAX in C: "N/A" from the wrapper
    result = probe(node)
    clocks = result.devices[1].clocks
    assert clocks.throttle_accumulation == 764_653
    assert clocks.throttle_residency == {"ppt_power": 90_000, "socket_thermal": 0, "prochot": 0, "vr_thermal": 0}
    assert clocks.throttle_seconds == {}  # ticks of unpublished length: never passed off as seconds
    # Read from the violation status the probe asks anyway: one call per GPU, as before.
    assert result.library.calls.count("amdsmi_get_violation_status") == 2


def test_without_the_accumulation_counter_no_residency_is_kept():
    node = mi300x_node(1)
    del node.gpus[0].violation_counters["acc_counter"]
    clocks = probe(node).devices[0].clocks
    assert (clocks.throttle_residency, clocks.throttle_accumulation) == ({}, None)


def test_gfx_and_memory_clocks_in_mhz():
    node = mi300x_node(1)
    del node.gpus[0].clocks_mhz[4]  # a clock domain the ASIC does not report: absent, not 0
    clocks = probe(node).devices[0].clocks
    assert (clocks.graphics_mhz, clocks.max_graphics_mhz) == (132, 2100)
    assert (clocks.memory_mhz, clocks.max_memory_mhz) == (None, None)
    assert probe(mi300x_node(1)).devices[0].clocks.max_memory_mhz == 1300


def test_cpx_partitions_at_function_zero_take_the_partition_from_location_id_bits():
    """Kernels that moved the partition to location_id bits [31:28] report function .0 for all 64 partitions
    (gpudiag issue 15 item 4); without the KFD partition ID, the location_id tells them apart."""
    node = mi300x_node()
    amd_node.cpx_mode(node)
    node.partitions_at_function_zero = True
    node.failing_calls = {"amdsmi_get_gpu_kfd_info": 2}  # NOT_SUPPORTED
    devices = probe(node).devices

    assert {d.pci_bus_id for d in devices} == set(MI300X_BDFS)  # every partition at .0
    assert [d.partition_id for d in devices[:8]] == list(range(8))
    assert sum(not d.is_logical_partition for d in devices) == 8
    assert all(d.physical_pci_bus_id == MI300X_BDFS[i // 8] for i, d in enumerate(devices))
