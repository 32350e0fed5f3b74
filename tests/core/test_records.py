"""nvtopy.records: a class made by its ``dataclass`` behaves as ``dataclasses.dataclass`` makes it.

Each case defines the same class twice, with the real decorator and with nvtopy's, and compares what
users of the class see: construction (positional, keyword, defaults, factories, keyword-only,
``__post_init__``), equality and hashing, repr, frozenness, ``replace``/``fields``/``asdict``, copy and
pickle, and the errors at definition.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import typing
from typing import ClassVar

import pytest

from nvtopy import records

pytestmark = pytest.mark.timeout(30)

DECORATORS = {"dataclasses": dataclasses.dataclass, "records": records.dataclass}
Alias = ClassVar  # a ClassVar by another name: dataclasses finds it through the module's namespace


def _define(decorator, **options):
    @decorator(**options)
    class Point:
        """A point, with every kind of field."""

        x: int
        y: int | None = None
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)
        note: str = dataclasses.field(default="", compare=False, repr=False)
        made: list[int] = dataclasses.field(default_factory=list, init=False, compare=False)
        LIMIT: ClassVar[int] = 9

    return Point


def _pair(**options):
    return _define(dataclasses.dataclass, **options), _define(records.dataclass, **options)


def _seen(obj):
    return (
        [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)],
        repr(obj).split("(", 1)[1],
    )


@pytest.mark.parametrize("options", [{"frozen": True, "slots": True}, {"frozen": True}, {}, {"slots": True}])
def test_construction_equality_repr_as_dataclasses(options):
    real, fast = _pair(**options)
    calls = [((1,), {}), ((1, 2), {}), ((), {"x": 3, "tags": ("a",)}), ((4, None, ("b",), "n"), {})]
    for args, kwargs in calls:
        a, b = real(*args, **kwargs), fast(*args, **kwargs)
        assert _seen(a) == _seen(b)
        assert (a == real(*args, **kwargs)) == (b == fast(*args, **kwargs)) is True
        assert b == fast(*args, **{**kwargs, "note": "other"}) if "note" not in kwargs and len(args) < 4 else True
        assert b != fast(99)
        assert (b == a) is False, "another class: not equal, as between two dataclasses"
        if options.get("frozen"):
            assert hash(b) == hash(fast(*args, **kwargs))
        else:
            assert real.__hash__ is None and fast.__hash__ is None, "mutable with eq: unhashable"
    assert fast.__match_args__ == real.__match_args__
    assert getattr(fast, "__slots__", None) == getattr(real, "__slots__", None)
    assert fast.LIMIT == 9
    with pytest.raises(TypeError):
        fast()  # x is required
    with pytest.raises(TypeError):
        fast(1, made=[1])  # init=False: no such argument


def test_a_factory_gives_each_object_its_own_value():
    _, fast = _pair(frozen=True, slots=True)
    a, b = fast(1), fast(2)
    assert a.made == [] and a.made is not b.made


def test_frozen_as_dataclasses():
    _, fast = _pair(frozen=True, slots=True)
    point = fast(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.y
    assert point.x == 1 and point.y == 2
    assert fast.__dataclass_params__.frozen is True


def test_mutable_as_dataclasses():
    _, fast = _pair(slots=True)
    point = fast(1)
    point.x = 7
    assert point.x == 7


@pytest.mark.parametrize("options", [{"frozen": True, "slots": True}, {"frozen": True}, {}])
def test_dataclasses_functions_copy_and_pickle(options):
    global Pickled  # pickle finds a class by its module's name
    _, Pickled = _pair(**options)
    Pickled.__qualname__ = "Pickled"
    point = Pickled(1, 2, ("a",), "n")
    assert dataclasses.is_dataclass(point)
    assert [f.name for f in dataclasses.fields(point)] == ["x", "y", "tags", "note", "made"]
    assert dataclasses.asdict(point) == {"x": 1, "y": 2, "tags": ("a",), "note": "n", "made": []}
    changed = dataclasses.replace(point, y=3)
    assert (changed.x, changed.y, changed.note) == (1, 3, "n")
    for twin in (copy.copy(point), copy.deepcopy(point), pickle.loads(pickle.dumps(point))):
        assert twin == point and twin.note == "n"


def test_post_init_and_keyword_only_fields():
    seen = []

    for decorator in DECORATORS.values():

        @decorator(frozen=True, slots=True, kw_only=False)
        class Checked:
            """Checks itself."""

            value: int
            _: dataclasses.KW_ONLY
            scale: int = 1

            def __post_init__(self) -> None:
                if self.value < 0:
                    object.__setattr__(self, "value", None)

        seen.append((Checked(-1, scale=2).value, Checked(5).scale, repr(Checked(3, scale=4))))
        with pytest.raises(TypeError):
            Checked(1, 2)  # scale is keyword-only
    assert seen[0] == seen[1] == (None, 1, "test_post_init_and_keyword_only_fields.<locals>.Checked(value=3, scale=4)")


def test_errors_at_definition_as_dataclasses():
    for decorator in DECORATORS.values():
        with pytest.raises(TypeError, match="non-default argument"):

            @decorator(frozen=True)
            class Late:
                a: int = 1
                b: int

        with pytest.raises(ValueError, match="mutable default"):

            @decorator(frozen=True)
            class Shared:
                a: list[int] = []


def test_what_it_does_not_cover_is_the_real_dataclass():
    """A dataclass base, order, or a method of the class's own: dataclasses.dataclass itself, unchanged."""

    @records.dataclass(frozen=True)
    class Base:
        a: int

    @records.dataclass(frozen=True)
    class Child(Base):
        b: int = 0

    @dataclasses.dataclass(frozen=True)
    class RealChild(Base):
        b: int = 0

    @records.dataclass(frozen=True, order=True)
    class Ordered:
        a: int

    @records.dataclass(frozen=True)
    class OwnEq:
        a: int

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    assert Child(1, 2) == Child(1, 2) and Child(1) != Child(2)
    assert RealChild(1, 2).b == 2, "a real frozen dataclass may subclass a frozen record"
    assert Ordered(1) < Ordered(2)
    assert OwnEq(1) == OwnEq(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Child(1).a = 3


def test_init_is_compiled_once_on_first_use():
    @records.dataclass(frozen=True, slots=True)
    class Lazy:
        a: int

    stub = Lazy.__init__
    Lazy(1)
    real = Lazy.__init__
    assert real is not stub
    Lazy(2)
    assert Lazy.__init__ is real


def test_an_undocumented_class_is_documented_as_dataclasses_does():
    docs = []
    for decorator in DECORATORS.values():

        @decorator(frozen=True)
        class Bare:
            a: int
            b: str = "x"
            c: list[int] = dataclasses.field(default_factory=list)

        docs.append(Bare.__doc__)
    assert docs[0] == docs[1] == "Bare(a: 'int', b: 'str' = 'x', c: 'list[int]' = <factory>)"


# --- the fields read without dataclasses (records._fields_made): the same class as dataclasses makes --------

FAST = records._INTERNALS is not None and records._INTERNALS is not False  # Python 3.10-3.12
OPTIONS = [{}, {"slots": True}, {"kw_only": True}, {"match_args": False}, {"slots": True, "kw_only": True}]
_METHODS = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__getstate__", "__setstate__"}


def _plain_class():
    class Plain:
        """Every kind of field but ClassVar, InitVar and KW_ONLY."""

        x: int
        y: int | None = None
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)
        note: str = dataclasses.field(default="", compare=False, repr=False, metadata={"unit": "s"})
        made: list[int] = dataclasses.field(default_factory=list, init=False, compare=False)
        late: int = dataclasses.field(default=3, kw_only=True)
        hidden: int = dataclasses.field(default=0, init=False, hash=False)

    return Plain


