"""A fake libcuda.so.1 over SimNode: the driver-API symbols gpudiag.active.cuda uses, with cuda.h's return codes
and calling conventions (out-parameters, CUresult, primary contexts per thread)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from gpudiag.active import kernels, tensor_kernels
from tests.support.fakes.gpu_sim import SimDevice, SimRuntime, out, value

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


class FakeCuda(SimRuntime):
    def __init__(self, devices: list[SimDevice], init_result: int = CUDA_SUCCESS):
        super().__init__(devices)
        self.init_result = init_result
        self.initialised = False
        self.retained: dict[int, int] = {}  # device → primary context refcount
        self.jit_log = b""  # written to the JIT error log when cuModuleLoadDataEx is made to fail
        self.jit_refuses = b""  # with jit_log: refuse only PTX that contains this (b"": every PTX)
        self.loaded_ptx: list[bytes] = []
        self._context_of: dict[int, int] = {}  # context handle → device
        self._current = threading.local()
        self._functions_by_handle: dict[int, str] = {}
        self._ptx_of: dict[int, bytes] = {}

    # --- helpers ----------------------------------------------------------------------------------------------

    def _device(self) -> int:
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
        sim = self.node.devices[value(device)]
        answers = {16: sim.multiprocessors,  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
                   75: sim.compute_capability[0], 76: sim.compute_capability[1]}  # COMPUTE_CAPABILITY_MAJOR/MINOR
        if value(attribute) not in answers:
            return CUDA_ERROR_INVALID_VALUE
        out(result).value = answers[value(attribute)]
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

    # --- memory, streams, events, modules: as HIP has them (gpu_sim.SimRuntime) ----------------------------------

    c_cuMemGetInfo_v2 = SimRuntime.mem_get_info
    c_cuMemAlloc_v2 = SimRuntime.malloc
    c_cuMemFree_v2 = SimRuntime.free
    c_cuMemAllocHost_v2 = SimRuntime.alloc_host
    c_cuMemFreeHost = SimRuntime.free_host
    c_cuStreamCreate = SimRuntime.stream_create
    c_cuStreamDestroy_v2 = SimRuntime.stream_destroy
    c_cuStreamSynchronize = SimRuntime.stream_synchronize
    c_cuEventCreate = SimRuntime.event_create
    c_cuEventDestroy_v2 = SimRuntime.event_destroy
    c_cuEventRecord = SimRuntime.event_record
    c_cuEventSynchronize = SimRuntime.event_synchronize
    c_cuEventElapsedTime = SimRuntime.event_elapsed
    c_cuDeviceCanAccessPeer = SimRuntime.can_access_peer
    c_cuModuleUnload = SimRuntime.module_unload

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

    def c_cuCtxEnablePeerAccess(self, peer_context: Any, flags: Any) -> int:
        pair = (self._device(), self._context_of[value(peer_context)])
        if pair in self.node.peer_access:
            return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        self.node.peer_access.add(pair)
        return CUDA_SUCCESS

    # --- modules and kernels ------------------------------------------------------------------------------------

    def c_cuModuleLoadDataEx(self, module: Any, image: Any, count: Any, options: Any, option_values: Any) -> int:
        ptx = value(image)
        self.loaded_ptx.append(ptx)
        if self.jit_log and self.jit_refuses in ptx:  # a JIT refusal: the log where CU_JIT_ERROR_LOG_BUFFER (5) points
            for i in range(value(count)):
                if options[i] == 5:
                    ctypes.memmove(option_values[i], self.jit_log + b"\0", len(self.jit_log) + 1)
            return CUDA_ERROR_INVALID_PTX
        handle = self.node.handle()
        self.node.modules.add(handle)
        self._ptx_of[handle] = ptx
        out(module).value = handle
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
        assert (
            kernels.NAMES
            + tensor_kernels.CUDA_MMA.kernels
            + tensor_kernels.CUDA_WGMMA.kernels
            + tensor_kernels.CUDA_COPY.kernels
        ).count(name) == 1 and value(gy) == value(gz) == value(by) == value(bz) == 1
        self.node.run_kernel(name, params, value(gx), value(bx), value(stream))
        return CUDA_SUCCESS

    def leaks(self) -> dict[str, int]:
        """What is still held, retained primary contexts included."""
        held = super().leaks()
        if sum(self.retained.values()):
            held["contexts"] = sum(self.retained.values())
        return held
