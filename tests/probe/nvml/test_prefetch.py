"""NVML's calls made in a process of their own ahead of the collector (gpudiag/probe/nvml/prefetch.py): the
collector gets what an NvmlBackend of its own would have given it — the same snapshot, the same NVML calls, each
made once, in one process or the other — and a GPU that hangs or is lost is reported as it always is (its call
named, its identity kept), the GPUs after a hung one probed by the collector itself; where the NVML process dies,
the call it was in fails, never passes.

The NVML process is forked here as gpudiag/cli/check/early_collect.py forks it, over the fake library this process
installed (a fork inherits it); it tells the calls it made in its last message (serve's `finish`)."""

from __future__ import annotations

import os
import signal
import time

from gpudiag.model import ErrorKind
from gpudiag.model.serialize import to_dict
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.probe.nvml import prefetch
from gpudiag.probe.nvml.channel import NvmlChannel
from gpudiag.probe.nvml.prefetch import PrefetchedNvml, serve
from tests.probe.test_split import _steady
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.nvidia_node import sysfs_for


def _collect(tmp_path, node, timeout=5.0, started=None):
    if not (tmp_path / "sys").exists():
        sysfs_for(node, tmp_path)
    options = CollectOptions(root=tmp_path, timeout_seconds=timeout, nvml_backend=started)
    with Collector(options) as collector:
        return collector.collect()


