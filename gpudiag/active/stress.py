"""A short compute stress: FP32 FMA kernels keep every multiprocessor busy for `stress_seconds` while a second
thread samples the GPU's clocks, temperature, power and throttle reasons through the probe layer's reader.

Each launch is calibrated to about `stress_launch_ms`: long enough for launch gaps not to let the GPU idle, short
enough that a stop (deadline, Ctrl-C) ends the load within a fraction of a second. Two launches are kept in flight
so that the GPU never waits for the host."""

from __future__ import annotations

import threading
import time
from ctypes import c_uint32, c_uint64

from gpudiag.active import kernels
from gpudiag.active.runtime import Resources
from gpudiag.active.session import Session, recording, telemetry_of
from gpudiag.model import DeviceSnapshot, StressResult

CALIBRATION_ITERATIONS = 4096
MAX_ITERATIONS = 2**31 - 1
STOP_MARGIN_SECONDS = 3.0  # left before the deadline for the last launches to drain and the memory to be freed


def stress(session: Session, ordinal: int, device: DeviceSnapshot) -> StressResult:
    options, runtime = session.options, session.runtime
    result = StressResult(seconds_requested=options.stress_seconds)
    sampler = None
    with recording("active.stress", result), Resources(runtime, ordinal) as res:
        session.check()
        fma = runtime.kernel(res.kernels(), kernels.FMA)
        grid = kernels.grid_for(runtime.multiprocessor_count())
        out, stream = res.alloc(grid * kernels.BLOCK_THREADS * 4), res.stream()
        start, end, ring = res.event(), res.event(), (res.event(), res.event())

        def launch(iterations: int) -> None:
            runtime.launch(fma, grid, kernels.BLOCK_THREADS, [c_uint64(out), c_uint32(iterations)], stream)

        session.check()
        runtime.event_record(start, stream)
        launch(CALIBRATION_ITERATIONS)
        runtime.event_record(end, stream)
        runtime.event_synchronize(end)
        took_ms = max(runtime.event_elapsed_ms(start, end), 1e-3)
        iterations = int(min(MAX_ITERATIONS, max(1, CALIBRATION_ITERATIONS * options.stress_launch_ms / took_ms)))
        seconds = _planned_seconds(session, device)
        session.progress.say(f"GPU {device.index}: stress for {seconds:g} s ({grid} blocks x "
                             f"{kernels.BLOCK_THREADS} threads, {iterations} FMA iterations a launch)")
        sampler = _Sampler(session, device, result)
        sampler.start()
        began = time.monotonic()
        runtime.event_record(start, stream)
        try:
            while time.monotonic() - began < seconds:
                session.check()
                launch(iterations)
                runtime.event_record(ring[result.launches % 2], stream)
                if result.launches:
                    runtime.event_synchronize(ring[(result.launches - 1) % 2])  # the previous launch is done
                result.launches += 1
        finally:
            runtime.event_record(end, stream)
            runtime.event_synchronize(end)
            result.seconds = round(time.monotonic() - began, 3)
            sampler.finish()
        gpu_seconds = runtime.event_elapsed_ms(start, end) / 1000
        fmas = result.launches * grid * kernels.BLOCK_THREADS * iterations * kernels.FMA_PER_ITERATION
        if result.launches and gpu_seconds > 0:
            result.fp32_tflops = round(2 * fmas / gpu_seconds / 1e12, 2)
    if sampler is not None:
        sampler.finish()
    throughput = f"{result.fp32_tflops} FP32 TFLOPS" if result.fp32_tflops is not None else "no throughput measured"
    session.progress.say(f"GPU {device.index}: stress done: {result.launches} launches, {throughput}, "
                         f"{len(result.samples)} telemetry samples")
    return result


def _planned_seconds(session: Session, device: DeviceSnapshot) -> float:
    """The requested duration, shortened to end before the deadline (a stress cut off by it proves less than a
    shorter one that ran to its end)."""
    requested, remaining = session.options.stress_seconds, session.remaining()
    if remaining is None or remaining - STOP_MARGIN_SECONDS >= requested:
        return requested
    planned = max(0.0, remaining - STOP_MARGIN_SECONDS)
    session.progress.say(f"GPU {device.index}: stress shortened to {planned:.0f} s of {requested:g} s to end "
                         f"before the deadline")
    return planned


class _Sampler:
    """Reads the GPU every `sample_interval_seconds` while the load runs (a first sample right away)."""

    def __init__(self, session: Session, device: DeviceSnapshot, result: StressResult):
        self._session, self._device, self._result = session, device, result
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gpudiag-sampler-{device.index}", daemon=True)
        self._began = time.monotonic()

    def start(self) -> None:
        if self._session.options.reader is None:
            self._result.telemetry_error = "no telemetry reader: clocks, temperature and throttling were not watched"
            return
        self._began = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        reader = self._session.options.reader
        while True:
            try:
                fresh = reader(self._device)
                self._result.samples.append(telemetry_of(fresh, time.monotonic() - self._began))
            except Exception as exc:  # noqa: BLE001 - keep loading; say why samples are missing
                self._result.telemetry_error = self._result.telemetry_error or f"{type(exc).__name__}: {exc}"
            if self._done.wait(self._session.options.sample_interval_seconds):
                return

    def finish(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._session.options.sample_interval_seconds + 5)
