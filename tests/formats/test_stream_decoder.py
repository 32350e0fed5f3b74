"""A source's lines decoded one after another (``SnapshotDecoder``): the snapshots of the one-shot decoder, cheaper.

Each line of a simulated 8-GPU node -- faults, a MIG GPU, NVLinks (one down, with
errors), processes coming and going, a GPU that falls off the bus, the far side's
cadence (slow groups repeated between reads) -- is decoded three ways, which must
agree: by one :class:`SnapshotDecoder` that has seen the lines before, by
:func:`snapshot_from_dict`, and by the checked walk (every value through its
checker, no common-case path, no memory: what ``snapshot_from_dict`` was before the
fast paths). Then hostile lines after good ones: a value that changes type between
lines (``1``, ``1.0`` and ``true`` are equal to Python), the same object with one
field changed, damage: the same snapshot, or the same error (type and words).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
from typing import Any

import pytest

from nvtopy.formats import contract_decoder as decoder
from nvtopy.formats.contract import encode, snapshot_to_dict
from nvtopy.formats.contract_decoder import SnapshotDecoder, snapshot_from_dict
from nvtopy.model import ALL_GROUPS, Snapshot
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import CADENCE

FAULTS = (
    "mig=3@1",  # a MIG GPU: devices with their own readings, processes on instances
    "xid=79:6@2",  # GPU 2 falls off the bus 6 s in
    "nvlink-down=3@0",
    "nvlink-errors=5@3",
    "ecc@4",
    "hot@5",
    "idle-held@6",
    "access-denied",  # other users' processes: user and command unreadable
    "vanished",
)


def _lines(sim: Any, clock: Any, count: int, *, cadence: bool, faults: tuple[str, ...] = FAULTS) -> list[str]:
    """``count`` lines of a node as ``nvtopy record`` writes them; ``cadence``: slow groups read as the poller does."""
    from nvtopy.backends.simulated.faults import parse_fault_specs

    backend = sim(gpus=8, seed=11, processes_per_gpu=6, lifetime_scale=0.02, faults=parse_fault_specs(faults, 8))
    collector = Collector(backend)
    lines = []
    for tick in range(count):
        clock.advance(1)
        groups = {g for g in ALL_GROUPS if not cadence or tick % max(1, int(CADENCE[g])) == 0}
        snapshot = collector.collect(groups, process_utilization=not cadence or tick % 2 == 0)
        lines.append(encode(snapshot_to_dict(snapshot)))
    return lines


@pytest.fixture(scope="module")
def node_lines() -> list[str]:
    from nvtopy.backends.simulated.backend import SimulatedBackend

    from ..conftest import ManualClock

    clock = ManualClock()
    made: list[SimulatedBackend] = []

    def sim(**kwargs: Any) -> SimulatedBackend:
        backend = SimulatedBackend(clock=clock, viewer="alice", **kwargs)
        made.append(backend)
        return backend

    try:
        return _lines(sim, clock, 14, cadence=True) + _lines(sim, clock, 6, cadence=False)
    finally:
        for backend in made:
            backend.close()


_LEAVES = frozenset({str, int, float, bool, type(None)})


def fresh(data: Any) -> Any:
    """``copy.deepcopy(data)`` for decoded JSON (dicts, lists and immutable leaves, nothing shared), 4x faster.

    The same result: new dicts and lists, the leaves themselves (deepcopy keeps a str, an int or a float, NaN
    included, as it is). The decoders are given copies as they may keep or change what they get; deepcopy was
    half of this module's CPU time.
    """
    kind = type(data)
    if kind is dict:
        return {key: fresh(item) for key, item in data.items()}
    if kind is list:
        return [fresh(item) for item in data]
    return data if kind in _LEAVES else copy.deepcopy(data)


def checked(data: Any) -> Snapshot:
    """The checked walk: every value through its checker, in the order snapshot_from_dict always checked them."""
    return decoder._checked_snapshot(data)


def outcome(decode: Any, data: Any) -> tuple[str, Any]:
    """What decoding ``data`` gives: ("snapshot", it, and its text) or ("error", its type and words)."""
    try:
        snapshot = decode(data)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        return "error", (type(exc), str(exc))
    return "snapshot", (snapshot, repr(snapshot))  # repr: -0.0 and 0.0 are equal, not the same text


def test_the_node_is_what_the_test_says(node_lines):
    """The lines hold what the comparisons below are about (else they would prove little)."""
    lines = [json.loads(line) for line in node_lines]
    gpus = [gpu for line in lines for gpu in line["gpus"]]
    assert any(gpu["mig_devices"] for gpu in gpus), "a MIG GPU"
    assert any(gpu["lost"] for gpu in gpus) and not all(gpu["lost"] for gpu in gpus), "a GPU lost on the way"
    assert any(gpu["health"]["readings"]["nvlink"]["links"] for gpu in gpus), "NVLinks"
    pids = [{p["pid"] for gpu in line["gpus"] for p in gpu["processes"]} for line in lines]
    assert any(a - b for a, b in itertools.pairwise(pids)), "processes end"
    assert any(b - a for a, b in itertools.pairwise(pids)), "processes start"
    assert any(p["owner"] for gpu in gpus for p in gpu["processes"]), "owners"
    links = [[gpu["health"]["readings"]["nvlink"]["links"] for gpu in line["gpus"]] for line in lines]
    assert any(a == b for a, b in itertools.pairwise(links)), "links repeated between reads"


def test_a_stream_decodes_every_line_as_the_one_shot_and_the_checked_walk(node_lines):
    stream = SnapshotDecoder()
    previous = None
    for line in node_lines:
        data = json.loads(line)
        expected = checked(json.loads(line))
        got = stream.decode(data)
        assert got == expected
        assert repr(got) == repr(expected)
        assert snapshot_from_dict(json.loads(line)) == expected
        if previous is not None:  # what repeats is reused: the same frozen objects
            assert all(a.static is b.static for a, b in zip(previous.gpus, got.gpus, strict=True))
        previous = got


def test_the_common_case_never_takes_the_checked_path(node_lines, monkeypatch):
    """The fast paths are taken (a regression that sends every line through the checkers is caught here)."""
    checked_parts = []
    for name in ("_checked_gpu", "_process"):
        monkeypatch.setattr(decoder, name, lambda *args, _name=name: checked_parts.append(_name))
    stream = SnapshotDecoder()
    for line in node_lines:
        stream.decode(json.loads(line))
    assert checked_parts == []
    assert decoder._PROCESSES_BY_POSITION, "processes are built a column at a time"


# ---------------------------------------------------------------- hostile lines after good ones


def _gpu(data: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return data["gpus"][index]


def _first_process(data: dict[str, Any]) -> dict[str, Any]:
    return next(p for gpu in data["gpus"] for p in gpu["processes"] if p["owner"])


def _link(data: dict[str, Any]) -> dict[str, Any]:
    return _gpu(data)["health"]["readings"]["nvlink"]["links"][0]


CHANGES = {
    # a value that changes type between lines, equal to Python
    "slowdown int to float": lambda d: _gpu(d).update(temperature_slowdown_c=float(_gpu(d)["temperature_slowdown_c"])),
    "mig_mode true to 1": lambda d: _gpu(d).update(mig_mode=1),
    "ecc_mode true to 1": lambda d: _gpu(d).update(ecc_mode=1),
    "power limit to -0.0": lambda d: _gpu(d).update(power_min_limit_w=-0.0),
    "power limit to 0": lambda d: _gpu(d).update(power_min_limit_w=0),
    "uid int to float": lambda d: _first_process(d)["owner"].update(uid=1000.0),
    "uid to true": lambda d: _first_process(d)["owner"].update(uid=True),
    "link version to float": lambda d: _link(d).update(version=4.0),
    "link active to 1": lambda d: _link(d).update(active=1),
    "link errors to true": lambda d: _link(d).update(errors=True),
    "pid to float": lambda d: _first_process(d).update(pid=float(_first_process(d)["pid"])),
    "foreign to 0": lambda d: _first_process(d).update(foreign=0),
    "index to true": lambda d: _gpu(d).update(index=True),
    # the same object with one field changed
    "owner name": lambda d: _first_process(d)["owner"].update(name="another"),
    "owner kind unknown": lambda d: _first_process(d)["owner"].update(kind="jail"),
    "owner name escaped": lambda d: _first_process(d)["owner"].update(name="a\\x1bb"),
    "link remote escaped": lambda d: _link(d).update(remote="\\x07peer"),
    "command escaped": lambda d: _first_process(d).update(command="python\\ttrain.py"),
    "status null": lambda d: _first_process(d).update(status=None),
    "flags": lambda d: _first_process(d).update(flags=["idle-held"]),
    "process reason": lambda d: _first_process(d).update(unavailable={"sm_percent": "not_supported"}),
    "gpu reason": lambda d: _gpu(d)["unavailable"].update(fan_percent="lost"),
    "pstate P07": lambda d: _gpu(d).update(pstate="P07"),
    "pstate number": lambda d: _gpu(d).update(pstate=3),
    "serial": lambda d: _gpu(d).update(serial="0000"),
    "health verdict": lambda d: _gpu(d)["health"].update(verdict="CRITICAL"),
    "huge figure": lambda d: _first_process(d).update(ns_pid=2**70),
    "nan figure": lambda d: _gpu(d).update(power_draw_w=float("nan")),
    "process key missing": lambda d: _first_process(d).pop("host_pid"),
    "link key missing": lambda d: _link(d).pop("errors"),
    # damage
    "owner not an object": lambda d: _first_process(d).update(owner=["docker"]),
    "owner name a number": lambda d: _first_process(d)["owner"].update(name=7),
    "unknown reason": lambda d: _gpu(d)["unavailable"].update(fan_percent="broken"),
    "process type": lambda d: _first_process(d).update(type="Z"),
    "process a list": lambda d: _gpu(d)["processes"].append([1, 2]),
    "link a string": lambda d: _gpu(d)["health"]["readings"]["nvlink"]["links"].append("link"),
    "readings a list": lambda d: _gpu(d)["health"].update(readings=[]),
    "health a string": lambda d: _gpu(d).update(health="ok"),
    "gpu a number": lambda d: d["gpus"].append(3),
    "mig devices an object": lambda d: _gpu(d).update(mig_devices={}),
    "findings an object": lambda d: _gpu(d)["health"].update(findings={}),
    "hostname a number": lambda d: d.update(hostname=7),
    "two errors, the first wins": lambda d: (_gpu(d).update(lost="yes"), _first_process(d).update(pid=-1)),
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_a_hostile_line_after_good_ones_decodes_or_fails_as_the_checked_walk(node_lines, change):
    stream = SnapshotDecoder()
    for line in node_lines[:3]:
        stream.decode(json.loads(line))
    hostile = json.loads(node_lines[3])
    CHANGES[change](hostile)
    expected = outcome(checked, fresh(hostile))
    assert outcome(stream.decode, hostile) == expected
    assert outcome(snapshot_from_dict, fresh(hostile)) == expected
    after = json.loads(node_lines[4])  # the decoder goes on as before
    assert outcome(stream.decode, after) == outcome(checked, json.loads(node_lines[4]))


POOL: tuple[Any, ...] = (
    None,
    0,
    1,
    -1,
    1.0,
    -0.0,
    0.5,
    True,
    False,
    "",
    "x",
    "P2",
    "C",
    "not_supported",
    "a\\x41",
    [],
    {},
    [1],
    ["x"],
    {"a": 1},
    2**70,
    -(2**70),
    float("nan"),
    float("inf"),
)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))] or [path]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*path, i))] or [path]
    return [path]


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def test_random_damage_decodes_or_fails_as_the_checked_walk(node_lines):
    """Seeded: leaves of real lines set to values of every JSON type, one to three at a time, after a good line."""
    rng = random.Random(29)
    parsed = [json.loads(line) for line in node_lines]
    leaves = [[leaf for leaf in _leaves(data) if leaf] for data in parsed]
    kinds = []
    for trial in range(400):
        at = rng.randrange(1, len(node_lines))
        stream = SnapshotDecoder()
        stream.decode(json.loads(node_lines[at - 1]))
        hostile = json.loads(node_lines[at])
        for path in rng.sample(leaves[at], rng.randint(1, 3)):
            _set(hostile, path, fresh(rng.choice(POOL)))
        expected = outcome(checked, fresh(hostile))
        assert outcome(stream.decode, fresh(hostile)) == expected, f"trial {trial}"
        assert outcome(snapshot_from_dict, hostile) == expected, f"trial {trial}"
        kinds.append(expected[0])
    assert 40 < kinds.count("error") < 360, "damage that decodes and damage that fails, both"


# ---------------------------------------------------------------- bounded


def test_the_memory_holds_two_lines_at_most_whatever_comes_and_goes(node_lines):
    """Owners, links and GPUs that change every line: what is kept stays that of the last two lines."""
    stream = SnapshotDecoder()
    template = json.loads(node_lines[0])
    per_line = []
    for number in range(60):
        data = fresh(template)
        for gpu in data["gpus"]:
            gpu["serial"] = f"serial-{number}"  # a new static part each line
            for link in gpu["health"]["readings"]["nvlink"]["links"] or ():
                link["errors"] = number
            for process in gpu["processes"]:
                if process["owner"]:
                    process["owner"]["name"] = f"job-{number}-{process['pid']}"  # a new owner each line
        assert stream.decode(data) == checked(fresh(data))
        per_line.append(stream.remembered)
    assert max(per_line) == max(per_line[:3]), "no growth with churn"
    # a GPU: its static, links, reasons, health, and its static, readings, reasons and health known by identity;
    # a process: its owner, by values and by identity
    parts = 8 * 8 + 2 * sum(len(gpu["processes"]) for gpu in template["gpus"]) + 1
    assert max(per_line) <= 2 * parts


def _placed_by_hand(snapshot: Snapshot, first: int, host: str, taken: float) -> list[Any]:
    """What placing a snapshot's GPUs in a fleet means, by copying: the decoder must build exactly this."""
    import dataclasses

    gpus = []
    for offset, gpu in enumerate(snapshot.gpus):
        index = first + offset
        static = dataclasses.replace(gpu.static, index=index, host=host, host_index=gpu.static.index)
        events = tuple(dataclasses.replace(e, gpu_index=index) for e in gpu.health.events)
        gpus.append(
            (
                static,
                dataclasses.replace(gpu.sample, timestamp=taken),
                tuple(dataclasses.replace(p, gpu_index=index, host=host) for p in gpu.processes),
                dataclasses.replace(gpu.health, events=events),
            )
        )
    return gpus


