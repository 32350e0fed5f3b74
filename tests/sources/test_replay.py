"""Record and replay: what is replayed is what was recorded; damaged files replay up to the damage."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from nvtopy.errors import NvtopyError
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.sources.collector import Collector
from nvtopy.sources.replay import ReplayPlayer, load_recording
from nvtopy.tui.app import NvtopyApp

from ..builders import run_nvtopy
from ..tui_helpers import header_line, wait_until, widget_lines

# The recording's lines: the same at every call (a seeded simulated node on the manual clock), so made once per
# test process rather than for each of the 53 tests that read it (0.1-0.3 s each on the 2-core machine).
_RECORDED: list[str] = []


@pytest.fixture
def recording(tmp_path, sim, clock):
    """Twelve snapshots of a simulated node, one per simulated second, as ``nvtopy record`` writes them."""
    if not _RECORDED:
        collector = Collector(sim(gpus=3, seed=5))
        for _ in range(12):
            clock.advance(1)
            _RECORDED.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
    else:
        clock.advance(12)  # where making them leaves the clock
    lines = list(_RECORDED)
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def comparable(data: dict) -> dict:
    data = dict(data)
    data.pop("backend")
    data.pop("nvtopy_version")
    return data


def test_replayed_values_are_the_recorded_ones(recording):
    path, lines = recording
    loaded = load_recording(str(path))
    assert loaded.stopped is None and len(loaded.snapshots) == 12
    for line, snapshot in zip(lines, loaded.snapshots, strict=True):
        assert comparable(snapshot_to_dict(snapshot)) == comparable(json.loads(line))
    assert loaded.snapshots[0].host.backend == "replay of simulated"
    history = loaded.snapshots[-1].gpus[0].history
    recorded = [json.loads(line)["gpus"][0]["utilization_gpu_percent"] for line in lines]
    assert list(history.utilization_gpu_percent) == recorded, "sparklines rebuilt from the recording"


def test_cli_record_then_load(tmp_path):
    path = tmp_path / "cli.jsonl"
    done = run_nvtopy("record", str(path), "--demo", "--count", "4", "--interval", "0.1", timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = load_recording(str(path))
    assert len(loaded.snapshots) == 4 and all(s.processes for s in loaded.snapshots)


def test_cut_short_file_replays_what_is_valid(recording, tmp_path):
    path, lines = recording
    text = path.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - len(lines[-1]) // 2])
    loaded = load_recording(str(cut))
    assert len(loaded.snapshots) == 11
    assert loaded.stopped == "line 12: the file ends mid-record (cut short)"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("{not json}\n", "line 4: not JSON"),
        ('{"hello": "world"}\n', "line 4: not an nvtopy snapshot"),
        ('{"timestamp": "yesterday", "hostname": "x", "gpus": []}\n', "line 4: not an nvtopy snapshot"),
    ],
)
def test_damaged_line_stops_reading_there(recording, tmp_path, damage, message):
    _path, lines = recording
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:3]) + "\n" + damage + "\n".join(lines[3:]) + "\n")
    loaded = load_recording(str(bad))
    assert len(loaded.snapshots) == 3
    assert loaded.stopped.startswith(message)


def test_nothing_to_replay_is_one_line_exit_1(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for path in (empty, tmp_path / "missing.jsonl"):
        with pytest.raises(NvtopyError):
            load_recording(str(path))
        result = run_nvtopy("replay", str(path), timeout=60)
        assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    bad_speed = run_nvtopy("replay", str(empty), "--speed", "0", timeout=60)
    assert bad_speed.returncode == 2 and "--speed" in bad_speed.stderr


def test_the_player_pauses_at_the_end_before_the_last_snapshot_is_published(recording):
    """Whatever a snapshot's publication draws (the header's status line) sees the player paused with the last one and
    playing with each before it: the pause at the end is not a moment after the last snapshot is shown."""
    path, _lines = recording
    player = ReplayPlayer(load_recording(str(path)), speed=1000.0)
    seen: list[tuple[int, bool]] = []
    done = threading.Event()

    def published(snapshot) -> None:
        seen.append((player.position, player.paused))
        if player.position == len(player.snapshots) - 1:
            done.set()

    player.subscribe(published)
    player.start()
    try:
        assert done.wait(30), "the recording played to its end"
    finally:
        player.stop()
    assert seen[-1] == (11, True)
    assert all(not paused for position, paused in seen[:-1]), seen


async def test_replay_in_the_monitor_pause_step_speed(recording):
    path, lines = recording
    player = ReplayPlayer(load_recording(str(path)), speed=64.0)
    app = NvtopyApp(player)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: player.position == 11 and app.snapshot is player.snapshots[11])
        # Paused before the last snapshot is published (it once was just after: seen once in CI, the app already
        # showing the last snapshot with the player still playing).
        assert player.paused, "stops at the end of the recording"
        shown = app.snapshot.gpus[0].sample.utilization_gpu_percent
        assert shown == json.loads(lines[-1])["gpus"][0]["utilization_gpu_percent"]
        header = str(app.query_one("#header").render())
        assert "REPLAY" in header and "12/12" in header
        await pilot.press("left_square_bracket", "left_square_bracket")
        await wait_until(pilot, lambda: app.snapshot is player.snapshots[9])
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: app.snapshot is player.snapshots[10])
        await pilot.press("minus")
        assert player.speed == 16.0
        await pilot.press("plus")
        assert player.speed == 64.0
        await pilot.press("T")
        await pilot.pause()
        assert not app.screen_stack[-1].__class__.__name__.startswith("Confirm"), "no signal dialog in a replay"
        assert any("read-only" in str(n.message) for n in app._notifications)
        await pilot.press("p")  # play again from the start
        await wait_until(pilot, lambda: player.position == 11 and player.paused)


async def test_cut_recording_is_announced(recording, tmp_path):
    _path, lines = recording
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    player = ReplayPlayer(load_recording(str(cut)), speed=64.0)
    app = NvtopyApp(player)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None)
        messages = [str(n.message) for n in app._notifications]
        assert any("reading stopped at line 6: the file ends mid-record" in m for m in messages)


# ---------------------------------------------------------------- hostile lines: damage, never a crash


def _with_line(recording, tmp_path, line: str, at: int = 3):
    """The recording with ``line`` put in as line ``at + 1``, the rest after it."""
    _path, lines = recording
    bad = tmp_path / "hostile.jsonl"
    bad.write_text("\n".join(lines[:at]) + "\n" + line + "\n" + "\n".join(lines[at:]) + "\n")
    return bad


def _changed(line: str, change) -> str:
    data = json.loads(line)
    change(data)
    return json.dumps(data)


def _set_process(key, value):
    def change(data):
        data["gpus"][0]["processes"][0][key] = value

    return change


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        # nested deeper than Python's recursion limit: RecursionError inside json
        ('{"a":' * 100_000 + "1" + "}" * 100_000, "line 4: not JSON that can be read (nested too deeply)"),
        ("[" * 10**6, "line 4: not JSON that can be read (nested too deeply)"),
        ('{"timestamp": ' + "[" * 500 + "]" * 500 + "}", "line 4: not an nvtopy snapshot (TypeError"),
        # a 10 MB line that is one JSON string
        ('"' + "x" * 10_000_000 + '"', "line 4: not an nvtopy snapshot (TypeError"),
        # more digits than Python's int() reads: ValueError inside json
        ('{"timestamp": "2026-01-01T00:00:00+00:00", "sequence": ' + "7" * 5000 + "}", "line 4: not JSON"),
    ],
    ids=["objects-100000-deep", "brackets-1000000", "timestamp-500-deep", "string-10MB", "integer-5000-digits"],
)
def test_hostile_line_stops_reading_there(recording, tmp_path, damage, message):
    loaded = load_recording(str(_with_line(recording, tmp_path, damage)))
    assert len(loaded.snapshots) == 3
    assert loaded.stopped.startswith(message), loaded.stopped
    assert len(loaded.stopped) < 200 and "\n" not in loaded.stopped


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["gpus"][0].update(temperature_c=int("9" * 4000)), None),  # readable, absurd: N/A
        (lambda d: d["gpus"][0].update(temperature_c="hot"), "temperature_c is not a number"),
        (lambda d: d["gpus"][0].update(name=["A", "100"]), "name is not text"),
        (lambda d: d["gpus"][0].update(index=-1), "index -1 is not a whole number"),
        (lambda d: d["gpus"][0].update(lost="yes"), "lost is not true or false"),
        (lambda d: d["gpus"][0].update(pstate="P" + "1" * 5000), "pstate P111"),
        (lambda d: d["gpus"][0].update(throttle_reasons=[["sw_power_cap"]]), "throttle_reasons is not text"),
        (lambda d: d.update(gpus={"0": {}}), "gpus is not a list"),
        (lambda d: d.update(hostname=None), "hostname is not text"),
        (lambda d: d.update(timestamp="x" * 1_000_000), "Invalid isoformat string"),
        (_set_process("pid", int("4" * 4000)), "pid 444"),
        (_set_process("pid", 2.5), "pid 2.5 is not a whole number"),
        (_set_process("type", "Z"), "'Z' is not a valid ProcessType"),
        (_set_process("command", {"argv": ["x"]}), "command is not text"),
    ],
)
def test_values_of_the_wrong_kind_are_damage(recording, tmp_path, change, message):
    _path, lines = recording
    loaded = load_recording(str(_with_line(recording, tmp_path, _changed(lines[3], change))))
    if message is None:
        assert loaded.stopped is None and len(loaded.snapshots) == 13
        assert loaded.snapshots[3].gpus[0].sample.temperature_c is None, "absurd figures are N/A"
        return
    assert len(loaded.snapshots) == 3
    assert loaded.stopped.startswith("line 4: not an nvtopy snapshot ("), loaded.stopped
    assert message in loaded.stopped
    assert len(loaded.stopped) < 200


def test_not_finite_figures_are_replayed_as_unavailable(recording, tmp_path):
    _path, lines = recording
    text = lines[3].replace('"power_draw_w":', '"power_draw_w":NaN,"x":', 1)
    text = text.replace('"temperature_c":', '"temperature_c":Infinity,"y":', 1)
    text = text.replace('"energy_mj":', '"energy_mj":1e400,"z":', 1)
    loaded = load_recording(str(_with_line(recording, tmp_path, text)))
    assert loaded.stopped is None
    sample = loaded.snapshots[3].gpus[0].sample
    assert sample.power_draw_w is None and sample.temperature_c is None and sample.energy_mj is None


async def test_hostile_line_is_announced_in_the_monitor(recording, tmp_path):
    player = ReplayPlayer(load_recording(str(_with_line(recording, tmp_path, "[" * 200_000, at=5))), speed=64.0)
    app = NvtopyApp(player)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None)
        messages = [str(n.message) for n in app._notifications]
        assert any("reading stopped at line 6: not JSON that can be read (nested too deeply)" in m for m in messages)
        await wait_until(pilot, lambda: player.position == 4 and player.paused)


# ---------------------------------------------------------------- outside text, exactly as recorded

HOSTILE = "\x1b]0;pwned\x07 \udcff\udcfe tab\there \\x41 back\\slash \u202e"


@pytest.mark.parametrize(
    ("change", "read"),
    [
        (lambda d, t: d.update(hostname=t), lambda s: s.host.hostname),
        (lambda d, t: d.update(driver_version=t), lambda s: s.host.driver_version),
        (lambda d, t: d.update(cuda_driver_version=t), lambda s: s.host.cuda_driver_version),
        (lambda d, t: d.update(nvml_version=t), lambda s: s.host.nvml_version),
        (lambda d, t: d.update(backend=t), lambda s: s.host.backend.removeprefix("replay of ")),
        (lambda d, t: d["gpus"][0].update(name=t), lambda s: s.gpus[0].static.name),
        (lambda d, t: d["gpus"][0].update(uuid=t), lambda s: s.gpus[0].static.uuid),
        (lambda d, t: d["gpus"][0].update(serial=t), lambda s: s.gpus[0].static.serial),
        (lambda d, t: d["gpus"][0].update(bus_id=t), lambda s: s.gpus[0].static.bus_id),
        (lambda d, t: d["gpus"][0].update(compute_mode=t), lambda s: s.gpus[0].sample.compute_mode),
        (lambda d, t: d["gpus"][0].update(mig_devices=[t, t]), lambda s: s.gpus[0].static.mig_devices[1]),
        (
            lambda d, t: d["gpus"][0].update(mig_devices=[{"index": 0, "uuid": t, "profile": t}]),
            lambda s: s.gpus[0].static.mig_instances[0].uuid,
        ),
        (
            lambda d, t: d["gpus"][0].update(mig_devices=[{"index": 0, "uuid": t, "profile": t}]),
            lambda s: s.gpus[0].static.mig_instances[0].profile,
        ),
        (lambda d, t: d["gpus"][0].update(throttle_reasons=[t]), lambda s: s.gpus[0].sample.throttle_reasons[0]),
        (lambda d, t: d["gpus"][0]["processes"][0].update(command=t), lambda s: s.gpus[0].processes[0].command),
        (lambda d, t: d["gpus"][0]["processes"][0].update(user=t), lambda s: s.gpus[0].processes[0].user),
        (lambda d, t: d["gpus"][0]["processes"][0].update(name=t), lambda s: s.gpus[0].processes[0].name),
        (lambda d, t: d["gpus"][0]["processes"][0].update(status=t), lambda s: s.gpus[0].processes[0].status),
    ],
)
def test_every_string_is_unescaped_as_written(recording, tmp_path, change, read):
    """The writers store outside text with escape_text; a replay shows exactly the original text."""
    from nvtopy.textsafe import escape_text

    _path, lines = recording
    written = _changed(lines[3], lambda data: change(data, escape_text(HOSTILE)))
    assert "\x1b" not in written and "\\udcff" not in written, "what the writers put in a file"
    loaded = load_recording(str(_with_line(recording, tmp_path, written)))
    assert loaded.stopped is None
    assert read(loaded.snapshots[3]) == HOSTILE


def test_a_round_trip_through_the_writer_gives_the_text_back(tmp_path, sim, clock):
    """Record (the JSON view's escaping), replay (unescaping): the same text, and the same JSON again."""
    import dataclasses

    backend = sim(gpus=1, seed=2)
    snapshot = Collector(backend).collect()
    gpu = snapshot.gpus[0]
    static = dataclasses.replace(gpu.static, name=HOSTILE)
    processes = tuple(dataclasses.replace(p, command=HOSTILE, user="\udce9ve") for p in gpu.processes)
    snapshot = dataclasses.replace(snapshot, gpus=(dataclasses.replace(gpu, static=static, processes=processes),))
    path = tmp_path / "text.jsonl"
    line = json.dumps(snapshot_to_dict(snapshot), ensure_ascii=False)
    path.write_text(line + "\n", encoding="utf-8")
    replayed = load_recording(str(path)).snapshots[0]
    assert replayed.gpus[0].static.name == HOSTILE
    assert {p.command for p in replayed.gpus[0].processes} == {HOSTILE}
    assert {p.user for p in replayed.gpus[0].processes} == {"\udce9ve"}
    assert comparable(snapshot_to_dict(replayed)) == comparable(json.loads(line))


# ---------------------------------------------------------------- streaming: an index, not every snapshot


def _long_recording(path, lines: list[str], count: int) -> None:
    """``count`` lines: the fixture's, over and over, one second apart."""
    base = [json.loads(line) for line in lines]
    with open(path, "w", encoding="utf-8") as out:
        for i in range(count):
            data = base[i % len(base)]
            data["timestamp"] = f"2026-11-24T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00"
            data["sequence"] = i + 1
            out.write(json.dumps(data, separators=(",", ":")) + "\n")


@pytest.mark.slow
def test_the_player_keeps_a_bounded_number_of_snapshots(recording, tmp_path):
    import gc

    from nvtopy.model import HISTORY_LENGTH, Snapshot
    from nvtopy.sources.replay import CACHE

    _path, lines = recording
    path = tmp_path / "long.jsonl"
    # Four times a chart's length (HISTORY_LENGTH, 300) and over 35 times the cache (CACHE, 32): every bound is
    # passed many times over. (5,000 lines, each decoded twice, took 18 s for no bound more; 1,200: 4 s.)
    count = 4 * HISTORY_LENGTH
    assert count > 30 * CACHE
    _long_recording(path, lines, count)
    loaded = load_recording(str(path))
    assert len(loaded.snapshots) == count and loaded.stopped is None
    player = ReplayPlayer(loaded, speed=64.0)
    player.step(0)  # the first line, as the player shows it when it starts
    first = player.latest.timestamp
    for step in range(count - 1):
        player.step(1)
        assert loaded.snapshots.cached <= CACHE
        if step % 200 == 199:
            gc.collect()
            # This recording's snapshots only (its day): other tests' objects, still alive in the same process
            # (a leaked poller, a cached app), are no part of what the player keeps.
            alive = sum(1 for o in gc.get_objects() if type(o) is Snapshot and first <= o.timestamp <= first + count)
            assert alive <= CACHE + 2, f"{alive} snapshots alive at step {step}"
    assert player.latest.sequence == count
    assert loaded.snapshots.parsed == count, "played in order: each line parsed once, no history rebuilt"
    assert list(player.latest.gpus[0].history.timestamps)[-1] == player.latest.timestamp
    assert len(player.latest.gpus[0].history.timestamps) == HISTORY_LENGTH == 300


def test_any_order_of_access_gives_what_playing_in_order_gives(recording, tmp_path, monkeypatch):
    """Charts rebuilt from the lines before (a jump, a step back) equal the ones carried on in order."""
    import random

    from nvtopy.sources import replay

    monkeypatch.setattr(replay, "HISTORY_LENGTH", 20)
    _path, lines = recording
    path = tmp_path / "long.jsonl"
    _long_recording(path, lines, 120)
    in_order = [
        snapshot_to_dict(s) | {"history": [g.history for g in s.gpus]} for s in load_recording(str(path)).snapshots
    ]
    snapshots = load_recording(str(path), cache=4).snapshots
    order = random.Random(7).choices(range(120), k=200) + list(range(119, -1, -1))
    for position in order:
        snapshot = snapshots[position]
        assert snapshot_to_dict(snapshot) | {"history": [g.history for g in snapshot.gpus]} == in_order[position]
        assert snapshots.cached <= 4
    assert len(in_order[119]["history"][0].timestamps) == 20


def test_owner_from_dict_is_owner_to_dicts_inverse_and_trusts_nothing():
    """The one decoder of recorded owners (replay and report): round trip, escapes undone, bad input refused."""
    from nvtopy.formats.contract import owner_to_dict
    from nvtopy.formats.contract_decoder import owner_from_dict
    from nvtopy.model import OwnerKind, ProcessOwner

    owner = ProcessOwner(kind=OwnerKind.KUBERNETES, namespace="ml", pod="train-\x1b[31m0", container="c", uid=1000)
    data = owner_to_dict(owner)
    assert "\x1b" not in str(data), "written escaped"
    assert owner_from_dict(data) == owner
    assert owner_from_dict(None) is None
    assert owner_from_dict({"kind": "a-kind-from-the-future", "pod": "p"}).kind is OwnerKind.CGROUP
    assert owner_from_dict({"kind": "slurm", "uid": -1}).uid is None
    assert owner_from_dict({"kind": "slurm", "uid": 1.5}).uid is None
    for bad in ([], {"kind": 3}, {"kind": "slurm", "job": 7}):
        with pytest.raises(TypeError):
            owner_from_dict(bad)


# ---------------------------------------------------------------- a big recording: indexed while the monitor draws


def test_indexing_says_how_far_it_is_and_stops_when_asked(recording, tmp_path):
    from nvtopy.sources.replay import IndexingStoppedError

    _path, lines = recording
    path = tmp_path / "long.jsonl"
    _long_recording(path, lines, 300)
    seen: list[tuple[int, int]] = []
    loaded = load_recording(str(path), progress=lambda done, size: seen.append((done, size)))
    size = path.stat().st_size
    assert len(loaded.snapshots) == 300
    assert len(seen) == 301 and seen[-1] == (size, size), "after each line, and the whole file at the end"
    assert [done for done, _ in seen] == sorted(done for done, _ in seen) and {s for _, s in seen} == {size}

    asked = []

    def stop() -> bool:
        asked.append(True)
        return len(asked) > 5

    with pytest.raises(IndexingStoppedError):
        load_recording(str(path), stop=stop)
    assert len(asked) == 6, "asked before each line: it stops at the next one"


class _Gate:
    """Holds the indexing at line ``at`` until opened (a big recording, without the time it takes to write one)."""

    def __init__(self, monkeypatch, at: int) -> None:
        from nvtopy.sources import replay

        self.parsed = 0
        self.opened = threading.Event()
        parse = replay._parse

        def gated(raw, history):
            self.parsed += 1
            if self.parsed == at:
                assert self.opened.wait(30), "the test never opened the gate"
            return parse(raw, history)

        monkeypatch.setattr(replay, "_parse", gated)


async def test_the_monitor_shows_indexing_progress_and_q_quits_at_once(recording, tmp_path, monkeypatch):
    """Before: a blank screen until the whole file was indexed, and q ignored meanwhile."""
    _path, lines = recording
    path = tmp_path / "long.jsonl"
    _long_recording(path, lines, 200)
    gate = _Gate(monkeypatch, at=50)
    player = ReplayPlayer(str(path), speed=64.0)
    app = NvtopyApp(player)
    async with app.run_test(size=(120, 40)) as pilot:
        mib = round(path.stat().st_size / 2**20)
        held = re.compile(rf"waiting for long\.jsonl to be indexed \(2\d % of {mib} MiB\): \d+ s")
        # the header shows the progress as it goes (10 %, ...) until the indexing is held at line 50 of 200
        await wait_until(pilot, lambda: held.search(header_line(app)) is not None, message="the progress at 25 %")
        assert "q quits at any time" in widget_lines(app.query_one("#gpus"))[0]
        assert not player.indexed.is_set()
        pressed = time.monotonic()
        await pilot.press("q")
    quit_took = time.monotonic() - pressed
    assert quit_took < 2.0, f"q took {quit_took:.2f} s while the file was indexed"
    assert not player.indexed.is_set(), "quit while indexing: nothing waited for the rest of the file"
    gate.opened.set()
    player.thread.join(10)
    assert not player.thread.is_alive() and player.recording is None
    assert gate.parsed == 50, "stopped: the rest of the file is not indexed after the monitor has gone"


async def test_the_monitor_plays_a_recording_once_it_is_indexed(recording, tmp_path, monkeypatch):
    _path, lines = recording
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    gate = _Gate(monkeypatch, at=3)
    player = ReplayPlayer(str(path), speed=64.0)
    app = NvtopyApp(player)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: player.busy_since is not None, message="indexing")
        gate.opened.set()
        # The header is drawn from the snapshot the app has taken in, a moment after the player's position
        # moves: wait for what is asserted (under load the two can be a refresh apart).
        await wait_until(pilot, lambda: app.snapshot is not None and "5/5" in header_line(app), message="played")
        assert player.position == 4
        messages = [str(n.message) for n in app._notifications]
        assert any("reading stopped at line 6: the file ends mid-record" in m for m in messages), messages
        assert "REPLAY" in header_line(app)