def _anatomy(cls):
    """What dataclasses leaves on a class: its fields (every attribute), params, match args, slots, defaults."""
    fields = [
        (
            key,
            f.name,
            f.type,
            f.default,
            f.default_factory,
            f.init,
            f.repr,
            f.hash,
            f.compare,
            dict(f.metadata),
            f.kw_only,
            f._field_type,
        )
        for key, f in cls.__dataclass_fields__.items()
    ]
    params = cls.__dataclass_params__
    names = [n for n in type(params).__slots__ if hasattr(params, n)]
    return (
        fields,
        {n: getattr(params, n) for n in names},
        cls.__dict__.get("__match_args__", "-"),
        cls.__dict__.get("__slots__", "-"),
        {name: _shown(cls.__dict__.get(name, "-")) for name in cls.__dataclass_fields__},
        sorted(set(cls.__dict__) - _METHODS),
        cls.__qualname__,
    )


def _shown(value):
    """A class attribute as compared: a slot's descriptor by its kind (each class has its own)."""
    return "<slot>" if type(value).__name__ == "member_descriptor" else value


@pytest.mark.skipif(not FAST, reason="Python outside 3.10-3.12: records hands every class to dataclasses")
@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) or "plain" for o in OPTIONS])
def test_fields_read_without_dataclasses_are_dataclasses_own(options):
    real = dataclasses.dataclass(_plain_class(), init=False, repr=False, eq=False, frozen=False, **options)
    fast = records._fields_made(_plain_class(), options)
    assert fast is not None, "a plain class: made without dataclasses"
    assert _anatomy(fast) == _anatomy(real)