def test_a_placed_line_is_the_line_copied_into_its_place(node_lines):
    stream = SnapshotDecoder()
    for n, line in enumerate(node_lines):
        data = json.loads(line)
        place = decoder.Placement(first=3 + n, host="gpu-b", taken=1_800_000_000.0 + n)
        placed = stream.decode(data, place=place)
        got = [(g.static, g.sample, g.processes, g.health) for g in placed.gpus]
        assert got == _placed_by_hand(snapshot_from_dict(data), place.first, place.host, place.taken)
        assert all(p.host == "gpu-b" for g in placed.gpus for p in g.processes)


def test_unchanged_links_of_a_patched_stream_are_reused_on_every_line(sim, clock):
    """A patched line shares its unchanged parts with the line before; the memo must still know them (its key
    is the values, not how many references they have: marshal's format 2)."""
    from nvtopy.formats.stream import StreamReader, StreamWriter

    backend = sim(gpus=2, seed=3)
    collector = Collector(backend, timeline=False)
    writer, reader, stream = StreamWriter(), StreamReader(), SnapshotDecoder()
    previous = None
    reused = rebuilt = 0
    for second in range(1, 13):
        clock.advance(1)
        due = {g for g in ALL_GROUPS if CADENCE[g] == 0 or second % round(CADENCE[g]) == 0}
        data = reader.read(writer.snapshot(collector.collect(due)).encode())
        snapshot = stream.decode(data)
        if previous is not None:
            for before, now in zip(previous.gpus, snapshot.gpus, strict=True):
                if before.sample.nvlinks == now.sample.nvlinks:
                    assert before.sample.nvlinks is now.sample.nvlinks
                    reused += 1
                else:
                    rebuilt += 1
        previous = snapshot
    assert reused >= 14 and rebuilt >= 2  # NVLink is read every 5 s: two reads in 12 lines, the rest the same


