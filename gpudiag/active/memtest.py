"""A pattern test over most of a GPU's free memory: every pass fills all of it with a pattern (the index pattern of
four seeds, address-in-address, random: kernels.LEVEL2_PATTERNS), then reads all of it back on the GPU and counts
the words that differ (kernels.py has the kernels and why they are kernels). All chunks are filled before any is
checked, so that the data is read back from DRAM, not from the L2 cache it was just written through (the L2 holds tens
of MB; the tested memory is a hundred GB or more).

Single-bit faults on a GPU with ECC are corrected before the kernel sees them: they show as a rise of the volatile
corrected-ECC counter across the test, which is why the counters are read before and after."""

from __future__ import annotations

import ctypes
import time
from ctypes import c_uint32, c_uint64

from gpudiag.active import kernels
from gpudiag.active.runtime import GpuOutOfMemory, Resources
from gpudiag.active.session import Session, ecc_counts, recording
from gpudiag.model import DeviceSnapshot, ErrorKind, MemtestResult, ProbeError

WORD_BYTES = 4
MIN_CHUNK_BYTES = 1024**2  # below this, an allocation that does not fit is not retried smaller


def memtest(session: Session, ordinal: int, device: DeviceSnapshot) -> MemtestResult:
    options = session.options
    result = MemtestResult(passes_requested=options.memtest_passes)
    result.ecc_corrected_before, result.ecc_uncorrected_before = ecc_counts(session, device, fresh=False)
    with recording("active.memtest", result), Resources(session.runtime, ordinal) as res:
        session.check()
        runtime = session.runtime
        module = res.kernels()
        fill, check = runtime.kernel(module, kernels.FILL), runtime.kernel(module, kernels.CHECK)
        invert = runtime.kernel(module, kernels.INVERT) if options.memtest_inversions else None
        grid = kernels.grid_for(runtime.multiprocessor_count())
        stream = res.stream()
        result.free_bytes, result.total_bytes = runtime.memory_info()
        target = int(result.free_bytes * options.memtest_fraction)
        if options.memtest_max_bytes is not None:
            target = min(target, options.memtest_max_bytes)
        most_chunks = -(-target // options.memtest_chunk_bytes) + 8  # room for chunks halved after a refusal
        slots_bytes = kernels.RESULT_SLOT_BYTES * most_chunks
        slots_host, slots_device = res.alloc_host(slots_bytes), res.alloc(slots_bytes)
        chunks = _allocate(session, res, target, most_chunks)
        result.bytes_tested = sum(size for _, size in chunks)
        if not chunks:
            result.error = ProbeError("active.memtest", ErrorKind.ERROR, f"no device memory could be allocated to "
                                      f"test ({result.free_bytes} bytes reported free)")
            return result
        session.progress.say(f"GPU {device.index}: memory test over {result.bytes_tested / 1e9:.1f} GB "
                             f"({len(chunks)} chunks), {options.memtest_passes} passes"
                             f"{' with moving inversions' if options.memtest_inversions else ''}")
        started = time.monotonic()
        patterns = options.memtest_patterns
        for number in range(options.memtest_passes):
            mode, seed = patterns[number % len(patterns)]
            ctypes.memmove(slots_host, kernels.RESULT_SLOT_INIT * len(chunks), kernels.RESULT_SLOT_BYTES * len(chunks))
            runtime.copy_h2d_async(slots_device, slots_host, kernels.RESULT_SLOT_BYTES * len(chunks), stream)
            # Fill, then (moving inversions) verify-and-invert twice, then verify: every cell is read back and
            # rewritten with its complement, all chunks before the next sweep, so that reads come from DRAM. A random
            # pattern has no complement pattern to verify: it is filled and verified only.
            sweeps = [(fill, seed)]
            if invert is not None and mode != kernels.RANDOM:
                sweeps += [(invert, seed), (invert, seed ^ kernels.INVERTED)]
            for kernel, sweep_seed in sweeps + [(check, seed)]:
                for slot, (pointer, size) in enumerate(chunks):
                    session.check()
                    args = [c_uint64(pointer), c_uint64(size // WORD_BYTES), c_uint32(sweep_seed)]
                    if kernel != fill:
                        args.append(c_uint64(slots_device + slot * kernels.RESULT_SLOT_BYTES))
                    args.append(c_uint32(mode))
                    runtime.launch(kernel, grid, kernels.BLOCK_THREADS, args, stream)
            runtime.copy_d2h_async(slots_host, slots_device, kernels.RESULT_SLOT_BYTES * len(chunks), stream)
            runtime.stream_synchronize(stream)
            _tally(result, chunks, ctypes.string_at(slots_host, kernels.RESULT_SLOT_BYTES * len(chunks)))
            result.passes_completed += 1
            result.patterns.append(kernels.pattern_name(mode, seed))
            result.seconds = round(time.monotonic() - started, 3)
            session.progress.remaining.advance("memtest", (number + 1) / options.memtest_passes, key=device.index)
            session.progress.say(f"GPU {device.index}: memory test pass {number + 1}/{options.memtest_passes} "
                                 f"({result.patterns[-1]}): {result.mismatched_words} mismatching words so far")
    result.ecc_corrected_after, result.ecc_uncorrected_after = ecc_counts(session, device, fresh=True)
    return result


def _allocate(session: Session, res: Resources, target: int, most_chunks: int) -> list[tuple[int, int]]:
    """Chunks adding up to `target`; an allocation the device refuses is retried at half the size (fragmentation
    or memory the driver reports free but keeps)."""
    chunks: list[tuple[int, int]] = []
    chunk_bytes = session.options.memtest_chunk_bytes
    remaining = target
    while remaining >= WORD_BYTES and len(chunks) < most_chunks:
        session.check()
        size = min(chunk_bytes, remaining) // WORD_BYTES * WORD_BYTES
        try:
            chunks.append((res.alloc(size), size))
        except GpuOutOfMemory:
            if size <= MIN_CHUNK_BYTES:
                break
            chunk_bytes = size // 2
            continue
        remaining -= size
    return chunks


def _tally(result: MemtestResult, chunks: list[tuple[int, int]], raw: bytes) -> None:
    for slot, (pointer, _) in enumerate(chunks):
        offset = slot * kernels.RESULT_SLOT_BYTES
        mismatches, first, mask = kernels.parse_result_slot(raw[offset:offset + kernels.RESULT_SLOT_BYTES])
        if not mismatches:
            continue
        result.mismatched_words += mismatches
        address = pointer + first * WORD_BYTES
        result.first_error_address = min(address, result.first_error_address or address)
        result.flipped_bits_mask = (result.flipped_bits_mask or 0) | mask