def _replay_in_a_pilot(monkeypatch, session) -> None:
    """``nvtopy replay`` as the CLI runs it, the monitor driven by ``session(pilot, app)`` instead of a terminal."""
    import asyncio

    def run_in_pilot(app: NvtopyApp, *args, **kwargs) -> None:
        async def driven() -> None:
            async with app.run_test(size=(120, 40)) as pilot:
                await session(pilot, app)

        asyncio.run(driven())

    monkeypatch.setattr(NvtopyApp, "run", run_in_pilot)


def test_cli_replay_draws_while_indexing_and_says_then_that_there_is_nothing(recording, tmp_path, monkeypatch, capsys):
    from nvtopy.commands import dispatch

    _path, lines = recording
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json}\n" + "\n".join(lines) + "\n")
    gate = _Gate(monkeypatch, at=1)  # past the head start: the monitor is drawn first

    async def session(pilot, app) -> None:
        await wait_until(pilot, lambda: "to be indexed" in header_line(app), message="the progress")
        gate.opened.set()  # line 1 is damage: nothing to replay
        await wait_until(pilot, lambda: not app.is_running or app.open_error is not None, message="the end")

    _replay_in_a_pilot(monkeypatch, session)
    assert dispatch.main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"nvtopy: error: {path}: no snapshot to replay (line 1: not JSON") and err.count("\n") == 1


