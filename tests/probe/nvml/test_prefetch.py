"""The NVIDIA backend started ahead of the collector (gpudiag/probe/nvml/prefetch.py): the collector gets what an
NvmlBackend of its own would have given it — the same snapshot, the same NVML calls, each made once — and a GPU
that hangs or is lost is reported as it always is (its call named, its identity kept), the GPUs after a hung one
probed by the collector itself."""

from __future__ import annotations

import threading
import time

from gpudiag.model import ErrorKind
from gpudiag.model.serialize import to_dict
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.probe.nvml import prefetch
from gpudiag.probe.nvml.prefetch import PrefetchedNvml
from tests.probe.test_split import _steady
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for


def _collect(tmp_path, node, timeout=5.0, started=None):
    if not (tmp_path / "sys").exists():
        sysfs_for(node, tmp_path)
    options = CollectOptions(root=tmp_path, timeout_seconds=timeout, nvml_backend=started)
    with Collector(options) as collector:
        return collector.collect()


def test_the_collector_gets_what_its_own_backend_gives_with_each_call_made_once(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True
    with installed(node) as lib:
        alone = _collect(tmp_path, node)
        calls_alone = dict(lib.calls)
        lib.calls.clear()
        started = PrefetchedNvml()
        time.sleep(0.2)  # the thread has opened NVML and probed both GPUs before the collector asks
        ahead = _collect(tmp_path, node, started=started)
        calls_ahead = dict(lib.calls)
    assert calls_ahead == calls_alone
    # the devices, not the host: the host is read anew each time (its load and memory move between the two)
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert ahead.devices[1].memory_health.remap_pending is True


def test_options_that_read_no_link_errors_get_a_backend_of_their_own(tmp_path):
    node = FakeNode.hgx_h200(1)
    sysfs_for(node, tmp_path)
    from gpudiag.probe.collector import PROBE_PARTS
    from gpudiag.probe.vendor_backends import nvidia_backends

    with installed(node):
        started = PrefetchedNvml(link_errors=True)
        without = CollectOptions(root=tmp_path, parts=PROBE_PARTS - {"link_errors"}, nvml_backend=started)
        assert nvidia_backends(without)[0] is not started
        assert nvidia_backends(CollectOptions(root=tmp_path, nvml_backend=started))[0] is started


def test_a_gpu_hung_on_the_thread_is_named_and_the_next_one_is_the_collector_s(tmp_path, monkeypatch):
    monkeypatch.setattr(prefetch, "MIRROR_SECONDS", 0.005)
    node = FakeNode.hgx_h200(2)
    node.gpus[0].hang = "nvmlDeviceGetPowerUsage"
    with installed(node) as lib:
        snapshot = _collect(tmp_path, node, timeout=1.5, started=PrefetchedNvml())
        power_reads = lib.device_calls[("nvmlDeviceGetPowerUsage", 0)]
    hung, healthy = snapshot.devices
    assert not hung.reachable and hung.pci_bus_id == "0000:19:00.0"
    (error,) = hung.errors
    assert error.kind is ErrorKind.TIMEOUT and "nvmlDeviceGetPowerUsage" in error.message
    assert healthy.reachable and healthy.power.draw_watts is not None
    assert power_reads == 1  # the hung call was made once, on the thread; the collector did not call it again


def test_a_lost_gpu_keeps_its_identity(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].lose_after_calls = 3
    with installed(node):
        snapshot = _collect(tmp_path, node, started=PrefetchedNvml())
    lost = snapshot.devices[0]
    assert not lost.reachable and lost.pci_bus_id == "0000:19:00.0"
    assert lost.errors[-1].kind is ErrorKind.GPU_LOST
    assert snapshot.devices[1].reachable


def test_calls_the_thread_has_not_begun_are_the_collector_s_and_the_thread_then_makes_none(tmp_path, monkeypatch):
    held = threading.Event()
    real_start = threading.Thread.start

    def late_start(thread):  # the prefetch thread starts only once the collector has opened NVML itself
        if thread.name == "nvml-prefetch":
            threading.Timer(0.0, lambda: (held.wait(5), real_start(thread))).start()
            return
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", late_start)
    node = FakeNode.hgx_h200(2)
    with installed(node) as lib:
        _collect(tmp_path, node)
        calls_alone = dict(lib.calls)
        lib.calls.clear()
        started = PrefetchedNvml()
        snapshot = _collect(tmp_path, node, started=started)
        held.set()
        time.sleep(0.2)  # the thread, started now, finds every call taken
        calls = dict(lib.calls)
    assert calls == calls_alone and all(d.reachable for d in snapshot.devices)
