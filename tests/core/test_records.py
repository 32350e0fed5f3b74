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
from typing import ClassVar

import pytest

from nvtopy import records

pytestmark = pytest.mark.timeout(30)

DECORATORS = {"dataclasses": dataclasses.dataclass, "records": records.dataclass}


@pytest.fixture(autouse=True, params=["generic", "compiled"])
def init_tier(request, monkeypatch):
    """Every case twice: objects made by the generic ``__init__`` (a class's first ones) and by the compiled one."""
    if request.param == "compiled":
        monkeypatch.setattr(records, "COMPILE_AFTER", 0)
    return request.param


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


def test_init_is_compiled_after_its_first_objects(monkeypatch):
    monkeypatch.setattr(records, "COMPILE_AFTER", 3)

    @records.dataclass(frozen=True, slots=True)
    class Lazy:
        a: int

    generic = Lazy.__init__
    for value in range(3):
        assert Lazy(value).a == value
        assert Lazy.__init__ is generic, "the first objects: no compiling"
    assert Lazy(3).a == 3
    real = Lazy.__init__
    assert real is not generic
    assert real.__code__.co_filename == "<test_init_is_compiled_after_its_first_objects.<locals>.Lazy.__init__>"
    Lazy(4)
    assert Lazy.__init__ is real


@pytest.mark.parametrize("options", [{"frozen": True, "slots": True}, {}])
def test_a_wrong_call_raises_what_dataclasses_raises(options):
    """The generic binding hands a call it does not take as it is to the real ``__init__``: the same error."""
    calls = [
        ((), {}),  # x missing
        ((1, 2, (), "n", "extra"), {}),  # too many positional arguments
        ((1,), {"x": 2}),  # x twice
        ((1,), {"nope": 2}),  # no such field
        ((1,), {"made": []}),  # init=False: not an argument
        ((), {"y": 2}),  # x missing, another given
    ]
    for args, kwargs in calls:
        real, fast = _pair(**options)  # each call a class of its own: a wrong call compiles its class's init
        with pytest.raises(TypeError) as expected:
            real(*args, **kwargs)
        with pytest.raises(TypeError) as raised:
            fast(*args, **kwargs)
        assert str(raised.value) == str(expected.value), (args, kwargs)


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
