"""The kernels of the power stress and the HBM bandwidth test, and which one a GPU gets.

- `gpudiag_wgmma_bf16` (NVIDIA Hopper, sm_90a PTX, wgmma_ptx.py), `gpudiag_mma_bf16` (NVIDIA sm_80 and later,
  mma.sync, tensor_ptx.py) and `gpudiag_mfma_bf16` (AMD gfx942/gfx950, HIP, below): one contract (ptx_parts.py).
  Tensor warps run a fixed sequence of BF16 tensor-core instructions with FP32 accumulators on operands that are
  the same in every block, and leave one signature per warp and the block's SM for the host to compare bit for bit
  (stress_verify.py); streaming warps move HBM from one half of a buffer to the other, checking every word they
  read against the pattern it must hold. A real GEMM draws its power from both: the tensor cores and the memory
  traffic that feeds them (torch's BF16 matmul holds an H200 at its 700 W cap; an FP32 FMA loop alone reaches 382 W).
- `gpudiag_copy(u8* dst, const u8* src, u64 vectors)`: dst = src, 16-byte vectors, four loads in flight per thread
  (enough bytes in flight per multiprocessor to cover HBM latency: Little's law, ~4.8 TB/s × ~0.6 µs), grid-stride.

The operands are random BF16 values in ±[0.5, 1): two A and two B operands alternate so that the multiplier inputs
change on every instruction (constant operands would not toggle the datapath and draw less power than real work).

PTX: `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` needs PTX ISA 7.0 and sm_80 (PTX ISA, "Warp-level matrix
multiply-accumulate instructions"); the driver JITs sm_80 PTX forward to sm_90 and sm_100. `wgmma` needs sm_90a,
whose modules load on sm_90 only: Hopper gets it (what cuBLAS runs there), with the mma.sync kernel as the fallback
where the driver refuses the module. The copy kernel is plain sm_52 PTX like kernels.PTX.

MFMA: `__builtin_amdgcn_mfma_f32_32x32x8bf16_1k` (CDNA2 and later: gfx90a, gfx942, gfx950; LLVM AMDGPU builtins),
32×32×8 per wavefront of 64 lanes = 16384 FLOP an instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gpudiag.active import wgmma_ptx
from gpudiag.active.tensor_ptx import COPY_PTX, EXTRA_MMA, MMA, MMA_PER_ITERATION, MMA_PTX
from gpudiag.active.tensor_ptx import STREAM_UNROLL as MMA_STREAM_UNROLL

WGMMA = wgmma_ptx.KERNEL
MFMA = "gpudiag_mfma_bf16"
COPY = "gpudiag_copy"

MMA_FLOP = 16 * 8 * 16 * 2  # m16n8k16: 4096 FLOP a warp-wide instruction
MFMA_PER_ITERATION = 8  # four accumulator chains, each +A·B then −A·B
EXTRA_MFMA = 8 * 4  # each of the ptx_parts.SEGMENTS samples adds an iteration
MFMA_FLOP = 32 * 32 * 8 * 2  # 32x32x8: 16384 FLOP a wavefront-wide instruction
VECTOR_BYTES = 16
COPY_UNROLL = 4  # vectors each streaming thread of the mma.sync and MFMA kernels keeps in flight

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
    """The stress kernel a GPU gets and how to count its work. A tensor unit is what issues one tensor instruction:
    a warp (mma.sync), a warpgroup (wgmma), a wavefront (MFMA); `flop_per_iteration` and `extra_flop` (the half-way
    iteration, once a launch) are per unit."""

    program: Optional[Program]  # None: the FP32 FMA kernel of kernels.PTX / kernels.HIP_SOURCE
    kernel: str
    precision: str  # "bf16" (tensor cores / matrix cores, FP32 accumulate) | "fp32"
    flop_per_iteration: int
    lanes: int  # threads of a warp (32) or wavefront (64)
    block_threads: int = 256
    blocks_per_multiprocessor: int = 4
    extra_flop: int = 0
    stream_unroll: int = COPY_UNROLL
    # wgmma: fixed tensor warps (2 warpgroups) and up to 4 streaming warps beside them; else the block's warps are
    # shared: the last `copy_warps` stream.
    tensor_warps_fixed: Optional[int] = None
    warps_per_unit: int = 1
    fallback: Optional["StressKernel"] = None  # where the driver refuses this kernel's module

    @property
    def verified(self) -> bool:
        return self.program is not None

    def copy_warps(self, requested_32_lane_warps: int) -> int:
        """Streaming warps (wavefronts on AMD) a block gets for `stress_copy_warps` 32-thread warps."""
        warps = self.block_threads // self.lanes
        if self.tensor_warps_fixed is not None:
            # The option counts warps of an 8-warp block at four blocks an SM; the wgmma kernel's one block an SM
            # streams with twice as many of its warps: 2 (the default) → 4 (measured on the lab H200, 20 s each:
            # 4 → 691 TFLOPS and 2,790 GB/s streamed, 2 → 767 and 1,771, 0 → 905; torch 669, all at the 700 W cap).
            return min(2 * requested_32_lane_warps, warps - self.tensor_warps_fixed)
        # a 64-lane wavefront (AMD) streams as much as two 32-lane warps
        return min((requested_32_lane_warps * 32 + self.lanes // 2) // self.lanes, warps - 1)

    def tensor_warps(self, copy_warps: int) -> int:
        if self.tensor_warps_fixed is not None:
            return self.tensor_warps_fixed
        return self.block_threads // self.lanes - copy_warps

    def units(self, copy_warps: int) -> int:
        """Tensor units a block."""
        return self.tensor_warps(copy_warps) // self.warps_per_unit


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

__device__ static inline unsigned int gpudiag_fold(unsigned int h, gpudiag_f32x16 c) {
  for (int i = 0; i < 16; ++i) h = (h ^ __float_as_uint(c[i])) * 16777619u;  /* FNV-1a over the raw bits */
  return h;
}

#define GPUDIAG_MFMA(a0, a1, b0, b1)                                 \
  c0 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a0, b0, c0, 0, 0, 0); \
  c1 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a1, b1, c1, 0, 0, 0); \
  c2 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a0, b1, c2, 0, 0, 0); \
  c3 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a1, b0, c3, 0, 0, 0);

/* The contract of gpudiag/active/ptx_parts.py; the block's place is (XCC << 16) | (SE, SH, CU of HW_ID). */
extern "C" __global__ void gpudiag_mfma_bf16(unsigned int* out, unsigned int iterations, gpudiag_u32x4* buf,
                                             unsigned long long vectors, unsigned int copy_warps,
                                             unsigned long long* bytes, unsigned long long* check,
                                             unsigned int parity, unsigned int src_seed, unsigned int dst_seed,
                                             unsigned int inject_sm) {
  __shared__ unsigned int done_warps;
  const unsigned int wave = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const unsigned int tensor_waves = blockDim.x / warpSize - copy_warps;
  /* HW_REG_HW_ID (hwreg 4): CU_ID 11:8, SH_ID 12, SE_ID 14:13 (ROCm-Device-Libs hip/src/smid.cl); XCC_ID (hwreg 20,
     bits 3:0) exists from gfx940 on. s_getreg's immediate is (size - 1) << 11 | offset << 6 | register. */
  const unsigned int hw_id = __builtin_amdgcn_s_getreg((31 << 11) | 4);
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
  const unsigned int xcc = __builtin_amdgcn_s_getreg((3 << 11) | 20);
#else
  const unsigned int xcc = 0;
#endif
  const unsigned int where = (xcc << 16) | ((hw_id >> 8) & 0x7Fu);
  if (threadIdx.x == 0) done_warps = 0;
  __syncthreads();
  if (wave < tensor_waves) {
    unsigned int state = threadIdx.x * 0x9E3779B1u + 12345u;  /* the thread's place in its block, not the block */
    gpudiag_bf16x4 a0, a1, b0, b1, n0, n1;
    for (int i = 0; i < 4; ++i) {
      a0[i] = gpudiag_random_bf16(&state); a1[i] = gpudiag_random_bf16(&state);
      b0[i] = gpudiag_random_bf16(&state); b1[i] = gpudiag_random_bf16(&state);
      n0[i] = (short)(a0[i] ^ (short)0x8000); n1[i] = (short)(a1[i] ^ (short)0x8000);  /* -A: the sign bit */
    }
    gpudiag_f32x16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
    unsigned int h = 2166136261u, sample = 0;
    const unsigned int part = iterations / 4;  /* ptx_parts.SEGMENTS parts, a sample of the product sums between */
    for (unsigned int segment = 0; segment < 4; ++segment) {
      const unsigned int count = segment == 3 ? iterations - 3 * part : part;
      for (unsigned int k = 0; k < count; ++k) { GPUDIAG_MFMA(a0, a1, b0, b1) GPUDIAG_MFMA(n0, n1, b0, b1) }
      GPUDIAG_MFMA(a0, a1, b0, b1)
      if (where == inject_sm && threadIdx.x == 0 && segment == 1)  /* validation only (ptx_parts.INJECT_BIT) */
        c0[0] = __uint_as_float(__float_as_uint(c0[0]) ^ (1u << 13));
      if (segment == 0) sample = __float_as_uint(c0[0]);
      h = gpudiag_fold(gpudiag_fold(gpudiag_fold(gpudiag_fold(h, c0), c1), c2), c3);
      GPUDIAG_MFMA(n0, n1, b0, b1)
    }
    h = gpudiag_fold(gpudiag_fold(gpudiag_fold(gpudiag_fold(h, c0), c1), c2), c3);
    for (int d = warpSize / 2; d > 0; d /= 2) h ^= __shfl_xor(h, d);
    if (threadIdx.x == 0) {
      out[blockIdx.x * 16] = where;
      out[blockIdx.x * 16 + 9] = sample;
    }
    if (lane == 0) {
      out[blockIdx.x * 16 + 1 + wave] = h;
      atomicAdd(&done_warps, 1u);
    }
    return;
  }
  const unsigned long long streams = (unsigned long long)gridDim.x * copy_warps * warpSize;
  unsigned long long at = ((unsigned long long)blockIdx.x * copy_warps + (wave - tensor_waves)) * warpSize + lane;
  const gpudiag_u32x4* src = buf + (parity ? vectors : 0);
  gpudiag_u32x4* dst = buf + (parity ? 0 : vectors);
  unsigned long long moved = 0, bad = 0, first = ~0ull;
  unsigned int flipped = 0;
  bool first_pass = true;
  volatile unsigned int* done = &done_warps;
  while (vectors) {
    gpudiag_u32x4 v[4];
    for (int u = 0; u < 4; ++u) v[u] = __builtin_nontemporal_load(&src[at + u * streams]);
    unsigned int any = 0;
    for (int u = 0; u < 4; ++u) {
      const unsigned int base = (unsigned int)(at + u * streams) * 4u * 0x9E3779B1u;
      gpudiag_u32x4 w;
      for (int j = 0; j < 4; ++j) {
        const unsigned int pattern = base + (unsigned int)j * 0x9E3779B1u;  /* kernels.pattern_word */
        v[u][j] ^= pattern ^ src_seed;
        any |= v[u][j];
        w[j] = pattern ^ dst_seed;
      }
      __builtin_nontemporal_store(w, &dst[at + u * streams]);
    }
    if (any) {
      for (int u = 0; u < 4; ++u)
        for (int j = 0; j < 4; ++j)
          if (v[u][j]) {
            ++bad;
            flipped |= v[u][j];
            const unsigned long long word = (at + u * streams) * 4 + j;
            first = word < first ? word : first;
          }
    }
    moved += 128;
    at += 4 * streams;
    if (at >= vectors) { at -= vectors; first_pass = false; }
    if (!first_pass && *done >= tensor_waves) break;
  }
  atomicAdd(bytes, moved);
  if (bad) {
    atomicAdd(&check[0], bad);
    atomicMin(&check[1], first);
    atomicOr((unsigned int*)&check[2], flipped);
  }
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
CUDA_WGMMA = Program("cuda-wgmma-sm90a", wgmma_ptx.PTX, (WGMMA,))
CUDA_COPY = Program("cuda-copy", COPY_PTX, (COPY,))
HIP_COPY = Program("hip-copy", HIP_COPY_SOURCE, (COPY,))


def hip_mfma(architecture: str) -> Program:
    return Program(f"hip-mfma-{architecture}", HIP_MFMA_SOURCE, (MFMA,), (f"--offload-arch={architecture}",))


MMA_KERNEL = StressKernel(CUDA_MMA, MMA, "bf16", MMA_PER_ITERATION * MMA_FLOP, 32, extra_flop=EXTRA_MMA * MMA_FLOP,
                          stream_unroll=MMA_STREAM_UNROLL)
WGMMA_KERNEL = StressKernel(
    CUDA_WGMMA, WGMMA, "bf16", wgmma_ptx.WGMMA_PER_ITERATION * wgmma_ptx.WGMMA_FLOP, 32,
    block_threads=wgmma_ptx.BLOCK_THREADS, blocks_per_multiprocessor=1,
    extra_flop=wgmma_ptx.EXTRA_WGMMA * wgmma_ptx.WGMMA_FLOP, stream_unroll=wgmma_ptx.STREAM_UNROLL,
    tensor_warps_fixed=wgmma_ptx.TENSOR_WARPS, warps_per_unit=4, fallback=MMA_KERNEL)


def stress_kernel(vendor: str, architecture: Optional[str], compute_capability: Optional[tuple[int, int]],
                  fma_flop_per_iteration: int) -> StressKernel:
    """The tensor kernel where the GPU has one this code drives, else the FP32 FMA kernel (which still loads every
    multiprocessor, at lower power, unverified)."""
    if not tensor_capable(vendor, architecture, compute_capability):
        return StressKernel(None, "gpudiag_fma", "fp32", fma_flop_per_iteration, 1)
    if vendor == "nvidia":
        return WGMMA_KERNEL if compute_capability == (9, 0) else MMA_KERNEL
    target = (architecture or "").split(":")[0].lower()
    return StressKernel(hip_mfma(target), MFMA, "bf16", MFMA_PER_ITERATION * MFMA_FLOP, 64,
                        extra_flop=EXTRA_MFMA * MFMA_FLOP)
