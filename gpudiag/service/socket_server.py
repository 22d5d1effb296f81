"""The Unix-socket server beside the HTTP exporter (`gpudiag serve`), answering read-only requests.

Bounds, so that no local peer can stall the service (docs/service.md "What the socket enforces"):
- one request line of at most MAX_REQUEST_BYTES; its first byte due within FIRST_BYTE_SECONDS of the connection and
  the whole line within `read_timeout` (a slow client is cut off; so is one that sends more than a line's worth
  before its newline);
- at most `max_clients` connections at once, of which one is kept for privileged peers (root and the service's own
  user, told by SO_PEERCRED), and at most PER_PEER_CLIENTS from any one other user; one more is answered `busy` at
  once and closed;
- writing the answer is bounded by `write_timeout` (a peer that does not read is dropped);
- no request waits on a GPU: answers come from FreshCollections, which waits at most `collect_wait` seconds;
- a request that is not valid (not JSON, nested, unknown op) is a protocol error answered in one line; an unexpected
  exception is logged with its traceback at most once a minute (journald would otherwise drop the service's real
  warnings under a flood of them);
- a client thread that cannot be started (RLIMIT_NPROC, TasksMax=) costs that connection only, never the loop.

Creation (issue 24, items 8 and 9): the directory must not be writable by anyone but its owner (root or the
service's user) and its group when that is the service's, else the socket is refused: in a directory another user
can write, a name can be swapped between any two calls. The socket is bound under a temporary name with a umask
that gives it its mode at creation, handed to group `gpudiag` with lchown (never following a link) where the process
does not already run as that group, and renamed into place. One instance per socket: a lock file beside it
(`<socket>.lock`, flock) is taken before anything else, so a second `gpudiag serve` neither replaces nor deletes
the first one's socket; on stop, a process unlinks the socket only if it is still the one it created.
"""

from __future__ import annotations

import fcntl
import grp
import logging
import os
import queue
import socket
import stat
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from gpudiag.service import SOCKET_GROUP
from gpudiag.service.protocol import MAX_REQUEST_BYTES, ProtocolError, decode_request, encode

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660
FIRST_BYTE_SECONDS = 0.5  # `gpudiag check` sends its request with the connection: only a peer holding a slot waits
PER_PEER_CLIENTS = 2  # connections at once from one unprivileged user
TRACEBACK_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Peer:
    """Who is on the other end of a socket connection (SO_PEERCRED)."""
    pid: int
    uid: int
    gid: int
    privileged: bool  # root or the service's own user

    @classmethod
    def of(cls, conn: socket.socket) -> "Peer":
        try:
            pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
        except OSError:
            return cls(0, -1, -1, False)  # unknown: treated as the least trusted
        return cls(pid, uid, gid, uid in (0, os.geteuid()))


Handler = Callable[[dict, Peer], object]  # a message, or its encoded line


class SocketBindError(OSError):
    """The socket could not be created; the message names the path and why."""


class _Slots:
    """`total` connections at once; the last one only for privileged peers; PER_PEER_CLIENTS per other user."""

    def __init__(self, total: int, per_peer: int = PER_PEER_CLIENTS):
        self.total, self.per_peer = total, per_peer
        self._lock = threading.Lock()
        self._held = 0
        self._by_uid: dict[int, int] = {}

    @property
    def free(self) -> int:
        with self._lock:
            return self.total - self._held

    def take(self, peer: Peer) -> bool:
        with self._lock:
            if self._held >= self.total:
                return False
            if not peer.privileged:
                if self._held >= self.total - 1 or self._by_uid.get(peer.uid, 0) >= self.per_peer:
                    return False
            self._held += 1
            self._by_uid[peer.uid] = self._by_uid.get(peer.uid, 0) + 1
            return True

    def give(self, peer: Peer) -> None:
        with self._lock:
            self._held -= 1
            left = self._by_uid.get(peer.uid, 1) - 1
            if left:
                self._by_uid[peer.uid] = left
            else:
                self._by_uid.pop(peer.uid, None)


