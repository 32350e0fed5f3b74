"""Patches applied in place (``StreamReader(in_place=True)``, what ``--ssh``'s I/O thread does): the same snapshots.

:func:`apply_patch_in_place` changes the last snapshot's GPU and process objects rather than copying
them. Checked here, step by step beside :func:`apply_patch` (the copying one, which the far side's
patches were written against): the same JSON, types included; the same errors, raised before
anything is changed; the same parts shared with the line before (what the decoder knows by identity
is never a changed object); and each line decoded from its patch as the checked walk decodes the
copying reader's line -- busy and faulty nodes, hostile figures of GPUs and processes (NaN, an
infinity, out of range, text, ``true``), patches that do not fit.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from nvtopy.formats import contract_decoder as decoder
from nvtopy.formats.contract_decoder import SnapshotDecoder
from nvtopy.formats.stream import StreamError, StreamReader, apply_patch, apply_patch_in_place, patch_of

from . import test_stream_decoder as _decoder_tests
from .test_stream_decoder import (
    HOSTILE_FIGURES,
    HOSTILE_PROCESS_FIGURES,
    _placed_by_hand,
    checked,
    fresh,
    outcome,
)

node_lines = _decoder_tests.node_lines  # the fixtures: a faulty node's lines, a busy node's
plain_lines = _decoder_tests.plain_lines


def _containers(value: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """Every dict and list inside ``value`` that the in-place patch must never change (by path): all but the
    snapshot, its GPU list, each GPU, its process list and each process."""
    found: dict[tuple[Any, ...], Any] = {}
    own = path in ((), ("gpus",)) or _is_gpu(path) or _is_process(path) or _is_processes(path)
    if not own and type(value) in (dict, list):
        found[path] = value
    if type(value) is dict:
        for key, item in value.items():
            found.update(_containers(item, (*path, key)))
    elif type(value) is list:
        for n, item in enumerate(value):
            found.update(_containers(item, (*path, n)))
    return found


def _is_gpu(path: tuple[Any, ...]) -> bool:
    return len(path) == 2 and path[0] == "gpus" and type(path[1]) is int


def _is_processes(path: tuple[Any, ...]) -> bool:
    return len(path) == 3 and _is_gpu(path[:2]) and path[2] == "processes"


def _is_process(path: tuple[Any, ...]) -> bool:
    return len(path) == 4 and _is_processes(path[:3]) and type(path[3]) is int


def _shared(before: dict[tuple[Any, ...], Any], after: Any) -> set[tuple[Any, ...]]:
    """The paths whose object after a patch is the very object before it."""
    return {path for path, value in _containers(after).items() if before.get(path) is value}


class _Chains:
    """The copying reader's states and the in-place reader's, a patch at a time; each step checked and decoded."""

    def __init__(self, whole: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
        real = SnapshotDecoder._patched_gpu

        def counted(decoder: SnapshotDecoder, *args: Any) -> Any:
            made = real(decoder, *args)
            self.decoded_from_patch += made is not None
            return made

        monkeypatch.setattr(SnapshotDecoder, "_patched_gpu", counted)
        self.copying = whole
        self.in_place = copy.deepcopy(whole)
        self.decoder = SnapshotDecoder()
        self.decoded_from_patch = 0
        self.steps = 0
        self.errors = 0
        self.said: list[str] = []
        self._decode(None)

    def step(self, patch: Any) -> None:
        text_before = json.dumps(self.in_place)
        containers_before = _containers(self.copying), _containers(self.in_place)
        try:
            copying = apply_patch(self.copying, patch)
            if type(copying) is not dict or "gpus" not in copying or "timestamp" not in copying:
                raise StreamError("a patch that makes no snapshot")
        except StreamError as exc:
            with pytest.raises(StreamError) as raised:
                apply_patch_in_place(self.in_place, patch)
            assert str(raised.value) == str(exc)
            self.said.append(str(exc))
            assert json.dumps(self.in_place) == text_before, "an error after a change: the last snapshot is not kept"
            self.errors += 1
            return
        in_place = apply_patch_in_place(self.in_place, patch)
        assert json.dumps(in_place) == json.dumps(copying)  # the same values, types included (1, 1.0, true)
        assert _shared(containers_before[1], in_place) == _shared(containers_before[0], copying)
        self.copying, self.in_place = copying, in_place
        self.steps += 1
        self._decode(patch)

    def _decode(self, patch: Any) -> None:
        place = decoder.Placement(first=5, host="gpu-c", taken=1_800_000_000.0 + self.steps)
        kind, got = outcome(lambda data: self.decoder.decode(data, place=place, patch=patch), self.in_place)
        expected_kind, expected = outcome(checked, fresh(self.copying))
        assert kind == expected_kind, (kind, got, expected)
        if kind == "snapshot":
            parts = [(g.static, g.sample, g.processes, g.health) for g in got[0].gpus]
            assert parts == _placed_by_hand(expected[0], place.first, place.host, place.taken)
        else:
            assert got == expected


def _run(lines: list[str], monkeypatch: pytest.MonkeyPatch) -> _Chains:
    previous = json.loads(lines[0])
    chains = _Chains(previous, monkeypatch)
    for line in lines[1:]:
        data = json.loads(line)
        chains.step(patch_of(previous, data))
        previous = data
    return chains


def test_a_faulty_node_read_in_place_decodes_as_the_checked_walk(node_lines, monkeypatch):
    """A MIG GPU, a GPU off the bus, links down, processes coming and going, unreadable users."""
    chains = _run(node_lines, monkeypatch)
    assert chains.steps == len(node_lines) - 1


def test_a_busy_node_read_in_place_decodes_from_its_patches_as_the_checked_walk(plain_lines, monkeypatch):
    chains = _run(plain_lines, monkeypatch)
    assert chains.steps == len(plain_lines) - 1
    assert chains.decoded_from_patch >= 4 * chains.steps, "GPUs were built from their parts (the common case)"


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("key", "value"),
    [*HOSTILE_FIGURES, ("power_draw_w", _NAN), ("temperature_c", _INF), ("memory_used_bytes", -_INF)],
    ids=lambda v: repr(v)[:20],
)
def test_a_hostile_gpu_figure_patched_in_place_decodes_as_the_checked_walk(plain_lines, monkeypatch, key, value):
    """One GPU's figure made odd, back, odd again: each line as the checked walk says."""
    chains = _run(plain_lines[:4], monkeypatch)
    gpus = len(chains.copying["gpus"])
    for figure in (value, chains.copying["gpus"][1].get(key, 0), value, 7):
        items: list[Any] = [{} for _ in range(gpus)]
        items[1] = {key: figure, "power_draw_w": 120.5} if key != "power_draw_w" else {key: figure}
        chains.step({"gpus": {"$list": items}, "timestamp": "2026-11-18T11:07:00.000+00:00"})
    assert chains.steps == 3 + 4


