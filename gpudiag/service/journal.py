"""The service's event journal on disk: JSON lines, bounded, rotated by size, rewritten atomically.

Files in the state directory (/var/lib/gpudiag): `journal.jsonl` (current) and `journal.1.jsonl` (the previous
generation). Each line is one entry (docs/service.md has the fields). The current file is rewritten whole through
gpudiag.fileio.write_atomically on each change (a reader, or a crash, never sees half a line), mode 0640 whatever the
umask (the unit's UMask=0077 would make it 0600, and `gpudiag history` reads it as a member of group gpudiag); once
it would grow past `max_bytes` it is renamed to `journal.1.jsonl` (replacing the older generation) and a new one
begins, so the journal never takes more than about twice `max_bytes`. What rotation would drop for good is first
offered to `carry` (the keeper's: fail-level entries and the entries of open episodes), and what it returns starts the
new generation: a flood of routine entries cannot push hardware evidence out (issue 24, item 10).

A file with lines that are not entries (truncated by a full disk, edited, a byte that is not UTF-8) is renamed
aside with a `.corrupt-<UTC time>` suffix, and its whole lines that are entries are kept: never fatal. Without a
usable state directory the journal lives in memory only (and says so in status).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterable, Optional

from gpudiag.fileio import DocumentError, read_bytes, write_atomically

log = logging.getLogger(__name__)

CURRENT, PREVIOUS = "journal.jsonl", "journal.1.jsonl"
DEFAULT_MAX_BYTES = 512 * 1024
MAX_LINE_BYTES = 4096  # one entry; a longer line is not the service's own
JOURNAL_MODE = 0o640  # the kernel-log lines it quotes are root-only on most nodes: owner and group gpudiag only
CARRY_SHARE = 4  # what rotation carries into a new generation: at most 1/4 of max_bytes
EVIDENCE_DROPPED = "evidence_dropped"  # the entry that stands for carried entries the share could not hold
_MARKER_BYTES = 512  # room kept in the share for that entry

Carry = Callable[[list[dict]], list[dict]]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_time(text: object) -> Optional[datetime.datetime]:
    """An entry's ISO 8601 time in UTC, or None when it is not one (or cannot be one in UTC: year 1 at +01:00)."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
        return moment.astimezone(datetime.timezone.utc) if moment.tzinfo else moment.replace(
            tzinfo=datetime.timezone.utc)
    except (ValueError, OverflowError):
        return None


