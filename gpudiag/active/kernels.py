"""The four diagnostic kernels, as PTX for the CUDA driver's JIT and as HIP C++ for hiprtc, with one contract.

- `gpudiag_fill(u32* buf, u64 words, u32 seed, u32 mode)`: buf[i] = pattern_value(mode, i, seed, &buf[i]),
  grid-stride (mode FIXED: pattern_word(i, seed)).
- `gpudiag_check(const u32* buf, u64 words, u32 seed, u64* result, u32 mode)`: for every word that differs from its
  pattern: result[0] += 1, result[1] = min(result[1], i), ((u32*)result)[4] |= read ^ expected.
  The caller initialises the result slot to {0, UINT64_MAX, 0} (RESULT_SLOT_INIT).
- `gpudiag_invert(u32* buf, u64 words, u32 seed, u64* result, u32 mode)`: as gpudiag_check, and every word is then
  overwritten with the complement of its expected value (a moving-inversions sweep: read, verify, write the
  inverse, in one pass; the next sweep verifies seed ^ 0xFFFFFFFF, which is that complement in the FIXED and
  ADDRESS modes).
- `gpudiag_fma(f32* out, u32 iterations)`: eight independent FMA chains per thread (enough instruction-level
  parallelism to keep the FP32 pipes full at full occupancy), stored so that the compiler cannot drop the loop.

Why kernels and not memset + copy-back for the memory test: a kernel writes and verifies at device-memory speed
(~4 TB/s on H200: a pass over 130 GB takes ~0.1 s), while copying 130 GB back over PCIe (~50 GB/s) and comparing
on the host takes minutes. The pattern is address-dependent (index × an odd constant is a bijection mod 2^32, so
neighbouring words differ and address-line faults show) and each pass seed flips or mixes every bit.

PTX: ISA 7.0 (CUDA 11.0) for `.target sm_52` JITs forward to any later GPU (sm_90 included) on every driver since
CUDA 11; PTX written by a newer nvcc (ISA 9.x) would be refused by older drivers (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
64-bit red.min needs sm_32 or higher (PTX ISA, `atom`/`red` target notes). Constants follow nvcc's spelling:
0x9E3779B1 as the signed decimal -1640531535, floats as 0fXXXXXXXX.
"""

from __future__ import annotations

import struct

FILL = "gpudiag_fill"
CHECK = "gpudiag_check"
FMA = "gpudiag_fma"
INVERT = "gpudiag_invert"
NAMES = (FILL, CHECK, FMA, INVERT)

BLOCK_THREADS = 256
BLOCKS_PER_MULTIPROCESSOR = 8  # 8 × 256 = 2048 threads: one full wave on NVIDIA sm_80/sm_90 and AMD CDNA CUs
FALLBACK_GRID = 4096  # when the runtime does not say how many multiprocessors there are
FMA_PER_ITERATION = 8  # FMA chains in gpudiag_fma, each one FMA per loop iteration

PATTERN_MULTIPLIER = 0x9E3779B1  # odd: i → i × M is a bijection mod 2^32 (golden-ratio hashing constant)
# Seeds of successive passes: all-zero and all-one XOR masks write every bit both ways; 0x55…/0xAA… alternate
# neighbouring bits against each other.
PASS_SEEDS = (0x00000000, 0xFFFFFFFF, 0x55555555, 0xAAAAAAAA)
# Further seeds for longer runs (`--level 3`): pairs of bits and nibbles against each other.
MORE_SEEDS = (0x33333333, 0xCCCCCCCC, 0x0F0F0F0F, 0xF0F0F0F0)
SEEDS = PASS_SEEDS + MORE_SEEDS
INVERTED = 0xFFFFFFFF  # pattern_word(i, seed ^ INVERTED) == ~pattern_word(i, seed)

# The `mode` of gpudiag_fill/check/invert (pattern_value). FIXED: the index pattern above. ADDRESS: each word holds
# its own device address (the 64-bit address folded to 32 bits, low ^ high, then ^ seed): a write that lands at the
# wrong address (an address-line or decoder fault) leaves a word holding another word's address, which the index
# pattern can miss when the two words happen to hold equal values. RANDOM: murmur3's fmix32 of the FIXED value, so
# that neighbouring words and bits take unrelated values (data-dependent faults: coupling between cells).
FIXED, ADDRESS, RANDOM = 0, 1, 2
# (mode, seed) of each memory-test pass. Level 2: the four fixed patterns, the address pass, two random patterns.
LEVEL2_PATTERNS = tuple((FIXED, seed) for seed in PASS_SEEDS) + ((ADDRESS, 0), (RANDOM, 0x2545F491),
                                                                 (RANDOM, 0x9E3779B9))
