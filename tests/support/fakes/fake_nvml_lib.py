"""The fake libnvidia-ml: C symbols, looked up by pynvml with getattr(nvmlLib, "<symbol>") and called with ctypes
arguments. Each function answers an NVML return code and writes its outputs through the pointers it was given
(`byref(x)` arrives as a CArgObject whose `_obj` is x), as the C library does.

Arguments are checked the way ctypes converts them for a real foreign function, so a value a real CDLL would
refuse (pynvml's tuple NVML_P2P_CAPS_INDEX_READ) fails here too, with ctypes.ArgumentError.
"""

from __future__ import annotations

import collections
import ctypes
import threading
from typing import Any, Callable, Optional

import pynvml

from tests.support.fakes.fake_nvml import FakeGpu, FakeNode

HANG_LIMIT_SECONDS = 30.0  # a hung call gives up on its own eventually, so a forgotten release cannot wedge a run
_HANDLE_BASE = 0x6E766D6C0000  # "nvml": fake device handles are this + 0x100 * index

SUCCESS = pynvml.NVML_SUCCESS
UNINITIALIZED = pynvml.NVML_ERROR_UNINITIALIZED
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
UNKNOWN = pynvml.NVML_ERROR_UNKNOWN

# C symbol → (implementation, what the leading arguments are: "system" | "index" | "device" | "pair")
_SYMBOLS: dict[str, tuple[Callable[..., int], str]] = {}


def c_symbol(kind: str = "device", *names: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    def register(impl: Callable[..., int]) -> Callable[..., int]:
        for name in names or (impl.__name__,):
            _SYMBOLS[name] = (impl, kind)
        return impl

    return register


class _CFunction:
    """What getattr(nvmlLib, name) returns: callable, and accepting `restype`/`argtypes` like a ctypes function."""

    def __init__(self, lib: "FakeNvmlLib", name: str):
        self.lib, self.__name__ = lib, name
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.lib.dispatch(self.__name__, args)


class FakeNvmlLib:
    def __init__(self, node: FakeNode):
        self.node = node
        self.calls: collections.Counter[str] = collections.Counter()  # C symbol → number of calls
        self.device_calls: collections.Counter[tuple[str, int]] = collections.Counter()  # (symbol, GPU index)
        self.init_count = 0  # NVML's own refcount: nvmlInit* minus nvmlShutdown
        self.shutdown_calls = 0
        self._lock = threading.Lock()
        self._answered: collections.Counter[int] = collections.Counter()  # calls answered per GPU (for lose_after)
        self._lost_answers: collections.Counter[int] = collections.Counter()
        self._hung_threads: list[threading.Thread] = []

    def __getattr__(self, name: str) -> _CFunction:
        if name.startswith("_") or name in self.node.missing_symbols:
            raise AttributeError(name)  # pynvml turns this into NVMLError_FunctionNotFound
        return _CFunction(self, name)

    def index(self, gpu: FakeGpu) -> int:
        return next(i for i, candidate in enumerate(self.node.gpus) if candidate is gpu)

    def join_hung_threads(self, timeout: float) -> None:
        for thread in self._hung_threads:
            thread.join(timeout)

    # -- dispatch ---------------------------------------------------------------------------------------------

    def dispatch(self, name: str, args: tuple[Any, ...]) -> Any:
        _check_ctypes_args(args)
        if name not in _SYMBOLS:
            raise NotImplementedError(f"the fake NVML library does not implement {name}")
        impl, kind = _SYMBOLS[name]
        with self._lock:
            self.calls[name] += 1
        if kind == "system":
            if name in ("nvmlInitWithFlags", "nvmlInit_v2") and self.node.hang_init:
                self._hung_threads.append(threading.current_thread())
                self.node.release.wait(HANG_LIMIT_SECONDS)
            if name not in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString") and not self.init_count:
                return UNINITIALIZED
            return impl(self, *args)
        if not self.init_count:
            return UNINITIALIZED
        if kind == "index":
            index = value_of(args[0])
            if not 0 <= index < len(self.node.gpus):
                return INVALID_ARGUMENT
            indexes = [index]
        else:
            indexes = [self._index_of(handle) for handle in (args[:2] if kind == "pair" else args[:1])]
            if None in indexes:
                return INVALID_ARGUMENT
        for index in indexes:
            fault = self._fault(name, index)
            if fault is not None:
                return fault
        if kind == "index":
            return impl(self, indexes[0], *args[1:])
        return impl(self, *(self.node.gpus[i] for i in indexes), *args[len(indexes):])

    def _index_of(self, handle: Any) -> Optional[int]:
        address = ctypes.cast(handle, ctypes.c_void_p).value if handle else None
        if address is None or (address - _HANDLE_BASE) % 0x100:
            return None
        index = (address - _HANDLE_BASE) // 0x100
        return index if 0 <= index < len(self.node.gpus) else None

    def _fault(self, name: str, index: int) -> Optional[int]:
        gpu = self.node.gpus[index]
        with self._lock:
            self.device_calls[(name, index)] += 1
            self._answered[index] += 1
            if gpu.lose_after_calls is not None and self._answered[index] > gpu.lose_after_calls:
                gpu.lost = True
            if gpu.lost:
                self._lost_answers[index] += 1
                return UNKNOWN if gpu.unknown_after_lost and self._lost_answers[index] > 1 else GPU_IS_LOST
        if gpu.hang == name:
            self._hung_threads.append(threading.current_thread())
            self.node.release.wait(HANG_LIMIT_SECONDS)
        if name in gpu.failures:
            return gpu.failures[name]
        if name in gpu.unsupported:
            return NOT_SUPPORTED
        return None


# -- argument handling ----------------------------------------------------------------------------------------

_CONVERTIBLE = (int, bytes, str, type(None), ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array,
                ctypes._Pointer)


def _check_ctypes_args(args: tuple[Any, ...]) -> None:
    for position, arg in enumerate(args, start=1):
        if not isinstance(arg, _CONVERTIBLE) and type(arg).__name__ != "CArgObject":
            message = f"argument {position}: TypeError: Don't know how to convert parameter {position}"
            raise ctypes.ArgumentError(message)


def target(arg: Any) -> Any:
    """byref(x) → x; a pointer or array passed as is → itself."""
    return arg._obj if type(arg).__name__ == "CArgObject" else arg


def value_of(arg: Any) -> int:
    return arg.value if isinstance(arg, ctypes._SimpleCData) else int(arg)


def put(out: Any, value: Any) -> int:
    target(out).value = value
    return SUCCESS


def put_text(buffer: Any, size: Any, text: Optional[str]) -> int:
    if text is None:
        return NOT_SUPPORTED
    data = text.encode()
    if len(data) + 1 > value_of(size):
        return INSUFFICIENT_SIZE
    target(buffer).value = data
    return SUCCESS


def put_handle(out: Any, index: int) -> int:
    handle = target(out)
    address = ctypes.c_void_p(_HANDLE_BASE + 0x100 * index)
    ctypes.memmove(ctypes.addressof(handle), ctypes.byref(address), ctypes.sizeof(ctypes.c_void_p))
    return SUCCESS


def fill_pci(out: Any, bus_id: str, device_id: int = 0, subsystem_id: int = 0) -> int:
    pci = target(out)
    domain, bus, rest = bus_id.split(":")
    pci.busId = bus_id
    pci.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}"
    pci.domain, pci.bus, pci.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    pci.pciDeviceId, pci.pciSubSystemId = device_id, subsystem_id
    return SUCCESS


