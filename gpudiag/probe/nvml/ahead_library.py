"""A stand-in for the pynvml module that the vendor child's NVIDIA backend calls in a cold check: it answers from the
NVML-ahead process's reads (ahead.py, handed out by ahead_answers.AheadAnswers) and imports pynvml only to make a
read the ahead process did not.

Why a stand-in, not pynvml wrapped: pynvml's module body alone took 8.3-10.4 ms of Python on the lab H100
(tests/fixtures/h100/recorded/lab-2026-12-06/check_vs_nvidia_smi.txt, lab-2026-12-06b/thread_overlap/), its imports
more, which the vendor child spent beside its imports of the model and the probe; and it opened NVML itself too
(nvmlInit 12 ms, the GPU's first handle 11 ms there, lab-2026-12-07/ahead_ab/ahead1.txt), though the ahead process
made every read. With the answers made plain (frames.py), the vendor child needs neither: on the lab it imported no
pynvml and made no NVML call (lab-2026-12-07b/README.md).

What the backend gets, as from pynvml:
- its constants, and whether it has a function or a struct type: the ahead process's image of its pynvml
  (frames.module_image);
- each call: the outcome of the ahead process's read with the same key: its value; its error, raised as this
  module's NVMLError with pynvml's code and text; a struct passed by reference, filled;
- a GPU's handle: a token for its index (Handle), which the keys name the GPU by;
- a struct of a pynvml type: a StructOut, passed by reference with `byref`, filled by the call's answer.

A read the ahead process did not make is made here, through pynvml, imported and initialised then (once): a token
becomes the GPU's real handle, a StructOut a real struct (copied into the StructOut after the call), and pynvml's
errors are raised again as this module's, with the same code and text. With no image of the ahead process's pynvml
(it ended before sending one), the stand-in reads this process's own.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from gpudiag.probe.nvml.ahead_answers import AheadAnswers
from gpudiag.probe.nvml.frames import HANDLE, StructArg, hashable, module_image, plain


class NVMLError(Exception):
    """pynvml.NVMLError as the backend reads it: the NVML return code as `value`, pynvml's text for it as str()."""

    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(value)
        self.value = value
        self.text = text or f"NVML Error with code {value}"

    def __str__(self) -> str:
        return self.text


class NVMLLibraryMismatchError(Exception):
    """pynvml.NVMLLibraryMismatchError: an unversioned wrapper found no versioned symbol in this driver."""


