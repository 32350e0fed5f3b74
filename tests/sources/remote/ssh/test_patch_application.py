"""The I/O thread's patch application (``formats.stream.apply_patch``) gives what a key-by-key application gave.

Why here: ``apply_patch`` sets an object's values in one C call and applies only its nested patches in Python
(``--ssh``'s I/O thread applies 64 hosts' patches a second). A far side is untrusted: these hold it to the
former key-by-key application (:func:`_reference`, as it was) on patches no ``patch_of`` would make too --
keys removed and set in one patch, objects where lists were, patches of keys that are not there -- value for
value, key order, errors and shared (unchanged) parts included.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from nvtopy.formats.stream import LIST, REMOVED, StreamError, StreamReader, apply_patch, patch_of, read_line

from . import fake_ssh


def _reference(old: Any, patch: Any) -> Any:
    """``apply_patch`` as it was before its one-call fast path: every key of the patch in its order."""
    if type(patch) is not dict:
        return patch
    if type(old) is list:
        items = patch.get(LIST)
        if len(patch) != 1 or type(items) is not list:
            return patch
        if len(items) != len(old):
            raise StreamError(f"a patch of {len(items)} items for a list of {len(old)}")
        return [_reference(a, b) if b else a for a, b in zip(old, items, strict=True)]
    if type(old) is not dict:
        return patch
    if not patch:
        return old
    new = old.copy()
    for key, value in patch.items():
        if type(value) is dict:
            new[key] = _reference(old[key], value) if key in old else value
        elif key == REMOVED:
            if type(value) is not list:
                raise StreamError(f"{REMOVED} is {value!r}, not a list of keys")
            for gone in value:
                if type(gone) is str:
                    new.pop(gone, None)
        else:
            new[key] = value
    return new


def _outcome(apply: Any, old: Any, patch: Any) -> tuple[str, Any]:
    try:
        made = apply(old, patch)
    except StreamError as exc:
        return "refused", str(exc).split(" is ")[0]  # the message quotes the value its own way
    return "made", json.dumps(made)  # key order included (json.dumps keeps it)


def _same_objects(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` share the same objects at the same places (an unchanged part is never copied)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return all(a[key] is b[key] or _same_objects(a[key], b[key]) for key in a)
    if type(a) is list:
        return len(a) == len(b) and all(x is y or _same_objects(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_a_far_sides_patches_make_the_same_snapshots_sharing_the_same_parts():
    lines = [line.encode() for line in fake_ssh.snapshot_lines(gpus=4, count=8)]
    reader = StreamReader()
    state = reader.read(lines[0])
    for line in lines[1:]:
        said = read_line(line)
        patch = said.patch  # type: ignore[union-attr]
        made, expected = apply_patch(state, patch), _reference(state, patch)
        assert json.dumps(made) == json.dumps(expected)
        assert _same_objects(made, expected)
        unchanged = [n for n, item in enumerate(patch["gpus"][LIST]) if not item]
        assert all(made["gpus"][n] is state["gpus"][n] for n in unchanged)
        state = made


@pytest.mark.parametrize(
    ("old", "patch"),
    [
        ({"a": 1, "b": 2}, {REMOVED: ["a"], "a": 3}),  # removed, then set: set
        ({"a": 1, "b": 2}, {"a": 3, REMOVED: ["a"]}),  # set, then removed: removed
        ({"a": 1}, {REMOVED: {"x": 1}}),  # an object as $removed: a value, as any key's
        ({"a": 1, REMOVED: {"x": 1}}, {REMOVED: {"x": 2}}),
        ({"a": 1}, {REMOVED: "a"}),
        ({"a": [1, 2]}, {"a": {LIST: [{}, {}]}}),
        ({"a": [{"x": 1}, {"y": 2}]}, {"a": {LIST: [{"x": 5}, {}]}}),
        ({"a": [{"x": 1}]}, {"a": {LIST: [{}, {}]}}),  # refused: the lengths differ
        ({"a": [{"x": 1}]}, {"a": {LIST: [{}], "other": 1}}),  # an object where a list was
        ({"a": [1]}, {"a": {LIST: 5}}),
        ({"a": 5}, {"a": {"x": 1}}),  # an object where a number was
        ({"a": {"x": 1}}, {"a": {}}),  # the very object
        ({"a": {"x": 1}}, {"b": {"y": 1}}),  # a new key's object: the value itself
        ({"a": {"x": {"y": 1}}}, {"a": {"x": {"y": 2, "z": {"w": 1}}}}),
        ({"a": [[1], [2]]}, {"a": {LIST: [{LIST: [3]}, {}]}}),
        ({"a": [{"x": 1}, 7]}, {"a": {LIST: [{"x": 2}, {"y": 1}]}}),
    ],
)
def test_patches_no_far_side_should_send_are_applied_as_before(old: Any, patch: Any):
    assert _outcome(apply_patch, old, patch) == _outcome(_reference, old, patch)


def test_random_patches_are_applied_as_before():
    rng = random.Random(29)
    keys = ["a", "b", "c", LIST, REMOVED]

    def value(depth: int) -> Any:
        kind = rng.randrange(6 if depth < 4 else 3)
        if kind == 0:
            return rng.choice([None, True, 0, 1.5, "a", "b"])
        if kind == 1:
            return [rng.choice("abc") for _ in range(rng.randrange(3))]
        if kind == 2:
            return {}
        if kind == 3:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randrange(4))}

    for _ in range(3000):
        old = value(0)
        patch = patch_of(old, value(0)) if rng.random() < 0.3 else value(0)
        assert _outcome(apply_patch, old, patch) == _outcome(_reference, old, patch), (old, patch)
