"""HBM bandwidth: a copy kernel (tensor_kernels.COPY) between two device buffers far larger than the L2 cache, timed
by GPU events; the best of `copy_batches` batches of `hbm_repeats` copies. The figure counts each copied byte once
(as torch's `b.copy_(a)` and STREAM's Copy are usually quoted); the memory moves twice that (read + write)."""

from __future__ import annotations

from ctypes import c_uint64

from gpudiag.active import kernels, tensor_kernels
from gpudiag.active.runtime import Resources
from gpudiag.active.session import Session, recording
from gpudiag.model import DeviceSnapshot, HbmBandwidth

# Every block resident at once (4 × 256 threads at 40 registers fit an SM's 64K registers; the 8 blocks of
# kernels.grid_for do not, and a second, partial wave of a grid-stride copy runs at a fraction of the occupancy:
# measured 1,888 GB/s that way on the lab H200 against torch's 2,133). 4 × 256 threads × 4 vectors of 16 bytes keep
# 64 KiB in flight per SM, more than HBM latency × bandwidth needs.
COPY_BLOCKS_PER_MULTIPROCESSOR = 4


def hbm_bandwidth(session: Session, ordinal: int, device: DeviceSnapshot) -> HbmBandwidth:
    runtime, options = session.runtime, session.options
    result = HbmBandwidth()
    with recording("active.hbm", result), Resources(runtime, ordinal) as res:
        session.check()
        program = tensor_kernels.CUDA_COPY if runtime.name == "cuda" else tensor_kernels.HIP_COPY
        copy = runtime.kernel(res.program(program), tensor_kernels.COPY)
        free, _ = runtime.memory_info()
        nbytes = min(options.hbm_bytes, int(free * 0.4)) // tensor_kernels.VECTOR_BYTES * tensor_kernels.VECTOR_BYTES
        vectors = nbytes // tensor_kernels.VECTOR_BYTES
        src, dst, stream = res.alloc(nbytes), res.alloc(nbytes), res.stream()
        start, end = res.event(), res.event()
        multiprocessors = runtime.multiprocessor_count()
        grid = multiprocessors * COPY_BLOCKS_PER_MULTIPROCESSOR if multiprocessors else kernels.FALLBACK_GRID
        result.bytes_per_copy = nbytes

        def issue() -> None:
            runtime.launch(copy, grid, kernels.BLOCK_THREADS, [c_uint64(dst), c_uint64(src), c_uint64(vectors)],
                           stream)

        issue()  # warm-up: first touch of both buffers, clocks up
        runtime.stream_synchronize(stream)
        for _ in range(options.copy_batches):
            session.check()
            runtime.event_record(start, stream)
            for _ in range(options.hbm_repeats):
                issue()
            runtime.event_record(end, stream)
            runtime.event_synchronize(end)
            seconds = max(runtime.event_elapsed_ms(start, end) / 1000, 1e-9)
            rate = round(nbytes * options.hbm_repeats / seconds / 1e9, 1)
            result.gb_per_second = max(rate, result.gb_per_second or 0.0)
            result.copies_timed += options.hbm_repeats
    figure = f"{result.gb_per_second} GB/s" if result.gb_per_second else "no figure"
    session.progress.say(f"GPU {device.index}: HBM copy {figure} (each byte counted once)")
    return result
