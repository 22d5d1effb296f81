"""What changed since the last collection, told once per change on the exporter's log (docs/monitoring.md, "The
exporter's log").

The tracker keeps, for everything it tells of, the state it last told: the collection cycle (complete, overrun,
failed), each vendor backend (up, down), the kernel log (readable or not), each GPU (answering, lost, hung, gone
from the vendor library's list) and each check on each GPU (its status). After every cycle it compares what the
cycle shows with what it told and makes one line for each difference, then remembers the new state: a GPU lost for
an hour is one line when it goes and one when it returns, not one per collection.

A first sight is told only where it is a problem (a GPU already lost at start, a check already failing), except the
backends, whose state at start is worth a line either way; a check's first line has no `previous` (it was never
seen: issue 36 item 3). A check's state is kept per check and what its result is about (gpudiag/report/subject.py:
a GPU, a GPU on the bus no library lists, a NIC port), so that the results of one check on eight NICs are eight
states, not one that each overwrites: one port down was 38 contradictory lines in 5 minutes. Results that follow
from another (gpudiag/report/causes.py: the unknown checks of a GPU that does not answer, the GPU count it makes
short) are not told: their cause is, once.
A check that goes between pass and skip is not told either. At most MAX_LINES_PER_CYCLE lines a cycle; what is past
that is told in later cycles (its state is not marked told), with one line saying how many were put off. How often
one thing may be told over time is bounded apart (gpudiag/cli/serve/log_bound.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator, Optional

from gpudiag.cli.serve.log_bound import RateBound
from gpudiag.daemon.poller import COMPLETE, ERROR, OVERRUN, Cycle
from gpudiag.model import CheckResult, DeviceSnapshot, ErrorKind, NodeSnapshot, Status
from gpudiag.report.causes import GPUS_VISIBLE, follows_from
from gpudiag.report.subject import subject

log = logging.getLogger(__name__)

MAX_LINES_PER_CYCLE = 40
MAX_REMEMBERED = 100_000  # told states: checks × GPUs of one node, far below this; bounded all the same
MESSAGE_CHARS = 300
FINE = frozenset({Status.PASS.value, Status.SKIP.value})
UNREACHABLE = {ErrorKind.GPU_LOST: ("lost", "GPU lost"), ErrorKind.TIMEOUT: ("hung", "GPU hung")}
GONE = "gone"  # no longer listed by the vendor library that listed it


@dataclass(frozen=True)
class Change:
    """One line for serve's log: what changed (its key), its level, its text and fields."""
    key: Hashable  # what changed: the rate bound counts per key
    level: int
    message: str
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Seen:
    """One state a cycle shows, and the line that tells it should it differ from the one told."""
    key: Hashable
    state: object
    default: object  # the state taken as told before anything was
    line: Callable[[object], Optional[Change]]  # previous state → the line (None: change it silently)


def _gpu_key(device: DeviceSnapshot) -> tuple:
    return ("gpu", device.pci_bus_id) if device.pci_bus_id else ("gpu", device.vendor.value, device.index)


def _identity(device: DeviceSnapshot) -> dict:
    return {"gpu": device.index, "bus_id": device.pci_bus_id, "uuid": device.uuid, "name": device.name}


class ChangeTracker:
    def __init__(self, max_lines: int = MAX_LINES_PER_CYCLE):
        self.max_lines = max_lines
        self._told: dict[Hashable, object] = {}
        self._listed: dict[tuple, tuple] = {}  # GPU key → (vendor, identity) of every GPU a library answered for
        self._down: set[str] = set()  # bus IDs of the GPUs that this cycle shows lost, hung or gone

    def observe(self, cycle: Cycle, enabled: Callable[[int], bool] = lambda level: True) -> list[Change]:
        """The lines `cycle` calls for (`enabled`: whether a level is logged at all; a line that is not does not
        count towards the cap)."""
        lines, put_off = [], 0
        for seen in self._seen(cycle):
            told = self._told.get(seen.key, seen.default)
            if seen.state == told:
                continue
            change = seen.line(told)
            if change is not None and enabled(change.level):
                if len(lines) >= self.max_lines:
                    put_off += 1
                    continue
                lines.append(change)
            self._told[seen.key] = seen.state
        if put_off:
            lines.append(Change(("put_off",), logging.WARNING, "more state changes than one collection tells",
                                {"put_off": put_off}))
        if len(self._told) > MAX_REMEMBERED:
            self._told = {}  # everything is told again once, then remembered anew
        return lines

    def _seen(self, cycle: Cycle) -> Iterator[_Seen]:
        yield _Seen(("collection",), cycle.outcome, COMPLETE, lambda was: _collection_line(cycle, was))
        if cycle.collection is None:  # nothing was seen of the node: everything stays as it was told
            return
        snapshot = cycle.collection.snapshot
        yield from _backends(snapshot)
        yield from _kernel_log(snapshot)
        yield from self._gpus(snapshot)
        yield from self._checks(cycle.collection.results)

    def _gpus(self, snapshot: NodeSnapshot) -> Iterator[_Seen]:
        present = set()
        self._down = {d.pci_bus_id for d in snapshot.devices if not d.reachable and d.pci_bus_id}
        for device in snapshot.devices:
            key = _gpu_key(device)
            present.add(key)
            if device.reachable:
                self._listed[key] = (device.vendor.value, _identity(device))
                alias = ("gpu", device.vendor.value, device.index)
                if key != alias and self._told.get(alias, "ok") != "ok":  # lost before its bus ID was ever read
                    present.add(alias)
                    yield _Seen(alias, "ok", "ok", lambda was, d=device, k=alias: _back(k, _identity(d), was))
                yield _Seen(key, "ok", "ok", lambda was, d=device, k=key: _back(k, _identity(d), was))
                continue
            state, message = UNREACHABLE.get(device.errors[0].kind if device.errors else None,
                                             ("unreachable", "GPU unreachable"))
            error = device.errors[0].message if device.errors else None
            yield _Seen(key, state, "ok", lambda was, d=device, k=key, m=message, e=error: Change(
                k, logging.WARNING, m, {**_identity(d), "error": _cut(e)}))
        # A GPU its library listed before and lists no more; while that library is down, the backend's line says
        # why no GPU of it is listed, and the GPUs keep the state last told.
        listing = {b.vendor.value for b in snapshot.backends if b.available}
        for key, (vendor, identity) in self._listed.items():
            if key not in present and vendor in listing:
                self._down.add(identity["bus_id"])
                yield _Seen(key, GONE, "ok", lambda was, i=identity, k=key: Change(
                    k, logging.WARNING, "GPU lost", {**i, "error": "no longer listed by the vendor library"}))


    def _told_by_its_cause(self, result: CheckResult, roots: list[int]) -> bool:
        """A consequence (its cause is told), or what a GPU's own line tells: that it does not answer, or that its
        library no longer lists it (inventory.gpus_visible on that GPU)."""
        if roots:
            return True
        if result.check != GPUS_VISIBLE or result.status is Status.PASS:
            return False
        observed = result.observed if isinstance(result.observed, dict) else {}
        bus = result.device.pci_bus_id if result.device else observed.get("pci_bus_id")
        return observed.get("reachable") is False or bus in self._down

    def _checks(self, results: list[CheckResult]) -> Iterator[_Seen]:
        for result, roots in zip(results, follows_from(results)):
            if self._told_by_its_cause(result, roots):
                continue
            status = result.status.value
            about = subject(result)
            key = ("check", result.check, "node" if about is None else about.key)

            def line(was, r=result, status=status, key=key):
                if status in FINE and (was is None or was in FINE):  # no news, or a first sight that is fine
                    return None
                previous = {} if was is None else {"previous": was}
                return Change(key, logging.INFO if status in FINE else logging.WARNING, "check status changed",
                              {"check": r.check, "status": status, **previous, **_about(r),
                               "message": _cut(r.message)})

            yield _Seen(key, status, None, line)


