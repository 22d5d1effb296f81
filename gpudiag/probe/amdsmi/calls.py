"""Calling the amdsmi Python wrapper: status codes to gpudiag's outcomes, and its "N/A" values to None.

The wrapper raises `AmdSmiLibraryException` (with `.get_error_code()`) for every non-zero status of the C library
and replaces unsupported numeric values with the string "N/A" (docs/vendor-api.md §0), so a value is only trusted after
a type check.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

from gpudiag.model import ErrorKind, ProbeError
from gpudiag.probe.base import DeviceLost
from gpudiag.probe.deadline import CallTracker

# amdsmi_status_t values (amdsmi.amdsmi_wrapper.AMDSMI_STATUS_*; 7.0.2 has no Python enum for them).
STATUS_INVAL = 1
STATUS_NOT_SUPPORTED = 2
STATUS_NOT_YET_IMPLEMENTED = 3
STATUS_API_FAILED = 7
STATUS_TIMEOUT = 8
STATUS_RETRY = 9
STATUS_NO_PERM = 10
STATUS_NOT_FOUND = 31  # the handle is no longer in the library's device list
STATUS_DRIVER_NOT_LOADED = 34
STATUS_UNEXPECTED_DATA = 43
STATUS_AMDGPU_RESTART_ERR = 54  # amdgpu failed to come back from a reset

_UNSUPPORTED = {STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED}
_DEVICE_GONE = {STATUS_NOT_FOUND, STATUS_DRIVER_NOT_LOADED, STATUS_AMDGPU_RESTART_ERR}


def describe(smi: ModuleType, exc: BaseException) -> tuple[ErrorKind, str]:
    """The error kind and a one-line message for an exception out of the wrapper."""
    if isinstance(exc, smi.AmdSmiLibraryException):
        code = exc.get_error_code()
        text = exc.get_error_info()
        if code in (STATUS_TIMEOUT, STATUS_RETRY):
            return ErrorKind.TIMEOUT, text
        if code == STATUS_NO_PERM:
            return ErrorKind.NO_PERMISSION, text
        if code == STATUS_DRIVER_NOT_LOADED:
            return ErrorKind.NOT_FOUND, text
        if code in _DEVICE_GONE:
            return ErrorKind.GPU_LOST, text
        return ErrorKind.ERROR, text
    # AmdSmiParameterException and the wrapper's own slips (a KeyError on an enum value it does not know).
    return ErrorKind.ERROR, f"{type(exc).__name__}: {exc}".replace("\n", " ")


class AmdsmiCaller:
    """Calls `amdsmi.<name>(*args)` with the tracker naming the call. Returns the value, or None when the device
    does not support it (or this wrapper version lacks the function); any other failure is appended to `errors`
    and also gives None. A device that is gone raises `DeviceLost`: the rest of its probe is pointless."""

    def __init__(self, smi: ModuleType, tracker: CallTracker, errors: list[ProbeError]):
        self.smi = smi
        self.tracker = tracker
        self.errors = errors

    def __call__(self, name: str, *args: Any) -> Any:
        return self.answer(name, *args)[0]

    def answer(self, name: str, *args: Any, tolerate: frozenset[int] = frozenset()) -> tuple[Any, int]:
        """(value, 0), or (None, the status code) when the call did not answer. Statuses in `tolerate` are what
        this call answers on a platform that lacks the value (e.g. INVAL from xgmi_error on MI300): like
        NOT_SUPPORTED they are not probe errors, and the caller decides what they mean."""
        function = getattr(self.smi, name, None)
        if function is None:  # e.g. amdsmi_get_gpu_bad_page_threshold is new in 7.0 (docs/vendor-api.md §12)
            return None, STATUS_NOT_YET_IMPLEMENTED
        source = f"amdsmi.{name}"
        for attempt in (1, 2):
            self.tracker.enter(source)
            try:
                return function(*args), 0
            except self.smi.AmdSmiLibraryException as exc:
                code = exc.get_error_code()
                if code in _UNSUPPORTED or code in tolerate:
                    return None, code
                if code == STATUS_RETRY and attempt == 1:
                    continue  # the library asks for exactly this
                kind, message = describe(self.smi, exc)
                if code in _DEVICE_GONE:
                    raise DeviceLost(f"{source}: {message}") from exc
                self.errors.append(ProbeError(source, kind, message))
                return None, code
            except Exception as exc:  # noqa: BLE001 - a wrapper slip on one field must not end the probe
                self.errors.append(ProbeError(source, *describe(self.smi, exc)))
                return None, -1
            finally:
                self.tracker.leave()
        return None, STATUS_RETRY  # not reached: the second attempt returns or records


def number(value: Any) -> Optional[float]:
    """An int or float from the wrapper; its "N/A" strings (and bools, which are not quantities) → None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def integer(value: Any) -> Optional[int]:
    found = number(value)
    return int(found) if found is not None else None


def text(value: Any) -> Optional[str]:
    """A string from the wrapper; "", "N/A" and non-strings → None."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    return None if value in ("", "N/A") else value


def get(record: Any, key: str) -> Any:
    """`record[key]` when the call returned a dict (it returns None when unsupported or failed)."""
    return record.get(key) if isinstance(record, dict) else None
