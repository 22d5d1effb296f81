"""The JSON round trip of the model: how snapshots are recorded and replayed."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, Union


def to_dict(obj: Any) -> Any:
    """Dataclasses → plain JSON-able values (enums become their values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


class SchemaError(ValueError):
    """A recorded snapshot does not fit the model."""


@functools.lru_cache(maxsize=None)
def _schema(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A dataclass's type hints and init fields. Cached: get_type_hints evaluates every annotation string again on
    each call (0.3 ms), which made a recording with 180,000 kernel-log events take 48 s to load."""
    return typing.get_type_hints(cls, localns=_load_test_types()), frozenset(
        f.name for f in dataclasses.fields(cls) if f.init)


@functools.lru_cache(maxsize=None)
def _load_test_types() -> dict[str, Any]:
    """The load tests' and the screens' types by name, for the annotations that name them where their module is
    imported only when needed (NodeSnapshot.active and .screening: gpudiag/model/node.py)."""
    from gpudiag.model import active, screen

    return {name: kind for module in (active, screen) for name, kind in vars(module).items()
            if dataclasses.is_dataclass(kind)}


def from_dict(cls: Any, data: Any, path: str = "$") -> Any:
    """Plain values → the typed model, guided by the dataclasses' type hints. Unknown keys are rejected so that a
    corrupt or foreign file is reported, not half-read."""
    origin = typing.get_origin(cls)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(cls) if a is not type(None)]
        if data is None:
            return None
        return from_dict(args[0], data, path) if len(args) == 1 else data
    if cls is Any:
        return data
    if dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object for {cls.__name__}")
        hints, names = _schema(cls)
        unknown = set(data) - names
        if unknown:
            raise SchemaError(f"{path}: unknown field(s) {sorted(unknown)} for {cls.__name__}")
        return cls(**{k: from_dict(hints[k], v, f"{path}.{k}") for k, v in data.items()})
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        try:
            return cls(data)
        except ValueError:
            raise SchemaError(f"{path}: {data!r} is not a valid {cls.__name__}") from None
    if origin is list:
        if not isinstance(data, list):
            raise SchemaError(f"{path}: expected a list")
        (item,) = typing.get_args(cls)
        return [from_dict(item, v, f"{path}[{i}]") for i, v in enumerate(data)]
    if origin is tuple:  # tuple[X, ...]: a frozen record's sequence (gpudiag/model/cper.py)
        if not isinstance(data, list):
            raise SchemaError(f"{path}: expected a list")
        item = typing.get_args(cls)[0]
        return tuple(from_dict(item, v, f"{path}[{i}]") for i, v in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object")
        key_type, value_type = typing.get_args(cls)
        return {key_type(k): from_dict(value_type, v, f"{path}.{k}") for k, v in data.items()}
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if cls in (int, float, str, bool) and not isinstance(data, cls):
        raise SchemaError(f"{path}: expected {cls.__name__}, got {type(data).__name__}")
    return data
