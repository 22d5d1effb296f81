"""PTX the two CUDA stress kernels share (tensor_ptx.py: mma.sync, sm_80; wgmma_ptx.py: wgmma, sm_90a), written
once here and pasted into each: the parameter list, the verified HBM stream, and the result signature.

The contract of both kernels, `k(u32* out, u32 iterations, u8* buf, u64 vectors, u32 copy_warps, u64* bytes,
u64* check, u32 parity, u32 src_seed, u32 dst_seed, u32 inject_sm)`:

- Tensor warps: the same instruction sequence on the same operands in every block (operands are a function of the
  thread's place in its block and of nothing else), so that every block computes the same bits. An iteration adds
  +A·B and then −A·B to each accumulator, so the accumulators return to (near) zero instead of growing until an
  addition no longer changes them: an error in any one product stays in them to the end. That alone would miss a
  unit that is wrong the same way every time (+S' − S' cancels), so the iterations run in SEGMENTS parts and
  between two parts one +A·B is read out — a sample of the product sum itself — and folded in before its −A·B.
  Each tensor warp folds the samples and its final accumulators into a 32-bit signature (FNV-1a over the raw bits
  of every register of every lane, then XOR across the warp: one flipped bit anywhere changes it) and lane 0 stores
  it at out[block * RECORD_WORDS + 1 + warp]; thread 0 stores the block's %smid at out[block * RECORD_WORDS] and its
  first accumulator of the first sample at SAMPLE_WORD (the host checks it is a finite, non-zero sum). The host
  compares the blocks (stress_verify.py).
- Streaming warps: `buf` is two halves of `vectors` 16-byte vectors. Word i of a half holds
  kernels.pattern_word(i, seed). Each launch reads half `parity` (written with `src_seed`), compares every word with
  what it must hold, and writes the other half with `dst_seed`'s pattern; mismatches go to the `check` result slot
  (kernels.RESULT_SLOT_FORMAT: count, first mismatching word index, OR of flipped bits). The first pass covers the
  whole half whatever the tensor warps do (the next launch checks every word of it); later passes stop when the
  tensor warps are done. Bytes moved (read + written) are added to *bytes.
- inject_sm: validation only (options.ValidationFault). The block running on that SM flips bit INJECT_BIT of
  thread 0's first accumulator once, half way through the launch (at sample INJECTED_SAMPLE); 0xFFFFFFFF: never.
"""

from __future__ import annotations

RECORD_WORDS = 16  # per block: smid, one signature per tensor warp (at most 8), thread 0's first sample, padding
SAMPLE_WORD = 9
SEGMENTS = 4  # the iterations of a launch run in this many parts, a sample between two (SEGMENTS samples a launch)
INJECTED_SAMPLE = 1  # the validation-only flip goes in before the fold of this sample (half way)
NO_INJECTION = 0xFFFFFFFF
INJECT_BIT = 13  # a middle mantissa bit: a small silent error (~0.1 % of the value), not an overflow or a NaN
PATTERN_MULTIPLIER = -1640531535  # 0x9E3779B1 as nvcc spells it (kernels.PATTERN_MULTIPLIER)
FNV_OFFSET = -2128831035  # 0x811C9DC5
FNV_PRIME = 16777619

PARAMS = """(
    .param .u64 p_out,
    .param .u32 p_iterations,
    .param .u64 p_buf,
    .param .u64 p_vectors,
    .param .u32 p_copy_warps,
    .param .u64 p_bytes,
    .param .u64 p_check,
    .param .u32 p_parity,
    .param .u32 p_src_seed,
    .param .u32 p_dst_seed,
    .param .u32 p_inject_sm
)"""

# Registers every kernel declares and loads the same way (`load_params`).
COMMON_DECLARATIONS = """
    .reg .pred  %q<8>;
    .reg .b32   %c<16>;
    .reg .b64   %cd<8>;
"""


