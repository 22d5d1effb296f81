"""Xid errors as NVML delivers them, counted by the exporter as they happen.

NVML pushes Xid critical errors to an event set (docs/vendor-api.md §9): `nvmlEventSetCreate`, then
`nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set)` for every GPU that supports it (checked with
`nvmlDeviceGetSupportedEventTypes` first: an unsupported bit raises NOT_SUPPORTED), then `nvmlEventSetWait_v2(set,
timeout_ms)` returns one event (`.eventData` is the Xid) or raises NVML_ERROR_TIMEOUT when none came.

Everything runs on one daemon thread that nothing else ever waits on: each wait is bounded by its timeout, and if
the driver hangs inside a call anyway the thread's heartbeat goes stale, `status()` reports the watcher unhealthy
(the exporter then counts Xids from the kernel log) and `stop()` abandons the thread instead of joining it.
A failure (driver unloaded, GPU lost, no NVML) closes the session and retries with exponential backoff, so a driver
loaded after the exporter started is picked up.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import field
from typing import Any, Callable, Optional

from gpudiag.model import normalize_pci_bus_id
from gpudiag.model.records import dataclass
from gpudiag.probe import deadline
from gpudiag.probe.nvml import call as nvml_call

log = logging.getLogger(__name__)

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError (nvml.h)

OnXid = Callable[[Optional[str], int], None]  # (normalised PCI bus ID or None, Xid)


@dataclass(frozen=True)
class WatcherStatus:
    """Whether the Xid watcher is counting, and for which GPUs."""
    healthy: bool  # a session is open and its last wait returned recently
    covered_bus_ids: frozenset[str]  # GPUs whose Xids this watcher counts
    enumerated_bus_ids: frozenset[str]  # every GPU NVML listed when the session opened
    error: Optional[str] = None  # why the last session failed or could not open


@dataclass
class _Session:
    """One open NVML event session and the GPUs it covers."""
    nvml: Any
    event_set: Any
    bus_by_handle: dict[int, str] = field(default_factory=dict)
    enumerated: set[str] = field(default_factory=set)
    waits: int = 0  # waits that returned normally (an event or a timeout)


def _address(handle: Any) -> Optional[int]:
    return ctypes.cast(handle, ctypes.c_void_p).value


def _bus_id(raw: Any) -> str:
    return normalize_pci_bus_id(raw.decode() if isinstance(raw, bytes) else str(raw))


class XidWatcher:
    def __init__(
        self,
        on_xid: OnXid,
        wait_ms: int = 500,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 60.0,
        stale_after_seconds: float = 5.0,
    ):
        self._on_xid = on_xid
        self._wait_ms = wait_ms
        self._backoff_initial = backoff_seconds
        self._backoff_max = max_backoff_seconds
        self._stale_after = stale_after_seconds + wait_ms / 1000.0
        self._stop = threading.Event()
        self._reopen = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._heartbeat: Optional[float] = None  # monotonic time of the last completed wait; None: no session
        self._covered: frozenset[str] = frozenset()
        self._enumerated: frozenset[str] = frozenset()
        self._error: Optional[str] = None

    # -- control (any thread) ----------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpudiag-xid-events", daemon=True)
                self._thread.start()

    def request_reopen(self) -> None:
        """Register the GPUs again (a GPU appeared after the session opened)."""
        self._reopen.set()

    def stop(self, timeout_seconds: float = 2.0) -> None:
        """Ask the thread to finish; wait at most `timeout_seconds`. A thread hung in the driver is left behind."""
        self._stop.set()
        thread = self._thread
        # is_alive(): start() assigns the thread before starting it, and joining an unstarted thread raises (a stop
        # at that moment made `gpudiag serve` exit 4); a thread that starts after this sees _stop and returns.
        if thread is not None and thread.is_alive():
            thread.join(timeout_seconds)

    def status(self) -> WatcherStatus:
        with self._lock:
            heartbeat = self._heartbeat
            healthy = heartbeat is not None and time.monotonic() - heartbeat < self._stale_after
            return WatcherStatus(healthy, self._covered if healthy else frozenset(), self._enumerated, self._error)

    # -- the watcher thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._backoff_initial
        while not self._stop.is_set():
            self._reopen.clear()
            session = self._open()
            failed = True
            if session is not None:
                try:
                    failed = self._pump(session)
                finally:
                    self._close(session)
                if session.waits:  # the session worked for a while: a new failure starts the backoff afresh
                    backoff = self._backoff_initial
            if failed:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._backoff_max)

    def _set(self, heartbeat: Optional[float], covered: frozenset[str], enumerated: frozenset[str],
             error: Optional[str]) -> None:
        with self._lock:
            self._heartbeat, self._covered, self._enumerated, self._error = heartbeat, covered, enumerated, error

    def _open(self) -> Optional[_Session]:
        try:
            import pynvml
        except ImportError as exc:
            self._set(None, frozenset(), frozenset(), f"pynvml is not installed: {exc}")
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self._set(None, frozenset(), frozenset(), f"nvmlInit: {exc}")
            return None
        session = _Session(pynvml, None)
        try:
            session.event_set = pynvml.nvmlEventSetCreate()
            problems = self._register_all(session)
        except pynvml.NVMLError as exc:
            self._close(session)
            self._set(None, frozenset(), frozenset(), f"registering for Xid events failed: {exc}")
            return None
        if not session.bus_by_handle:
            self._close(session)
            why = "; ".join(problems) or "NVML lists no GPU"
            self._set(None, frozenset(), frozenset(session.enumerated), f"no GPU delivers Xid events: {why}")
            return None
        for problem in problems:
            log.info("Xid events: %s (its Xids are counted from the kernel log)", problem)
        self._set(time.monotonic(), frozenset(session.bus_by_handle.values()), frozenset(session.enumerated),
                  "; ".join(problems) or None)
        return session

    @staticmethod
    def _register_all(session: _Session) -> list[str]:
        """Register every GPU that supports Xid events; a GPU that cannot be registered is described, not fatal."""
        nvml = session.nvml
        problems = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                bus_id = _bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
                session.enumerated.add(bus_id)
                if not nvml.nvmlDeviceGetSupportedEventTypes(handle) & XID_CRITICAL_ERROR:
                    problems.append(f"GPU {index} ({bus_id}) does not support Xid events")
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, session.event_set)
            except (nvml.NVMLError, ValueError) as exc:  # ValueError: a bus ID that cannot be normalised
                problems.append(f"GPU {index}: {exc}")
                continue
            session.bus_by_handle[_address(handle)] = bus_id
        return problems

    def _pump(self, session: _Session) -> bool:
        """Deliver events until asked to stop or reopen (False) or until NVML fails (True)."""
        nvml = session.nvml
        while not self._stop.is_set() and not self._reopen.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(session.event_set, self._wait_ms)
            except nvml.NVMLError as exc:
                if exc.value == nvml_call.TIMEOUT:  # nothing happened within wait_ms: the normal case
                    self._beat(session)
                    continue
                # GPU lost, driver unloaded, …: start over (with backoff) rather than spin on a broken set.
                self._set(None, frozenset(), frozenset(), f"nvmlEventSetWait: {exc}")
                return True
            self._beat(session)
            if data.eventType & XID_CRITICAL_ERROR:
                bus_id = session.bus_by_handle.get(_address(data.device))
                try:
                    self._on_xid(bus_id, int(data.eventData))
                except Exception:  # noqa: BLE001 - a bug in the consumer must not kill the watcher
                    log.exception("counting Xid %s failed", data.eventData, extra={"bound": ("xid count",)})
        return False

    def _beat(self, session: _Session) -> None:
        session.waits += 1
        with self._lock:
            self._heartbeat = time.monotonic()

    def _close(self, session: _Session) -> None:
        nvml = session.nvml
        if session.event_set is not None:
            try:
                nvml.nvmlEventSetFree(session.event_set)
            except nvml.NVMLError as exc:
                log.debug("nvmlEventSetFree: %s", exc)
        # nvmlShutdown while another thread is hung inside NVML can hang too (deadline.py); NVML counts inits, so
        # skipping one shutdown only keeps the library loaded.
        if deadline.abandoned_calls() == 0:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
        with self._lock:
            self._heartbeat, self._covered = None, frozenset()
