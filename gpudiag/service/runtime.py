"""The service as `gpudiag serve` runs it: shared collections, the journal and its keeper, the socket server, and
the answers to the read-only requests (docs/service.md "Protocol")."""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Optional

from gpudiag import MAX_WAIT_SECONDS, __version__
from gpudiag.daemon.poller import Collection
from gpudiag.model import to_dict
from gpudiag.daemon.fresh import FreshCollections
from gpudiag.fileio import DocumentError
from gpudiag.model.screen import SCREEN_DIR
from gpudiag.service.journal import Journal, by_time, read_entries, select
from gpudiag.service.keeper import JournalKeeper
from gpudiag.service.protocol import MAX_AGE_SECONDS, ProtocolError
from gpudiag.service.socket_server import Peer, SocketServer, instance_lock

log = logging.getLogger(__name__)

MAX_HISTORY_ENTRIES = 5000
MIN_MAX_AGE_UNPRIVILEGED = 1.0  # the freshest a peer other than root or the service's user may ask for


class Service:
    def __init__(self, collections: FreshCollections, socket_path: Path, state_dir: Optional[Path],
                 collect_wait_seconds: float, max_clients: int = 8, read_timeout: float = 2.0,
                 journal_max_bytes: Optional[int] = None, expect=None):
        self.collections = collections
        self.collect_wait = collect_wait_seconds
        self.state_dir = state_dir
        # One instance per state directory: a second serve would rewrite the first one's journal under it.
        self._state_lock = _state_lock(state_dir)
        try:
            self._start(collections, socket_path, state_dir, max_clients, read_timeout, journal_max_bytes, expect)
        except BaseException:
            if self._state_lock is not None:
                os.close(self._state_lock)
            raise

    def _start(self, collections, socket_path, state_dir, max_clients, read_timeout, journal_max_bytes, expect):
        journal = Journal(state_dir, **({"max_bytes": journal_max_bytes} if journal_max_bytes else {}))
        # `expect`: the profile serve judges by, so that the journal's fail-level events are the checks' own
        self.keeper = JournalKeeper(journal.load(), expect)
        collections.subscribe(self.keeper.observe)
        self.started = time.monotonic()
        self._cache_lock = threading.Lock()
        self._cached: Optional[tuple[Collection, str]] = None  # (the collection, its snapshot as JSON)
        self._cached_top: Optional[tuple[Collection, str]] = None  # (the collection, its live view as JSON)
        from gpudiag.service.check_answers import Answers

        self._answers = Answers()  # the `check` answers made from the latest collection
        self.server = SocketServer(socket_path, self.handle, max_clients=max_clients, read_timeout=read_timeout)

    @property
    def journal(self) -> Journal:
        return self.keeper.journal

    def start(self) -> "Service":
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        if self._state_lock is not None:
            os.close(self._state_lock)
            self._state_lock = None

    def handle(self, request: dict, peer: Optional[Peer] = None):
        op = request["op"]
        if op == "snapshot":
            return self._snapshot(request, peer)
        if op == "check":
            return self._check(request)
        if op == "top":
            return self._top(request, peer)
        if op == "history":
            return self._history(request)
        return self._status()

    def _collection(self, request: dict, peer: Optional[Peer]) -> tuple[Optional[Collection], Optional[str]]:
        """The collection a `snapshot` or `top` request gets: at most its `max_age` old, waiting at most `wait`."""
        max_age = _number(request, "max_age", MAX_AGE_SECONDS, 0.0, 60.0)
        if peer is not None and not peer.privileged:
            # Any member of the group could otherwise make the service collect back to back (max_age 0: six
            # collections a second, up to 84 % of a core, scrape p99 321 ms): at most one a second for them.
            max_age = max(max_age, MIN_MAX_AGE_UNPRIVILEGED)
        wait = _number(request, "wait", self.collect_wait, 0.0, MAX_WAIT_SECONDS)
        return self.collections.get(max(max_age, 0.05), min(wait, self.collect_wait))

    def _snapshot(self, request: dict, peer: Optional[Peer]) -> bytes:
        collection, problem = self._collection(request, peer)
        if collection is None:
            return _line({"ok": False, "error": problem or "no collection yet", **self._deadline()})
        head = {"ok": True, "fresh": problem is None, "problem": problem, **self._deadline(),
                "age_seconds": round(time.time() - collection.finished_at, 3), "open": self.keeper.open_checks()}
        # The snapshot's JSON is made once per collection however many clients ask for it.
        return (json.dumps(head, separators=(",", ":"), default=str)[:-1] + ',"snapshot":'
                + self._snapshot_json(collection) + "}\n").encode("utf-8")

    def _top(self, request: dict, peer: Optional[Peer]) -> bytes:
        """`gpudiag top`'s sample: the latest collection's row per GPU and verdicts, as the service judged it (its
        own --profile); "judged": false where the checks failed to run (the rows' verdicts are then null)."""
        collection, problem = self._collection(request, peer)
        if collection is None:
            return _line({"ok": False, "error": problem or "no collection yet", **self._deadline()})
        head = {
            "ok": True,
            "fresh": problem is None,
            "problem": problem,
            **self._deadline(),
            "collected_at": collection.finished_at,
            "age_seconds": round(time.time() - collection.finished_at, 3),
        }
        with self._cache_lock:
            if self._cached_top is None or self._cached_top[0] is not collection:
                from gpudiag.report.live import live_view

                view = live_view(collection.snapshot, collection.results, judged=collection.checks_run.success)
                self._cached_top = (collection, json.dumps(view, separators=(",", ":"), default=str))
            view_json = self._cached_top[1]
        return (json.dumps(head, separators=(",", ":"), default=str)[:-1] + ',"view":' + view_json
                + "}\n").encode("utf-8")

    def _check(self, request: dict) -> bytes:
        from gpudiag.service.check_answers import answer_check, parse_check

        fields = parse_check(request)
        wait = _number(request, "wait", self.collect_wait, 0.0, MAX_WAIT_SECONDS)
        return answer_check(fields, self.collections, min(wait, self.collect_wait), self.keeper.open_checks,
                            self._answers, self._deadline)

    def _deadline(self) -> dict:
        """What every answer about a collection says of this service's own deadline: how long one of its collections
        may take (its --timeout, with the checks' margin) and whether one is running now, so that a client told
        "not finished" waits for that one rather than guess the deadline (gpudiag.more_wait)."""
        return {"deadline_seconds": self.collect_wait, "collecting": self.collections.running}

    def _snapshot_json(self, collection: Collection) -> str:
        with self._cache_lock:
            # Held by reference, not by id(): a newer collection may reuse a freed one's id.
            if self._cached is None or self._cached[0] is not collection:
                self._cached = (collection, json.dumps(to_dict(collection.snapshot), separators=(",", ":"),
                                                             default=str))
            return self._cached[1]

    def _history(self, request: dict) -> dict:
        since_seconds = _number(request, "since_seconds", None, 0.0, 10 * 365 * 86400.0)
        gpu = request.get("gpu")
        if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu < 4096):
            raise ProtocolError("gpu: expected a GPU index")
        since = None
        if since_seconds is not None:
            since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=since_seconds)
        entries = select(sorted(self.journal.entries() + self._screens(), key=by_time), since, gpu)
        return {"ok": True, "entries": entries[-MAX_HISTORY_ENTRIES:], "truncated": len(entries) > MAX_HISTORY_ENTRIES,
                "open": self.keeper.open_checks()}

    def _screens(self) -> list[dict]:
        """The screens' journal, which `gpudiag screen` keeps beside this one (docs/screening.md): read, never
        written, here; an unreadable one is logged and left out (the service's own entries still answer)."""
        if self.state_dir is None:
            return []
        try:
            return read_entries(Path(self.state_dir) / SCREEN_DIR)
        except DocumentError as exc:
            log.warning("the screens' journal cannot be read: %s", exc)
            return []

    def _status(self) -> dict:
        latest = self.collections.latest
        journal = self.journal
        return {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "uptime_seconds": round(time.monotonic() - self.started, 1),
            "last_collection_age_seconds": None if latest is None else round(time.time() - latest.finished_at, 3),
            **self._deadline(),
            "journal": {
                "persistent": journal.persistent,
                "directory": str(journal.directory) if journal.directory else None,
                "entries": len(journal.entries()),
                "problem": journal.problem,
                "set_aside": journal.set_aside,
            },
            "socket": {"path": str(self.server.path), "refused": self.server.refused},
        }


def _state_lock(state_dir: Optional[Path]) -> Optional[int]:
    """The state directory's instance lock, or None where there is no directory to keep (the journal then lives in
    memory: Journal.load says why)."""
    if state_dir is None:
        return None
    try:
        Path(state_dir).mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError:
        return None
    return instance_lock(Path(state_dir), "serve.lock", f"{state_dir}: another gpudiag serve (pid {{}}) keeps its "
                                                        f"journal here")


def _number(request: dict, key: str, default, low: float, high: float):
    value = request.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ProtocolError(f"{key}: expected a number from {low:g} to {high:g}")
    return float(value)


def _line(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode("utf-8") + b"\n"
