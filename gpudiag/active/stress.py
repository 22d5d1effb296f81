"""The power stress: every multiprocessor runs the heaviest kernel this code has for it for `stress_seconds` while a
second thread samples the GPU's clocks, temperature, power and throttle reasons through the probe layer's reader.

On tensor-capable GPUs (NVIDIA sm_80+, wgmma on Hopper; AMD gfx942/gfx950) that is the BF16 tensor/matrix-core
kernel with streaming warps (tensor_kernels.py): it holds a GPU at its power limit, as real training does, so that a
weak power stage, a blocked heat sink or HBM that errs when hot shows, and every result it computes is checked bit
for bit (stress_tensor.py, stress_verify.py): a block that computed other bits than its siblings names its SM.
Elsewhere it is the FP32 FMA kernel (kernels.py), unverified.

Each launch is calibrated to about `stress_launch_ms`: long enough for launch gaps not to let the GPU idle, short
enough that a stop (deadline, Ctrl-C) ends the load within a fraction of a second. Two launches are kept in flight
so that the GPU never waits for the host."""

from __future__ import annotations

import threading
import time
from ctypes import c_uint32, c_uint64

from typing import Optional

from gpudiag.active import kernels, tensor_kernels
from gpudiag.active.runtime import GpuCallError, Resources
from gpudiag.active.session import Session, ecc_counts, recording, telemetry_of
from gpudiag.active.stress_tensor import TensorLoad
from gpudiag.model import DeviceSnapshot, StressResult

CALIBRATION_ITERATIONS = 4096  # also the reference launch's length, run cold and hot and compared across GPUs
MAX_ITERATIONS = 2**31 - 1
STOP_MARGIN_SECONDS = 3.0  # left before the deadline for the last launches to drain and the memory to be freed


def choose_kernel(session: Session, device: DeviceSnapshot) -> tensor_kernels.StressKernel:
    """By the GPU itself: its compute capability (CUDA) or its gfx target (the probe's architecture, AMD)."""
    fma_flop = kernels.FMA_PER_ITERATION * 2
    if not session.options.stress_tensor:
        return tensor_kernels.stress_kernel("", None, None, fma_flop)
    return tensor_kernels.stress_kernel(session.runtime.vendor.value, device.architecture,
                                        session.runtime.compute_capability(), fma_flop)


def _load(session: Session, res: Resources, spec: tensor_kernels.StressKernel, result: StressResult
          ) -> tuple[tensor_kernels.StressKernel, int]:
    """The kernel's function; where the driver refuses the module (the sm_90a one on a driver older than CUDA
    12.0), the fallback kernel's, with the refusal recorded."""
    try:
        module = res.program(spec.program) if spec.program is not None else res.kernels()
    except GpuCallError as exc:
        if spec.fallback is None:
            raise
        result.kernel_fallback = f"{spec.kernel} refused ({exc}); ran {spec.fallback.kernel}"
        session.progress.say(f"{result.kernel_fallback}")
        spec = spec.fallback
        module = res.program(spec.program)
    return spec, session.runtime.kernel(module, spec.kernel)


