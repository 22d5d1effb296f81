"""What is new in the kernel log since the daemon last read it (issue 34, item 3): one follower, whose answer the
exporter's counters (gpudiag/exporter/state.py) and the service journal (gpudiag/service/keeper.py) are handed.

Every read is a whole read (the ring buffer from its oldest record, or a saved file). Where the events carry the
kmsg sequence number (Documentation/ABI/testing/dev-kmsg: one number per record, rising by one per record for the
boot's life, never reused), "new" is exactly "a higher sequence number than any seen". A read whose highest
number is below the cursor is a new boot (the numbers start again at 0): it is a new baseline, nothing counted
twice. A log without sequence numbers (a saved dmesg, a journal) keeps the diff it always had: by timestamp, and
as a multiset of messages for lines without one.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Optional

from gpudiag.model import KernelEvent


class KernelLogFollower:
    """Turns successive whole reads of the kernel log (the ring buffer, or a file) into the events that are new.

    The first read is the baseline. After it, with sequence numbers, an event is new when its number is above the
    cursor (the highest one seen). Without them, an event is new when its timestamp is later than the latest one seen
    before; at exactly that timestamp, only occurrences beyond those already seen count. Lines without timestamps
    (a plain saved dmesg) are compared as a multiset against the previous read. Were the latest timestamp to go
    backwards (the log replaced), the follower takes a new baseline rather than count anything twice.
    """

    def __init__(self) -> None:
        self._started = False
        self._latest: Optional[float] = None
        self._at_latest: Counter[str] = Counter()
        self._untimed: Counter[str] = Counter()
        self.cursor: Optional[int] = None  # the highest kmsg sequence number seen: "events since N"

    @property
    def started(self) -> bool:
        """Whether the baseline was taken (the next read is compared with it)."""
        return self._started

    def new_events(self, events: Iterable[KernelEvent], last_seq: Optional[int] = None) -> list[KernelEvent]:
        """The events of this read that the reads before did not have ([] for the first read, the baseline).
        `last_seq`: the highest kmsg sequence number of the read (KernelLogInfo.last_seq), None without them."""
        events = list(events)
        was_started, cursor = self._started, self.cursor
        by_diff = self._diff(events)  # kept up to date always: the fallback for a read without numbers
        self.cursor = last_seq
        if last_seq is None or cursor is None or not was_started:
            return by_diff  # no numbers (a saved log), or the first read with them: today's diff
        if last_seq < cursor:
            return []  # the numbers started again: a new boot, a new baseline
        return [e for e in events if e.seq is not None and e.seq > cursor]

    def _diff(self, events: list[KernelEvent]) -> list[KernelEvent]:
        timed = [e for e in events if e.timestamp_seconds is not None]
        untimed = Counter(e.message for e in events if e.timestamp_seconds is None)
        latest = max((e.timestamp_seconds for e in timed), default=self._latest)
        fresh: list[KernelEvent] = []
        if self._started and not (latest is not None and self._latest is not None and latest < self._latest):
            fresh = self._after_latest(timed) + self._beyond(events, untimed)
        self._started = True
        if timed:
            self._latest = latest
            self._at_latest = Counter(e.message for e in timed if e.timestamp_seconds == latest)
        self._untimed = untimed
        return fresh

    def _after_latest(self, timed: list[KernelEvent]) -> list[KernelEvent]:
        if self._latest is None:
            return timed
        fresh = [e for e in timed if e.timestamp_seconds > self._latest]
        seen = Counter(self._at_latest)
        for event in (e for e in timed if e.timestamp_seconds == self._latest):
            if seen[event.message] > 0:
                seen[event.message] -= 1
            else:
                fresh.append(event)
        return fresh

    def _beyond(self, events: list[KernelEvent], untimed: Counter[str]) -> list[KernelEvent]:
        extra = untimed - self._untimed
        fresh = []
        for event in events:
            if event.timestamp_seconds is None and extra[event.message] > 0:
                extra[event.message] -= 1
                fresh.append(event)
        return fresh
