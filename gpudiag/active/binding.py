"""The ctypes plumbing CUDA and HIP share: loading the library, typing each symbol once, naming the call in
progress (so that a call hung in the driver is reported by name), and turning a non-zero return code into an
exception that names the call and the vendor's error."""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int
from typing import Any, Callable, Iterable

from gpudiag.active.runtime import GpuCallError, RuntimeUnavailable
from gpudiag.model import ErrorKind
from gpudiag.probe.deadline import CallTracker

SUCCESS = 0  # CUDA_SUCCESS, hipSuccess, HIPRTC_SUCCESS


def load_library(candidates: Iterable[str], source: str, what: str) -> ctypes.CDLL:
    """The first of `candidates` that the dynamic loader opens; none → RuntimeUnavailable naming them all."""
    failures = []
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            failures.append(str(exc))
    raise RuntimeUnavailable(source, ErrorKind.NOT_FOUND, f"{what} could not be loaded ({'; '.join(failures)})")


def forwards(symbol: str) -> Callable[..., None]:
    """A runtime method that is exactly one C call, its arguments passed through and its status checked."""
    def method(self: "Binding", *args: object) -> None:
        self._call(symbol, *args)

    method.__name__ = method.__qualname__ = symbol
    return method


def returns(symbol: str, ctype: Any, *fixed: object) -> Callable[..., Any]:
    """A runtime method that calls `symbol(&result, *args, *fixed)` and returns the result's value."""
    def method(self: "Binding", *args: object) -> Any:
        return self._out(symbol, ctype, *args, *fixed)

    method.__name__ = method.__qualname__ = symbol
    return method


class Binding:
    """One vendor library. Subclasses give `name` ("cuda" | "hip"), `_signatures` (symbol → argtypes; symbols
    return an int status unless `_restypes` says otherwise) and `_error(symbol, code, detail)`."""

    name: str
    _signatures: dict[str, tuple]
    _restypes: dict[str, Any] = {}

    def __init__(self, lib: ctypes.CDLL, library_name: str, tracker: CallTracker):
        self._lib = lib
        self._library_name = library_name
        self.tracker = tracker
        self._functions: dict[str, Any] = {}

    def _function(self, symbol: str) -> Any:
        function = self._functions.get(symbol)
        if function is None:
            try:
                function = getattr(self._lib, symbol)
            except AttributeError:
                raise GpuCallError(self.name, symbol, -1, "SYMBOL_NOT_FOUND",
                                   f"{self._library_name} does not export it (a driver older than this call)") from None
            function.argtypes = self._signatures[symbol]
            function.restype = self._restypes.get(symbol, c_int)
            self._functions[symbol] = function
        return function

    def _has(self, symbol: str) -> bool:
        return hasattr(self._lib, symbol)

    def _raw(self, symbol: str, *args: object) -> Any:
        function = self._function(symbol)
        self.tracker.enter(f"{self.name}.{symbol}")
        try:
            return function(*args)
        finally:
            self.tracker.leave()

    def _call(self, symbol: str, *args: object, detail: str = "") -> None:
        code = self._raw(symbol, *args)
        if code != SUCCESS:
            raise self._error(symbol, code, detail)

    def _out(self, symbol: str, ctype: Any, *args: object, detail: str = "") -> Any:
        """Call a function whose first parameter receives the result; return that result's value."""
        result = ctype()
        self._call(symbol, byref(result), *args, detail=detail)
        return result.value

    def _error(self, symbol: str, code: int, detail: str = "") -> GpuCallError:
        raise NotImplementedError