# ---------------------------------------------------------------- a patched stream: parts shared with the line before


def _patched(node_lines: list[str]) -> list[dict[str, Any]]:
    """The lines as ``--ssh`` gets them: each a patched copy of the one before, sharing every unchanged part."""
    from nvtopy.formats.stream import apply_patch, patch_of

    states: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for line in node_lines:
        data = json.loads(line)
        states.append(data if previous is None else apply_patch(states[-1], patch_of(previous, data)))
        previous = data
    return states


def _links_of(state: dict[str, Any]) -> list[Any]:
    return [gpu["health"]["readings"]["nvlink"]["links"] for gpu in state["gpus"]]


def test_a_patched_stream_decodes_every_line_as_the_checked_walk(node_lines):
    """What the decoder knows by identity (the very same JSON object as the line before) is never a stale part."""
    states = _patched(node_lines)
    shared = sum(a is b for x, y in itertools.pairwise(states) for a, b in zip(_links_of(x), _links_of(y), strict=True))
    assert shared >= 20, "the lines share unchanged links (else the identity path is not exercised)"
    for place in (None, decoder.Placement(first=5, host="gpu-c", taken=1_800_000_000.0)):
        stream = SnapshotDecoder()
        for n, state in enumerate(states):
            got = stream.decode(state, place=place)
            expected = checked(fresh(state))
            if place is not None:
                expected_parts = _placed_by_hand(expected, place.first, place.host, place.taken)
                assert [(g.static, g.sample, g.processes, g.health) for g in got.gpus] == expected_parts, n
            else:
                assert got == expected, n
                assert repr(got) == repr(expected), n


