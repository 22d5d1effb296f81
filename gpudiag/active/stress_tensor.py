"""The tensor-core stress's launches on one GPU: the grid, the streamed buffer and its patterns, the two-deep ring
of result records each launch leaves, and the validation-only fault injection. stress.py runs the loop; the
kernels' contract is ptx_parts.py's, the comparison stress_verify.py's.

Launch L (every launch counts, the calibration and the reference ones too) reads half L % 2 of the streamed buffer,
written by launch L - 1 with seed SEEDS[(L - 1) % 8] (the fill before the first launch plays launch -1), and writes
the other half with SEEDS[L % 8]: every HBM word is checked on the launch after it was written, and every cell
holds each of the eight patterns in turn."""

from __future__ import annotations

import ctypes
from ctypes import c_uint32, c_uint64
from typing import Optional

from gpudiag.active import kernels, tensor_kernels
from gpudiag.active.options import ValidationFault
from gpudiag.active.ptx_parts import INJECT_BIT, NO_INJECTION
from gpudiag.active.runtime import Resources
from gpudiag.active.session import Session
from gpudiag.active.stress_verify import RECORD_BYTES, Verifier, location_name
from gpudiag.model import ComputeVerification

STREAM_FLIP_BIT = 7
INJECTED_LAUNCH = 1  # the steady launch a validation fault goes into (the second: the first sets the reference)


