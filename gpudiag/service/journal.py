"""The service's event journal on disk: JSON lines, bounded, rotated by size, rewritten atomically.

Files in the state directory (/var/lib/gpudiag): `journal.jsonl` (current) and `journal.1.jsonl` (the previous
generation). Each line is one entry (docs/service.md has the fields). The current file is rewritten whole through
gpudiag.fileio.write_atomically on each change (a reader, or a crash, never sees half a line); once it would grow
past `max_bytes` it is renamed to `journal.1.jsonl` (replacing the older generation) and a new one begins, so the
journal never takes more than about twice `max_bytes`. A file that cannot be read as a journal (truncated by a full
disk, edited, not UTF-8) is renamed aside with a `.corrupt-<UTC time>` suffix and whatever lines of it are whole
are kept: never fatal. Without a usable state directory the journal lives in memory only (and says so in status).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
from pathlib import Path
from typing import Iterable, Optional

from gpudiag.fileio import DocumentError, read_text, write_atomically

log = logging.getLogger(__name__)

CURRENT, PREVIOUS = "journal.jsonl", "journal.1.jsonl"
DEFAULT_MAX_BYTES = 512 * 1024
MAX_LINE_BYTES = 4096  # one entry; a longer line is not the service's own
JOURNAL_MODE = 0o640  # the kernel-log lines it quotes are root-only on most nodes


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_time(text: object) -> Optional[datetime.datetime]:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


class Journal:
    def __init__(self, directory: Optional[Path], max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory) if directory is not None else None
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._previous: list[dict] = []
        self._current: list[dict] = []
        self._current_text = ""
        self.persistent = False
        self.problem: Optional[str] = None  # why the journal is not (fully) on disk, for `status`
        self.set_aside: list[str] = []

    # -- start-up ---------------------------------------------------------------------------------------------

    def load(self) -> "Journal":
        if self.directory is None:
            self.problem = "no state directory: the journal is kept in memory only"
            return self
        try:
            self.directory.mkdir(mode=0o750, parents=True, exist_ok=True)
            probe = self.directory / ".gpudiag-writable"
            write_atomically(probe, "", JOURNAL_MODE)
            probe.unlink()
            self.persistent = True
        except OSError as exc:
            self.problem = f"{self.directory}: {exc.strerror or exc}: the journal is kept in memory only"
            log.warning("state directory %s", self.problem)
        self._previous = self._read(self.directory / PREVIOUS)
        self._current = self._read(self.directory / CURRENT)
        self._current_text = "".join(_line(e) for e in self._current)
        return self

    def _read(self, path: Path) -> list[dict]:
        if not path.exists():
            return []
        try:
            text = read_text(path, self.max_bytes * 2)
        except DocumentError as exc:
            self._aside(path, str(exc))
            return []
        entries, bad = parse_lines(text)
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
            self.problem = f"{path}: {why}, and cannot set it aside: {exc.strerror or exc}"

    # -- writing ----------------------------------------------------------------------------------------------

    def append(self, entries: Iterable[dict]) -> None:
        entries = list(entries)
        if not entries:
            return
        with self._lock:
            added = "".join(_line(e) for e in entries)
            if len(self._current_text) + len(added) > self.max_bytes and self._current:
                self._rotate()
            self._current.extend(entries)
            self._current_text += added
            if self.persistent:
                self._write_current(self._current)

    def _rotate(self) -> None:
        if self.persistent:
            try:
                os.replace(self.directory / CURRENT, self.directory / PREVIOUS)
            except OSError as exc:
                log.warning("rotating the journal failed: %s", exc.strerror or exc)
        self._previous, self._current, self._current_text = self._current, [], ""

    def _write_current(self, entries: list[dict]) -> None:
        text = "".join(_line(e) for e in entries)
        try:
            write_atomically(self.directory / CURRENT, text, JOURNAL_MODE)
        except OSError as exc:
            self.problem = f"writing {self.directory / CURRENT} failed: {exc.strerror or exc}"
            log.warning("journal: %s", self.problem)

    # -- reading ----------------------------------------------------------------------------------------------

    def entries(self) -> list[dict]:
        with self._lock:
            return self._previous + self._current


def parse_lines(text: str) -> tuple[list[dict], int]:
    """The entries of a journal file and how many lines were not entries (a truncated last line, garbage)."""
    entries, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line) if len(line) <= MAX_LINE_BYTES else None
        except ValueError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("time"), str) and isinstance(entry.get("kind"), str):
            entries.append(entry)
        else:
            bad += 1
    return entries, bad


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
