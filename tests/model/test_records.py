"""gpudiag.model.records.dataclass behaves as the standard library's dataclass (its repr, equality and hashing are
shared functions instead of compiled ones): each class shape gpudiag uses, defined once with each decorator, compared
on the same values; and the model's own classes keep their dataclass nature."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Optional

import pytest

from gpudiag.model import DeviceSnapshot, KernelEvent, NodeSnapshot, ProbeError, Vendor, from_dict, to_dict
from gpudiag.model.common import ErrorKind
from gpudiag.model.records import dataclass as shared


def shapes(decorate):
    """The shapes of class gpudiag declares, under `decorate`."""

    @decorate
    class Plain:
        name: str
        count: int = 0
        tags: list = field(default_factory=list)
        hidden: Optional[str] = field(default=None, repr=False)
        ignored: float = field(default=0.0, compare=False)

    @decorate(frozen=True)
    class Frozen:
        key: str
        limit: float = 1.5
        note: str = field(default="", compare=False)
        unhashed: int = field(default=0, hash=False)
        derived: str = field(default="", init=False)
        items: tuple = field(default_factory=tuple)

        def __post_init__(self) -> None:
            object.__setattr__(self, "derived", self.key.upper())  # how a frozen class sets what it derives

    @decorate
    class Child(Plain):
        extra: bool = False

    @decorate
    class OwnMethods:
        value: int = 0

        def __repr__(self) -> str:
            return "mine"

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    @decorate
    class Holder:
        inner: object = None

    return Plain, Frozen, Child, OwnMethods, Holder


STANDARD, SHARED = shapes(dataclasses.dataclass), shapes(shared)


def build(classes):
    plain, frozen, child, own, holder = classes
    looped = holder()
    looped.inner = looped  # a dataclass that holds itself: repr says "..."
    return [
        plain("a", 2, ["x"], "secret", 0.5),
        plain("a", 2, ["x"], "other", 9.0),
        plain("b"),
        frozen("k"),
        frozen("k", note="n", unhashed=3),
        frozen("k", 2.0),
        child("a", 2, ["x"]),
        child("a", extra=True),
        own(1),
        own(2),
        looped,
    ]


def test_repr_equality_and_hashing_are_the_standard_ones():
    standard, mine = build(STANDARD), build(SHARED)
    assert [repr(o) for o in mine] == [repr(o) for o in standard]
    assert [[a == b for b in mine] for a in mine] == [[a == b for b in standard] for a in standard]
    assert [[a != b for b in mine] for a in mine] == [[a != b for b in standard] for a in standard]
    for ours, theirs in zip(mine, standard):
        hashable = type(theirs).__hash__ is not None
        assert (type(ours).__hash__ is not None) == hashable, type(theirs).__name__
        if hashable and dataclasses.is_dataclass(theirs) and type(theirs).__dataclass_params__.frozen:
            assert hash(ours) == hash(theirs)


def test_the_rest_is_the_standard_dataclass():
    plain, frozen, child, *_ = SHARED
    assert [f.name for f in dataclasses.fields(child)] == ["name", "count", "tags", "hidden", "ignored", "extra"]
    item = plain("a")
    assert dataclasses.replace(item, count=3).count == 3 and dataclasses.asdict(item)["tags"] == []
    assert plain("a").tags is not plain("a").tags  # default_factory per instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen("k").limit = 2.0
    with pytest.raises(TypeError):
        plain()  # the generated __init__ still says what is missing
    assert plain("a").__eq__(object()) is NotImplemented
    assert repr(plain("a")).startswith("shapes.<locals>.Plain(")


def failure(action) -> str:
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - the type and message are compared
        return f"{type(exc).__name__}: {exc}"
    return "allowed"


def test_a_frozen_class_refuses_what_the_standard_one_refuses():
    def attempts(classes):
        frozen = classes[1]
        item = frozen("k")

        class Sub(frozen):  # a plain subclass: only the fields are frozen there
            pass

        sub = Sub("s")
        return [item.derived, sub.derived, failure(lambda: setattr(item, "key", "x")),
                failure(lambda: setattr(item, "derived", "x")), failure(lambda: setattr(item, "other", 1)),
                failure(lambda: delattr(item, "key")), failure(lambda: delattr(item, "other")),
                failure(lambda: setattr(sub, "key", "x")), failure(lambda: setattr(sub, "other", 1)),
                failure(lambda: delattr(sub, "key")), failure(lambda: delattr(sub, "other")),
                dataclasses.replace(item, key="z").derived, frozen.__dataclass_params__.frozen,
                frozen.__dataclass_params__.eq, frozen.__dataclass_params__.repr, hash(item) == hash(frozen("k"))]

    assert attempts(SHARED) == attempts(STANDARD)
    assert SHARED[1].__setattr__.__code__.co_filename != "<string>"  # shared, not compiled for the class


def test_init_binds_as_the_standard_one_and_compiles_nothing_for_a_call_it_can_bind(monkeypatch):
    from gpudiag.model import records

    def bound(classes):
        plain, frozen, child, own, holder = classes
        made = [plain("a"), plain("a", 1, ["t"], None, 0.0), plain(name="n", ignored=2.0), child("c", extra=True),
                frozen("k", items=(1,)), frozen("k", 2.0, note="n"), own(), holder(inner=1)]
        assert made[0].tags is not plain("b").tags  # a default_factory called for each instance
        return [repr(item) for item in made] + [made[4].derived, made[5].__hash__ is not None]

    def refused(classes):
        plain, frozen, child, *_ = classes
        return [failure(lambda: plain()), failure(lambda: plain("a", 1, [], None, 0.0, "extra")),
                failure(lambda: plain("a", nope=1)), failure(lambda: plain("a", name="b")), failure(lambda: frozen()),
                failure(lambda: child(extra=True))]

    compiled = []
    real = records._standard
    monkeypatch.setattr(records, "_standard", lambda cls, **options: compiled.append(cls) or real(cls, **options))
    fresh = shapes(shared)  # classes nothing has instantiated yet
    compiled.clear()
    assert bound(fresh) == bound(STANDARD)
    assert compiled == []  # no __init__ written for a call the shared one binds
    assert refused(fresh) == refused(STANDARD)  # the standard __init__'s own TypeError, word for word
    assert compiled and fresh[0].__init__.__qualname__ == STANDARD[0].__init__.__qualname__


def test_a_frozen_class_must_set_every_field_in_init():
    with pytest.raises(TypeError, match="must set every field in __init__; later has no default"):
        @shared(frozen=True)
        class Unset:
            key: str
            later: int = field(init=False)


def test_the_model_round_trips_and_compares_as_before():
    node = NodeSnapshot(hostname="h", collected_at="t", gpudiag_version="v",
                        devices=[DeviceSnapshot(index=0, vendor=Vendor.NVIDIA, source="nvml")],
                        errors=[ProbeError("nvml.x", ErrorKind.ERROR, "m")])
    again = from_dict(NodeSnapshot, to_dict(node))
    assert again == node and again is not node and repr(again) == repr(node)
    event = KernelEvent(vendor=Vendor.NVIDIA, kind="xid", message="NVRM: Xid")
    assert event == dataclasses.replace(event) and event != dataclasses.replace(event, kind="sxid")
    with pytest.raises(TypeError):
        hash(node)  # a mutable dataclass is unhashable, as before


def test_every_dataclass_has_a_docstring_of_its_own():
    """dataclass writes a docstring for a class without one from inspect.signature(cls), at import: CperSection's
    cost its module 2.7 ms of a cold check's imports (0.4 ms with one), in each process that imports the model."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "gpudiag"
    missing = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            names = {ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
            if names & {"dataclass", "dataclasses.dataclass"} and ast.get_docstring(node) is None:
                missing.append(f"{path.relative_to(package.parent)}: {node.name}")
    assert not missing, missing
