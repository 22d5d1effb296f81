"""active.compute: whether the GPU computed the right bits at full power — the silent data corruption that no error
counter reports (Meta's "Silent Data Corruptions at Scale", 2021; Google's "Cores that don't count", HotOS 2021).

The stress gives every block the same work (gpudiag/active/ptx_parts.py), so every block must leave the same
signatures, launch after launch, cold and hot, and every GPU of one model the same reference signature. Fails on: a
block that differed (named by its SM, or XCC/SE/CU on AMD), a launch whose blocks share no majority, a reference
launch that gave other bits hot than cold, a GPU whose reference differs from its identical siblings', and an HBM
word that the streaming warps read back other than it was written (memory that errs when hot although ECC is
silent). What it cannot see is in docs/acceptance.md ("What the verification cannot see").
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable

from gpudiag.checks.active.common import COMPUTE, _for_each, _not_judged
from gpudiag.checks.active.stress import _siblings
from gpudiag.checks.common import failed, passed, skipped, unknown, warned
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, ComputeVerification, DeviceSnapshot, NodeSnapshot, StressResult, Vendor

EXPECTED = ("every block of every launch leaves the same bits; the reference launch the same cold and hot and on "
            "every GPU of the model; every streamed HBM word reads back as written")
MISMATCH = ("drain", "GPUDIAG-ACTIVE-COMPUTE-MISMATCH")
REPRODUCED = ("rma", "GPUDIAG-ACTIVE-COMPUTE-REPRODUCED")  # the same SM wrong in two launches or more
STREAM = ("drain", "GPUDIAG-ACTIVE-STREAM-MISMATCH")


def _remediation(device: DeviceSnapshot) -> str:
    confirm = ("`dcgmi diag -r 3` (DCGM's targeted stress and memory tests; `-r 4` adds the extended ones)"
               if device.vendor == Vendor.NVIDIA else
               "AMD's field health check (AGFHC, its level-3 recipe) or `rvs` with the gst and mem modules")
    return (f"A mismatch means this GPU returned other numbers than its identical siblings for the same work, with "
            f"no error reported: jobs on it train on or serve corrupt results. Drain it now. Confirm with the "
            f"vendor's diagnostic, {confirm}, and run `gpudiag check --level 2` again: a mismatch that comes back "
            f"(on the same SM for a compute fault, at the same address for a memory one), or a failed vendor "
            f"diagnostic, is an RMA case — open it with this report (serial, SM or address, signatures). A GPU "
            f"that passes both afterwards may return to service under watch.")


def _observed(v: ComputeVerification, stress: StressResult, siblings: dict) -> dict:
    return {"kernel": stress.kernel, "launches_verified": v.launches_verified, "blocks_per_launch": v.blocks_per_launch,
            "mismatched_blocks": v.mismatched_blocks, "launches_with_mismatch": v.launches_with_mismatch,
            "launches_without_majority": v.launches_without_majority,
            "mismatched_sms": [{"location": s.location, "launches": s.launches, "first_launch": s.first_launch}
                               for s in v.mismatched_sms],
            "reference_signature": v.reference_signature, "hot_reference_matches": v.hot_reference_matches,
            "reference_sample": v.reference_sample,
            "siblings": siblings, "stream_words_read": v.stream_words_read, "stream_mismatches": v.stream_mismatches,
            "stream_first_error_address": v.stream_first_error_address,
            "stream_flipped_bits_mask": v.stream_flipped_bits_mask, "validation_fault": v.validation_fault}


def _sibling_findings(snapshot: NodeSnapshot, device: DeviceSnapshot, stress: StressResult) -> tuple[dict, list[str]]:
    """The reference signature against those of the identical GPUs that ran the same kernel and reference length."""
    mine = stress.verification
    theirs = {index: s.verification.reference_signature for index, s in _siblings(snapshot, device, "stress")
              if s.verification is not None and s.kernel == stress.kernel and s.verification.reference_signature
              and s.verification.reference_iterations == mine.reference_iterations}
    if not theirs or mine.reference_signature is None:
        return {"gpus_compared": 1 if mine.reference_signature else 0}, []
    counts = Counter([mine.reference_signature, *theirs.values()])
    top, votes = counts.most_common(1)[0]
    seen = {"gpus_compared": len(theirs) + 1, "agreeing": counts[mine.reference_signature]}
    if mine.reference_signature == top and votes * 2 > len(theirs) + 1:
        return seen, []
    if votes * 2 > len(theirs) + 1:
        return seen, [f"its reference result differs from that of {votes} of its {len(theirs)} identical GPU(s)"]
    return seen, [f"its {len(theirs) + 1} identical GPUs share no reference result: one of them at least computes "
                  f"wrong"]


def _judge(snapshot: NodeSnapshot) -> Callable[[DeviceSnapshot, StressResult], CheckResult]:
    def judge(device: DeviceSnapshot, stress: StressResult) -> CheckResult:
        v = stress.verification
        if v is None:
            if not stress.launches:
                return _not_judged(COMPUTE, device, "verified stress", stress.error)
            if stress.precision == "fp32":
                why = f"the {stress.kernel} kernel (fp32) leaves no results to verify; only the tensor-core kernels are"
            else:  # a snapshot recorded before the stress verified its results
                why = f"the {stress.kernel} run carries no verification record (recorded by an older gpudiag)"
            return skipped(COMPUTE, device, f"{device.label}: {why}")
        if v.launches_verified == 0:
            if stress.error is not None:
                return _not_judged(COMPUTE, device, "verified stress", stress.error)
            return unknown(COMPUTE, device, f"{device.label}: no launch of the stress was verified", observed={},
                           expected=EXPECTED, remediation="Run the stress for longer (--stress-seconds).")
        siblings, findings = _sibling_findings(snapshot, device, stress)
        observed = _observed(v, stress, siblings)
        sms = ", ".join(
            f"{s.location} ({s.launches} launch{'es' if s.launches != 1 else ''})" for s in v.mismatched_sms
        )
        if v.mismatched_blocks:
            more = len(v.mismatched_sms) < v.blocks_per_launch and len(v.mismatched_sms) == 16
            where = f" on {sms}{' and more' if more else ''}" if sms else " (no majority to place them against)"
            findings.insert(0, f"{v.mismatched_blocks} block result(s) differed from their siblings' in "
                               f"{v.launches_with_mismatch} of {v.launches_verified} launches{where}")
        if v.launches_without_majority:
            findings.append(f"{v.launches_without_majority} launch(es) in which no result was shared by most blocks")
        if v.hot_reference_matches is False:
            findings.append("the reference launch gave other bits hot (after the load) than cold")
        sample = v.reference_sample
        if v.reference_signature is not None and (sample is None or sample == 0 or not math.isfinite(sample)):
            findings.append(f"the tensor cores returned {sample} for a sum of BF16 products that is finite and "
                            f"non-zero")
        stream = None
        if v.stream_mismatches:
            stream = (f"{v.stream_mismatches} streamed HBM read(s) returned other data than written (first at device "
                      f"address {v.stream_first_error_address:#x}, flipped bits {v.stream_flipped_bits_mask:#010x})")
        validation = f" [{v.validation_fault}]" if v.validation_fault else ""
        if findings or stream:
            text = "; ".join(findings + ([stream] if stream else []))
            result = failed(COMPUTE, device, f"{device.label}: {text}{validation}", observed=observed,
                            expected=EXPECTED, remediation=_remediation(device))
            if findings:
                reproduced = any(s.launches >= 2 for s in v.mismatched_sms)
                return with_verdict(result, *(REPRODUCED if reproduced else MISMATCH))
            return with_verdict(result, *STREAM)
        if v.validation_fault and "not injected" not in v.validation_fault and "no buffer" not in v.validation_fault:
            return unknown(COMPUTE, device, f"{device.label}: the injected fault was not detected{validation}",
                           observed=observed, expected=EXPECTED,
                           remediation="The verification missed a fault injected on purpose: it cannot be trusted "
                                       "on this GPU until that is understood (report it to gpudiag's maintainers).")
        compared = (f", the same as its {siblings['gpus_compared'] - 1} identical GPU(s)"
                    if siblings.get("gpus_compared", 0) > 1 else "")
        reference = ("the reference launch the same cold and hot" if v.hot_reference_matches
                     else "the reference launch run cold only (the run was stopped before the hot one)")
        message = (f"{device.label}: every result verified: {v.launches_verified} launches x {v.blocks_per_launch} "
                   f"blocks bit-identical, {reference}{compared}; "
                   f"{v.stream_words_read:,} streamed HBM words read back as written{validation}")
        if stress.error is not None:
            return warned(COMPUTE, device, f"{message}, but the stress ended early: {stress.error.message}",
                          observed=observed, expected=EXPECTED, remediation="Run it again with a longer --timeout.")
        return passed(COMPUTE, device, message, observed=observed, expected=EXPECTED)
    return judge


def compute(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, COMPUTE, "stress", "stress", _judge(snapshot))
