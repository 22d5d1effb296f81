"""NvmlBackend driven through the real pynvml bindings over a fake libnvidia-ml (tests/support/fakes/fake_nvml.py): a
healthy node, values a GPU does not support, the library and driver failing, lost and hung GPUs. Hardware faults
are in test_faults.py, NVLink and GPU pairs in test_links.py."""

from __future__ import annotations

import json

import pynvml
import pytest

from gpudiag.model import THROTTLE_REASONS, THROTTLE_TIME_REASONS, BackendInfo, ErrorKind, PeerLink, TemperatureSensor
from gpudiag.probe import deadline
from gpudiag.probe.base import DeviceLost
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml import sensors as nvml_sensors
from gpudiag.probe.nvml.backend import NvmlBackend
from tests.support.fakes.fake_nvml import MiB, FakeGpu, FakeNode, installed, library_missing
from tests.support.paths import FIXTURES
from tests.support.probe_nvml import probe, probe_one


# -- a healthy node -----------------------------------------------------------------------------------------------


def test_healthy_h200_node_reports_every_field_in_model_units():
    result = probe(FakeNode.hgx_h200(2))

    assert result.info == BackendInfo(
        name="nvml", vendor="nvidia", available=True, error=None, library_version="12.550.127.05",
        driver_version="550.127.05", runtime_version="12.4", device_count=2,
    )
    gpu0, gpu1 = result.devices
    assert (gpu0.pci_bus_id, gpu1.pci_bus_id) == ("0000:19:00.0", "0000:3b:00.0")  # from 00000000:3B:00.0
    assert gpu1.uuid == "GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a01"
    assert (gpu0.name, gpu0.architecture, gpu0.serial) == ("NVIDIA H200", "Hopper", "1654824000100")
    assert (gpu0.board_part_number, gpu0.minor_number, gpu1.minor_number) == ("692-2G525-0200-000", 0, 1)
    assert gpu0.vbios_version == "96.00.A5.00.01"
    # Hopper has no InfoROM power object: absent, not an empty string
    assert gpu0.firmware_versions == {"inforom_oem": "2.1", "inforom_ecc": "7.16", "inforom_image": "G525.0200.00.05"}

    pcie = gpu0.pcie
    assert (pcie.current_generation, pcie.current_width, pcie.max_generation, pcie.max_width) == (5, 16, 5, 16)
    assert pcie.device_max_generation == 5 and pcie.device_max_width is None  # NVML has no call for the latter
    assert (pcie.replay_count, pcie.replay_rollover_count) == (0, 0)
    assert pcie.error_counters == dict.fromkeys(
        ["correctable_errors", "nak_received", "receiver_errors", "bad_tlp", "nak_sent", "bad_dllp",
         "non_fatal_errors", "fatal_errors", "unsupported_requests", "lcrc_errors", "lane_errors", "l0_to_recovery"],
        0)

    assert (gpu0.ecc.enabled, gpu0.ecc.pending_enabled) == (True, True)
    assert (gpu0.ecc.volatile_uncorrected, gpu0.ecc.aggregate_corrected) == (0, 0)
    health = gpu0.memory_health
    assert (health.remapped_rows_correctable, health.remap_pending, health.remap_failure) == (0, False, False)
    assert health.remap_histogram == {"max": 2560, "high": 0, "partial": 0, "low": 0, "none": 0}
    assert health.retired_pages_single_bit is None  # Hopper remaps rows; page retirement is not supported

    assert gpu0.temperatures == {
        "gpu": TemperatureSensor(27.0, slowdown_celsius=89.0, shutdown_celsius=92.0, max_operating_celsius=87.0),
        "memory": TemperatureSensor(32.0, max_operating_celsius=95.0),
    }
    power = gpu0.power
    assert (power.draw_watts, power.limit_watts, power.default_limit_watts) == (74.312, 700.0, 700.0)
    assert (power.min_limit_watts, power.max_limit_watts, power.energy_joules) == (200.0, 700.0, 98765.432)
    clocks = gpu0.clocks
    assert (clocks.graphics_mhz, clocks.sm_mhz, clocks.memory_mhz) == (345, 345, 3201)
    assert (clocks.max_graphics_mhz, clocks.max_sm_mhz, clocks.max_memory_mhz) == (1980, 1980, 3201)
    assert (clocks.throttle_reasons, clocks.throttle_reasons_mask, clocks.performance_state) == (["gpu_idle"], 1, 0)

    assert gpu0.memory.total_bytes == 143771 * MiB
    assert (gpu0.memory.used_bytes, gpu0.memory.reserved_bytes) == (0, 553 * MiB)  # the v2 struct keeps them apart
    assert (gpu0.memory.bar1_total_bytes, gpu0.memory.bar1_used_bytes) == (262144 * MiB, 1 * MiB)
    assert (gpu0.utilization.gpu_percent, gpu0.utilization.memory_percent) == (0, 0)
    assert (gpu0.persistence_mode, gpu0.compute_mode, gpu0.mig_enabled, gpu0.mig_pending_enabled) == (
        True, "default", False, False)
    assert (gpu0.numa_node, gpu1.numa_node) == (0, 1)
    # Local CPUs come from sysfs (the collector), not from NVML: nvmlDeviceGetCpuAffinity is not asked.
    assert gpu0.cpu_affinity is None and result.lib.calls["nvmlDeviceGetCpuAffinity"] == 0
    assert gpu0.processes == []  # read, and nothing runs: an empty list, not None

    assert len(gpu0.links) == 18
    assert all(link.up and link.version == 4 and link.remote_device_type == "switch" for link in gpu0.links)
    assert [link.remote_pci_bus_id for link in gpu0.links[:4]] == [
        "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    assert gpu0.links[0].error_counters == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}

    assert result.peers == [PeerLink(0, 1, path="nvlink", p2p_read="ok", p2p_write="ok", p2p_nvlink="ok",
                                     p2p_atomics="ok", link_count=18)]
    assert gpu0.errors == [] and gpu1.errors == []


def test_close_shuts_nvml_down_and_pynvml_state_is_restored_after_the_fake(monkeypatch):
    monkeypatch.setattr(deadline, "abandoned_calls", lambda: 0)  # calls hung by other tests are not this test's
    before = (pynvml.nvmlLib, pynvml._nvmlLib_refcount)
    result = probe(FakeNode.hgx_h200(1))
    assert result.lib.shutdown_calls == 1 and result.lib.init_count == 0
    assert (pynvml.nvmlLib, pynvml._nvmlLib_refcount) == before
    assert not pynvml._nvmlGetFunctionPointer_cache


def test_every_clock_event_bit_has_a_model_name():
    names = [name for _, name in nvml_sensors.REASON_BITS]
    assert set(names) <= set(THROTTLE_REASONS)
    gpu = FakeGpu(clock_event_reasons=0x7FF)
    assert probe_one(gpu).clocks.throttle_reasons == names


def test_a_gpu_without_nvlink_is_read_in_few_calls():
    result = probe(FakeNode(gpus=[FakeGpu()]))
    calls = sum(n for (_, index), n in result.lib.device_calls.items() if index == 0)
    assert calls <= 50, result.lib.device_calls


# -- absent is None, never 0 --------------------------------------------------------------------------------------


def _device_symbols() -> set[str]:
    from tests.support.fakes.fake_nvml_lib import _SYMBOLS

    return {name for name, (_, kind) in _SYMBOLS.items() if kind == "device"}


def test_a_gpu_that_supports_nothing_reports_nothing_and_no_errors():
    gpu = FakeGpu(unsupported=_device_symbols())
    device = probe_one(gpu)

    assert device.errors == []
    assert device.pci_bus_id is None and device.uuid is None and device.name is None
    assert device.firmware_versions == {} and device.temperatures == {} and device.links == []
    assert device.pcie.current_generation is None and device.pcie.error_counters == {}
    assert device.ecc.enabled is None and device.ecc.volatile_uncorrected is None
    assert device.power.draw_watts is None and device.power.energy_joules is None
    assert device.clocks.throttle_reasons is None and device.clocks.graphics_mhz is None
    assert device.memory.total_bytes is None and device.processes is None
    assert device.mig_enabled is None and device.persistence_mode is None and device.cpu_affinity is None


def test_unsupported_fields_and_calls_are_absent_while_the_rest_is_read():
    gpu = FakeGpu(
        unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetMigMode", "nvmlDeviceGetSerial"},
        field_errors={pynvml.NVML_FI_DEV_MEMORY_TEMP: pynvml.NVML_ERROR_NOT_SUPPORTED,
                      pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS: pynvml.NVML_ERROR_NOT_SUPPORTED},
    )
    device = probe_one(gpu)

    assert device.power.draw_watts is None and device.power.limit_watts == 700.0
    assert device.mig_enabled is None and device.serial is None and device.uuid is not None
    assert device.temperatures["memory"] == TemperatureSensor(None, max_operating_celsius=95.0)
    assert "correctable_errors" not in device.pcie.error_counters and device.pcie.error_counters["bad_tlp"] == 0
    assert device.errors == []


def test_symbols_missing_from_an_older_driver_are_absent_or_use_the_older_call():
    node = FakeNode(gpus=[FakeGpu(memory_used=2048 * MiB, compute_processes=[(41, 10 * MiB)])],
                    missing_symbols={"nvmlDeviceGetGpuMaxPcieLinkGeneration",
                                     "nvmlDeviceGetCurrentClocksEventReasons",  # renamed in R535
                                     "nvmlDeviceGetMemoryInfo_v2",
                                     "nvmlDeviceGetComputeRunningProcesses_v3"})
    node.gpus[0].clock_event_reasons = 0x4
    result = probe(node)
    device = result.devices[0]

    assert device.pcie.device_max_generation is None
    assert device.clocks.throttle_reasons == ["sw_power_cap"]
    assert result.lib.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    # v1 memory info: the driver-reserved part is inside `used` and cannot be told apart
    assert (device.memory.used_bytes, device.memory.reserved_bytes) == ((2048 + 553) * MiB, None)
    assert device.processes == []  # compute list unavailable; the graphics list was read (empty)
    assert device.errors == []


def test_pre_ampere_gpu_reports_retired_pages_instead_of_row_remapping():
    result = probe(FakeNode(gpus=[FakeGpu(row_remapping=False, retired_pages=(3, 1, True))]))
    health = result.devices[0].memory_health

    assert (health.retired_pages_single_bit, health.retired_pages_double_bit, health.retired_pages_pending) == (
        3, 1, True)
    assert health.remapped_rows_correctable is None and health.remap_pending is None and health.remap_histogram == {}
    assert result.lib.calls["nvmlDeviceGetRowRemapperHistogram"] == 0  # not asked where remapping is unsupported


# -- the library and the driver -----------------------------------------------------------------------------------


def test_library_missing_is_not_found():
    with library_missing():
        backend = NvmlBackend()
        info = backend.open(CallTracker())
        backend.close()  # nothing was initialised: nothing to shut down, and no exception
    assert not info.available and info.device_count is None
    assert info.error.kind == ErrorKind.NOT_FOUND and "libnvidia-ml.so.1" in info.error.message


@pytest.mark.parametrize("code, kind, words", [
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, ErrorKind.NOT_FOUND, "nvidia kernel module is not loaded"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, ErrorKind.ERROR, "kernel/user-space driver mismatch"),
    (pynvml.NVML_ERROR_NO_PERMISSION, ErrorKind.NO_PERMISSION, "no permission"),
])
def test_init_failures_say_why(code, kind, words):
    result = probe(FakeNode(init_error=code))
    assert not result.info.available and result.devices == []
    assert result.info.error.kind == kind and words in result.info.error.message
    assert result.lib.shutdown_calls == 0


