"""The collector and the poller thread: caching, cadence, history, snapshots, prompt stop."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from nvtopy.model import ALL_GROUPS, Reason, Snapshot
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import CADENCE, FAST_GROUPS, SLOW_GROUPS, Poller


def test_static_fields_are_read_once(sim, clock):
    backend = sim(gpus=3)
    collector = Collector(backend)
    for _ in range(5):
        clock.advance(1)
        collector.collect()
    collector.statics()
    assert backend.call_counts()["static"] == 3


def test_slow_groups_keep_their_last_value_between_reads(sim, clock):
    backend = sim(gpus=1)
    collector = Collector(backend)
    first = collector.collect()  # every group on the first read
    clock.advance(1)
    second = collector.collect(FAST_GROUPS)
    counts = backend.call_counts()
    assert counts["ecc"] == 1 and counts["memory"] == 2
    assert second.gpus[0].sample.ecc_mode == first.gpus[0].sample.ecc_mode is True
    assert second.gpus[0].sample.pcie_rx_bytes_per_s == first.gpus[0].sample.pcie_rx_bytes_per_s
    assert second.gpus[0].sample.timestamp > first.gpus[0].sample.timestamp


def test_groups_never_read_are_read_on_first_collect(sim):
    backend = sim(gpus=1)
    snapshot = Collector(backend).collect(FAST_GROUPS)
    assert snapshot.gpus[0].sample.ecc_mode is True, "a slow group is read on the first collect anyway"
    assert SLOW_GROUPS and not (SLOW_GROUPS & FAST_GROUPS)


def test_history_is_bounded(sim, clock):
    collector = Collector(sim(gpus=2), history=10)
    for _ in range(25):
        clock.advance(1)
        snapshot = collector.collect()
    history = snapshot.gpus[0].history
    assert len(history.timestamps) == len(history.utilization_gpu_percent) == 10
    assert history.timestamps == tuple(sorted(history.timestamps))
    assert history.utilization_gpu_percent[-1] == snapshot.gpus[0].sample.utilization_gpu_percent


def test_snapshot_is_immutable(sim):
    snapshot = Collector(sim(gpus=1)).collect()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.gpus[0].sample.temperature_c = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        snapshot.gpus[0].sample.unavailable["x"] = Reason.LOST  # type: ignore[index]
    assert isinstance(snapshot.gpus, tuple) and isinstance(snapshot.gpus[0].processes, tuple)


def test_selection_limits_backend_calls(sim):
    backend = sim(gpus=4)
    collector = Collector(backend, indices=[2])
    snapshot = collector.collect()
    assert [g.index for g in snapshot.gpus] == [2]
    assert backend.call_counts()["memory"] == 1


def test_poller_publishes_snapshots_on_its_thread(sim):
    backend = sim(gpus=2, clock=time.time)
    received: list[tuple[Snapshot, str]] = []
    got = threading.Event()

    def on_snapshot(snapshot: Snapshot) -> None:
        received.append((snapshot, threading.current_thread().name))
        if len(received) >= 3:
            got.set()

    poller = Poller(backend, interval=0.1)
    poller.subscribe(on_snapshot)
    with poller:
        assert got.wait(5)
    sequences = [s.sequence for s, _ in received]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    assert {name for _, name in received} == {"nvtopy-poller"}
    assert poller.latest is not None and poller.latest.interval == pytest.approx(0.1)
    assert not poller.running


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_poller_stops_promptly_with_a_long_interval(sim):
    poller = Poller(sim(gpus=1, clock=time.time), interval=60).start()
    deadline = time.monotonic() + 5
    while poller.latest is None and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    poller.stop()
    assert time.monotonic() - started < 0.5
    assert not poller.running


def test_poller_interval_change_takes_effect_now(sim):
    poller = Poller(sim(gpus=1, clock=time.time), interval=60).start()
    try:
        deadline = time.monotonic() + 5
        while poller.polls < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        poller.set_interval(0.1)
        deadline = time.monotonic() + 3
        while poller.polls < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.polls >= 4
    finally:
        poller.stop()


def test_poller_pause_resume_and_refresh(sim):
    poller = Poller(sim(gpus=1, clock=time.time), interval=0.1).start()
    try:
        time.sleep(0.3)
        poller.pause()
        time.sleep(0.15)
        paused_at = poller.polls
        time.sleep(0.4)
        assert poller.polls == paused_at, "no polling while paused"
        poller.refresh()
        deadline = time.monotonic() + 2
        while poller.polls == paused_at and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.polls == paused_at + 1, "refresh while paused takes exactly one snapshot"
        poller.resume()
        deadline = time.monotonic() + 5  # polling again at its 0.1 s interval (a loaded machine may be late)
        while poller.polls <= paused_at + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.polls > paused_at + 2
    finally:
        poller.stop()


def test_poller_survives_a_failing_backend(sim):
    backend = sim(gpus=1, clock=time.time)
    calls = {"n": 0}
    original = backend.read_sample

    def flaky(index, groups):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("driver hiccup")
        return original(index, groups)

    backend.read_sample = flaky  # type: ignore[method-assign]
    poller = Poller(backend, interval=0.05).start()
    try:
        deadline = time.monotonic() + 3
        while poller.polls < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.polls >= 3, "the poller kept going after the exception"
    finally:
        poller.stop()


def test_subscriber_exception_does_not_stop_polling(sim):
    poller = Poller(sim(gpus=1, clock=time.time), interval=0.05)
    poller.subscribe(lambda s: 1 / 0)
    with poller:
        deadline = time.monotonic() + 3
        while poller.polls < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert poller.polls >= 3


def test_groups_follow_their_cadence_and_views_poll_only_what_they_show(sim):
    backend = sim(gpus=1, clock=time.time)
    shown = ALL_GROUPS - {"pcie", "modes"}
    cadence = {"temperature": 0.45, "ecc": 10.0}
    poller = Poller(backend, interval=0.1, groups=shown, cadence=cadence)
    with poller:
        deadline = time.monotonic() + 5
        while poller.polls < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
    counts = backend.call_counts()
    polls = poller.polls
    assert polls >= 20
    assert counts["memory"] == polls, "every-tick groups are read every tick"
    assert 2 <= counts["temperature"] <= polls // 3, f"temperature every ~0.45 s: {counts['temperature']}/{polls}"
    assert counts["ecc"] == 1, "a 10 s cadence: read once in 2 s"
    assert counts["pcie"] == 1 and counts["modes"] == 1, "not shown: read only by the first collect"
    assert counts["process_utilization"] < counts["processes"], "per-process utilisation has its own cadence"


def test_cadence_table_covers_every_group():
    assert set(CADENCE) == set(ALL_GROUPS) | {"processes", "process_utilization"}
    assert {g for g in ALL_GROUPS if CADENCE[g] == 0} == FAST_GROUPS


# --------------------------------------------------------------------------- the ticker: one pace for every loop


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_ticker_waits_an_interval_from_the_start_of_a_round_not_its_end():
    from nvtopy.sources.ticker import Ticker

    clock = _Clock()
    ticker = Ticker(clock)
    ticker.tick()
    clock.now += 0.3  # the poll took 0.3 s
    assert ticker.remaining(1.0) == pytest.approx(0.7), "drift compensated: the poll's time is not added"
    assert ticker.next_deadline(1.0) == pytest.approx(101.0)
    assert ticker.remaining(2.0) == pytest.approx(1.7), "the interval in force when the wait is computed"


def test_the_ticker_skips_missed_ticks_rather_than_running_them_back_to_back():
    from nvtopy.sources.ticker import Ticker

    clock = _Clock()
    ticker = Ticker(clock)
    ticker.tick()
    clock.now += 3.5  # a stuck driver: three ticks missed
    assert ticker.remaining(1.0) == 0.0, "overdue: the next round starts at once"
    ticker.tick()
    clock.now += 0.1
    assert ticker.remaining(1.0) == pytest.approx(0.9), "then one interval from there: no burst of catch-up rounds"


def test_every_periodic_loop_waits_with_the_ticker():
    """One pace: no loop computes its own "interval minus the time the round took" (``nvtopy log`` used to)."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "nvtopy"
    own_wait = re.compile(r"interval\s*-\s*\(\s*time\.monotonic\(\)")
    offenders = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if own_wait.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
