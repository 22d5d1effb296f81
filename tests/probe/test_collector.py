"""The collector over the real pynvml and a fake NVML library: deadlines, lost and hung GPUs, reopening a driver
that appears later, and what it derives from sysfs."""

from __future__ import annotations

import time

import pynvml
import pytest

from gpudiag.probe import collector as probe
from gpudiag.checks import run_checks
from gpudiag.model import DeviceSnapshot, ErrorKind, PciGpu, Status, Vendor
from gpudiag.probe.collector import CollectOptions, Collector, collect
from gpudiag.probe.standins import place_unidentified
from tests.support.fakes.fake_nvml import FakeNode, installed, library_missing
from tests.support.nvidia_node import sysfs_for


@pytest.fixture
def node():
    return FakeNode.hgx_h200(2)


def options(tmp_path, node, timeout=5.0):
    sysfs_for(node, tmp_path)
    return CollectOptions(root=tmp_path, timeout_seconds=timeout)


def results_for(snapshot, check_id, index=None):
    return [r for r in run_checks(snapshot, only=[check_id]) if index is None or (r.device and r.device.index == index)]


def test_healthy_node_is_collected_in_full(tmp_path, node):
    with installed(node):
        snapshot = collect(options(tmp_path, node))
    assert [d.pci_bus_id for d in snapshot.devices] == ["0000:19:00.0", "0000:3b:00.0"]
    assert all(d.reachable and not d.errors for d in snapshot.devices)
    assert [p.pci_bus_id for p in snapshot.pci_gpus] == ["0000:19:00.0", "0000:3b:00.0"]
    assert snapshot.backend("nvml").available and snapshot.backend("nvml").driver_version == node.driver_version
    assert len(snapshot.peers) == 1 and snapshot.peers[0].path == "nvlink"
    assert snapshot.kernel_log.readable and snapshot.kernel_log.lines_scanned == 1
    assert {c.name for c in snapshot.collectors} >= {"host", "open:nvml", "nvml", "peers:nvml", "kernel_log"}
    assert all(c.success for c in snapshot.collectors)


def test_local_cpus_come_from_sysfs_local_cpulist(tmp_path, node):
    with installed(node):
        snapshot = collect(options(tmp_path, node))
    assert snapshot.devices[0].cpu_affinity == list(range(0, 32))
    assert snapshot.devices[1].cpu_affinity == list(range(32, 64))


def test_a_hung_call_leaves_that_gpu_unknown_and_the_rest_reported_within_the_deadline(tmp_path, node):
    node.gpus[1].hang = "nvmlDeviceGetPowerUsage"
    with installed(node):
        started = time.monotonic()
        snapshot = collect(options(tmp_path, node, timeout=1.0))
        elapsed = time.monotonic() - started
    assert elapsed < 2.0
    healthy, hung = snapshot.devices
    assert healthy.reachable and healthy.power.draw_watts is not None and len(healthy.links) == 18
    assert not hung.reachable
    assert hung.pci_bus_id == "0000:3b:00.0"  # identity read before the hang is kept
    (error,) = hung.errors
    assert error.kind is ErrorKind.TIMEOUT and "nvmlDeviceGetPowerUsage" in error.message
    nvml_run = next(c for c in snapshot.collectors if c.name == "nvml")
    assert not nvml_run.success and "nvmlDeviceGetPowerUsage" in nvml_run.error
    # The checklist says so: the GPU is not answering (fail), its per-device checks are unknown, never pass.
    (visible,) = [r for r in results_for(snapshot, "inventory.gpus_visible") if r.status is Status.FAIL]
    assert "0000:3b:00.0" in visible.message
    assert [r.status for r in results_for(snapshot, "thermal.temperature", index=1)] == [Status.UNKNOWN]


def test_a_reused_collector_does_not_pile_threads_onto_a_still_hung_gpu(tmp_path, node):
    node.gpus[1].hang = "nvmlDeviceGetPowerUsage"
    with installed(node) as lib, Collector(options(tmp_path, node, timeout=0.5)) as collector:
        collector.collect()
        second = collector.collect()
        hung_calls = lib.device_calls[("nvmlDeviceGetPowerUsage", 1)]
    assert hung_calls == 1  # the second collection did not call into the hung GPU again
    assert not second.devices[1].reachable
    assert "still hung" in second.devices[1].errors[0].message
    assert second.devices[0].reachable


def test_a_lost_gpu_is_reported_lost_with_its_identity(tmp_path, node):
    node.gpus[0].lose_after_calls = 3
    with installed(node):
        snapshot = collect(options(tmp_path, node))
    lost = snapshot.devices[0]
    assert not lost.reachable and lost.pci_bus_id == "0000:19:00.0"
    assert lost.errors[-1].kind is ErrorKind.GPU_LOST
    assert snapshot.devices[1].reachable
    assert any(r.status is Status.FAIL for r in results_for(snapshot, "inventory.gpus_visible"))


