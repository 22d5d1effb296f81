"""The one place where a pynvml call is made and its outcome classified.

Every NVML read of the backend goes through `NvmlCall`, which
- names the call in the CallTracker, so that a call that never returns can be named by the deadline runner;
- turns "this device/driver does not have it" (NOT_SUPPORTED, FUNCTION_NOT_FOUND) into None, silently: a health
  tool reports an absent value as absent, never as 0 and never as a failure;
- turns a lost GPU into `DeviceLost`, which ends that device's probe;
- records any other failure (no permission, timeout, …) as a ProbeError on the device and returns None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from gpudiag.model import DeviceSnapshot, ErrorKind, ProbeError
from gpudiag.probe.base import DeviceLost
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.codes import (  # noqa: F401 - this module's names to its users
    ABSENT,
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    LIBRARY_NOT_FOUND,
    LIB_RM_VERSION_MISMATCH,
    LOST,
    NOT_FOUND,
    NOT_SUPPORTED,
    NO_PERMISSION,
    PYTHON_ERROR,
    RESET_REQUIRED,
    SUCCESS,
    TIMEOUT,
    UNKNOWN,
)

if TYPE_CHECKING:
    from gpudiag.probe.nvml.constants import BoardConstants

_LOST_MEANING = {
    GPU_IS_LOST: "the GPU is lost: it fell off the bus or stopped responding",
    RESET_REQUIRED: "the GPU needs a reset before it can be used again",
    UNKNOWN: "the GPU still does not answer since it was lost",
}


def error_kind(code: int) -> ErrorKind:
    if code == NO_PERMISSION:
        return ErrorKind.NO_PERMISSION
    if code == TIMEOUT:
        return ErrorKind.TIMEOUT
    if code in LOST:
        return ErrorKind.GPU_LOST
    return ErrorKind.ERROR


class NvmlCall:
    """Calls pynvml functions for one device (or one pair of devices) and classifies what comes back."""

    def __init__(self, nvml: Any, tracker: CallTracker, errors: list[ProbeError], lost_before: bool = False,
                 constants: Optional["BoardConstants"] = None):
        self.nvml = nvml
        self.tracker = tracker
        self.errors = errors
        # The device was found lost by an earlier probe (the exporter keeps the library open): after a GPU is lost,
        # NVML may answer later calls with NVML_ERROR_UNKNOWN instead of GPU_IS_LOST.
        self.lost_before = lost_before
        self.constants = constants  # board constants kept by a collector that stays open (constants.py)

    def __call__(self, function: str, *args: Any) -> Any:
        """`pynvml.<function>(*args)`, or None when it is unsupported or failed (a failure is recorded)."""
        value, code, message = self.attempt(function, *args)
        if code is not None and code not in ABSENT:
            self.record(f"nvml.{function}", code, message)
        return value

    def constant(self, device: DeviceSnapshot, function: str, handle: Any, *args: Any) -> Any:
        """Like calling `function`, for a board constant (constants.CONSTANT_CALLS) of `device`, whose index and
        UUID are read: the answer kept from an earlier probe when there is one."""
        if self.constants is None:
            return self(function, handle, *args)
        return self.constants.read(self, device.index, device.uuid, function, handle, *args)

    def attempt(self, function: str, *args: Any) -> tuple[Any, Optional[int], str]:
        """`(value, None, "")` on success, `(None, code, message)` on an NVML error; nothing is recorded, so the
        caller decides what a code means (e.g. INVALID_ARGUMENT past the last NVLink). Raises DeviceLost."""
        nvml = self.nvml
        self.tracker.enter(f"nvml.{function}")
        try:
            return getattr(nvml, function)(*args), None, ""
        except nvml.NVMLError as exc:
            code = exc.value
            self.raise_if_lost(function, code)
            return None, code, f"{function}: {exc} ({code_name(nvml, code)})"
        except nvml.NVMLLibraryMismatchError:
            # pynvml's unversioned wrappers (e.g. nvmlDeviceGetComputeRunningProcesses) turn FUNCTION_NOT_FOUND
            # into this exception: the driver predates the versioned symbol.
            return None, FUNCTION_NOT_FOUND, f"{function}: function not found in this driver"
        except Exception as exc:  # noqa: BLE001 - reported as a probe error by the caller, never swallowed
            return None, PYTHON_ERROR, f"{function}: {type(exc).__name__}: {exc}"
        finally:
            self.tracker.leave()

    def raise_if_lost(self, function: str, code: int) -> None:
        if code in LOST or (code == UNKNOWN and self.lost_before):
            self.lost_before = True
            raise DeviceLost(f"{_LOST_MEANING.get(code, _LOST_MEANING[UNKNOWN])} "
                             f"({code_name(self.nvml, code)} from {function})")

    def record(self, source: str, code: int, message: str) -> None:
        self.errors.append(ProbeError(source, error_kind(code), message))


_code_names: Optional[dict[int, str]] = None


def code_name(nvml: Any, code: int) -> str:
    global _code_names
    if _code_names is None:  # built whole, then published: device threads may race here harmlessly
        names: dict[int, str] = {}
        for name in sorted(dir(nvml)):
            if name.startswith("NVML_ERROR_"):
                names.setdefault(getattr(nvml, name), name)
        _code_names = names
    return _code_names.get(code, f"NVML return code {code}")