# Level 3 (with moving inversions on the fixed and address passes: their complement is the pattern of seed ^ ~0).
LEVEL3_PATTERNS = tuple((FIXED, seed) for seed in SEEDS) + ((ADDRESS, 0), (ADDRESS, INVERTED), (RANDOM, 0x2545F491),
                                                            (RANDOM, 0x9E3779B9))

# One result slot per checked chunk: u64 mismatches at +0, u64 first mismatching index at +8, u32 flipped-bit mask
# at +16 (the offsets gpudiag_check writes to), padded to 32 bytes.
RESULT_SLOT_FORMAT = "<QQI12x"
RESULT_SLOT_BYTES = struct.calcsize(RESULT_SLOT_FORMAT)
RESULT_SLOT_INIT = struct.pack(RESULT_SLOT_FORMAT, 0, 0xFFFFFFFFFFFFFFFF, 0)


def pattern_word(index: int, seed: int) -> int:
    """What gpudiag_fill writes at word `index` (for fakes and for reading results)."""
    return ((index * PATTERN_MULTIPLIER) & 0xFFFFFFFF) ^ seed


def pattern_value(mode: int, index: int, seed: int, address: int) -> int:
    """What gpudiag_fill writes at word `index` whose device address is `address`, in `mode`."""
    value = pattern_word(index, seed)
    if mode == ADDRESS:
        return (address & 0xFFFFFFFF) ^ (address >> 32 & 0xFFFFFFFF) ^ seed
    if mode == RANDOM:
        value ^= value >> 16
        value = value * 0x85EBCA6B & 0xFFFFFFFF
        value ^= value >> 13
        value = value * 0xC2B2AE35 & 0xFFFFFFFF
        value ^= value >> 16
    return value


def pattern_name(mode: int, seed: int) -> str:
    return {FIXED: "fixed", ADDRESS: "address-in-address", RANDOM: "random"}[mode] + f" {seed:#010x}"


def parse_result_slot(raw: bytes) -> tuple[int, int, int]:
    """(mismatched words, first mismatching word index or -1, OR of flipped bits)."""
    mismatches, first, mask = struct.unpack(RESULT_SLOT_FORMAT, raw[:RESULT_SLOT_BYTES])
    return mismatches, (-1 if mismatches == 0 else first), mask


