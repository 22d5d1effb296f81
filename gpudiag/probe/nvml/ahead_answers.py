"""The NVML-ahead process's answers (ahead.py) given to the vendor child's NVIDIA backend in place of its own calls to
the driver: the backend runs as always (its order, its decisions, each GPU under its own deadline) over `AheadNvml`,
a stand-in for the pynvml module that answers a GPU's read with what the ahead process's same call returned or
raised, and passes everything else to pynvml (the library's open, the handles, the calls that fill a struct passed
by reference).

A read is made here after all, as without the ahead process, where the ahead process has no answer for it:
- it ended (its reads made, its library not opened, killed) without making this one;
- it is done with that GPU (or with the pairs) and did not make it (a read it does not list, ahead.py);
- it has been in another call for PATIENCE_SECONDS (that call hangs: this one is then the collector's own, named by
  its tracker and bounded by its deadline as always).
While the ahead process is in this very call, the collector waits for it: the tracker names it, the deadline bounds it.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import threading
import time
from typing import Any, Callable, Optional

from gpudiag.probe.nvml.ahead import FRAME, hashable

# How long a read waits while the ahead process is stuck in another call before the read is made here: well past
# the slowest call of a healthy probe (the field batch, 17-23 ms on the lab H100 and H200), well within a deadline.
PATIENCE_SECONDS = 0.25


class AheadAnswers:
    """The ahead process's frames, read from its pipe on a thread of their own."""

    def __init__(self, reading: int) -> None:
        self._changed = threading.Condition()
        self._done: dict = {}  # key -> outcome (None: make it yourself), until taken
        self._current: Optional[tuple] = None  # the call the ahead process is in
        self._gpus_done: set = set()
        self._pairs_done = False
        self._ended = False
        self._progress = time.monotonic()  # when the last frame came
        self.taken = 0  # reads answered from the ahead process
        self.made_here = 0  # reads made here after all
        # When frames came (label, time.perf_counter()), for bench/check_vs_nvidia_smi.py's timeline.
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
        if not self.marks:
            self.marks.append(("ahead: first read begun", time.perf_counter()))
        if kind == "begin":
            self._current = frame[1]
        elif kind == "done":
            self._done[frame[1]] = frame[2]
            self._current = None
        elif kind == "gpu done":
            self._gpus_done.add(frame[1])
            self.marks.append((f"ahead: GPU {frame[1]} read", time.perf_counter()))
        elif kind == "pairs done":
            self._pairs_done = True
            self.marks.append(("ahead: pairs read", time.perf_counter()))
        self._progress = time.monotonic()

    def take(self, key: tuple) -> Optional[tuple]:
        """The ahead process's outcome for `key`, or None: the caller makes the call itself."""
        with self._changed:
            while True:
                if key in self._done:
                    outcome = self._done.pop(key)
                    break
                if self._ended or self._past(key):
                    outcome = None
                    break
                if self._current == key:
                    self._changed.wait()  # it is making this call: the collector's deadline bounds the wait
                    continue
                stalled = time.monotonic() - self._progress
                if stalled >= PATIENCE_SECONDS:
                    outcome = None
                    break
                self._changed.wait(PATIENCE_SECONDS - stalled)
            if outcome is None:
                self.made_here += 1
            else:
                self.taken += 1
            return outcome

    def _past(self, key: tuple) -> bool:
        indices = key[1]
        return self._pairs_done if len(indices) > 1 else indices[0] in self._gpus_done


class AheadNvml:
    """The pynvml module as the backend calls it, with a GPU's reads answered from `answers` where they can be."""

    def __init__(self, nvml: Any, answers: AheadAnswers) -> None:
        self._nvml = nvml
        self._answers = answers
        self._indices: dict = {}  # a handle's address -> the GPU's index

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._nvml, name)
        if name == "nvmlDeviceGetHandleByIndex":
            return self._handle_by_index
        if name.startswith("nvmlDevice") and callable(attribute):
            return lambda *args: self._call(name, attribute, args)
        return attribute

    def __dir__(self) -> list:
        return dir(self._nvml)  # call.code_name reads the NVML_ERROR_* names off the module

    def _handle_by_index(self, index: int) -> Any:
        handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        self._indices[_address(handle)] = index
        return handle

    def _call(self, name: str, function: Callable, args: tuple) -> Any:
        key = self._key(name, args)
        outcome = None if key is None else self._answers.take(key)
        if outcome is None:
            return function(*args)
        if outcome[0] == "value":
            return outcome[1]
        if outcome[0] == "error":
            raise self._nvml.NVMLError(outcome[1])
        raise self._nvml.NVMLLibraryMismatchError(f"{name}: not in this driver (the NVML-ahead process's answer)")

    def _key(self, name: str, args: tuple) -> Optional[tuple]:
        """(function, the GPUs' indices, the other arguments), as ahead.py keys its reads; None for a call it does
        not make (a struct passed by reference, a handle not taken here)."""
        indices = []
        rest = list(args)
        while rest and isinstance(rest[0], ctypes._Pointer):
            index = self._indices.get(_address(rest.pop(0)))
            if index is None:
                return None
            indices.append(index)
        if not indices or not all(isinstance(arg, (int, str, list)) for arg in rest):
            return None
        return name, tuple(indices), hashable(tuple(rest))


def _address(handle: Any) -> Optional[int]:
    return ctypes.cast(handle, ctypes.c_void_p).value
