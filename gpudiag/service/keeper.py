"""What changed between collections, turned into journal entries (docs/service.md "Journal").

Conditions that last — a check at warn/fail/unknown, a GPU lost, the clocks held down for a reason — are episodes:
one `begin` entry when the condition appears (with `first_seen`), a `change` entry when a check's status changes
within it, an `end` entry when it is gone (with `first_seen`, `last_seen` — the last collection that still saw it —
and `duration_seconds` up to the collection that no longer did). Open episodes are rebuilt from the journal at
start, so a check failing before a restart is still "failing since" its first sighting after it.
Kernel-log events (Xid, amdgpu RAS, resets, …) are single entries, each once: they are told apart by kind, code,
bus, timestamp and text, so re-reading the ring buffer after a restart does not journal them again.
Throttling that started and ended between two collections shows only in the time counters
(ClockInfo.throttle_seconds): a counter that grew while its reason was not seen active is a `throttle` entry with
the seconds it grew by.
"""

from __future__ import annotations

import datetime
import threading
from typing import Optional

from gpudiag.exporter.poller import Collection
from gpudiag.model import NodeSnapshot, Status
from gpudiag.service.journal import Journal, iso, parse_time

BAD = (Status.WARN, Status.FAIL, Status.UNKNOWN)
# Clock-event reasons that are not a problem: an idle GPU, clocks an administrator chose, display, boost sync.
BENIGN_THROTTLE = frozenset({"gpu_idle", "applications_clocks", "display_clocks", "sync_boost", "low_utilization",
                             "below_application_clocks", "below_base_clocks"})
MAX_EVENTS_PER_COLLECTION = 200  # a log flood is summarised, not copied into the journal line by line
MESSAGE_CHARS = 300
MAX_REMEMBERED_EVENTS = 20_000


def _episode_key(entry: dict) -> tuple:
    return (entry.get("kind"), entry.get("check"), entry.get("pci_bus_id"), entry.get("gpu"), entry.get("reason"))


def _event_key(entry: dict) -> tuple:
    return (entry.get("kind"), entry.get("code"), entry.get("pci_bus_id"), entry.get("log_timestamp"),
            entry.get("message"))


class JournalKeeper:
    def __init__(self, journal: Journal):
        self.journal = journal
        self._lock = threading.Lock()
        self.open: dict[tuple, dict] = {}  # episode key → its begin entry, plus "last_seen"
        self._seen_events: set[tuple] = set()
        self._throttle_seconds: dict[tuple, float] = {}
        self._known_gpus: dict[str, Optional[int]] = {}  # bus ID → index, of GPUs seen reachable
        for entry in journal.entries():
            self._replay(entry)

    def _replay(self, entry: dict) -> None:
        event = entry.get("event")
        if event in ("begin", "change"):
            self.open[_episode_key(entry)] = dict(entry, first_seen=entry.get("first_seen", entry["time"]),
                                                  last_seen=entry["time"])
        elif event == "end":
            self.open.pop(_episode_key(entry), None)
        elif event == "event":
            self._seen_events.add(_event_key(entry))

    # -- fed after every collection ---------------------------------------------------------------------------

    def observe(self, collection: Collection) -> None:
        now = iso(datetime.datetime.fromtimestamp(collection.finished_at, datetime.timezone.utc))
        with self._lock:
            current = self._conditions(collection)
            entries = self._episodes(current, now) + self._events(collection.snapshot, now)
            entries += self._between(collection.snapshot, now)
            for entry in entries:
                self._replay(entry)
            for key in current:
                if key in self.open:
                    self.open[key]["last_seen"] = now
        self.journal.append(entries)

    def _conditions(self, collection: Collection) -> dict[tuple, dict]:
        found: dict[tuple, dict] = {}
        for result in collection.results:
            if result.status in BAD:
                device = result.device
                entry = {"kind": "check", "check": result.check, "status": result.status.value,
                         "gpu": device.index if device else None, "pci_bus_id": device.pci_bus_id if device else None,
                         "message": result.message[:MESSAGE_CHARS]}
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

    def _events(self, snapshot: NodeSnapshot, now: str) -> list[dict]:
        index_of = {d.pci_bus_id: d.index for d in snapshot.devices if d.pci_bus_id}
        # boot_id: which boot the event was logged in, so that a fault that comes back after reboots is seen
        # (gpudiag/probe/boot_history.py reads these back); detail: what the line said of its severity.
        in_log = [{"kind": event.kind, "event": "event", "code": event.code, "pci_bus_id": event.pci_bus_id,
                   "gpu": index_of.get(event.pci_bus_id), "log_timestamp": event.timestamp_seconds,
                   "message": event.message[:MESSAGE_CHARS],
                   **({"boot_id": snapshot.host.boot_id} if snapshot.host.boot_id else {}),
                   **({"detail": event.detail} if event.detail else {})} for event in snapshot.kernel_log.events]
        entries, dropped = [], 0
        for entry in in_log:
            key = _event_key(entry)
            if key in self._seen_events:
                continue
            self._seen_events.add(key)
            if len(entries) >= MAX_EVENTS_PER_COLLECTION:
                dropped += 1
                continue
            entries.append(dict(entry, time=now))
        if len(self._seen_events) > MAX_REMEMBERED_EVENTS:
            # Only events still in the log can come back: forget the others, keep memory bounded for months.
            self._seen_events = {_event_key(entry) for entry in in_log}
        if dropped:
            entries.append({"kind": "events_dropped", "event": "event", "time": now, "count": dropped,
                            "message": f"{dropped} more kernel-log events in one collection, not journaled"})
        return entries

    def _between(self, snapshot: NodeSnapshot, now: str) -> list[dict]:
        """Throttling seen only in the time counters: it began and ended between two collections."""
        entries = []
        for device in snapshot.devices:
            active = set(device.clocks.throttle_reasons or [])
            for reason, seconds in (device.clocks.throttle_seconds or {}).items():
                key = (device.pci_bus_id, reason)
                before = self._throttle_seconds.get(key)
                self._throttle_seconds[key] = seconds
                grew = None if before is None else seconds - before
                if grew and grew > 0.5 and reason not in active and reason not in BENIGN_THROTTLE:
                    entries.append({"kind": "throttle", "event": "event", "time": now, "reason": reason,
                                    "gpu": device.index, "pci_bus_id": device.pci_bus_id,
                                    "duration_seconds": round(grew, 3),
                                    "message": f"{reason}: clocks held down {grew:.1f} s since the last collection"})
        return entries

    # -- read by the socket handlers --------------------------------------------------------------------------

    def open_checks(self) -> list[dict]:
        with self._lock:
            return [{k: e.get(k) for k in ("check", "status", "gpu", "pci_bus_id", "first_seen", "last_seen")}
                    for e in self.open.values() if e.get("kind") == "check"]


def _seconds_between(start: str, end: str) -> Optional[float]:
    a, b = parse_time(start), parse_time(end)
    return None if a is None or b is None else round((b - a).total_seconds(), 1)
