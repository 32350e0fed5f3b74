"""The model's fast constructor (``model.fast_constructor``): the object ``cls(*values)`` builds, range rule included.

Why it exists: ``nvtopy --ssh`` at 64 hosts x 8 GPUs builds thousands of samples,
processes and links a second from untrusted far sides, and the dataclass
``__init__`` was most of a refresh. What must not change: a reading outside its
range (NaN, an infinity, a negative, a huge figure, not a number) is ``None`` with
the reason ``out_of_range``, exactly as through the checked constructor -- here
on the model's own classes, then through the ``--ssh`` decoding path (a far
side's stream line decoded in its place in the fleet).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from nvtopy.formats.contract_decoder import Placement, SnapshotDecoder, _checked_snapshot
from nvtopy.formats.stream import StreamReader
from nvtopy.model import (
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    NvLink,
    Reason,
    fast_constructor,
    fast_replacer,
)
from nvtopy.ranges import FIELD_RANGES, within

from ..builders import gpu_process, gpu_sample

BAD = (float("nan"), float("inf"), float("-inf"), -1, 2**70, 1e308, "12", [1])


def _values(obj: object) -> list[object]:
    return [getattr(obj, name) for name in obj.__dataclass_fields__]  # type: ignore[attr-defined]


def _sample() -> GpuSample:
    return gpu_sample(
        1_800_000_000.0,
        bare=True,
        memory_used_bytes=5 << 30,
        utilization_gpu_percent=50,
        temperature_c=60,
        power_draw_w=300.5,
        sm_active_percent=41.5,
        pcie_rx_bytes_per_s=123,
        throttle_reasons=("gpu_idle",),
        nvlinks=(NvLink(0, True, 4, 10, 20, 0, "00000000:05:00.0"),),
    )


def _process() -> GpuProcess:
    return gpu_process(
        3, 1234, bare=True, gpu_uuid="GPU-x", gpu_memory_bytes=1 << 30, sm_percent=40, cpu_percent=99.5,
        running_seconds=12.5, create_time=1_799_999_000.0, host="node001",
    )  # fmt: skip


EXAMPLES = {
    "GpuSample": _sample,
    "GpuProcess": _process,
    "NvLink": lambda: NvLink(3, True, 4, 10, 20, 0, "00000000:05:00.0"),
    "GpuStatic": lambda: GpuStatic(7, "GPU-x", "H100", memory_total_bytes=80 << 30, host="node001", host_index=0),
    "GpuState": lambda: GpuState(GpuStatic(0), _sample(), (_process(),)),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_fast_object_is_the_one_the_dataclass_builds(name):
    expected = EXAMPLES[name]()
    cls = type(expected)
    made = fast_constructor(cls)(*_values(expected))
    assert type(made) is cls
    assert made == expected
    assert repr(made) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, next(iter(cls.__dataclass_fields__)), 9)  # frozen as the dataclass is
    assert fast_constructor(cls) is fast_constructor(cls), "made once per class"


def test_a_class_whose_construction_does_more_is_refused():
    """Only the range rule is done here: a class with another ``__post_init__``, or not slotted, gets none."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            raise AssertionError("work a fast constructor would skip")

    @dataclasses.dataclass(frozen=True)
    class Plain:
        value: int

    for cls in (Checked, Plain):
        with pytest.raises(TypeError):
            fast_constructor(cls)


RANGED = [
    (cls, name)
    for cls in (GpuSample, GpuProcess, NvLink, GpuStatic)
    for name in cls.__dataclass_fields__
    if name in FIELD_RANGES
]