def test_a_gpu_lost_before_its_bus_id_was_read_is_the_gpu_on_the_bus_no_device_claims(tmp_path):
    """Issue 23: NVML answers GPU_IS_LOST even for the bus ID, the kernel still lists the function; the node used to
    show "GPU 1 (unknown bus)" and an anonymous GPU at 0000:3b:00.0, each half of one fault."""
    node = FakeNode.hgx_h200(4)
    node.gpus[1].lost = True
    with installed(node):
        snapshot = collect(options(tmp_path, node))
    assert [(d.index, d.pci_bus_id, d.reachable) for d in snapshot.devices] == [
        (0, "0000:19:00.0", True), (1, "0000:3b:00.0", False), (2, "0000:4c:00.0", True), (3, "0000:5d:00.0", True)]
    (visible,) = [r for r in results_for(snapshot, "inventory.gpus_visible") if r.status is Status.FAIL]
    assert visible.device.index == 1 and "GPU 1 (0000:3b:00.0)" in visible.message


def _pci(bus_id, vendor=Vendor.NVIDIA):
    return PciGpu(pci_bus_id=bus_id, vendor=vendor, vendor_id="0x10de", device_id="0x2335", class_code="0x030200")


def _device(index, bus_id=None):
    return DeviceSnapshot(
        index=index, vendor=Vendor.NVIDIA, source="nvml", pci_bus_id=bus_id, reachable=bus_id is not None
    )


@pytest.mark.parametrize("known, buses, expected", [
    # two lost GPUs, the identified ones in bus order: paired in order
    ({0: "0000:19:00.0", 2: "0000:4c:00.0"}, ["0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0"],
     {1: "0000:3b:00.0", 3: "0000:5d:00.0"}),
    # the node's indices are not in bus order: several are not guessed
    ({0: "0000:4c:00.0", 2: "0000:19:00.0"}, ["0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0"],
     {1: None, 3: None}),
    # one lost GPU: by elimination, whatever the order
    ({0: "0000:4c:00.0", 2: "0000:19:00.0"}, ["0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0"], {1: "0000:3b:00.0"}),
    # more unclaimed functions than unidentified devices: nothing to eliminate
    ({0: "0000:19:00.0"}, ["0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0"], {1: None}),
])
def test_unidentified_devices_are_placed_only_where_the_node_allows_no_other_reading(known, buses, expected):
    devices = [_device(i, known.get(i)) for i in sorted({*known, *expected})]
    pci = [_pci(b) for b in buses] + [_pci("0000:85:00.0", Vendor.AMD)]  # another vendor's GPU is never a candidate
    place_unidentified(devices, pci)
    assert {d.index: d.pci_bus_id for d in devices if d.index in expected} == expected


def test_library_missing_with_gpus_on_the_bus_fails_the_driver_check(tmp_path, node):
    with library_missing():
        snapshot = collect(options(tmp_path, node))
    info = snapshot.backend("nvml")
    assert info is not None and not info.available and info.error.kind is ErrorKind.NOT_FOUND
    assert snapshot.devices == []
    assert [r.status for r in results_for(snapshot, "driver.library")] == [Status.FAIL]


def test_a_driver_loaded_after_start_is_picked_up_after_the_backoff(tmp_path, node, monkeypatch):
    monkeypatch.setattr(probe, "REOPEN_BACKOFF_SECONDS", 0.0)
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with installed(node), Collector(options(tmp_path, node)) as collector:
        first = collector.collect()
        node.init_error = pynvml.NVML_SUCCESS  # modprobe nvidia
        second = collector.collect()
    assert not first.backend("nvml").available and first.devices == []
    assert "not loaded" in first.backend("nvml").error.message
    assert second.backend("nvml").available and len(second.devices) == 2


def test_an_unavailable_backend_is_not_retried_before_its_backoff(tmp_path, node):
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with installed(node) as lib, Collector(options(tmp_path, node)) as collector:
        collector.collect()
        collector.collect()
        attempts = lib.calls["nvmlInitWithFlags"] + lib.calls["nvmlInit_v2"]
    assert attempts == 1


def test_reprobe_reads_one_device_again(tmp_path, node):
    with installed(node), Collector(options(tmp_path, node)) as collector:
        snapshot = collector.collect()
        node.gpus[0].temperature = 71
        again = collector.reprobe(snapshot.devices[0])
    assert again.temperatures["gpu"].current_celsius == 71


def test_an_open_that_leaves_the_library_unusable_is_a_failed_collector_run(tmp_path, node):
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with installed(node):
        snapshot = collect(options(tmp_path, node))
    (run,) = [c for c in snapshot.collectors if c.name == "open:nvml"]
    assert not run.success and "not loaded" in run.error