def load_params() -> str:
    """%cd1 out (global), %c1 iterations, %cd2 buf (global), %cd3 vectors, %c2 copy_warps, %cd4 bytes (global),
    %cd5 check (global), %c3 parity, %c4 src_seed, %c5 dst_seed, %c6 inject_sm; %c7 tid, %c8 warp, %c9 lane,
    %c10 ctaid, %c11 smid."""
    return """
    ld.param.u64    %cd1, [p_out];
    ld.param.u32    %c1, [p_iterations];
    ld.param.u64    %cd2, [p_buf];
    ld.param.u64    %cd3, [p_vectors];
    ld.param.u32    %c2, [p_copy_warps];
    ld.param.u64    %cd4, [p_bytes];
    ld.param.u64    %cd5, [p_check];
    ld.param.u32    %c3, [p_parity];
    ld.param.u32    %c4, [p_src_seed];
    ld.param.u32    %c5, [p_dst_seed];
    ld.param.u32    %c6, [p_inject_sm];
    cvta.to.global.u64  %cd1, %cd1;
    cvta.to.global.u64  %cd2, %cd2;
    cvta.to.global.u64  %cd4, %cd4;
    cvta.to.global.u64  %cd5, %cd5;
    mov.u32     %c7, %tid.x;
    shr.u32     %c8, %c7, 5;
    and.b32     %c9, %c7, 31;
    mov.u32     %c10, %ctaid.x;
    mov.u32     %c11, %smid;
"""


def random_bf16x2(state: str, target: str) -> str:
    """Advance the LCG in `state` and make two random BF16 values in ±[0.5, 1) of it (random sign and mantissa)."""
    return (f"\tmad.lo.s32 \t{state}, {state}, 1664525, 1013904223;\n"
            f"\tand.b32 \t{target}, {state}, 0x807F807F;\n"
            f"\tor.b32 \t{target}, {target}, 0x3F003F00;\n")


def fold(registers: list[str], hash_register: str) -> str:
    """FNV-1a of the raw bits of `registers` into `hash_register`: any one changed bit changes the result."""
    return "".join(f"\txor.b32 \t{hash_register}, {hash_register}, {register};\n"
                   f"\tmul.lo.u32 \t{hash_register}, {hash_register}, {FNV_PRIME};\n" for register in registers)


def signature(registers: list[str], done_label: str, running: str, sample: str) -> str:
    """Fold `registers` (this thread's accumulators at the end) into `running` (the hash of the samples), XOR it
    across the warp and store it with the block's SM and thread 0's `sample`; count the warp done for the
    streaming warps. Uses %c12-%c15 and %cd6-%cd7."""
    lines = [f"\tmov.u32 \t%c12, {running};", fold(registers, "%c12").rstrip("\n")]
    for distance in (16, 8, 4, 2, 1):
        lines += [f"\tshfl.sync.bfly.b32 \t%c13, %c12, {distance}, 31, -1;", "\txor.b32 \t%c12, %c12, %c13;"]
    lines += [
        f"\tmul.lo.u32 \t%c14, %c10, {RECORD_WORDS};",
        "\tsetp.ne.u32 \t%q5, %c7, 0;",
        f"\t@%q5 bra \t{done_label}_SM;",
        "\tmul.wide.u32 \t%cd6, %c14, 4;",
        "\tadd.s64 \t%cd6, %cd1, %cd6;",
        "\tst.global.u32 \t[%cd6], %c11;",
        f"\tst.global.u32 \t[%cd6+{4 * SAMPLE_WORD}], {sample};",
        f"{done_label}_SM:",
        "\tsetp.ne.u32 \t%q5, %c9, 0;",
        f"\t@%q5 bra \t{done_label};",
        "\tadd.u32 \t%c15, %c14, %c8;",
        "\tadd.u32 \t%c15, %c15, 1;",
        "\tmul.wide.u32 \t%cd7, %c15, 4;",
        "\tadd.s64 \t%cd7, %cd1, %cd7;",
        "\tst.global.u32 \t[%cd7], %c12;",
        "\tatom.shared.add.u32 \t%c13, [done_warps], 1;",
        f"{done_label}:",
        "\tret;",
    ]
    return "\n".join(lines) + "\n"


def segments(iterations: str, part: str, last: str, segment: str, running: str, sample: str, count: str) -> str:
    """The start of the SEGMENTS parts of a launch: `part` = iterations / SEGMENTS, `last` the rest; at label
    SEGMENT, `count` is the current part's length. `running` (the samples' hash) and `sample` start empty."""
    return (f"\tshr.u32 \t{part}, {iterations}, 2;\n\tmul.lo.u32 \t{last}, {part}, {SEGMENTS - 1};\n"
            f"\tsub.u32 \t{last}, {iterations}, {last};\n\tmov.u32 \t{segment}, 0;\n"
            f"\tmov.u32 \t{running}, {FNV_OFFSET};\n\tmov.u32 \t{sample}, 0;\nSEGMENT:\n"
            f"\tsetp.eq.u32 \t%q2, {segment}, {SEGMENTS - 1};\n\tselp.b32 \t{count}, {last}, {part}, %q2;\n")