class Journal:
    def __init__(self, directory: Optional[Path], max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory) if directory is not None else None
        self.max_bytes = max_bytes
        self.carry: Optional[Carry] = None  # set by the keeper
        self._lock = threading.Lock()
        self._previous: list[dict] = []
        self._current: list[dict] = []
        self._current_size = 0
        self.persistent = False
        self._load_problem: Optional[str] = None
        self._write_problem: Optional[str] = None  # the last write's, cleared by the next one that succeeds
        self.set_aside: list[str] = []

    @property
    def problem(self) -> Optional[str]:
        """Why the journal is not (fully) on disk, for `status`; None once it is."""
        return self._write_problem or self._load_problem

    # -- start-up ---------------------------------------------------------------------------------------------

    def load(self) -> "Journal":
        if self.directory is None:
            self._load_problem = "no state directory: the journal is kept in memory only"
            return self
        try:
            self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)  # as the units' StateDirectoryMode
            probe = self.directory / ".gpudiag-writable"
            write_atomically(probe, "", JOURNAL_MODE)
            probe.unlink()
            self.persistent = True
        except OSError as exc:
            self._load_problem = f"{self.directory}: {exc.strerror or exc}: the journal is kept in memory only"
            log.warning("state directory %s", self._load_problem)
        self._previous = self._read(self.directory / PREVIOUS)
        self._current = self._read(self.directory / CURRENT)
        self._current_size = sum(len(_line(e)) for e in self._current)
        return self

    def _read(self, path: Path) -> list[dict]:
        if not path.exists():
            return []
        try:
            data = read_bytes(path, self.max_bytes * 2, truncate=True)
        except DocumentError as exc:
            self._aside(path, str(exc))
            return []
        entries, bad = parse_lines(data)
        if len(data) > self.max_bytes * 2:
            bad += 1  # read up to the cap: the line cut there is not kept
        if bad:
            self._aside(path, f"{bad} unreadable line(s)")
            if self.persistent and path.name == CURRENT:
                self._write_current(entries)
        return entries

    def _aside(self, path: Path, why: str) -> None:
        target = path.with_name(f"{path.name}.corrupt-{utc_now().strftime('%Y%m%dT%H%M%SZ')}")
        log.warning("journal %s: %s; set aside as %s", path, why, target.name)
        try:
            os.replace(path, target)
            self.set_aside.append(target.name)
        except OSError as exc:
            self._load_problem = f"{path}: {why}, and cannot set it aside: {exc.strerror or exc}"

    # -- writing ----------------------------------------------------------------------------------------------

    def append(self, entries: Iterable[dict], changed: bool = False) -> None:
        """Add `entries`; `changed`: an entry already in the current generation was updated in place (a count)."""
        entries = list(entries)
        if not entries and not changed:
            return
        with self._lock:
            added = sum(len(_line(e)) for e in entries)
            if self._current_size + added > self.max_bytes and self._current:
                self._rotate()
            self._current.extend(entries)
            self._current_size = sum(len(_line(e)) for e in self._current) if changed else self._current_size + added
            if self.persistent:
                self._write_current(self._current)

    def in_current(self, entry: dict) -> bool:
        """Whether `entry` (that very object) is in the current generation, where it may still be updated."""
        with self._lock:
            return any(e is entry for e in self._current)

    def _rotate(self) -> None:
        carried = self._carried(self._previous)
        if self.persistent:
            try:
                os.replace(self.directory / CURRENT, self.directory / PREVIOUS)
            except OSError as exc:
                log.warning("rotating the journal failed: %s", exc.strerror or exc)
        self._previous, self._current = self._current, carried
        self._current_size = sum(len(_line(e)) for e in carried)

    def _carried(self, dropped: list[dict]) -> list[dict]:
        """What the keeper wants kept of the generation rotation drops, newest first within CARRY_SHARE. Where that is
        more than the share holds, the oldest go, and one fail-level `evidence_dropped` entry in their place says how
        many and which was the newest of them (a genuine flood of hardware evidence can exhaust the share: the history
        says so rather than look complete)."""
        if self.carry is None or not dropped:
            return []
        wanted = self.carry(dropped)
        kept, size = [], 0
        for entry in reversed(wanted):
            size += len(_line(entry))
            if size > self.max_bytes // CARRY_SHARE - _MARKER_BYTES:
                log.warning("journal: more hardware evidence than rotation can carry; the oldest is dropped")
                lost = wanted[:len(wanted) - len(kept)]
                earlier = sum(e.get("count", 1) if e.get("kind") == EVIDENCE_DROPPED else 1 for e in lost)
                newest = lost[-1]
                kept.append({"kind": EVIDENCE_DROPPED, "event": "event", "level": "fail", "time": newest.get("time"),
                             "count": earlier, "message": (
                                 f"{earlier} older fail-level entries did not fit what rotation carries "
                                 f"({self.max_bytes // CARRY_SHARE} bytes) and were dropped; the newest of them: "
                                 f"{newest.get('kind')} {newest.get('code') or newest.get('check') or ''} "
                                 f"{newest.get('pci_bus_id') or ''} at {newest.get('time')}")[:300]})
                break
            kept.append(entry)
        return kept[::-1]

    def _write_current(self, entries: list[dict]) -> None:
        text = "".join(_line(e) for e in entries)
        try:
            write_atomically(self.directory / CURRENT, text, JOURNAL_MODE, exact=True)
        except OSError as exc:
            if self._write_problem is None:  # told once when writing starts failing, once when it works again
                log.error("journal write failing", extra={"bound": ("journal",), "fields": {
                    "path": str(self.directory / CURRENT), "error": exc.strerror or str(exc)}})
            self._write_problem = f"writing {self.directory / CURRENT} failed: {exc.strerror or exc}"
        else:
            if self._write_problem is not None:
                log.info("journal written again", extra={"bound": ("journal",), "fields": {
                    "path": str(self.directory / CURRENT)}})
            self._write_problem = None

    # -- reading ----------------------------------------------------------------------------------------------

    def entries(self) -> list[dict]:
        """Oldest first (carried entries begin a generation but are older than the one before it)."""
        with self._lock:
            return sorted(self._previous + self._current, key=by_time)


def by_time(entry: dict) -> str:
    """Sort key: the entry's time in one form (an entry without a readable time first)."""
    moment = parse_time(entry.get("time"))
    return iso(moment) if moment is not None else ""


def parse_lines(data: bytes | str) -> tuple[list[dict], int]:
    """The entries of a journal file and how many lines were not entries (a truncated last line, garbage, a line
    that is not UTF-8: each line alone, so that one bad byte costs one line)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    entries, bad = [], 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_LINE_BYTES else None
        except (UnicodeDecodeError, ValueError, RecursionError):
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("time"), str) and isinstance(entry.get("kind"), str):
            entries.append(entry)
        else:
            bad += 1
    return entries, bad


def read_entries(directory: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> list[dict]:
    """The entries of the journal files in `directory`, read line by line as the service reads them (a bad byte or a
    cut last line costs that line only), oldest first: for a reader that does not keep the journal (`gpudiag
    history` without the service, the service reading the screens' journal that `gpudiag screen` keeps). A file that
    cannot be read is DocumentError naming it."""
    entries = []
    for name in (PREVIOUS, CURRENT):
        path = Path(directory) / name
        if path.exists():
            try:
                entries += parse_lines(read_bytes(path, 4 * max_bytes, truncate=True)[:4 * max_bytes])[0]
            except DocumentError as exc:
                raise DocumentError(f"{path}: {exc}") from None
    return sorted(entries, key=by_time)


def _line(entry: dict) -> str:
    return json.dumps(entry, separators=(",", ":"), sort_keys=True, default=str) + "\n"


def select(entries: list[dict], since: Optional[datetime.datetime] = None, gpu: Optional[int] = None) -> list[dict]:
    """`gpudiag history --since/--gpu`: entries at or after `since` that concern GPU index `gpu` (node-wide
    entries have no GPU and are kept only without --gpu)."""
    chosen = []
    for entry in entries:
        moment = parse_time(entry.get("time"))
        if since is not None and (moment is None or moment < since):
            continue
        if gpu is not None and entry.get("gpu") != gpu:
            continue
        chosen.append(entry)
    return chosen