@pytest.mark.parametrize(("cls", "name"), RANGED, ids=[f"{cls.__name__}.{name}" for cls, name in RANGED])
def test_a_value_out_of_range_is_none_with_its_reason_as_through_the_dataclass(cls, name):
    base = {GpuSample: _sample, GpuProcess: _process, NvLink: EXAMPLES["NvLink"], GpuStatic: EXAMPLES["GpuStatic"]}
    values = _values(base[cls]())
    position = list(cls.__dataclass_fields__).index(name)
    low, high = FIELD_RANGES[name]
    for bad in (*BAD, low - 1, high + 1):
        if within(name, bad):  # -1 is a temperature
            continue
        values[position] = bad
        made = fast_constructor(cls)(*values)
        expected = cls(*values)
        assert getattr(made, name) is None, f"{name}={bad!r} kept"
        assert made == expected and repr(made) == repr(expected)
        if hasattr(made, "unavailable"):
            assert made.unavailable[name] is Reason.OUT_OF_RANGE
    for good in (low, high, None):
        values[position] = good
        assert getattr(fast_constructor(cls)(*values), name) == good


# ----------------------------------------------------------------- through --ssh's decoding


def _far_line(**changes: object) -> bytes:
    """A far side's whole snapshot line of two simulated GPUs, with ``changes`` on GPU 0 and its first process."""
    from tests.sources.remote.ssh.fake_ssh import snapshot_line

    data = json.loads(snapshot_line(gpus=2))
    gpu = data["gpus"][0]
    process = gpu["processes"][0]
    for key, value in changes.items():
        part, field = key.split("__")
        (gpu if part == "gpu" else process)[field] = value
    return json.dumps(data).encode()  # NaN and Infinity as Python's json writes them (and reads them back)


@pytest.mark.parametrize(
    "field",
    [
        "gpu__utilization_gpu_percent",
        "gpu__power_draw_w",
        "gpu__temperature_c",
        "gpu__sm_active_percent",
        "process__sm_percent",
        "process__cpu_percent",
        "process__running_seconds",
        "process__gpu_memory_bytes",
    ],
)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -500, 1e300], ids=["nan", "inf", "negative", "huge"])
def test_a_far_sides_bad_figure_is_na_with_its_reason_on_the_ssh_path(field, bad):
    reader, decoder = StreamReader(), SnapshotDecoder()
    state = reader.read(_far_line(**{field: bad}))
    snapshot = decoder.decode(state, place=Placement(8, "node001", 1_800_000_000.0))
    part, name = field.split("__")
    gpu = snapshot.gpus[0]
    held = gpu.sample if part == "gpu" else gpu.processes[0]
    assert getattr(held, name) is None
    assert held.unavailable[name] is Reason.OUT_OF_RANGE
    assert gpu.static.index == 8 and all(p.host == "node001" for p in gpu.processes)
    checked = _checked_snapshot(json.loads(_far_line(**{field: bad})))  # the checked walk says the same
    held_checked = checked.gpus[0].sample if part == "gpu" else checked.gpus[0].processes[0]
    assert getattr(held_checked, name) is None
    if part == "gpu":
        assert dataclasses.replace(held, timestamp=0) == dataclasses.replace(held_checked, timestamp=0)
    else:
        assert dataclasses.replace(held, gpu_index=0, host=None) == dataclasses.replace(held_checked, host=None)
    assert not math.isnan(snapshot.gpus[1].sample.power_draw_w or 0.0)  # the other GPU as it was


# ----------------------------------------------------------------- the fast replacer (a patched process)

REPLACEABLE = {"GpuSample": _sample, "GpuProcess": _process, "NvLink": EXAMPLES["NvLink"]}