_PTX_TEMPLATE = r"""
.version 7.0
.target sm_52
.address_size 64

.visible .entry gpudiag_fill(
	.param .u64 gpudiag_fill_buf,
	.param .u64 gpudiag_fill_words,
	.param .u32 gpudiag_fill_seed,
	.param .u32 gpudiag_fill_mode
)
{
//@PATTERN_REGISTERS
	.reg .pred 	%p<3>;
	.reg .b32 	%r<9>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [gpudiag_fill_buf];
	ld.param.u64 	%rd2, [gpudiag_fill_words];
	ld.param.u32 	%r1, [gpudiag_fill_seed];
//@PATTERN_MODE gpudiag_fill
	cvta.to.global.u64 	%rd1, %rd1;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd3, %r2, %r3;
	cvt.u64.u32 	%rd4, %r4;
	add.s64 	%rd3, %rd3, %rd4;
	mul.wide.u32 	%rd5, %r5, %r3;
	setp.ge.u64 	%p1, %rd3, %rd2;
	@%p1 bra 	FILL_DONE;

FILL_LOOP:
	cvt.u32.u64 	%r6, %rd3;
	mul.lo.s32 	%r7, %r6, -1640531535;
	xor.b32 	%r8, %r7, %r1;
//@PATTERN
	shl.b64 	%rd6, %rd3, 2;
	add.s64 	%rd7, %rd1, %rd6;
	st.global.u32 	[%rd7], %r8;
	add.s64 	%rd3, %rd3, %rd5;
	setp.lt.u64 	%p2, %rd3, %rd2;
	@%p2 bra 	FILL_LOOP;

FILL_DONE:
	ret;
}

.visible .entry gpudiag_check(
	.param .u64 gpudiag_check_buf,
	.param .u64 gpudiag_check_words,
	.param .u32 gpudiag_check_seed,
	.param .u64 gpudiag_check_result,
	.param .u32 gpudiag_check_mode
)
{
//@PATTERN_REGISTERS
	.reg .pred 	%p<4>;
	.reg .b32 	%r<11>;
	.reg .b64 	%rd<12>;

	ld.param.u64 	%rd1, [gpudiag_check_buf];
	ld.param.u64 	%rd2, [gpudiag_check_words];
	ld.param.u32 	%r1, [gpudiag_check_seed];
	ld.param.u64 	%rd8, [gpudiag_check_result];
//@PATTERN_MODE gpudiag_check
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd8, %rd8;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd3, %r2, %r3;
	cvt.u64.u32 	%rd4, %r4;
	add.s64 	%rd3, %rd3, %rd4;
	mul.wide.u32 	%rd5, %r5, %r3;
	setp.ge.u64 	%p1, %rd3, %rd2;
	@%p1 bra 	CHECK_DONE;

CHECK_LOOP:
	cvt.u32.u64 	%r6, %rd3;
	mul.lo.s32 	%r7, %r6, -1640531535;
	xor.b32 	%r8, %r7, %r1;
//@PATTERN
	shl.b64 	%rd6, %rd3, 2;
	add.s64 	%rd7, %rd1, %rd6;
	ld.global.u32 	%r9, [%rd7];
	setp.eq.s32 	%p2, %r9, %r8;
	@%p2 bra 	CHECK_NEXT;

	red.global.add.u64 	[%rd8], 1;
	red.global.min.u64 	[%rd8+8], %rd3;
	xor.b32 	%r10, %r9, %r8;
	red.global.or.b32 	[%rd8+16], %r10;

CHECK_NEXT:
	add.s64 	%rd3, %rd3, %rd5;
	setp.lt.u64 	%p3, %rd3, %rd2;
	@%p3 bra 	CHECK_LOOP;

CHECK_DONE:
	ret;
}

.visible .entry gpudiag_invert(
	.param .u64 gpudiag_invert_buf,
	.param .u64 gpudiag_invert_words,
	.param .u32 gpudiag_invert_seed,
	.param .u64 gpudiag_invert_result,
	.param .u32 gpudiag_invert_mode
)
{
//@PATTERN_REGISTERS
	.reg .pred 	%p<4>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<12>;

	ld.param.u64 	%rd1, [gpudiag_invert_buf];
	ld.param.u64 	%rd2, [gpudiag_invert_words];
	ld.param.u32 	%r1, [gpudiag_invert_seed];
	ld.param.u64 	%rd8, [gpudiag_invert_result];
//@PATTERN_MODE gpudiag_invert
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd8, %rd8;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd3, %r2, %r3;
	cvt.u64.u32 	%rd4, %r4;
	add.s64 	%rd3, %rd3, %rd4;
	mul.wide.u32 	%rd5, %r5, %r3;
	setp.ge.u64 	%p1, %rd3, %rd2;
	@%p1 bra 	INVERT_DONE;

INVERT_LOOP:
	cvt.u32.u64 	%r6, %rd3;
	mul.lo.s32 	%r7, %r6, -1640531535;
	xor.b32 	%r8, %r7, %r1;
//@PATTERN
	shl.b64 	%rd6, %rd3, 2;
	add.s64 	%rd7, %rd1, %rd6;
	ld.global.u32 	%r9, [%rd7];
	not.b32 	%r11, %r8;
	st.global.u32 	[%rd7], %r11;
	setp.eq.s32 	%p2, %r9, %r8;
	@%p2 bra 	INVERT_NEXT;

	red.global.add.u64 	[%rd8], 1;
	red.global.min.u64 	[%rd8+8], %rd3;
	xor.b32 	%r10, %r9, %r8;
	red.global.or.b32 	[%rd8+16], %r10;

INVERT_NEXT:
	add.s64 	%rd3, %rd3, %rd5;
	setp.lt.u64 	%p3, %rd3, %rd2;
	@%p3 bra 	INVERT_LOOP;

INVERT_DONE:
	ret;
}

.visible .entry gpudiag_fma(
	.param .u64 gpudiag_fma_out,
	.param .u32 gpudiag_fma_iterations
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<8>;
	.reg .f32 	%f<14>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [gpudiag_fma_out];
	ld.param.u32 	%r1, [gpudiag_fma_iterations];
	cvta.to.global.u64 	%rd1, %rd1;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mad.lo.s32 	%r5, %r2, %r3, %r4;
	cvt.rn.f32.u32 	%f1, %r5;
	mul.f32 	%f1, %f1, 0f33800000;
	add.f32 	%f2, %f1, 0f3F800000;
	add.f32 	%f3, %f1, 0f40000000;
	add.f32 	%f4, %f1, 0f40400000;
	add.f32 	%f5, %f1, 0f40800000;
	add.f32 	%f6, %f1, 0f40A00000;
	add.f32 	%f7, %f1, 0f40C00000;
	add.f32 	%f8, %f1, 0f40E00000;
	add.f32 	%f9, %f1, 0f41000000;
	mov.f32 	%f10, 0f3F7FFFEF;
	mov.f32 	%f11, 0f358637BD;
	mov.u32 	%r6, 0;
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	FMA_STORE;

FMA_LOOP:
	fma.rn.f32 	%f2, %f2, %f10, %f11;
	fma.rn.f32 	%f3, %f3, %f10, %f11;
	fma.rn.f32 	%f4, %f4, %f10, %f11;
	fma.rn.f32 	%f5, %f5, %f10, %f11;
	fma.rn.f32 	%f6, %f6, %f10, %f11;
	fma.rn.f32 	%f7, %f7, %f10, %f11;
	fma.rn.f32 	%f8, %f8, %f10, %f11;
	fma.rn.f32 	%f9, %f9, %f10, %f11;
	add.s32 	%r6, %r6, 1;
	setp.lt.u32 	%p2, %r6, %r1;
	@%p2 bra 	FMA_LOOP;

FMA_STORE:
	add.f32 	%f12, %f2, %f3;
	add.f32 	%f12, %f12, %f4;
	add.f32 	%f12, %f12, %f5;
	add.f32 	%f12, %f12, %f6;
	add.f32 	%f12, %f12, %f7;
	add.f32 	%f12, %f12, %f8;
	add.f32 	%f12, %f12, %f9;
	mul.wide.u32 	%rd2, %r5, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.f32 	[%rd3], %f12;
	ret;
}
"""

