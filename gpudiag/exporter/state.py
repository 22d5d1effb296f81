"""What the exporter knows between collections, and the /metrics body rendered from it.

Written by the poller thread (one cycle at a time) and the Xid watcher thread (event counts); read by HTTP handler
threads. The rendered body is cached until something it depends on changes (a collection, an event, the Xid
watcher's health), so a scrape only sends bytes already made, whatever the number of GPUs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable, Optional

from prometheus_client import generate_latest
from prometheus_client.process_collector import ProcessCollector

from gpudiag.checks.kernel_log.common import SXID_DUMP_DETAILS
from gpudiag.daemon.follower import KernelLogFollower
from gpudiag.daemon.poller import COMPLETE, OUTCOMES, Collection, Cycle
from gpudiag.exporter import catalog as m
from gpudiag.exporter.events import BASELINE, LOG, NVML, SXID, XID, EventTally, series_bus_id
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.node_metrics import add_build_info, add_checks, add_collector_runs, add_snapshot
from gpudiag.model import NodeSnapshot, Vendor
from gpudiag.probe.nvml.events import OnXid, WatcherStatus, XidWatcher

WatcherFactory = Callable[[OnXid], XidWatcher]


class ExporterState:
    def __init__(self, stale_after_seconds: float, watcher_factory: Optional[WatcherFactory] = XidWatcher):
        self._stale_after = stale_after_seconds
        self._watcher_factory = watcher_factory
        self._lock = threading.Lock()
        self._collection: Optional[Collection] = None  # the latest cycle's, or None if it did not complete
        self._last_cycle: Optional[Cycle] = None
        self._outcomes: Counter[str] = Counter()
        self._last_finished_at: Optional[float] = None  # Unix time of the last complete collection
        self._last_complete_monotonic: Optional[float] = None
        self._generation = 0
        self._identities: dict[str, tuple[str, str]] = {}  # PCI bus ID → (index, UUID), for event counters
        self._by_index: dict[tuple, tuple] = {}  # (vendor, index) → identity last read from a reachable device
        self.tally = EventTally()
        self._follower = KernelLogFollower()
        self.watcher: Optional[XidWatcher] = None
        # The exporter's own CPU and memory (process_cpu_seconds_total, process_resident_memory_bytes …): what the
        # performance targets are stated in, visible in production too.
        self._process = ProcessCollector(registry=None)
        self._cache: Optional[tuple[tuple, bytes]] = None

    # -- written by the poller thread ----------------------------------------------------------------------------

    def on_cycle(self, cycle: Cycle) -> None:
        if cycle.collection is not None:
            self._absorb(cycle.collection)
        with self._lock:
            self._last_cycle = cycle
            self._outcomes[cycle.outcome] += 1
            # Never serve an older collection's device series as current: after a failed cycle, none are served.
            self._collection = cycle.collection if cycle.outcome == COMPLETE else None
            if cycle.collection is not None:
                self._last_finished_at = cycle.collection.finished_at
                self._last_complete_monotonic = time.monotonic()
            self._generation += 1

    def _absorb(self, collection: Collection) -> None:
        snapshot = collection.snapshot
        self._remember_identities(snapshot)
        self._manage_watcher(snapshot)
        if not snapshot.kernel_log.readable:
            return
        # The first read counts what was logged before the exporter started; after it, only what is new: as the
        # daemon's one follower says (gpudiag/daemon/follower.py), or, for a collection made without one, this
        # state's own. An Xid that NVML's event stream delivered too is still counted once (EventTally).
        events = snapshot.kernel_log.events
        if collection.new_events is not None:
            source = BASELINE if collection.log_baseline else LOG
            fresh = list(collection.new_events)
        else:
            source = LOG if self._follower.started else BASELINE
            fresh = self._follower.new_events(events, snapshot.kernel_log.last_seq)
        for event in fresh if source == LOG else events:
            bus_id = series_bus_id(event, snapshot, self._identities)  # GPUs only: series stay bounded
            if event.kind == SXID:
                if event.detail not in SXID_DUMP_DETAILS:  # a switch is no GPU: its own bus ID, bounded by the tally
                    self.tally.add(event.pci_bus_id, SXID, event.code, source=source)
                continue
            self.tally.add(bus_id, event.kind, event.code if event.kind == XID else None, source=source)

    def _remember_identities(self, snapshot: NodeSnapshot) -> None:
        """A GPU that is lost answers nothing, not even its bus ID or UUID. Give it the identity it had at the same
        (vendor, index) in an earlier collection, so that its `gpudiag_device_up` series goes from 1 to 0 instead of
        one series vanishing and an anonymous one appearing (and the bus-only stand-in for it doubling it)."""
        for device in snapshot.devices:
            key = (device.vendor, device.index)
            if device.reachable and device.pci_bus_id:
                self._by_index[key] = (device.pci_bus_id, device.uuid, device.name, device.serial)
            elif key in self._by_index and device.pci_bus_id in (None, self._by_index[key][0]):
                # (the probe may have placed the bus ID already: the rest of the identity is still the earlier one)
                remembered = dict(zip(("pci_bus_id", "uuid", "name", "serial"), self._by_index[key]))
                for name, known in remembered.items():
                    setattr(device, name, getattr(device, name) or known)
            if device.pci_bus_id:
                self._identities[device.pci_bus_id] = (str(device.index), device.uuid or "")

    def _manage_watcher(self, snapshot: NodeSnapshot) -> None:
        """Xids come from NVML events once NVML works on this node; a GPU NVML did not list when the watcher
        registered (hot-added, or back after a driver reload) makes it register again."""
        nvml = snapshot.backend("nvml")
        if self._watcher_factory is None or nvml is None or not nvml.available:
            return
        if self.watcher is None:
            self.watcher = self._watcher_factory(lambda bus_id, xid: self.tally.add(bus_id, XID, xid, source=NVML))
            self.watcher.start()
            return
        status = self.watcher.status()
        reachable = {
            d.pci_bus_id for d in snapshot.devices if d.vendor == Vendor.NVIDIA and d.reachable and d.pci_bus_id
        }
        if status.healthy and reachable - status.enumerated_bus_ids:
            self.watcher.request_reopen()

    # -- read by HTTP handlers -----------------------------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        with self._lock:
            last = self._last_complete_monotonic
        if last is None:
            return False, "no collection has completed yet"
        age = time.monotonic() - last
        if age > self._stale_after:
            return False, f"the last complete collection was {age:.0f}s ago"
        return True, "ok"

    def body(self) -> list[bytes]:
        """The /metrics body in chunks (sent one after the other: no copy of a body that is megabytes at 64 GPUs)."""
        status = self.watcher.status() if self.watcher is not None else None
        key = (self._generation, self.tally.version, status)
        cached = self._cache
        if cached is None or cached[0] != key:
            cached = self._cache = (key, self.metric_set(status).exposition())
        return [cached[1], generate_latest(self._process)]

    def render(self) -> bytes:
        return b"".join(self.body())

    def metric_set(self, watcher: Optional[WatcherStatus] = None) -> MetricSet:
        with self._lock:
            collection, cycle, outcomes = self._collection, self._last_cycle, dict(self._outcomes)
            finished_at, identities = self._last_finished_at, dict(self._identities)
        fs = MetricSet()
        add_build_info(fs)
        for outcome in OUTCOMES:
            fs.add(m.COLLECTIONS, (outcome,), outcomes.get(outcome, 0))
        fs.add(m.LAST_COLLECTION, (), finished_at)
        if cycle is not None:
            add_collector_runs(fs, [cycle.run])
        if collection is not None:
            add_snapshot(fs, collection.snapshot)
            add_checks(fs, collection.results)
            add_collector_runs(fs, [collection.checks_run])
        if watcher is not None:
            fs.add(m.COLLECTOR_SUCCESS, ("nvml_events",), int(watcher.healthy))
        self.tally.add_to(fs, identities)
        return fs
