"""Asking the running service (`gpudiag check`, `gpudiag history`, the hooks through them).

Imports nothing heavy and nothing of the probe: a check answered by the service never loads pynvml or amdsmi.
`ask()` returns None when no service answers (no socket, nobody listening, no permission, too slow to accept):
the caller then probes directly.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 0.25
MAX_ANSWER_BYTES = 64 << 20  # a snapshot with a full kernel log is a few MB


class ServiceError(Exception):
    """The service answered, but with an error."""


def ask(path: Path, request: dict, timeout: float, connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> Optional[dict]:
    """The service's answer to `request`, or None when no service answers within the time."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(connect_timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
            if exc.errno == errno.EACCES:
                log.info("%s: permission denied (not in group gpudiag?): probing directly", path)
            else:
                log.debug("no service at %s: %s", path, exc)
            return None
        until = time.monotonic() + timeout
        try:
            sock.settimeout(max(0.1, until - time.monotonic()))
            sock.sendall(json.dumps(request).encode("utf-8") + b"\n")
            data = _read_all(sock, until)
        except OSError as exc:
            log.warning("the service at %s did not answer (%s): probing directly", path, exc)
            return None
    finally:
        sock.close()
    try:
        answer = json.loads(data)
    except ValueError:
        log.warning("the service at %s answered something that is not JSON: probing directly", path)
        return None
    if not isinstance(answer, dict):
        return None
    if not answer.get("ok"):
        raise ServiceError(str(answer.get("error", "unknown error")))
    return answer


def _read_all(sock: socket.socket, until: float) -> bytes:
    chunks, size = [], 0
    while True:
        left = until - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        sock.settimeout(left)
        chunk = sock.recv(1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise OSError("answer too large")
        chunks.append(chunk)