def stress(session: Session, ordinal: int, device: DeviceSnapshot) -> StressResult:
    options, runtime = session.options, session.runtime
    result = StressResult(seconds_requested=options.stress_seconds)
    result.ecc_corrected_before, result.ecc_uncorrected_before = ecc_counts(session, device, fresh=False)
    sampler = None
    with recording("active.stress", result), Resources(runtime, ordinal) as res:
        session.check()
        spec, function = _load(session, res, choose_kernel(session, device), result)
        result.kernel, result.precision = spec.kernel, spec.precision
        stream = res.stream()
        start, end, ring = res.event(), res.event(), (res.event(), res.event())
        load: Optional[TensorLoad] = None
        if spec.program is None:
            grid = kernels.grid_for(runtime.multiprocessor_count())
            out = res.alloc(grid * kernels.BLOCK_THREADS * 4)
            tensor_units, block = grid * kernels.BLOCK_THREADS, kernels.BLOCK_THREADS

            def issue(iterations: int, number: Optional[int] = None) -> tuple[int, int]:
                runtime.launch(function, grid, block, [c_uint64(out), c_uint32(iterations)], stream)
                return 0, 0
        else:
            load = TensorLoad(session, res, spec, function, stream)
            result.verification = load.result
            grid, block, tensor_units, issue = load.grid, spec.block_threads, load.units, load.issue

        session.check()
        runtime.event_record(start, stream)
        calibration = issue(CALIBRATION_ITERATIONS)
        runtime.event_record(end, stream)
        runtime.event_synchronize(end)
        took_ms = max(runtime.event_elapsed_ms(start, end), 1e-3)
        iterations = int(min(MAX_ITERATIONS, max(1, CALIBRATION_ITERATIONS * options.stress_launch_ms / took_ms)))
        if load is not None:
            load.verify(*calibration, reference=(CALIBRATION_ITERATIONS, False))
            load.reset_counter()  # the calibration launch's traffic is not counted
        seconds = _planned_seconds(session, device)
        session.progress.remaining.expect("stress", seconds + 1.0, key=device.index)  # and its last samples
        session.progress.say(f"GPU {device.index}: {spec.precision.upper()} stress ({spec.kernel}) for {seconds:g} s "
                             f"({grid} blocks x {block} threads, {iterations} iterations a launch"
                             f"{', every result verified' if load is not None else ''})")
        sampler = _Sampler(session, device, result)
        sampler.start()
        began = time.monotonic()
        report_at = began + options.progress_interval_seconds
        runtime.event_record(start, stream)
        pending: list[tuple[int, int, int]] = []  # (steady number, ring slot, parity) of launches in flight
        try:
            while time.monotonic() - began < seconds:
                session.check()
                if time.monotonic() >= report_at:  # a soak runs for minutes: say that it is alive, and how it is
                    report_at += options.progress_interval_seconds
                    session.progress.say(f"GPU {device.index}: stress {time.monotonic() - began:.0f}/{seconds:g} s"
                                         f"{_latest(result)}")
                slot = issue(iterations, result.launches)
                if load is not None:
                    pending.append((result.launches, *slot))
                runtime.event_record(ring[result.launches % 2], stream)
                if result.launches:
                    runtime.event_synchronize(ring[(result.launches - 1) % 2])  # the previous launch is done
                    if load is not None:
                        number, slot, parity = pending.pop(0)
                        load.verify(slot, parity, steady_number=number)
                result.launches += 1
        finally:
            runtime.event_record(end, stream)
            runtime.event_synchronize(end)
            result.seconds = round(time.monotonic() - began, 3)
            sampler.finish()
        gpu_seconds = runtime.event_elapsed_ms(start, end) / 1000
        if load is not None:
            for number, slot, parity in pending:
                load.verify(slot, parity, steady_number=number)
        if result.launches and gpu_seconds > 0:
            extra = spec.extra_flop if load is not None else 0
            flop = result.launches * tensor_units * (iterations * spec.flop_per_iteration + extra)
            result.tflops = round(flop / gpu_seconds / 1e12, 2)
            if spec.precision == "fp32":
                result.fp32_tflops = result.tflops
        if load is not None:
            moved = load.moved_bytes()
            result.stream_gb_per_second = round(moved / gpu_seconds / 1e9, 1) if moved and gpu_seconds > 0 else None
            load.result.stream_words_read = moved // 8  # half of the bytes moved were read, 4 bytes a word
            if session.control.stopping() is None:  # the reference again, now that the GPU is hot (not past a stop)
                hot = load.issue(CALIBRATION_ITERATIONS)
                runtime.stream_synchronize(stream)
                load.verify(*hot, reference=(CALIBRATION_ITERATIONS, True))
    if sampler is not None:
        sampler.finish()
    result.ecc_corrected_after, result.ecc_uncorrected_after = ecc_counts(session, device, fresh=True)
    throughput = (f"{result.tflops} {result.precision.upper()} TFLOPS" if result.tflops is not None
                  else "no throughput measured")
    session.progress.say(f"GPU {device.index}: stress done: {result.launches} launches, {throughput}, "
                         f"{len(result.samples)} telemetry samples{_verified(result)}")
    return result


def _verified(result: StressResult) -> str:
    check = result.verification
    if check is None:
        return ""
    return (f"; {check.launches_verified} launches verified: {check.mismatched_blocks} mismatching blocks"
            f"{' on ' + ', '.join(s.location for s in check.mismatched_sms) if check.mismatched_sms else ''}, "
            f"{check.stream_mismatches} mismatching HBM reads")


def _latest(result: StressResult) -> str:
    if not result.samples:
        return ""
    s = result.samples[-1]
    return f": {s.power_watts} W, SM {s.sm_clock_mhz} MHz, {s.temperature_celsius} °C, {s.throttle_reasons or []}"


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
