"""Evidence for the stress verification on a real GPU, before relying on it (issue 22):

1. determinism: `--launches` (100) launches of each verifying tensor kernel this GPU runs (wgmma on Hopper, and
   mma.sync), the same length each, streaming on: every block's signatures must be identical in every launch, and
   every streamed HBM word must read back as written; the blocks' %smid must cover every SM.
2. injection: one launch with a validation-only flip on SM `--inject-sm`: exactly the block(s) on that SM differ.
3. cost: the GPU time the verification adds to a launch of the stress's length: the verified kernel with its
   records copied back against the same tensor work unverified (wgmma_ptx.ptx(verified=False)), alternating, plus
   the two reference launches of a 30 s stress. The host's comparisons overlap the next launch (the stress reports
   their time, ComputeVerification.host_seconds).

Usage: PYTHONPATH=. python3 bench/verified_stress.py [--launches 100] [--json OUT.json]
Needs libcuda.so.1 (NVIDIA).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from ctypes import c_uint32, c_uint64
from pathlib import Path

from gpudiag.active import ActiveOptions, kernels, tensor_kernels, wgmma_ptx
from gpudiag.active.cuda import CudaRuntime
from gpudiag.active.ptx_parts import NO_INJECTION
from gpudiag.active.runtime import Resources
from gpudiag.active.session import Control, Progress, Session
from gpudiag.active.stress_tensor import TensorLoad
from gpudiag.active.tensor_kernels import Program
from gpudiag.active.stress_verify import RECORD_BYTES


def _session(copy_warps: int) -> Session:
    options = ActiveOptions(stress_copy_warps=copy_warps, progress=sys.stderr)
    return Session(CudaRuntime(), options, Control(until=None), Progress(sys.stderr))


def determinism(spec: tensor_kernels.StressKernel, copy_warps: int, launches: int, iterations: int,
                inject_sm: int) -> dict:
    session = _session(copy_warps)
    runtime = session.runtime
    with Resources(runtime, 0) as res:
        function = runtime.kernel(res.program(spec.program), spec.kernel)
        stream = res.stream()
        load = TensorLoad(session, res, spec, function, stream)
        seen: Counter = Counter()
        per_block: dict[int, set] = {}
        smids: set = set()
        began = time.perf_counter()
        for number in range(launches):
            slot, parity = load.issue(iterations, number)
            runtime.stream_synchronize(stream)
            records, check = load.records(slot)
            load.verify(slot, parity, steady_number=number)
            for block, (sm, signature) in enumerate(load.verifier.parse(records)):
                seen[signature] += 1
                per_block.setdefault(block, set()).add(signature)
                smids.add(sm)
        seconds = time.perf_counter() - began
        # one more launch with the validation-only flip on `inject_sm`
        fault = _inject_launch(load, runtime, stream, iterations, inject_sm)
        result = load.result
        return {
            "kernel": spec.kernel,
            "copy_warps": load.copy_warps,
            "grid": load.grid,
            "block_threads": spec.block_threads,
            "tensor_warps": load.tensor_warps,
            "iterations": iterations,
            "launches": launches,
            "seconds": round(seconds, 2),
            "distinct_signature_sets": len(seen),
            "blocks_with_more_than_one_result": sum(1 for s in per_block.values() if len(s) > 1),
            "identical_on_every_block_and_launch": len(seen) == 1,
            "distinct_smids": len(smids),
            "multiprocessors": runtime.multiprocessor_count(),
            "mismatched_blocks": result.mismatched_blocks,
            "stream_mismatches": result.stream_mismatches,
            "stream_vectors_per_half": load.vectors,
            "signature_set": [f"{x:08x}" for x in seen.most_common(1)[0][0]],
            "injection": fault,
        }


def _inject_launch(load: TensorLoad, runtime, stream, iterations: int, sm: int) -> dict:
    launch = load.launched
    slot, parity = launch % 2, launch % 2
    device_slot = load.ring + slot * load.slot_bytes
    check = device_slot + load.grid * RECORD_BYTES
    runtime.copy_h2d_async(check, load.slot_init, kernels.RESULT_SLOT_BYTES, stream)
    runtime.launch(load.function, load.grid, load.spec.block_threads, [
        c_uint64(device_slot), c_uint32(iterations), c_uint64(load.buffer), c_uint64(load.vectors),
        c_uint32(load.copy_warps), c_uint64(load.counter), c_uint64(check), c_uint32(parity),
        c_uint32(load.seed(launch - 1)), c_uint32(load.seed(launch)), c_uint32(sm)], stream)
    runtime.copy_d2h_async(load.ring_host + slot * load.slot_bytes, device_slot, load.slot_bytes, stream)
    load.launched += 1
    runtime.stream_synchronize(stream)
    records, _ = load.records(slot)
    rows = load.verifier.parse(records)
    majority = Counter(sig for _, sig in rows).most_common(1)[0][0]
    return {"inject_sm": sm, "differing_blocks_on_sms": sorted(s for s, sig in rows if sig != majority),
            "differing_warps": sorted({w for s, sig in rows if sig != majority
                                       for w, (a, b) in enumerate(zip(sig, majority)) if a != b})}


def cost(spec: tensor_kernels.StressKernel, copy_warps: int, iterations: int, repeats: int = 10) -> dict:
    """Launches of the stress's length, the verified kernel through TensorLoad (its records copied back) and the
    unverified one (wgmma_ptx.ptx(verified=False): the same tensor work, no samples, no records) bare, alternating
    so that the power cap's clock changes fall on both alike."""
    session = _session(copy_warps)
    runtime = session.runtime
    with Resources(runtime, 0) as res:
        function = runtime.kernel(res.program(spec.program), spec.kernel)
        plain = Program("cuda-wgmma-unverified", wgmma_ptx.ptx(verified=False), (spec.kernel,))
        baseline = runtime.kernel(res.program(plain), spec.kernel)
        stream = res.stream()
        load = TensorLoad(session, res, spec, function, stream)
        events = [res.event() for _ in range(4)]

        def bare() -> None:
            launched = load.launched
            runtime.launch(baseline, load.grid, spec.block_threads, [
                c_uint64(load.ring), c_uint32(iterations), c_uint64(load.buffer), c_uint64(load.vectors),
                c_uint32(load.copy_warps), c_uint64(load.counter), c_uint64(load.ring + load.grid * RECORD_BYTES),
                c_uint32(launched % 2), c_uint32(load.seed(launched - 1)), c_uint32(load.seed(launched)),
                c_uint32(NO_INJECTION)], stream)
            load.launched += 1

        totals = [0.0, 0.0]
        load.issue(iterations)
        bare()
        for _ in range(repeats):
            for which, work in enumerate((lambda: load.issue(iterations), bare)):
                runtime.event_record(events[2 * which], stream)
                work()
                runtime.event_record(events[2 * which + 1], stream)
            runtime.event_synchronize(events[3])
            totals[0] += runtime.event_elapsed_ms(events[0], events[1])
            totals[1] += runtime.event_elapsed_ms(events[2], events[3])
        runtime.event_record(events[0], stream)
        load.issue(4096)
        runtime.event_record(events[1], stream)
        runtime.event_synchronize(events[1])
        reference_ms = runtime.event_elapsed_ms(events[0], events[1])
        verified, unverified = totals[0] / repeats, totals[1] / repeats
        return {"kernel": spec.kernel, "iterations": iterations, "repeats": repeats,
                "verified_launch_ms": round(verified, 4), "unverified_launch_ms": round(unverified, 4),
                "launch_cost": round((verified - unverified) / verified, 5),
                "reference_launch_ms": round(reference_ms, 3),
                "reference_cost_of_30_s": round(2 * reference_ms / 30000, 6)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=100)
    parser.add_argument("--inject-sm", type=int, default=17)
    parser.add_argument("--launch-ms", type=float, default=50.0, help="the stress launch length the cost is for")
    parser.add_argument("--copy-warps", type=int, default=4, help="streaming warps of the wgmma kernel")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runtime = CudaRuntime()
    runtime.use(0)
    capability = runtime.compute_capability()
    specs = [tensor_kernels.WGMMA_KERNEL, tensor_kernels.MMA_KERNEL] if capability == (9, 0) else [
        tensor_kernels.MMA_KERNEL]
    record: dict = {"compute_capability": list(capability), "determinism": [], "cost": []}
    for spec in specs:
        copy_warps = args.copy_warps if spec is tensor_kernels.WGMMA_KERNEL else 2
        outcome = determinism(spec, copy_warps, args.launches, 2048, args.inject_sm)
        record["determinism"].append(outcome)
        print(f"{spec.kernel}: {args.launches} launches x {outcome['grid']} blocks ({outcome['iterations']} "
              f"iterations, {outcome['copy_warps']} streaming warps): identical on every block and launch: "
              f"{outcome['identical_on_every_block_and_launch']} ({outcome['distinct_signature_sets']} distinct "
              f"results), {outcome['distinct_smids']} SMs of {outcome['multiprocessors']}, stream mismatches "
              f"{outcome['stream_mismatches']}; injected on SM {args.inject_sm}: blocks differing on SMs "
              f"{outcome['injection']['differing_blocks_on_sms']} (warps {outcome['injection']['differing_warps']})",
              flush=True)
        if spec is not tensor_kernels.WGMMA_KERNEL:
            continue
        # the stress's launch length, from one timed launch
        session = _session(copy_warps)
        with Resources(session.runtime, 0) as res:
            function = session.runtime.kernel(res.program(spec.program), spec.kernel)
            stream = res.stream()
            load = TensorLoad(session, res, spec, function, stream)
            start, end = res.event(), res.event()
            session.runtime.event_record(start, stream)
            load.issue(4096)
            session.runtime.event_record(end, stream)
            session.runtime.event_synchronize(end)
            iterations = max(1, int(4096 * args.launch_ms / session.runtime.event_elapsed_ms(start, end)))
        figures = cost(spec, copy_warps, iterations)
        record["cost"].append(figures)
        total = figures["launch_cost"] + figures["reference_cost_of_30_s"]
        print(f"{spec.kernel}: {iterations} iterations: verified launch {figures['verified_launch_ms']} ms (records "
              f"copied back), unverified {figures['unverified_launch_ms']} ms: {figures['launch_cost']:.3%}; the "
              f"cold and hot reference launches {figures['reference_cost_of_30_s']:.3%} of a 30 s stress: "
              f"verification cost {total:.3%} of the stress time (goal <= 2 %: {'met' if total <= 0.02 else 'MISSED'})",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