# The pattern word of the three memory kernels (pattern_value), written once: %r8 holds the FIXED value of index %rd3
# (seed %r1) on entry and the word of the kernel's mode on exit; %pd2 is the buffer's generic address. Constants as
# nvcc spells them: 0x85EBCA6B = -2048144789, 0xC2B2AE35 = -1028477387 (murmur3's fmix32).
_PATTERN_REGISTERS = """\t.reg .pred \t%pm<3>;
\t.reg .b32 \t%pa<4>;
\t.reg .b64 \t%pd<3>;
"""
_PATTERN_MODE = """\tld.param.u32 \t%pa3, [{name}_mode];
\tsetp.eq.u32 \t%pm1, %pa3, 1;
\tsetp.eq.u32 \t%pm2, %pa3, 2;
\tld.param.u64 \t%pd2, [{name}_buf];
"""
_PATTERN = """	mov.b64 	%pd0, %rd3;
	shl.b64 	%pd0, %pd0, 2;
	add.s64 	%pd0, %pd0, %pd2;
	cvt.u32.u64 	%pa0, %pd0;
	shr.u64 	%pd1, %pd0, 32;
	cvt.u32.u64 	%pa1, %pd1;
	xor.b32 	%pa0, %pa0, %pa1;
	xor.b32 	%pa0, %pa0, %r1;
	shr.u32 	%pa1, %r8, 16;
	xor.b32 	%pa2, %r8, %pa1;
	mul.lo.u32 	%pa2, %pa2, -2048144789;
	shr.u32 	%pa1, %pa2, 13;
	xor.b32 	%pa2, %pa2, %pa1;
	mul.lo.u32 	%pa2, %pa2, -1028477387;
	shr.u32 	%pa1, %pa2, 16;
	xor.b32 	%pa2, %pa2, %pa1;
	selp.b32 	%r8, %pa0, %r8, %pm1;
	selp.b32 	%r8, %pa2, %r8, %pm2;
"""


def _ptx() -> str:
    text = _PTX_TEMPLATE.replace("//@PATTERN_REGISTERS\n", _PATTERN_REGISTERS).replace("//@PATTERN\n", _PATTERN)
    for name in (FILL, CHECK, INVERT):
        text = text.replace(f"//@PATTERN_MODE {name}\n", _PATTERN_MODE.format(name=name))
    return text


PTX = _ptx()


# The same contract for hiprtc: kernels_hip.py (imported after the constants it documents; hip.py reads it here).
from gpudiag.active.kernels_hip import HIP_SOURCE  # noqa: E402, F401


def grid_for(multiprocessors: int | None) -> int:
    """One full wave of BLOCK_THREADS-thread blocks (grid-stride kernels loop over the rest)."""
    return multiprocessors * BLOCKS_PER_MULTIPROCESSOR if multiprocessors else FALLBACK_GRID
