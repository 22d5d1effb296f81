"""What the load tests need from a vendor runtime, whatever the vendor: the interface CUDA (cuda.py) and HIP (hip.py)
implement, the errors they raise, and `Resources`, which gives back everything a test took, whatever happens.

Device memory, pinned host memory, streams and events are plain integers (addresses and handles) so that the tests
are written once for both runtimes. A device is made current per thread with `use(ordinal)`; every other call acts on
the current device.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Optional, Protocol, Sequence

from gpudiag.active.tensor_kernels import Program
from gpudiag.model import ErrorKind, ProbeError, Vendor
from gpudiag.probe.deadline import CallTracker

log = logging.getLogger(__name__)


class RuntimeUnavailable(Exception):
    """The runtime cannot be used at all: library missing, driver not loaded, no device."""

    def __init__(self, source: str, kind: ErrorKind, message: str):
        super().__init__(message)
        self.source = source
        self.kind = kind

    def probe_error(self) -> ProbeError:
        return ProbeError(self.source, self.kind, str(self))


class GpuCallError(Exception):
    """A runtime call returned an error. `call` is the C symbol, `error_name` the vendor's name for the code."""

    def __init__(self, runtime: str, call: str, code: int, error_name: str, detail: str = ""):
        text = f"{call} failed: {error_name} ({code})"
        super().__init__(f"{text}: {detail}" if detail else text)
        self.runtime = runtime
        self.call = call
        self.code = code
        self.error_name = error_name

    def probe_error(self) -> ProbeError:
        return ProbeError(f"{self.runtime}.{self.call}", ErrorKind.ERROR, str(self))


class GpuOutOfMemory(GpuCallError):
    """The allocation did not fit (CUDA_ERROR_OUT_OF_MEMORY / hipErrorOutOfMemory)."""


class GpuRuntime(Protocol):
    name: str  # "cuda" | "hip"
    vendor: Vendor
    tracker: CallTracker  # names the call in progress, so that a hung call can be reported by name

    def version(self) -> Optional[str]: ...
    def device_count(self) -> int: ...
    def pci_bus_id(self, ordinal: int) -> str: ...
    def use(self, ordinal: int) -> None: ...
    def release(self, ordinal: int) -> None: ...  # give back what `use` took on a GPU that will not be tested
    def memory_info(self) -> tuple[int, int]: ...  # (free, total) bytes of the current device
    def multiprocessor_count(self) -> Optional[int]: ...
    def compute_capability(self) -> Optional[tuple[int, int]]: ...  # CUDA (major, minor); None on HIP
    def alloc(self, nbytes: int) -> int: ...
    def free(self, pointer: int) -> None: ...
    def alloc_host(self, nbytes: int) -> int: ...  # pinned (page-locked) host memory
    def free_host(self, pointer: int) -> None: ...
    def stream_create(self) -> int: ...
    def stream_destroy(self, stream: int) -> None: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def event_create(self) -> int: ...
    def event_destroy(self, event: int) -> None: ...
    def event_record(self, event: int, stream: int) -> None: ...
    def event_synchronize(self, event: int) -> None: ...
    def event_elapsed_ms(self, start: int, end: int) -> float: ...
    def copy_h2d_async(self, dst: int, src: int, nbytes: int, stream: int) -> None: ...
    def copy_d2h_async(self, dst: int, src: int, nbytes: int, stream: int) -> None: ...
    def copy_peer_async(self, dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int,
                        stream: int) -> None: ...
    def can_access_peer(self, ordinal: int, peer: int) -> bool: ...
    def enable_peer_access(self, peer: int) -> None: ...  # the current device may then access `peer`'s memory
    def load_kernels(self) -> int: ...  # kernels.NAMES for the current device; returns a module handle
    def load_program(self, program: Program) -> int: ...  # a tensor_kernels program for the current device
    def unload_kernels(self, module: int) -> None: ...
    def kernel(self, module: int, name: str) -> int: ...
    def launch(
        self, function: int, grid: int, block: int, args: Sequence[ctypes._SimpleCData], stream: int
    ) -> None: ...
    def close(self) -> None: ...


def kernel_params(args: Sequence[ctypes._SimpleCData]) -> ctypes.Array:
    """`void** kernelParams` for cuLaunchKernel / hipModuleLaunchKernel: one pointer to each argument's value. The
    caller keeps `args` alive until the launch call returns (the runtime copies the values at launch)."""
    return (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])


class Resources:
    """Everything a test takes on one device, given back in reverse order when the block ends, exceptions and
    KeyboardInterrupt included. Streams are synchronised first: memory still used by a copy or a kernel in flight
    must not be freed under it. A release that fails is logged and the others still run."""

    def __init__(self, runtime: GpuRuntime, ordinal: int):
        self.runtime = runtime
        self.ordinal = ordinal
        self._streams: list[int] = []
        self._releases: list[tuple[str, object]] = []

    def __enter__(self) -> "Resources":
        self.runtime.use(self.ordinal)
        return self

    def alloc(self, nbytes: int) -> int:
        pointer = self.runtime.alloc(nbytes)
        self._releases.append(("free", pointer))
        return pointer

    def alloc_host(self, nbytes: int) -> int:
        pointer = self.runtime.alloc_host(nbytes)
        self._releases.append(("free_host", pointer))
        return pointer

    def stream(self) -> int:
        stream = self.runtime.stream_create()
        self._streams.append(stream)
        self._releases.append(("stream_destroy", stream))
        return stream

    def event(self) -> int:
        event = self.runtime.event_create()
        self._releases.append(("event_destroy", event))
        return event

    def kernels(self) -> int:
        module = self.runtime.load_kernels()
        self._releases.append(("unload_kernels", module))
        return module

    def program(self, program: Program) -> int:
        module = self.runtime.load_program(program)
        self._releases.append(("unload_kernels", module))
        return module

    def release(self, pointer: int) -> None:
        """Free one device allocation early (the memory test gives back a chunk it could not use)."""
        self._releases.remove(("free", pointer))
        self.runtime.free(pointer)

    def __exit__(self, *exc: object) -> None:
        try:
            self.runtime.use(self.ordinal)
        except Exception as error:  # noqa: BLE001 - still try to release; the runtime reports what it can
            log.warning("could not make GPU %d current to release its resources: %s", self.ordinal, error)
        for stream in self._streams:
            try:
                self.runtime.stream_synchronize(stream)
            except Exception as error:  # noqa: BLE001
                log.warning("GPU %d: synchronising a stream before release failed: %s", self.ordinal, error)
        while self._releases:
            method, handle = self._releases.pop()
            try:
                getattr(self.runtime, method)(handle)
            except Exception as error:  # noqa: BLE001
                log.warning("GPU %d: %s failed: %s", self.ordinal, method, error)
