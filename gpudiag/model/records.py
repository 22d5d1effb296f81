"""`dataclass`: the standard library's `dataclasses.dataclass`, quicker to define a class with.

Python's dataclass writes each method it adds as source text and compiles it when the class is defined
(dataclasses._create_fn): __init__, __repr__, __eq__, and for a frozen class __hash__, __setattr__ and __delattr__.
gpudiag defines about a hundred dataclasses, and a cold `gpudiag check` defines most of them: compiling their methods
was 40 % of its imports (issue 36, item 9), and compiling each __init__ at its first instance cost a cold check's
vendor child 11 of them after its imports (issue 36, item 9, sixth session). Here the methods are shared functions
over the class's fields that behave as the generated ones do: __init__ binds and sets the same fields (dataclass
writes the class's own only for a call the shared one cannot bind, and raises its TypeError), the same text, the same
comparison (a tuple of the compared fields, only between instances of the very same class, NotImplemented
otherwise), the same hash, a non-frozen class unhashable, and a frozen one refusing to set or delete an attribute
(FrozenInstanceError) once __init__ has set its fields. A method the class defines itself is kept, as dataclass
keeps it; `__dataclass_params__` says what the class is (repr, eq, frozen). The other options (order, unsafe_hash,
slots, an explicit repr= or eq=) go to dataclass unchanged, and so does a frozen class that defines __setattr__ or
__delattr__ itself or derives from a frozen dataclass.

A frozen class here must set every field in __init__ (each is an __init__ argument or has a default): its shared
__setattr__ lets __init__ set each field once and refuses everything after, so a field __init__ left unset could
be set once later. Defining such a class raises TypeError.
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
        own = cls.__dict__
        explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
        frozen = bool(options.get("frozen"))
        share_frozen = frozen and not ({"__setattr__", "__delattr__"} & set(cls.__dict__)) and not any(
            getattr(getattr(base, "__dataclass_params__", None), "frozen", False) for base in cls.__mro__[1:])
        standard = {**options, "repr": False, "eq": False, "frozen": frozen and not share_frozen}
        lazy_init = standard.get("init", True) and "__init__" not in own and (share_frozen or not frozen)
        cls = _standard(cls, **{**standard, "init": standard.get("init", True) and not lazy_init})
        if lazy_init:
            _init_on_first_use(cls, {**standard, "init": True})
        _share_methods(cls, frozen=frozen, explicit_hash=explicit_hash)
        if share_frozen:
            _share_frozen(cls)
        for name in ("init", "repr", "eq", "frozen"):  # what the class is, as dataclass would have recorded it
            setattr(cls.__dataclass_params__, name, True if name != "frozen" else frozen)
        return cls

    return wrap if cls is None else wrap(cls)


def _init_on_first_use(cls: type, options: dict) -> None:
    """An __init__ shared by the classes, over the class's fields, that sets what dataclass's written __init__ sets
    (each field from its argument, its default or its default_factory, in field order; init=False fields that have a
    default too) and calls __post_init__. Nothing is compiled for a call it can bind: a cold check's vendor child
    compiled 11 of them in its GPU's probe, after its imports, on the check's longest chain (issue 36, item 9). A call
    it cannot bind (too many arguments, an unknown or doubled keyword, a required argument missing) goes to the
    standard __init__, which dataclass writes then and which raises its own TypeError; so does every call of a class
    with an InitVar (an argument that is not a field), which this does not handle."""
    fields = dataclasses.fields(cls)
    initialised = [f for f in fields if f.init]
    positional = tuple(f for f in initialised if not f.kw_only)
    accepted = frozenset(f.name for f in initialised)
    required = tuple(f.name for f in initialised
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    post_init = hasattr(cls, "__post_init__")
    init_vars = any(f._field_type is dataclasses._FIELD_INITVAR for f in cls.__dataclass_fields__.values())
    written: list = []

    def standard(self: Any, *args: Any, **kwargs: Any) -> None:
        if not written:  # dataclass writes it for a bare subclass, whose fields are the class's own
            params = cls.__dataclass_params__
            frozen, params.frozen = params.frozen, options["frozen"]  # as when cls was made (a shared frozen class)
            try:
                bare = type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                                  "__doc__": cls.__doc__ or cls.__name__})
                written.append(_standard(bare, **options).__dict__["__init__"])
            finally:
                params.frozen = frozen
        written[0](self, *args, **kwargs)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if init_vars or len(args) > len(positional) or not accepted.issuperset(kwargs):
            return standard(self, *args, **kwargs)
        values = {f.name: value for f, value in zip(positional, args)}
        if kwargs:
            if not values.keys().isdisjoint(kwargs):
                return standard(self, *args, **kwargs)
            values.update(kwargs)
        if not all(name in values for name in required):
            return standard(self, *args, **kwargs)
        for f in fields:
            if f.name in values:
                setattr(self, f.name, values[f.name])
            elif f.default is not dataclasses.MISSING:
                setattr(self, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                setattr(self, f.name, f.default_factory())
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = __init__  # type: ignore[misc]


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


def _share_frozen(cls: type) -> None:
    """A frozen class's __setattr__ and __delattr__ (dataclasses._frozen_get_del_attr's rule: on an instance of the
    class itself nothing may be set or deleted, on a subclass's no field), letting __init__ set each field once."""
    fields = dataclasses.fields(cls)
    unset = [f.name for f in fields if not f.init and f.default is dataclasses.MISSING
             and f.default_factory is dataclasses.MISSING]
    if unset:
        raise TypeError(f"{cls.__qualname__}: a frozen gpudiag.model.records.dataclass must set every field in "
                        f"__init__; {', '.join(unset)} has no default")
    names = frozenset(f.name for f in fields)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in names and name not in self.__dict__:
            object.__setattr__(self, name, value)  # __init__ setting the field
        elif type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        else:
            super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    _add(cls, "__setattr__", __setattr__)
    _add(cls, "__delattr__", __delattr__)


def _add(cls: type, name: str, method: Callable, replace: bool = False) -> None:
    if name in cls.__dict__ and not replace:
        return  # the class's own method stays, as dataclass leaves it
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, method)
