"""Fake libamdhip64.so and libhiprtc.so over SimNode, with HIP's conventions: hipSetDevice per thread, error names
returned (not written to an out-parameter), device ordinals for peer calls, and a runtime compiler whose code
object is what hipModuleLoadData accepts."""

from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Any

from gpudiag.active import kernels
from tests.fakes.gpu_sim import FakeLibrary, SimDevice, SimNode, SimStream, out, value

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


class FakeHip(FakeLibrary):
    def __init__(self, devices: list[SimDevice], init_result: int = hipSuccess):
        super().__init__()
        self.node = SimNode(devices)
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

    def c_hipMemGetInfo(self, free: Any, total: Any) -> int:
        out(free).value = self.node.free_bytes(self._device())
        out(total).value = self.node.devices[self._device()].total_bytes
        return hipSuccess

    def c_hipMalloc(self, pointer: Any, nbytes: Any) -> int:
        address = self.node.alloc(self._device(), value(nbytes))
        if address is None:
            return hipErrorOutOfMemory
        out(pointer).value = address
        return hipSuccess

    def c_hipFree(self, pointer: Any) -> int:
        return hipSuccess if self.node.free(value(pointer)) else hipErrorInvalidValue

    def c_hipHostMalloc(self, pointer: Any, nbytes: Any, flags: Any) -> int:
        out(pointer).value = self.node.alloc_host(value(nbytes))
        return hipSuccess

    def c_hipHostFree(self, pointer: Any) -> int:
        return hipSuccess if self.node.free_host(value(pointer)) else hipErrorInvalidValue

    def c_hipStreamCreateWithFlags(self, stream: Any, flags: Any) -> int:
        handle = self.node.handle()
        self.node.streams[handle] = SimStream(self._device())
        out(stream).value = handle
        return hipSuccess

    def c_hipStreamDestroy(self, stream: Any) -> int:
        return hipSuccess if self.node.streams.pop(value(stream), None) else hipErrorInvalidHandle

    def c_hipStreamSynchronize(self, stream: Any) -> int:
        return hipSuccess if value(stream) in self.node.streams else hipErrorInvalidHandle

    def c_hipEventCreateWithFlags(self, event: Any, flags: Any) -> int:
        handle = self.node.handle()
        self.node.events[handle] = None
        out(event).value = handle
        return hipSuccess

    def c_hipEventDestroy(self, event: Any) -> int:
        if value(event) not in self.node.events:
            return hipErrorInvalidHandle
        del self.node.events[value(event)]
        return hipSuccess

    def c_hipEventRecord(self, event: Any, stream: Any) -> int:
        self.node.events[value(event)] = self.node.streams[value(stream)].clock
        return hipSuccess

    def c_hipEventSynchronize(self, event: Any) -> int:
        return hipSuccess if value(event) in self.node.events else hipErrorInvalidHandle

    def c_hipEventElapsedTime(self, milliseconds: Any, start: Any, end: Any) -> int:
        began, ended = self.node.events.get(value(start)), self.node.events.get(value(end))
        if began is None or ended is None:
            return hipErrorInvalidHandle
        out(milliseconds).value = (ended - began) * 1000
        return hipSuccess

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

    def c_hipDeviceCanAccessPeer(self, result: Any, device: Any, peer: Any) -> int:
        out(result).value = int(value(peer) in self.node.devices[value(device)].peer_gbps)
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

    def c_hipModuleUnload(self, module: Any) -> int:
        if value(module) not in self.node.modules:
            return hipErrorInvalidHandle
        self.node.modules.discard(value(module))
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

    def leaks(self) -> dict[str, int]:
        held = {"device_memory": len(self.node.allocations), "pinned_memory": len(self.node.host),
                "streams": len(self.node.streams), "events": len(self.node.events), "modules": len(self.node.modules)}
        return {k: v for k, v in held.items() if v}


class FakeHiprtc(FakeLibrary):
    """Compiles by recording the source; a source without the three kernels fails with a compiler log."""

    def __init__(self, hip: FakeHip):
        super().__init__()
        self.hip = hip
        self.log = b""
        self._programs: dict[int, bytes] = {}
        self._code: dict[int, bytes] = {}

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
        missing = [n for n in kernels.NAMES if f'extern "C" __global__ void {n}('.encode() not in source]
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
