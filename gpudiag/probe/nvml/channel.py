"""What joins a cold check's NVML process to the collector that uses its answers (gpudiag/probe/nvml/prefetch.py),
made before either is forked (gpudiag/cli/check/early_collect.py): the pipe the answers come on, and which calls the
NVML process may still begin.

The NVML process makes the backend's calls in the collector's order, numbered: the open 0, GPU i's probe i + 1, the
peers after the last GPU. The collector may make a call itself (the NVML process is still in an earlier one, hung
there); from then on the NVML process begins none, so that no call is made twice. Whether a call was begun there is
decided under a lock both processes take (a pipe holding one byte: whoever reads it holds the lock), over two numbers
in memory both share: how many calls the NVML process has begun, and whether the collector stopped it.

Only os, mmap and struct are imported: the parent makes this before it forks, and each import delays the fork.
"""

from __future__ import annotations

import mmap
import os
import select
import struct

OPEN = 0  # the first call's number
_STATE = struct.Struct("qB")  # calls begun by the NVML process; 1 once the collector made a call itself
_LENGTH = struct.Struct("Q")  # the length of one answer (a pickle) on the pipe


class NvmlChannel:
    """Both ends of both pipes and the shared numbers; each process keeps the ends it uses (`for_*`)."""

    def __init__(self) -> None:
        self._state = mmap.mmap(-1, _STATE.size)  # anonymous and shared: one page both processes see after fork
        self._answers_read = self._answers_write = self._lock_read = self._lock_write = -1
        try:
            self._answers_read, self._answers_write = os.pipe()
            self._lock_read, self._lock_write = os.pipe()
            os.write(self._lock_write, b"\0")
            os.set_blocking(self._lock_read, False)  # two may see the byte; the one that misses it waits again
        except OSError:
            self.close()
            raise
        self.gone = False  # (in the collector) the NVML process closed its end: nothing more will change

    def fds(self) -> list[int]:
        return [fd for fd in (self._answers_read, self._answers_write, self._lock_read, self._lock_write) if fd >= 0]

    def for_nvml_process(self) -> "NvmlChannel":
        _close(self._answers_read)
        self._answers_read = -1
        return self

    def for_collector(self) -> "NvmlChannel":
        _close(self._answers_write)
        self._answers_write = -1
        return self

    def close(self) -> None:
        for fd in self.fds():
            _close(fd)
        self._answers_read = self._answers_write = self._lock_read = self._lock_write = -1

    # -- the NVML process --------------------------------------------------------------------------------------

    def begin(self, call: int) -> bool:
        """Whether the NVML process may make `call` (the next in order): False once the collector made one itself."""
        with self._locked():
            begun, stopped = _STATE.unpack_from(self._state)
            if stopped:
                return False
            _STATE.pack_into(self._state, 0, max(begun, call + 1), 0)
            return True

    def begin_open(self) -> bool:
        """The NVML process's first act, before its imports: the open is its own from now."""
        return self.begin(OPEN)

    def send(self, data: bytes) -> None:
        """One answer, whole (the pipe may take it in pieces)."""
        view = memoryview(_LENGTH.pack(len(data)) + data)
        while view:
            view = view[os.write(self._answers_write, view):]

    # -- the collector -----------------------------------------------------------------------------------------

    def take(self, call: int) -> bool:
        """True where the NVML process has begun `call` (its answer will come); False where it had not: the call is
        the collector's, and the NVML process begins no other."""
        with self._locked():
            begun, _ = _STATE.unpack_from(self._state)
            if begun > call:
                return True
            _STATE.pack_into(self._state, 0, begun, 1)
            return False

    def receive(self) -> "bytes | None":
        """The next answer, waited for; None once the NVML process has closed its end (it ended)."""
        head = self._read_exactly(_LENGTH.size)
        if head is None:
            return None
        return self._read_exactly(_LENGTH.unpack(head)[0])

    def _read_exactly(self, size: int) -> "bytes | None":
        chunks, left = [], size
        while left:
            chunk = os.read(self._answers_read, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    # -- both --------------------------------------------------------------------------------------------------

    def _locked(self) -> "_Lock":
        return _Lock(self)


class _Lock:
    """The byte in the lock pipe, held. Where the NVML process died holding it (killed in those few instructions), the
    collector goes on without it once its answers' pipe has closed: nothing can change the numbers any more."""

    def __init__(self, channel: NvmlChannel) -> None:
        self._channel = channel
        self._held = False

    def __enter__(self) -> None:
        while True:
            if select.select([self._channel._lock_read], [], [], 0.1)[0]:
                try:
                    self._held = bool(os.read(self._channel._lock_read, 1))
                except BlockingIOError:  # another thread or the other process read it first
                    continue
                if self._held:
                    return
            if self._channel.gone:
                return

    def __exit__(self, *exc: object) -> None:
        if self._held:
            os.write(self._channel._lock_write, b"\0")
            self._held = False


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