def test_a_changed_link_in_a_patched_line_is_not_missed(node_lines):
    """One value of one link changes, everything else shared: the new value is read, the rest reused."""
    from nvtopy.formats.stream import apply_patch

    state = json.loads(node_lines[0])
    stream = SnapshotDecoder()
    first = stream.decode(state)
    gpu = next(n for n, links in enumerate(_links_of(state)) if links)
    links = state["gpus"][gpu]["health"]["readings"]["nvlink"]["links"]
    errors = links[0]["errors"] + 7
    patch_links = {"$list": [{"errors": errors}] + [{} for _ in links[1:]]}
    patch = {"gpus": {"$list": [{} for _ in state["gpus"]]}}
    patch["gpus"]["$list"][gpu] = {"health": {"readings": {"nvlink": {"links": patch_links}}}}
    changed = apply_patch(state, patch)
    assert changed["gpus"][gpu - 1 if gpu else gpu + 1] is state["gpus"][gpu - 1 if gpu else gpu + 1]
    second = stream.decode(changed)
    assert second.gpus[gpu].sample.nvlinks[0].errors == errors
    assert second.gpus[gpu].sample.nvlinks[1:] == first.gpus[gpu].sample.nvlinks[1:]
    assert second == checked(fresh(changed))
    others = [n for n in range(len(state["gpus"])) if n != gpu and first.gpus[n].sample.nvlinks]
    assert all(second.gpus[n].sample.nvlinks is first.gpus[n].sample.nvlinks for n in others)


def test_a_changed_owner_in_a_patched_line_is_not_missed(node_lines):
    """One process's owner renamed, everything else shared with the line before: the new name is read."""
    from nvtopy.formats.stream import apply_patch

    state = json.loads(node_lines[0])
    stream = SnapshotDecoder()
    first = stream.decode(state)
    gpu, at = next(
        (g, n) for g, item in enumerate(state["gpus"]) for n, p in enumerate(item["processes"]) if p["owner"]
    )
    processes = [{} for _ in state["gpus"][gpu]["processes"]]
    processes[at] = {"owner": {"name": "renamed"}}
    patch = {"gpus": {"$list": [{} for _ in state["gpus"]]}}
    patch["gpus"]["$list"][gpu] = {"processes": {"$list": processes}}
    changed = apply_patch(state, patch)
    second = stream.decode(changed)
    assert second.gpus[gpu].processes[at].owner.name == "renamed"
    assert second == checked(fresh(changed))
    kept = [(g, n) for g, item in enumerate(first.gpus) for n, p in enumerate(item.processes) if p.owner]
    assert all(
        second.gpus[g].processes[n].owner is first.gpus[g].processes[n].owner for g, n in kept if (g, n) != (gpu, at)
    ), "the unchanged owners are the very same objects"


# ---------------------------------------------------------------- a patched line decoded from its patch (--ssh)


def _states_and_patches(lines: list[str]) -> list[tuple[dict[str, Any], Any]]:
    """Each line as ``--ssh`` gets it -- the state a patch makes of the one before -- with that patch (None: whole)."""
    from nvtopy.formats.stream import apply_patch, patch_of

    made: list[tuple[dict[str, Any], Any]] = []
    previous: dict[str, Any] | None = None
    for line in lines:
        data = json.loads(line)
        if previous is None:
            made.append((data, None))
        else:
            patch = patch_of(previous, data)
            made.append((apply_patch(made[-1][0], patch), patch))
        previous = data
    return made


def _decode_from_patches(
    pairs: list[tuple[dict[str, Any], Any]], monkeypatch: Any, tried: list[tuple[Any, bool]] | None = None
) -> tuple[list[Any], int]:
    """Every state decoded placed, from its patch where there is one; (each outcome, GPUs built from their parts).
    ``tried``: each GPU's patch tried from its last parts, and whether it was built so."""
    built = 0
    real = SnapshotDecoder._patched_gpu

    def counted(self: Any, gpu: Any, change: Any, *args: Any) -> Any:
        nonlocal built
        made = real(self, gpu, change, *args)
        built += made is not None
        if tried is not None:
            tried.append((change, made is not None))
        return made

    monkeypatch.setattr(SnapshotDecoder, "_patched_gpu", counted)
    stream = SnapshotDecoder()
    outcomes = []
    for n, (state, patch) in enumerate(pairs):
        place = decoder.Placement(first=5, host="gpu-c", taken=1_800_000_000.0 + n)
        outcomes.append(outcome(lambda data, p=place, q=patch: stream.decode(data, place=p, patch=q), state))
    return outcomes, built