@pytest.mark.parametrize("name", list(REPLACEABLE))
def test_the_replaced_object_is_the_one_dataclasses_replace_builds(name):
    """Every ranged field changed to a value in range, to one out of it, and to None: what ``dataclasses.replace``
    makes, field for field and reason for reason; the old object unchanged."""
    old = REPLACEABLE[name]()
    cls = type(old)
    replace = fast_replacer(cls)
    assert replace is fast_replacer(cls), "made once per class"
    before = repr(old)
    for field in cls.__dataclass_fields__:
        if field not in FIELD_RANGES:
            continue
        low, high = FIELD_RANGES[field]
        for value in (low, high, None, *BAD, low - 1, high + 1):
            changes = {field: value}
            if field != "link":  # another figure beside it, in range
                other = next(f for f in cls.__dataclass_fields__ if f in FIELD_RANGES and f != field)
                changes[other] = FIELD_RANGES[other][0]
            made = replace(old, changes)
            expected = dataclasses.replace(old, **changes)
            assert type(made) is cls
            assert made == expected and repr(made) == repr(expected), (field, value)
            if not within(field, value) and value is not None and hasattr(made, "unavailable"):
                assert made.unavailable[field] is Reason.OUT_OF_RANGE
    assert repr(old) == before, "the old object is never changed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(replace(old, {}), next(iter(cls.__dataclass_fields__)), 9)  # frozen as the dataclass is


def test_a_replacer_refuses_what_a_fast_constructor_refuses():
    @dataclasses.dataclass(frozen=True)
    class Plain:
        value: int

    with pytest.raises(TypeError):
        fast_replacer(Plain)


def test_a_replacer_past_the_key_sets_it_keeps_code_for_is_still_dataclasses_replace():
    """Each set of changed fields gets its own straight-line code, up to a bound: past it, and for the same sets again,
    and with values out of range among them, the objects are ``dataclasses.replace``'s; an unknown name still raises."""
    from nvtopy.model import _SPECIAL_KEY_SETS

    old = _process()
    replace = fast_replacer(GpuProcess)
    ranged = [name for name in GpuProcess.__dataclass_fields__ if name in FIELD_RANGES]
    pairs = [(a, b) for a in ranged for b in ranged if a != b]
    assert len(pairs) > _SPECIAL_KEY_SETS, "more key sets than kept (else the bound is not reached)"
    for _ in range(2):
        for n, (a, b) in enumerate(pairs):
            low, high = FIELD_RANGES[a]
            changes = {a: (low, high + 1, None, float("nan"))[n % 4], b: FIELD_RANGES[b][1], "name": f"p{n}"}
            made, expected = replace(old, changes), dataclasses.replace(old, **changes)
            assert type(made) is GpuProcess and repr(made) == repr(expected), changes
    for changes in ({"no_such_field": 1}, {"cpu_percent": 1.0, "no_such_field": 1}):
        with pytest.raises(AttributeError):
            replace(old, changes)


def test_a_replacer_compiles_only_the_code_its_changes_need(monkeypatch):
    """A one-shot re-makes a few flagged rows (two changed fields): it compiles that key set's code alone -- not a
    fast constructor, nor the generic code, which is compiled at its first need and then gives dataclasses' object."""
    from nvtopy import model

    compiled: list[str] = []

    def counting(source: str, filename: str, mode: str) -> object:
        compiled.append(filename)
        return compile(source, filename, mode)

    monkeypatch.setattr(model, "_FAST", {})
    monkeypatch.setattr(model, "_REPLACERS", {})
    # The class's range check is compiled at its 200th object: counted afresh here, so whatever earlier tests in
    # this worker built, this test's few objects never reach it (a fresh clone's order made it the 200th once).
    monkeypatch.setattr(model, "_UNCOMPILED_SEEN", {})
    monkeypatch.setattr(model, "_IN_RANGE", {})
    monkeypatch.setattr(model, "compile", counting, raising=False)
    old = _process()
    replace = fast_replacer(GpuProcess)
    changes: dict[str, object] = {"flags": ("idle-held",), "idle_seconds": 30.0}
    made = replace(old, changes)
    assert repr(made) == repr(dataclasses.replace(old, **changes))
    assert compiled == ["<fast replacer of GpuProcess: flags, idle_seconds>"]
    changes = {"flags": (), "idle_seconds": float("nan")}  # out of range: the generic code, compiled now
    made = replace(old, changes)
    assert repr(made) == repr(dataclasses.replace(old, **changes)) and made.idle_seconds is None
    assert compiled[1:] == ["<fast replacer of GpuProcess>"]
