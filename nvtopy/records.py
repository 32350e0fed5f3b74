"""``@dataclass`` without its import-time cost: the same classes, with their methods made when first used.

Why: ``dataclasses.dataclass`` writes each class's ``__init__``, ``__eq__``, ``__hash__`` and, frozen,
``__setattr__`` and ``__delattr__`` as source text and compiles them when the class is defined: 1-2 ms
a class. ``nvtopy --once`` imports about 40 such classes and builds objects of about a dozen, and that
compiling was the largest single cost of its imports (``nvtopy.model`` alone: 19 classes, ~20 ms).

What stays the real thing: dataclasses itself reads the fields, so ``dataclasses.fields``,
``replace``, ``asdict``, ``is_dataclass``, ``__match_args__`` and ``__slots__`` (``slots=True``) are
its own, and the type checker sees :func:`dataclasses.dataclass` (``TYPE_CHECKING``). What differs:
``__init__`` binds its arguments generically for the class's first 200 objects and is then
compiled (the code dataclasses writes: the same speed from then on), and ``__eq__``, ``__hash__``,
``__repr__`` and the frozen ``__setattr__`` and ``__delattr__`` are shared functions over the fields,
made without compiling. A class this does not cover (``order``, ``unsafe_hash``, a dataclass base,
its own ``__init__``/``__eq__``/..., an option dataclasses added later) is handed to
:func:`dataclasses.dataclass` as it is.
"""

from __future__ import annotations

import abc
import sys
from types import MemberDescriptorType
from typing import TYPE_CHECKING, Any

from .standin import import_standing_in

if TYPE_CHECKING:
    import dataclasses
    from dataclasses import field
else:  # inspect (ast, dis, tokenize) is imported only if some class has no docstring (nvtopy.standin)
    dataclasses = import_standing_in("dataclasses", "inspect")
    field = dataclasses.field

__all__ = ["dataclass", "field"]

# dataclasses' kinds of entry in __dataclass_fields__ (a field, a ClassVar, an InitVar): Python 3.10-3.13 alike.
# A Python whose dataclasses names them otherwise gets dataclasses.dataclass itself (slower to import, the same).
_FIELD: Any = vars(dataclasses).get("_FIELD")
_CLASSVAR: Any = vars(dataclasses).get("_FIELD_CLASSVAR")

if TYPE_CHECKING or _FIELD is None or _CLASSVAR is None:
    from dataclasses import dataclass
else:

    def dataclass(
        cls: type | None = None,
        /,
        *,
        init: bool = True,
        repr: bool = True,
        eq: bool = True,
        order: bool = False,
        unsafe_hash: bool = False,
        frozen: bool = False,
        **options: Any,
    ) -> Any:
        """:func:`dataclasses.dataclass`, its methods made on first use (see the module's docstring)."""

        def wrap(cls: type) -> type:
            if order or unsafe_hash or not _plain(cls, options):
                return dataclasses.dataclass(
                    cls, init=init, repr=repr, eq=eq, order=order, unsafe_hash=unsafe_hash, frozen=frozen, **options
                )
            return _record(cls, init=init, show=repr, eq=eq, frozen=frozen, options=options)

        return wrap if cls is None else wrap(cls)


_OWN_METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
_OPTIONS = frozenset({"match_args", "kw_only", "slots"})  # what dataclasses does here as it always does


def _plain(cls: type, options: dict[str, Any]) -> bool:
    """A class this module covers: no method of its own that dataclasses would keep, no dataclass base."""
    if not _OPTIONS.issuperset(options):
        return False
    own = cls.__dict__
    if any(name in own for name in _OWN_METHODS):
        return False
    return not any("__dataclass_fields__" in base.__dict__ for base in cls.__mro__[1:])


