"""PTX of the tensor-core stress kernel (sm_80+) and the HBM copy kernel (sm_52+): the contracts, the operand choice
and the ISA notes are in tensor_kernels.py, which loads these through the CUDA driver's JIT."""

MMA_PTX = r"""
.version 7.0
.target sm_80
.address_size 64

.visible .entry gpudiag_mma_bf16(
	.param .u64 p_out,
	.param .u32 p_iterations,
	.param .u64 p_buf,
	.param .u64 p_vectors,
	.param .u32 p_copy_warps,
	.param .u64 p_bytes
)
{
	.reg .pred 	%p<6>;
	.reg .b32 	%r<24>;
	.reg .b32 	%ra<8>;
	.reg .b32 	%rb<4>;
	.reg .b32 	%v<16>;
	.reg .b64 	%rd<24>;
	.reg .f32 	%f<34>;
	.shared .align 4 .u32 done_warps;

	ld.param.u64 	%rd1, [p_out];
	ld.param.u32 	%r1, [p_iterations];
	ld.param.u64 	%rd2, [p_buf];
	ld.param.u64 	%rd3, [p_vectors];
	ld.param.u32 	%r2, [p_copy_warps];
	ld.param.u64 	%rd4, [p_bytes];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	cvta.to.global.u64 	%rd4, %rd4;
	mov.u32 	%r3, %tid.x;
	shr.u32 	%r4, %r3, 5;
	and.b32 	%r5, %r3, 31;
	mov.u32 	%r6, %ntid.x;
	shr.u32 	%r7, %r6, 5;
	sub.u32 	%r8, %r7, %r2;
	mov.u32 	%r9, %ctaid.x;
	mad.lo.s32 	%r10, %r9, %r6, %r3;
	setp.ne.u32 	%p1, %r3, 0;
	@%p1 bra 	INIT_DONE;
	mov.u32 	%r11, 0;
	st.shared.u32 	[done_warps], %r11;
INIT_DONE:
	bar.sync 	0;
	setp.ge.u32 	%p2, %r4, %r8;
	@%p2 bra 	STREAM;

	mad.lo.s32 	%r12, %r10, -1640531535, 12345;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra0, %r12, 0x807F807F;
	or.b32 	%ra0, %ra0, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra1, %r12, 0x807F807F;
	or.b32 	%ra1, %ra1, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra2, %r12, 0x807F807F;
	or.b32 	%ra2, %ra2, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra3, %r12, 0x807F807F;
	or.b32 	%ra3, %ra3, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra4, %r12, 0x807F807F;
	or.b32 	%ra4, %ra4, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra5, %r12, 0x807F807F;
	or.b32 	%ra5, %ra5, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra6, %r12, 0x807F807F;
	or.b32 	%ra6, %ra6, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%ra7, %r12, 0x807F807F;
	or.b32 	%ra7, %ra7, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%rb0, %r12, 0x807F807F;
	or.b32 	%rb0, %rb0, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%rb1, %r12, 0x807F807F;
	or.b32 	%rb1, %rb1, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%rb2, %r12, 0x807F807F;
	or.b32 	%rb2, %rb2, 0x3F003F00;
	mad.lo.s32 	%r12, %r12, 1664525, 1013904223;
	and.b32 	%rb3, %r12, 0x807F807F;
	or.b32 	%rb3, %rb3, 0x3F003F00;
	mov.f32 	%f0, 0f00000000;
	mov.f32 	%f1, 0f00000000;
	mov.f32 	%f2, 0f00000000;
	mov.f32 	%f3, 0f00000000;
	mov.f32 	%f4, 0f00000000;
	mov.f32 	%f5, 0f00000000;
	mov.f32 	%f6, 0f00000000;
	mov.f32 	%f7, 0f00000000;
	mov.f32 	%f8, 0f00000000;
	mov.f32 	%f9, 0f00000000;
	mov.f32 	%f10, 0f00000000;
	mov.f32 	%f11, 0f00000000;
	mov.f32 	%f12, 0f00000000;
	mov.f32 	%f13, 0f00000000;
	mov.f32 	%f14, 0f00000000;
	mov.f32 	%f15, 0f00000000;
	mov.f32 	%f16, 0f00000000;
	mov.f32 	%f17, 0f00000000;
	mov.f32 	%f18, 0f00000000;
	mov.f32 	%f19, 0f00000000;
	mov.f32 	%f20, 0f00000000;
	mov.f32 	%f21, 0f00000000;
	mov.f32 	%f22, 0f00000000;
	mov.f32 	%f23, 0f00000000;
	mov.f32 	%f24, 0f00000000;
	mov.f32 	%f25, 0f00000000;
	mov.f32 	%f26, 0f00000000;
	mov.f32 	%f27, 0f00000000;
	mov.f32 	%f28, 0f00000000;
	mov.f32 	%f29, 0f00000000;
	mov.f32 	%f30, 0f00000000;
	mov.f32 	%f31, 0f00000000;
	mov.u32 	%r13, 0;
	setp.eq.u32 	%p3, %r1, 0;
	@%p3 bra 	MMA_DONE;

MMA_LOOP:
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f4, %f5, %f6, %f7}, {%ra4, %ra5, %ra6, %ra7}, {%rb2, %rb3}, {%f4, %f5, %f6, %f7};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f8, %f9, %f10, %f11}, {%ra0, %ra1, %ra2, %ra3}, {%rb2, %rb3}, {%f8, %f9, %f10, %f11};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f12, %f13, %f14, %f15}, {%ra4, %ra5, %ra6, %ra7}, {%rb0, %rb1}, {%f12, %f13, %f14, %f15};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f16, %f17, %f18, %f19}, {%ra0, %ra1, %ra2, %ra3}, {%rb0, %rb1}, {%f16, %f17, %f18, %f19};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f20, %f21, %f22, %f23}, {%ra4, %ra5, %ra6, %ra7}, {%rb2, %rb3}, {%f20, %f21, %f22, %f23};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f24, %f25, %f26, %f27}, {%ra0, %ra1, %ra2, %ra3}, {%rb2, %rb3}, {%f24, %f25, %f26, %f27};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f28, %f29, %f30, %f31}, {%ra4, %ra5, %ra6, %ra7}, {%rb0, %rb1}, {%f28, %f29, %f30, %f31};
	add.s32 	%r13, %r13, 1;
	setp.lt.u32 	%p4, %r13, %r1;
	@%p4 bra 	MMA_LOOP;

MMA_DONE:
	add.f32 	%f32, %f0, %f1;
	add.f32 	%f32, %f32, %f2;
	add.f32 	%f32, %f32, %f3;
	add.f32 	%f32, %f32, %f4;
	add.f32 	%f32, %f32, %f5;
	add.f32 	%f32, %f32, %f6;
	add.f32 	%f32, %f32, %f7;
	add.f32 	%f32, %f32, %f8;
	add.f32 	%f32, %f32, %f9;
	add.f32 	%f32, %f32, %f10;
	add.f32 	%f32, %f32, %f11;
	add.f32 	%f32, %f32, %f12;
	add.f32 	%f32, %f32, %f13;
	add.f32 	%f32, %f32, %f14;
	add.f32 	%f32, %f32, %f15;
	add.f32 	%f32, %f32, %f16;
	add.f32 	%f32, %f32, %f17;
	add.f32 	%f32, %f32, %f18;
	add.f32 	%f32, %f32, %f19;
	add.f32 	%f32, %f32, %f20;
	add.f32 	%f32, %f32, %f21;
	add.f32 	%f32, %f32, %f22;
	add.f32 	%f32, %f32, %f23;
	add.f32 	%f32, %f32, %f24;
	add.f32 	%f32, %f32, %f25;
	add.f32 	%f32, %f32, %f26;
	add.f32 	%f32, %f32, %f27;
	add.f32 	%f32, %f32, %f28;
	add.f32 	%f32, %f32, %f29;
	add.f32 	%f32, %f32, %f30;
	add.f32 	%f32, %f32, %f31;
	mul.wide.u32 	%rd5, %r10, 4;
	add.s64 	%rd5, %rd1, %rd5;
	st.global.f32 	[%rd5], %f32;
	setp.ne.u32 	%p5, %r5, 0;
	@%p5 bra 	MMA_EXIT;
	atom.shared.add.u32 	%r14, [done_warps], 1;
MMA_EXIT:
	ret;

STREAM:
	// streaming thread t of T = nctaid * copy_warps * 32; vectors is a multiple of 4T (the host rounds it)
	mov.u32 	%r15, %nctaid.x;
	mul.lo.s32 	%r16, %r15, %r2;
	shl.b32 	%r16, %r16, 5;
	sub.u32 	%r17, %r4, %r8;
	mad.lo.s32 	%r17, %r9, %r2, %r17;
	shl.b32 	%r17, %r17, 5;
	add.u32 	%r17, %r17, %r5;
	cvt.u64.u32 	%rd6, %r17;
	cvt.u64.u32 	%rd7, %r16;
	shl.b64 	%rd8, %rd7, 4;
	shl.b64 	%rd9, %rd3, 4;
	add.s64 	%rd10, %rd2, %rd9;
	mov.u64 	%rd11, 0;
	mad.lo.s32 	%r18, %r10, -1640531535, 777;
	setp.lt.u64 	%p1, %rd6, %rd3;
	@!%p1 bra 	STREAM_DONE;

STREAM_LOOP:
	shl.b64 	%rd12, %rd6, 4;
	add.s64 	%rd13, %rd2, %rd12;
	add.s64 	%rd14, %rd13, %rd8;
	add.s64 	%rd15, %rd14, %rd8;
	add.s64 	%rd16, %rd15, %rd8;
	ld.global.cs.v4.u32 	{%v0, %v1, %v2, %v3}, [%rd13];
	ld.global.cs.v4.u32 	{%v4, %v5, %v6, %v7}, [%rd14];
	ld.global.cs.v4.u32 	{%v8, %v9, %v10, %v11}, [%rd15];
	ld.global.cs.v4.u32 	{%v12, %v13, %v14, %v15}, [%rd16];
	xor.b32 	%v0, %v0, %r18;
	xor.b32 	%v5, %v5, %r18;
	xor.b32 	%v10, %v10, %r18;
	xor.b32 	%v15, %v15, %r18;
	add.s64 	%rd17, %rd10, %rd12;
	add.s64 	%rd18, %rd17, %rd8;
	add.s64 	%rd19, %rd18, %rd8;
	add.s64 	%rd20, %rd19, %rd8;
	st.global.cs.v4.u32 	[%rd17], {%v0, %v1, %v2, %v3};
	st.global.cs.v4.u32 	[%rd18], {%v4, %v5, %v6, %v7};
	st.global.cs.v4.u32 	[%rd19], {%v8, %v9, %v10, %v11};
	st.global.cs.v4.u32 	[%rd20], {%v12, %v13, %v14, %v15};
	add.s64 	%rd11, %rd11, 128;
	shl.b64 	%rd21, %rd7, 2;
	add.s64 	%rd6, %rd6, %rd21;
	setp.lt.u64 	%p2, %rd6, %rd3;
	@%p2 bra 	STREAM_WRAPPED;
	sub.s64 	%rd6, %rd6, %rd3;
STREAM_WRAPPED:
	ld.volatile.shared.u32 	%r19, [done_warps];
	setp.lt.u32 	%p3, %r19, %r8;
	@%p3 bra 	STREAM_LOOP;

STREAM_DONE:
	red.global.add.u64 	[%rd4], %rd11;
	ret;
}
"""

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