@pytest.mark.parametrize(
    ("key", "value"),
    [*HOSTILE_PROCESS_FIGURES, ("cpu_percent", _NAN), ("running_seconds", _INF)],
    ids=lambda v: repr(v)[:20],
)
def test_a_hostile_process_figure_patched_in_place_decodes_as_the_checked_walk(plain_lines, monkeypatch, key, value):
    chains = _run(plain_lines[:4], monkeypatch)
    base = chains.copying
    gpu = next(n for n, item in enumerate(base["gpus"]) if item["processes"])
    count = len(base["gpus"][gpu]["processes"])
    for figure in (value, base["gpus"][gpu]["processes"][0].get(key, 1), value, 12345):
        processes: list[Any] = [{} for _ in range(count)]
        processes[0] = {key: figure}
        items: list[Any] = [{} for _ in base["gpus"]]
        items[gpu] = {"processes": {"$list": processes}, "power_draw_w": 100.5}
        chains.step({"gpus": {"$list": items}})
    assert chains.steps == 3 + 4


def _gpu_patch(gpus: int, at: int, change: Any) -> dict[str, Any]:
    items: list[Any] = [{} for _ in range(gpus)]
    items[at] = change
    return {"gpus": {"$list": items}}


ILL_FITTING = [
    # found only below a GPU, after the GPUs before it and its own figures were seen: nothing may be changed
    (
        lambda count: {"power_draw_w": 1.5, "processes": {"$list": [{}] * (count + 1)}},
        "a patch of {more} items for a list of {count}",
    ),
    (
        lambda count: {"power_draw_w": 1.5, "health": {"readings": {"nvlink": {"links": {"$list": []}}}}},
        "a patch of 0 items for a list of 18",
    ),
    (lambda count: {"power_draw_w": 1.5, "$removed": "index"}, "$removed is 'index', not a list of keys"),
    (
        lambda count: {
            "power_draw_w": 1.5,
            "processes": {"$list": [{"cpu_percent": 1.5}] * (count - 1) + [{"$removed": 5}]},
        },
        "$removed is 5, not a list of keys",
    ),
]


