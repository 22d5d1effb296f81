"""run_active as an operator meets it: which GPUs it leaves alone, the deadline, a call hung in the driver, Ctrl-C,
and the progress it prints. The GPUs are simulated behind a fake libcuda.so.1."""

from __future__ import annotations

import _thread
import threading
import time

import pytest

from gpudiag.active import ActiveOptions, run_active
from gpudiag.model import ErrorKind, MemoryUsage, Utilization
from tests.support.active import (
    busy_process,
    fast_options,
    idle_device,
    install_cuda,
    live_reader,
    sim_devices,
    snapshot_of,
)


def test_gpus_with_someone_elses_job_are_skipped_and_never_opened(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(2))
    snapshot = snapshot_of(idle_device(0, processes=[busy_process()]),
                           idle_device(1, utilization=Utilization(gpu_percent=97)))
    options = fast_options()
    results = run_active(snapshot, options)
    skipped = {d.index: d.skipped for d in results.devices}
    assert "pid 4242 (python, alice), 30.0 GiB" in skipped[0] and "not disturbed" in skipped[0]
    assert "97% utilised" in skipped[1]
    assert fake.count("cuDevicePrimaryCtxRetain") == 0 and fake.count("cuMemAlloc_v2") == 0
    assert all(d.h2d is None and d.memtest is None and d.stress is None for d in results.devices)
    assert results.peers == []
    assert "GPU 0 (0000:3b:00.0) skipped: busy with another job" in options.progress.getvalue()


def test_memory_held_by_an_invisible_job_skips_the_gpu(monkeypatch):
    # The snapshot lists no process (a job in another container) but most memory is in use.
    install_cuda(monkeypatch, sim_devices(1))
    device = idle_device(0, memory=MemoryUsage(total_bytes=80 * 2**30, used_bytes=60 * 2**30, reserved_bytes=2**29))
    results = run_active(snapshot_of(device), fast_options())
    assert "59.5 GiB of its memory is in use although no process is listed" in results.devices[0].skipped


def test_memory_taken_between_snapshot_and_test_skips_the_gpu_and_lets_it_go_at_once(monkeypatch):
    devices = sim_devices(2)
    devices[0].reserved_bytes = 3 * 2**20  # someone took GPU 0's memory after the snapshot
    fake = install_cuda(monkeypatch, devices)
    results = run_active(snapshot_of(idle_device(0), idle_device(1)),
                         fast_options(tests=("pcie",), busy_memory_bytes=2 * 2**20))
    assert "3.0 MiB of its memory is already in use" in results.devices[0].skipped
    assert results.devices[1].h2d.gb_per_second == 50.0
    # GPU 0's context is released before GPU 1 is loaded, not at the end of the run.
    assert fake.calls.index("cuDevicePrimaryCtxRelease_v2") < fake.calls.index("cuMemAlloc_v2")
    assert fake.leaks() == {}


def test_mig_and_unreachable_gpus_are_skipped_with_their_reason(monkeypatch):
    install_cuda(monkeypatch, sim_devices(2))
    results = run_active(snapshot_of(idle_device(0, mig_enabled=True), idle_device(1, reachable=False)),
                         fast_options())
    assert "MIG mode is enabled" in results.devices[0].skipped
    assert "did not answer its vendor library" in results.devices[1].skipped


def test_a_gpu_the_runtime_does_not_see_is_skipped(monkeypatch):
    install_cuda(monkeypatch, sim_devices(1))  # CUDA_VISIBLE_DEVICES hides the second GPU
    results = run_active(snapshot_of(idle_device(0), idle_device(1)), fast_options(tests=("pcie",)))
    assert results.devices[0].h2d.gb_per_second == 50.0
    assert "runtime does not see it" in results.devices[1].skipped


def test_deadline_shortens_the_stress_so_that_it_ends_in_time(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    options = fast_options(tests=("stress",), stress_seconds=60.0, deadline_seconds=3.5, reader=live_reader())
    began = time.monotonic()
    results = run_active(snapshot_of(idle_device(0)), options)
    assert time.monotonic() - began < 3.5
    stress = results.devices[0].stress
    assert stress.error is None and stress.seconds_requested == 60.0 and stress.seconds < 1.0
    assert "stress shortened" in options.progress.getvalue()
    assert fake.leaks() == {}


def test_a_stop_mid_test_keeps_what_was_measured_and_frees_the_gpu(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    original = type(fake).c_cuEventSynchronize

    def slow_sync(self, event):  # each timed batch now takes 0.2 s of wall time
        time.sleep(0.2)
        return original(self, event)

    monkeypatch.setattr(type(fake), "c_cuEventSynchronize", slow_sync)
    results = run_active(snapshot_of(idle_device(0)),
                         fast_options(tests=("pcie", "memtest"), deadline_seconds=0.3, copy_batches=3))
    device = results.devices[0]
    assert device.h2d.gb_per_second == 50.0 and 4 <= device.h2d.copies_timed < 12  # batches before the stop
    for result in (device.h2d, device.d2h, device.memtest):
        assert result.error.kind == ErrorKind.TIMEOUT and result.error.message == "stopped early: deadline reached"
    assert device.d2h.gb_per_second is None and device.memtest.passes_completed == 0
    assert fake.leaks() == {}


def test_a_call_hung_in_the_driver_is_named_and_the_run_still_returns(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(1))
    release = fake.hang("cuEventSynchronize")
    try:
        began = time.monotonic()
        results = run_active(snapshot_of(idle_device(0)),
                             fast_options(tests=("pcie",), deadline_seconds=0.3, grace_seconds=0.3))
        assert time.monotonic() - began < 2.0
        (error,) = results.errors
        assert error.kind == ErrorKind.TIMEOUT and "stuck in cuda.cuEventSynchronize" in error.message
    finally:
        release.set()


def test_ctrl_c_stops_the_load_frees_the_gpus_then_propagates(monkeypatch):
    fake = install_cuda(monkeypatch, sim_devices(2))
    options = fast_options(tests=("stress",), stress_seconds=20.0)
    timer = threading.Timer(0.4, _thread.interrupt_main)
    timer.start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_active(snapshot_of(idle_device(0), idle_device(1)), options)
    timer.cancel()
    assert time.monotonic() - began < 5.0
    assert fake.leaks() == {}
    assert "interrupted: stopping the load and freeing the GPUs" in options.progress.getvalue()


def test_no_device_in_the_snapshot_is_said(monkeypatch):
    install_cuda(monkeypatch, sim_devices(1))
    results = run_active(snapshot_of(), fast_options())
    assert results.devices == [] and "no GPU was enumerated" in results.errors[0].message


def test_options_are_validated():
    with pytest.raises(ValueError, match="unknown active test"):
        ActiveOptions(tests=("pcie", "burn"))
    with pytest.raises(ValueError, match="memtest_fraction"):
        ActiveOptions(memtest_fraction=1.0)
