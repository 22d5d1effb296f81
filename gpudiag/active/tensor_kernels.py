"""The kernels of the power stress and the HBM bandwidth test, and which one a GPU gets.

- `gpudiag_mma_bf16(f32* out, u32 iterations, u8* buf, u64 vectors, u32 copy_warps, u64* bytes)` (NVIDIA, PTX for
  sm_80 and later) and `gpudiag_mfma_bf16` (AMD gfx942/gfx950, HIP), one contract: in every block the first
  (warps - copy_warps) warps run `iterations` × MMA_PER_ITERATION tensor-core instructions on register-resident BF16
  operands with FP32 accumulators; the other `copy_warps` warps stream 16-byte vectors from the first half of `buf`
  (`vectors` of them) to the second half until the block's tensor warps are done, and add the bytes they moved
  (read + written) to *bytes. A real GEMM draws its power from both: the tensor cores and the memory traffic that
  feeds them (torch's BF16 matmul holds an H200 at its 700 W cap; an FP32 FMA loop alone reaches 382 W).
- `gpudiag_copy(u8* dst, const u8* src, u64 vectors)`: dst = src, 16-byte vectors, four loads in flight per thread
  (enough bytes in flight per multiprocessor to cover HBM latency: Little's law, ~4.8 TB/s × ~0.6 µs), grid-stride.

The operands are random BF16 values in ±[0.5, 1): two A and two B fragments alternate between the eight
independent accumulator chains so that the multiplier inputs change on every instruction (constant operands would
not toggle the datapath and draw less power than real work), and the sums stay finite (a random walk).

PTX: `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` needs PTX ISA 7.0 and sm_80 (PTX ISA, "Warp-level matrix
multiply-accumulate instructions"); the driver JITs sm_80 PTX forward to sm_90 and sm_100. `wgmma` (sm_90a only) is
faster but is not used: an sm_90a module does not load on any other GPU, and mma.sync already reaches the power cap
together with the streaming warps. The copy kernel is plain sm_52 PTX like kernels.PTX.

MFMA: `__builtin_amdgcn_mfma_f32_32x32x8bf16_1k` (CDNA2 and later: gfx90a, gfx942, gfx950; LLVM AMDGPU builtins),
32×32×8 per wavefront of 64 lanes = 16384 FLOP an instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gpudiag.active.tensor_ptx import COPY_PTX, MMA_PTX

MMA = "gpudiag_mma_bf16"
MFMA = "gpudiag_mfma_bf16"
COPY = "gpudiag_copy"

MMA_PER_ITERATION = 8  # mma.sync instructions per warp and loop iteration (eight accumulator chains)
MMA_FLOP = 16 * 8 * 16 * 2  # m16n8k16: 4096 FLOP a warp-wide instruction
MFMA_PER_ITERATION = 4
MFMA_FLOP = 32 * 32 * 8 * 2  # 32x32x8: 16384 FLOP a wavefront-wide instruction
VECTOR_BYTES = 16
COPY_UNROLL = 4  # vectors each streaming thread keeps in flight

MFMA_ARCHITECTURES = ("gfx942", "gfx950")  # MI300 series, MI350 series


@dataclass(frozen=True)
class Program:
    """Kernel source for one runtime: PTX for the CUDA driver, HIP C++ for hiprtc (`hip_options` passed to it)."""

    name: str
    text: str
    kernels: tuple[str, ...]
    hip_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class StressKernel:
    """The stress kernel a GPU gets and how to count its work: `flop_per_iteration` per tensor warp/wavefront."""

    program: Optional[Program]  # None: the FP32 FMA kernel of kernels.PTX / kernels.HIP_SOURCE
    kernel: str
    precision: str  # "bf16" (tensor cores / matrix cores, FP32 accumulate) | "fp32"
    flop_per_iteration: int
    lanes: int  # threads of a warp (32) or wavefront (64)


def tensor_capable(vendor: str, architecture: Optional[str], compute_capability: Optional[tuple[int, int]]) -> bool:
    if vendor == "nvidia":
        return compute_capability is not None and compute_capability >= (8, 0)
    return (architecture or "").split(":")[0].lower() in MFMA_ARCHITECTURES


# hiprtc compiles these for the device named by --offload-arch; the MFMA program is only ever built for an
# architecture in MFMA_ARCHITECTURES. warpSize is 64 on CDNA: `copy_warps` counts wavefronts there.
HIP_MFMA_SOURCE = r"""
typedef short gpudiag_bf16x4 __attribute__((ext_vector_type(4)));
typedef float gpudiag_f32x16 __attribute__((ext_vector_type(16)));
typedef unsigned int gpudiag_u32x4 __attribute__((ext_vector_type(4)));  /* native: the nontemporal builtins take it */