class TensorLoad:
    def __init__(self, session: Session, res: Resources, spec: tensor_kernels.StressKernel, function: int,
                 stream: int):
        runtime, options = session.runtime, session.options
        self.session, self.runtime, self.spec, self.function, self.stream = session, runtime, spec, function, stream
        multiprocessors = runtime.multiprocessor_count()
        self.grid = multiprocessors * spec.blocks_per_multiprocessor if multiprocessors else kernels.FALLBACK_GRID
        copy_warps = spec.copy_warps(options.stress_copy_warps)
        self.tensor_warps = spec.tensor_warps(copy_warps)
        self.units = self.grid * spec.units(copy_warps)
        self.buffer, self.vectors = _stream_buffer(session, res, self.grid * copy_warps * spec.lanes,
                                                   spec.stream_unroll)
        self.copy_warps = copy_warps if self.vectors else 0
        self.half_bytes = self.vectors * tensor_kernels.VECTOR_BYTES
        self.counter, self.counter_host = res.alloc(8), res.alloc_host(8)
        self.slot_bytes = -(-(self.grid * RECORD_BYTES + kernels.RESULT_SLOT_BYTES) // 256) * 256
        self.ring, self.ring_host = res.alloc(2 * self.slot_bytes), res.alloc_host(2 * self.slot_bytes)
        self.slot_init, self.flip = res.alloc_host(kernels.RESULT_SLOT_BYTES), res.alloc_host(4)
        ctypes.memmove(self.slot_init, kernels.RESULT_SLOT_INIT, kernels.RESULT_SLOT_BYTES)
        self.verifier = Verifier(runtime.vendor.value, self.grid, self.tensor_warps)
        self.launched = 0
        self.fault: Optional[ValidationFault] = options.validation_fault
        if self.fault is not None:
            self.verifier.result.validation_fault = f"validation only: {self.fault.kind} fault requested, not injected"
        self.reset_counter()
        if self.vectors:  # launch 0 reads half 0 as launch -1 would have written it
            fill = runtime.kernel(res.kernels(), kernels.FILL)
            runtime.launch(fill, kernels.grid_for(multiprocessors), kernels.BLOCK_THREADS,
                           [c_uint64(self.buffer), c_uint64(self.vectors * 4), c_uint32(self.seed(-1)),
                            c_uint32(kernels.FIXED)], stream)

    @property
    def result(self) -> ComputeVerification:
        return self.verifier.result

    @staticmethod
    def seed(launch: int) -> int:
        return kernels.SEEDS[launch % len(kernels.SEEDS)]

    def reset_counter(self) -> None:
        ctypes.memmove(self.counter_host, bytes(8), 8)
        self.runtime.copy_h2d_async(self.counter, self.counter_host, 8, self.stream)

    def moved_bytes(self) -> int:
        self.runtime.copy_d2h_async(self.counter_host, self.counter, 8, self.stream)
        self.runtime.stream_synchronize(self.stream)
        return int.from_bytes(ctypes.string_at(self.counter_host, 8), "little")

    def issue(self, iterations: int, steady_number: Optional[int] = None) -> tuple[int, int]:
        """Queue one launch and the copy of its records back; (ring slot, parity), read with `records` once the
        launch is done."""
        launch, slot = self.launched, self.launched % 2
        parity = launch % 2
        device_slot = self.ring + slot * self.slot_bytes
        check = device_slot + self.grid * RECORD_BYTES
        runtime = self.runtime
        runtime.copy_h2d_async(check, self.slot_init, kernels.RESULT_SLOT_BYTES, self.stream)
        inject = NO_INJECTION
        if self.fault is not None and steady_number == INJECTED_LAUNCH:
            inject = self._inject(launch, parity, steady_number)
        runtime.launch(self.function, self.grid, self.spec.block_threads, [
            c_uint64(device_slot), c_uint32(iterations), c_uint64(self.buffer), c_uint64(self.vectors),
            c_uint32(self.copy_warps), c_uint64(self.counter), c_uint64(check), c_uint32(parity),
            c_uint32(self.seed(launch - 1)), c_uint32(self.seed(launch)), c_uint32(inject)], self.stream)
        runtime.copy_d2h_async(self.ring_host + slot * self.slot_bytes, device_slot, self.slot_bytes, self.stream)
        self.launched += 1
        return slot, parity

    def _inject(self, launch: int, parity: int, steady_number: int) -> int:
        """VALIDATION ONLY (options.ValidationFault): returns the SM to flip an accumulator on, or flips one bit of
        one word of the half this launch reads."""
        fault = self.fault
        if fault.kind == "sm":
            self.result.validation_fault = (
                f"validation only: bit {INJECT_BIT} of one accumulator flipped on "
                f"{location_name(self.runtime.vendor.value, fault.sm)} in steady launch {steady_number}")
            return fault.sm
        if not self.vectors:
            self.result.validation_fault = "validation only: stream fault requested, but no buffer was streamed"
            return NO_INJECTION
        word = self.vectors * 4 // 3
        value = kernels.pattern_word(word, self.seed(launch - 1)) ^ (1 << STREAM_FLIP_BIT)
        ctypes.memmove(self.flip, value.to_bytes(4, "little"), 4)
        address = self.buffer + parity * self.half_bytes + word * 4
        self.runtime.copy_h2d_async(address, self.flip, 4, self.stream)
        self.result.validation_fault = (f"validation only: bit {STREAM_FLIP_BIT} of the streamed word at device "
                                        f"address {address:#x} flipped before steady launch {steady_number}")
        return NO_INJECTION

    def records(self, slot: int) -> tuple[bytes, bytes]:
        raw = ctypes.string_at(self.ring_host + slot * self.slot_bytes, self.slot_bytes)
        at = self.grid * RECORD_BYTES
        return raw[:at], raw[at:at + kernels.RESULT_SLOT_BYTES]

    def verify(self, slot: int, parity: int, steady_number: Optional[int] = None,
               reference: Optional[tuple[int, bool]] = None) -> None:
        """Compare a finished launch: a steady one (its number), or the reference (iterations, hot)."""
        records, check = self.records(slot)
        if reference is not None:
            self.verifier.reference(records, *reference)
        else:
            self.verifier.steady(steady_number, records)
        if self.vectors:
            self.verifier.stream(check, parity, self.buffer, self.half_bytes)


def _stream_buffer(session: Session, res: Resources, streams: int, unroll: int) -> tuple[int, int]:
    """Two halves for the streaming warps, each far larger than the L2 cache (so that the traffic reaches HBM),
    `vectors` a multiple of unroll × streams (the kernel wraps around without a bounds check)."""
    if streams == 0:
        return 0, 0
    free, _ = session.runtime.memory_info()
    half = min(session.options.stress_stream_bytes, int(free * 0.4)) // 2
    step = unroll * streams
    vectors = half // tensor_kernels.VECTOR_BYTES // step * step
    if vectors == 0:
        return 0, 0
    return res.alloc(2 * vectors * tensor_kernels.VECTOR_BYTES), vectors
