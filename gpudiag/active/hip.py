"""HIP (libamdhip64.so) through ctypes: the same surface as cuda.py for AMD GPUs. Kernels are compiled at run time
by hiprtc (libhiprtc.so) from kernels.HIP_SOURCE for the current device's ISA.

HIP differs from the CUDA driver API where it matters here: a device is made current with hipSetDevice (HIP
manages one primary context per device itself), hipGetErrorName returns the name instead of filling an out
parameter, peer copies and peer access take device ordinals, and HIP_VERSION packs major·10^7 + minor·10^5 + patch.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_void_p
from typing import Optional, Sequence

from gpudiag.active import kernels
from gpudiag.active.binding import SUCCESS, Binding, forwards, load_library, returns
from gpudiag.active.tensor_kernels import Program
from gpudiag.active.runtime import GpuCallError, GpuOutOfMemory, RuntimeUnavailable, kernel_params
from gpudiag.model import ErrorKind, Vendor
from gpudiag.probe.deadline import CallTracker

# ROCm installs unversioned development links only with its -dev packages; the versioned names cover ROCm 6 and 7.
LIBRARIES = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so")
HIPRTC_LIBRARIES = ("libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "/opt/rocm/lib/libhiprtc.so")

hipErrorOutOfMemory = 2
hipErrorNoDevice = 100
hipErrorPeerAccessAlreadyEnabled = 704
hipMemcpyHostToDevice = 1
hipMemcpyDeviceToHost = 2
hipStreamNonBlocking = 0x1
hipEventBlockingSync = 0x1

_SIGNATURES: dict[str, tuple] = {
    "hipInit": (c_uint,),
    "hipRuntimeGetVersion": (POINTER(c_int),),
    "hipGetErrorName": (c_int,),
    "hipGetErrorString": (c_int,),
    "hipGetDeviceCount": (POINTER(c_int),),
    "hipDeviceGetPCIBusId": (c_char_p, c_int, c_int),
    "hipSetDevice": (c_int,),
    "hipMemGetInfo": (POINTER(c_size_t), POINTER(c_size_t)),
    "hipMalloc": (POINTER(c_void_p), c_size_t),
    "hipFree": (c_void_p,),
    "hipHostMalloc": (POINTER(c_void_p), c_size_t, c_uint),
    "hipHostFree": (c_void_p,),
    "hipStreamCreateWithFlags": (POINTER(c_void_p), c_uint),
    "hipStreamDestroy": (c_void_p,),
    "hipStreamSynchronize": (c_void_p,),
    "hipEventCreateWithFlags": (POINTER(c_void_p), c_uint),
    "hipEventDestroy": (c_void_p,),
    "hipEventRecord": (c_void_p, c_void_p),
    "hipEventSynchronize": (c_void_p,),
    "hipEventElapsedTime": (POINTER(c_float), c_void_p, c_void_p),
    "hipMemcpyAsync": (c_void_p, c_void_p, c_size_t, c_int, c_void_p),
    "hipMemcpyPeerAsync": (c_void_p, c_int, c_void_p, c_int, c_size_t, c_void_p),
    "hipDeviceCanAccessPeer": (POINTER(c_int), c_int, c_int),
    "hipDeviceEnablePeerAccess": (c_int, c_uint),
    "hipModuleLoadData": (POINTER(c_void_p), c_char_p),
    "hipModuleUnload": (c_void_p,),
    "hipModuleGetFunction": (POINTER(c_void_p), c_void_p, c_char_p),
    "hipModuleLaunchKernel": (c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                              POINTER(c_void_p), POINTER(c_void_p)),
}
_RESTYPES = {"hipGetErrorName": c_char_p, "hipGetErrorString": c_char_p}

_HIPRTC_SIGNATURES: dict[str, tuple] = {
    "hiprtcGetErrorString": (c_int,),
    "hiprtcCreateProgram": (POINTER(c_void_p), c_char_p, c_char_p, c_int, POINTER(c_char_p), POINTER(c_char_p)),
    "hiprtcCompileProgram": (c_void_p, c_int, POINTER(c_char_p)),
    "hiprtcGetProgramLogSize": (c_void_p, POINTER(c_size_t)),
    "hiprtcGetProgramLog": (c_void_p, c_char_p),
    "hiprtcGetCodeSize": (c_void_p, POINTER(c_size_t)),
    "hiprtcGetCode": (c_void_p, c_char_p),
    "hiprtcDestroyProgram": (POINTER(c_void_p),),
}


class Hiprtc(Binding):
    """hiprtc, loaded on first kernel use: a node without it still runs the copy tests."""

    name = "hiprtc"
    _signatures = _HIPRTC_SIGNATURES
    _restypes = {"hiprtcGetErrorString": c_char_p}

    def __init__(self, tracker: CallTracker):
        super().__init__(load_library(HIPRTC_LIBRARIES, "hiprtc.load", "libhiprtc.so (ROCm's runtime compiler)"),
                         "libhiprtc.so", tracker)

    def _error(self, symbol: str, code: int, detail: str = "") -> GpuCallError:
        text = self._raw("hiprtcGetErrorString", code) or b"HIPRTC_ERROR_UNRECOGNISED"
        return GpuCallError(self.name, symbol, code, text.decode(errors="replace"), detail)

    def compile(self, source: str, options: Sequence[str] = ()) -> bytes:
        """A code object for the current device (hiprtc picks its ISA when no --offload-arch is given)."""
        program = c_void_p()
        self._call("hiprtcCreateProgram", byref(program), source.encode(), b"gpudiag_kernels.hip", 0, None, None)
        try:
            argv = (c_char_p * max(1, len(options)))(*[o.encode() for o in options])
            code = self._raw("hiprtcCompileProgram", program, len(options), argv)
            if code != SUCCESS:
                log = self._read(program, "hiprtcGetProgramLogSize", "hiprtcGetProgramLog")
                raise self._error("hiprtcCompileProgram", code, log.decode(errors="replace").strip("\0 \n"))
            return self._read(program, "hiprtcGetCodeSize", "hiprtcGetCode")
        finally:
            self._raw("hiprtcDestroyProgram", byref(program))

    def _read(self, program: c_void_p, size_symbol: str, read_symbol: str) -> bytes:
        size = c_size_t()
        self._call(size_symbol, program, byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        self._call(read_symbol, program, buffer)
        return buffer.raw


class HipRuntime(Binding):
    name = "hip"
    vendor = Vendor.AMD
    _signatures = _SIGNATURES
    _restypes = _RESTYPES

    def __init__(self, tracker: Optional[CallTracker] = None):
        super().__init__(load_library(LIBRARIES, "hip.load", "libamdhip64.so (ROCm's HIP runtime)"),
                         "libamdhip64.so", tracker or CallTracker())
        self._hiprtc: Optional[Hiprtc] = None
        self._code_object: Optional[bytes] = None  # compiled once: all GPUs of a node share an ISA in practice
        self._programs: dict[str, bytes] = {}  # tensor_kernels programs, by name, compiled once each
        self._lock = threading.Lock()
        code = self._raw("hipInit", 0)
        if code == hipErrorNoDevice:
            raise RuntimeUnavailable("hip.hipInit", ErrorKind.NOT_FOUND, "the HIP runtime sees no device "
                                     "(hipErrorNoDevice; check HIP_VISIBLE_DEVICES, /dev/kfd and /dev/dri)")
        if code != SUCCESS:
            raise RuntimeUnavailable("hip.hipInit", ErrorKind.ERROR, str(self._error("hipInit", code)))

    def _error(self, symbol: str, code: int, detail: str = "") -> GpuCallError:
        name = self._raw("hipGetErrorName", code) or b"hipErrorUnrecognised"
        text = self._raw("hipGetErrorString", code)
        if text:
            detail = f"{text.decode(errors='replace')}{'; ' + detail if detail else ''}"
        cls = GpuOutOfMemory if code == hipErrorOutOfMemory else GpuCallError
        return cls(self.name, symbol, code, name.decode(errors="replace"), detail)

    # --- devices ----------------------------------------------------------------------------------------------

    def version(self) -> Optional[str]:
        value = self._out("hipRuntimeGetVersion", c_int)
        return f"{value // 10_000_000}.{value // 100_000 % 100}"  # 60241134 → "6.2"

    device_count = returns("hipGetDeviceCount", c_int)

    def pci_bus_id(self, ordinal: int) -> str:
        buffer = ctypes.create_string_buffer(32)
        self._call("hipDeviceGetPCIBusId", buffer, len(buffer), ordinal)
        return buffer.value.decode()

    use = forwards("hipSetDevice")

    def memory_info(self) -> tuple[int, int]:
        free, total = c_size_t(), c_size_t()
        self._call("hipMemGetInfo", byref(free), byref(total))
        return free.value, total.value

    def multiprocessor_count(self) -> Optional[int]:
        # hipDeviceGetAttribute's enum values moved between ROCm releases; kernels.FALLBACK_GRID serves instead.
        return None

    def compute_capability(self) -> Optional[tuple[int, int]]:
        return None  # a CUDA notion; AMD kernels are chosen by the gfx target (DeviceSnapshot.architecture)

    # --- memory, streams, events ------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        return self._out("hipMalloc", c_void_p, nbytes, detail=f"{nbytes} bytes")

    free = forwards("hipFree")

    def alloc_host(self, nbytes: int) -> int:
        return self._out("hipHostMalloc", c_void_p, nbytes, 0, detail=f"{nbytes} bytes of pinned host memory")

    free_host = forwards("hipHostFree")
    stream_create = returns("hipStreamCreateWithFlags", c_void_p, hipStreamNonBlocking)
    stream_destroy = forwards("hipStreamDestroy")
    stream_synchronize = forwards("hipStreamSynchronize")
    event_create = returns("hipEventCreateWithFlags", c_void_p, hipEventBlockingSync)
    event_destroy = forwards("hipEventDestroy")
    event_record = forwards("hipEventRecord")  # (event, stream)
    event_synchronize = forwards("hipEventSynchronize")
    event_elapsed_ms = returns("hipEventElapsedTime", c_float)  # (start, end) → milliseconds

    # --- copies -----------------------------------------------------------------------------------------------

    def copy_h2d_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call("hipMemcpyAsync", dst, src, nbytes, hipMemcpyHostToDevice, stream)

    def copy_d2h_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call("hipMemcpyAsync", dst, src, nbytes, hipMemcpyDeviceToHost, stream)

    copy_peer_async = forwards("hipMemcpyPeerAsync")  # (dst, dst_ordinal, src, src_ordinal, nbytes, stream)

    def can_access_peer(self, ordinal: int, peer: int) -> bool:
        return bool(self._out("hipDeviceCanAccessPeer", c_int, ordinal, peer))

    def enable_peer_access(self, peer: int) -> None:
        code = self._raw("hipDeviceEnablePeerAccess", peer, 0)
        if code not in (SUCCESS, hipErrorPeerAccessAlreadyEnabled):
            raise self._error("hipDeviceEnablePeerAccess", code)

    # --- kernels ----------------------------------------------------------------------------------------------

    def load_kernels(self) -> int:
        with self._lock:
            if self._code_object is None:
                self._hiprtc = self._hiprtc or Hiprtc(self.tracker)
                self._code_object = self._hiprtc.compile(kernels.HIP_SOURCE)
        return self._out("hipModuleLoadData", c_void_p, self._code_object)

    def load_program(self, program: Program) -> int:
        """A tensor_kernels program, compiled by hiprtc with its options (--offload-arch for the MFMA kernel)."""
        with self._lock:
            if program.name not in self._programs:
                self._hiprtc = self._hiprtc or Hiprtc(self.tracker)
                self._programs[program.name] = self._hiprtc.compile(program.text, program.hip_options)
        return self._out("hipModuleLoadData", c_void_p, self._programs[program.name])

    unload_kernels = forwards("hipModuleUnload")

    def kernel(self, module: int, name: str) -> int:
        return self._out("hipModuleGetFunction", c_void_p, module, name.encode())

    def launch(self, function: int, grid: int, block: int, args: Sequence[ctypes._SimpleCData], stream: int) -> None:
        self._call("hipModuleLaunchKernel", function, grid, 1, 1, block, 1, 1, 0, stream, kernel_params(args), None)

    def release(self, ordinal: int) -> None:
        """HIP's per-device context cannot be given back short of hipDeviceReset, which would also tear down what
        this process has on the device; it holds no allocation of ours."""

    def close(self) -> None:
        """HIP keeps its per-device contexts for the life of the process; what the tests took is already freed."""
