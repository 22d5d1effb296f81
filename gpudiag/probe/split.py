"""One collection made by several processes at once (`gpudiag check --direct` on the node itself forks three:
gpudiag/cli/check/early_collect.py), joined into the snapshot `Collector.collect()` makes.

- The vendor part: the host, the GPUs through their libraries, their peers and processes: `Collector.collect()` less
  the side parts (`collect_vendor_part`).
- The side parts: the kernel log (with earlier boots) and every family's part (`collect_side_parts`, all or some of
  them in each process; `SideParts.merged` puts their answers together), over a host
  reading of their own: they read only the host's boot and the GPUs on the PCI bus, as they do in one process, where
  they start before the GPUs are opened.
- `join` stores the side parts' outcomes into the vendor part's snapshot through the collector's own finishing code,
  so a part that failed, hung or never answered is recorded exactly as in one process (fail closed).

Why apart (issue 36, item 9): each needs most of a cold check's imports and Python work, and in one process
they took turns on the GIL; NVML's calls, the longest chain, then waited behind the kernel log's parsing and the
parts' imports (tests/fixtures/h100/recorded/lab-2026-12-06c/).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import time
from dataclasses import dataclass, field

from gpudiag import __version__
from gpudiag.model import NodeSnapshot
from gpudiag.probe.collector import FAMILY_PARTS, CollectOptions, Collector
from gpudiag.probe.deadline import CallTracker, Outcome

SIDE_PARTS = frozenset({"kernel_log"}) | frozenset(FAMILY_PARTS)
KERNEL_LOG = "kernel_log"


@dataclass
class SideParts:
    """The side parts' outcomes by part name (each as the collector's own job would have ended), what the kernel
    log's reader learnt of earlier boots, and how long the side collection took."""

    outcomes: dict = field(default_factory=dict)
    boot_history: object = None
    duration_seconds: float = 0.0

    @classmethod
    def failed(cls, names: list, why: str, hung: bool, elapsed_seconds: float) -> "SideParts":
        """These side parts failed as one (the process collecting them died, raised or hung)."""
        if hung:
            outcome = Outcome(done=False, elapsed_seconds=elapsed_seconds, tracker=CallTracker(current=why))
        else:
            outcome = Outcome(done=True, error=RuntimeError(why), elapsed_seconds=elapsed_seconds)
        return cls({name: outcome for name in names}, None, elapsed_seconds)

    @classmethod
    def merged(cls, pieces: list) -> "SideParts":
        """Side parts collected by several processes, as one: the outcomes in the collector's order."""
        order = [KERNEL_LOG, *FAMILY_PARTS]
        outcomes = {name: piece.outcomes[name] for name in order for piece in pieces if name in piece.outcomes}
        history = next((piece.boot_history for piece in pieces if piece.boot_history is not None), None)
        return cls(outcomes, history, max((piece.duration_seconds for piece in pieces), default=0.0))


def side_parts_of(collects: str) -> frozenset:
    """The side parts one of the check's side processes collects (gpudiag/cli/check/early_collect.py): the kernel
    log's process only the kernel log, the families' process every family's part."""
    return frozenset({KERNEL_LOG}) if collects == KERNEL_LOG else frozenset(FAMILY_PARTS)


def expected_side_parts(options: CollectOptions, names=SIDE_PARTS) -> list[str]:
    """Of `names`, the side parts a collection with these options makes, in the collector's order."""
    families = [name for name in FAMILY_PARTS if name in options.parts and name in names]
    reads_log = options.read_kernel_log or options.kernel_log_file is not None
    return ([KERNEL_LOG] if KERNEL_LOG in options.parts and KERNEL_LOG in names and reads_log else []) + families


def collect_vendor_part(options: CollectOptions) -> NodeSnapshot:
    """The collection without its side parts."""
    with Collector(dataclasses.replace(options, parts=options.parts - SIDE_PARTS)) as collector:
        return collector.collect()


