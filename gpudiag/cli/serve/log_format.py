"""How `gpudiag serve` writes its log: one line per record on stderr (journald keeps it), as node_exporter does.

`--log.format logfmt` (the default) writes

    ts=2026-12-02T03:10:00.123Z level=warn source=changes.py:151 msg="GPU lost" gpu=3 bus_id=0000:1b:00.0

and `--log.format json` one JSON object per line with the same keys. `--log.level` is debug, info, warn or error.

Every value is hostile: a GPU's name, a driver's error string and a kernel-log line quoted in a check's message come
from outside. In logfmt a value is quoted when it holds a space, `=`, `"` or anything not printable, and inside the
quotes `\\` and `"` are escaped and every character that is not printable (a newline, a carriage return, U+2028, a
lone surrogate from undecodable bytes) is written as an escape: no value can end the line or start a field of its
own. Keys are gpudiag's own, and reduced to `[A-Za-z0-9_.-]` all the same. A value is cut at MAX_VALUE_CHARS, a
traceback at MAX_TRACE_CHARS.

A record's fields are `extra={"fields": {...}}` on the logging call, in that order; a field whose value is None
is left out (not known, or not about a GPU). `extra={"bound": KEY}` puts the record under the rate bound of that key
(gpudiag/cli/serve/log_bound.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import sys
import time
from typing import Iterator, Optional

from gpudiag.cli.serve.log_bound import BoundFilter

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
RESERVED = ("ts", "level", "source", "msg")
MAX_VALUE_CHARS = 1024
MAX_TRACE_CHARS = 8192
_UNSAFE_KEY = re.compile(r"[^A-Za-z0-9_.-]")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def level_name(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    return "info" if levelno >= logging.INFO else "debug"


def timestamp(created: float) -> str:
    """UTC with milliseconds and a Z, as node_exporter writes it."""
    seconds = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((created - seconds) * 1000):03d}Z"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def record_fields(record: logging.LogRecord, formatter: logging.Formatter) -> list[tuple[str, object]]:
    """(key, value) of a record in the order they are written: ts, level, source, msg, its fields, then the
    exception (as `exception`) where there is one."""
    pairs: list[tuple[str, object]] = [
        ("ts", timestamp(record.created)), ("level", level_name(record.levelno)),
        ("source", f"{record.filename}:{record.lineno}"), ("msg", _cut(record.getMessage(), MAX_VALUE_CHARS))]
    fields = getattr(record, "fields", None)
    for key, value in (fields.items() if isinstance(fields, dict) else ()):
        if value is None:  # not known, or not about a GPU: a field left out says so
            continue
        key = _UNSAFE_KEY.sub("_", str(key))[:64] or "_"
        if key in RESERVED:  # a field cannot stand in for the record's own time, level, source or message
            key = f"field_{key}"
        pairs.append((key, _cut(value, MAX_VALUE_CHARS) if isinstance(value, str) else value))
    suppressed = getattr(record, "suppressed", None)
    if suppressed:
        pairs.append(("suppressed", suppressed))
    if record.exc_info:
        pairs.append(("exception", _cut(formatter.formatException(record.exc_info), MAX_TRACE_CHARS)))
    return pairs


def logfmt_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = value if isinstance(value, str) else str(value)
    if text and all(c.isprintable() and c not in ' ="\\' for c in text):
        return text
    return '"' + "".join(_escape(c) for c in text) + '"'


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={logfmt_value(value)}" for key, value in record_fields(record, self))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document = {}
        for key, value in record_fields(record, self):
            if not (value is None or isinstance(value, (bool, int, str))
                    or isinstance(value, float) and math.isfinite(value)):
                value = str(value)
            document[key] = value
        # ensure_ascii: every character that is not ASCII is an escape, a lone surrogate too (it cannot be encoded)
        return json.dumps(document, ensure_ascii=True, allow_nan=False, default=str)


class _StderrHandler(logging.StreamHandler):
    """Whatever sys.stderr is at the time of the record (a test's capture, too)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def make_handler(fmt: str, bound: Optional[BoundFilter] = None) -> logging.Handler:
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    handler.addFilter(bound or BoundFilter())
    return handler


@contextlib.contextmanager
def daemon_logging(level: str, fmt: str) -> Iterator[logging.Handler]:
    """While `serve` runs: gpudiag's loggers write through `fmt` at `level` and no longer through the CLI's
    `gpudiag: WARNING:` lines. Undone on the way out (an in-process run leaves logging as it found it)."""
    if level not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level {level!r} / format {fmt!r}")
    logger = logging.getLogger("gpudiag")
    handler = make_handler(fmt)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(LEVELS[level])
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
