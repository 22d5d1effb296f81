"""HBM bandwidth: a copy kernel (tensor_kernels.COPY) between two device buffers far larger than the L2 cache, timed
by GPU events; the best of `copy_batches` batches of `hbm_repeats` copies. The figure counts each copied byte once
(as torch's `b.copy_(a)` and STREAM's Copy are usually quoted); the memory moves twice that (read + write)."""

from __future__ import annotations

from ctypes import c_uint64

from gpudiag.active import kernels, tensor_kernels
from gpudiag.active.bandwidth import timed_copies
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

        def issue() -> None:
            runtime.launch(copy, grid, kernels.BLOCK_THREADS, [c_uint64(dst), c_uint64(src), c_uint64(vectors)],
                           stream)

        timed_copies(session, result, nbytes, stream, start, end, issue, repeats=options.hbm_repeats)
    figure = f"{result.gb_per_second} GB/s" if result.gb_per_second else "no figure"
    session.progress.say(f"GPU {device.index}: HBM copy {figure} (each byte counted once)")
    return result
