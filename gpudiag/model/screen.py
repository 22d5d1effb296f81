"""Idle-time screening (docs/screening.md): what one screen of one GPU found, what the node keeps of every GPU's
screens (the state file `gpudiag screen` writes in the state directory), and what a collection read of it.

Times are Unix seconds (floats): the state is compared with `time.time()` by the runner, the exporter and the checks.
A GPU is keyed by its PCI bus ID; its UUID is kept beside it, so that a GPU swapped into the same slot starts with no
screens of its own.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Optional

from gpudiag.model.common import ProbeError
from gpudiag.model.records import dataclass

if TYPE_CHECKING:  # the load tests' types: read back by serialize's resolver, not imported by a level-1 check
    from gpudiag.model.active import SmMismatch

SCREEN_SCHEMA_VERSION = 1

# How a screen ended. verified: every test ran to its end and every result checked out. failed: a result was wrong
# (a block computed other bits than its siblings, a streamed or tested memory word read back wrong). preempted: a job
# came (its process on the GPU, or `gpudiag screen --stop`) and the screen gave the GPU back before it finished.
# error: the tests could not run or judge (the runtime refused, a call failed, the worker died).
VERIFIED, FAILED, PREEMPTED, ERROR = "verified", "failed", "preempted", "error"
OUTCOMES = (VERIFIED, FAILED, PREEMPTED, ERROR)


@dataclass
class ScreenRun:
    """One screen of one GPU: when, how it ended, what ran and what it found."""
    pci_bus_id: str
    started_at: float
    finished_at: float
    outcome: str  # one of OUTCOMES
    reason: str = ""  # one line: what failed, what preempted it, what went wrong
    uuid: Optional[str] = None
    index: Optional[int] = None
    tests: list[str] = field(default_factory=list)  # what ran: "hbm", "memtest", "stress"
    kernel: Optional[str] = None  # the stress kernel (gpudiag_wgmma_bf16 …)
    stress_seconds: Optional[float] = None
    launches_verified: int = 0  # stress launches whose every block result was compared bit for bit
    mismatched_blocks: int = 0  # tensor results that differed from their siblings'
    stream_mismatches: int = 0  # streamed HBM words that read back wrong
    mismatched_sms: list[SmMismatch] = field(default_factory=list)
    memory_tested_bytes: int = 0  # by the pattern test, every pass
    memory_total_bytes: Optional[int] = None
    memory_mismatched_words: int = 0
    memory_patterns: list[str] = field(default_factory=list)
    hbm_gb_per_second: Optional[float] = None
    # The GPU memory the screen held at most, as the vendor's process list showed it (its context included), and
    # the bound it ran under (docs/screening.md "What a screen costs").
    footprint_bytes: Optional[int] = None
    footprint_limit_bytes: Optional[int] = None
    preempted_by: list[int] = field(default_factory=list)  # the job's process IDs, where a process preempted it
    # From the moment the job was seen (or the stop asked) to the screen's process gone and its memory with it.
    yield_seconds: Optional[float] = None
    validation_fault: Optional[str] = None  # validation only: the fault a test seam injected

    @property
    def duration_seconds(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    @property
    def mismatches(self) -> int:
        return self.mismatched_blocks + self.stream_mismatches + self.memory_mismatched_words


@dataclass
class ScreenGpu:
    """What the node keeps of one GPU's screens."""
    pci_bus_id: str
    uuid: Optional[str] = None
    index: Optional[int] = None
    first_seen: Optional[float] = None  # when screening first saw this GPU: a GPU never verified is due from here
    last_used: Optional[float] = None  # the last time a job was seen on it, or a scheduler said one was coming
    last_verified: Optional[float] = None  # when its last verified screen finished
    last_run: Optional[ScreenRun] = None  # the last screen, however it ended
    last_completed: Optional[ScreenRun] = None  # the last screen that judged the GPU: verified or failed
    runs: dict[str, int] = field(default_factory=dict)  # screens by outcome, since screening first saw it
    preemptions: int = 0

    def record(self, run: ScreenRun) -> None:
        """Keep what `run` says of this GPU: its last run, its last judgement, when it was last verified, its counts.
        A preempted run also says that a job held the GPU when it ended."""
        self.last_run = run
        self.runs[run.outcome] = self.runs.get(run.outcome, 0) + 1
        self.index, self.uuid = run.index if run.index is not None else self.index, run.uuid or self.uuid
        if run.outcome in (VERIFIED, FAILED):
            self.last_completed = run
        if run.outcome == VERIFIED:
            self.last_verified = run.finished_at
        if run.outcome == PREEMPTED:
            self.preemptions += 1
            self.last_used = max(self.last_used or run.finished_at, run.finished_at)

    def due_at(self, every_seconds: float) -> Optional[float]:
        """When the GPU must have been verified by: a period after its last verified screen, or after screening
        first saw it; None before screening has seen it."""
        start = self.last_verified if self.last_verified is not None else self.first_seen
        return None if start is None else start + every_seconds


@dataclass
class ScreenState:
    """The state file (`<state dir>/screen/state.json`): the policy the screens run under and every GPU's record."""
    schema_version: int = SCREEN_SCHEMA_VERSION
    updated_at: Optional[float] = None
    every_seconds: float = 7 * 86400.0
    idle_after_seconds: float = 600.0
    max_gpus: int = 1
    gpus: list[ScreenGpu] = field(default_factory=list)

    def gpu(self, pci_bus_id: Optional[str]) -> Optional[ScreenGpu]:
        return next((g for g in self.gpus if g.pci_bus_id == pci_bus_id), None)


@dataclass
class ScreeningInfo:
    """What a collection read of the node's screening: the state, or that there is none (screening not set up), or
    why it could not be read (then the checks cannot say whether the GPUs were screened: unknown)."""
    path: Optional[str] = None
    state: Optional[ScreenState] = None  # None with no error: no screen has run on this node (not set up)
    error: Optional[ProbeError] = None
    read_at: Optional[float] = None  # when it was read: what "overdue" is judged against

    @property
    def readable(self) -> bool:
        return self.error is None


# -- the state file ------------------------------------------------------------------------------------------------

SCREEN_DIR = "screen"  # under the state directory (/var/lib/gpudiag): state.json, the screens' journal, the locks
STATE_NAME = "state.json"
