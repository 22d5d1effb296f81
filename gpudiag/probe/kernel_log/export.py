"""`journalctl -o export`, read on bytes as its format says (systemd docs/JOURNAL_EXPORT_FORMATS.md, "Journal
Export Format"): entries are separated by an empty line; a field is `NAME=value\\n`, or, where the value holds a newline
or other non-printable bytes, binary: `NAME\\n`, a 64-bit little-endian length, that many bytes, `\\n`. NUL bytes in a
length are the format's, not a sign of a binary file (issue 32, item 2).

A value is read by its length, so nothing inside it (a native-protocol client's MESSAGE holding
"\\n\\n_TRANSPORT=kernel\\nMESSAGE=NVRM: Xid …": the journal socket is 0666) can end its entry or add a field. Only the
entry's own _TRANSPORT=kernel makes a kernel record (formats.journal_entry); a journald-set field (one whose name
starts with "_") given twice with different values makes the entry no kernel record.
"""

from __future__ import annotations

from typing import Iterator, Optional

from gpudiag.probe.kernel_log.formats import MAX_STRUCTURED_RECORD, LogLine, journal_entry, structured_kind
from gpudiag.probe.patterns import lazy_compile

# A field name (sd-journal's journal_field_valid): upper-case letters, digits and underscores, at most 64 bytes.
_NAME = lazy_compile(rb"[A-Z0-9_]{1,64}$")
_ENTRY_START = b"\n\n__CURSOR="


def export_entries(data: bytes, bad: list[str]) -> Iterator[LogLine]:
    """The entries of an export stream as `LogLine`s (those with a text MESSAGE). A field that breaks the format (a
    length past the end, a name no journal writes) is named in `bad` once per entry and the reader moves on to the
    next entry's `__CURSOR=`."""
    pos, end = 0, len(data)
    fields: dict[str, object] = {}
    conflict, size = False, 0
    while pos < end:
        newline = data.find(b"\n", pos)
        newline = end if newline < 0 else newline
        line = data[pos:newline]
        if not line:  # the empty line after an entry
            entry = _entry(fields, conflict)
            if entry is not None:
                yield entry
            fields, conflict, size, pos = {}, False, 0, newline + 1
            continue
        name, sep, value = line.partition(b"=")
        if not _NAME.match(name):
            bad.append(_shown(line))
            pos, fields, conflict, size = _next_entry(data, pos), {}, False, 0
            continue
        if sep:
            pos = newline + 1
            raw: object = value
        else:  # binary: a 64-bit little-endian length, the bytes, a newline
            start = newline + 9
            length = int.from_bytes(data[newline + 1:start], "little") if start <= end else -1
            stop = start + length
            if length < 0 or stop >= end or data[stop:stop + 1] != b"\n":
                bad.append(f"{name.decode('ascii')}: a binary field whose length runs past its entry")
                pos, fields, conflict, size = _next_entry(data, pos), {}, False, 0
                continue
            raw, pos = data[start:stop], stop + 1
        size += len(name) + len(raw)  # type: ignore[arg-type]
        if size > MAX_STRUCTURED_RECORD:
            continue  # the rest of an oversized entry: its first fields are kept
        key = name.decode("ascii")
        text = raw.decode("utf-8", errors="replace")  # type: ignore[union-attr]
        if key in fields:
            conflict = conflict or (key.startswith("_") and fields[key] != text)
            continue
        fields[key] = text
    entry = _entry(fields, conflict)
    if entry is not None:
        yield entry


def _entry(fields: dict, conflict: bool) -> Optional[LogLine]:
    if not fields:
        return None
    entry = journal_entry(fields)
    return entry._replace(kernel=False) if entry is not None and conflict else entry


def _next_entry(data: bytes, pos: int) -> int:
    found = data.find(_ENTRY_START, pos)
    return len(data) if found < 0 else found + 2


def _shown(line: bytes) -> str:
    text = line[:160].decode("utf-8", errors="replace")
    return text + ("…" if len(line) > 160 else "")


def is_export(head: bytes) -> bool:
    """Whether a saved log starts as `journalctl -o export` does: a cursor of the journal's shape on its first line."""
    first = head.split(b"\n", 1)[0]
    return first.startswith(b"__") and structured_kind(first.decode("ascii", errors="replace")) == "journal-export"
