"""Record and replay: what is replayed is what was recorded; damaged files replay up to the damage."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nvtopy.collector import Collector
from nvtopy.errors import NvtopyError
from nvtopy.replay import ReplayPlayer, load_recording
from nvtopy.tui.app import NvtopyApp
from nvtopy.views.json_view import snapshot_to_dict

from .tui_helpers import wait_until


@pytest.fixture
def recording(tmp_path, sim, clock):
    """Twelve snapshots of a simulated node, one per simulated second, as ``nvtopy record`` writes them."""
    backend = sim(gpus=3, seed=5)
    collector = Collector(backend)
    path = tmp_path / "run.jsonl"
    lines = []
    for _ in range(12):
        clock.advance(1)
        lines.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
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
    done = subprocess.run(
        [sys.executable, "-m", "nvtopy", "record", str(path), "--demo", "--count", "4", "--interval", "0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
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
        result = subprocess.run(
            [sys.executable, "-m", "nvtopy", "replay", str(path)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    bad_speed = subprocess.run(
        [sys.executable, "-m", "nvtopy", "replay", str(empty), "--speed", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_speed.returncode == 2 and "--speed" in bad_speed.stderr


async def test_replay_in_the_monitor_pause_step_speed(recording):
    path, lines = recording
    player = ReplayPlayer(load_recording(str(path)), speed=64.0)
    app = NvtopyApp(None, source=player)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: player.position == 11 and app.snapshot is player.snapshots[11])
        assert player.paused, "stops at the end of the recording"
        shown = app.snapshot.gpus[0].sample.utilization_gpu_percent
        assert shown == json.loads(lines[-1])["gpus"][0]["utilization_gpu_percent"]
        header = str(app.query_one("#header").render())
        assert "REPLAY" in header and "12/12" in header
        await pilot.press("comma", "comma")
        await wait_until(pilot, lambda: app.snapshot is player.snapshots[9])
        await pilot.press("full_stop")
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
    app = NvtopyApp(None, source=player)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None)
        messages = [str(n.message) for n in app._notifications]
        assert any("reading stopped at line 6: the file ends mid-record" in m for m in messages)
