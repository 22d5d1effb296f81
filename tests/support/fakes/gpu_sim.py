"""A simulated GPU node behind the fake libcuda.so.1 and libamdhip64.so: device memory that holds real bytes, pinned
host memory at real addresses, streams with a virtual clock, and the three diagnostic kernels executed as their
contract says (gpudiag.active.kernels). Timings are deterministic: each operation advances its stream's virtual
clock by size / rate, and events read that clock.

Also the ctypes-boundary plumbing both fakes share: `FakeLibrary` resolves C symbols to `c_<symbol>` methods,
wraps them in objects that accept `argtypes`/`restype` like ctypes functions, and lets a test make a symbol fail,
hang, or go missing.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import struct
import threading
import time
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpudiag.active import kernels, tensor_kernels
from gpudiag.active.ptx_parts import INJECT_BIT, RECORD_WORDS, SAMPLE_WORD
from gpudiag.active.stress_verify import RECORD_BYTES

GB = 1e9


def value(arg: Any) -> Any:
    """The Python value of an argument as ctypes would pass it (fakes get it unconverted)."""
    return arg.value if isinstance(arg, ctypes._SimpleCData) else arg


def out(arg: Any) -> Any:
    """The ctypes object behind an out-parameter passed as byref(x) or pointer(x)."""
    return arg._obj if hasattr(arg, "_obj") else arg.contents


@dataclass
class SimDevice:
    pci_bus_id: str  # as the runtime prints it, e.g. "0000:3B:00.0"
    total_bytes: int = 4 * 1024**2
    reserved_bytes: int = 1024**2  # taken by "the driver" before anyone allocates
    multiprocessors: int = 4
    h2d_gbps: float = 50.0
    d2h_gbps: float = 48.0
    memory_gbps: float = 3000.0
    fma_per_second: float = 30e12
    tensor_flops: float = 600e12  # BF16 tensor/matrix-core FLOP/s of the stress kernel
    compute_capability: tuple[int, int] = (9, 0)
    peer_gbps: dict[int, float] = field(default_factory=dict)  # ordinal → rate with peer access
    staged_gbps: float = 10.0  # peer copies without peer access go through host memory
    stuck_bits: dict[int, int] = field(default_factory=dict)  # device address → XOR mask applied on every write
    # Location words (%smid; AMD: XCC << 16 | CU) of multiprocessors whose tensor results are wrong on every launch.
    faulty_sms: set[int] = field(default_factory=set)
    tensor_sample_bits: int = 0x3FA00000  # thread 0's first sample as every block records it (1.25; 0: broken units)
    refuse_once_above: Optional[int] = None  # the first allocation larger than this fails (fragmentation)
    used_bytes: int = 0
    next_offset: int = 0  # bump allocator: addresses are never reused, so a device address names one cell


@dataclass
class SimStream:
    device: int
    clock: float = 0.0  # virtual seconds of work queued so far


class SimNode:
    def __init__(self, devices: list[SimDevice]):
        self.devices = devices
        self.allocations: dict[int, tuple[int, bytearray]] = {}  # device pointer → (ordinal, bytes)
        self.host: dict[int, ctypes.Array] = {}  # pinned host address → buffer
        self.streams: dict[int, SimStream] = {}
        self.events: dict[int, Optional[float]] = {}
        self.modules: set[int] = set()
        self.copy_warps: list[int] = []  # the streaming warps of each tensor-kernel launch, in order
        self.peer_access: set[tuple[int, int]] = set()  # (device, peer) pairs enabled
        self._handles = itertools.count(0x1000, 0x10)

    # --- memory ---------------------------------------------------------------------------------------------

    def free_bytes(self, ordinal: int) -> int:
        device = self.devices[ordinal]
        return device.total_bytes - device.reserved_bytes - device.used_bytes

    @staticmethod
    def base(ordinal: int) -> int:
        """Device memory of GPU `ordinal` starts here: allocations are handed out upwards from it, in order."""
        return 0x7F0000000000 + (ordinal << 40)

    def alloc(self, ordinal: int, nbytes: int) -> Optional[int]:
        device = self.devices[ordinal]
        if device.refuse_once_above is not None and nbytes > device.refuse_once_above:
            device.refuse_once_above = None
            return None
        if nbytes > self.free_bytes(ordinal):
            return None
        pointer = self.base(ordinal) + device.next_offset
        device.next_offset += (nbytes + 0xFFFF) // 0x10000 * 0x10000
        self.allocations[pointer] = (ordinal, bytearray(nbytes))
        device.used_bytes += nbytes
        return pointer

    def free(self, pointer: int) -> bool:
        if pointer not in self.allocations:
            return False
        ordinal, data = self.allocations.pop(pointer)
        self.devices[ordinal].used_bytes -= len(data)
        return True

    def alloc_host(self, nbytes: int) -> int:
        buffer = ctypes.create_string_buffer(nbytes)
        self.host[ctypes.addressof(buffer)] = buffer
        return ctypes.addressof(buffer)

    def free_host(self, pointer: int) -> bool:
        return self.host.pop(pointer, None) is not None

    def locate(self, address: int, nbytes: int) -> tuple[int, bytearray, int]:
        """(ordinal, allocation bytes, offset) of a device address range; KeyError outside every allocation."""
        for base, (ordinal, data) in list(self.allocations.items()):  # other GPU threads allocate meanwhile
            if base <= address and address + nbytes <= base + len(data):
                return ordinal, data, address - base
        raise KeyError(hex(address))

    # --- streams and events -----------------------------------------------------------------------------------

    def handle(self) -> int:
        return next(self._handles)

    def advance(self, stream: int, seconds: float) -> None:
        self.streams[stream].clock += seconds

    def copy_h2d(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        ordinal, data, offset = self.locate(dst, nbytes)
        data[offset:offset + nbytes] = ctypes.string_at(src, nbytes)
        self.advance(stream, nbytes / (self.devices[ordinal].h2d_gbps * GB))

    def copy_d2h(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        ordinal, data, offset = self.locate(src, nbytes)
        ctypes.memmove(dst, bytes(data[offset:offset + nbytes]), nbytes)
        self.advance(stream, nbytes / (self.devices[ordinal].d2h_gbps * GB))

    def copy_peer(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        dst_ordinal, dst_data, dst_offset = self.locate(dst, nbytes)
        src_ordinal, src_data, src_offset = self.locate(src, nbytes)
        dst_data[dst_offset:dst_offset + nbytes] = src_data[src_offset:src_offset + nbytes]
        device = self.devices[src_ordinal]
        direct = (src_ordinal, dst_ordinal) in self.peer_access and dst_ordinal in device.peer_gbps
        self.advance(stream, nbytes / ((device.peer_gbps[dst_ordinal] if direct else device.staged_gbps) * GB))

    # --- kernels ------------------------------------------------------------------------------------------------

    @staticmethod
    def location(vendor_lanes: int, multiprocessors: int, block: int) -> int:
        """The location word the kernel records for `block`: %smid on NVIDIA (block b on SM b mod SMs), (XCC << 16) |
        CU on AMD (two XCCs)."""
        where = block % max(1, multiprocessors)
        return where if vendor_lanes == 32 else (where % 2) << 16 | where // 2

    def _write(self, device: SimDevice, pointer: int, data: bytearray, offset: int, words: int, seed: int,
               mode: int = kernels.FIXED) -> None:
        data[offset:offset + words * 4] = pattern(words, seed, mode, pointer if mode == kernels.ADDRESS else 0)
        for address, mask in device.stuck_bits.items():
            if pointer <= address < pointer + words * 4:
                (word,) = struct.unpack_from("<I", data, offset + address - pointer)
                struct.pack_into("<I", data, offset + address - pointer, word ^ mask)

    def _verify(self, data: bytearray, offset: int, words: int, seed: int, slot_address: int, mode: int = kernels.FIXED,
                pointer: int = 0) -> None:
        _, slot, slot_offset = self.locate(slot_address, kernels.RESULT_SLOT_BYTES)
        count, first, mask = struct.unpack_from("<QQI", slot, slot_offset)  # offsets 0, 8, 16
        read = bytes(data[offset:offset + words * 4])
        want = pattern(words, seed, mode, pointer if mode == kernels.ADDRESS else 0)
        if read != want:  # word by word only where something differs
            for i, (got, expected) in enumerate(zip(array("I", read), array("I", want))):
                if got != expected:
                    count, first, mask = count + 1, min(first, i), mask | (got ^ expected)
        struct.pack_into("<QQI", slot, slot_offset, count, first, mask)

    def run_kernel(self, name: str, params: Any, grid: int, block: int, stream: int) -> None:
        """Execute a diagnostic kernel from its kernelParams (void**) as kernels.py specifies it."""
        def arg(index: int, ctype: Any) -> int:
            return ctypes.cast(params[index], ctypes.POINTER(ctype)).contents.value

        device = self.devices[self.streams[stream].device]
        if name in (kernels.FILL, kernels.CHECK, kernels.INVERT):
            pointer, words, seed = arg(0, ctypes.c_uint64), arg(1, ctypes.c_uint64), arg(2, ctypes.c_uint32)
            mode = arg(3 if name == kernels.FILL else 4, ctypes.c_uint32)
            _, data, offset = self.locate(pointer, words * 4)
            if name != kernels.FILL:
                self._verify(data, offset, words, seed, arg(3, ctypes.c_uint64), mode, pointer)
            if name != kernels.CHECK:  # the inversion writes the complement of what it expected
                self._write(device, pointer, data, offset, words, seed ^ (kernels.INVERTED if name != kernels.FILL
                                                                           else 0), mode)
            self.advance(stream, words * 4 / (device.memory_gbps * GB))
        elif name == kernels.FMA:
            iterations = arg(1, ctypes.c_uint32)
            self.advance(stream, grid * block * iterations * kernels.FMA_PER_ITERATION / device.fma_per_second)
        elif name in (tensor_kernels.MMA, tensor_kernels.WGMMA, tensor_kernels.MFMA):
            self._tensor(name, device, arg, grid, block, stream)
        elif name == tensor_kernels.COPY:
            vectors = arg(2, ctypes.c_uint64)
            self.locate(arg(0, ctypes.c_uint64), vectors * 16)  # both buffers must be allocations of that size
            self.locate(arg(1, ctypes.c_uint64), vectors * 16)
            self.advance(stream, 2 * vectors * 16 / (device.memory_gbps * GB))  # read + write
        else:
            raise AssertionError(f"unknown kernel {name}")

    def _tensor(self, name: str, device: SimDevice, arg: Callable[[int, Any], int], grid: int, block: int,
                stream: int) -> None:
        """The stress kernels' contract (gpudiag/active/ptx_parts.py): a record per block, a verified stream."""
        spec = {tensor_kernels.MMA: tensor_kernels.MMA_KERNEL, tensor_kernels.WGMMA: tensor_kernels.WGMMA_KERNEL}.get(
            name) or tensor_kernels.stress_kernel("amd", "gfx942", None, 0)
        assert block == spec.block_threads, (name, block)
        iterations, vectors, copy_warps = arg(1, ctypes.c_uint32), arg(3, ctypes.c_uint64), arg(4, ctypes.c_uint32)
        units = grid * spec.units(copy_warps)
        seconds = units * (iterations * spec.flop_per_iteration + spec.extra_flop) / device.tensor_flops
        self.copy_warps.append(copy_warps if vectors else 0)
        inject = arg(10, ctypes.c_uint32)
        records = array("I", bytes(grid * RECORD_BYTES))
        for b in range(grid):
            where = self.location(spec.lanes, device.multiprocessors, b)
            records[b * RECORD_WORDS] = where
            for warp in range(spec.tensor_warps(copy_warps)):
                signature = zlib.crc32(f"{name}:{iterations}:{warp}".encode())
                if where in device.faulty_sms:
                    signature ^= 1
                if where == inject and warp == 0:  # thread 0's accumulator, folded into warp 0's signature
                    signature ^= 1 << INJECT_BIT
                records[b * RECORD_WORDS + 1 + warp] = signature
            records[b * RECORD_WORDS + SAMPLE_WORD] = device.tensor_sample_bits
        _, out_data, at = self.locate(arg(0, ctypes.c_uint64), grid * RECORD_BYTES)
        out_data[at:at + grid * RECORD_BYTES] = records.tobytes()
        if vectors and copy_warps:  # the streaming warps check the half they read and write the other one
            buffer, parity = arg(2, ctypes.c_uint64), arg(7, ctypes.c_uint32)
            half = vectors * 16
            src, dst = buffer + parity * half, buffer + (1 - parity) * half
            _, data, offset = self.locate(src, half)
            self._verify(data, offset, vectors * 4, arg(8, ctypes.c_uint32), arg(6, ctypes.c_uint64))
            _, data, offset = self.locate(dst, half)
            self._write(device, dst, data, offset, vectors * 4, arg(9, ctypes.c_uint32))
            _, counter, at = self.locate(arg(5, ctypes.c_uint64), 8)
            (moved,) = struct.unpack_from("<Q", counter, at)
            struct.pack_into("<Q", counter, at, moved + int(seconds * device.memory_gbps * GB * 0.5))
        self.advance(stream, seconds)


