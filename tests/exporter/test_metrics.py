"""The metric families built from a snapshot and check results: names, labels, units, and what is left out."""

from __future__ import annotations

import re

import pytest

from gpudiag.exporter import catalog
from gpudiag.exporter.textfile import render_textfile
from gpudiag.model import CheckResult, DeviceRef, ErrorKind, ProbeError, Status
from tests.support.exporter import names, parse, series, value
from tests.support.snapshots import amd_mi300x_node, cpx_partitioned, nvidia_h200_node

GPU0 = {"gpu": "0", "uuid": "GPU-5c1e2f3a-0000-4000-8000-000000000000", "pci_bus_id": "0000:19:00.0"}


def render(snapshot, results=()):
    return render_textfile(snapshot, list(results), finished_at=1_800_000_000.0)


def test_catalog_follows_the_naming_rules():
    specs = catalog.all_metrics()
    assert len(specs) > 40
    for name, spec in specs.items():
        assert re.fullmatch(r"gpudiag_[a-z0-9_]+", name), name
        assert (spec.kind == "counter") == name.endswith("_total"), name
        assert len(set(spec.labels)) == len(spec.labels), name
        identity = {"model", "serial", "vbios_version"} & set(spec.labels)
        # identity only on the info series (value 1): the GPU's, and the NIC's (exporter/metrics_network.py)
        assert not identity or name in ("gpudiag_gpu_info", "gpudiag_nic_info"), f"{name} carries identity {identity}"
        if "driver_version" in spec.labels:  # versions only on info series (value 1), never on measurements
            assert name.endswith("_info"), name
        if name.startswith("gpudiag_gpu_"):
            assert spec.labels[:3] == ("gpu", "uuid", "pci_bus_id"), name


def test_every_rendered_sample_is_in_the_catalog_with_its_labels():
    specs = catalog.all_metrics()
    for snapshot in (nvidia_h200_node(), cpx_partitioned(amd_mi300x_node())):
        for name, labels, _ in parse(render(snapshot)):
            if name.startswith("gpudiag_"):
                assert set(labels) == set(specs[name].labels), (name, labels)


def test_h200_values_in_base_units():
    text = render(nvidia_h200_node())
    assert value(text, "gpudiag_gpu_temperature_celsius", sensor="gpu", **GPU0) == 47.0
    assert value(text, "gpudiag_gpu_temperature_threshold_celsius", sensor="gpu", threshold="slowdown", **GPU0) == 90.0
    assert value(text, "gpudiag_gpu_power_watts", **GPU0) == pytest.approx(585.4)
    assert value(text, "gpudiag_gpu_power_limit_watts", **GPU0) == 700.0
    assert value(text, "gpudiag_gpu_energy_joules_total", **GPU0) == 9.1e8
    assert value(text, "gpudiag_gpu_clock_hertz", clock="sm", **GPU0) == 1980e6
    assert value(text, "gpudiag_gpu_utilization_ratio", engine="gpu", **GPU0) == pytest.approx(0.97)
    assert value(text, "gpudiag_gpu_pcie_link_generation", kind="current", **GPU0) == 5
    assert value(text, "gpudiag_gpu_pcie_link_width_lanes", kind="max", **GPU0) == 16
    assert value(text, "gpudiag_gpu_ecc_errors_total", severity="corrected", scope="aggregate", **GPU0) == 3
    assert value(text, "gpudiag_gpu_row_remap_banks", availability="max", **GPU0) == 640
    assert value(text, "gpudiag_gpu_link_up", link="17", kind="nvlink", **GPU0) == 1
    assert value(text, "gpudiag_gpu_link_errors_total", link="0", kind="nvlink", counter="crc_flit", **GPU0) == 0
    assert value(text, "gpudiag_device_up", **GPU0) == 1
    assert value(text, "gpudiag_backend_up", backend="amdsmi", vendor="amd") == 0
    assert value(text, "gpudiag_last_collection_timestamp_seconds") == 1_800_000_000.0


def test_identity_only_on_gpu_info():
    text = render(nvidia_h200_node())
    (labels, one), _ = series(text, "gpudiag_gpu_info")
    assert one == 1
    assert labels == {**GPU0, "vendor": "nvidia", "model": "NVIDIA H200", "serial": "1650924000000",
                      "vbios_version": "96.00.9F.00.01", "driver_version": "560.35.03"}


