"""One collection at a time for everyone who wants one: the exporter's poller and the socket's clients.

A client asks for a collection no older than `max_age` (a second). If the latest is fresh enough it gets that; if
one is running it waits for that one; otherwise it starts one. So ten `gpudiag check`s a second cost at most one
collection a second, and the vendor libraries are never entered by two collections at once. A GPU whose call is
hung does not make a client wait: the Collector remembers the hung call and reports that GPU as hung without a new
call on it (gpudiag/probe/collector.py `_BackendSlot.hung`), and should a whole collection overrun, a client gets
the last complete one, marked stale, after `wait` seconds.

A collection is published (clients get it) before its listeners (the journal) are told of it: whatever the journal
shows, a client asking right after gets that collection or a newer one (issue 24, item 14). The next collection
starts only once the listeners are done, so they see collections one at a time and in order; a client that wants a
newer one meanwhile has it started as soon as they are.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from gpudiag.daemon.poller import Collection
log = logging.getLogger(__name__)


class FreshCollections:
    def __init__(self, work: Callable[[], Collection]):
        self._work = work
        self._cond = threading.Condition()
        self._latest: Optional[Collection] = None
        self._latest_at = 0.0  # monotonic time the latest finished
        self._running = False
        self._generation = 0  # bumped when a collection ends (with a result or an error)
        self._error: Optional[str] = None
        self._wanted = 0  # the newest generation a waiting caller needs
        self._listeners: list[Callable[[Collection], None]] = []

    def subscribe(self, listener: Callable[[Collection], None]) -> None:
        """`listener(collection)` after every complete collection, on the collecting thread (the journal)."""
        self._listeners.append(listener)

    @property
    def running(self) -> bool:
        """Whether a collection is under way now (a client told "not finished" can wait for it: gpudiag.more_wait)."""
        with self._cond:
            return self._running

    @property
    def latest(self) -> Optional[Collection]:
        with self._cond:
            return self._latest

    def collect(self) -> Collection:
        """A collection started now or already running (the poller's work: it bounds the wait itself)."""
        collection, error = self.get(max_age=0.0, wait=None)
        if error is not None or collection is None:
            raise RuntimeError(error or "no collection")
        return collection

    def get(self, max_age: float, wait: Optional[float]) -> tuple[Optional[Collection], Optional[str]]:
        """The latest collection if at most `max_age` seconds old, else the next one, waiting at most `wait`
        seconds (None: as long as it takes). Returns (collection, None), or (the last complete one or None, why it
        is not fresh)."""
        with self._cond:
            # Fresh enough is fresh enough, even while another collection runs (it may be stuck in a vendor call).
            if self._latest is not None and time.monotonic() - self._latest_at <= max_age:
                return self._latest, None
            generation = self._generation
            self._wanted = max(self._wanted, generation + 1)
            if not self._running:
                self._begin()
            finished = self._cond.wait_for(lambda: self._generation != generation, timeout=wait)
            if not finished:
                return self._latest, f"the collection still running after {wait:g}s (a hung call?)"
            return self._latest, self._error

    def _begin(self) -> None:
        """Start a collection; the caller holds the condition's lock."""
        self._running = True
        try:
            threading.Thread(target=self._run, name="gpudiag-collect", daemon=True).start()
        except BaseException:  # "can't start new thread": the callers get the last one, stale, after their wait
            self._running = False
            raise

    def _run(self) -> None:
        collection, error = None, None
        try:
            collection = self._work()
        except Exception as exc:  # noqa: BLE001 - handed to the waiting callers
            error = f"{type(exc).__name__}: {exc}"
        with self._cond:  # published first: the clients can have it before the journal shows what it saw
            if collection is not None:
                self._latest, self._latest_at = collection, time.monotonic()
            self._error = error
            self._generation += 1
            self._cond.notify_all()
        if collection is not None:
            for listener in self._listeners:
                try:
                    listener(collection)
                except Exception:  # noqa: BLE001 - a journal problem must not cost the clients their answer
                    log.exception("a collection listener failed", extra={"bound": ("listener failed",)})
        with self._cond:
            self._running = False
            if self._wanted > self._generation:  # asked for while the listeners ran
                try:
                    self._begin()
                except BaseException:  # noqa: BLE001 - on this thread no one could be told
                    log.warning("cannot start the next collection's thread")