# A real synchronize waits for the GPU outside the GIL. The fake's kernels finish at once, so without this the
# stress's launch loop (two GPU threads) is a busy loop that starved its telemetry sampler for up to 1.5 s at a time
# (tests/active/test_power_stress.py: a steady window of one sample, and the power verdict not judged).
SYNC_YIELD_SECONDS = 0.0002


def _blocks_as_a_gpu_would() -> None:
    time.sleep(SYNC_YIELD_SECONDS)


@functools.lru_cache(maxsize=256)
def pattern(words: int, seed: int, mode: int, pointer: int) -> bytes:
    """What gpudiag_fill writes over `words` words from `pointer` (kept: the fake's allocations recur test after
    test, and the random pattern costs a second a MiB in Python)."""
    if mode == kernels.FIXED:
        return array("I", (kernels.pattern_word(i, seed) for i in range(words))).tobytes()
    return array("I", (kernels.pattern_value(mode, i, seed, pointer + 4 * i) for i in range(words))).tobytes()


class FakeFunction:
    """Stands for a ctypes foreign function: takes `argtypes`/`restype`, and can be made to fail or hang."""

    def __init__(self, name: str, impl: Callable[..., Any]):
        self.__name__ = name
        self.impl = impl
        self.argtypes: Any = None
        self.restype: Any = None
        self.fail_with: Optional[int] = None
        self.fail_times: Optional[int] = None  # None: every call
        self.hang: Optional[threading.Event] = None  # the call blocks until this is set

    def __call__(self, *args: Any) -> Any:
        if self.hang is not None:
            self.hang.wait()
        if self.fail_with is not None and (self.fail_times is None or self.fail_times > 0):
            if self.fail_times is not None:
                self.fail_times -= 1
            return self.fail_with
        return self.impl(*args)


