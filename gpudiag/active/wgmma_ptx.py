"""PTX of the Hopper stress kernel `gpudiag_wgmma_bf16` (sm_90a): `wgmma.mma_async` — the warpgroup tensor-core
instruction cuBLAS and every training framework run on H100/H200 — with the verified HBM stream beside it. The
contract is ptx_parts.py's.

A block is three warpgroups (384 threads, one block per SM: 2 × 128 accumulator registers a thread do not leave
room for a second): warpgroups 0 and 1 each run `iterations` × WGMMA_PER_ITERATION m64n256k16 BF16 wgmma with FP32
accumulators, warpgroup 2 streams HBM (its first `copy_warps` warps). Operands: two A tiles (64×16) and two B tiles
(256×16) of random BF16 values in ±[0.5, 1) in shared memory, the same in every block; one iteration is
+A0·B0, +A1·B1, −A0·B0, −A1·B1 (imm-scale-a = −1 negates A in the instruction), so that the multiplier inputs change
on every instruction and the accumulators return to zero (on the lab H200 exactly zero: the signature of a launch
without samples was the FNV of zeros), and an error in one product stays in them. The samples between the parts
(+A0·B0 or +A1·B1 read out after `wgmma.wait_group 0`, then taken back) check the product sums themselves.

Shared-memory descriptors (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13, leading-dimension
byte offset >> 4 in bits 16-29 (128: the next 8×16-byte core matrix along K), stride byte offset >> 4 in bits 32-45
(256: the next core matrix along M/N), no swizzle. The tiles are written by ordinary stores and read by the tensor
cores' async proxy: `fence.proxy.async.shared::cta` before the barrier (PTX ISA, "Async proxy").

Needs PTX ISA 8.0 (CUDA 12.0 drivers) and the sm_90a target: a module for it loads on sm_90 GPUs only; elsewhere,
or where the driver refuses it, the stress falls back to the mma.sync kernel (tensor_kernels.stress_kernel).
"""

from __future__ import annotations

from gpudiag.active import ptx_parts

KERNEL = "gpudiag_wgmma_bf16"
BLOCK_THREADS = 384
TENSOR_WARPS = 8
WARPGROUPS = 2  # tensor warpgroups a block
WGMMA_PER_ITERATION = 4
WGMMA_FLOP = 64 * 256 * 16 * 2  # m64n256k16: 524,288 FLOP a warpgroup-wide instruction
EXTRA_WGMMA = 2 * ptx_parts.SEGMENTS  # each sample adds a pair (+A·B, read out, then −A·B)
STREAM_UNROLL = 8  # vectors each streaming thread keeps in flight (one block a SM: 128 threads at most stream)
TILE_WORDS = 5120  # A0, A1 (2 KiB each), B0, B1 (8 KiB each) as 32-bit words
_A0, _A1, _B0, _B1 = 0, 2048, 4096, 12288  # byte offsets of the tiles
_DESCRIPTOR_OFFSETS = (8 << 16) | (16 << 32)  # LBO 128 B, SBO 256 B, no swizzle
ACCUMULATORS = [f"%d{i}" for i in range(128)]


def _wgmma(a: str, b: str, scale_a: int) -> str:
    registers = ", ".join(ACCUMULATORS)
    return (f"\twgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{registers}}}, {a}, {b}, %wp, "
            f"{scale_a}, 1, 0, 0;\n")


def _loop(label: str, count: str) -> str:
    body = (_wgmma("%wa0", "%wb0", 1) + _wgmma("%wa1", "%wb1", 1) + _wgmma("%wa0", "%wb0", -1)
            + _wgmma("%wa1", "%wb1", -1))
    return (f"\tmov.u32 \t%w4, 0;\n\tsetp.eq.u32 \t%q1, {count}, 0;\n\t@%q1 bra \t{label}_DONE;\n{label}:\n"
            f"\twgmma.fence.sync.aligned;\n{body}\twgmma.commit_group.sync.aligned;\n"
            f"\twgmma.wait_group.sync.aligned 1;\n\tadd.u32 \t%w4, %w4, 1;\n\tsetp.lt.u32 \t%q1, %w4, {count};\n"
            f"\t@%q1 bra \t{label};\n{label}_DONE:\n")


