"""The stream's patches: what the far side's :class:`StreamWriter` sends, the near side's :class:`StreamReader`
turns back into the very snapshot a whole line would have been -- and a patch that does not fit is refused."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.formats.contract import encode, snapshot_to_dict
from nvtopy.formats.stream import (
    MAX_STATE_BYTES,
    StreamError,
    StreamReader,
    StreamWriter,
    apply_patch,
    patch_of,
)
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import CADENCE, MONITOR_GROUPS

from .test_stream import FAULTS


def test_a_stream_of_patches_reads_back_as_every_whole_snapshot(sim, clock):
    backend = sim(gpus=4, seed=7, faults=parse_fault_specs(FAULTS, gpus=4), processes_per_gpu=6)
    collector = Collector(backend, timeline=False)
    writer, reader = StreamWriter(whole_every=7), StreamReader()
    whole = patched = 0
    sizes: list[tuple[int, int]] = []
    for second in range(1, 40):  # processes come and go, NVLink every 5 s, clocks every 2 s, a whole line every 7
        clock.advance(1)
        due = {g for g in MONITOR_GROUPS if CADENCE[g] == 0 or second % round(CADENCE[g]) == 0}
        snapshot = collector.collect(due, process_utilization=second % 2 == 0)
        line = writer.snapshot(snapshot)
        expected = snapshot_to_dict(snapshot, processes=True)
        got = reader.read(line.encode())
        assert got == expected
        assert json.dumps(got) == json.dumps(expected)  # the same types too: 1 is not 1.0, nor true
        if line.startswith('{"nvtopy_stream"'):
            patched += 1
            sizes.append((len(line), len(encode(expected))))
        else:
            whole += 1
    assert whole == 6 and patched == 33
    assert sum(p for p, _ in sizes) < 0.6 * sum(w for _, w in sizes)  # a patch is well under a whole line


def test_unchanged_parts_are_the_same_objects_as_before():
    before = {"gpus": [{"static": {"name": "H100"}, "util": 5, "links": [{"a": 1}, {"a": 2}]}], "timestamp": 1}
    after = {"gpus": [{"static": {"name": "H100"}, "util": 7, "links": [{"a": 1}, {"a": 3}]}], "timestamp": 2}
    patch = patch_of(before, after)
    assert patch == {"gpus": {"$list": [{"util": 7, "links": {"$list": [{}, {"a": 3}]}}]}, "timestamp": 2}
    made = apply_patch(before, patch)
    assert made == after
    assert made["gpus"][0]["static"] is before["gpus"][0]["static"]  # shared, so not decoded again
    assert made["gpus"][0]["links"][0] is before["gpus"][0]["links"][0]
    assert before["gpus"][0]["util"] == 5  # never changed in place


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1}, {"a": True}),
        ({"a": None}, {"a": 0}),
        ({"a": {"b": 1}}, {"a": 5}),
        ({"a": 5}, {"a": {"b": 1}}),
        ({"a": [1, 2]}, {"a": [1, 2, 3]}),
        ({"a": [{"x": 1}]}, {"a": [{"x": 1}, {"x": 2}]}),
        ({"a": [{"x": 1}]}, {"a": [3]}),
        ({"a": 1, "b": 2}, {"b": 2}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"c": 2}}),
        ({"a": []}, {"a": {}}),
    ],
)
def test_every_kind_of_change_round_trips_types_included(old: Any, new: Any):
    made = apply_patch(old, patch_of(old, new))
    assert json.dumps(made, sort_keys=True) == json.dumps(new, sort_keys=True)


def test_random_json_round_trips():
    rng = random.Random(3)

    def value(depth: int) -> Any:
        kind = rng.randrange(7 if depth < 4 else 4)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.choice([0, 1, -1, 2.5, 1e300, 1.0])
        if kind == 2:
            return rng.choice(["", "x", "$list", "$removed", "\x1b[31m"])
        if kind == 3:
            return rng.randrange(3)
        if kind in (4, 5):
            return {rng.choice("abcde"): value(depth + 1) for _ in range(rng.randrange(4))}
        return [value(depth + 1) if rng.random() < 0.5 else {"k": value(depth + 1)} for _ in range(rng.randrange(4))]

    for _ in range(2000):
        old, new = {"r": value(0)}, {"r": value(0)}
        assert json.dumps(apply_patch(old, patch_of(old, new)), sort_keys=True) == json.dumps(new, sort_keys=True)


def _line(data: Any) -> bytes:
    return (json.dumps(data) + "\n").encode()


WHOLE = {"timestamp": 1.0, "hostname": "h", "gpus": [{"index": 0}, {"index": 1}]}


@pytest.mark.parametrize(
    ("patch", "said"),
    [
        ({"gpus": {"$list": [{}]}}, "a patch of 1 items for a list of 2"),
        ({"gpus": 5}, None),  # a snapshot whose gpus are no list: the decoder's to refuse, not a patch error
        ({"$removed": "gpus"}, "$removed is 'gpus', not a list of keys"),
        ({"$removed": ["gpus"]}, "a patch that makes no snapshot"),
    ],
)
def test_a_patch_that_does_not_fit_is_refused(patch: dict, said: str | None):
    reader = StreamReader()
    reader.read(_line(WHOLE))
    if said is None:
        assert reader.read(_line({"nvtopy_stream": 1, "patch": patch}))["gpus"] == 5
        return
    with pytest.raises(StreamError, match=said.replace("$", r"\$")):
        reader.read(_line({"nvtopy_stream": 1, "patch": patch}))


def test_a_patch_before_any_snapshot_or_that_is_no_object_is_refused():
    with pytest.raises(StreamError, match="a patch before any snapshot"):
        StreamReader().read(_line({"nvtopy_stream": 1, "patch": {}}))
    reader = StreamReader()
    reader.read(_line(WHOLE))
    with pytest.raises(StreamError, match="a patch that is"):
        reader.read(_line({"nvtopy_stream": 1, "patch": [1]}))


def test_patches_cannot_grow_the_state_without_bound():
    reader = StreamReader()
    reader.read(_line(WHOLE))
    chunk = "x" * (1 << 20)
    with pytest.raises(StreamError, match="patches past 64 MiB without a whole snapshot"):
        for n in range(MAX_STATE_BYTES // len(chunk) + 2):
            reader.read(_line({"nvtopy_stream": 1, "patch": {f"k{n}": chunk}}))
    reader.read(_line(WHOLE))  # a whole line begins again
    assert reader.read(_line({"nvtopy_stream": 1, "patch": {"k": 1}}))["k"] == 1