def test_an_open_that_fails_after_nvml_init_shuts_nvml_down_again():
    # The collector closes only the backends it uses, and retries a failed open later (the exporter): an open
    # that initialised NVML and then failed must not leave one more NVML init behind each time.
    node = FakeNode.hgx_h200(2, missing_symbols={"nvmlDeviceGetCount_v2"})
    with installed(node) as lib:
        info = NvmlBackend().open(CallTracker())
        assert not info.available and "device count" in info.error.message
        assert lib.init_count == 0 and lib.shutdown_calls == 1


# -- lost and hung GPUs -------------------------------------------------------------------------------------------


def test_lost_gpu_raises_device_lost_and_the_other_gpu_is_probed():
    node = FakeNode.hgx_h200(2)
    node.gpus[1].lost = True
    with installed(node):
        backend = NvmlBackend()
        backend.open(CallTracker())
        healthy = backend.probe_device(0, CallTracker())
        with pytest.raises(DeviceLost, match="NVML_ERROR_GPU_IS_LOST"):
            backend.probe_device(1, CallTracker())
        peers = backend.probe_peers([healthy], CallTracker())
    assert healthy.reachable and healthy.errors == [] and healthy.power.draw_watts == 74.312
    assert peers == []


def test_gpu_lost_mid_probe_leaves_its_identity_in_the_tracker():
    node = FakeNode(gpus=[FakeGpu(lose_after_calls=10)])
    tracker = CallTracker()
    with installed(node):
        backend = NvmlBackend()
        backend.open(CallTracker())
        with pytest.raises(DeviceLost):
            backend.probe_device(0, tracker)
    assert tracker.partial.uuid == node.gpus[0].uuid and tracker.partial.pci_bus_id == "0000:19:00.0"


