"""Reading the exporter's log lines back in tests: a strict logfmt reader (it fails on anything that is not
key=value pairs with the writer's escapes), and the lines of a `serve` run."""

from __future__ import annotations

import json
import re

_PAIR = re.compile(r'([A-Za-z0-9_.-]+)=(?:"((?:[^"\\]|\\.)*)"|([^ "=]*))(?: |$)')


def parse_logfmt(line: str) -> list[tuple[str, str]]:
    pairs, position = [], 0
    while position < len(line):
        found = _PAIR.match(line, position)
        assert found, f"not logfmt at {position}: {line[position:position + 40]!r}"
        key, quoted, bare = found.groups()
        pairs.append((key, _unescape(quoted) if quoted is not None else bare))
        position = found.end()
    return pairs


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        kind = text[i + 1]
        if kind in 'n"\\rt':
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(kind, kind))
            i += 2
        else:
            width = {"x": 2, "u": 4, "U": 8}[kind]
            out.append(chr(int(text[i + 2:i + 2 + width], 16)))
            i += 2 + width
    return "".join(out)


def records(stderr: str, fmt: str = "logfmt") -> list[dict]:
    """Every line of `stderr` as a record (a line that is not one fails the test)."""
    if fmt == "json":
        return [json.loads(line) for line in stderr.splitlines()]
    return [dict(parse_logfmt(line)) for line in stderr.splitlines()]