@pytest.mark.skipif(not FAST, reason="Python outside 3.10-3.12: records hands every class to dataclasses")
def test_a_plain_record_is_made_without_dataclasses_own_processing(monkeypatch):
    called = []
    monkeypatch.setattr(records.dataclasses, "dataclass", lambda *a, **k: called.append(a) or dataclasses.dataclass)
    made = records.dataclass(frozen=True, slots=True)(_plain_class())
    assert called == []
    assert made(1, late=4) == made(1, late=4) and made(1).late == 3 and made.__slots__[0] == "x"


@pytest.mark.parametrize("options", [{"frozen": True, "slots": True}, {"frozen": True}, {}])
def test_a_plain_record_behaves_as_a_dataclass(options):
    real = dataclasses.dataclass(**options)(_plain_class())
    fast = records.dataclass(**options)(_plain_class())
    for args, kwargs in [((1,), {}), ((1, 2, ("a",), "n"), {"late": 5})]:
        a, b = real(*args, **kwargs), fast(*args, **kwargs)
        assert [(f.name, getattr(a, f.name)) for f in dataclasses.fields(a)] == [
            (f.name, getattr(b, f.name)) for f in dataclasses.fields(b)
        ]
        assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert dataclasses.replace(b, x=9).x == 9 and dataclasses.replace(b, x=9).late == b.late
        assert copy.copy(b) == b and copy.deepcopy(b) == b  # pickle: a class of a function's own cannot be
    with pytest.raises(TypeError):
        fast(1, 2, (), "", 5)  # late is keyword-only


def test_what_only_dataclasses_can_say_is_left_to_it():
    """A ClassVar (also by another name or by its module's), an unannotated field(), a mutable default: as there."""

    def classes(decorator):
        @decorator(frozen=True)
        class Aliased:
            a: int
            limit: Alias[int] = 3

        @decorator(frozen=True)
        class Qualified:
            a: int
            limit: typing.ClassVar[int] = 3

        return Aliased, Qualified

    for real, fast in zip(classes(dataclasses.dataclass), classes(records.dataclass), strict=True):
        assert [f.name for f in dataclasses.fields(fast)] == [f.name for f in dataclasses.fields(real)] == ["a"]
        assert fast.__match_args__ == real.__match_args__ == ("a",)
    for decorator in DECORATORS.values():
        with pytest.raises(TypeError, match="is a field but has no type annotation"):

            @decorator(frozen=True)
            class Unannotated:
                a: int
                b = dataclasses.field(default=1)

        with pytest.raises(ValueError, match="mutable default"):

            @decorator(frozen=True)
            class SharedDict:
                a: dict[str, int] = {}

        with pytest.raises(ValueError, match="mutable default"):

            @decorator(frozen=True)
            class SharedField:
                a: set[int] = dataclasses.field(default=set())