@pytest.mark.parametrize(("change", "said"), ILL_FITTING, ids=["processes", "links", "removed", "process-removed"])
def test_a_patch_that_does_not_fit_changes_nothing_and_says_what_the_copying_reader_says(
    plain_lines, monkeypatch, change, said
):
    chains = _run(plain_lines[:4], monkeypatch)
    gpus = chains.copying["gpus"]
    gpu = max(n for n, item in enumerate(gpus) if len(item["processes"]) >= 2)  # the GPUs before it changed first
    assert gpu > 0
    count = len(gpus[gpu]["processes"])
    patch = _gpu_patch(len(gpus), gpu, change(count))
    for n in range(gpu):  # a GPU's figure and its processes' before the one that does not fit
        processes = [{"cpu_percent": 3.5}] * len(gpus[n]["processes"])
        patch["gpus"]["$list"][n] = {"power_draw_w": 2.5, "processes": {"$list": processes}}
    chains.step(patch)
    assert chains.errors == 1 and chains.steps == 3
    assert chains.said == [said.format(more=count + 1, count=count)]
    chains.step(_gpu_patch(len(chains.copying["gpus"]), gpu, {"power_draw_w": 2.5}))  # and reads on as before
    assert chains.steps == 4


ODD_BUT_FITTING = [
    lambda count: {"power_draw_w": 1.5, "$removed": ["power_draw_w", "nope", 5]},  # the GPU is a new object
    lambda count: {"$removed": ["temperature_c"], "temperature_c": 50},  # removed, then set again: there
    lambda count: {"processes": [{"pid": 1}] * (count + 1)},  # a new list of another length: the value itself
    lambda count: {
        "processes": {"$list": [{"pid": 9, "$removed": ["command"]}] + [{"owner": {"kind": "x"}}] * (count - 1)}
    },
    lambda count: {"processes": {"$list": [5] + [None] * (count - 1)}},  # no object: 5, and null (unchanged)
    lambda count: {"processes": {"x": 1}},  # an object where a list was
    lambda count: {"health": {"verdict": "critical"}, "pstate": "P8"},
    lambda count: {"brand_new": {"a": [1, {"b": 2}]}},
]


@pytest.mark.parametrize("change", ODD_BUT_FITTING, ids=lambda f: str(ODD_BUT_FITTING.index(f)))
def test_an_odd_patch_that_fits_is_the_copying_readers_snapshot(plain_lines, monkeypatch, change):
    chains = _run(plain_lines[:4], monkeypatch)
    gpus = len(chains.copying["gpus"])
    gpu = next(n for n, item in enumerate(chains.copying["gpus"]) if item["processes"])
    chains.step(_gpu_patch(gpus, gpu, change(len(chains.copying["gpus"][gpu]["processes"]))))
    chains.step(_gpu_patch(gpus, gpu, {"power_draw_w": 3.5}))
    chains.step({"gpus": {"$list": [5] + [{}] * (gpus - 1)}})  # a GPU that is no object: the decoder's to refuse
    chains.step({"gpus": [], "timestamp": "2026-11-18T11:07:00.000+00:00"})
    assert chains.steps == 3 + 4 and chains.errors == 0


