"""The socket protocol: one request per connection, one line of JSON each way.

Request: a single JSON object on one line, at most MAX_REQUEST_BYTES including the newline, e.g.
`{"op": "snapshot"}`, `{"op": "history", "since_seconds": 86400, "gpu": 0}`, `{"op": "status"}`,
`{"op": "check", "format": "json", "only": ["pcie"], "profile": "h200-8x", "params": ["gpu_count=8"]}`
(gpudiag/service/check_answers.py), `{"op": "top", "max_age": 0.5}` (`gpudiag top`: gpudiag/report/live.py).
Response: one JSON object on one line, `{"ok": true, ...}` or `{"ok": false, "error": "..."}`; then the server
closes the connection. Why not HTTP over the socket: a request is a few dozen bytes with no headers, methods or
keep-alive to parse, so line-delimited JSON leaves nothing for a hostile peer to play with but one bounded line.
"""

from __future__ import annotations

import json
from typing import Any

from gpudiag.fileio import nesting_exceeds

MAX_AGE_SECONDS = 1.0  # a client gets a collection at most this old (one collection a second, however many ask)
MAX_REQUEST_BYTES = 4096  # a check's selection and -p overrides; still one read, never a buffer to fill
OPS = ("snapshot", "history", "status", "check", "top")  # all read-only: nothing on the socket changes the node
MAX_NESTING = 4  # {"op": ..., "only": [...]}: two levels; nothing a client sends needs more


class ProtocolError(ValueError):
    """A request the service refuses; the message goes back to the peer."""


def encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode("utf-8") + b"\n"


def decode_request(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request over {MAX_REQUEST_BYTES} bytes")
    try:
        request = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("request is not one line of JSON") from None
    except RecursionError:  # 2 KB of brackets: a protocol error, not an internal one with a traceback per request
        raise ProtocolError(f"request nested deeper than {MAX_NESTING} levels") from None
    if nesting_exceeds(request, MAX_NESTING):
        raise ProtocolError(f"request nested deeper than {MAX_NESTING} levels")
    if not isinstance(request, dict) or request.get("op") not in OPS:
        raise ProtocolError(f"expected {{\"op\": one of {', '.join(OPS)}}}")
    return request