class NvmlProcess:
    """A forked NVML process serving a PrefetchedNvml here; `go` (when held) lets it begin; `calls()` the calls it
    made, from its last message; ended (killed where it still runs) and reaped on leaving."""

    def __init__(self, lib, held: bool = False):
        channel = NvmlChannel()
        go_read, self._go = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the NVML process
            try:
                os.close(self._go)
                if held:
                    os.read(go_read, 1)
                lib.calls.clear()
                lib.device_calls.clear()
                serve(channel.for_nvml_process(), finish=lambda: (dict(lib.calls), dict(lib.device_calls)))
            finally:
                os._exit(0)
        os.close(go_read)
        self.backend = PrefetchedNvml(channel.for_collector())

    def go(self):
        os.write(self._go, b"\0")

    def calls(self):
        self.backend.wait_for_end(10)
        return self.backend.finished_with

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self._go)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def test_the_collector_gets_what_its_own_backend_gives_with_each_call_made_once(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True
    with installed(node) as lib:
        alone = _collect(tmp_path, node)
        calls_alone = dict(lib.calls)
        lib.calls.clear()
        with NvmlProcess(lib) as nvml:
            ahead = _collect(tmp_path, node, started=nvml.backend)
            calls_there, _ = nvml.calls()
        calls_here = dict(lib.calls)
    assert calls_here == {}  # the collecting process made no NVML call
    calls_alone.pop("nvmlShutdown")  # the NVML process leaves NVML by exiting (the driver closes its files)
    assert calls_there == calls_alone
    # the devices and peers, not the host: the host is read anew each time (its load and memory move between the two)
    assert _steady(to_dict(ahead)["devices"]) == _steady(to_dict(alone)["devices"])
    assert to_dict(ahead)["peers"] == to_dict(alone)["peers"] and ahead.peers
    assert ahead.devices[1].memory_health.remap_pending is True


def test_options_that_read_no_link_errors_get_a_backend_of_their_own(tmp_path):
    node = FakeNode.hgx_h200(1)
    sysfs_for(node, tmp_path)
    from gpudiag.probe.collector import PROBE_PARTS
    from gpudiag.probe.vendor_backends import nvidia_backends

    channel = NvmlChannel()
    started = PrefetchedNvml(channel.for_collector(), link_errors=True)
    channel.close()
    without = CollectOptions(root=tmp_path, parts=PROBE_PARTS - {"link_errors"}, nvml_backend=started)
    assert nvidia_backends(without)[0] is not started
    assert nvidia_backends(CollectOptions(root=tmp_path, nvml_backend=started))[0] is started


def test_a_gpu_hung_in_the_nvml_process_is_named_and_the_next_one_is_the_collector_s(tmp_path, monkeypatch):
    monkeypatch.setattr(prefetch, "MIRROR_SECONDS", 0.005)
    node = FakeNode.hgx_h200(2)
    node.gpus[0].hang = "nvmlDeviceGetPowerUsage"
    with installed(node) as lib:
        with NvmlProcess(lib) as nvml:
            snapshot = _collect(tmp_path, node, timeout=1.5, started=nvml.backend)
            power_reads_here = {gpu: lib.device_calls[("nvmlDeviceGetPowerUsage", gpu)] for gpu in (0, 1)}
    hung, healthy = snapshot.devices
    assert not hung.reachable and hung.pci_bus_id == "0000:19:00.0"  # the identity read before the hang
    (error,) = hung.errors
    assert error.kind is ErrorKind.TIMEOUT and "nvmlDeviceGetPowerUsage" in error.message
    assert healthy.reachable and healthy.power.draw_watts is not None
    # the hung call was the NVML process's; this process did not make it again, and probed GPU 1 itself
    assert power_reads_here == {0: 0, 1: 1}


def test_a_lost_gpu_keeps_its_identity(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[0].lose_after_calls = 3
    with installed(node) as lib:
        with NvmlProcess(lib) as nvml:
            snapshot = _collect(tmp_path, node, started=nvml.backend)
    lost = snapshot.devices[0]
    assert not lost.reachable and lost.pci_bus_id == "0000:19:00.0"
    assert lost.errors[-1].kind is ErrorKind.GPU_LOST
    assert snapshot.devices[1].reachable


def test_calls_the_nvml_process_has_not_begun_are_the_collector_s_and_it_then_makes_none(tmp_path):
    node = FakeNode.hgx_h200(2)
    with installed(node) as lib:
        _collect(tmp_path, node)
        calls_alone = dict(lib.calls)
        lib.calls.clear()
        with NvmlProcess(lib, held=True) as nvml:  # it begins only once the collector has made every call itself
            snapshot = _collect(tmp_path, node, started=nvml.backend)
            calls_here = dict(lib.calls)
            nvml.go()
            calls_there, _ = nvml.calls()
    assert calls_here == calls_alone and all(d.reachable for d in snapshot.devices)
    assert calls_there == {}


def test_a_call_the_nvml_process_dies_in_fails_and_is_not_read_as_healthy(tmp_path, monkeypatch):
    monkeypatch.setattr(prefetch, "MIRROR_SECONDS", 0.005)
    node = FakeNode.hgx_h200(2)
    node.gpus[1].hang = "nvmlDeviceGetPowerUsage"
    with installed(node) as lib:
        with NvmlProcess(lib) as nvml:
            killer = _kill_when_hung(nvml)
            started = time.monotonic()
            snapshot = _collect(tmp_path, node, timeout=20, started=nvml.backend)
            took = time.monotonic() - started
            killer.join()
    healthy, died = snapshot.devices
    assert healthy.reachable
    assert not died.reachable and died.pci_bus_id == "0000:3b:00.0"  # named from the progress it had sent
    assert any("ended without answering" in e.message for e in died.errors), died.errors
    assert took < 10  # not the 20 s deadline: the call failed when the process died


def _kill_when_hung(nvml):
    """A thread that kills the NVML process once it has sent the progress of its hung call on GPU 1."""
    import threading

    def kill():
        until = time.monotonic() + 10
        while time.monotonic() < until:
            pending = nvml.backend._answers.get(2)  # GPU 1's probe
            if pending is not None and (pending.current or "").endswith("nvmlDeviceGetPowerUsage"):
                os.kill(nvml.pid, signal.SIGKILL)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


def test_peers_the_nvml_process_did_not_begin_are_paired_here_over_the_gpus_it_probed(tmp_path, monkeypatch):
    node = FakeNode.hgx_h200(2)
    real_after = prefetch._after

    def stops_before_the_peers(call, value, backend, devices):  # as if stopped once it had probed the GPUs
        step = real_after(call, value, backend, devices)
        return None if call == backend.device_count() else step

    monkeypatch.setattr(prefetch, "_after", stops_before_the_peers)
    with installed(node) as lib:
        alone = _collect(tmp_path, node)
        lib.calls.clear()
        with NvmlProcess(lib) as nvml:
            ahead = _collect(tmp_path, node, started=nvml.backend)
            calls_here = dict(lib.calls)
    assert to_dict(ahead)["peers"] == to_dict(alone)["peers"] and len(ahead.peers) == 1
    assert calls_here["nvmlDeviceGetHandleByIndex_v2"] == 2  # a handle for each GPU, to pair them
    assert "nvmlDeviceGetPowerUsage" not in calls_here  # the GPUs' probes were the NVML process's
