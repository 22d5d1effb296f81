"""One collection at a time for everyone who wants one: the exporter's poller and the socket's clients.

A client asks for a collection no older than `max_age` (a second). If the latest is fresh enough it gets that; if
one is running it waits for that one; otherwise it starts one. So ten `gpudiag check`s a second cost at most one
collection a second, and the vendor libraries are never entered by two collections at once. A GPU whose call is
hung does not make a client wait: the Collector remembers the hung call and reports that GPU as hung without a new
call on it (gpudiag/probe/__init__.py `_BackendSlot.hung`), and should a whole collection overrun, a client gets
the last complete one, marked stale, after `wait` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from gpudiag.exporter.poller import Collection
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
        self._listeners: list[Callable[[Collection], None]] = []

    def subscribe(self, listener: Callable[[Collection], None]) -> None:
        """`listener(collection)` after every complete collection, on the collecting thread (the journal)."""
        self._listeners.append(listener)

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
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="gpudiag-collect", daemon=True).start()
            finished = self._cond.wait_for(lambda: self._generation != generation, timeout=wait)
            if not finished:
                return self._latest, f"the collection still running after {wait:g}s (a hung call?)"
            return self._latest, self._error

    def _run(self) -> None:
        collection, error = None, None
        try:
            collection = self._work()
        except Exception as exc:  # noqa: BLE001 - handed to the waiting callers
            error = f"{type(exc).__name__}: {exc}"
        if collection is not None:
            for listener in self._listeners:
                try:
                    listener(collection)
                except Exception:  # noqa: BLE001 - a journal problem must not cost the clients their answer
                    log.exception("a collection listener failed")
        with self._cond:
            if collection is not None:
                self._latest, self._latest_at = collection, time.monotonic()
            self._error = error
            self._running = False
            self._generation += 1
            self._cond.notify_all()
