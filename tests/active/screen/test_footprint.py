"""The memory bound of a screen (gpudiag/active/screen/footprint.py; docs/screening.md "What a screen costs")."""

from __future__ import annotations


def test_the_bound_holds_the_context_and_the_tests_share_the_rest():
    from gpudiag.active.screen.footprint import GIB, MIB, SLACK_BYTES, footprint, sized_tests

    h100 = 79 * GIB  # what CUDA reports of an 80 GB H100
    fit = footprint(h100, 0.05, free_before=78 * GIB, free_now=78 * GIB - 520 * MIB)
    assert fit.measured and fit.context_bytes == 520 * MIB
    assert fit.budget_bytes == int(h100 * 0.05) - 520 * MIB - SLACK_BYTES
    tests, sizes = sized_tests(("hbm", "memtest", "stress"), fit.budget_bytes)
    assert tests == ("hbm", "memtest", "stress")
    # each test alone, one after the other: the HBM copy's two buffers, the memory test, the streamed buffer
    assert 2 * sizes["hbm_bytes"] <= fit.budget_bytes and sizes["memtest_max_bytes"] <= fit.budget_bytes
    assert sizes["stress_stream_bytes"] <= fit.budget_bytes
    # a job's 90 % and its context still fit beside a screen at its bound
    assert 0.9 * h100 + 1 * GIB + fit.limit_bytes < h100
    # no reading from before the context: a gigabyte is assumed for it
    assert footprint(h100, 0.05, None, 78 * GIB).context_bytes == GIB
    assert sized_tests(("hbm", "memtest", "stress"), 10 * MIB) == ((), {})