def test_unknown_error_after_a_loss_still_means_lost():
    node = FakeNode(gpus=[FakeGpu(lost=True, unknown_after_lost=True), FakeGpu(bus_id="00000000:3B:00.0")])
    node.gpus[1].failures = {"nvmlDeviceGetVbiosVersion": pynvml.NVML_ERROR_UNKNOWN}
    with installed(node):
        backend = NvmlBackend()
        backend.open(CallTracker())
        with pytest.raises(DeviceLost, match="GPU_IS_LOST"):
            backend.probe_device(0, CallTracker())
        with pytest.raises(DeviceLost, match="NVML_ERROR_UNKNOWN"):  # the next collection (exporter)
            backend.probe_device(0, CallTracker())
        never_lost = backend.probe_device(1, CallTracker())
    # On a GPU never lost, UNKNOWN is just an error on that one value.
    assert never_lost.reachable and never_lost.vbios_version is None
    assert [e.kind for e in never_lost.errors] == [ErrorKind.ERROR]


def test_device_handle_refused_makes_the_device_unreachable():
    node = FakeNode(gpus=[FakeGpu(failures={"nvmlDeviceGetHandleByIndex_v2": pynvml.NVML_ERROR_NO_PERMISSION})])
    device = probe(node).devices[0]
    assert not device.reachable
    assert [(e.source, e.kind) for e in device.errors] == [("nvml.nvmlDeviceGetHandleByIndex", ErrorKind.NO_PERMISSION)]


