"""Fake libamdhip64.so and libhiprtc.so over SimNode, with HIP's conventions: hipSetDevice per thread, error names
returned (not written to an out-parameter), device ordinals for peer calls, and a runtime compiler whose code
object is what hipModuleLoadData accepts."""

from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Any

from gpudiag.active import kernels, tensor_kernels
from tests.support.fakes.gpu_sim import FakeLibrary, SimDevice, SimRuntime, out, value

hipSuccess = 0
hipErrorInvalidValue = 1
hipErrorOutOfMemory = 2
hipErrorNoDevice = 100
hipErrorInvalidDevice = 101
hipErrorInvalidImage = 200
hipErrorInvalidHandle = 400
hipErrorNotFound = 500
hipErrorPeerAccessAlreadyEnabled = 704
HIPRTC_SUCCESS = 0
HIPRTC_ERROR_COMPILATION = 6

ERROR_NAMES = {
    hipErrorInvalidValue: b"hipErrorInvalidValue",
    hipErrorOutOfMemory: b"hipErrorOutOfMemory",
    hipErrorNoDevice: b"hipErrorNoDevice",
    hipErrorInvalidDevice: b"hipErrorInvalidDevice",
    hipErrorInvalidImage: b"hipErrorInvalidImage",
    hipErrorInvalidHandle: b"hipErrorInvalidHandle",
    hipErrorNotFound: b"hipErrorNotFound",
}


def code_object(source: bytes) -> bytes:
    """What the fake hiprtc emits for `source` (binary, with a NUL inside like a real ELF code object)."""
    return b"\x7fELF\0fake-amdgcn:" + hashlib.sha256(source).hexdigest().encode()


class FakeHip(SimRuntime):
    def __init__(self, devices: list[SimDevice], init_result: int = hipSuccess):
        super().__init__(devices)
        self.init_result = init_result
        self.compiled: dict[bytes, bytes] = {}  # code object → the source it came from (set by FakeHiprtc)
        self._current = threading.local()
        self._module_source: dict[int, bytes] = {}
        self._functions_by_handle: dict[int, str] = {}

    def _device(self) -> int:
        return getattr(self._current, "device", 0)

    def c_hipInit(self, flags: Any) -> int:
        return self.init_result

    def c_hipRuntimeGetVersion(self, version: Any) -> int:
        out(version).value = 60241134  # ROCm 6.2
        return hipSuccess

    def c_hipGetErrorName(self, code: Any) -> bytes:
        return ERROR_NAMES.get(value(code), b"hipErrorUnknown")

    def c_hipGetErrorString(self, code: Any) -> bytes:
        return b"fake HIP error text"

    def c_hipGetDeviceCount(self, count: Any) -> int:
        out(count).value = len(self.node.devices)
        return hipSuccess

    def c_hipDeviceGetPCIBusId(self, buffer: Any, length: Any, device: Any) -> int:
        if not 0 <= value(device) < len(self.node.devices):
            return hipErrorInvalidDevice
        buffer.value = self.node.devices[value(device)].pci_bus_id.encode()
        return hipSuccess

    def c_hipSetDevice(self, device: Any) -> int:
        if not 0 <= value(device) < len(self.node.devices):
            return hipErrorInvalidDevice
        self._current.device = value(device)
        return hipSuccess

    # --- memory, streams, events, modules: as CUDA has them (gpu_sim.SimRuntime) ----------------------------------

    c_hipMemGetInfo = SimRuntime.mem_get_info
    c_hipMalloc = SimRuntime.malloc
    c_hipFree = SimRuntime.free
    c_hipHostMalloc = SimRuntime.alloc_host
    c_hipHostFree = SimRuntime.free_host
    c_hipStreamCreateWithFlags = SimRuntime.stream_create
    c_hipStreamDestroy = SimRuntime.stream_destroy
    c_hipStreamSynchronize = SimRuntime.stream_synchronize
    c_hipEventCreateWithFlags = SimRuntime.event_create
    c_hipEventDestroy = SimRuntime.event_destroy
    c_hipEventRecord = SimRuntime.event_record
    c_hipEventSynchronize = SimRuntime.event_synchronize
    c_hipEventElapsedTime = SimRuntime.event_elapsed
    c_hipDeviceCanAccessPeer = SimRuntime.can_access_peer
    c_hipModuleUnload = SimRuntime.module_unload

    def c_hipMemcpyAsync(self, dst: Any, src: Any, nbytes: Any, kind: Any, stream: Any) -> int:
        copy = {1: self.node.copy_h2d, 2: self.node.copy_d2h}.get(value(kind))
        if copy is None:
            return hipErrorInvalidValue
        copy(value(dst), value(src), value(nbytes), value(stream))
        return hipSuccess

    def c_hipMemcpyPeerAsync(self, dst: Any, dst_device: Any, src: Any, src_device: Any, nbytes: Any,
                             stream: Any) -> int:
        self.node.copy_peer(value(dst), value(src), value(nbytes), value(stream))
        return hipSuccess

    def c_hipDeviceEnablePeerAccess(self, peer: Any, flags: Any) -> int:
        pair = (self._device(), value(peer))
        if pair in self.node.peer_access:
            return hipErrorPeerAccessAlreadyEnabled
        self.node.peer_access.add(pair)
        return hipSuccess

    def c_hipModuleLoadData(self, module: Any, image: Any) -> int:
        source = self.compiled.get(value(image))
        if source is None:
            return hipErrorInvalidImage
        handle = self.node.handle()
        self.node.modules.add(handle)
        self._module_source[handle] = source
        out(module).value = handle
        return hipSuccess

    def c_hipModuleGetFunction(self, function: Any, module: Any, name: Any) -> int:
        name = value(name).decode()
        if f'extern "C" __global__ void {name}(' not in self._module_source.get(value(module), b"").decode():
            return hipErrorNotFound
        handle = self.node.handle()
        self._functions_by_handle[handle] = name
        out(function).value = handle
        return hipSuccess

    def c_hipModuleLaunchKernel(self, function: Any, gx: Any, gy: Any, gz: Any, bx: Any, by: Any, bz: Any,
                                shared: Any, stream: Any, params: Any, extra: Any) -> int:
        self.node.run_kernel(self._functions_by_handle[value(function)], params, value(gx), value(bx), value(stream))
        return hipSuccess


