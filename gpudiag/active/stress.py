"""The power stress: every multiprocessor runs the heaviest kernel this code has for it for `stress_seconds` while a
second thread samples the GPU's clocks, temperature, power and throttle reasons through the probe layer's reader.

On tensor-capable GPUs (NVIDIA sm_80+, AMD gfx942/gfx950) that is the BF16 tensor/matrix-core kernel with streaming
warps (tensor_kernels.py): it holds a GPU at its power limit, as real training does, so that a weak power stage, a
blocked heat sink or HBM that errs when hot shows. Elsewhere it is the FP32 FMA kernel (kernels.py).

Each launch is calibrated to about `stress_launch_ms`: long enough for launch gaps not to let the GPU idle, short
enough that a stop (deadline, Ctrl-C) ends the load within a fraction of a second. Two launches are kept in flight
so that the GPU never waits for the host."""

from __future__ import annotations

import ctypes
import threading
import time
from ctypes import c_uint32, c_uint64

from gpudiag.active import kernels, tensor_kernels
from gpudiag.active.runtime import Resources
from gpudiag.active.session import Session, ecc_counts, recording, telemetry_of
from gpudiag.model import DeviceSnapshot, StressResult

CALIBRATION_ITERATIONS = 4096
MAX_ITERATIONS = 2**31 - 1
STOP_MARGIN_SECONDS = 3.0  # left before the deadline for the last launches to drain and the memory to be freed
TENSOR_BLOCKS_PER_MULTIPROCESSOR = 4  # 4 × 256 threads at 54 registers: all resident at once on sm_80/sm_90


def choose_kernel(session: Session, device: DeviceSnapshot) -> tensor_kernels.StressKernel:
    """By the GPU itself: its compute capability (CUDA) or its gfx target (the probe's architecture, AMD)."""
    fma_flop = kernels.FMA_PER_ITERATION * 2
    if not session.options.stress_tensor:
        return tensor_kernels.stress_kernel("", None, None, fma_flop)
    return tensor_kernels.stress_kernel(session.runtime.vendor.value, device.architecture,
                                        session.runtime.compute_capability(), fma_flop)