def test_hung_call_is_bounded_named_and_does_not_stop_the_other_gpu():
    node = FakeNode.hgx_h200(2)
    node.gpus[1].hang = "nvmlDeviceGetPowerUsage"
    with installed(node) as lib:
        backend = NvmlBackend()
        backend.open(CallTracker())
        outcomes = deadline.run_all({i: (lambda t, i=i: backend.probe_device(i, t)) for i in (0, 1)},
                                    timeout_seconds=0.5)
        healthy, hung = outcomes[0], outcomes[1]
        assert healthy.done and healthy.error is None
        assert healthy.value.power.draw_watts == 74.312 and len(healthy.value.links) == 18
        assert not hung.done and hung.tracker.current == "nvml.nvmlDeviceGetPowerUsage"
        assert hung.tracker.partial.uuid == node.gpus[1].uuid  # identity read before the hang
        backend.close()
        assert lib.shutdown_calls == 0  # NVML is not shut down under a hung call
        node.release.set()
        hung.thread.join(5)
        assert not hung.thread.is_alive()


def test_throttle_times_come_in_seconds_from_the_field_batch_without_extra_calls():
    result = probe(FakeNode.hgx_h200(1))  # driver 550: the perf-policy fields only
    seconds = result.devices[0].clocks.throttle_seconds
    assert seconds == {"sw_power_cap": 0.0, "thermal": 0.0, "sync_boost": 0.0, "board_limit": 0.0,
                       "low_utilization": 23.678421568, "reliability": 0.0,
                       "below_application_clocks": 14.276011904, "below_base_clocks": 14.276011904}
    assert result.lib.calls["nvmlDeviceGetViolationStatus"] == 0
    assert result.lib.calls["nvmlDeviceGetFieldValues"] == 1