def _descriptor(register: str, offset: int) -> str:
    return (f"\tadd.u32 \t%w5, %w0, {offset};\n\tcvt.u64.u32 \t{register}, %w5;\n"
            f"\tshr.u64 \t{register}, {register}, 4;\n\tand.b64 \t{register}, {register}, 16383;\n"
            f"\tor.b64 \t{register}, {register}, {_DESCRIPTOR_OFFSETS};\n")


def _verified_tensor_part() -> str:
    return f"""{ptx_parts.segments("%c1", "%w6", "%w7", "%w8", "%w9", "%w10", "%w11")}{_loop("PART", "%w11")}    and.b32     %w12, %w8, 1;
    setp.ne.u32     %q3, %w12, 0;
    selp.b64    %wc0, %wa1, %wa0, %q3;
    selp.b64    %wc1, %wb1, %wb0, %q3;
    wgmma.fence.sync.aligned;
{_wgmma("%wc0", "%wc1", 1)}    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
{ptx_parts.injection("%d0", "%w8")}    setp.eq.u32     %q2, %w8, 0;
    @%q2 mov.b32    %w10, %d0;
{ptx_parts.fold(ACCUMULATORS, "%w9")}    wgmma.fence.sync.aligned;
{_wgmma("%wc0", "%wc1", -1)}    wgmma.commit_group.sync.aligned;
{ptx_parts.next_segment("%w8")}    wgmma.wait_group.sync.aligned 0;
{ptx_parts.signature(ACCUMULATORS, "TENSOR_DONE", "%w9", "%w10")}
"""


def ptx(verified: bool = True) -> str:
    """The kernel; verified=False (bench/verified_stress.py's baseline for the cost of the verification only): the
    same tensor work in one loop, no samples, only thread 0's first accumulator kept."""
    stream_declarations, stream_code = ptx_parts.stream(STREAM_UNROLL, str(TENSOR_WARPS), str(TENSOR_WARPS))
    zero = "".join(f"\tmov.f32 \t{r}, 0f00000000;\n" for r in ACCUMULATORS)
    tensor = _verified_tensor_part() if verified else (
        f"{_loop('PART', '%c1')}\twgmma.wait_group.sync.aligned 0;\n\tmov.b32 \t%w10, %d0;\n"
        f"{ptx_parts.signature(['%d0'], 'TENSOR_DONE', '%w10', '%w10')}")
    return f"""
.version 8.0
.target sm_90a
.address_size 64

.visible .entry {KERNEL}{ptx_parts.PARAMS}
.maxntid {BLOCK_THREADS}, 1, 1
{{
{ptx_parts.COMMON_DECLARATIONS}
    .reg .pred  %wp;
    .reg .b32   %w<16>;
    .reg .b64   %wa<2>;
    .reg .b64   %wc<2>;
    .reg .b64   %wb<2>;
    .reg .f32   %d<128>;
{stream_declarations}
    .shared .align 128 .b8 tiles[{TILE_WORDS * 4}];
    .shared .align 4 .u32 done_warps;
{ptx_parts.load_params()}
    mov.u32     %w0, tiles;
    setp.ge.u32     %q1, %c7, {TENSOR_WARPS * 32};
    @%q1 bra    FILL_DONE;
    mov.u32     %w1, %c7;
FILL:
    mad.lo.s32  %w2, %w1, {ptx_parts.PATTERN_MULTIPLIER}, 12345;
{ptx_parts.random_bf16x2("%w2", "%w3")}    shl.b32     %w5, %w1, 2;
    add.u32     %w5, %w5, %w0;
    st.shared.u32   [%w5], %w3;
    add.u32     %w1, %w1, {TENSOR_WARPS * 32};
    setp.lt.u32     %q1, %w1, {TILE_WORDS};
    @%q1 bra    FILL;
FILL_DONE:
    setp.ne.u32     %q1, %c7, 0;
    @%q1 bra    INIT_DONE;
    st.shared.u32   [done_warps], 0;
INIT_DONE:
    fence.proxy.async.shared::cta;
    bar.sync    0;
    setp.ge.u32     %q1, %c8, {TENSOR_WARPS};
    @%q1 bra    STREAM;

{_descriptor("%wa0", _A0)}{_descriptor("%wa1", _A1)}{_descriptor("%wb0", _B0)}{_descriptor("%wb1", _B1)}
    mov.u32     %w6, 1;
    setp.ne.u32     %wp, %w6, 0;
{zero}{tensor}{stream_code}}}
"""


PTX = ptx()
