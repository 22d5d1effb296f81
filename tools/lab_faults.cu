// Real application faults for the kernel-log corpus (issue 21, item 7): each case makes one fault of the kind an
// application makes, in a process of its own, so that the driver's Xid lines for that one fault can be read apart.
// The GPU is never reset and its settings are never touched: these faults end the faulting process's context only.
//
// Build: nvcc -arch=sm_90 -o lab_faults tools/lab_faults.cu      Run: ./lab_faults CASE
// Cases: illegal_read (an address nothing maps: Xid 31 expected), illegal_write, null_read, misaligned_load
// (a 4-byte load from an odd address: Xid 13 expected), misaligned_store, trap (__trap()), assert (a failed device
// assert), illegal_instruction (an undefined opcode via brkpt), shared_oob (out-of-range shared address).
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void read_at(const int *p, int *out) { out[threadIdx.x] = p[threadIdx.x]; }
__global__ void write_at(int *p) { p[threadIdx.x] = 42; }
__global__ void read_misaligned(const char *base, int *out) {
    out[threadIdx.x] = *reinterpret_cast<const int *>(base + 1 + 4 * threadIdx.x);
}
__global__ void write_misaligned(char *base) { *reinterpret_cast<int *>(base + 1 + 4 * threadIdx.x) = 7; }
__global__ void trap_kernel(int *out) {
    if (threadIdx.x == 0) __trap();
    out[threadIdx.x] = 1;
}
__global__ void assert_kernel(int *out, int value) {
    assert(value == 0);
    out[threadIdx.x] = value;
}
__global__ void brkpt_kernel(int *out) {
    asm volatile("brkpt;");
    out[threadIdx.x] = 1;
}
__global__ void shared_oob(int *out, int offset) {
    extern __shared__ int tile[];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x + offset];  // offset far past the block's shared memory
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    const char *which = argv[1];
    int *out = nullptr;
    char *buf = nullptr;
    cudaError_t err = cudaMalloc(&out, 4096);
    if (err == cudaSuccess) err = cudaMalloc(&buf, 4096);
    if (err != cudaSuccess) {
        fprintf(stderr, "setup: %s\n", cudaGetErrorString(err));
        return 3;
    }
    // An address far from every allocation: the top of the 49-bit GPU virtual range less 64 GiB, never mapped.
    int *unmapped = reinterpret_cast<int *>((1ull << 48) - (64ull << 30));
    if (!strcmp(which, "illegal_read")) read_at<<<1, 32>>>(unmapped, out);
    else if (!strcmp(which, "illegal_write")) write_at<<<1, 32>>>(unmapped);
    else if (!strcmp(which, "null_read")) read_at<<<1, 32>>>(nullptr, out);
    else if (!strcmp(which, "misaligned_load")) read_misaligned<<<1, 32>>>(buf, out);
    else if (!strcmp(which, "misaligned_store")) write_misaligned<<<1, 32>>>(buf);
    else if (!strcmp(which, "trap")) trap_kernel<<<1, 32>>>(out);
    else if (!strcmp(which, "assert")) assert_kernel<<<1, 32>>>(out, 1);
    else if (!strcmp(which, "illegal_instruction")) brkpt_kernel<<<1, 32>>>(out);
    else if (!strcmp(which, "shared_oob")) shared_oob<<<1, 32, 32 * sizeof(int)>>>(out, 1 << 24);
    else {
        fprintf(stderr, "unknown case %s\n", which);
        return 2;
    }
    cudaError_t launch = cudaGetLastError();
    cudaError_t done = cudaDeviceSynchronize();
    printf("case=%s launch=%s sync=%s\n", which, cudaGetErrorName(launch), cudaGetErrorName(done));
    return done == cudaSuccess ? 1 : 0;  // 0: the fault happened as intended
}