def _record(cls: type, *, init: bool, show: bool, eq: bool, frozen: bool, options: dict[str, Any]) -> type:
    undocumented = not cls.__dict__.get("__doc__")
    if undocumented:  # dataclasses would write one from inspect.signature: 10-20 ms on first use
        cls.__doc__ = "-"
    made: Any = _fields_made(cls, options)
    if made is None:
        made = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=False, **options)
    fields = [f for f in made.__dataclass_fields__.values() if f._field_type is not _CLASSVAR]
    if any(f._field_type is not _FIELD for f in fields):
        raise TypeError(f"{made.__name__}: an InitVar field needs dataclasses.dataclass itself")
    if undocumented:  # as dataclasses writes it: the class's name and its __init__'s parameters
        made.__doc__ = f"{made.__name__}({', '.join(_parameter(f) for f in fields if f.init)})"
    if init:
        _check_order(made, fields)
        made.__init__ = _lazy_init(made, frozen=frozen)
    params = made.__dataclass_params__  # what the class is, for dataclasses' own checks (a frozen subclass)
    params.init, params.repr, params.eq, params.frozen = init, show, eq, frozen
    if show:
        made.__repr__ = _repr([f.name for f in fields if f.repr])
    if eq:
        made.__eq__ = _eq(made, [f.name for f in fields if f.compare])
        made.__hash__ = _hash([f.name for f in fields if (f.compare if f.hash is None else f.hash)]) if frozen else None
    if frozen:
        names = frozenset(f.name for f in fields)
        made.__setattr__, made.__delattr__ = _frozen(made, names)
        if "__slots__" in made.__dict__ and options.get("slots"):
            made.__getstate__, made.__setstate__ = _state([f.name for f in fields])
    return made  # type: ignore[no-any-return]


# Where dataclasses' own scan of a class is known line by line (its _process_class with init, repr, eq, order,
# unsafe_hash and frozen all False): CPython 3.11 and 3.12. Elsewhere dataclasses itself scans.
_SCANNED_HERE = sys.version_info[:2] in ((3, 11), (3, 12))
_MARKERS = ("ClassVar", "InitVar", "KW_ONLY")


def _fields_made(cls: type, options: dict[str, Any]) -> type | None:
    """What ``dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=False, **options)`` makes of a
    plain class, made here; None where dataclasses must do it (the class is left as it was).

    Why: dataclasses checks each string annotation three times against ClassVar, InitVar and KW_ONLY
    with a regular expression and module look-ups; with the rest of its scan that was a fifth of
    importing the model (7 of 31 M instructions) and 2.7 % of ``nvtopy --once``. A class whose every annotation is a
    string naming none of the three, with no mutable default and no field without an annotation,
    gets the very same fields, parameters, ``__match_args__`` and slots here, from dataclasses' own
    ``Field``, ``_DataclassParams`` and ``_add_slots``; any other class goes to dataclasses.
    ``tests/core/test_records.py`` holds every such class of nvtopy to what dataclasses makes of it.
    """
    if not _SCANNED_HERE or "weakref_slot" in options:
        return None
    # what inspect.get_annotations gives a class (3.12's dataclasses asks it), without importing inspect
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    missing = dataclasses.MISSING
    kw_only = options.get("kw_only", False)
    made: dict[str, Any] = {}
    for name, kind in annotations.items():
        if not isinstance(kind, str) or any(marker in kind for marker in _MARKERS):
            return None
        default = getattr(cls, name, missing)
        if isinstance(default, dataclasses.Field):
            found = default
            default = found.default
        else:
            if isinstance(default, MemberDescriptorType):  # a slot of a base: no default
                default = missing
            found = None
        if default is not missing and default.__class__.__hash__ is None:
            return None  # a mutable default: dataclasses' ValueError
        made[name] = (found, default)
    if any(isinstance(value, dataclasses.Field) and name not in annotations for name, value in cls.__dict__.items()):
        return None  # a field without an annotation: dataclasses' TypeError
    fields: dict[str, Any] = {}
    for name, (found, default) in made.items():
        f = found if found is not None else dataclasses.field(default=default)
        f.name, f.type, f._field_type = name, annotations[name], _FIELD
        if f.kw_only is missing:
            f.kw_only = kw_only
        fields[name] = f
        if found is not None:  # the class attribute is the default itself, or none at all
            if f.default is missing:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    values = {"init": False, "repr": False, "eq": False, "order": False, "unsafe_hash": False, "frozen": False}
    values.update(match_args=options.get("match_args", True), kw_only=kw_only, slots=options.get("slots", False))
    values["weakref_slot"] = False
    params = dataclasses._DataclassParams  # type: ignore[attr-defined]
    taken = params.__init__.__code__.co_varnames[1 : params.__init__.__code__.co_argcount]
    cls.__dataclass_params__ = params(*(values[name] for name in taken))  # type: ignore[attr-defined]
    cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]
    if values["match_args"] and "__match_args__" not in cls.__dict__:
        setattr(cls, "__match_args__", tuple(f.name for f in fields.values() if f.init and not f.kw_only))  # noqa: B010
    if values["slots"]:
        cls = dataclasses._add_slots(cls, False, False)  # type: ignore[attr-defined]
    abc.update_abstractmethods(cls)
    return cls