def next_segment(segment: str) -> str:
    return (f"\tadd.u32 \t{segment}, {segment}, 1;\n\tsetp.lt.u32 \t%q2, {segment}, {SEGMENTS};\n"
            "\t@%q2 bra \tSEGMENT;\n")


def injection(register: str, segment: str) -> str:
    """Validation only: flip INJECT_BIT of `register` in thread 0 of the block on SM inject_sm, at the sample
    INJECTED_SAMPLE (`segment` holds the sample's number)."""
    return ("\tsetp.eq.u32 \t%q6, %c11, %c6;\n"
            "\tsetp.eq.and.u32 \t%q6, %c7, 0, %q6;\n"
            f"\tsetp.eq.and.u32 \t%q6, {segment}, {INJECTED_SAMPLE}, %q6;\n"
            f"\t@%q6 xor.b32 \t{register}, {register}, {1 << INJECT_BIT};\n")


def stream(unroll: int, tensor_warps: str, first_stream_warp: str) -> tuple[str, str]:
    """(declarations, code) of the streaming warps, entered at label STREAM. `tensor_warps`: a register or constant
    with the number of tensor warps whose completion ends the later passes; `first_stream_warp`: the warp index of
    stream warp 0 (a register or constant). A warp past copy_warps exits at once."""
    u = unroll
    declarations = f"""
    .reg .pred  %sp<4>;
    .reg .b32   %sv<{4 * u}>;
    .reg .b32   %sw<4>;
    .reg .b32   %s<16>;
    .reg .b64   %sd<{10 + u}>;
"""
    code = [
        "STREAM:",
        f"\tsub.u32 \t%s1, %c8, {first_stream_warp};",
        "\tsetp.ge.u32 \t%sp0, %s1, %c2;",
        "\t@%sp0 bra \tSTREAM_EXIT;",
        # stream thread s of T = nctaid * copy_warps * 32; vectors is a multiple of unroll * T (the host rounds it)
        "\tmov.u32 \t%s2, %nctaid.x;",
        "\tmul.lo.u32 \t%s3, %s2, %c2;",
        "\tshl.b32 \t%s3, %s3, 5;",
        "\tmad.lo.u32 \t%s4, %c10, %c2, %s1;",
        "\tshl.b32 \t%s4, %s4, 5;",
        "\tadd.u32 \t%s4, %s4, %c9;",
        "\tcvt.u64.u32 \t%sd0, %s4;",  # at: vector index within a half
        "\tcvt.u64.u32 \t%sd1, %s3;",  # T
        "\tshl.b64 \t%sd2, %sd1, 4;",  # T * 16 bytes
        "\tshl.b64 \t%sd3, %cd3, 4;",  # half size in bytes
        "\tsetp.ne.u32 \t%sp1, %c3, 0;",
        "\tselp.b64 \t%sd4, %sd3, 0, %sp1;",
        "\tadd.s64 \t%sd4, %cd2, %sd4;",  # source half
        "\tselp.b64 \t%sd5, 0, %sd3, %sp1;",
        "\tadd.s64 \t%sd5, %cd2, %sd5;",  # destination half
        "\tmov.u64 \t%sd6, 0;",  # bytes moved
        "\tmov.u64 \t%sd7, 0;",  # mismatching words
        "\tmov.u32 \t%s5, 0;",  # OR of flipped bits
        "\tmov.u64 \t%sd8, -1;",  # first mismatching word (u64 max: none)
        "\tmov.u32 \t%s6, 1;",  # still in the first pass
        "\tsetp.eq.u64 \t%sp0, %cd3, 0;",
        "\t@%sp0 bra \tSTREAM_DONE;",
        "STREAM_LOOP:",
        "\tshl.b64 \t%sd9, %sd0, 4;",
        "\tadd.s64 \t%sd9, %sd4, %sd9;",
    ]
    for i in range(u):
        if i:
            code.append(f"\tadd.s64 \t%sd{9 + i}, %sd{8 + i}, %sd2;")
        code.append(f"\tld.global.cs.v4.u32 \t{{%sv{4 * i}, %sv{4 * i + 1}, %sv{4 * i + 2}, %sv{4 * i + 3}}}, "
                    f"[%sd{9 + i}];")
    code += [
        "\tmov.u32 \t%s7, 0;",  # OR of every difference in this step
        "\tcvt.u32.u64 \t%s8, %sd0;",
        "\tshl.b32 \t%s8, %s8, 2;",  # first word of vector `at` (word indexes wrap at 2^32 like pattern_word's)
        f"\tmul.lo.u32 \t%s9, %s8, {PATTERN_MULTIPLIER};",
        "\tsub.s64 \t%sd9, %sd9, %sd4;",
        "\tadd.s64 \t%sd9, %sd9, %sd5;",  # the same offset in the destination half
        # pattern step from one vector to the next (T vectors on)
        f"\tmul.lo.u32 \t%s10, %s3, {4 * PATTERN_MULTIPLIER & 0xFFFFFFFF};",
    ]
    for i in range(u):
        if i:
            code += ["\tadd.u32 \t%s9, %s9, %s10;", "\tadd.s64 \t%sd9, %sd9, %sd2;"]
        for j in range(4):
            code.append("\tmov.u32 \t%s11, %s9;" if j == 0 else f"\tadd.u32 \t%s11, %s11, {PATTERN_MULTIPLIER};")
            code += ["\txor.b32 \t%s12, %s11, %c4;",
                     f"\txor.b32 \t%sv{4 * i + j}, %sv{4 * i + j}, %s12;",
                     f"\tor.b32 \t%s7, %s7, %sv{4 * i + j};",
                     f"\txor.b32 \t%sw{j}, %s11, %c5;"]
        code.append("\tst.global.cs.v4.u32 \t[%sd9], {%sw0, %sw1, %sw2, %sw3};")
    code += [
        "\tsetp.ne.u32 \t%sp2, %s7, 0;",
        "\t@%sp2 bra \tSTREAM_MISMATCH;",
        "STREAM_COUNTED:",
        f"\tadd.s64 \t%sd6, %sd6, {32 * u};",
        f"\tmul.lo.u64 \t%sd{9}, %sd1, {u};",
        "\tadd.s64 \t%sd0, %sd0, %sd9;",
        "\tsetp.lt.u64 \t%sp0, %sd0, %cd3;",
        "\t@%sp0 bra \tSTREAM_WRAPPED;",
        "\tsub.s64 \t%sd0, %sd0, %cd3;",
        "\tmov.u32 \t%s6, 0;",
        "STREAM_WRAPPED:",
        "\tsetp.ne.u32 \t%sp0, %s6, 0;",
        "\t@%sp0 bra \tSTREAM_LOOP;",
        "\tld.volatile.shared.u32 \t%s13, [done_warps];",
        f"\tsetp.lt.u32 \t%sp0, %s13, {tensor_warps};",
        "\t@%sp0 bra \tSTREAM_LOOP;",
        "STREAM_DONE:",
        "\tred.global.add.u64 \t[%cd4], %sd6;",
        "\tsetp.eq.u64 \t%sp0, %sd7, 0;",
        "\t@%sp0 bra \tSTREAM_EXIT;",
        "\tred.global.add.u64 \t[%cd5], %sd7;",
        "\tred.global.min.u64 \t[%cd5+8], %sd8;",
        "\tred.global.or.b32 \t[%cd5+16], %s5;",
        "STREAM_EXIT:",
        "\tret;",
        # Rare: some word of this step differed. Count each one, keep the lowest index and the flipped bits.
        "STREAM_MISMATCH:",
    ]
    for i in range(u):
        for j in range(4):
            code += [
                f"\tsetp.ne.u32 \t%sp3, %sv{4 * i + j}, 0;",
                "\t@%sp3 add.s64 \t%sd7, %sd7, 1;",
                f"\t@%sp3 or.b32 \t%s5, %s5, %sv{4 * i + j};",
                f"\tmul.lo.u64 \t%sd{9}, %sd1, {i};",
                "\tadd.s64 \t%sd9, %sd9, %sd0;",
                "\tshl.b64 \t%sd9, %sd9, 2;",
                f"\tadd.s64 \t%sd9, %sd9, {j};",
                "\t@%sp3 min.u64 \t%sd8, %sd8, %sd9;",
            ]
    code.append("\tbra.uni \tSTREAM_COUNTED;")
    return declarations, "\n".join(code) + "\n"
