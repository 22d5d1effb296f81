"""What changed between collections, turned into journal entries (docs/service.md "Journal").

Conditions that last — a check at warn/fail/unknown, a GPU lost, the clocks held down for a reason — are episodes:
one `begin` entry when the condition appears (with `first_seen`), a `change` entry when a check's status changes
within it, an `end` entry when it is gone (with `first_seen`, `last_seen` — the last collection that still saw it —
and `duration_seconds` up to the collection that no longer did). Open episodes are rebuilt from the journal at
start, so a check failing before a restart is still "failing since" its first sighting after it.
Kernel-log events (Xid, amdgpu RAS, resets, …) are single entries, each once: they are told apart by kind, code,
bus, timestamp and text, so re-reading the ring buffer after a restart does not journal them again. Each carries the
`level` the checks give it on its own (gpudiag/checks/kernel_log/family.py event_severity). Warn-level events — an Xid
31 is any CUDA user's to cause, at 2-3 a second on the lab H200 — are counted, not stored one by one: per GPU, kind
and code, the first in an hour is an entry of its own, the rest of that hour one `repeat` entry whose count, last
time and last message are updated in place. Fail-level events and the entries of open episodes are carried across
rotation (`carry`), so no flood of routine entries can push an Xid 48 or a "failing since" out (issue 24, item 10).
Throttling that started and ended between two collections shows only in the time counters
(ClockInfo.throttle_seconds): a counter that grew while its reason was not seen active is a `throttle` entry with
the seconds it grew by; counted like a warn-level event (any user's kernel makes a GPU hit its power cap).
"""

from __future__ import annotations

import datetime
import threading
from typing import Optional

from gpudiag.checks.kernel_log.family import event_severity
from gpudiag.daemon.poller import Collection
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, KernelEvent, NodeSnapshot, Status
from gpudiag.report.subject import subject
from gpudiag.service.journal import Journal, by_time, iso, parse_time

BAD = (Status.WARN, Status.FAIL, Status.UNKNOWN)
# Clock-event reasons that are not a problem: an idle GPU, clocks an administrator chose, display, boost sync.
BENIGN_THROTTLE = frozenset({"gpu_idle", "applications_clocks", "display_clocks", "sync_boost", "low_utilization",
                             "below_application_clocks", "below_base_clocks"})
MAX_EVENTS_PER_COLLECTION = 200  # a log flood is summarised, not copied into the journal line by line
MESSAGE_CHARS = 300
MAX_REMEMBERED_EVENTS = 20_000
REPEAT_WINDOW_SECONDS = 3600.0  # a warn-level event of one GPU, kind and code: one entry an hour, then a count


def _episode_key(entry: dict) -> tuple:
    """What one episode is about: a check on a GPU, on a GPU on the bus no library lists (its bus ID) or on a NIC
    port (`nic`, `port`: absent from entries about anything else, and from journals written before them)."""
    return (entry.get("kind"), entry.get("check"), entry.get("pci_bus_id"), entry.get("gpu"), entry.get("reason"),
            entry.get("nic"), entry.get("port"))


def _event_key(entry: dict) -> tuple:
    return (entry.get("kind"), entry.get("code"), entry.get("pci_bus_id"), entry.get("log_timestamp"),
            entry.get("message"))


def _repeat_key(entry: dict) -> tuple:
    """What repeats of one warn-level event share: one GPU, one kind, one code (or throttle reason)."""
    return (entry.get("kind"), entry.get("code"), entry.get("reason"), entry.get("pci_bus_id"))


def _fail_level(entry: dict) -> bool:
    if entry.get("event") == "event":
        return entry.get("level") == "fail"
    return entry.get("status") == "fail" or entry.get("kind") == "gpu_lost"


