"""The Unix-socket server beside the HTTP exporter (`gpudiag serve`), answering read-only requests.

Bounds, so that no local peer can stall the service (docs/service.md):
- one request line of at most MAX_REQUEST_BYTES, due within `read_timeout` seconds of the connection (a slow
  client is cut off; so is one that sends more than a line's worth before its newline);
- at most `max_clients` connections at once; one more is answered `busy` at once and closed;
- writing the answer is bounded by `write_timeout` (a peer that does not read is dropped);
- no request waits on a GPU: answers come from FreshCollections, which waits at most `collect_wait` seconds.

The socket is created under a temporary name, given its mode (0660) and group (`gpudiag`, where it exists), and
only then renamed into place: no moment exists at which it is reachable with looser permissions.
"""

from __future__ import annotations

import grp
import logging
import os
import queue
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from gpudiag.service import SOCKET_GROUP
from gpudiag.service.protocol import MAX_REQUEST_BYTES, ProtocolError, decode_request, encode

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660
Handler = Callable[[dict], object]  # a message, or its encoded line


class SocketBindError(OSError):
    """The socket could not be created; the message names the path and why."""


class SocketServer:
    def __init__(self, path: Path, handle: Handler, max_clients: int = 8, read_timeout: float = 2.0,
                 write_timeout: float = 10.0, group: Optional[str] = SOCKET_GROUP):
        self.path = Path(path)
        self._handle = handle
        self._slots = threading.BoundedSemaphore(max_clients)
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._stopping = threading.Event()
        self.refused = 0  # connections turned away: too many at once, too slow, too large
        self._sock = _bind(self.path, group)
        self._thread = threading.Thread(target=self._accept_loop, name="gpudiag-socket", daemon=True)
        self._turned_away: queue.Queue = queue.Queue(maxsize=32)
        self._refuser = threading.Thread(target=self._refuse_loop, name="gpudiag-socket-busy", daemon=True)

    def start(self) -> "SocketServer":
        self._thread.start()
        self._refuser.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        try:
            if self.path.is_socket():
                self.path.unlink()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)  # EMFILE and the like: do not spin
                continue
            if not self._slots.acquire(blocking=False):
                self.refused += 1
                try:  # answered "busy" on another thread, so that refusing never slows accepting
                    self._turned_away.put_nowait(conn)
                except queue.Full:
                    conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="gpudiag-socket-client", daemon=True).start()

    def _refuse_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn = self._turned_away.get(timeout=0.5)
            except queue.Empty:
                continue
            conn.settimeout(0.5)
            try:
                conn.sendall(encode({"ok": False, "error": "busy: too many clients at once"}))
            except OSError:
                pass
            _discard_unread(conn, seconds=0.02)
            conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            try:
                request = decode_request(_read_line(conn, self._read_timeout))
                answer = self._handle(request)
            except ProtocolError as exc:
                self.refused += 1
                answer = {"ok": False, "error": str(exc)}
                _discard_unread(conn)
            except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
                log.exception("socket request failed")
                answer = {"ok": False, "error": f"internal error: {type(exc).__name__}"}
            _send_and_close(conn, answer, self._write_timeout)
        finally:
            self._slots.release()


def _read_line(conn: socket.socket, timeout: float) -> bytes:
    """One line, due within `timeout` seconds in all (not per byte: a trickle cannot keep the slot)."""
    until = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = until - time.monotonic()
        if left <= 0:
            raise ProtocolError(f"no complete request within {timeout:g}s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(MAX_REQUEST_BYTES + 1 - len(data))
        except socket.timeout:
            raise ProtocolError(f"no complete request within {timeout:g}s") from None
        if not chunk:
            break  # the peer closed its side: what came is the request
        data += chunk
        if len(data) > MAX_REQUEST_BYTES and b"\n" not in data[:MAX_REQUEST_BYTES]:
            raise ProtocolError(f"request over {MAX_REQUEST_BYTES} bytes")
    return data.split(b"\n", 1)[0]


def _discard_unread(conn: socket.socket, limit: int = 64 * 1024, seconds: float = 0.1) -> None:
    """Closing a socket with unread bytes makes the peer's read fail (ECONNRESET) before it sees why it was refused:
    read off what is already there, a bounded amount for a bounded time."""
    until, taken = time.monotonic() + seconds, 0
    try:
        while taken < limit and time.monotonic() < until:
            conn.settimeout(max(0.001, until - time.monotonic()))
            chunk = conn.recv(16384)
            if not chunk:
                return
            taken += len(chunk)
    except OSError:
        return


def _send_and_close(conn: socket.socket, answer, timeout: float) -> None:
    """`answer`: a message, or its bytes already encoded (the snapshot, made once per collection)."""
    try:
        conn.settimeout(timeout)
        conn.sendall(answer if isinstance(answer, bytes) else encode(answer))
    except OSError:
        pass  # a peer that went away or does not read: nothing more to do
    finally:
        conn.close()


def _bind(path: Path, group: Optional[str]) -> socket.socket:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SocketBindError(exc.errno, f"{path.parent}: {exc.strerror or exc}") from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(tmp))
        # Not reachable yet (nobody knows the temporary name, and the umask made it no looser than 0755, which no
        # one but its owner can connect through): set group and mode, then rename into place.
        gid = _group_id(group)
        if gid is not None:
            try:
                os.chown(tmp, -1, gid)
            except OSError as exc:  # not root and not in that group: owner (and root) only
                log.warning("cannot give %s to group %s: %s", path, group, exc.strerror or exc)
        os.chmod(tmp, SOCKET_MODE)
        os.replace(tmp, path)  # also replaces the socket a previous, killed service left behind
        sock.listen(64)
    except BaseException as exc:
        sock.close()
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise SocketBindError(exc.errno, f"{path}: {exc.strerror or exc}") from None
        raise
    return sock


def _group_id(group: Optional[str]) -> Optional[int]:
    if not group:
        return None
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None  # no such group: owner (and root) only, mode 0660 still
    except OSError:
        return None
