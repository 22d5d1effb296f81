"""Hardware faults and failing NVML calls as NvmlBackend reports them (over the fake libnvidia-ml)."""

from __future__ import annotations


import pynvml
import pytest

from gpudiag.model import ErrorKind, GpuProcess
from tests.support.fakes.fake_nvml import MiB, FakeGpu
from tests.support.probe_nvml import probe_one


# -- faults -------------------------------------------------------------------------------------------------------


def test_downtrained_pcie_link_shows_current_below_max():
    device = probe_one(FakeGpu(pcie_replays=37).pcie_downtrained(generation=3, width=8))
    assert (device.pcie.current_generation, device.pcie.current_width) == (3, 8)
    assert (device.pcie.max_generation, device.pcie.max_width) == (5, 16)
    assert device.pcie.replay_count == 37


def test_pcie_error_counters_land_by_name():
    gpu = FakeGpu(pcie_counters={pynvml.NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR: 2,
                                 pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_TLP: 11})
    counters = probe_one(gpu).pcie.error_counters
    assert (counters["fatal_errors"], counters["bad_tlp"], counters["receiver_errors"]) == (2, 11, 0)


def test_uncorrected_ecc_errors_are_reported_per_scope():
    gpu = FakeGpu(ecc_volatile_corrected=12, ecc_volatile_uncorrected=1, ecc_aggregate_corrected=5000,
                  ecc_aggregate_uncorrected=4, ecc_pending=False)
    ecc = probe_one(gpu).ecc
    assert (ecc.volatile_corrected, ecc.volatile_uncorrected) == (12, 1)
    assert (ecc.aggregate_corrected, ecc.aggregate_uncorrected) == (5000, 4)
    assert (ecc.enabled, ecc.pending_enabled) == (True, False)


def test_pending_row_remap_and_remap_failure():
    gpu = FakeGpu(remapped_uncorrectable=2, remapped_correctable=1, remap_pending=True, remap_failure=True,
                  remap_histogram=(2550, 3, 1, 0, 1))
    health = probe_one(gpu).memory_health
    assert (health.remapped_rows_correctable, health.remapped_rows_uncorrectable) == (1, 2)
    assert (health.remap_pending, health.remap_failure) == (True, True)
    assert health.remap_histogram == {"max": 2550, "high": 3, "partial": 1, "low": 0, "none": 1}


def test_thermal_slowdown():
    device = probe_one(FakeGpu().thermal_slowdown())
    gpu = device.temperatures["gpu"]
    assert gpu.current_celsius == 91.0 and gpu.current_celsius > gpu.slowdown_celsius
    assert device.temperatures["memory"].current_celsius == 94.0
    assert device.clocks.throttle_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert device.clocks.throttle_reasons_mask == 0x48 and device.clocks.graphics_mhz == 1110


def test_power_brake():
    clocks = probe_one(FakeGpu().power_brake()).clocks
    assert clocks.throttle_reasons == ["hw_slowdown", "hw_power_brake"]


@pytest.mark.parametrize("code, kind", [
    (pynvml.NVML_ERROR_NO_PERMISSION, ErrorKind.NO_PERMISSION),
    (pynvml.NVML_ERROR_TIMEOUT, ErrorKind.TIMEOUT),
    (pynvml.NVML_ERROR_UNKNOWN, ErrorKind.ERROR),
])
def test_a_failing_call_is_a_probe_error_and_its_value_none(code, kind):
    device = probe_one(FakeGpu(failures={"nvmlDeviceGetPowerUsage": code}))
    assert device.power.draw_watts is None and device.power.limit_watts == 700.0
    assert [(e.source, e.kind) for e in device.errors] == [("nvml.nvmlDeviceGetPowerUsage", kind)]


def test_corrupted_inforom_is_reported():
    device = probe_one(FakeGpu(failures={"nvmlDeviceGetInforomImageVersion": pynvml.NVML_ERROR_CORRUPTED_INFOROM}))
    assert "inforom_image" not in device.firmware_versions
    assert len(device.errors) == 1 and "NVML_ERROR_CORRUPTED_INFOROM" in device.errors[0].message


def test_one_failing_field_in_the_batch_spoils_only_itself():
    gpu = FakeGpu(ecc_volatile_corrected=3,
                  field_errors={pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: pynvml.NVML_ERROR_NO_PERMISSION})
    device = probe_one(gpu)
    assert device.ecc.volatile_uncorrected is None and device.ecc.volatile_corrected == 3
    assert [(e.source, e.kind) for e in device.errors] == [
        ("nvml.nvmlDeviceGetFieldValues[NVML_FI_DEV_ECC_DBE_VOL_TOTAL]", ErrorKind.NO_PERMISSION)]


def test_processes_are_listed_with_their_memory():
    gpu = FakeGpu(compute_processes=[(1234, 512 * MiB), (5678, None)], graphics_processes=[(4321, 64 * MiB)])
    assert probe_one(gpu).processes == [
        GpuProcess(pid=1234, kind="compute", used_memory_bytes=512 * MiB),
        GpuProcess(pid=5678, kind="compute", used_memory_bytes=None),  # NVML_VALUE_NOT_AVAILABLE
        GpuProcess(pid=4321, kind="graphics", used_memory_bytes=64 * MiB),
    ]


def test_no_numa_affinity_is_none():
    assert probe_one(FakeGpu(numa_node=-1)).numa_node is None