def stress(session: Session, ordinal: int, device: DeviceSnapshot) -> StressResult:
    options, runtime = session.options, session.runtime
    result = StressResult(seconds_requested=options.stress_seconds)
    result.ecc_corrected_before, result.ecc_uncorrected_before = ecc_counts(session, device, fresh=False)
    sampler = None
    with recording("active.stress", result), Resources(runtime, ordinal) as res:
        session.check()
        spec = choose_kernel(session, device)
        result.kernel, result.precision = spec.kernel, spec.precision
        module = res.program(spec.program) if spec.program is not None else res.kernels()
        function = runtime.kernel(module, spec.kernel)
        multiprocessors = runtime.multiprocessor_count()
        stream = res.stream()
        if spec.program is None:
            grid = kernels.grid_for(multiprocessors)
            out = res.alloc(grid * kernels.BLOCK_THREADS * 4)
            tensor_units = grid * kernels.BLOCK_THREADS
            fixed: list = []
            counter = None
        else:
            grid = (multiprocessors * TENSOR_BLOCKS_PER_MULTIPROCESSOR if multiprocessors else kernels.FALLBACK_GRID)
            out = res.alloc(grid * kernels.BLOCK_THREADS * 4)
            warps = kernels.BLOCK_THREADS // spec.lanes
            # stress_copy_warps counts 32-thread warps of 8; a 64-lane wavefront (AMD) streams as much as two
            copy_warps = min((options.stress_copy_warps * 32 + spec.lanes // 2) // spec.lanes, warps - 1)
            tensor_units = grid * (warps - copy_warps)
            buffer, vectors = _stream_buffer(session, res, grid * copy_warps * spec.lanes)
            counter = res.alloc(8)
            counter_host = res.alloc_host(8)
            ctypes.memmove(counter_host, bytes(8), 8)
            runtime.copy_h2d_async(counter, counter_host, 8, stream)
            fixed = [c_uint64(buffer), c_uint64(vectors), c_uint32(copy_warps if vectors else 0), c_uint64(counter)]
        start, end, ring = res.event(), res.event(), (res.event(), res.event())

        def launch(iterations: int) -> None:
            runtime.launch(function, grid, kernels.BLOCK_THREADS, [c_uint64(out), c_uint32(iterations), *fixed],
                           stream)

        session.check()
        runtime.event_record(start, stream)
        launch(CALIBRATION_ITERATIONS)
        runtime.event_record(end, stream)
        runtime.event_synchronize(end)
        took_ms = max(runtime.event_elapsed_ms(start, end), 1e-3)
        iterations = int(min(MAX_ITERATIONS, max(1, CALIBRATION_ITERATIONS * options.stress_launch_ms / took_ms)))
        if counter is not None:  # the calibration launch's traffic is not counted
            runtime.copy_h2d_async(counter, counter_host, 8, stream)
        seconds = _planned_seconds(session, device)
        session.progress.say(f"GPU {device.index}: {spec.precision.upper()} stress ({spec.kernel}) for {seconds:g} s "
                             f"({grid} blocks x {kernels.BLOCK_THREADS} threads, {iterations} iterations a launch)")
        sampler = _Sampler(session, device, result)
        sampler.start()
        began = time.monotonic()
        report_at = began + options.progress_interval_seconds
        runtime.event_record(start, stream)
        try:
            while time.monotonic() - began < seconds:
                session.check()
                if time.monotonic() >= report_at:  # a soak runs for minutes: say that it is alive, and how it is
                    report_at += options.progress_interval_seconds
                    session.progress.say(f"GPU {device.index}: stress {time.monotonic() - began:.0f}/{seconds:g} s"
                                         f"{_latest(result)}")
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
        if result.launches and gpu_seconds > 0:
            flop = result.launches * tensor_units * iterations * spec.flop_per_iteration
            result.tflops = round(flop / gpu_seconds / 1e12, 2)
            if spec.precision == "fp32":
                result.fp32_tflops = result.tflops
            if counter is not None:
                runtime.copy_d2h_async(counter_host, counter, 8, stream)
                runtime.stream_synchronize(stream)
                moved = int.from_bytes(ctypes.string_at(counter_host, 8), "little")
                result.stream_gb_per_second = round(moved / gpu_seconds / 1e9, 1) if moved else None
    if sampler is not None:
        sampler.finish()
    result.ecc_corrected_after, result.ecc_uncorrected_after = ecc_counts(session, device, fresh=True)
    throughput = (f"{result.tflops} {result.precision.upper()} TFLOPS" if result.tflops is not None
                  else "no throughput measured")
    session.progress.say(f"GPU {device.index}: stress done: {result.launches} launches, {throughput}, "
                         f"{len(result.samples)} telemetry samples")
    return result


def _latest(result: StressResult) -> str:
    if not result.samples:
        return ""
    s = result.samples[-1]
    return f": {s.power_watts} W, SM {s.sm_clock_mhz} MHz, {s.temperature_celsius} °C, {s.throttle_reasons or []}"


def _stream_buffer(session: Session, res: Resources, streams: int) -> tuple[int, int]:
    """Two halves for the streaming warps, each far larger than the L2 cache (so that the traffic reaches HBM),
    `vectors` a multiple of COPY_UNROLL × streams (the kernel wraps around without a bounds check)."""
    if streams == 0:
        return 0, 0
    free, _ = session.runtime.memory_info()
    half = min(session.options.stress_stream_bytes, int(free * 0.4)) // 2
    step = tensor_kernels.COPY_UNROLL * streams
    vectors = half // tensor_kernels.VECTOR_BYTES // step * step
    if vectors == 0:
        return 0, 0
    return res.alloc(2 * vectors * tensor_kernels.VECTOR_BYTES), vectors


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
