"""GPU error events as monotonic counters: Xids (from NVML events and the kernel log) and other kernel-log events.

A counter holds what the kernel log held when the exporter first read it, plus every event after: a GPU that comes
up with an Xid or a ring timeout already logged shows it at the first scrape, as the checklist (kernel_log.*) does,
instead of a counter at 0 that never rises and an alert that never fires. An Xid of a GPU that NVML watches reaches
the exporter twice, as an NVML event and as a kernel-log line, in either order: it is counted once, whichever
source saw it first (`EventTally`).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Iterable, Optional

from gpudiag.exporter import catalog as m
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.model import KernelEvent, NodeSnapshot

XID = "xid"
SXID = "sxid"
MAX_SWITCHES = 32  # NVSwitch bus IDs with series of their own (an HGX baseboard has 4 or 6); the rest: OTHER_BUS_ID
# The pci_bus_id label of events on a bus ID that is no GPU of the node (a made-up one in a hostile log line, a PCIe
# port of a hot-plug event): one series per kind/code for all of them, so that no log line can create series.
OTHER_BUS_ID = "other"


def series_bus_id(event: KernelEvent, snapshot: NodeSnapshot, gpus: Iterable[str]) -> Optional[str]:
    """The bus ID an event is counted under: its own when it is a GPU's (or it names none), else OTHER_BUS_ID. A PCIe
    slot event or a firmware-first PCIe error (vendor None) names a port: it is counted under the first GPU below
    that port, if any."""
    bus_id = event.pci_bus_id
    if event.vendor is None and bus_id is not None:
        bus_id = next((p.pci_bus_id for p in snapshot.pci_gpus
                       if p.upstream_pci_bus_id == bus_id or bus_id in p.upstream_ports), bus_id)
    return bus_id if bus_id is None or bus_id in gpus else OTHER_BUS_ID


# Where a count came from: the kernel log's first read (what was logged before the exporter started), the kernel
# log's later reads, NVML's event stream.
BASELINE, LOG, NVML = "baseline", "log", "nvml"


class EventTally:
    """Thread-safe counts by (PCI bus ID, kind, Xid code or ""), fed by the Xid watcher thread and the collector.

    NVML and the kernel log report the same Xids of a GPU, each on its own schedule (NVML at once, the log at the
    next collection; either can miss one: a full event queue, a rate-limited printk). Since the first read, a key
    counts max(NVML's, the log's): an event seen by both is one event, and one seen by only one source still
    counts. What the first read found is added on top: NVML delivers nothing from before the exporter started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[tuple[str, str, str]]] = {BASELINE: Counter(), LOG: Counter(), NVML: Counter()}
        self.version = 0  # bumped on every change, so that a cached /metrics body can tell it is out of date

    def add(self, pci_bus_id: Optional[str], kind: str, code: Optional[int] = None, source: str = LOG) -> None:
        key = (pci_bus_id or "", kind, "" if code is None else str(code))
        with self._lock:
            if kind == SXID and not any(key in counts for counts in self._counts.values()):
                switches = {b for counts in self._counts.values() for b, k, _ in counts if k == SXID}
                if pci_bus_id not in switches and len(switches - {OTHER_BUS_ID}) >= MAX_SWITCHES:
                    key = (OTHER_BUS_ID, kind, key[2])
            self._counts[source][key] += 1
            self.version += 1

    def counts(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            baseline, log, nvml = (Counter(self._counts[s]) for s in (BASELINE, LOG, NVML))
        return {key: baseline[key] + max(log[key], nvml[key]) for key in baseline.keys() | log.keys() | nvml.keys()}

    def add_to(self, fs: MetricSet, identities: dict[str, tuple[str, str]]) -> None:
        """Label each count with the GPU index and UUID last seen at its bus ID (kept after the GPU is gone: a count
        of events that did happen is never stale)."""
        for (bus_id, kind, code), count in sorted(self.counts().items()):
            gpu, uuid = identities.get(bus_id, ("", ""))
            if kind == XID:
                fs.add(m.XID_ERRORS, (gpu, uuid, bus_id, code or "unknown"), count)
            elif kind == SXID:
                fs.add(m.SXID_EVENTS, (bus_id, code or "unknown"), count)
            else:
                fs.add(m.KERNEL_LOG_EVENTS, (gpu, uuid, bus_id, kind), count)