def collect_side_parts(options: CollectOptions, names=SIDE_PARTS) -> SideParts:
    """The side parts (of `names`, those the options ask for), started and waited for as `Collector.collect()`
    starts and waits for them, within the same deadline; each outcome made safe to send to another process
    (`_portable`)."""
    collector = Collector(dataclasses.replace(options, parts=options.parts & frozenset(names)))
    started = time.monotonic()
    until = started + options.timeout_seconds
    snapshot = NodeSnapshot(hostname=os.uname().nodename, gpudiag_version=__version__)
    if frozenset(FAMILY_PARTS) & collector.options.parts:
        collector._collect_host(snapshot, until)
        boot_id, boot_time = snapshot.host.boot_id, snapshot.host.boot_time
    else:
        boot_id, boot_time = _this_boot(options.root)
    kernel_log = collector._start_kernel_log(until, boot_id, boot_time)
    parts = collector._start_family_parts(snapshot, until)
    outcomes = {}
    if kernel_log is not None:
        outcomes[KERNEL_LOG] = _portable(kernel_log(until))
    for name, (_, wait) in parts.items():
        outcomes[name] = _portable(wait(until))
    return SideParts(outcomes, collector._boot_history, round(time.monotonic() - started, 4))


def _this_boot(root) -> tuple:
    """(boot ID, boot time) as the host probe reads them (gpudiag/probe/host.py), None where unreadable: all the
    kernel log's part asks of the host, for its earlier boots. The kernel log's own process reads no more of it
    (the rest of the host probe took it 6.6 ms on the lab H100, before the log's scan could start)."""
    from gpudiag.probe import host, procfs

    try:
        boot_time = procfs.boot_time()
    except Exception:  # noqa: BLE001 - as the host probe: an unreadable or odd /proc/stat is no boot time
        boot_time = None
    return host.read_boot_id(root), boot_time


def join(snapshot: NodeSnapshot, side: SideParts, options: CollectOptions) -> NodeSnapshot:
    """The side parts stored into the vendor part's snapshot, as `Collector.collect()` stores them: the kernel log
    first, then each family's part; runs and errors in the one-process order (before a failed `processes` run, which
    one process records last)."""
    collector = Collector(options)
    collector._boot_history = side.boot_history
    trailing = [run for run in snapshot.collectors if run.name == "processes"]
    snapshot.collectors = [run for run in snapshot.collectors if run.name != "processes"]
    now = time.monotonic()  # every outcome is in: nothing is waited for
    log_outcome = side.outcomes.get(KERNEL_LOG)
    collector._finish_kernel_log(snapshot, None if log_outcome is None else (lambda until: log_outcome), now)
    parts = {name: (importlib.import_module(FAMILY_PARTS[name]), lambda until, outcome=outcome: outcome)
             for name, outcome in side.outcomes.items() if name in FAMILY_PARTS}
    collector._finish_family_parts(snapshot, parts, now)
    snapshot.collectors.extend(trailing)
    if snapshot.duration_seconds is not None:
        snapshot.duration_seconds = round(max(snapshot.duration_seconds, side.duration_seconds), 4)
    return snapshot


def _portable(outcome: Outcome) -> Outcome:
    """The outcome without its worker thread (a part still hung is abandoned with this process), with what it raised
    as text where the exception itself cannot be pickled, and a reading that cannot be pickled as a failure (fail
    closed: the part is not read, never read empty)."""
    value, error = outcome.value, outcome.error
    if error is not None and not _picklable(error):
        error = RuntimeError(f"{type(error).__name__}: {error}")
    if value is not None and not _picklable(value):
        value, error = None, RuntimeError(f"its reading ({type(value).__name__}) could not be sent to the check")
    tracker = CallTracker(outcome.tracker.current, outcome.tracker.completed)
    return Outcome(done=outcome.done, value=value, error=error, elapsed_seconds=outcome.elapsed_seconds,
                   tracker=tracker, started=outcome.started)


def _picklable(value: object) -> bool:
    import pickle

    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - any reason is the same answer
        return False
    return True
