"""The NVML-ahead process's frames (ahead.py), read in the vendor child on a thread of their own, and handed out one
read at a time to the stand-in for pynvml its NVIDIA backend calls (ahead_library.py).

`take(key)` gives the outcome of the ahead process's read with that key, or None where it has none, and the read
is made in the vendor child after all, as without the ahead process:
- the ahead process ended (its reads made, its library not opened, killed) without making this one;
- it is past this read's part (the library's open, that GPU, the pairs) and did not make it (a read it does not
  list, ahead.py);
- it has been in another call for PATIENCE_SECONDS (that call hangs: this one is then the collector's own, named by
  its tracker and bounded by its deadline as always).
While the ahead process is in this very call, the caller waits for it: the tracker names it, the deadline bounds it.
`module()` gives its image of the pynvml module (frames.module_image), or None on the same terms.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Callable, Optional

from gpudiag.probe.nvml.frames import FRAME

# How long a read waits while the ahead process is stuck in another call before the read is made here: well past
# the slowest call of a healthy probe (the field batch, 17-23 ms on the lab H100 and H200), well within a deadline.
PATIENCE_SECONDS = 0.25


class AheadAnswers:
    """The ahead process's frames, read from its pipe on a thread of their own."""

    def __init__(self, reading: int) -> None:
        self._changed = threading.Condition()
        self._done: dict = {}  # key -> outcome (None: make it yourself), until taken
        self._current: Optional[tuple] = None  # the call the ahead process is in
        self._module: Optional[tuple] = None  # (constants, names): frames.module_image of its pynvml
        self._system_done = False
        self._gpus_done: set = set()
        self._pairs_done = False
        self._ended = False
        self._progress = time.monotonic()  # when the last frame came
        self.taken = 0  # reads answered from the ahead process
        self.made_here = 0  # reads made here after all
        self.library_here = False  # whether pynvml was imported here after all (ahead_library.py)
        # The ahead process's steps (label, its time.perf_counter()), for bench/check_vs_nvidia_smi.py's timeline.
        self.marks: list = []
        threading.Thread(target=self._read, args=(reading,), name="nvml-ahead-reader", daemon=True).start()

    def _read(self, reading: int) -> None:
        buffered = b""
        try:
            while True:
                chunk = os.read(reading, 1 << 16)
                if not chunk:
                    break
                buffered += chunk
                frames = []
                while len(buffered) >= FRAME.size:
                    end = FRAME.size + FRAME.unpack_from(buffered)[0]
                    if len(buffered) < end:
                        break
                    frames.append(pickle.loads(buffered[FRAME.size:end]))
                    buffered = buffered[end:]
                with self._changed:
                    for frame in frames:
                        self._apply(frame)
                    self._changed.notify_all()
        except Exception:  # noqa: BLE001 - a frame that cannot be read ends the answers: the rest are made here
            pass
        finally:
            os.close(reading)
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def _apply(self, frame: tuple) -> None:
        kind = frame[0]
        if kind == "mark":
            self.marks.append((f"ahead: {frame[1]}", frame[2]))
        elif kind == "begin":
            self._current = frame[1]
        elif kind == "module":
            self._module = frame[1:]
        elif kind == "system done":
            self._system_done = True
        elif kind == "done":
            self._done[frame[1]] = frame[2]
            self._current = None
        elif kind == "gpu done":
            self._gpus_done.add(frame[1])
        elif kind == "pairs done":
            self._pairs_done = True
        self._progress = time.monotonic()

    def take(self, key: tuple) -> Optional[tuple]:
        """The ahead process's outcome for `key`, or None: the caller makes the call itself."""
        with self._changed:
            outcome = None
            if self._wait(lambda: key in self._done, lambda: self._past(key), key):
                outcome = self._done.pop(key)
            if outcome is None:
                self.made_here += 1
            else:
                self.taken += 1
            return outcome

    def module(self) -> Optional[tuple]:
        """(constants, names) of the ahead process's pynvml (its first frame), or None: the caller reads its own."""
        with self._changed:
            return self._module if self._wait(lambda: self._module is not None, lambda: False, None) else None

    def _wait(self, ready: Callable[[], bool], past: Callable[[], bool], key: Optional[tuple]) -> bool:
        """Whether `ready()` came true; False once the ahead process has ended, is `past()` it, or is stuck."""
        while True:
            if ready():
                return True
            if self._ended or past():
                return False
            if key is not None and self._current == key:
                self._changed.wait()  # it is making this call: the collector's deadline bounds the wait
                continue
            stalled = time.monotonic() - self._progress
            if stalled >= PATIENCE_SECONDS:
                return False
            self._changed.wait(PATIENCE_SECONDS - stalled)

    def _past(self, key: tuple) -> bool:
        indices = key[1]
        if not indices:
            return self._system_done
        return self._pairs_done if len(indices) > 1 else indices[0] in self._gpus_done
