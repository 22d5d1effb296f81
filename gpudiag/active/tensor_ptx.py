"""PTX of the mma.sync stress kernel (sm_80+; its contract is ptx_parts.py's, the Hopper kernel is wgmma_ptx.py's)
and the HBM copy kernel (sm_52+): the operand choice and the ISA notes are in tensor_kernels.py, which loads these
through the CUDA driver's JIT.

mma.sync has no negation modifier: −A is A with the sign bit of both BF16 halves of each register flipped. Each
iteration adds A·B to the eight chains, then (−A)·B, so the accumulators stay near zero, with a sample of A·B
folded in between the SEGMENTS parts of a launch (ptx_parts.py says why)."""

from __future__ import annotations

from gpudiag.active import ptx_parts

MMA_PER_ITERATION = 16  # eight accumulator chains, each +A·B then −A·B
EXTRA_MMA = 16 * ptx_parts.SEGMENTS  # each sample adds an iteration (+A·B, read out, then −A·B)
STREAM_UNROLL = 4
_CHAINS = ((0, 0), (1, 1), (0, 1), (1, 0)) * 2  # (A set, B set) of each accumulator chain


def _mma_pass(negated: bool) -> str:
    lines = []
    for chain, (a, b) in enumerate(_CHAINS):
        f = ", ".join(f"%f{4 * chain + k}" for k in range(4))
        regs = "%rn" if negated else "%ra"
        a_regs = ", ".join(f"{regs}{4 * a + k}" for k in range(4))
        b_regs = f"%rb{2 * b}, %rb{2 * b + 1}"
        lines.append(f"\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \t{{{f}}}, {{{a_regs}}}, {{{b_regs}}}, "
                     f"{{{f}}};")
    return "\n".join(lines) + "\n"


def _mma_loop(label: str, count: str) -> str:
    return (f"\tmov.u32 \t%m4, 0;\n\tsetp.eq.u32 \t%q1, {count}, 0;\n\t@%q1 bra \t{label}_DONE;\n{label}:\n"
            f"{_mma_pass(False)}{_mma_pass(True)}\tadd.u32 \t%m4, %m4, 1;\n\tsetp.lt.u32 \t%q1, %m4, {count};\n"
            f"\t@%q1 bra \t{label};\n{label}_DONE:\n")


def mma_ptx() -> str:
    """gpudiag_mma_bf16: 8 warps a block, the first 8 - copy_warps run mma.sync, the others stream."""
    accumulators = [f"%f{i}" for i in range(32)]
    stream_declarations, stream_code = ptx_parts.stream(STREAM_UNROLL, "%m1", "%m1")
    operands = "".join(ptx_parts.random_bf16x2("%m2", f"%ra{i}") for i in range(8))
    operands += "".join(ptx_parts.random_bf16x2("%m2", f"%rb{i}") for i in range(4))
    operands += "".join(f"\txor.b32 \t%rn{i}, %ra{i}, 0x80008000;\n" for i in range(8))  # −A: both signs flipped
    zero = "".join(f"\tmov.f32 \t{r}, 0f00000000;\n" for r in accumulators)
    return f"""
.version 7.0
.target sm_80
.address_size 64

.visible .entry {MMA}{ptx_parts.PARAMS}
.maxntid 256, 1, 1
.minnctapersm 4
{{
{ptx_parts.COMMON_DECLARATIONS}
    .reg .b32   %m<10>;
    .reg .b32   %ra<8>;
    .reg .b32   %rn<8>;
    .reg .b32   %rb<4>;
    .reg .f32   %f<32>;
{stream_declarations}
    .shared .align 4 .u32 done_warps;
{ptx_parts.load_params()}
    mov.u32     %m0, %ntid.x;
    shr.u32     %m0, %m0, 5;
    sub.u32     %m1, %m0, %c2;
    setp.ne.u32     %q1, %c7, 0;
    @%q1 bra    INIT_DONE;
    st.shared.u32   [done_warps], 0;
INIT_DONE:
    bar.sync    0;
    setp.ge.u32     %q1, %c8, %m1;
    @%q1 bra    STREAM;

    mad.lo.s32  %m2, %c7, {ptx_parts.PATTERN_MULTIPLIER}, 12345;
{operands}{zero}{ptx_parts.segments("%c1", "%m5", "%m6", "%m3", "%m7", "%m8", "%m9")}{_mma_loop("PART", "%m9")}{_mma_pass(False)}{ptx_parts.injection("%f0", "%m3")}    setp.eq.u32     %q2, %m3, 0;
    @%q2 mov.b32    %m8, %f0;
{ptx_parts.fold(accumulators, "%m7")}{_mma_pass(True)}{ptx_parts.next_segment("%m3")}{ptx_parts.signature(accumulators, "TENSOR_DONE", "%m7", "%m8")}
{stream_code}}}
"""


