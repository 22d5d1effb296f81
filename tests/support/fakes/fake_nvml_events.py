"""NVML's event API for the fake libnvidia-ml (fake_nvml_lib): event sets, registration, and Xids a test emits.

    with installed(node) as lib:
        events = nvml_events(lib)
        ...                      # the code under test registers and waits
        events.emit(1, 79)       # GPU 1 reports Xid 79: delivered to every set GPU 1 is registered in

Semantics follow nvml.h (docs/vendor-api.md §9): an event reaches only the sets the GPU was registered in with the
Xid bit, events emitted before registration are not delivered, `nvmlEventSetWait_v2` blocks up to its timeout and
answers NVML_ERROR_TIMEOUT when nothing came. `fail_next_wait(code)` makes the next wait answer `code`, as a real
wait does when a GPU falls off the bus.
"""

from __future__ import annotations

import ctypes
import itertools
import queue
import threading
import weakref
from typing import Any, Optional

import pynvml

from tests.support.fakes.fake_nvml import FakeGpu
from tests.support.fakes.fake_nvml_lib import _HANDLE_BASE, SUCCESS, FakeNvmlLib, c_symbol, put, target, value_of

XID_BIT = pynvml.nvmlEventTypeXidCriticalError
SUPPORTED_EVENTS = XID_BIT | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
_SET_BASE = 0x657600000000  # "ev": fake event-set pointers


class _EventSet:
    def __init__(self) -> None:
        self.queue: "queue.Queue[tuple[int, int]]" = queue.Queue()
        self.registered: set[int] = set()  # GPU indexes registered for Xids


class FakeEvents:
    def __init__(self, lib: FakeNvmlLib):
        self.lib = lib
        self.sets: dict[int, _EventSet] = {}
        self.freed = 0
        self.waits = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._fail_next: Optional[int] = None

    def emit(self, gpu_index: int, xid: int) -> int:
        """Deliver Xid `xid` of GPU `gpu_index`; returns how many event sets received it."""
        with self._lock:
            targets = [s for s in self.sets.values() if gpu_index in s.registered]
        for event_set in targets:
            event_set.queue.put((gpu_index, xid))
        return len(targets)

    def fail_next_wait(self, code: int) -> None:
        self._fail_next = code

    def registered(self) -> set[int]:
        with self._lock:
            return set().union(*(s.registered for s in self.sets.values())) if self.sets else set()


_EVENTS: "weakref.WeakKeyDictionary[FakeNvmlLib, FakeEvents]" = weakref.WeakKeyDictionary()


def nvml_events(lib: FakeNvmlLib) -> FakeEvents:
    if lib not in _EVENTS:
        _EVENTS[lib] = FakeEvents(lib)
    return _EVENTS[lib]


def _set_of(lib: FakeNvmlLib, pointer: Any) -> Optional[_EventSet]:
    address = ctypes.cast(pointer, ctypes.c_void_p).value if pointer else None
    return nvml_events(lib).sets.get(address)


@c_symbol("system")
def nvmlEventSetCreate(lib: FakeNvmlLib, out: Any) -> int:
    events = nvml_events(lib)
    address = _SET_BASE + next(events._ids)
    with events._lock:
        events.sets[address] = _EventSet()
    pointer = ctypes.c_void_p(address)
    ctypes.memmove(ctypes.addressof(target(out)), ctypes.byref(pointer), ctypes.sizeof(ctypes.c_void_p))
    return SUCCESS


@c_symbol("system")
def nvmlEventSetFree(lib: FakeNvmlLib, pointer: Any) -> int:
    events = nvml_events(lib)
    address = ctypes.cast(pointer, ctypes.c_void_p).value
    with events._lock:
        if events.sets.pop(address, None) is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        events.freed += 1
    return SUCCESS


@c_symbol("device")
def nvmlDeviceGetSupportedEventTypes(lib: FakeNvmlLib, gpu: FakeGpu, out: Any) -> int:
    return put(out, SUPPORTED_EVENTS)


@c_symbol("device")
def nvmlDeviceRegisterEvents(lib: FakeNvmlLib, gpu: FakeGpu, types: Any, pointer: Any) -> int:
    mask = value_of(types)
    if mask & ~SUPPORTED_EVENTS:
        return pynvml.NVML_ERROR_NOT_SUPPORTED
    event_set = _set_of(lib, pointer)
    if event_set is None:
        return pynvml.NVML_ERROR_INVALID_ARGUMENT
    if mask & XID_BIT:
        event_set.registered.add(lib.index(gpu))
    return SUCCESS


@c_symbol("system")
def nvmlEventSetWait_v2(lib: FakeNvmlLib, pointer: Any, out: Any, timeout_ms: Any) -> int:
    events = nvml_events(lib)
    events.waits += 1
    if events._fail_next is not None:
        code, events._fail_next = events._fail_next, None
        return code
    event_set = _set_of(lib, pointer)
    if event_set is None:
        return pynvml.NVML_ERROR_INVALID_ARGUMENT
    try:
        index, xid = event_set.queue.get(timeout=value_of(timeout_ms) / 1000.0)
    except queue.Empty:
        return pynvml.NVML_ERROR_TIMEOUT
    data = target(out)
    data.device = ctypes.cast(ctypes.c_void_p(_HANDLE_BASE + 0x100 * index), pynvml.c_nvmlDevice_t)
    data.eventType = XID_BIT
    data.eventData = xid
    data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
    return SUCCESS