def _parameter(f: dataclasses.Field[Any]) -> str:
    """A field as its ``__init__`` parameter is shown: ``name: type``, ``= default`` or ``= <factory>``."""
    import inspect  # a class without a docstring (at first use: nvtopy.standin)

    text = f"{f.name}: {inspect.formatannotation(f.type)}"
    if f.default_factory is not dataclasses.MISSING:
        return f"{text} = <factory>"
    return text if f.default is dataclasses.MISSING else f"{text} = {f.default!r}"


def _check_order(cls: type, fields: list[dataclasses.Field[Any]]) -> None:
    """The error dataclasses gives at definition: a positional field without a default after one with."""
    seen_default = False
    for f in fields:
        if not f.init or f.kw_only:
            continue
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if seen_default and not has_default:
            raise TypeError(f"{cls.__name__}: non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default


# How many objects a class makes with the generic ``__init__`` before its own is compiled. Compiling the
# model's largest (GpuProcess, 31 fields) costs about as much as 300 generic calls (3.4 M instructions,
# against 11 k more a call; callgrind): ``nvtopy --once`` makes most of its 21 classes' objects fewer
# than 200 times and so compiles none of them (about 7% of its instructions), while a monitor running
# for minutes compiles each at once.
COMPILE_AFTER = 200


def _lazy_init(cls: Any, *, frozen: bool) -> Any:
    """An ``__init__`` that binds its arguments generically (:class:`_Binding`, made at the first object)
    for the class's first :data:`COMPILE_AFTER` objects, then compiles the real one (:func:`_compile_init`),
    puts it in its place and calls it.

    Any call the generic binding does not take as it is (too many positional arguments, an unknown or
    repeated keyword, a missing field) is handed to the real ``__init__`` at once: it raises the very
    error dataclasses' own raises.
    """
    state: list[Any] = [COMPILE_AFTER, None]  # objects left before compiling; the binding

    def first_init(self: Any, *args: Any, **kwargs: Any) -> None:
        state[0] -= 1
        binding = state[1]
        if binding is None:
            binding = state[1] = _Binding(cls, frozen)
        if state[0] < 0 or not binding.bind(self, args, kwargs):
            real = _compile_init(cls)
            cls.__init__ = real
            real(self, *args, **kwargs)

    first_init.__name__ = "__init__"
    first_init.__qualname__ = f"{cls.__qualname__}.__init__"
    return first_init


class _Binding:
    """What the generic ``__init__`` of one class needs: its fields' names, defaults and factories, in order."""

    __slots__ = ("accepted", "positional", "post_init", "put", "steps")

    def __init__(self, cls: Any, frozen: bool) -> None:
        fields = [f for f in cls.__dataclass_fields__.values() if f._field_type is _FIELD]
        self.positional = tuple(f.name for f in fields if f.init and not f.kw_only)
        self.accepted = frozenset(f.name for f in fields if f.init)
        self.steps = [step for step in map(_bind_step, fields) if step is not None]
        self.put: Any = object.__setattr__ if frozen else setattr
        self.post_init = getattr(cls, "__post_init__", None) is not None

    def bind(self, obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Set ``obj``'s fields from the call's arguments; False: a call only the real ``__init__`` takes."""
        positional = self.positional
        if len(args) > len(positional) or not self.accepted.issuperset(kwargs):
            return False
        if args:
            given = dict(zip(positional, args, strict=False))  # fewer args than fields
            if kwargs:
                if not given.keys().isdisjoint(kwargs):
                    return False  # a field given twice: dataclasses' TypeError
                given.update(kwargs)
        else:
            given = kwargs
        put = self.put
        for name, kind, default in self.steps:
            if kind is _REQUIRED:
                if name not in given:
                    return False  # a field missing: dataclasses' TypeError
                value = given[name]
            elif kind is _DEFAULT:
                value = given.get(name, default)
            elif kind is _FACTORY:
                value = given[name] if name in given else default()
            elif kind is _FIXED:
                value = default
            else:  # _MADE: not an argument, its factory's value
                value = default()
            put(obj, name, value)
        if self.post_init:
            obj.__post_init__()
        return True


_REQUIRED, _DEFAULT, _FACTORY, _FIXED, _MADE = (object() for _ in range(5))


def _bind_step(f: dataclasses.Field[Any]) -> tuple[str, object, Any] | None:
    """How the generic ``__init__`` sets this field: (name, kind, default or factory); None: left unset."""
    has_factory = f.default_factory is not dataclasses.MISSING
    has_default = f.default is not dataclasses.MISSING
    if f.init:
        if has_factory:
            return (f.name, _FACTORY, f.default_factory)
        return (f.name, _DEFAULT, f.default) if has_default else (f.name, _REQUIRED, None)
    if has_factory:
        return (f.name, _MADE, f.default_factory)
    return (f.name, _FIXED, f.default) if has_default else None  # no value: as dataclasses leaves it


_HAS_FACTORY = object()


def _compile_init(cls: Any) -> Any:
    """The ``__init__`` dataclasses would write for ``cls`` (frozen: ``object.__setattr__``; ``__post_init__``)."""
    frozen = cls.__dataclass_params__.frozen
    fields = [f for f in cls.__dataclass_fields__.values() if f._field_type is _FIELD]
    namespace: dict[str, Any] = {"__set": object.__setattr__, "__has_factory": _HAS_FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        name = f.name
        value = name
        if f.default_factory is not dataclasses.MISSING:
            namespace[f"__factory_{name}"] = f.default_factory
            if f.init:
                param = f"{name}=__has_factory"
                value = f"__factory_{name}() if {name} is __has_factory else {name}"
            else:
                value = f"__factory_{name}()"
        elif f.default is not dataclasses.MISSING:
            namespace[f"__default_{name}"] = f.default
            param = f"{name}=__default_{name}"
            if not f.init:
                value = f"__default_{name}"
        else:
            param = name
            if not f.init:
                continue  # no value to set: as dataclasses leaves it
        if f.init:
            (keyword if f.kw_only else positional).append(param)
        body.append(f"__set(self, {name!r}, {value})" if frozen else f"self.{name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params}):\n" + "".join(f"    {line}\n" for line in body or ["pass"])
    exec(compile(source, f"<{cls.__qualname__}.__init__>", "exec"), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _key(names: list[str]) -> Any:
    """The tuple of these fields' values of an object (what dataclasses compares and hashes)."""
    if len(names) > 1:
        from operator import attrgetter

        return attrgetter(*names)
    if names:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    return lambda obj: ()


def _eq(cls: Any, names: list[str]) -> Any:
    key = _key(names)

    def equal(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    equal.__name__ = "__eq__"
    equal.__qualname__ = f"{cls.__qualname__}.__eq__"
    return equal


def _hash(names: list[str]) -> Any:
    key = _key(names)

    def hashed(self: Any) -> int:
        return hash(key(self))

    return hashed


def _repr(names: list[str]) -> Any:
    import reprlib

    @reprlib.recursive_repr()
    def shown(self: Any) -> str:
        text = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({text})"

    return shown


def _frozen(cls: Any, names: frozenset[str]) -> tuple[Any, Any]:
    """dataclasses' frozen ``__setattr__`` and ``__delattr__`` (a subclass may still set attributes of its own)."""

    def set_field(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def delete_field(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return set_field, delete_field


def _state(names: list[str]) -> tuple[Any, Any]:
    """dataclasses' ``__getstate__``/``__setstate__`` of a frozen slotted class: pickle and copy past the frozen
    ``__setattr__``."""

    def get_state(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    def set_state(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=True):
            object.__setattr__(self, name, value)

    return get_state, set_state