MMA = "gpudiag_mma_bf16"
MMA_PTX = mma_ptx()

COPY_PTX = r"""
.version 7.0
.target sm_52
.address_size 64

.visible .entry gpudiag_copy(
	.param .u64 p_dst,
	.param .u64 p_src,
	.param .u64 p_vectors
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<6>;
	.reg .b32 	%v<16>;
	.reg .b64 	%rd<20>;

	ld.param.u64 	%rd1, [p_dst];
	ld.param.u64 	%rd2, [p_src];
	ld.param.u64 	%rd3, [p_vectors];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mul.wide.u32 	%rd4, %r1, %r2;
	cvt.u64.u32 	%rd5, %r3;
	add.s64 	%rd4, %rd4, %rd5;
	mul.wide.u32 	%rd5, %r4, %r2;
	shl.b64 	%rd6, %rd5, 4;
	shl.b64 	%rd7, %rd5, 2;
	add.s64 	%rd8, %rd4, %rd7;

UNROLLED:
	setp.gt.u64 	%p1, %rd8, %rd3;
	@%p1 bra 	TAIL;
	shl.b64 	%rd9, %rd4, 4;
	add.s64 	%rd10, %rd2, %rd9;
	add.s64 	%rd11, %rd10, %rd6;
	add.s64 	%rd12, %rd11, %rd6;
	add.s64 	%rd13, %rd12, %rd6;
	ld.global.cs.v4.u32 	{%v0, %v1, %v2, %v3}, [%rd10];
	ld.global.cs.v4.u32 	{%v4, %v5, %v6, %v7}, [%rd11];
	ld.global.cs.v4.u32 	{%v8, %v9, %v10, %v11}, [%rd12];
	ld.global.cs.v4.u32 	{%v12, %v13, %v14, %v15}, [%rd13];
	add.s64 	%rd14, %rd1, %rd9;
	add.s64 	%rd15, %rd14, %rd6;
	add.s64 	%rd16, %rd15, %rd6;
	add.s64 	%rd17, %rd16, %rd6;
	st.global.cs.v4.u32 	[%rd14], {%v0, %v1, %v2, %v3};
	st.global.cs.v4.u32 	[%rd15], {%v4, %v5, %v6, %v7};
	st.global.cs.v4.u32 	[%rd16], {%v8, %v9, %v10, %v11};
	st.global.cs.v4.u32 	[%rd17], {%v12, %v13, %v14, %v15};
	add.s64 	%rd4, %rd4, %rd7;
	add.s64 	%rd8, %rd8, %rd7;
	bra.uni 	UNROLLED;

TAIL:
	setp.ge.u64 	%p2, %rd4, %rd3;
	@%p2 bra 	COPY_DONE;
	shl.b64 	%rd9, %rd4, 4;
	add.s64 	%rd10, %rd2, %rd9;
	ld.global.cs.v4.u32 	{%v0, %v1, %v2, %v3}, [%rd10];
	add.s64 	%rd14, %rd1, %rd9;
	st.global.cs.v4.u32 	[%rd14], {%v0, %v1, %v2, %v3};
	add.s64 	%rd4, %rd4, %rd5;
	bra.uni 	TAIL;

COPY_DONE:
	ret;
}
"""
