"""The diagnostic kernels of kernels.py (fill, check, invert, FMA) as HIP C++ for hiprtc, with the same contract and
pattern modes (kernels.pattern_value)."""

# The same contract for hiprtc. Without --offload-arch, hiprtc compiles for the current device's ISA (it asks the
# HIP runtime: RTCProgram::findIsa in ROCm's hiprtc), so the caller makes the device current first.
HIP_SOURCE = r"""
/* kernels.pattern_value: 0 fixed (index × M ^ seed), 1 address-in-address, 2 random (murmur3's fmix32 of mode 0) */
__device__ static inline unsigned int gpudiag_pattern(const unsigned int* buf, unsigned long long i, unsigned int seed,
                                                      unsigned int mode) {
  unsigned int v = ((unsigned int)i * 0x9E3779B1u) ^ seed;
  if (mode == 1) {
    const unsigned long long address = (unsigned long long)(buf + i);
    v = (unsigned int)address ^ (unsigned int)(address >> 32) ^ seed;
  } else if (mode == 2) {
    v ^= v >> 16; v *= 0x85EBCA6Bu; v ^= v >> 13; v *= 0xC2B2AE35u; v ^= v >> 16;
  }
  return v;
}

extern "C" __global__ void gpudiag_fill(unsigned int* buf, unsigned long long words, unsigned int seed,
                                        unsigned int mode) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
    buf[i] = gpudiag_pattern(buf, i, seed, mode);
}

extern "C" __global__ void gpudiag_check(const unsigned int* buf, unsigned long long words, unsigned int seed,
                                         unsigned long long* result, unsigned int mode) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
    const unsigned int want = gpudiag_pattern(buf, i, seed, mode);
    const unsigned int got = buf[i];
    if (got != want) {
      atomicAdd(&result[0], 1ull);
      atomicMin(&result[1], i);
      atomicOr((unsigned int*)&result[2], got ^ want);
    }
  }
}

extern "C" __global__ void gpudiag_invert(unsigned int* buf, unsigned long long words, unsigned int seed,
                                          unsigned long long* result, unsigned int mode) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
    const unsigned int want = gpudiag_pattern(buf, i, seed, mode);
    const unsigned int got = buf[i];
    buf[i] = ~want;
    if (got != want) {
      atomicAdd(&result[0], 1ull);
      atomicMin(&result[1], i);
      atomicOr((unsigned int*)&result[2], got ^ want);
    }
  }
}

extern "C" __global__ void gpudiag_fma(float* out, unsigned int iterations) {
  const unsigned int id = blockIdx.x * blockDim.x + threadIdx.x;
  const float base = (float)id * 5.9604645e-8f;
  float a0 = base + 1.0f, a1 = base + 2.0f, a2 = base + 3.0f, a3 = base + 4.0f;
  float a4 = base + 5.0f, a5 = base + 6.0f, a6 = base + 7.0f, a7 = base + 8.0f;
  const float m = 0.999999f, c = 1.0e-6f;
  for (unsigned int k = 0; k < iterations; ++k) {
    a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);
    a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);
  }
  out[id] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""