__device__ static inline short gpudiag_random_bf16(unsigned int* state) {
  *state = *state * 1664525u + 1013904223u;
  return (short)(((*state >> 16) & 0x807Fu) | 0x3F00u);  /* random sign and mantissa, magnitude in [0.5, 1) */
}

extern "C" __global__ void gpudiag_mfma_bf16(float* out, unsigned int iterations, gpudiag_u32x4* buf,
                                             unsigned long long vectors, unsigned int copy_warps,
                                             unsigned long long* bytes) {
  __shared__ unsigned int done_warps;
  const unsigned int wave = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const unsigned int tensor_waves = blockDim.x / warpSize - copy_warps;
  const unsigned int id = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) done_warps = 0;
  __syncthreads();
  if (wave < tensor_waves) {
    unsigned int state = id * 0x9E3779B1u + 12345u;
    gpudiag_bf16x4 a0, a1, b0, b1;
    for (int i = 0; i < 4; ++i) {
      a0[i] = gpudiag_random_bf16(&state); a1[i] = gpudiag_random_bf16(&state);
      b0[i] = gpudiag_random_bf16(&state); b1[i] = gpudiag_random_bf16(&state);
    }
    gpudiag_f32x16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
    for (unsigned int k = 0; k < iterations; ++k) {
      c0 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a0, b0, c0, 0, 0, 0);
      c1 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a1, b1, c1, 0, 0, 0);
      c2 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a0, b1, c2, 0, 0, 0);
      c3 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a1, b0, c3, 0, 0, 0);
    }
    float sum = 0.0f;
    for (int i = 0; i < 16; ++i) sum += c0[i] + c1[i] + c2[i] + c3[i];
    out[id] = sum;
    if (lane == 0) atomicAdd(&done_warps, 1u);
    return;
  }
  const unsigned long long streams = (unsigned long long)gridDim.x * copy_warps * warpSize;
  unsigned long long at = ((unsigned long long)blockIdx.x * copy_warps + (wave - tensor_waves)) * warpSize + lane;
  unsigned long long moved = 0;
  const unsigned int salt = id * 0x9E3779B1u + 777u;
  volatile unsigned int* done = &done_warps;
  while (at < vectors) {
    gpudiag_u32x4 v[4];
    for (int u = 0; u < 4; ++u) v[u] = __builtin_nontemporal_load(&buf[at + u * streams]);
    for (int u = 0; u < 4; ++u) {
      v[u].x ^= salt;
      __builtin_nontemporal_store(v[u], &buf[vectors + at + u * streams]);
    }
    moved += 128;
    at += 4 * streams;
    if (at >= vectors) at -= vectors;
    if (*done >= tensor_waves) break;
  }
  atomicAdd(bytes, moved);
}
"""

HIP_COPY_SOURCE = r"""
typedef unsigned int gpudiag_u32x4 __attribute__((ext_vector_type(4)));

extern "C" __global__ void gpudiag_copy(gpudiag_u32x4* dst, const gpudiag_u32x4* src, unsigned long long vectors) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    const gpudiag_u32x4 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
    dst[i] = v0; dst[i + stride] = v1; dst[i + 2 * stride] = v2; dst[i + 3 * stride] = v3;
  }
  for (; i < vectors; i += stride) dst[i] = src[i];
}
"""

CUDA_MMA = Program("cuda-mma", MMA_PTX, (MMA,))
CUDA_COPY = Program("cuda-copy", COPY_PTX, (COPY,))
HIP_COPY = Program("hip-copy", HIP_COPY_SOURCE, (COPY,))


def hip_mfma(architecture: str) -> Program:
    return Program(f"hip-mfma-{architecture}", HIP_MFMA_SOURCE, (MFMA,), (f"--offload-arch={architecture}",))


def stress_kernel(vendor: str, architecture: Optional[str], compute_capability: Optional[tuple[int, int]],
                  fma_flop_per_iteration: int) -> StressKernel:
    """The tensor kernel where the GPU has one this code drives, else the FP32 FMA kernel (which still loads every
    multiprocessor, at lower power)."""
    if not tensor_capable(vendor, architecture, compute_capability):
        return StressKernel(None, "gpudiag_fma", "fp32", fma_flop_per_iteration, 1)
    if vendor == "nvidia":
        return StressKernel(CUDA_MMA, MMA, "bf16", MMA_PER_ITERATION * MMA_FLOP, 32)
    target = (architecture or "").split(":")[0].lower()
    return StressKernel(hip_mfma(target), MFMA, "bf16", MFMA_PER_ITERATION * MFMA_FLOP, 64)