# -- system -----------------------------------------------------------------------------------------------------


@c_symbol("system", "nvmlInitWithFlags", "nvmlInit_v2")
def _init(lib: FakeNvmlLib, flags: Any = 0) -> int:
    if lib.node.init_error != SUCCESS:
        return lib.node.init_error
    lib.init_count += 1
    return SUCCESS


@c_symbol("system")
def nvmlShutdown(lib: FakeNvmlLib) -> int:
    lib.shutdown_calls += 1
    lib.init_count -= 1
    return SUCCESS


@c_symbol("system")
def nvmlErrorString(lib: FakeNvmlLib, code: Any) -> bytes:
    return pynvml.NVMLError._errcode_to_string.get(value_of(code), "Unknown Error").encode()


@c_symbol("system")
def nvmlSystemGetDriverVersion(lib: FakeNvmlLib, buffer: Any, size: Any) -> int:
    return put_text(buffer, size, lib.node.driver_version)


@c_symbol("system")
def nvmlSystemGetNVMLVersion(lib: FakeNvmlLib, buffer: Any, size: Any) -> int:
    return put_text(buffer, size, lib.node.nvml_version)


@c_symbol("system", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2")
def _cuda_version(lib: FakeNvmlLib, out: Any) -> int:
    return put(out, lib.node.cuda_version)


@c_symbol("system")
def nvmlDeviceGetCount_v2(lib: FakeNvmlLib, out: Any) -> int:
    return put(out, len(lib.node.gpus))


@c_symbol("index")
def nvmlDeviceGetHandleByIndex_v2(lib: FakeNvmlLib, index: int, out: Any) -> int:
    return put_handle(out, index)


# The per-device and per-link functions register themselves when imported.
from tests.support.fakes import fake_nvml_device, fake_nvml_links  # noqa: E402,F401  pylint: disable=wrong-import-position
from tests.support.fakes import fake_nvml_health  # noqa: E402,F401  pylint: disable=wrong-import-position
