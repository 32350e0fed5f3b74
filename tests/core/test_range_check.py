"""The range rule's fast path (``model._make_range_check``) against its per-field check, on random and hostile values.

Why: every reading built (``GpuProcess`` rows, ``GpuSample``, ...) first passes one compiled straight-line
check, and only an object it rejects goes to the per-field check that makes a value ``None`` with the
reason ``out_of_range``. What must hold: the fast check passes an object exactly when the per-field
check would change nothing -- a value it wrongly passes (NaN, an infinity, -1, 2**70, a string) would
reach the views unchecked; one it wrongly rejects only costs time, but is a bug all the same.
"""

from __future__ import annotations

import math
import random

import pytest

from nvtopy.model import (
    EMPTY_REASONS,
    GpuProcess,
    GpuSample,
    GpuStatic,
    HostProcess,
    NvLink,
    Reason,
    _make_range_check,
    _Ranged,
    fast_constructor,
)
from nvtopy.ranges import FIELD_RANGES

from ..builders import gpu_process, gpu_sample, gpu_static, nvlinks

HOSTILE = (float("nan"), float("inf"), float("-inf"), -1, -0.5, 2**70, 1e308, True, False, "12", b"1", [1], (), 0j)


def _base(cls: type) -> _Ranged:
    made: dict[type, _Ranged] = {
        GpuProcess: gpu_process(3, 1234, bare=True, gpu_memory_bytes=1 << 30, sm_percent=40, cpu_percent=9.5),
        GpuSample: gpu_sample(bare=True, memory_used_bytes=5 << 30, temperature_c=60, power_draw_w=300.5),
        GpuStatic: gpu_static(2, bare=True, memory_total_bytes=80 << 30),
        NvLink: nvlinks(1)[0],
    }
    return made[cls]


def _unchecked(cls: type, values: dict[str, object]) -> _Ranged:
    """An object of ``cls`` holding ``values`` as given: no range rule applied yet."""
    obj: _Ranged = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


def _slow(cls: type, values: dict[str, object]) -> _Ranged:
    obj = _unchecked(cls, values)
    obj._mark_out_of_range()  # the per-field check, always
    return obj


def _random_value(rng: random.Random, name: str) -> object:
    low, high = FIELD_RANGES[name]
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice(HOSTILE)
    if pick == 1:
        return rng.choice((low, high, low - 1, high + 1, None))
    if pick == 2:
        return rng.uniform(low, high)
    if pick == 3:
        return rng.randint(low, min(high, 2**40))
    if pick == 4:
        return rng.choice((math.nextafter(low, -math.inf), math.nextafter(float(high), math.inf)))
    return None


CLASSES = (GpuProcess, GpuSample, GpuStatic, NvLink)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_the_fast_check_passes_exactly_what_the_per_field_check_leaves_alone(cls):
    rng = random.Random(27)
    base = _base(cls)
    names = list(cls.__dataclass_fields__)
    ranged = [name for name in names if name in FIELD_RANGES]
    fits = _make_range_check(cls)
    for _ in range(3000):
        values = {name: getattr(base, name) for name in names}
        for name in rng.sample(ranged, rng.randint(1, 3)):
            values[name] = _random_value(rng, name)
        slow = _slow(cls, values)
        untouched = all(getattr(slow, name) is values[name] for name in names)
        assert fits(_unchecked(cls, values)) is untouched, {n: values[n] for n in ranged}
        made = cls(**values)  # the constructor: the fast check, then the per-field one where it fails
        assert made == slow and repr(made) == repr(slow)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_each_hostile_value_is_none_with_its_reason(cls):
    base = _base(cls)
    names = list(cls.__dataclass_fields__)
    for name in (n for n in names if n in FIELD_RANGES):
        low, high = FIELD_RANGES[name]
        for bad in (*HOSTILE, low - 1, high + 1):
            try:
                inside = low <= bad <= high  # type: ignore[operator]
            except TypeError:
                inside = False
            if inside:  # -1 is a temperature; True is 1
                continue
            made = cls(**{**{n: getattr(base, n) for n in names}, name: bad})
            assert getattr(made, name) is None, f"{cls.__name__}.{name}={bad!r} kept"
            if hasattr(made, "unavailable"):
                assert made.unavailable[name] is Reason.OUT_OF_RANGE


@pytest.mark.timeout(30)
def test_the_host_lookups_fast_constructor_builds_the_dataclasss_object_from_any_values():
    """``nvtopy.backends.host.processes`` builds each HostProcess with ``fast_constructor``: the same object as
    the dataclass's, every value where it was given (HostProcess has no range rule: nothing is dropped)."""
    rng = random.Random(27)
    names = list(HostProcess.__dataclass_fields__)
    pool = (*HOSTILE, None, 0, 1, 2**31, 12.5, "node", "x" * 300, EMPTY_REASONS, ())
    make = fast_constructor(HostProcess)
    for _ in range(500):
        values = [rng.choice(pool) for _ in names]
        made = make(*values)
        expected = HostProcess(**dict(zip(names, values, strict=True)))
        assert type(made) is HostProcess
        assert all(getattr(made, name) is value for name, value in zip(names, values, strict=True))
        assert repr(made) == repr(expected)
        if not any(isinstance(v, float) and math.isnan(v) for v in values):  # NaN != NaN
            assert made == expected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_a_class_is_checked_field_by_field_until_its_check_is_compiled_and_the_same_after(cls, monkeypatch):
    """A class's straight-line check is compiled at its ``RANGE_CHECK_COMPILED_AT``-th object (a one-shot builds
    fewer: compiling GpuSample's costs about 400 of its per-field checks); every object before and after it is
    the per-field check's, hostile values included."""
    from nvtopy import model

    base = _base(cls)  # before the count starts
    monkeypatch.setattr(model, "_IN_RANGE", {})
    monkeypatch.setattr(model, "_UNCOMPILED_SEEN", {})
    rng = random.Random(30)
    names = list(cls.__dataclass_fields__)
    ranged = [name for name in names if name in FIELD_RANGES]
    for count in range(1, model.RANGE_CHECK_COMPILED_AT + 100):
        values = {name: getattr(base, name) for name in names}
        for name in rng.sample(ranged, rng.randint(1, 3)):
            values[name] = _random_value(rng, name)
        made = cls(**values)
        slow = _slow(cls, values)
        assert made == slow and repr(made) == repr(slow), count
        assert (cls in model._IN_RANGE) is (count >= model.RANGE_CHECK_COMPILED_AT), count
        assert count > 64 or cls not in model._IN_RANGE, "a one-shot's 64 process rows compiled a check"
