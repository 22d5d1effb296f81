"""The CUDA driver API (libcuda.so.1) through ctypes: the few calls the load tests need, every CUresult checked.

Symbols are the ones cuda.h's macros resolve to (`cuMemAlloc` → `cuMemAlloc_v2`, …): the unversioned names that
libcuda also exports are the CUDA 3.1 ABI with 32-bit sizes. cuEventElapsedTime_v2 (same semantics) only exists
from CUDA 12.8 drivers on, so the original is used where it is missing. Each device is driven through its primary
context (the one the CUDA runtime would use), retained on first use and released by `close()`.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p
from typing import Optional, Sequence

from gpudiag.active import kernels
from gpudiag.active.binding import Binding, forwards, load_library, returns
from gpudiag.active.tensor_kernels import Program
from gpudiag.active.runtime import GpuCallError, GpuOutOfMemory, RuntimeUnavailable, kernel_params
from gpudiag.model import ErrorKind, Vendor
from gpudiag.probe.deadline import CallTracker

log = logging.getLogger(__name__)

LIBRARY = "libcuda.so.1"

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_SYSTEM_NOT_READY = 802
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_BLOCKING_SYNC = 0x1  # the waiting thread sleeps instead of spinning a CPU core; timing stays enabled
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
_JIT_LOG_BYTES = 8192

# C symbol → argument types (every function returns a CUresult). CUdevice is int, CUdeviceptr unsigned long long,
# handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction) are pointers.
_SIGNATURES: dict[str, tuple] = {
    "cuInit": (c_uint,),
    "cuDriverGetVersion": (POINTER(c_int),),
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuGetErrorString": (c_int, POINTER(c_char_p)),
    "cuDeviceGetCount": (POINTER(c_int),),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDeviceGetPCIBusId": (c_char_p, c_int, c_int),
    "cuDeviceGetAttribute": (POINTER(c_int), c_int, c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(c_void_p), c_int),
    "cuDevicePrimaryCtxRelease_v2": (c_int,),
    "cuCtxSetCurrent": (c_void_p,),
    "cuMemGetInfo_v2": (POINTER(c_size_t), POINTER(c_size_t)),
    "cuMemAlloc_v2": (POINTER(c_uint64), c_size_t),
    "cuMemFree_v2": (c_uint64,),
    "cuMemAllocHost_v2": (POINTER(c_void_p), c_size_t),
    "cuMemFreeHost": (c_void_p,),
    "cuStreamCreate": (POINTER(c_void_p), c_uint),
    "cuStreamDestroy_v2": (c_void_p,),
    "cuStreamSynchronize": (c_void_p,),
    "cuEventCreate": (POINTER(c_void_p), c_uint),
    "cuEventDestroy_v2": (c_void_p,),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuEventSynchronize": (c_void_p,),
    "cuEventElapsedTime": (POINTER(c_float), c_void_p, c_void_p),
    "cuEventElapsedTime_v2": (POINTER(c_float), c_void_p, c_void_p),
    "cuMemcpyHtoDAsync_v2": (c_uint64, c_void_p, c_size_t, c_void_p),
    "cuMemcpyDtoHAsync_v2": (c_void_p, c_uint64, c_size_t, c_void_p),
    "cuMemcpyPeerAsync": (c_uint64, c_void_p, c_uint64, c_void_p, c_size_t, c_void_p),
    "cuDeviceCanAccessPeer": (POINTER(c_int), c_int, c_int),
    "cuCtxEnablePeerAccess": (c_void_p, c_uint),
    "cuModuleLoadDataEx": (POINTER(c_void_p), c_char_p, c_uint, POINTER(c_int), POINTER(c_void_p)),
    "cuModuleUnload": (c_void_p,),
    "cuModuleGetFunction": (POINTER(c_void_p), c_void_p, c_char_p),
    "cuLaunchKernel": (c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                       POINTER(c_void_p), POINTER(c_void_p)),
}


class CudaRuntime(Binding):
    name = "cuda"
    vendor = Vendor.NVIDIA
    _signatures = _SIGNATURES

    def __init__(self, tracker: Optional[CallTracker] = None):
        lib = load_library([LIBRARY], "cuda.load", f"{LIBRARY} (the NVIDIA driver's user-space library)")
        super().__init__(lib, LIBRARY, tracker or CallTracker())
        self._lock = threading.Lock()
        self._contexts: dict[int, tuple[int, int]] = {}  # ordinal → (CUdevice, primary CUcontext)
        self._current = threading.local()  # the ordinal made current on this thread
        # Same call; CUDA 12.8+ headers name the _v2, which older drivers lack.
        self._elapsed_symbol = "cuEventElapsedTime_v2" if self._has("cuEventElapsedTime_v2") else "cuEventElapsedTime"
        code = self._raw("cuInit", 0)
        if code == CUDA_ERROR_NO_DEVICE:
            raise RuntimeUnavailable("cuda.cuInit", ErrorKind.NOT_FOUND, "the CUDA driver sees no device "
                                     "(CUDA_ERROR_NO_DEVICE; check CUDA_VISIBLE_DEVICES and /dev/nvidia*)")
        if code != CUDA_SUCCESS:
            hint = ("; on NVSwitch systems nvidia-fabricmanager must be running (systemctl status "
                    "nvidia-fabricmanager)") if code == CUDA_ERROR_SYSTEM_NOT_READY else ""
            raise RuntimeUnavailable("cuda.cuInit", ErrorKind.ERROR, f"{self._error('cuInit', code)}{hint}")

    def _error(self, symbol: str, code: int, detail: str = "") -> GpuCallError:
        name, text = c_char_p(), c_char_p()
        try:
            if self._raw("cuGetErrorName", code, byref(name)) != CUDA_SUCCESS or not name.value:
                name.value = b"CUDA_ERROR_UNRECOGNISED"
            if self._raw("cuGetErrorString", code, byref(text)) == CUDA_SUCCESS and text.value:
                detail = f"{text.value.decode(errors='replace')}{'; ' + detail if detail else ''}"
        except GpuCallError:  # the error functions themselves are missing: keep the code alone
            name.value = b"CUDA_ERROR_UNRECOGNISED"
        cls = GpuOutOfMemory if code == CUDA_ERROR_OUT_OF_MEMORY else GpuCallError
        return cls(self.name, symbol, code, name.value.decode(errors="replace"), detail)

    # --- devices ----------------------------------------------------------------------------------------------

    def version(self) -> Optional[str]:
        value = self._out("cuDriverGetVersion", c_int)
        return f"{value // 1000}.{value % 1000 // 10}"  # 12040 → "12.4"

    device_count = returns("cuDeviceGetCount", c_int)
    _device = returns("cuDeviceGet", c_int)  # ordinal → CUdevice

    def pci_bus_id(self, ordinal: int) -> str:
        buffer = ctypes.create_string_buffer(32)
        self._call("cuDeviceGetPCIBusId", buffer, len(buffer), self._device(ordinal))
        return buffer.value.decode()

    def use(self, ordinal: int) -> None:
        with self._lock:
            if ordinal not in self._contexts:
                device = self._device(ordinal)
                self._contexts[ordinal] = (device, self._out("cuDevicePrimaryCtxRetain", c_void_p, device))
        self._call("cuCtxSetCurrent", self._contexts[ordinal][1])
        self._current.ordinal = ordinal

    def memory_info(self) -> tuple[int, int]:
        free, total = c_size_t(), c_size_t()
        self._call("cuMemGetInfo_v2", byref(free), byref(total))
        return free.value, total.value

    def multiprocessor_count(self) -> Optional[int]:
        device = self._contexts[self._current.ordinal][0]
        return self._out("cuDeviceGetAttribute", c_int, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) or None

    def compute_capability(self) -> Optional[tuple[int, int]]:
        device = self._contexts[self._current.ordinal][0]
        return (self._out("cuDeviceGetAttribute", c_int, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                self._out("cuDeviceGetAttribute", c_int, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))

    # --- memory, streams, events ------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        return self._out("cuMemAlloc_v2", c_uint64, nbytes, detail=f"{nbytes} bytes")

    free = forwards("cuMemFree_v2")

    def alloc_host(self, nbytes: int) -> int:
        return self._out("cuMemAllocHost_v2", c_void_p, nbytes, detail=f"{nbytes} bytes of pinned host memory")

    free_host = forwards("cuMemFreeHost")
    stream_create = returns("cuStreamCreate", c_void_p, CU_STREAM_NON_BLOCKING)
    stream_destroy = forwards("cuStreamDestroy_v2")
    stream_synchronize = forwards("cuStreamSynchronize")
    event_create = returns("cuEventCreate", c_void_p, CU_EVENT_BLOCKING_SYNC)
    event_destroy = forwards("cuEventDestroy_v2")
    event_record = forwards("cuEventRecord")  # (event, stream)
    event_synchronize = forwards("cuEventSynchronize")

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return self._out(self._elapsed_symbol, c_float, start, end)

    # --- copies -----------------------------------------------------------------------------------------------

    copy_h2d_async = forwards("cuMemcpyHtoDAsync_v2")  # (dst, src, nbytes, stream)
    copy_d2h_async = forwards("cuMemcpyDtoHAsync_v2")

    def copy_peer_async(self, dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int,
                        stream: int) -> None:
        self._call("cuMemcpyPeerAsync", dst, self._contexts[dst_ordinal][1], src, self._contexts[src_ordinal][1],
                   nbytes, stream)

    def can_access_peer(self, ordinal: int, peer: int) -> bool:
        return bool(self._out("cuDeviceCanAccessPeer", c_int, self._device(ordinal), self._device(peer)))

    def enable_peer_access(self, peer: int) -> None:
        code = self._raw("cuCtxEnablePeerAccess", self._contexts[peer][1], 0)
        if code not in (CUDA_SUCCESS, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
            raise self._error("cuCtxEnablePeerAccess", code)

    # --- kernels ----------------------------------------------------------------------------------------------

    def load_kernels(self) -> int:
        """JIT-compile the diagnostic kernels' PTX for the current device."""
        return self._load_ptx(kernels.PTX)

    def load_program(self, program: Program) -> int:
        """A tensor_kernels program (PTX) for the current device; a refusal carries the JIT's error log."""
        return self._load_ptx(program.text)

    def _load_ptx(self, ptx: str) -> int:
        log = ctypes.create_string_buffer(_JIT_LOG_BYTES)
        options = (c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (c_void_p * 2)(ctypes.cast(log, c_void_p), c_void_p(_JIT_LOG_BYTES))
        module = c_void_p()
        code = self._raw("cuModuleLoadDataEx", byref(module), ptx.encode() + b"\0", 2, options, values)
        if code != CUDA_SUCCESS:
            raise self._error("cuModuleLoadDataEx", code, log.value.decode(errors="replace").strip())
        return module.value

    unload_kernels = forwards("cuModuleUnload")

    def kernel(self, module: int, name: str) -> int:
        return self._out("cuModuleGetFunction", c_void_p, module, name.encode())

    def launch(self, function: int, grid: int, block: int, args: Sequence[ctypes._SimpleCData], stream: int) -> None:
        self._call("cuLaunchKernel", function, grid, 1, 1, block, 1, 1, 0, stream, kernel_params(args), None)

    def release(self, ordinal: int) -> None:
        """Release the primary context retained on `ordinal` (a GPU found busy after all must not keep it)."""
        with self._lock:
            device, _ = self._contexts.pop(ordinal, (None, None))
        if device is not None:
            try:
                self._call("cuDevicePrimaryCtxRelease_v2", device)
            except GpuCallError as error:  # the others are still released
                log.warning("releasing the primary context of CUDA device %d failed: %s", device, error)

    def close(self) -> None:
        """Release the primary contexts retained here; the driver frees what they still hold."""
        for ordinal in list(self._contexts):
            self.release(ordinal)
