"""active.memtest: the memory test's words read back wrong and the ECC counters before and after it."""

from __future__ import annotations

from gpudiag.checks.active.common import MEMTEST, _for_each, _kernel_log_hint, _not_judged, _rise
from gpudiag.checks.common import failed, passed, warned
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, MemtestResult, NodeSnapshot

# --- memory test ---------------------------------------------------------------------------------------------------


def _judge_memtest(device: DeviceSnapshot, memtest: MemtestResult) -> CheckResult:
    check_id = MEMTEST
    observed = {"bytes_tested": memtest.bytes_tested, "passes": memtest.passes_completed,
                "seconds": memtest.seconds, "mismatched_words": memtest.mismatched_words,
                "ecc_corrected": [memtest.ecc_corrected_before, memtest.ecc_corrected_after],
                "ecc_uncorrected": [memtest.ecc_uncorrected_before, memtest.ecc_uncorrected_after]}
    expected = "every word reads back as written; ECC counters unchanged"
    rma = (f"Memory that returns other data than was written is a hardware fault: drain the GPU, run the vendor's "
           f"memory diagnostic (`dcgmi diag -r 3` / `rvs -c mem.conf`), check row remapping / retired pages "
           f"(memory.* checks, `nvidia-smi -q -d ROW_REMAPPER`, `amd-smi bad-pages`) and the kernel log; "
           f"{_kernel_log_hint(device)}")
    if memtest.mismatched_words:
        return failed(check_id, device, (
            f"{device.label}: {memtest.mismatched_words} words read back wrong in {memtest.bytes_tested / 1e9:.1f} GB "
            f"(first at device address {memtest.first_error_address:#x}, flipped bits "
            f"{memtest.flipped_bits_mask:#010x})"),
            observed=observed, expected=expected, remediation=rma)
    if memtest.passes_completed == 0:
        return _not_judged(check_id, device, "memory test", memtest.error)
    uncorrected = _rise(memtest.ecc_uncorrected_before, memtest.ecc_uncorrected_after)
    corrected = _rise(memtest.ecc_corrected_before, memtest.ecc_corrected_after)
    if uncorrected:
        return failed(
            check_id,
            device,
            f"{device.label}: {uncorrected} uncorrectable ECC errors during the memory test",
            observed=observed,
            expected=expected,
            remediation=rma,
        )
    summary = (f"{memtest.bytes_tested / 1e9:.1f} GB of {(memtest.total_bytes or 0) / 1e9:.1f} GB in "
               f"{memtest.passes_completed} passes, {memtest.seconds} s")
    if corrected:
        return warned(check_id, device, f"{device.label}: {corrected} corrected ECC errors during the memory test "
                                        f"({summary})", observed=observed, expected=expected,
                      remediation="ECC corrected what the test wrote; a GPU that keeps correcting errors under load is "
                                  "wearing out. " + rma)
    if memtest.error is not None:
        return warned(check_id, device, f"{device.label}: no mismatch in {summary}, but the test ended early: "
                                        f"{memtest.error.message}", observed=observed, expected=expected,
                      remediation="Run it again with a longer --timeout to cover every pass.")
    ecc = "ECC counters unchanged" if memtest.ecc_corrected_after is not None else "ECC not re-read"
    return passed(check_id, device, f"{device.label}: no mismatch in {summary}; {ecc}", observed=observed,
                  expected=expected)


def memtest(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, MEMTEST, "memtest", "memtest", _judge_memtest)