@pytest.mark.slow
def test_a_hung_first_gpu_does_not_starve_the_ones_after_it(tmp_path, node):
    node.gpus[0].hang = "nvmlDeviceGetPowerUsage"
    with installed(node):
        started = time.monotonic()
        snapshot = collect(options(tmp_path, node, timeout=2.0))
        elapsed = time.monotonic() - started
    assert elapsed < 3.0
    hung, healthy = snapshot.devices
    assert not hung.reachable and "nvmlDeviceGetPowerUsage" in hung.errors[0].message
    assert healthy.reachable and healthy.power.draw_watts is not None and len(healthy.links) == 18


def test_a_hung_open_is_not_called_again_while_it_hangs(tmp_path, node, monkeypatch):
    monkeypatch.setattr(probe, "REOPEN_BACKOFF_SECONDS", 0.0)
    node.hang_init = True
    with installed(node) as lib, Collector(options(tmp_path, node, timeout=0.5)) as collector:
        first = collector.collect()
        second = collector.collect()
        attempts = lib.calls["nvmlInitWithFlags"] + lib.calls["nvmlInit_v2"]
    assert attempts == 1
    for snapshot in (first, second):
        info = snapshot.backend("nvml")
        assert not info.available and info.error.kind is ErrorKind.TIMEOUT


def test_parts_nothing_judges_are_not_collected(tmp_path, node):
    from gpudiag.probe.collector import PROBE_PARTS

    with installed(node) as lib:
        lean = collect(CollectOptions(root=sysfs_for(node, tmp_path).root, parts=frozenset()))
        lean_counter_calls = lib.calls["nvmlDeviceGetNvLinkErrorCounter"]
        full = collect(CollectOptions(root=tmp_path, parts=PROBE_PARTS))
    assert lean_counter_calls == 0 and lib.calls["nvmlDeviceGetNvLinkErrorCounter"] > 0
    assert all(link.error_counters == {} for d in lean.devices for link in d.links)
    assert all(len(d.links) == 18 and all(link.up for link in d.links) for d in lean.devices)  # states still read
    assert lean.peers == [] and lean.kernel_log.source is None
    assert full.peers and full.kernel_log.readable


def test_an_unknown_probe_part_is_refused():
    with pytest.raises(ValueError, match="unknown probe part"):
        CollectOptions(parts=frozenset({"everything"}))


def test_earlier_boots_are_read_beside_the_kernel_log_scan_not_after_it(tmp_path, node, monkeypatch):
    """A cold check waits for the longer of the two (journalctl can take a while on a real journal), not their sum:
    the scan here waits until the history's read has begun, which only a read beside it can satisfy."""
    import threading

    from gpudiag.model import BootHistory
    from gpudiag.probe.kernel_log import boot_history, reader

    begun = threading.Event()
    real_scan = reader.read_kernel_log
    seen = []

    def history(root, state_dir, current_boot, boot_time, until, journalctl=None):
        begun.set()
        return BootHistory(current_boot=current_boot)

    def scan(*args, **kwargs):
        seen.append(begun.wait(5.0))  # at most 5 s: one thread doing both would never see it begin
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(boot_history, "read_boot_history", history)
    monkeypatch.setattr(reader, "read_kernel_log", scan)
    sysfs_for(node, tmp_path)
    with installed(node):
        snapshot = collect(CollectOptions(root=tmp_path, timeout_seconds=10))
    assert seen == [True]
    assert snapshot.boot_history is not None and snapshot.kernel_log.error is None
    (run,) = [r for r in snapshot.collectors if r.name == "kernel_log"]
    assert run.success


@pytest.mark.parametrize("failure", ["raises", "hangs"])
def test_a_failing_history_read_fails_the_kernel_log_part_and_names_it(tmp_path, node, monkeypatch, failure):
    import threading

    from gpudiag.probe.kernel_log import boot_history

    release = threading.Event()

    def history(*args, **kwargs):
        if failure == "raises":
            raise OSError(5, "Input/output error")
        release.wait(10.0)

    monkeypatch.setattr(boot_history, "read_boot_history", history)
    sysfs_for(node, tmp_path)
    try:
        with installed(node):
            snapshot = collect(CollectOptions(root=tmp_path, timeout_seconds=1.0))
    finally:
        release.set()
    error = snapshot.kernel_log.error
    assert snapshot.boot_history is None and error is not None and error.source == "kernel_log"
    assert ("OSError" in error.message) if failure == "raises" else ("hung in boot_history" in error.message)
    (run,) = [r for r in snapshot.collectors if r.name == "kernel_log"]
    assert not run.success