def test_unsupported_values_produce_no_series_not_zero():
    snapshot = nvidia_h200_node()
    gpu = snapshot.devices[0]
    gpu.power.draw_watts = None
    gpu.temperatures["memory"].current_celsius = None
    gpu.ecc.aggregate_corrected = None
    gpu.clocks.throttle_reasons = None
    gpu.links[3].up = None
    text = render(snapshot)
    assert value(text, "gpudiag_gpu_power_watts", **GPU0) is None
    assert value(text, "gpudiag_gpu_temperature_celsius", sensor="memory", **GPU0) is None
    assert value(text, "gpudiag_gpu_ecc_errors_total", severity="corrected", scope="aggregate", **GPU0) is None
    assert series(text, "gpudiag_gpu_throttle_reason_active", **GPU0) == []
    assert value(text, "gpudiag_gpu_link_up", link="3", **GPU0) is None
    # the other GPU, fully supported, still has them all
    assert value(text, "gpudiag_gpu_power_watts", gpu="1") is not None
    assert len(series(text, "gpudiag_gpu_throttle_reason_active", gpu="1")) == 11  # every NVIDIA reason bit
    # H200s have no AMD bad-page accounting: no series at all, not a row of zeros
    assert "gpudiag_gpu_bad_pages" not in names(text)


def test_throttle_reasons_one_series_per_reason_of_the_vendor():
    snapshot = nvidia_h200_node()
    snapshot.devices[0].clocks.throttle_reasons = ["hw_thermal_slowdown", "hw_slowdown"]
    text = render(snapshot)
    active = {labels["reason"]: v for labels, v in series(text, "gpudiag_gpu_throttle_reason_active", **GPU0)}
    assert active["hw_thermal_slowdown"] == 1 and active["hw_slowdown"] == 1
    assert active["sw_power_cap"] == 0 and active["gpu_idle"] == 0
    assert "prochot" not in active  # an AMD reason is not reported as "inactive" on an NVIDIA GPU
    amd = render(amd_mi300x_node())
    assert {labels["reason"] for labels, _ in series(amd, "gpudiag_gpu_throttle_reason_active", gpu="0")} == {
        "ppt_power", "socket_thermal", "prochot", "vr_thermal", "hbm_thermal"}


def test_unreachable_gpu_keeps_identity_and_up_0_but_no_measurements():
    snapshot = nvidia_h200_node()
    hung = snapshot.devices[1]
    hung.reachable = False
    hung.errors.append(ProbeError("nvml.device", ErrorKind.TIMEOUT, "no answer within the deadline"))
    text = render(snapshot)
    assert value(text, "gpudiag_device_up", gpu="1") == 0
    assert value(text, "gpudiag_gpu_info", gpu="1") == 1
    assert value(text, "gpudiag_probe_errors", gpu="1", kind="timeout") == 1
    for name in ("gpudiag_gpu_temperature_celsius", "gpudiag_gpu_power_watts", "gpudiag_gpu_link_up"):
        assert series(text, name, gpu="1") == [], name
        assert series(text, name, gpu="0"), name
    # AER is read by the host from sysfs, not from the hung vendor library: still current
    assert series(text, "gpudiag_gpu_pcie_aer_errors_total", gpu="1")


def test_gpu_on_the_bus_that_no_library_lists_is_down():
    snapshot = nvidia_h200_node()
    snapshot.devices = snapshot.devices[:1]  # GPU 1 dropped out of NVML's list, still on the PCI bus
    text = render(snapshot)
    assert value(text, "gpudiag_device_up", pci_bus_id="0000:3b:00.0") == 0
    assert series(text, "gpudiag_device_up", pci_bus_id="0000:3b:00.0")[0][0] == {
        "gpu": "", "uuid": "", "pci_bus_id": "0000:3b:00.0"}
    assert value(text, "gpudiag_device_up", **GPU0) == 1
    assert series(text, "gpudiag_gpu_info", pci_bus_id="0000:3b:00.0") == []


def test_aer_counters_without_the_totals_line():
    snapshot = nvidia_h200_node()
    snapshot.pci_gpus[0].aer["correctable"].update({"Receiver Error": 7, "TOTAL_ERR_COR": 7})
    text = render(snapshot)
    assert value(text, "gpudiag_gpu_pcie_aer_errors_total", severity="correctable", error="Receiver Error",
                 **GPU0) == 7
    assert not any(labels["error"].startswith("TOTAL") for labels, _ in
                   series(text, "gpudiag_gpu_pcie_aer_errors_total"))


def test_cpx_partitions_are_up_and_their_physical_function_is_not_reported_missing():
    snapshot = cpx_partitioned(amd_mi300x_node())
    text = render(snapshot)
    up = series(text, "gpudiag_device_up")
    assert len(up) == 64 and all(v == 1 for _, v in up)
    assert len({(labels["gpu"], labels["pci_bus_id"]) for labels, _ in up}) == 64


