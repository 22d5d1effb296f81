"""A fake libcuda.so.1 over SimNode: the driver-API symbols gpudiag.active.cuda uses, with cuda.h's return codes
and calling conventions (out-parameters, CUresult, primary contexts per thread)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from gpudiag.active import kernels
from tests.fakes.gpu_sim import FakeLibrary, SimDevice, SimNode, SimStream, out, value

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_SYSTEM_NOT_READY = 802

ERROR_NAMES = {
    CUDA_ERROR_INVALID_VALUE: (b"CUDA_ERROR_INVALID_VALUE", b"invalid argument"),
    CUDA_ERROR_OUT_OF_MEMORY: (b"CUDA_ERROR_OUT_OF_MEMORY", b"out of memory"),
    CUDA_ERROR_NOT_INITIALIZED: (b"CUDA_ERROR_NOT_INITIALIZED", b"initialization error"),
    CUDA_ERROR_NO_DEVICE: (b"CUDA_ERROR_NO_DEVICE", b"no CUDA-capable device is detected"),
    CUDA_ERROR_INVALID_DEVICE: (b"CUDA_ERROR_INVALID_DEVICE", b"invalid device ordinal"),
    CUDA_ERROR_INVALID_CONTEXT: (b"CUDA_ERROR_INVALID_CONTEXT", b"invalid device context"),
    CUDA_ERROR_INVALID_PTX: (b"CUDA_ERROR_INVALID_PTX", b"a PTX JIT compilation failed"),
    CUDA_ERROR_INVALID_HANDLE: (b"CUDA_ERROR_INVALID_HANDLE", b"invalid resource handle"),
    CUDA_ERROR_NOT_FOUND: (b"CUDA_ERROR_NOT_FOUND", b"named symbol not found"),
    CUDA_ERROR_ILLEGAL_ADDRESS: (b"CUDA_ERROR_ILLEGAL_ADDRESS", b"an illegal memory access was encountered"),
    CUDA_ERROR_SYSTEM_NOT_READY: (b"CUDA_ERROR_SYSTEM_NOT_READY", b"system not yet initialized"),
}


class FakeCuda(FakeLibrary):
    def __init__(self, devices: list[SimDevice], init_result: int = CUDA_SUCCESS):
        super().__init__()
        self.node = SimNode(devices)
        self.init_result = init_result
        self.initialised = False
        self.retained: dict[int, int] = {}  # device → primary context refcount
        self.jit_log = b""  # written to the JIT error log when cuModuleLoadDataEx is made to fail
        self.loaded_ptx: list[bytes] = []
        self._context_of: dict[int, int] = {}  # context handle → device
        self._current = threading.local()
        self._functions_by_handle: dict[int, str] = {}
        self._ptx_of: dict[int, bytes] = {}

    # --- helpers ----------------------------------------------------------------------------------------------

    def _device_of_current(self) -> int:
        context = getattr(self._current, "context", None)
        if context is None:
            raise LookupError("no current context")
        return self._context_of[context]

    # --- init, errors, devices ----------------------------------------------------------------------------------

    def c_cuInit(self, flags: Any) -> int:
        self.initialised = self.init_result == CUDA_SUCCESS
        return self.init_result

    def c_cuDriverGetVersion(self, version: Any) -> int:
        out(version).value = 12040
        return CUDA_SUCCESS

    def c_cuGetErrorName(self, code: Any, name: Any) -> int:
        known = ERROR_NAMES.get(value(code))
        if known is None:
            return CUDA_ERROR_INVALID_VALUE
        out(name).value = known[0]
        return CUDA_SUCCESS

    def c_cuGetErrorString(self, code: Any, text: Any) -> int:
        known = ERROR_NAMES.get(value(code))
        if known is None:
            return CUDA_ERROR_INVALID_VALUE
        out(text).value = known[1]
        return CUDA_SUCCESS

    def c_cuDeviceGetCount(self, count: Any) -> int:
        out(count).value = len(self.node.devices)
        return CUDA_SUCCESS

    def c_cuDeviceGet(self, device: Any, ordinal: Any) -> int:
        if not 0 <= value(ordinal) < len(self.node.devices):
            return CUDA_ERROR_INVALID_DEVICE
        out(device).value = value(ordinal)
        return CUDA_SUCCESS

    def c_cuDeviceGetPCIBusId(self, buffer: Any, length: Any, device: Any) -> int:
        buffer.value = self.node.devices[value(device)].pci_bus_id.encode()[: value(length) - 1]
        return CUDA_SUCCESS

    def c_cuDeviceGetAttribute(self, result: Any, attribute: Any, device: Any) -> int:
        if value(attribute) != 16:  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            return CUDA_ERROR_INVALID_VALUE
        out(result).value = self.node.devices[value(device)].multiprocessors
        return CUDA_SUCCESS

    # --- contexts -----------------------------------------------------------------------------------------------

    def c_cuDevicePrimaryCtxRetain(self, context: Any, device: Any) -> int:
        device = value(device)
        self.retained[device] = self.retained.get(device, 0) + 1
        handle = 0x10000 + device
        self._context_of[handle] = device
        out(context).value = handle
        return CUDA_SUCCESS

    def c_cuDevicePrimaryCtxRelease_v2(self, device: Any) -> int:
        device = value(device)
        if not self.retained.get(device):
            return CUDA_ERROR_INVALID_CONTEXT
        self.retained[device] -= 1
        return CUDA_SUCCESS

    def c_cuCtxSetCurrent(self, context: Any) -> int:
        if value(context) not in self._context_of:
            return CUDA_ERROR_INVALID_CONTEXT
        self._current.context = value(context)
        return CUDA_SUCCESS

    def c_cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        device = self._device_of_current()
        out(free).value = self.node.free_bytes(device)
        out(total).value = self.node.devices[device].total_bytes
        return CUDA_SUCCESS

    # --- memory ------------------------------------------------------------------------------------------------

    def c_cuMemAlloc_v2(self, pointer: Any, nbytes: Any) -> int:
        address = self.node.alloc(self._device_of_current(), value(nbytes))
        if address is None:
            return CUDA_ERROR_OUT_OF_MEMORY
        out(pointer).value = address
        return CUDA_SUCCESS

    def c_cuMemFree_v2(self, pointer: Any) -> int:
        return CUDA_SUCCESS if self.node.free(value(pointer)) else CUDA_ERROR_INVALID_VALUE

    def c_cuMemAllocHost_v2(self, pointer: Any, nbytes: Any) -> int:
        out(pointer).value = self.node.alloc_host(value(nbytes))
        return CUDA_SUCCESS

    def c_cuMemFreeHost(self, pointer: Any) -> int:
        return CUDA_SUCCESS if self.node.free_host(value(pointer)) else CUDA_ERROR_INVALID_VALUE

    # --- streams and events ---------------------------------------------------------------------------------------

    def c_cuStreamCreate(self, stream: Any, flags: Any) -> int:
        handle = self.node.handle()
        self.node.streams[handle] = SimStream(self._device_of_current())
        out(stream).value = handle
        return CUDA_SUCCESS

    def c_cuStreamDestroy_v2(self, stream: Any) -> int:
        return CUDA_SUCCESS if self.node.streams.pop(value(stream), None) else CUDA_ERROR_INVALID_HANDLE

    def c_cuStreamSynchronize(self, stream: Any) -> int:
        return CUDA_SUCCESS if value(stream) in self.node.streams else CUDA_ERROR_INVALID_HANDLE

    def c_cuEventCreate(self, event: Any, flags: Any) -> int:
        handle = self.node.handle()
        self.node.events[handle] = None
        out(event).value = handle
        return CUDA_SUCCESS

    def c_cuEventDestroy_v2(self, event: Any) -> int:
        if value(event) not in self.node.events:
            return CUDA_ERROR_INVALID_HANDLE
        del self.node.events[value(event)]
        return CUDA_SUCCESS

    def c_cuEventRecord(self, event: Any, stream: Any) -> int:
        self.node.events[value(event)] = self.node.streams[value(stream)].clock
        return CUDA_SUCCESS

    def c_cuEventSynchronize(self, event: Any) -> int:
        return CUDA_SUCCESS if value(event) in self.node.events else CUDA_ERROR_INVALID_HANDLE

    def c_cuEventElapsedTime(self, milliseconds: Any, start: Any, end: Any) -> int:
        began, ended = self.node.events.get(value(start)), self.node.events.get(value(end))
        if began is None or ended is None:
            return CUDA_ERROR_INVALID_HANDLE
        out(milliseconds).value = (ended - began) * 1000
        return CUDA_SUCCESS

    # --- copies ---------------------------------------------------------------------------------------------------

    def c_cuMemcpyHtoDAsync_v2(self, dst: Any, src: Any, nbytes: Any, stream: Any) -> int:
        self.node.copy_h2d(value(dst), value(src), value(nbytes), value(stream))
        return CUDA_SUCCESS

    def c_cuMemcpyDtoHAsync_v2(self, dst: Any, src: Any, nbytes: Any, stream: Any) -> int:
        self.node.copy_d2h(value(dst), value(src), value(nbytes), value(stream))
        return CUDA_SUCCESS

    def c_cuMemcpyPeerAsync(self, dst: Any, dst_context: Any, src: Any, src_context: Any, nbytes: Any,
                            stream: Any) -> int:
        self.node.copy_peer(value(dst), value(src), value(nbytes), value(stream))
        return CUDA_SUCCESS

    def c_cuDeviceCanAccessPeer(self, result: Any, device: Any, peer: Any) -> int:
        out(result).value = int(value(peer) in self.node.devices[value(device)].peer_gbps)
        return CUDA_SUCCESS

    def c_cuCtxEnablePeerAccess(self, peer_context: Any, flags: Any) -> int:
        pair = (self._device_of_current(), self._context_of[value(peer_context)])
        if pair in self.node.peer_access:
            return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        self.node.peer_access.add(pair)
        return CUDA_SUCCESS

    # --- modules and kernels ------------------------------------------------------------------------------------

    def c_cuModuleLoadDataEx(self, module: Any, image: Any, count: Any, options: Any, option_values: Any) -> int:
        ptx = value(image)
        self.loaded_ptx.append(ptx)
        if self.jit_log:  # a JIT refusal: write the log where CU_JIT_ERROR_LOG_BUFFER (5) points
            for i in range(value(count)):
                if options[i] == 5:
                    ctypes.memmove(option_values[i], self.jit_log + b"\0", len(self.jit_log) + 1)
            return CUDA_ERROR_INVALID_PTX
        handle = self.node.handle()
        self.node.modules.add(handle)
        self._ptx_of[handle] = ptx
        out(module).value = handle
        return CUDA_SUCCESS

    def c_cuModuleUnload(self, module: Any) -> int:
        if value(module) not in self.node.modules:
            return CUDA_ERROR_INVALID_HANDLE
        self.node.modules.discard(value(module))
        return CUDA_SUCCESS

    def c_cuModuleGetFunction(self, function: Any, module: Any, name: Any) -> int:
        name = value(name).decode()
        if value(module) not in self.node.modules or f".entry {name}(" not in self._ptx_of[value(module)].decode():
            return CUDA_ERROR_NOT_FOUND
        handle = self.node.handle()
        self._functions_by_handle[handle] = name
        out(function).value = handle
        return CUDA_SUCCESS

    def c_cuLaunchKernel(self, function: Any, gx: Any, gy: Any, gz: Any, bx: Any, by: Any, bz: Any, shared: Any,
                         stream: Any, params: Any, extra: Any) -> int:
        name = self._functions_by_handle[value(function)]
        assert kernels.NAMES.count(name) == 1 and value(gy) == value(gz) == value(by) == value(bz) == 1
        self.node.run_kernel(name, params, value(gx), value(bx), value(stream))
        return CUDA_SUCCESS

    # --- what a test asserts after a run ---------------------------------------------------------------------------

    def leaks(self) -> dict[str, Any]:
        """What is still held: device memory, pinned memory, streams, events, modules, retained contexts."""
        held = {
            "device_memory": len(self.node.allocations), "pinned_memory": len(self.node.host),
            "streams": len(self.node.streams), "events": len(self.node.events), "modules": len(self.node.modules),
            "contexts": sum(self.retained.values()),
        }
        return {k: v for k, v in held.items() if v}
