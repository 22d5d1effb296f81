"""`dataclass`: the standard library's `dataclasses.dataclass`, quicker to define a class with.

Python's dataclass writes each method it adds as source text and compiles it when the class is defined
(dataclasses._create_fn): __init__, __repr__, __eq__, and for a frozen class __hash__, __setattr__ and __delattr__.
gpudiag defines about a hundred dataclasses, and a cold `gpudiag check` defines most of them: compiling their methods
was 40 % of its imports (issue 36, item 9). Here only __init__ (and a frozen class's __setattr__ and __delattr__) are
still compiled; __repr__, __eq__ and a frozen class's __hash__ are shared functions over the class's fields that
behave as the generated ones do: the same text, the same comparison (a tuple of the compared fields, only between
instances of the very same class, NotImplemented otherwise), the same hash, and a non-frozen class is unhashable. A
method the class defines itself is kept, as dataclass keeps it. The other options (order, unsafe_hash, slots, an
explicit repr= or eq=) go to dataclass unchanged.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, Callable

_OWN_OPTIONS = {"frozen", "init", "kw_only", "match_args"}
_standard = dataclasses.dataclass


def dataclass(cls: Any = None, /, **options: Any) -> Any:
    """`@dataclass` or `@dataclass(frozen=True)`, as dataclasses.dataclass (see the module's docstring)."""
    def wrap(cls: type) -> type:
        if set(options) - _OWN_OPTIONS:
            return _standard(cls, **options)
        explicit_hash = "__hash__" in cls.__dict__ and not (cls.__dict__["__hash__"] is None and "__eq__" in cls.__dict__)
        cls = _standard(cls, repr=False, eq=False, **options)
        _share_methods(cls, frozen=options.get("frozen", False), explicit_hash=explicit_hash)
        return cls

    return wrap if cls is None else wrap(cls)


def _share_methods(cls: type, frozen: bool, explicit_hash: bool) -> None:
    fields = dataclasses.fields(cls)
    shown = tuple(f.name for f in fields if f.repr)
    compared = tuple(f.name for f in fields if f.compare)
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return f"{self.__class__.__qualname__}(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in shown) + ")"

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, name) for name in compared) == tuple(getattr(other, name) for name in compared)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, name) for name in hashed))

    _add(cls, "__repr__", __repr__)
    _add(cls, "__eq__", __eq__)
    if not explicit_hash:
        # dataclass's rule for eq=True without unsafe_hash: a frozen class hashes its fields, any other is unhashable
        if frozen:
            _add(cls, "__hash__", __hash__, replace=True)
        else:
            cls.__hash__ = None  # type: ignore[assignment]


def _add(cls: type, name: str, method: Callable, replace: bool = False) -> None:
    if name in cls.__dict__ and not replace:
        return  # the class's own method stays, as dataclass leaves it
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, method)