def test_check_ok_is_the_worst_result_per_check_and_gpu():
    snapshot = nvidia_h200_node()
    ref0, ref1 = (DeviceRef.of(d) for d in snapshot.devices)
    results = [
        CheckResult("topology.nvlink", Status.PASS, "link 0 up", ref0),
        CheckResult("topology.nvlink", Status.FAIL, "link 3 down", ref0),
        CheckResult("topology.nvlink", Status.WARN, "link 4 degraded", ref1),
        CheckResult("ecc.uncorrected", Status.UNKNOWN, "could not read", ref1),
        CheckResult("driver.loaded", Status.SKIP, "n/a"),
        CheckResult("host.iommu", Status.PASS, "ok"),
    ]
    text = render(snapshot, results)
    assert value(text, "gpudiag_check_ok", check="topology.nvlink", gpu="0") == 0
    assert value(text, "gpudiag_check_ok", check="topology.nvlink", gpu="1") == 1
    assert value(text, "gpudiag_check_ok", check="ecc.uncorrected", gpu="1") == 0  # unknown is not ok
    assert value(text, "gpudiag_check_ok", check="driver.loaded", gpu="") == 1
    assert len(series(text, "gpudiag_check_ok")) == 5
    # gpudiag_check_status, the state set of the same worst status, tells warn, skip and unknown from pass
    current = {(labels["check"], labels["gpu"], labels["uuid"], labels["status"])
               for labels, v in series(text, "gpudiag_check_status") if v == 1}
    assert current == {("topology.nvlink", "0", ref0.uuid, "fail"), ("topology.nvlink", "1", ref1.uuid, "warn"),
                       ("ecc.uncorrected", "1", ref1.uuid, "unknown"), ("driver.loaded", "", "", "skip"),
                       ("host.iommu", "", "", "pass")}
    assert len(series(text, "gpudiag_check_status")) == 5 * 5  # every status of each, the others at 0


def test_check_status_is_kept_per_what_a_node_level_result_is_about():
    """Issue 33 item 8 / issue 36 item 2: a node-level result about a GPU on the bus that no library lists carries
    its bus ID (the alert names it, not "GPU  ()"); one about a NIC port is the node's in gpudiag_check_status (a NIC's
    bus ID is no GPU's) and named in gpudiag_nic_check_status, each port its own series."""
    snapshot = nvidia_h200_node()
    nic = {"nic": "mlx5_4", "pci_bus_id": "0000:3b:00.0", "model": "ConnectX-7", "port": 1}
    results = [
        CheckResult("kernel_log.xid", Status.FAIL, "GPU at 0000:9a:00.0 (not in the inventory): Xid 79",
                    observed={"pci_bus_id": "0000:9a:00.0", "events": 1}),
        CheckResult("kernel_log.xid", Status.PASS, "no Xid"),
        CheckResult("network.nics", Status.FAIL, "mlx5_4 (0000:3b:00.0) port 1 is disabled", observed=nic),
        CheckResult("network.nics", Status.PASS, "mlx5_5 (0000:5c:00.0) port 1: ACTIVE",
                    observed={**nic, "nic": "mlx5_5", "pci_bus_id": "0000:5c:00.0"}),
    ]
    text = render(snapshot, results)
    current = {(labels["check"], labels["gpu"], labels["pci_bus_id"], labels["status"])
               for labels, v in series(text, "gpudiag_check_status") if v == 1}
    assert current == {("kernel_log.xid", "", "0000:9a:00.0", "fail"), ("kernel_log.xid", "", "", "pass"),
                       ("network.nics", "", "", "fail")}
    named = {(labels["nic"], labels["pci_bus_id"], labels["port"], labels["status"])
             for labels, v in series(text, "gpudiag_nic_check_status") if v == 1}
    assert named == {("mlx5_4", "0000:3b:00.0", "1", "fail"), ("mlx5_5", "0000:5c:00.0", "1", "pass")}


def test_collector_runs_and_kernel_log_readability():
    from gpudiag.model import CollectorRun

    snapshot = nvidia_h200_node()
    snapshot.collectors = [CollectorRun("host", True, 0.01), CollectorRun("kernel_log", False, 0.2, "EPERM")]
    snapshot.kernel_log.readable = False
    text = render(snapshot)
    assert value(text, "gpudiag_collector_success", collector="kernel_log") == 0
    assert value(text, "gpudiag_collector_duration_seconds", collector="host") == 0.01
    assert value(text, "gpudiag_kernel_log_readable") == 0


