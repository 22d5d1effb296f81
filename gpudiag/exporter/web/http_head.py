"""Reading one HTTP request head off a socket, bounded in bytes and in time, before anything parses it.

http.server reads a head line by line with a 65,536-byte cap per line and 100 lines, so one request may make it
buffer ~6.5 MB of headers before authentication; 16 such connections took the exporter from 45 to 590 MB
(issue 10, item 5). A scraper's head is a few hundred bytes, so the whole head is capped here instead.
"""

from __future__ import annotations

import socket
import time
from typing import Optional

MAX_REQUEST_LINE = 4096  # bytes, request line and its CRLF: longer is 414
MAX_HEAD_BYTES = 8192  # bytes, request line and every header: longer is 431
_RECV = 4096


class HeadRejected(Exception):
    """The head breaks a limit: answer `status` and close."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status} {reason}")
        self.status, self.reason = status, reason


class HeadTimeout(Exception):
    """The head did not arrive in time (its whole-request deadline, or the client went silent)."""


def head_end(buffer: bytes) -> Optional[int]:
    """The index just past the blank line that ends a head (CRLF or bare LF line endings), or None."""
    ends = [i + len(sep) for sep in (b"\n\r\n", b"\n\n") if (i := buffer.find(sep)) != -1]
    return min(ends) if ends else None


def read_head(sock: socket.socket, pending: bytes, deadline: Optional[float], request_seconds: float,
              idle_seconds: float) -> Optional[tuple[bytes, bytes]]:
    """(head, the bytes read after it) from `pending` and then `sock`; None if the client closed or idled out
    before the first byte.

    The head must be complete by `deadline` (a time.monotonic() value), or, when that is None (a reused
    connection), within `request_seconds` of its first byte; and the client may never be silent for more than
    `idle_seconds`. That is a deadline for the whole head, not per recv: a client trickling a byte at a time
    cannot stretch it (issue 10, item 7).
    """
    buffer = bytearray(pending)
    while True:
        end = head_end(buffer)
        line_end = buffer.find(b"\n")
        if (line_end == -1 and len(buffer) > MAX_REQUEST_LINE) or line_end >= MAX_REQUEST_LINE:
            raise HeadRejected(414, "URI Too Long")
        if (end is None and len(buffer) >= MAX_HEAD_BYTES) or (end is not None and end > MAX_HEAD_BYTES):
            raise HeadRejected(431, "Request Header Fields Too Large")
        if end is not None:
            return bytes(buffer[:end]), bytes(buffer[end:])
        now = time.monotonic()
        if buffer and deadline is None:
            deadline = now + request_seconds  # the first byte of a request on a reused connection
        wait = idle_seconds if deadline is None else min(idle_seconds, deadline - now)
        if wait <= 0:
            raise HeadTimeout()
        sock.settimeout(wait)
        try:
            chunk = sock.recv(_RECV)
        except socket.timeout:
            if not buffer:
                return None  # an idle keep-alive connection: closed without a word
            raise HeadTimeout() from None
        if not chunk:
            return None
        buffer += chunk