def _about(result: CheckResult) -> dict:
    """The fields that say what a check's line is about: its GPU, or its NIC and port (None fields are left out)."""
    device = result.device
    if device is not None:
        return {"gpu": device.index, "bus_id": device.pci_bus_id}
    about = subject(result)
    if about is None:
        return {"gpu": None, "bus_id": None}
    if about.is_nic:
        return {"nic": about.nic, "port": about.port, "bus_id": about.bus}
    return {"gpu": None, "bus_id": about.bus}


def _cut(text: Optional[str]) -> Optional[str]:
    return text if text is None or len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def _back(key: Hashable, identity: dict, was: object) -> Change:
    return Change(key, logging.INFO, "GPU back", {**identity, "was": was})


def _collection_line(cycle: Cycle, was: object) -> Change:
    fields = {"duration_seconds": round(cycle.duration_seconds, 3)}
    if cycle.outcome == OVERRUN:
        return Change(("collection",), logging.WARNING, "collection overrun", {**fields, "error": _cut(cycle.error)})
    if cycle.outcome == ERROR:
        return Change(("collection",), logging.ERROR, "collection failed", {**fields, "error": _cut(cycle.error)})
    return Change(("collection",), logging.INFO, "collection complete again", {**fields, "was": was})


def _backends(snapshot: NodeSnapshot) -> Iterator[_Seen]:
    for backend in snapshot.backends:
        state = "up" if backend.available else "down"

        def line(was, b=backend):
            fields = {"backend": b.name, "vendor": b.vendor.value}
            if b.available:
                return Change(("backend", b.name), logging.INFO, "backend up",
                              {**fields, "library_version": b.library_version, "driver_version": b.driver_version,
                               "gpus": b.device_count})
            return Change(("backend", b.name), logging.WARNING, "backend down",
                          {**fields, "error": _cut(b.error.message if b.error else None)})

        yield _Seen(("backend", backend.name), state, None, line)


def _kernel_log(snapshot: NodeSnapshot) -> Iterator[_Seen]:
    info = snapshot.kernel_log
    state = "readable" if info.readable else "unreadable"

    def line(was):
        fields = {"source": info.source}
        if info.readable:
            return Change(("kernel_log",), logging.INFO, "kernel log readable again", fields)
        return Change(("kernel_log",), logging.WARNING, "kernel log unreadable",
                      {**fields, "error": _cut(info.error.message if info.error else None)})

    yield _Seen(("kernel_log",), state, "readable", line)


class ChangeLog:
    """The tracker's lines, under the rate bound, on the log. Fed by the poller after every cycle (its thread)."""

    def __init__(self, tracker: Optional[ChangeTracker] = None, bound: Optional[RateBound] = None,
                 logger: logging.Logger = log):
        self.tracker = tracker or ChangeTracker()
        self.bound = bound or RateBound()
        self._log = logger

    def observe(self, cycle: Cycle) -> None:
        try:
            for change in self.tracker.observe(cycle, self._log.isEnabledFor):
                held = self.bound.admit(change.key, change)
                if held is not None:
                    self._tell(change, held)
            for _key, change, held in self.bound.due():
                self._tell(change, held)
        except Exception:  # noqa: BLE001 - telling must never cost the exporter its collections
            self._log.exception("telling the state changes failed", extra={"bound": ("changes",)})

    def _tell(self, change: Change, held: int) -> None:
        extra = {"fields": change.fields, **({"suppressed": held} if held else {})}
        self._log.log(change.level, change.message, extra=extra)
