"""The fleet's garbage-collector policy: paused while decoding, settled (frozen, thresholds raised) for a long run."""

from __future__ import annotations

import gc
import threading

import pytest

from nvtopy.sources.gc_policy import (
    FLEET_THRESHOLDS,
    MONITOR_THRESHOLDS,
    paused_gc,
    settle_for_fleet,
    settle_for_monitor,
)


@pytest.fixture
def collector_restored():
    """Whatever a test does to the collector, the next test gets it as it was."""
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_settle_freezes_what_is_alive_and_raises_the_thresholds():
    before = gc.get_threshold()
    try:
        settle_for_fleet()
        assert gc.get_threshold() == FLEET_THRESHOLDS
        assert gc.get_freeze_count() > 1000, "the modules and everything alive now are out of the collections"
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_paused_gc_nests_across_threads_and_restores_the_collector():
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with paused_gc():
            inside.set()
            assert leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread is still inside"
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_settle_for_the_monitor_freezes_what_is_alive_and_raises_the_young_threshold(collector_restored):
    settle_for_monitor()
    assert gc.get_threshold() == MONITOR_THRESHOLDS
    assert gc.get_freeze_count() > 1000


def test_the_local_monitor_sets_its_thresholds_before_it_runs_and_a_one_shot_does_not(
    collector_restored, monkeypatch, capsys
):
    """The program's monitor runs with the monitor's thresholds (its collection and freeze wait for the first frame:
    tests/tui/test_first_frame.py); ``--once`` (and so a caller of ``main`` for a
    snapshot) leaves the process's collector as it found it."""
    from nvtopy.commands import dispatch
    from nvtopy.tui.app import NvtopyApp

    seen: list[tuple[int, ...]] = []
    monkeypatch.setattr(NvtopyApp, "run", lambda self, *args, **kwargs: seen.append(gc.get_threshold()))
    gc.set_threshold(700, 10, 10)
    frozen = gc.get_freeze_count()
    assert dispatch.main(["--demo", "--once"]) == 0
    # Not "== frozen": a frozen object freed meanwhile (by this run or another test's thread) leaves the permanent
    # generation, so the count may drop by a few; a freeze would add every object alive (thousands).
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() <= frozen
    assert dispatch.main(["--demo"]) == 0
    assert seen == [MONITOR_THRESHOLDS]