def _expected(pairs: list[tuple[dict[str, Any], Any]]) -> list[Any]:
    """What the checked walk makes of each state, placed as ``_decode_from_patches`` places it."""
    made = []
    for n, (state, _) in enumerate(pairs):
        kind, value = outcome(checked, fresh(state))
        if kind == "snapshot":
            value = _placed_by_hand(value[0], 5, "gpu-c", 1_800_000_000.0 + n)
        made.append((kind, value))
    return made


def _parts(outcomes: list[Any]) -> list[Any]:
    return [
        (kind, [(g.static, g.sample, g.processes, g.health) for g in value[0].gpus] if kind == "snapshot" else value)
        for kind, value in outcomes
    ]


def test_a_line_decoded_from_its_patch_is_the_whole_lines_snapshot(node_lines, monkeypatch):
    """A MIG GPU, a lost GPU, links, processes coming and going, unreadable users: from the patch or whole, the same."""
    pairs = _states_and_patches(node_lines)
    outcomes, _ = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)


@pytest.fixture(scope="module")
def plain_lines() -> list[str]:
    """A busy node with no fault, read at the poller's cadence: what most hosts of a fleet send, line after line."""
    from nvtopy.backends.simulated.backend import SimulatedBackend

    from ..conftest import ManualClock

    clock = ManualClock()
    backend = SimulatedBackend(clock=clock, viewer="alice", gpus=8, seed=5, processes_per_gpu=4, lifetime_scale=0.05)
    try:
        return _lines(lambda **_: backend, clock, 24, cadence=True, faults=())
    finally:
        backend.close()


def test_a_busy_nodes_lines_decoded_from_their_patches_are_the_whole_lines(plain_lines, monkeypatch):
    pairs = _states_and_patches(plain_lines)
    outcomes, built = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert built >= 8 * 10, "GPUs were built from their last parts (else this proves nothing)"
    assert built < 8 * (len(pairs) - 1), "and some from the whole line (health read, processes that came)"


HOSTILE_FIGURES = [
    ("utilization_gpu_percent", True),  # true is no 1 to the checks
    ("utilization_gpu_percent", 1.0),
    ("utilization_gpu_percent", 2**70),
    ("power_draw_w", -5.0),
    ("temperature_c", 10**30),
    ("memory_used_bytes", "12"),
    ("memory_used_bytes", [1]),
    ("memory_used_bytes", {"x": 1}),
    ("ecc_mode", "ena\\u0062led"),  # a text with an escape
    ("compute_mode", 3),
    ("compute_mode", "Exclusive\\x07Process"),  # a text with an escape: unescaped as a whole line's are
    ("compute_mode", "Default"),
    ("persistence_mode", 1),
    ("clock_sm_mhz", None),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE_FIGURES, ids=lambda v: repr(v)[:20])
def test_a_hostile_figure_in_a_patch_decodes_or_fails_as_the_whole_line(plain_lines, monkeypatch, key, value):
    """A patch changes one figure of one GPU to something odd, then back: each line as the checked walk says."""
    pairs = _states_and_patches(plain_lines[:4])
    base = pairs[-1][0]
    gpus = len(base["gpus"])
    for figure in (value, base["gpus"][1].get(key, 0), value):
        patch = {"gpus": {"$list": [{} for _ in range(gpus)]}}
        patch["gpus"]["$list"][1] = {key: figure}
        if type(figure) is dict:
            patch["gpus"]["$list"][1] = {key: {"$list": []}}
        from nvtopy.formats.stream import apply_patch

        try:
            state = apply_patch(pairs[-1][0], patch)
        except ValueError:
            continue
        pairs.append((state, patch))
    outcomes, built = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert built >= 7, "GPUs of the patched lines were built from their parts (a line that fails is whole after)"


HOSTILE_PROCESS_FIGURES = [
    ("gpu_memory_bytes", 2**70),  # out of range: None and its reason, then a plain value again
    ("gpu_memory_bytes", -1),
    ("cpu_percent", True),
    ("cpu_percent", "5"),
    ("running_seconds", 1e300),
    ("sm_percent", None),
    ("pid", 77),  # not a figure: another process
    ("command", "python train\\u0021"),
    ("owner", None),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE_PROCESS_FIGURES, ids=lambda v: repr(v)[:20])
def test_a_hostile_process_figure_in_a_patch_decodes_or_fails_as_the_whole_line(plain_lines, monkeypatch, key, value):
    from nvtopy.formats.stream import apply_patch

    pairs = _states_and_patches(plain_lines[:4])
    base = pairs[-1][0]
    gpu = next(n for n, item in enumerate(base["gpus"]) if item["processes"])
    count = len(base["gpus"][gpu]["processes"])
    for figure in (value, base["gpus"][gpu]["processes"][0].get(key, 1), value, 12345):
        processes = [{} for _ in range(count)]
        processes[0] = {key: figure}
        patch = {"gpus": {"$list": [{} for _ in base["gpus"]]}}
        patch["gpus"]["$list"][gpu] = {"processes": {"$list": processes}, "power_draw_w": 100.5}
        pairs.append((apply_patch(pairs[-1][0], patch), patch))
    outcomes, built = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert built >= 7, "GPUs of the patched lines were built from their parts (a line that fails is whole after)"