class JournalKeeper:
    def __init__(self, journal: Journal, expect: Optional[Expectations] = None):
        self.journal = journal
        self._expect = expect or Expectations()
        self._lock = threading.Lock()
        self.open: dict[tuple, dict] = {}  # episode key → its begin entry, plus "last_seen"
        self._seen_events: set[tuple] = set()
        # repeat key → [epoch seconds of its last entry of its own, its `repeat` entry or None]
        self._repeats: dict[tuple, list] = {}
        self._counted_upto: dict[tuple, tuple] = {}  # repeat key → (boot time, last log timestamp) counted
        self._pending: list[dict] = []  # repeat entries made in this collection, not yet in the journal
        self._throttle_seconds: dict[tuple, float] = {}
        self._known_gpus: dict[str, Optional[int]] = {}  # bus ID → index, of GPUs seen reachable
        for entry in journal.entries():
            self._replay(entry)
            self._replay_counts(entry)
        journal.carry = self._carry

    def _replay(self, entry: dict) -> None:
        event = entry.get("event")
        if event in ("begin", "change"):
            self.open[_episode_key(entry)] = dict(entry, first_seen=entry.get("first_seen", entry["time"]),
                                                  last_seen=entry["time"])
        elif event == "end":
            self.open.pop(_episode_key(entry), None)
        elif event == "event":
            self._seen_events.add(_event_key(entry))

    def _replay_counts(self, entry: dict) -> None:
        """At start: where the counting of each warn-level event stood (observe keeps it up to date after)."""
        event = entry.get("event")
        if event == "event":
            moment = parse_time(entry.get("time"))
            if entry.get("level") == "warn" and moment is not None:
                self._repeats[_repeat_key(entry)] = [moment.timestamp(), None]
        elif event == "repeat":
            state = self._repeats.get(_repeat_key(entry))
            if state is not None:
                state[1] = entry
            if entry.get("last_log_timestamp") is not None:
                self._counted_upto[_repeat_key(entry)] = (entry.get("boot_time"), entry["last_log_timestamp"])

    # -- fed after every collection ---------------------------------------------------------------------------

    def observe(self, collection: Collection) -> None:
        now = iso(datetime.datetime.fromtimestamp(collection.finished_at, datetime.timezone.utc))
        with self._lock:
            current = self._conditions(collection)
            self._pending, counted = [], False
            entries = self._episodes(current, now)
            events, counted_events = self._events(collection, now)
            between, counted_between = self._between(collection.snapshot, now, collection.finished_at)
            entries += events + between
            for entry in entries:
                self._replay(entry)
            for key in current:
                if key in self.open:
                    self.open[key]["last_seen"] = now
            entries += self._pending
            counted = counted_events or counted_between
        self.journal.append(entries, changed=counted)

    def _conditions(self, collection: Collection) -> dict[tuple, dict]:
        found: dict[tuple, dict] = {}
        for result in collection.results:
            if result.status in BAD:
                entry = {"kind": "check", "check": result.check, "status": result.status.value,
                         **_about(result), "message": result.message[:MESSAGE_CHARS]}
                found[_episode_key(entry)] = entry
        snapshot = collection.snapshot
        present = set()
        for device in snapshot.devices:
            bus = device.pci_bus_id
            present.add(bus)
            if device.reachable and bus:
                self._known_gpus[bus] = device.index
            if not device.reachable:
                why = next((e.message for e in device.errors), "unreachable")
                entry = {"kind": "gpu_lost", "gpu": device.index, "pci_bus_id": bus, "message": why[:MESSAGE_CHARS]}
                found[_episode_key(entry)] = entry
            for reason in device.clocks.throttle_reasons or []:
                if reason not in BENIGN_THROTTLE:
                    entry = {"kind": "throttle", "reason": reason, "gpu": device.index, "pci_bus_id": bus}
                    found[_episode_key(entry)] = entry
        for bus, index in self._known_gpus.items():
            if bus not in present:  # gone from the vendor library's list altogether
                entry = {"kind": "gpu_lost", "gpu": index, "pci_bus_id": bus,
                         "message": "no longer listed by the vendor library"}
                found[_episode_key(entry)] = entry
        return found

    def _episodes(self, current: dict[tuple, dict], now: str) -> list[dict]:
        entries = []
        for key, condition in current.items():
            was = self.open.get(key)
            if was is None:
                entries.append(dict(condition, time=now, event="begin", first_seen=now))
            elif condition.get("status") != was.get("status"):
                entries.append(dict(condition, time=now, event="change", first_seen=was["first_seen"],
                                    previous=was.get("status")))
        for key, was in self.open.items():
            if key not in current:
                end = {k: was.get(k) for k in ("kind", "check", "status", "gpu", "pci_bus_id", "reason")}
                entries.append(dict(end, time=now, event="end", first_seen=was["first_seen"],
                                    last_seen=was.get("last_seen", was["first_seen"]),
                                    duration_seconds=_seconds_between(was["first_seen"], now)))
        return entries

    def _level(self, event: KernelEvent) -> str:
        return "fail" if event_severity(event, self._expect) in (Status.FAIL, Status.UNKNOWN) else "warn"

    def _count(self, entry: dict, now: str, moment: float, boot_time: Optional[float]) -> bool:
        """Whether this warn-level `entry` is counted into its `repeat` entry rather than journaled on its own."""
        key = _repeat_key(entry)
        upto = self._counted_upto.get(key)
        if (upto is not None and upto[0] is not None and boot_time is not None and abs(upto[0] - boot_time) < 2
                and entry.get("log_timestamp") is not None and entry["log_timestamp"] <= upto[1]):
            return True  # counted before a restart: still in the ring buffer, not again
        state = self._repeats.get(key)
        if state is None or moment - state[0] > REPEAT_WINDOW_SECONDS:
            self._repeats[key] = [moment, None]
            return False
        repeat = state[1]
        if repeat is None or not (any(p is repeat for p in self._pending) or self.journal.in_current(repeat)):
            repeat = {
                "kind": entry["kind"],
                "event": "repeat",
                "level": "warn",
                "time": now,
                "first_seen": now,
                "count": 0,
                **{k: entry.get(k) for k in ("code", "reason", "gpu", "pci_bus_id", "boot_id", "detail")},
                "last_seen": now,
                "message": None,
                "duration_seconds": None,
                "boot_time": boot_time,
                "last_log_timestamp": None,
            }
            state[1] = repeat
            self._pending.append(repeat)
        repeat.update(count=repeat["count"] + 1, last_seen=now, message=entry.get("message"))
        if entry.get("duration_seconds") is not None:
            repeat["duration_seconds"] = round((repeat["duration_seconds"] or 0) + entry["duration_seconds"], 3)
        if entry.get("log_timestamp") is not None:
            repeat["last_log_timestamp"] = entry["log_timestamp"]
            self._counted_upto[key] = (boot_time, entry["log_timestamp"])
        return True

    def _events(self, collection: Collection, now: str) -> tuple[list[dict], bool]:
        snapshot, moment = collection.snapshot, collection.finished_at
        index_of = {d.pci_bus_id: d.index for d in snapshot.devices if d.pci_bus_id}
        # What is new comes from the daemon's one kernel-log follower (gpudiag/daemon/follower.py: "events since N"
        # by the kmsg sequence number, today's diff for a log without one). The first read, and a collection made
        # without a follower, go through the whole log: the events seen (journaled before a restart too) are skipped.
        events = snapshot.kernel_log.events
        followed = collection.new_events is not None and not collection.log_baseline
        new = events if not followed else list(collection.new_events or ())
        # boot_id: which boot the event was logged in, so that a fault that comes back after reboots is seen
        # (gpudiag/probe/kernel_log/boot_history.py reads these back); detail: what the line said of its severity.
        in_log = [{"kind": event.kind, "event": "event", "code": event.code, "pci_bus_id": event.pci_bus_id,
                   "gpu": index_of.get(event.pci_bus_id), "log_timestamp": event.timestamp_seconds,
                   "message": event.message[:MESSAGE_CHARS], "level": self._level(event),
                   **({"boot_id": snapshot.host.boot_id} if snapshot.host.boot_id else {}),
                   **({"detail": event.detail} if event.detail else {})} for event in events]
        fresh = {id(event) for event in new}
        entries, dropped, counted = [], 0, False
        for event, entry in zip(events, in_log):
            key = _event_key(entry)
            if key in self._seen_events or id(event) not in fresh:
                self._seen_events.add(key)
                continue
            self._seen_events.add(key)
            if entry["level"] == "warn" and self._count(entry, now, moment, snapshot.host.boot_time):
                counted = True
                continue
            if len(entries) >= MAX_EVENTS_PER_COLLECTION:
                dropped += 1
                continue
            entries.append(dict(entry, time=now))
        if len(self._seen_events) > MAX_REMEMBERED_EVENTS:
            # Only events still in the log can come back: forget the others, keep memory bounded for months.
            self._seen_events = {_event_key(entry) for entry in in_log}
        if dropped:
            entries.append({"kind": "events_dropped", "event": "event", "time": now, "count": dropped,
                            "level": "fail",  # what was not journaled was hardware evidence: say so for good
                            "message": f"{dropped} more kernel-log events in one collection, not journaled"})
        return entries, counted

    def _between(self, snapshot: NodeSnapshot, now: str, moment: float) -> tuple[list[dict], bool]:
        """Throttling seen only in the time counters: it began and ended between two collections."""
        entries, counted = [], False
        for device in snapshot.devices:
            active = set(device.clocks.throttle_reasons or [])
            for reason, seconds in (device.clocks.throttle_seconds or {}).items():
                key = (device.pci_bus_id, reason)
                before = self._throttle_seconds.get(key)
                self._throttle_seconds[key] = seconds
                grew = None if before is None else seconds - before
                if grew and grew > 0.5 and reason not in active and reason not in BENIGN_THROTTLE:
                    entry = {"kind": "throttle", "event": "event", "time": now, "reason": reason,
                             "gpu": device.index, "pci_bus_id": device.pci_bus_id, "level": "warn",
                             "duration_seconds": round(grew, 3),
                             "message": f"{reason}: clocks held down {grew:.1f} s since the last collection"}
                    if self._count(entry, now, moment, None):
                        counted = True
                    else:
                        entries.append(entry)
        return entries, counted

    # -- asked by the journal when it rotates -----------------------------------------------------------------

    def _carry(self, dropped: list[dict]) -> list[dict]:
        """Of a generation rotation drops: the begin entry and the latest change of every episode still open, and
        every fail-level entry (Xid 48, a GPU lost, a check that failed and recovered). Runs on the collecting
        thread (inside observe's journal.append), the only one that changes `open`."""
        kept, latest_change = [], {}
        for entry in dropped:
            event = entry.get("event")
            was = self.open.get(_episode_key(entry)) if event in ("begin", "change") else None
            if was is not None and entry.get("first_seen", entry.get("time")) == was.get("first_seen"):
                if event == "change":
                    latest_change[_episode_key(entry)] = entry
                    continue
                kept.append(entry)
            elif _fail_level(entry):
                kept.append(entry)
        return sorted(kept + list(latest_change.values()), key=by_time)

    # -- read by the socket handlers --------------------------------------------------------------------------

    def open_checks(self) -> list[dict]:
        with self._lock:
            return [{k: e.get(k) for k in ("check", "status", "gpu", "pci_bus_id", "first_seen", "last_seen")}
                    for e in self.open.values() if e.get("kind") == "check"]


def _about(result: CheckResult) -> dict:
    """Where a check entry is: its GPU (index, bus ID), a GPU on the bus by its bus ID, or a NIC and port."""
    device = result.device
    if device is not None:
        return {"gpu": device.index, "pci_bus_id": device.pci_bus_id}
    about = subject(result)
    if about is not None and about.is_nic:
        return {"gpu": None, "pci_bus_id": None, "nic": about.nic, "port": about.port, "nic_pci_bus_id": about.bus}
    return {"gpu": None, "pci_bus_id": about.bus if about is not None else None}


def _seconds_between(start: str, end: str) -> Optional[float]:
    a, b = parse_time(start), parse_time(end)
    return None if a is None or b is None else round((b - a).total_seconds(), 1)