@pytest.mark.parametrize(
    "patch",
    [
        {"$removed": ["gpus"]},
        {"$removed": "gpus"},
        {"timestamp": None, "$removed": ["timestamp"]},
        {"gpus": {"$list": []}},
    ],
    ids=json.dumps,
)
def test_a_snapshot_patch_that_does_not_fit_changes_nothing(plain_lines, monkeypatch, patch):
    chains = _run(plain_lines[:3], monkeypatch)
    whole = {**_gpu_patch(len(chains.copying["gpus"]), 0, {"power_draw_w": 9.5}), **patch}  # a GPU changed first
    assert next(iter(whole)) == "gpus"
    chains.step(whole)
    assert chains.errors == 1 and chains.steps == 2


def test_random_patches_in_place_are_the_copying_ones():
    """Random JSON in a snapshot's shape (GPUs, processes, values inside them), random patches of it."""
    rng = random.Random(5)

    def value(depth: int) -> Any:
        kind = rng.randrange(6 if depth < 3 else 3)
        if kind == 0:
            return rng.choice([None, True, False, 0, 1, 1.0, -1, 2.5, "", "x", "$list"])
        if kind == 1:
            return rng.randrange(3)
        if kind == 2:
            return rng.choice(["a", "b"])
        if kind in (3, 4):
            return {rng.choice("abcd"): value(depth + 1) for _ in range(rng.randrange(4))}
        return [value(depth + 1) if rng.random() < 0.5 else {"k": value(depth + 1)} for _ in range(rng.randrange(3))]

    def process() -> dict[str, Any]:
        return {rng.choice(["pid", "cpu", "owner", "x"]): value(1) for _ in range(rng.randrange(4))}

    def gpu() -> Any:
        if rng.random() < 0.05:
            return value(2)
        made = {rng.choice(["a", "b", "c", "health"]): value(1) for _ in range(rng.randrange(4))}
        if rng.random() < 0.9:
            made["processes"] = [process() for _ in range(rng.randrange(3))]
        return made

    def snapshot(gpus: int) -> dict[str, Any]:
        return {"timestamp": rng.random(), "gpus": [gpu() for _ in range(gpus)], "h": value(1)}

    for _ in range(300):
        gpus = rng.randrange(1, 4)
        old, in_place = snapshot(gpus), None
        in_place = copy.deepcopy(old)
        for _ in range(4):
            new = snapshot(gpus if rng.random() < 0.9 else gpus + 1)
            patch = patch_of(old, new)
            before = _containers(in_place), _containers(old)
            made = apply_patch_in_place(in_place, patch)
            assert json.dumps(made, sort_keys=True) == json.dumps(new, sort_keys=True)
            assert _shared(before[0], made) == _shared(before[1], apply_patch(old, patch))
            old, in_place = new, made


def test_the_reader_in_place_refuses_as_the_copying_reader():
    whole = {"timestamp": 1.0, "hostname": "h", "gpus": [{"index": 0, "processes": []}, {"index": 1}]}
    for patch in ({"gpus": {"$list": [{}]}}, {"$removed": ["gpus"]}, {"gpus": {"$list": [{"$removed": "x"}, {}]}}):
        said = []
        for reader in (StreamReader(), StreamReader(in_place=True)):
            reader.read(json.dumps(whole).encode())
            with pytest.raises(StreamError) as raised:
                reader.read(json.dumps({"nvtopy_stream": 1, "patch": patch}).encode())
            said.append(str(raised.value))
        assert said[0] == said[1]