def test_a_patch_of_a_line_the_decoder_did_not_see_is_not_used(plain_lines):
    """The patch is from the line before; the decoder decoded another one (a refresh skipped a line): whole."""
    pairs = _states_and_patches(plain_lines[:6])
    stream = SnapshotDecoder()
    place = decoder.Placement(first=0, host="h", taken=1.0)
    stream.decode(pairs[0][0], place=place)
    stream.decode(pairs[1][0], place=place, patch=pairs[1][1])
    # line 3's patch applies to line 2, which this decoder never saw: hosts.py passes no patch then, and a decoder
    # given one anyway (wrongly) must at least not build from line 1's parts -- so the source must not pass it
    got = stream.decode(pairs[3][0], place=place)
    assert [(g.static, g.sample, g.processes) for g in got.gpus] == [
        (g[0], g[1], g[2]) for g in _placed_by_hand(checked(fresh(pairs[3][0])), 0, "h", 1.0)
    ]


def test_the_memory_of_a_patched_stream_stays_that_of_two_lines(plain_lines):
    """Lines decoded from their patches carry what the memo knew forward; with a GPU's processes replaced on every
    line (a new pid, a new owner), what is kept must still not grow: owners of ended processes are let go."""
    from nvtopy.formats.stream import apply_patch

    state = _states_and_patches(plain_lines[:1])[0][0]
    gpu = next(n for n, item in enumerate(state["gpus"]) if item["processes"])
    stream = SnapshotDecoder()
    place = decoder.Placement(0, "h", 0.0)
    stream.decode(state, place=place)
    sizes = []
    for n in range(1, 200):
        processes = fresh(state["gpus"][gpu]["processes"])
        for at, process in enumerate(processes):
            process["pid"] = 100_000 + n * 10 + at  # another process
            process["owner"] = {"kind": "slurm", "name": f"job-{n}-{at}", "uid": 1000}
        changes = [{"power_draw_w": 100.0 + n} for _ in state["gpus"]]
        changes[gpu] = {"processes": {"$list": [dict(p) for p in processes]}, "power_draw_w": 50.0 + n}
        patch = {"timestamp": state["timestamp"], "gpus": {"$list": changes}}
        state = apply_patch(state, patch)
        got = stream.decode(state, place=place, patch=patch)
        assert [p.pid for p in got.gpus[gpu].processes] == [p["pid"] for p in processes]
        sizes.append(stream.remembered)
    assert max(sizes[100:]) <= 2 * max(sizes[:20]), f"the memory grew with churn: {sizes[:20]} ... {sizes[-5:]}"


def _nvlink_patch(gpus: int, gpu: int, nvlink: Any, **health: Any) -> dict[str, Any]:
    """A line's patch that changes GPU ``gpu``'s NVLink readings (and ``health``'s other keys) alone."""
    changes: list[dict[str, Any]] = [{} for _ in range(gpus)]
    changes[gpu] = {"health": {"readings": {"nvlink": nvlink}, **health}}
    return {"gpus": {"$list": changes}}


def test_every_gpus_nvlink_readings_changed_are_decoded_from_the_patch(plain_lines, monkeypatch):
    """Every 5 s the far side reads every GPU's NVLinks again, so each GPU's health patch is its links' rates: those
    GPUs are built from their last parts with the links read again -- into the whole line's snapshot."""
    pairs = _states_and_patches(plain_lines)
    tried: list[tuple[Any, bool]] = []
    outcomes, _ = _decode_from_patches(pairs, monkeypatch, tried)
    assert _parts(outcomes) == _expected(pairs)
    health_changes = [built for change, built in tried if change.get("health", {}).keys() == {"readings"}]
    nvlink_lines = [
        n
        for n, (_, patch) in enumerate(pairs)
        if patch and all("nvlink" in str(change.get("health", "")) for change in patch["gpus"]["$list"])
    ]
    assert len(nvlink_lines) >= 3, "the node's lines read every GPU's NVLinks now and then (else this proves nothing)"
    links = [len(gpu.sample.nvlinks or ()) for gpu in outcomes[nvlink_lines[0]][1][0].gpus]
    assert sum(links) >= 8, f"and the GPUs have links: {links}"
    assert len(health_changes) >= 8 * len(nvlink_lines), "GPUs whose patch has readings (else this proves nothing)"
    # each built from its parts -- but for a GPU where a process came or went (its processes read whole)
    assert health_changes.count(True) >= 0.75 * len(health_changes), f"built from their parts: {health_changes}"


HOSTILE_LINKS = {
    "rates": lambda links: {"rx_bytes_per_s": 5, "tx_bytes_per_s": 7},
    "negative rate": lambda links: {"rx_bytes_per_s": -1},
    "huge rate": lambda links: {"tx_bytes_per_s": 2**70},
    "true for 1": lambda links: {"rx_bytes_per_s": True},
    "a float": lambda links: {"rx_bytes_per_s": 1.5},
    "text": lambda links: {"errors": "3"},
    "null": lambda links: {"errors": None, "version": None},
    "a remote with an escape": lambda links: {"remote": "0000\\u0030:05:00.0"},
    "another link number": lambda links: {"link": 77},
    "a link that is no object": lambda links: 5,
    "fewer links": lambda links: links[:-1],
    "no links": lambda links: [],
}


