"""What a run of the load tests does and for how long."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Optional, TextIO

import os

from gpudiag.active.kernels import LEVEL2_PATTERNS, LEVEL3_PATTERNS
from gpudiag.model import DeviceSnapshot

MIB = 1024**2
GIB = 1024**3

ALL_TESTS = ("pcie", "p2p", "hbm", "memtest", "stress")

SOAK_STRESS_SECONDS = 600.0  # `--level 3`: what an acceptance window affords (10 minutes)
SOAK_MEMTEST_FRACTION = 0.95  # of the free memory (the runtime and allocator granularity keep the rest)
SOAK_MARGIN_SECONDS = 300.0  # the rest of a soak (probe, copies, memory test) on top of the stress


def default_deadline(level: int, stress_seconds: Optional[float]) -> float:
    """--timeout's default for `check --level 2|3`: 600 s at level 2 (the stress's 30 s fit with room), the stress
    plus SOAK_MARGIN_SECONDS at level 3 — longer when --stress-seconds asks for more."""
    if level >= 3:
        return (stress_seconds if stress_seconds is not None else SOAK_STRESS_SECONDS) + SOAK_MARGIN_SECONDS
    return max(600.0, (stress_seconds or 0.0) + SOAK_MARGIN_SECONDS)

# Live sensors of one GPU: given the snapshot's device, a fresh DeviceSnapshot of it (only clocks, temperatures,
# power and ECC counters are read). The probe layer provides it, e.g. `lambda d: backend.probe_device(d.index,
# CallTracker())` over an open NVML backend; None leaves the stress unobserved and ECC compared to the snapshot.
DeviceReader = Callable[[DeviceSnapshot], DeviceSnapshot]


@dataclass
class ActiveOptions:
    """What a load test runs and how: its tests, deadline, progress, and how it reads GPUs and kernel log."""
    tests: tuple[str, ...] = ALL_TESTS
    deadline_seconds: Optional[float] = None  # the whole run; the tests stop cleanly when it passes
    progress: Optional[TextIO] = field(default_factory=lambda: sys.stderr)  # one line per step; None: silent
    reader: Optional[DeviceReader] = None
    # The kernel log's events now (the probe layer's Collector.kernel_events): read before and after the stress, so
    # that an Xid, reset or RAS error the load caused is pinned on its GPU. None: not watched.
    kernel_events: Optional[Callable[[], Optional[list]]] = None

    # Host <-> device and GPU <-> GPU copies: after one warm-up copy, `copy_batches` batches of `copy_repeats`
    # copies are timed by GPU events and the best batch is reported (what the link can carry, not its worst
    # moment). 256 MiB copies are long enough (≥5 ms at 55 GB/s) for launch overhead not to count.
    copy_bytes: int = 256 * MIB
    p2p_bytes: int = 256 * MIB
    copy_repeats: int = 8
    copy_batches: int = 3

    # Memory test: this fraction of the free memory, allocated in chunks, each pass a different pattern: pass n is
    # memtest_patterns[n % len(memtest_patterns)], a (kernels mode, seed).
    memtest_fraction: float = 0.9
    memtest_passes: int = len(LEVEL2_PATTERNS)
    memtest_patterns: tuple[tuple[int, int], ...] = LEVEL2_PATTERNS
    memtest_chunk_bytes: int = 2 * GIB
    memtest_inversions: bool = False  # moving inversions: each pass also verifies and inverts every word twice
    # At most this many bytes, whatever the fraction of free memory (a screen's bound: active/screen/footprint.py).
    memtest_max_bytes: Optional[int] = None

    # Stress: FMA kernels of about `stress_launch_ms` each, two in flight, sampled every `sample_interval_seconds`.
    stress_seconds: float = 30.0
    stress_launch_ms: float = 50.0
    sample_interval_seconds: float = 1.0
    progress_interval_seconds: float = 30.0  # a progress line this often while the stress runs
    # The tensor-core kernel where the GPU has one (tensor_kernels.py), else FP32 FMA; in each 8-warp block this many
    # warps stream a buffer of `stress_stream_bytes` through HBM while the others drive the tensor cores.
    stress_tensor: bool = True
    stress_copy_warps: int = 2
    stress_stream_bytes: int = 2 * GIB

    # HBM bandwidth: a copy kernel over two buffers of `hbm_bytes`, `copy_batches` batches of `hbm_repeats`.
    hbm_bytes: int = 2 * GIB
    hbm_repeats: int = 10

    # A GPU is someone else's when it runs processes, is this busy, or has this much memory held by others.
    busy_utilization_percent: int = 10
    busy_memory_bytes: int = 4 * GIB

    # After the deadline or Ctrl-C, how long the tests get to stop and free the GPUs before the run returns
    # without them (a call hung in the driver cannot be interrupted).
    grace_seconds: float = 15.0

    # Test seam: builds the runtime for a vendor (default: CudaRuntime / HipRuntime over the real libraries).
    runtime_factory: Optional[Callable[..., object]] = None
    # VALIDATION ONLY: a fault the stress injects on purpose (ValidationFault), to show that the verification
    # catches it. Never set in production; `for_level` reads it from the GPUDIAG_VALIDATION_ONLY_* variables.
    validation_fault: Optional["ValidationFault"] = None

    @classmethod
    def for_level(cls, level: int, stress_seconds: Optional[float] = None, **changes: object) -> "ActiveOptions":
        """`gpudiag check --level 2`: the short acceptance run. `--level 3`: the soak — the stress for
        `stress_seconds` (default SOAK_STRESS_SECONDS), the memory test over nearly all free memory in every seed,
        with moving inversions."""
        if level >= 3:
            changes = {"memtest_fraction": SOAK_MEMTEST_FRACTION, "memtest_passes": len(LEVEL3_PATTERNS),
                       "memtest_patterns": LEVEL3_PATTERNS, "memtest_inversions": True,
                       "stress_seconds": SOAK_STRESS_SECONDS, **changes}
        if stress_seconds is not None:
            changes["stress_seconds"] = stress_seconds
        changes.setdefault("validation_fault", validation_fault_from(os.environ))
        return cls(**changes)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        unknown = set(self.tests) - set(ALL_TESTS)
        if unknown:
            raise ValueError(f"unknown active test(s) {sorted(unknown)}; known: {', '.join(ALL_TESTS)}")
        if not 0 < self.memtest_fraction <= 0.98:
            raise ValueError(f"memtest_fraction must be in (0, 0.98], got {self.memtest_fraction!r}")
        for name in ("copy_bytes", "p2p_bytes", "copy_repeats", "copy_batches", "memtest_chunk_bytes",
                     "hbm_bytes", "stress_stream_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.stress_copy_warps <= 7:
            raise ValueError(f"stress_copy_warps must be 0-7 (8 warps a block), got {self.stress_copy_warps!r}")
        if not self.memtest_patterns:
            raise ValueError("memtest_patterns must name at least one pattern")
        if self.memtest_max_bytes is not None and self.memtest_max_bytes <= 0:
            raise ValueError(f"memtest_max_bytes must be positive, got {self.memtest_max_bytes!r}")
        if self.memtest_passes < 1 or self.stress_seconds < 0 or self.sample_interval_seconds <= 0:
            raise ValueError("memtest_passes must be ≥ 1, stress_seconds ≥ 0 and sample_interval_seconds > 0")


# --- validation only ------------------------------------------------------------------------------------------------

VALIDATION_FLIP_SM = "GPUDIAG_VALIDATION_ONLY_FLIP_SM"
VALIDATION_FLIP_STREAM = "GPUDIAG_VALIDATION_ONLY_FLIP_STREAM"


@dataclass(frozen=True)
class ValidationFault:
    """VALIDATION ONLY — a fault injected on purpose into one stress run, so that the verification can be shown to
    catch it on real hardware (docs/acceptance.md). kind "sm": the block on the multiprocessor whose location word
    is `sm` (%smid on NVIDIA; (XCC << 16) | HW_ID bits 14:8 on AMD) flips one bit of one accumulator, once, in the
    second launch of the steady load. kind "stream": one word of the HBM buffer the streaming warps read in that
    launch has one bit flipped before it."""

    kind: str  # "sm" | "stream"
    sm: Optional[int] = None

    def __post_init__(self) -> None:
        if self.kind not in ("sm", "stream") or (self.kind == "sm") != (self.sm is not None):
            raise ValueError(f"validation fault: kind 'sm' with an SM number, or 'stream'; got {self!r}")


def validation_fault_from(environ: "os._Environ[str] | dict[str, str]") -> Optional[ValidationFault]:
    """GPUDIAG_VALIDATION_ONLY_FLIP_SM=<location word> or GPUDIAG_VALIDATION_ONLY_FLIP_STREAM=1; ValueError (one
    line) for anything else."""
    sm, stream = environ.get(VALIDATION_FLIP_SM), environ.get(VALIDATION_FLIP_STREAM)
    if sm is not None and stream is not None:
        raise ValueError(f"set {VALIDATION_FLIP_SM} or {VALIDATION_FLIP_STREAM}, not both (validation only)")
    if sm is not None:
        try:
            number = int(sm, 0)
        except ValueError:
            number = -1
        if not 0 <= number < 0xFFFFFFFF:
            raise ValueError(f"{VALIDATION_FLIP_SM}={sm!r}: expected an SM number, e.g. 17 (validation only)")
        return ValidationFault("sm", number)
    if stream is not None:
        if stream != "1":
            raise ValueError(f"{VALIDATION_FLIP_STREAM}={stream!r}: expected 1 (validation only)")
        return ValidationFault("stream")
    return None