class FakeLibrary:
    """C symbol `x` resolves to method `c_x`; a symbol without one is missing, as in a real CDLL."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._functions: dict[str, FakeFunction] = {}
        self._removed: set[str] = set()
        self._lock = threading.Lock()

    def __getattr__(self, symbol: str) -> FakeFunction:
        if symbol.startswith("_") or symbol in self._removed:
            raise AttributeError(symbol)
        impl = getattr(type(self), f"c_{symbol}", None)
        if impl is None:
            raise AttributeError(f"undefined symbol: {symbol}")
        function = self._functions.get(symbol)
        if function is None:
            def record(*args: Any, _impl=impl, _symbol=symbol) -> Any:
                with self._lock:
                    self.calls.append(_symbol)
                return _impl(self, *args)
            function = self._functions[symbol] = FakeFunction(symbol, record)
        return function

    def fail(self, symbol: str, code: int, times: Optional[int] = None) -> None:
        function = getattr(self, symbol)
        function.fail_with, function.fail_times = code, times

    def hang(self, symbol: str) -> threading.Event:
        release = threading.Event()
        getattr(self, symbol).hang = release
        return release

    def remove(self, symbol: str) -> None:
        self._removed.add(symbol)

    def count(self, symbol: str) -> int:
        return self.calls.count(symbol)


def patch_cdll(monkeypatch: Any, libraries: dict[str, FakeLibrary]) -> None:
    """ctypes.CDLL(name) returns the fake whose key is part of `name`; any other library is missing."""
    def cdll(name: str, *args: Any, **kwargs: Any) -> FakeLibrary:
        for key, library in libraries.items():
            if key in str(name):
                return library
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", cdll)


# Return codes that cuda.h and hip_runtime_api.h number alike (CUDA_SUCCESS / hipSuccess, …).
SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, INVALID_HANDLE = 0, 1, 2, 400


class SimRuntime(FakeLibrary):
    """The calls whose semantics and return codes CUDA and HIP share, over one SimNode; the vendor fakes bind their
    C names to these (`c_cuStreamDestroy_v2 = SimRuntime.stream_destroy`). `_device()` is the current device."""

    def __init__(self, devices: list[SimDevice]):
        super().__init__()
        self.node = SimNode(devices)

    def _device(self) -> int:
        raise NotImplementedError

    def _handle_out(self, target: Any, table: dict, entry: Any) -> int:
        handle = self.node.handle()
        table[handle] = entry
        out(target).value = handle
        return SUCCESS

    def mem_get_info(self, free: Any, total: Any) -> int:
        out(free).value = self.node.free_bytes(self._device())
        out(total).value = self.node.devices[self._device()].total_bytes
        return SUCCESS

    def malloc(self, pointer: Any, nbytes: Any) -> int:
        address = self.node.alloc(self._device(), value(nbytes))
        if address is None:
            return OUT_OF_MEMORY
        out(pointer).value = address
        return SUCCESS

    def free(self, pointer: Any) -> int:
        return SUCCESS if self.node.free(value(pointer)) else INVALID_VALUE

    def alloc_host(self, pointer: Any, nbytes: Any, flags: Any = 0) -> int:
        out(pointer).value = self.node.alloc_host(value(nbytes))
        return SUCCESS

    def free_host(self, pointer: Any) -> int:
        return SUCCESS if self.node.free_host(value(pointer)) else INVALID_VALUE

    def stream_create(self, stream: Any, flags: Any) -> int:
        return self._handle_out(stream, self.node.streams, SimStream(self._device()))

    def stream_destroy(self, stream: Any) -> int:
        return SUCCESS if self.node.streams.pop(value(stream), None) else INVALID_HANDLE

    def stream_synchronize(self, stream: Any) -> int:
        _blocks_as_a_gpu_would()
        return SUCCESS if value(stream) in self.node.streams else INVALID_HANDLE

    def event_create(self, event: Any, flags: Any) -> int:
        return self._handle_out(event, self.node.events, None)

    def event_destroy(self, event: Any) -> int:
        if value(event) not in self.node.events:
            return INVALID_HANDLE
        del self.node.events[value(event)]
        return SUCCESS

    def event_record(self, event: Any, stream: Any) -> int:
        self.node.events[value(event)] = self.node.streams[value(stream)].clock
        return SUCCESS

    def event_synchronize(self, event: Any) -> int:
        _blocks_as_a_gpu_would()
        return SUCCESS if value(event) in self.node.events else INVALID_HANDLE

    def event_elapsed(self, milliseconds: Any, start: Any, end: Any) -> int:
        began, ended = self.node.events.get(value(start)), self.node.events.get(value(end))
        if began is None or ended is None:
            return INVALID_HANDLE
        out(milliseconds).value = (ended - began) * 1000
        return SUCCESS

    def can_access_peer(self, result: Any, device: Any, peer: Any) -> int:
        out(result).value = int(value(peer) in self.node.devices[value(device)].peer_gbps)
        return SUCCESS

    def module_unload(self, module: Any) -> int:
        if value(module) not in self.node.modules:
            return INVALID_HANDLE
        self.node.modules.discard(value(module))
        return SUCCESS

    def leaks(self) -> dict[str, int]:
        """What is still held: device memory, pinned memory, streams, events, modules."""
        held = {"device_memory": len(self.node.allocations), "pinned_memory": len(self.node.host),
                "streams": len(self.node.streams), "events": len(self.node.events), "modules": len(self.node.modules)}
        return {k: v for k, v in held.items() if v}
