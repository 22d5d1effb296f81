"""The NVIDIA backend: NVML through nvidia-ml-py (`pynvml`).

pynvml is imported inside `open()`, not at module import: it costs ~15 ms and `gpudiag check` must stay faster than
`nvidia-smi -q`. Every NVML call goes through `call.NvmlCall` (tracker naming, error mapping).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from gpudiag.model import BackendInfo, DeviceSnapshot, ErrorKind, PeerLink, ProbeError, Vendor
from gpudiag.probe import deadline
from gpudiag.probe.base import DeviceLost
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml import call as nvml_call
from gpudiag.probe.nvml.call import NvmlCall
from gpudiag.probe.nvml.constants import BoardConstants
from gpudiag.probe.nvml.device import read_device
from gpudiag.probe.nvml.fields import DEVICE_FIELDS, device_fields
from gpudiag.probe.nvml.links import probe_pair

log = logging.getLogger(__name__)

# Why nvmlInit failed, in words an operator can act on (the return codes are in nvml.h / docs/vendor-api.md §0).
_INIT_FAILURES = {
    nvml_call.LIBRARY_NOT_FOUND: (
        ErrorKind.NOT_FOUND,
        "libnvidia-ml.so.1 could not be loaded: the NVIDIA driver's user-space libraries are not installed "
        "or not on the library path",
    ),
    nvml_call.DRIVER_NOT_LOADED: (
        ErrorKind.NOT_FOUND,
        "the NVIDIA driver is not running: the nvidia kernel module is not loaded",
    ),
    nvml_call.LIB_RM_VERSION_MISMATCH: (
        ErrorKind.ERROR,
        "NVML and the nvidia kernel module are different versions (kernel/user-space driver mismatch, usually a "
        "driver upgraded without a reboot or module reload)",
    ),
    nvml_call.NO_PERMISSION: (
        ErrorKind.NO_PERMISSION,
        "no permission to open the NVIDIA device nodes (/dev/nvidiactl, /dev/nvidia*)",
    ),
}


class NvmlBackend:
    name = "nvml"
    vendor = Vendor.NVIDIA

    def __init__(self, link_errors: bool = True, power_samples: bool = False,
                 library: Optional[Callable[[], Any]] = None) -> None:
        self.link_errors = link_errors  # read the NVLink error counters (the bulk of the probe's time)
        # Ask for the mean power since the previous probe (power_samples.py): only where the collector probes again
        # and again (top, serve); a one-shot check makes no call for it.
        self.power_samples = power_samples
        self._samples = None
        if power_samples:
            from gpudiag.probe.nvml.power_samples import PowerSamples

            self._samples = PowerSamples()
        self._nvml: Any = None  # the pynvml module, once imported
        # What makes the library the backend calls instead of pynvml (raising ImportError as importing pynvml
        # would): a stand-in answering from the NVML-ahead process's reads in a cold check's vendor child
        # (ahead_library.AheadNvml).
        self._library = library
        self._initialised = False
        self._count = 0
        self._handles: dict[int, Any] = {}  # device index → NVML handle, for probe_peers
        self._lost: set[int] = set()  # devices found lost; NVML may answer them with UNKNOWN from then on
        self._fields = DEVICE_FIELDS  # the field batch this driver understands (set on open)
        self._constants = BoardConstants()  # max clocks and temperature thresholds, per GPU (constants.py)

    def open(self, tracker: CallTracker) -> BackendInfo:
        info = BackendInfo(name=self.name, vendor=self.vendor)
        try:
            self._nvml = _import_pynvml() if self._library is None else self._library()
        except ImportError as exc:
            info.error = ProbeError("nvml.import", ErrorKind.NOT_FOUND,
                                    f"nvidia-ml-py (pynvml) is not installed: {exc}")
            return info
        errors: list[ProbeError] = []
        call = NvmlCall(self._nvml, tracker, errors)
        try:
            _, code, message = call.attempt("nvmlInit")
            if code is not None:
                kind, reason = _INIT_FAILURES.get(code, (nvml_call.error_kind(code), "NVML could not be initialised"))
                info.error = ProbeError("nvml.nvmlInit", kind, f"{reason} ({message})")
                return info
            self._initialised = True
            info.driver_version = call("nvmlSystemGetDriverVersion")
            self._fields = device_fields(info.driver_version)
            info.runtime_version = _cuda_version(call("nvmlSystemGetCudaDriverVersion_v2"))
            info.library_version = call("nvmlSystemGetNVMLVersion")
            count = call("nvmlDeviceGetCount")
        except DeviceLost as exc:  # a GPU lost during enumeration fails the whole library
            errors.append(ProbeError("nvml.open", ErrorKind.GPU_LOST, str(exc)))
            count = None
        if count is None:
            info.error = errors[-1] if errors else ProbeError("nvml.nvmlDeviceGetCount", ErrorKind.ERROR,
                                                              "NVML did not report a device count")
            self.close()  # the collector closes only backends it uses, and retries a failed open: undo the init
            return info
        for error in errors:  # the library works; a version it could not report is left None
            log.warning("%s: %s", error.source, error.message)
        self._count = info.device_count = count
        info.available = True
        return info

    def device_count(self) -> int:
        return self._count

    def probe_device(self, index: int, tracker: CallTracker) -> DeviceSnapshot:
        """Raises DeviceLost when the GPU is lost (GPU_IS_LOST, RESET_REQUIRED, or UNKNOWN after a loss); the
        identity read before that is in `tracker.partial`."""
        device = DeviceSnapshot(index=index, vendor=self.vendor, source=self.name)
        tracker.partial = device
        call = NvmlCall(self._nvml, tracker, device.errors, lost_before=index in self._lost,
                        constants=self._constants)
        try:
            handle, code, message = call.attempt("nvmlDeviceGetHandleByIndex", index)
            if code is not None:  # e.g. NO_PERMISSION on /dev/nvidiaN inside a container
                call.record("nvml.nvmlDeviceGetHandleByIndex", code, message)
                device.reachable = False
                return device
            self._handles[index] = handle
            read_device(call, handle, device, self.link_errors, self._fields, self._samples)
        except DeviceLost:
            self._lost.add(index)
            self._handles.pop(index, None)
            self._constants.forget(index)
            if self._samples is not None:
                self._samples.forget(index)
            raise
        self._lost.discard(index)  # answered in full: a GPU recovered by a reset is no longer suspect
        return device

    def probe_peers(self, devices: list[DeviceSnapshot], tracker: CallTracker) -> list[PeerLink]:
        """One PeerLink per pair of reachable NVIDIA devices; a failed pair call is recorded on the first GPU."""
        mine = [d for d in devices if d.vendor == self.vendor and d.reachable and d.index in self._handles]
        mine.sort(key=lambda d: d.index)
        peers: list[PeerLink] = []
        for position, a in enumerate(mine):
            for b in mine[position + 1:]:
                call = NvmlCall(self._nvml, tracker, a.errors)
                try:
                    peers.append(probe_pair(call, self._handles[a.index], self._handles[b.index], a, b))
                except DeviceLost as exc:
                    a.errors.append(ProbeError(f"nvml.peer[{a.index},{b.index}]", ErrorKind.GPU_LOST, str(exc)))
                    peers.append(PeerLink(gpu_a=a.index, gpu_b=b.index))
        return peers

    def close(self) -> None:
        """nvmlShutdown, unless a call is still hung inside NVML: shutting down under it can hang as well."""
        if not self._initialised:
            return
        if deadline.abandoned_calls():
            log.debug("leaving NVML initialised: %d call(s) still hung in it", deadline.abandoned_calls())
            return
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)
        self._initialised = False
        self._handles.clear()
        self._constants.clear()
        if self._samples is not None:
            self._samples.clear()


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def _cuda_version(value: Optional[int]) -> Optional[str]:
    """12040 → "12.4" (major = v // 1000, minor = (v % 1000) // 10; docs/vendor-api.md §1)."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"