def test_clock_event_times_by_their_r580_ids_only_on_r580_drivers():
    node = FakeNode.hgx_h200(1)
    node.driver_version = "580.159.04"
    node.gpus[0].throttle_ns.update({269: 2_500_000_000, 270: 0, 271: 750_000_000})
    seconds = probe(node).devices[0].clocks.throttle_seconds
    assert (seconds["sw_thermal_slowdown"], seconds["hw_thermal_slowdown"], seconds["hw_power_brake"]) == (
        2.5, 0.0, 0.75)
    node.driver_version = "570.86.15"  # 269-271 are power-smoothing fields in that driver's numbering
    assert "hw_power_brake" not in probe(node).devices[0].clocks.throttle_seconds


def test_a_throttle_counter_the_gpu_lacks_is_absent_not_zero():
    gpu = FakeGpu()
    del gpu.throttle_ns[77]
    gpu.field_errors[79] = pynvml.NVML_ERROR_NOT_SUPPORTED
    seconds = probe_one(gpu).clocks.throttle_seconds
    assert "board_limit" not in seconds and "reliability" not in seconds and seconds["sw_power_cap"] == 0.0


def test_the_recorded_h200_answers_convert_to_the_seconds_nvidia_smi_shows():
    # What the lab's H200 (driver 580.159.04) answered: the field batch (ID, nvmlReturn, valueType, value) and the
    # per-policy violation status. Both count the same time in ns; the field values are the driver's periodic
    # sample, so they trail the call by a few tens of ms.
    survey = json.loads((FIXTURES / "h200/nvml-health-survey.json").read_text())["devices"][0]
    recorded = {fid: value for fid, code, _, value in survey["fields_health"]["value"]
                if code == 0 and (74 <= fid <= 81 or 269 <= fid <= 271)}
    node = FakeNode.hgx_h200(1)
    node.driver_version = "580.159.04"
    node.gpus[0].throttle_ns = recorded
    seconds = probe(node).devices[0].clocks.throttle_seconds
    assert set(seconds) <= set(THROTTLE_TIME_REASONS) and len(seconds) == 11
    assert seconds["hw_thermal_slowdown"] == seconds["sw_power_cap"] == 0.0  # nvidia-smi -q: "0 us"
    by_call = survey["violation_4"]["value"]["violationTime"] / 1e9  # NVML_PERF_POLICY_LOW_UTILIZATION
    assert seconds["low_utilization"] == pytest.approx(by_call, abs=0.5)
