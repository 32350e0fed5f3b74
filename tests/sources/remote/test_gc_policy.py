"""The fleet's garbage-collector policy: paused while decoding, settled (frozen, thresholds raised) for a long run."""

from __future__ import annotations

import gc
import threading

from nvtopy.sources.remote.gc_policy import FLEET_THRESHOLDS, paused_gc, settle_for_fleet


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
