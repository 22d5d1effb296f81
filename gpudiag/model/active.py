"""What the load tests (gpudiag.active) measured. GB are 10^9 bytes."""

from __future__ import annotations

from dataclasses import field
from typing import Optional

from gpudiag.model.common import ProbeError
from gpudiag.model.records import dataclass


# A test that could not run or was cut short carries a ProbeError (kind TIMEOUT: the deadline or an interruption
# stopped it) beside what it measured.


@dataclass
class CopyBandwidth:
    """Timed copies of one kind: the best of several batches, timed by GPU events."""

    gb_per_second: Optional[float] = None
    bytes_per_copy: Optional[int] = None
    copies_timed: int = 0
    # The PCIe link as the vendor library read it while these copies were in flight (host copies only): the best
    # generation and width of the samples, None when no sample could be taken (no reader, or it failed).
    link_generation: Optional[int] = None
    link_width: Optional[int] = None
    error: Optional[ProbeError] = None


@dataclass
class PeerBandwidth:
    """GPU-to-GPU copies from `src` to `dst` (snapshot device indexes)."""

    src: int
    dst: int
    p2p_enabled: Optional[bool] = None  # False: no peer access, the runtime staged the copy through host memory
    copy: CopyBandwidth = field(default_factory=CopyBandwidth)
    bidirectional_gb_per_second: Optional[float] = None  # both directions at once, summed (on src < dst only)


@dataclass
class MemtestResult:
    """The device-memory test of one GPU: bytes tested and mismatches found."""
    bytes_tested: int = 0  # device memory written and read back by every pass
    free_bytes: Optional[int] = None  # free when the test started (after gpudiag's own context)
    total_bytes: Optional[int] = None
    passes_requested: int = 0
    passes_completed: int = 0
    mismatched_words: int = 0  # 32-bit words that read back wrong, over all passes
    patterns: list[str] = field(default_factory=list)  # each completed pass's pattern (kernels.pattern_name)
    first_error_address: Optional[int] = None  # device virtual address of the lowest mismatching word
    flipped_bits_mask: Optional[int] = None  # OR of (read ^ written) over all mismatches
    seconds: Optional[float] = None
    ecc_corrected_before: Optional[int] = None  # volatile ECC counters around the test
    ecc_corrected_after: Optional[int] = None
    ecc_uncorrected_before: Optional[int] = None
    ecc_uncorrected_after: Optional[int] = None
    error: Optional[ProbeError] = None


@dataclass
class TelemetrySample:
    """One reading of clocks, power and temperature taken while a load test runs."""
    seconds: float  # since the load started
    sm_clock_mhz: Optional[int] = None
    memory_clock_mhz: Optional[int] = None
    temperature_celsius: Optional[float] = None
    power_watts: Optional[float] = None
    throttle_reasons: Optional[list[str]] = None  # names from THROTTLE_REASONS
    power_limit_watts: Optional[float] = None  # the enforced power limit at the time of the sample


@dataclass
class SmMismatch:
    """One multiprocessor (AMD: one CU, placed by XCC/SE/SH) whose tensor results differed from its siblings'."""
    location: str  # "SM 17" | "XCC 3 SE 1 SH 0 CU 5"
    raw: int  # the kernel's location word: %smid (NVIDIA), XCC << 16 | HW_ID bits 14:8 (AMD)
    launches: int = 0  # launches in which a block on it differed
    first_launch: int = 0  # the first such launch (0: the first launch of the steady load)