@pytest.mark.parametrize("change", list(HOSTILE_LINKS), ids=list(HOSTILE_LINKS))
def test_a_hostile_nvlink_reading_in_a_patch_decodes_or_fails_as_the_whole_line(plain_lines, monkeypatch, change):
    """A patch changes one GPU's NVLink readings to something odd, then back: each line as the checked walk says."""
    from nvtopy.formats.stream import apply_patch, patch_of

    pairs = _states_and_patches(plain_lines[:4])
    base = pairs[-1][0]
    gpus = len(base["gpus"])
    gpu = next(n for n, item in enumerate(base["gpus"]) if item["health"]["readings"]["nvlink"]["links"])
    links = base["gpus"][gpu]["health"]["readings"]["nvlink"]["links"]
    made = HOSTILE_LINKS[change](fresh(links))
    if type(made) is dict:  # a change of the first link
        odd = fresh(links)
        odd[0].update(made)
    elif type(made) is list:
        odd = made
    else:
        odd = [made, *links[1:]]
    for new in (odd, links, odd):
        nvlink = dict(pairs[-1][0]["gpus"][gpu]["health"]["readings"]["nvlink"], links=new)
        before = pairs[-1][0]["gpus"][gpu]["health"]["readings"]["nvlink"]
        patch = _nvlink_patch(gpus, gpu, patch_of(before, nvlink))
        pairs.append((apply_patch(pairs[-1][0], patch), patch))
    outcomes, built = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert built >= 7, "GPUs of the patched lines were built from their parts"


# Link patches of rates alone, one after another (each a {"$list": [a change per link]} of the GPU's links): a rate out
# of range, then the other rate alone (the first stays what the line has), back, odd types -- each line from the last
# line's links and this patch, as the checked walk reads the whole line.
RATE_STEPS = {
    "a negative rx, then tx alone": [{"rx_bytes_per_s": -3}, {"tx_bytes_per_s": 9}, {"rx_bytes_per_s": 4}],
    "a huge tx, then rx alone": [{"tx_bytes_per_s": 2**64}, {"rx_bytes_per_s": 9}, {"tx_bytes_per_s": 2**63}],
    "a sum past the limit": [{"rx_bytes_per_s": 2**63, "tx_bytes_per_s": 2**63}, {"rx_bytes_per_s": 1}],
    "a float, then back": [{"rx_bytes_per_s": 2.5}, {"rx_bytes_per_s": 2}],
    "true, then null": [{"tx_bytes_per_s": True}, {"tx_bytes_per_s": None}, {"rx_bytes_per_s": None}],
    "text": [{"rx_bytes_per_s": "7"}, {"rx_bytes_per_s": 7}],
    "an object": [{"rx_bytes_per_s": {"a": 1}}, {"rx_bytes_per_s": 1}],
    "a rate and the errors": [{"rx_bytes_per_s": 1, "errors": 2**70}, {"tx_bytes_per_s": 1}],
    "an unchanged link": [{}, {"tx_bytes_per_s": -1}],
}


@pytest.mark.parametrize("steps", list(RATE_STEPS), ids=list(RATE_STEPS))
def test_links_patched_in_their_rates_alone_are_the_whole_lines(plain_lines, monkeypatch, steps):
    """A GPU's links whose patch changes their rates alone are built from the last line's links and the patch's rates
    (the far side's NVLink second): line after line, with rates out of range, of odd types and back, what the checked
    walk makes of each whole line -- and most of those lines' links were made so (else this proves nothing)."""
    from nvtopy.formats.stream import apply_patch

    pairs = _states_and_patches(plain_lines[:4])
    gpus = len(pairs[-1][0]["gpus"])
    gpu = next(n for n, item in enumerate(pairs[-1][0]["gpus"]) if item["health"]["readings"]["nvlink"]["links"])
    count = len(pairs[-1][0]["gpus"][gpu]["health"]["readings"]["nvlink"]["links"])
    # then the links as they were, and good rates again (from the last line's links once more)
    for step in [
        *RATE_STEPS[steps],
        {"errors": 0},
        {"rx_bytes_per_s": 5},
        {"tx_bytes_per_s": 6},
        {"rx_bytes_per_s": 7},
    ]:
        for at in (0, count - 1):  # the first link changed, then the last: the others from the last line's links
            changes = [{} for _ in range(count)]
            changes[at] = dict(step)
            patch = _nvlink_patch(gpus, gpu, {"links": {"$list": changes}})
            pairs.append((apply_patch(pairs[-1][0], patch), patch))
    made = [0]
    real = SnapshotDecoder._rates_patched

    def counted(*args: Any) -> Any:
        links = real(*args)
        made[0] += links is not None
        return links

    monkeypatch.setattr(SnapshotDecoder, "_rates_patched", counted)
    outcomes, _ = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert made[0] >= 2, "links were built from the last line's and a patch of rates"


NVLINK_READINGS = {
    "rates": {"rx_bytes_per_s": 11, "tx_bytes_per_s": 13},
    "a negative rate": {"rx_bytes_per_s": -11},
    "a huge rate": {"tx_bytes_per_s": 2**64 + 1},
    "true for a rate": {"tx_bytes_per_s": True},
    "a rate as text": {"tx_bytes_per_s": "13"},
    "another link count": {"count": 4},  # a static field: the whole GPU
    "no readings of its own": None,  # a new value where an object was
}


@pytest.mark.parametrize("change", list(NVLINK_READINGS), ids=list(NVLINK_READINGS))
@pytest.mark.parametrize("top", [False, True], ids=["readings alone", "its own figure on top"])
def test_the_nvlink_rates_of_a_patch_are_the_samples_unless_the_gpu_has_its_own(plain_lines, monkeypatch, change, top):
    """The readings' rates are the sample's NVLink rates where the GPU's line has none of its own (the top level wins);
    a change to more than its readings' figures (the count, the health's verdict) decodes that GPU whole."""
    from nvtopy.formats.stream import apply_patch

    pairs = _states_and_patches(plain_lines[:4])
    gpus = len(pairs[-1][0]["gpus"])
    if top:  # the GPU's own rate at its top level, beside the readings'
        changes: list[dict[str, Any]] = [{} for _ in range(gpus)]
        changes[2] = {"nvlink_rx_bytes_per_s": 999}
        patch = {"gpus": {"$list": changes}}
        pairs.append((apply_patch(pairs[-1][0], patch), patch))
    for extra in ({}, {"verdict": "WARNING"}, {}):
        patch = _nvlink_patch(gpus, 2, NVLINK_READINGS[change], **extra)
        pairs.append((apply_patch(pairs[-1][0], patch), patch))
        patch = _nvlink_patch(gpus, 2, {"rx_bytes_per_s": 21, "tx_bytes_per_s": 23})
        pairs.append((apply_patch(pairs[-1][0], patch), patch))
    outcomes, built = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert built >= 7, "GPUs of the patched lines were built from their parts"


