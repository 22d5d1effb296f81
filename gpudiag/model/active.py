"""What the load tests (gpudiag.active) measured. GB are 10^9 bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gpudiag.model.common import ProbeError


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
class StressResult:
    """The full-power stress of one GPU: its figures and the telemetry seen meanwhile."""
    seconds_requested: float = 0.0
    seconds: Optional[float] = None  # how long the load ran
    launches: int = 0
    fp32_tflops: Optional[float] = None  # FMA throughput achieved (2 FLOP per FMA), when the FP32 kernel ran
    samples: list[TelemetrySample] = field(default_factory=list)
    telemetry_error: Optional[str] = None  # why no (or fewer) samples were taken
    error: Optional[ProbeError] = None
    kernel: Optional[str] = None  # the stress kernel run: gpudiag_mma_bf16 | gpudiag_mfma_bf16 | gpudiag_fma
    precision: Optional[str] = None  # "bf16" (tensor/matrix cores, FP32 accumulate) | "fp32" (FMA pipes)
    tflops: Optional[float] = None  # throughput of that kernel in `precision`
    stream_gb_per_second: Optional[float] = None  # HBM traffic (read + written) of the streaming warps
    ecc_corrected_before: Optional[int] = None  # volatile ECC counters around the stress
    ecc_corrected_after: Optional[int] = None
    ecc_uncorrected_before: Optional[int] = None
    ecc_uncorrected_after: Optional[int] = None
    # Kernel-log events of this GPU (Xid, reset, RAS…) that appeared while the stress ran, as "<kind> <code>:
    # <message>" (at most MAX_STRESS_EVENTS); None: the log was not watched (not readable, or no reader given).
    kernel_events: Optional[list[str]] = None


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
