"""How much GPU memory a screen may hold, and the test sizes that fit in it (docs/screening.md "What a screen costs").

A job that starts while a screen still runs must get the memory it would get on an idle GPU: the screen is gone
within a second or so, but the job may allocate in its first second. The bound is a share of the GPU's memory
(`screen_memory_fraction`, 5 %) that holds *everything* the screen has on the GPU at any moment: its context, its
modules and the buffers of the test that runs. The context is measured, not guessed: the free memory the vendor
library reported before the worker started, less what the runtime reports free once the worker's context exists.
The tests run one after the other and each frees what it took before the next starts, so each may use the whole
budget: the HBM copy two buffers of half of it, the pattern test and the stress's streamed buffer all of it.

The pattern test therefore covers only a slice of the memory per screen (a few percent): which physical pages a
slice lands on is the driver's choice, so screens cannot promise to cover the memory piece by piece over time, and
the full-memory test stays with `gpudiag check --level 2|3` in an acceptance window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MIB = 1024**2
GIB = 1024**3
CONTEXT_ALLOWANCE_BYTES = 1 * GIB  # the context's share when it cannot be measured (no reading from before)
SLACK_BYTES = 256 * MIB  # modules, result records, events, the allocator's granularity
MIN_TEST_BYTES = 64 * MIB  # below this a test's buffers are too small to say anything: it is left out


@dataclass(frozen=True)
class Footprint:
    """How much of a GPU's memory a screen may hold, its runtime's context included."""
    total_bytes: int  # the GPU's memory as the runtime reports it
    limit_bytes: int  # what the screen may hold at any moment, context included
    context_bytes: int  # the runtime's context, measured (or CONTEXT_ALLOWANCE_BYTES)
    measured: bool  # whether context_bytes was measured

    @property
    def budget_bytes(self) -> int:
        """What the tests' buffers may take."""
        return max(0, self.limit_bytes - self.context_bytes - SLACK_BYTES)


def footprint(total_bytes: int, fraction: float, free_before: Optional[int], free_now: int) -> Footprint:
    """`free_before`: free memory before this process made its context (the vendor library's reading), `free_now`
    the runtime's reading with the context made."""
    limit = int(total_bytes * fraction)
    if free_before is not None and free_before >= free_now:
        return Footprint(total_bytes, limit, free_before - free_now, True)
    return Footprint(total_bytes, limit, CONTEXT_ALLOWANCE_BYTES, False)


def sized_tests(tests: tuple[str, ...], budget_bytes: int) -> tuple[tuple[str, ...], dict[str, int]]:
    """The tests that fit in `budget_bytes` and the ActiveOptions sizes that keep each within it."""
    if budget_bytes < MIN_TEST_BYTES:
        return (), {}
    whole = budget_bytes // MIB * MIB
    sizes = {"memtest_max_bytes": whole, "memtest_chunk_bytes": min(2 * GIB, whole), "stress_stream_bytes": whole}
    if whole // 2 >= MIN_TEST_BYTES // 2:
        sizes["hbm_bytes"] = whole // 2  # two buffers
    kept = tuple(t for t in tests if t != "hbm" or "hbm_bytes" in sizes)
    return kept, sizes