class Handle:
    """A GPU's handle: its index (the ahead process holds the driver's handle, and this one the real one only once
    a read is made here)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"Handle({self.index})"


class StructOut:
    """A struct of a pynvml type, made by the backend to be filled by a call: the version it sets in it, then the
    fields the call filled, as attributes."""

    def __init__(self, type_name: str) -> None:
        self.__dict__["_type_name"] = type_name
        self.version = None


class _Reference:
    __slots__ = ("struct",)

    def __init__(self, struct: StructOut) -> None:
        self.struct = struct


class AheadNvml:
    """The pynvml module as the backend calls it, answered from `answers` (see the module's text). Raises
    ImportError, as the backend's own `import pynvml`, where it has no image of pynvml and cannot import it."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def __init__(self, answers: AheadAnswers) -> None:
        self._answers = answers
        self._lock = threading.Lock()
        self._pynvml: Any = None  # imported once a read is made here (or there is no image of it)
        self._initialised_here = False
        self._handles_here: dict[int, Any] = {}
        image = answers.module()
        if image is None:
            image = module_image(self._imported())
        self._constants, self._names = image

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._constants:
            return self._constants[name]
        if name not in self._names:
            raise AttributeError(f"pynvml has no attribute {name!r}")
        if name.startswith("c_nvml"):
            return lambda: StructOut(name)
        return lambda *args: self._call(name, args)

    def __dir__(self) -> list:
        return sorted({*self._constants, *self._names})  # call.code_name reads the NVML_ERROR_* names off the module

    @staticmethod
    def byref(struct: StructOut) -> _Reference:
        return _Reference(struct)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        outcome = self._answers.take((HANDLE, (index,), ()))
        if outcome is None:
            self._handle_here(index)
        else:
            self._answer(HANDLE, (), outcome)
        return Handle(index)

    def nvmlShutdown(self) -> None:
        """Shuts down what was initialised here; the ahead process's NVML is its own."""
        with self._lock:
            if not self._initialised_here:
                return
            self._initialised_here = False
            self._handles_here.clear()
            self._here(self._pynvml.nvmlShutdown)

    def _call(self, name: str, args: tuple) -> Any:
        key = self._key(name, args)
        outcome = None if key is None else self._answers.take(key)
        if outcome is None:
            return self._made_here(name, args)
        return self._answer(name, args, outcome)

    def _key(self, name: str, args: tuple) -> Optional[tuple]:
        """(function, the GPUs' indices, the other arguments), as ahead.py keys its reads; None for a call it does
        not make (an argument it does not pass)."""
        rest = list(args)
        indices = []
        while rest and isinstance(rest[0], Handle):
            indices.append(rest.pop(0).index)
        for position, arg in enumerate(rest):
            if isinstance(arg, _Reference):
                rest[position] = StructArg(arg.struct._type_name, arg.struct.version)
            elif not isinstance(arg, (int, str, list)):
                return None
        return name, tuple(indices), hashable(tuple(rest))

    @staticmethod
    def _answer(name: str, args: tuple, outcome: tuple) -> Any:
        kind = outcome[0]
        if kind == "value":
            return outcome[1]
        if kind == "filled":
            for arg in args:
                if isinstance(arg, _Reference):
                    arg.struct.__dict__.update(vars(outcome[2]))
            return outcome[1]
        if kind == "handle":
            return None
        if kind == "error":
            raise NVMLError(outcome[1], outcome[2])
        raise NVMLLibraryMismatchError(f"{name}: not in this driver (the NVML-ahead process's answer)")

    # -- a read made here ----------------------------------------------------------------------------------------

    def _made_here(self, name: str, args: tuple) -> Any:
        nvml = self._initialised()
        if name == "nvmlInit":
            return None  # initialised just now, once
        structs = {}
        passed = []
        for arg in args:
            if isinstance(arg, Handle):
                arg = self._handle_here(arg.index)
            elif isinstance(arg, _Reference):
                real = structs[id(arg)] = getattr(nvml, arg.struct._type_name)()
                if arg.struct.version is not None:
                    real.version = arg.struct.version
                arg = nvml.byref(real)
            passed.append(arg)
        value = self._here(getattr(nvml, name), *passed)
        for arg in args:
            if isinstance(arg, _Reference):
                arg.struct.__dict__.update(vars(plain(structs[id(arg)])))
        return value

    def _handle_here(self, index: int) -> Any:
        nvml = self._initialised()
        if index not in self._handles_here:
            self._handles_here[index] = self._here(nvml.nvmlDeviceGetHandleByIndex, index)
        return self._handles_here[index]

    def _imported(self) -> Any:
        if self._pynvml is None:
            import pynvml

            self._pynvml = pynvml
            self._answers.library_here = True
        return self._pynvml

    def _initialised(self) -> Any:
        with self._lock:
            nvml = self._imported()
            if not self._initialised_here:
                self._here(nvml.nvmlInit)
                self._initialised_here = True
            return nvml

    def _here(self, function: Any, *args: Any) -> Any:
        """pynvml's `function(*args)`, its errors raised again as this module's."""
        nvml = self._pynvml
        try:
            return function(*args)
        except nvml.NVMLError as exc:
            raise NVMLError(exc.value, str(exc)) from None
        except nvml.NVMLLibraryMismatchError as exc:
            raise NVMLLibraryMismatchError(str(exc)) from None