@dataclass
class ComputeVerification:
    """What the stress computed, checked bit for bit (gpudiag/active/stress_verify.py). Every block runs the same
    instructions on the same operands, so every block's signatures must be equal, launch after launch; the streaming
    warps check every HBM word they read against the pattern it must hold."""
    launches_verified: int = 0  # steady launches whose every block was compared
    blocks_per_launch: int = 0
    signatures_per_block: int = 0  # one per tensor warp
    mismatched_blocks: int = 0  # blocks that differed from the launch's majority or from the first launch, summed
    launches_with_mismatch: int = 0
    launches_without_majority: int = 0  # no result shared by more than half of the blocks
    mismatched_sms: list[SmMismatch] = field(default_factory=list)  # at most MAX_LISTED_SMS, most launches first
    # A launch of `reference_iterations` run before the load (cold) and after it (hot): its majority result must be
    # the same both times, and on every GPU of the same model (the checks compare `reference_signature`).
    reference_iterations: Optional[int] = None
    reference_signature: Optional[str] = None
    hot_reference_matches: Optional[bool] = None
    # Thread 0's first accumulator at the first sample of the cold reference launch (the majority's): a sum of BF16
    # products that must be finite and non-zero (tensor units that return nothing would agree with each other).
    reference_sample: Optional[float] = None
    stream_words_read: int = 0  # HBM words the streaming warps read and compared (a word read twice counts twice)
    stream_mismatches: int = 0  # reads that returned another value than the word must hold
    stream_first_error_address: Optional[int] = None  # device address of the lowest mismatching word
    stream_flipped_bits_mask: Optional[int] = None
    host_seconds: float = 0.0  # spent comparing on the host (overlapping the next launch on the GPU)
    validation_fault: Optional[str] = None  # validation only: the fault a test seam injected, or why it was not


@dataclass
class StressResult:
    """The full-power stress of one GPU: its figures and the telemetry seen meanwhile."""
    seconds_requested: float = 0.0
    seconds: Optional[float] = None  # how long the load ran
    launches: int = 0
    fp32_tflops: Optional[float] = None  # FMA throughput achieved (2 FLOP per FMA), when the FP32 kernel ran
    samples: list[TelemetrySample] = field(default_factory=list)
    telemetry_error: Optional[str] = None  # why no (or fewer) samples were taken
    error: Optional[ProbeError] = None
    kernel: Optional[str] = None  # gpudiag_wgmma_bf16 | gpudiag_mma_bf16 | gpudiag_mfma_bf16 | gpudiag_fma
    precision: Optional[str] = None  # "bf16" (tensor/matrix cores, FP32 accumulate) | "fp32" (FMA pipes)
    tflops: Optional[float] = None  # throughput of that kernel in `precision`
    kernel_fallback: Optional[str] = None  # why the GPU's first-choice kernel did not run (its module was refused)
    stream_gb_per_second: Optional[float] = None  # HBM traffic (read + written) of the streaming warps
    ecc_corrected_before: Optional[int] = None  # volatile ECC counters around the stress
    ecc_corrected_after: Optional[int] = None
    ecc_uncorrected_before: Optional[int] = None
    ecc_uncorrected_after: Optional[int] = None
    # Kernel-log events of this GPU (Xid, reset, RAS…) that appeared while the stress ran, as "<kind> <code>:
    # <message>" (at most MAX_STRESS_EVENTS); None: the log was not watched (not readable, or no reader given).
    kernel_events: Optional[list[str]] = None
    # The check of every result (None: the kernel ran is not verified, the FP32 fallback).
    verification: Optional[ComputeVerification] = None


@dataclass
class HbmBandwidth:
    """Device-memory copy bandwidth: a copy kernel reads `bytes_per_copy` and writes as many."""

    bytes_per_copy: int = 0
    copies_timed: int = 0
    gb_per_second: Optional[float] = None  # bytes copied per second, counted once (as torch's copy_ is quoted)
    error: Optional[ProbeError] = None


@dataclass
class ActiveDevice:
    """The load-test results of one GPU."""
    index: int  # the snapshot device index
    pci_bus_id: Optional[str] = None
    runtime: Optional[str] = None  # "cuda 12.4" | "hip 6.2"
    skipped: Optional[str] = None  # why the GPU was left alone (busy with another job, MIG, not visible…)
    h2d: Optional[CopyBandwidth] = None  # pinned host memory → device
    d2h: Optional[CopyBandwidth] = None
    memtest: Optional[MemtestResult] = None
    stress: Optional[StressResult] = None
    hbm: Optional[HbmBandwidth] = None


@dataclass
class ActiveResults:
    """The load tests of one `--level 2|3` run, for every GPU."""
    tests: list[str] = field(default_factory=list)  # requested: "pcie", "p2p", "memtest", "stress"
    started_at: Optional[str] = None  # ISO 8601 UTC
    duration_seconds: Optional[float] = None
    devices: list[ActiveDevice] = field(default_factory=list)
    peers: list[PeerBandwidth] = field(default_factory=list)
    errors: list[ProbeError] = field(default_factory=list)  # node-level: runtime missing, hung call, interrupted