def test_cli_replay_quits_while_indexing(recording, tmp_path, monkeypatch):
    from nvtopy.commands import dispatch
    from nvtopy.commands import replay as replay_command

    _path, lines = recording
    path = tmp_path / "long.jsonl"
    _long_recording(path, lines, 100)
    gate = _Gate(monkeypatch, at=10)
    players: list[ReplayPlayer] = []

    class Kept(ReplayPlayer):  # the CLI's player, to wait for its thread here
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            players.append(self)

    monkeypatch.setattr(replay_command, "ReplayPlayer", Kept)

    async def session(pilot, app) -> None:
        await wait_until(pilot, lambda: "to be indexed" in header_line(app), message="the progress")
        await pilot.press("q")

    _replay_in_a_pilot(monkeypatch, session)
    assert dispatch.main(["replay", str(path)]) == 0
    gate.opened.set()
    # The held line is read once opened (its charts' records), then the indexing stops: waited for here, so none of
    # it runs into the next test of this worker (it once did: three records in a test that counts them).
    players[0].thread.join(10)
    assert not players[0].thread.is_alive() and gate.parsed == 10, "stopped at the line after the gate"


def test_the_indexing_progress_names_the_file_safely():
    player = ReplayPlayer("/records/\x1b]0;pwned\x07run.jsonl")
    assert "\x1b" not in player.waiting_for and "\x07" not in player.waiting_for
    assert player.waiting_for.endswith("run.jsonl to be indexed"), "no size known yet: no share either"
    player._indexing(150 << 20, 200 << 20)
    assert player.waiting_for.endswith("run.jsonl to be indexed (75 % of 200 MiB)")