def test_probe_errors_count_node_and_device_errors_by_kind():
    snapshot = nvidia_h200_node()
    snapshot.errors.append(ProbeError("sysfs:/sys/bus/pci", ErrorKind.NO_PERMISSION, "EACCES"))
    snapshot.devices[0].errors += [ProbeError("nvml.a", ErrorKind.ERROR, "x"), ProbeError("nvml.b", ErrorKind.ERROR, "y")]
    text = render(snapshot)
    assert value(text, "gpudiag_probe_errors", gpu="", kind="no_permission") == 1
    assert value(text, "gpudiag_probe_errors", kind="error", **GPU0) == 2


def test_label_values_are_escaped():
    snapshot = nvidia_h200_node()
    snapshot.devices[0].name = 'Weird "GPU"\\\nname'
    text = render(snapshot)
    assert series(text, "gpudiag_gpu_info", gpu="0")[0][0]["model"] == 'Weird "GPU"\\\nname'


def test_node_with_no_gpu_at_all_still_renders_self_health():
    from gpudiag.model import NodeSnapshot

    text = render(NodeSnapshot())
    assert value(text, "gpudiag_build_info", version=__import__("gpudiag").__version__) == 1
    assert not any(name.startswith("gpudiag_gpu_") for name in names(text))


def test_amd_only_series():
    snapshot = amd_mi300x_node()
    snapshot.devices[0].xgmi_error_status = "error"
    text = render(snapshot)
    assert {labels["state"]: v for labels, v in series(text, "gpudiag_gpu_xgmi_error_state", gpu="0")} == {
        "no_errors": 0, "error": 1, "multiple_errors": 0}
    amd0 = {"gpu": "0", "pci_bus_id": "0000:05:00.0"}
    assert value(text, "gpudiag_gpu_bad_pages_threshold", **amd0) == 128
    assert value(text, "gpudiag_gpu_bad_pages", state="reserved", **amd0) == 0
    assert value(text, "gpudiag_gpu_ecc_deferred_errors_total", **amd0) == 0
    assert value(text, "gpudiag_gpu_ecc_block_errors_total", block="umc", severity="uncorrected", **amd0) == 0
    assert value(text, "gpudiag_gpu_link_up", link="6", kind="xgmi", **amd0) == 1
    assert value(text, "gpudiag_gpu_ecc_enabled", mode="pending", **amd0) is None  # NVIDIA-only notion



def test_sample_values_round_trip_through_the_prometheus_parser():
    from gpudiag.exporter.families import FamilySet

    fs = FamilySet()
    spec = catalog.POWER
    inputs = [True, 0, 7, 585.4, 9.1e8, 1e20, 2.5e-7, 1.7960375145220861e9, float("inf")]
    for index, number in enumerate(inputs):
        fs.add(spec, (str(index), "", ""), number)
    parsed = [v for _, v in series(fs.exposition().decode(), "gpudiag_gpu_power_watts")]
    assert parsed == [float(n) for n in inputs]


def _throttle_counters(snapshot):
    nvidia = snapshot.devices[0].clocks
    nvidia.throttle_seconds = {"sw_power_cap": 12.5, "hw_thermal_slowdown": 0.0, "below_base_clocks": 3.25}
    return snapshot


def test_throttle_times_are_counters_in_seconds_by_reason_and_absent_when_not_reported():
    text = render(_throttle_counters(nvidia_h200_node()))
    assert value(text, "gpudiag_gpu_throttle_seconds_total", reason="sw_power_cap", **GPU0) == 12.5
    assert value(text, "gpudiag_gpu_throttle_seconds_total", reason="hw_thermal_slowdown", **GPU0) == 0.0
    assert {labels["reason"] for labels, _ in series(text, "gpudiag_gpu_throttle_seconds_total", **GPU0)} == {
        "sw_power_cap", "hw_thermal_slowdown", "below_base_clocks"}  # no 0-filled reasons
    assert series(text, "gpudiag_gpu_throttle_seconds_total", gpu="1") == []  # GPU 1 reports none
    assert "# TYPE gpudiag_gpu_throttle_seconds_total counter" in text


def test_amd_residency_ticks_come_with_their_accumulation_counter():
    snapshot = amd_mi300x_node()
    clocks = snapshot.devices[0].clocks
    clocks.throttle_accumulation, clocks.throttle_residency = 764_653, {"ppt_power": 1_204, "socket_thermal": 0}
    snapshot.devices[1].clocks.throttle_residency = {"ppt_power": 5}  # no denominator: meaningless, left out
    text = render(snapshot)
    assert value(text, "gpudiag_gpu_throttle_accumulation_total", gpu="0") == 764_653
    assert value(text, "gpudiag_gpu_throttle_residency_total", gpu="0", reason="ppt_power") == 1_204
    assert series(text, "gpudiag_gpu_throttle_residency_total", gpu="1") == []
    assert series(text, "gpudiag_gpu_throttle_seconds_total") == []  # ticks are never passed off as seconds