class _Throttled:
    """log.exception at most once per `every` seconds; the others are counted into the next one."""

    def __init__(self, every: float = TRACEBACK_EVERY_SECONDS):
        self.every = every
        self._last = -every
        self._quiet = 0
        self._lock = threading.Lock()

    def exception(self, message: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < self.every:
                self._quiet += 1
                return
            self._last, quiet, self._quiet = now, self._quiet, 0
        log.exception("%s%s", message, f" ({quiet} more since the last one, not shown)" if quiet else "")


class SocketServer:
    def __init__(self, path: Path, handle: Handler, max_clients: int = 8, read_timeout: float = 2.0,
                 write_timeout: float = 10.0, group: Optional[str] = SOCKET_GROUP,
                 first_byte_timeout: float = FIRST_BYTE_SECONDS):
        self.path = Path(path)
        self._handle = handle
        self._slots = _Slots(max_clients)
        self._read_timeout = read_timeout
        self._first_byte = min(first_byte_timeout, read_timeout)
        self._write_timeout = write_timeout
        self._stopping = threading.Event()
        self.refused = 0  # connections turned away: too many at once, too slow, too large, not valid
        self._failures = _Throttled()
        self._lock_fd = _lock(self.path)  # before anything that could touch another instance's socket
        try:
            self._sock, self._identity = _bind(self.path, group)
        except BaseException:
            os.close(self._lock_fd)
            raise
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
            now = os.lstat(self.path)
            if stat.S_ISSOCK(now.st_mode) and (now.st_dev, now.st_ino) == self._identity:
                self.path.unlink()  # ours still: never another instance's, nor a file put there since
        except OSError:
            pass
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)  # EMFILE and the like: do not spin
                continue
            peer = Peer.of(conn)
            if not self._slots.take(peer):
                self.refused += 1
                try:  # answered "busy" on another thread, so that refusing never slows accepting
                    self._turned_away.put_nowait(conn)
                except queue.Full:
                    conn.close()
                continue
            try:
                threading.Thread(target=self._serve, args=(conn, peer), name="gpudiag-socket-client",
                                 daemon=True).start()
            except BaseException as exc:  # noqa: BLE001 - "can't start new thread" costs this connection only
                self._slots.give(peer)
                self.refused += 1
                conn.close()
                log.warning("socket client refused: cannot start its thread: %s", exc,
                            extra={"bound": ("socket thread",)})
                time.sleep(0.05)

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

    def _serve(self, conn: socket.socket, peer: Peer) -> None:
        try:
            try:
                request = decode_request(_read_line(conn, self._first_byte, self._read_timeout))
                answer = self._handle(request, peer)
            except ProtocolError as exc:
                self.refused += 1
                answer = {"ok": False, "error": str(exc)}
                _discard_unread(conn)
            except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
                self._failures.exception("socket request failed")
                answer = {"ok": False, "error": f"internal error: {type(exc).__name__}"}
            _send_and_close(conn, answer, self._write_timeout)
        finally:
            self._slots.give(peer)


def _read_line(conn: socket.socket, first_byte: float, timeout: float) -> bytes:
    """One line: its first byte within `first_byte` seconds, all of it within `timeout` (not per byte: a trickle
    cannot keep the slot)."""
    started = time.monotonic()
    data = b""
    while b"\n" not in data:
        until = started + (timeout if data else first_byte)
        left = until - time.monotonic()
        if left <= 0:
            raise ProtocolError(f"no complete request within {timeout:g}s" if data
                                else f"no request within {first_byte:g}s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(MAX_REQUEST_BYTES + 1 - len(data))
        except socket.timeout:
            continue  # the loop says which deadline passed
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


# -- creating the socket -------------------------------------------------------------------------------------------


def _safe_directory(directory: Path, gid: Optional[int]) -> None:
    """Refuse a directory in which another user could swap a name: others-writable, group-writable by a group that is
    not the service's, owned by anyone but root or the service's user, or a symbolic link."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise SocketBindError(exc.errno, f"{directory}: {exc.strerror or exc}") from None
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid not in (0, os.geteuid()):
        why = f"belongs to another user (uid {st.st_uid})"
    elif st.st_mode & stat.S_IWOTH:
        why = "can be written by every user"
    elif st.st_mode & stat.S_IWGRP and st.st_gid not in (os.getegid(), gid):
        why = f"can be written by group {st.st_gid}"
    if why:
        raise SocketBindError(1, f"{directory} {why}: refusing to keep the socket or journal there (a name could "
                                 f"be swapped for a link); use a directory only root or the service's user can "
                                 f"write, such as /run/gpudiag or /var/lib/gpudiag")


def _lock(path: Path) -> int:
    directory = path.parent
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise SocketBindError(exc.errno, f"{directory}: {exc.strerror or exc}") from None
    return instance_lock(directory, path.name + ".lock", f"{path}: another gpudiag serve (pid {{}}) is serving "
                                                         f"this socket")


def instance_lock(directory: Path, name: str, taken: str) -> int:
    """The descriptor of `directory/name`, flock-ed for the process's lifetime (closing it releases the lock), after
    checking that `directory` is safe; SocketBindError when another process holds it (`taken`, with `{}` for its
    pid)."""
    _safe_directory(directory, _group_id(SOCKET_GROUP))
    lock_path = directory / name
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise SocketBindError(exc.errno, f"{lock_path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise SocketBindError(16, taken.format(holder)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _bind(path: Path, group: Optional[str]) -> tuple[socket.socket, tuple[int, int]]:
    """The listening socket at `path` and its (st_dev, st_ino); the caller holds the instance lock."""
    gid = _group_id(group)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SocketBindError(exc.errno, f"{tmp}: {exc.strerror or exc}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # The mode is given at creation: the umask leaves 0660 of the 0777 a socket is created with. (Process-wide
        # for the instant of the bind: nothing else creates files while serve starts.)
        previous = os.umask(0o777 & ~SOCKET_MODE)
        try:
            sock.bind(str(tmp))
        finally:
            os.umask(previous)
        if gid is not None and gid != os.getegid():
            try:  # never by a path that could lead elsewhere: a link swapped in would be chowned itself
                os.chown(tmp, -1, gid, follow_symlinks=False)
            except OSError as exc:  # not root and not in that group: owner (and root) only
                log.warning("cannot give %s to group %s: %s", path, group, exc.strerror or exc)
        st = os.lstat(tmp)
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(17, "the socket's temporary name was replaced")
        os.replace(tmp, path)  # also replaces the socket a previous, killed service left behind (we hold the lock)
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
    return sock, (st.st_dev, st.st_ino)


def _group_id(group: Optional[str]) -> Optional[int]:
    if not group:
        return None
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None  # no such group: owner (and root) only, mode 0660 still
    except OSError:
        return None
