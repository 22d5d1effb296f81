"""Incremental JSON for the fleet's inputs: the members of an object and the elements of an array are read one
value at a time, from chunks as they arrive, each value decoded on its own and bounded in size.

A Prometheus answer near its 64 MiB cap, or a report of 435,000 results, is then never held as one tree of Python
objects (json.loads makes 60-100 times the text's size of them): what the fleet view keeps is what it reduces each
value to. A value larger than its bound, a document cut short, text that is not JSON: Malformed, with where.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, Callable, Iterator, Optional

CHUNK = 1 << 16
_BLANK = re.compile(r"[ \t\n\r]*")
_NUMBER_GOES_ON = re.compile(r"[0-9.eE+\-]*\Z")
_DECODER = json.JSONDecoder()


class Malformed(ValueError):
    """The text is not the JSON expected there (cut short, too large a value, not JSON at all)."""


class Reader:
    """JSON text from `read(n) -> bytes` (a socket, a pipe) or from a whole `text`; `offset` counts characters.
    `errors`: what a byte that is not UTF-8 becomes ("strict": Malformed; "replace": U+FFFD, for a stream in which
    one bad piece must not stop the rest)."""

    def __init__(self, read: Optional[Callable[[int], bytes]] = None, text: str = "", chunk: int = CHUNK,
                 errors: str = "strict") -> None:
        self._read, self._chunk = read, chunk
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors)
        self._buf, self._pos, self._base = text, 0, 0
        self.eof = read is None

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def _more(self) -> bool:
        """Reads a chunk into the buffer (dropping what was consumed); False at the end of the input."""
        if self.eof:
            return False
        data = self._read(self._chunk)
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise Malformed(f"not UTF-8 text near character {self.offset + len(self._buf) - self._pos}: "
                            f"{exc.reason}") from None
        self.eof = not data
        self._base += self._pos
        self._buf, self._pos = self._buf[self._pos:] + text, 0
        return True

    def peek(self) -> str:
        """The next character that is not white space, not consumed; '' at the end of the input."""
        while True:
            self._pos = _BLANK.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._more():
                return ""

    def take(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise Malformed(f"expected {char!r} at character {self.offset}, found {found[:1]!r}" if found else
                            f"cut short at character {self.offset} (expected {char!r})")
        self._pos += 1

    def value(self, limit: int) -> Any:
        """The next whole value, at most `limit` characters of text (Malformed beyond, even if it is JSON)."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except RecursionError:
                raise Malformed(f"nested too deeply at character {self.offset}") from None
            except ValueError as exc:  # JSONDecodeError; a number over Python's int-string limit
                if len(self._buf) - self._pos > limit:
                    raise Malformed(f"a value over {limit:,} characters at character {self.offset}") from None
                if not self._more():
                    at, msg = getattr(exc, "pos", self._pos), getattr(exc, "msg", str(exc))
                    what = "cut short" if at >= len(self._buf) or msg.startswith("Unterminated") else "not JSON"
                    raise Malformed(f"{what} at character {self._base + at}: {msg}") from None
                continue
            if isinstance(value, (int, float)) and _NUMBER_GOES_ON.match(self._buf, end) and self._more():
                continue  # "2." or "2.5e" at the end of a chunk: the number goes on in the next one
            if end - self._pos > limit:
                raise Malformed(f"a value over {limit:,} characters at character {self.offset}")
            self._pos = end
            return value

    def members(self, key_limit: int = 1 << 10) -> Iterator[str]:
        """The keys of the object that comes next; after each, the caller reads its value (value, members,
        elements) before asking for the next key."""
        self.take("{")
        if self.peek() == "}":
            self._pos += 1
            return
        while True:
            key = self.value(key_limit)
            if not isinstance(key, str):
                raise Malformed(f"an object key that is not a string at character {self.offset}")
            self.take(":")
            yield key
            if not self._after("}"):
                return

    def values(self, limit: int) -> Iterator[Any]:
        """The elements of the array that comes next, each a whole value of at most `limit` characters (as
        value()). The common case, an element whole in the buffer and followed by a comma, takes the short way:
        this runs once per sample of every answer."""
        self.take("[")
        if self.peek() == "]":
            self._pos += 1
            return
        scan = _DECODER.scan_once
        while True:
            buf, pos = self._buf, self._pos
            if pos >= len(buf) or buf[pos] in " \t\n\r":
                self.peek()
                buf, pos = self._buf, self._pos
            try:
                value, end = scan(buf, pos)
            except (StopIteration, ValueError, RecursionError):  # cut by the chunk, or not JSON: the long way
                yield self.value(limit)
            else:
                if end - pos > limit or end >= len(buf) or isinstance(value, (int, float)):
                    yield self.value(limit)  # at the buffer's end, a number, or too large: the long way decides
                else:
                    self._pos = end
                    yield value
            if self._pos < len(self._buf) and self._buf[self._pos] == ",":
                self._pos += 1
            elif not self._after("]"):
                return

    def elements(self) -> Iterator[None]:
        """One step per element of the array that comes next; the caller reads each element."""
        self.take("[")
        if self.peek() == "]":
            self._pos += 1
            return
        while True:
            yield None
            if not self._after("]"):
                return

    def _after(self, close: str) -> bool:
        """After a member or element: True at a comma (another follows), False at `close`."""
        found = self.peek()
        if found == ",":
            self._pos += 1
            return True
        if found == close:
            self._pos += 1
            return False
        raise Malformed(f"expected ',' or {close!r} at character {self.offset}, found {found!r}" if found else
                        f"cut short at character {self.offset}")

    def skip_to_line_starting(self, char: str, keep: int = 1 << 12) -> str:
        """Skips past text that could not be read, to the next line that starts with `char` (or the end of the
        input); returns the first `keep` characters skipped, to say what they were."""
        kept: list[str] = []
        search = self._pos + 1  # reading failed at the current character: a match is after it
        while True:
            found = self._buf.find("\n" + char, search)
            end = found + 1 if found >= 0 else max(self._pos, len(self._buf) - 1)  # the last one may be "\n"
            if sum(map(len, kept)) < keep:
                kept.append(self._buf[self._pos:end][:keep])
            self._pos = end
            if found < 0 and not self._more():
                kept.append(self._buf[self._pos:][:keep])
                self._pos = len(self._buf)
            elif found < 0:
                search = self._pos
                continue
            return "".join(kept)[:keep]