class FakeHiprtc(FakeLibrary):
    """Compiles by recording the source; a source without the three kernels fails with a compiler log."""

    def __init__(self, hip: FakeHip):
        super().__init__()
        self.hip = hip
        self.log = b""
        self._programs: dict[int, bytes] = {}
        self._code: dict[int, bytes] = {}
        self.options: list[tuple[str, ...]] = []  # the options of every compile, in order

    def c_hiprtcGetErrorString(self, code: Any) -> bytes:
        return b"HIPRTC_ERROR_COMPILATION" if value(code) == HIPRTC_ERROR_COMPILATION else b"HIPRTC_ERROR_UNKNOWN"

    def c_hiprtcCreateProgram(self, program: Any, source: Any, name: Any, headers: Any, sources: Any,
                              names: Any) -> int:
        handle = self.hip.node.handle()
        self._programs[handle] = value(source)
        out(program).value = handle
        return HIPRTC_SUCCESS

    def c_hiprtcCompileProgram(self, program: Any, count: Any, options: Any) -> int:
        source = self._programs[value(program)]
        self.options.append(tuple(options[i].decode() for i in range(value(count))))
        wanted = next((p.kernels for p in (tensor_kernels.hip_mfma("gfx942"), tensor_kernels.HIP_COPY)
                       if p.text.encode() == source), kernels.NAMES)
        missing = [n for n in wanted if f'extern "C" __global__ void {n}('.encode() not in source]
        if missing:
            self.log = f"error: kernels missing: {', '.join(missing)}\n".encode()
            return HIPRTC_ERROR_COMPILATION
        self._code[value(program)] = code_object(source)
        self.hip.compiled[self._code[value(program)]] = source
        return HIPRTC_SUCCESS

    def c_hiprtcGetProgramLogSize(self, program: Any, size: Any) -> int:
        out(size).value = len(self.log) + 1
        return HIPRTC_SUCCESS

    def c_hiprtcGetProgramLog(self, program: Any, buffer: Any) -> int:
        ctypes.memmove(buffer, self.log + b"\0", len(self.log) + 1)
        return HIPRTC_SUCCESS

    def c_hiprtcGetCodeSize(self, program: Any, size: Any) -> int:
        out(size).value = len(self._code[value(program)])
        return HIPRTC_SUCCESS

    def c_hiprtcGetCode(self, program: Any, buffer: Any) -> int:
        code = self._code[value(program)]
        ctypes.memmove(buffer, code, len(code))
        return HIPRTC_SUCCESS

    def c_hiprtcDestroyProgram(self, program: Any) -> int:
        self._programs.pop(out(program).value, None)
        return HIPRTC_SUCCESS