SAMPLE_STATES = {
    "throttled": {"throttle_reasons": ["sw_power_cap"], "health": {"throttle": "power cap active"}},
    "no longer": {"throttle_reasons": [], "health": {"throttle": None}},
    "a reason with an escape": {"throttle_reasons": ["sw_\\u0070ower_cap"]},
    "a reason that is no text": {"throttle_reasons": [1]},
    "reasons that are no list": {"throttle_reasons": "sw_power_cap"},
    "no reasons read": {"throttle_reasons": None},
    "another P-state": {"pstate": "P8"},
    "an unknown P-state": {"pstate": "P99"},
    "a P-state that is a number": {"pstate": 2},
    "a verdict": {"health": {"verdict": "FAIL", "findings": [{"severity": "FAIL", "code": "hot", "text": "too hot"}]}},
    "an unknown verdict": {"health": {"verdict": "SO-SO"}},
    "health that is no object": {"health": 5},
    "a new health group": {"health": {"readings": {"power": {"draw": 1}}}},
}


@pytest.mark.parametrize("change", list(SAMPLE_STATES), ids=list(SAMPLE_STATES))
def test_a_gpus_changed_states_and_health_in_a_patch_decode_or_fail_as_the_whole_line(plain_lines, monkeypatch, change):
    """A GPU's throttle reasons, P-state and health (verdict, findings, the throttle's words) read again from the line
    in a patch of its figures -- good values and hostile ones, then plain figures again: each line as the checked walk
    says."""
    from nvtopy.formats.stream import apply_patch

    pairs = _states_and_patches(plain_lines[:4])
    gpus = len(pairs[-1][0]["gpus"])
    for fields in (SAMPLE_STATES[change], {"power_draw_w": 123.5}, SAMPLE_STATES[change]):
        changes: list[dict[str, Any]] = [{} for _ in range(gpus)]
        changes[3] = {"power_draw_w": 99.5, **fields}
        patch = {"gpus": {"$list": changes}}
        pairs.append((apply_patch(pairs[-1][0], patch), patch))
    outcomes, built = _decode_from_patches(pairs, monkeypatch)
    assert _parts(outcomes) == _expected(pairs)
    assert built >= 7, "GPUs of the patched lines were built from their parts"


_USAGE = {
    "cpu_busy_percent": 12.5,
    "cpu_count": 64,
    "load_1m": 3.25,
    "load_5m": 2.0,
    "load_15m": 1,
    "ram_total_bytes": 540_000_000_000,
    "ram_used_bytes": 120_000_000_000,
    "swap_total_bytes": 0,
    "swap_used_bytes": 0,
}
HOSTILE_USAGE = {
    "as sent": {},
    "a busy CPU past 100": {"cpu_busy_percent": 250.0},
    "a negative load": {"load_1m": -1.5},
    "a negative count": {"cpu_count": -4},
    "NaN": {"load_5m": math.nan},
    "an infinity": {"cpu_busy_percent": math.inf},
    "2**64": {"ram_total_bytes": 2**64},
    "a count of 400 digits": {"ram_used_bytes": 10**400},
    "a load of 400 digits": {"load_15m": 10**400},
    "a whole count as a float": {"cpu_count": 64.0},
    "a count as a fraction": {"swap_used_bytes": 1.5},
    "true for 1": {"cpu_count": True},
    "text": {"load_1m": "3"},
    "null": {"ram_used_bytes": None},
    "an object": {"load_1m": {"a": 1}},
    "a figure missing": {"load_5m": ...},
    "a figure missing, its reason": {"swap_used_bytes": ..., "unavailable": {"swap_used_bytes": "not_supported"}},
    "a reason beside a figure": {"unavailable": {"load_1m": "not_supported"}},
    "a sum past the limit": {"ram_total_bytes": 2**63, "ram_used_bytes": 2**63},
}


@pytest.mark.parametrize("change", list(HOSTILE_USAGE), ids=list(HOSTILE_USAGE))
def test_a_lines_host_usage_is_what_its_checked_reading_says(change):
    """A line's host usage (one a host a second under ``--ssh``) in its common case and out of it: what reading it field
    by field makes -- the same figures, N/A "out of range" where one is, the same error where there is one."""
    usage = {**_USAGE, **HOSTILE_USAGE[change]}
    usage = {key: value for key, value in usage.items() if value is not ...}
    assert _read(decoder.host_usage_from_dict, usage) == _read(decoder._checked_host_usage, usage)


def _read(decode: Any, data: Any) -> tuple[str, Any]:
    try:
        made = decode(data)
    except Exception as exc:  # whatever the field-by-field reading raises, the common case must raise too
        return "error", (type(exc), str(exc))
    return "usage", (made, repr(made))


def test_a_common_host_usage_is_not_read_field_by_field(monkeypatch):
    """The common case takes its own path (else the comparison above proves nothing about it)."""
    expected = decoder._checked_host_usage(_USAGE)
    monkeypatch.setattr(decoder, "_checked_host_usage", None)
    assert repr(decoder.host_usage_from_dict(_USAGE)) == repr(expected)
