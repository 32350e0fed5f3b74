"""The fleet's garbage-collector policy: paused while decoding, settled (frozen, thresholds raised) for a long run."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nvtopy.sources import gc_policy
from nvtopy.sources.gc_policy import (
    FLEET_THRESHOLDS,
    MONITOR_THRESHOLDS,
    paused_gc,
    settle_for_fleet,
    settle_for_monitor,
)

_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collector_restored():
    """Whatever a test does to the collector, the next test gets it as it was."""
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_settle_freezes_what_is_alive_and_raises_the_thresholds(monkeypatch):
    before = gc.get_threshold()
    kept: list[bool] = []  # the allocator's settings are the process's for good: asked here, tried in a child below
    monkeypatch.setattr(gc_policy, "keep_freed_blocks", lambda: kept.append(True) or True)
    try:
        settle_for_fleet()
        assert gc.get_threshold() == FLEET_THRESHOLDS
        assert gc.get_freeze_count() > 1000, "the modules and everything alive now are out of the collections"
        assert kept == [True], "a fleet view's allocator keeps the large blocks it frees"
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


# A child that frees ever larger blocks of 20-22 MiB (as a fleet's answers grow by a few per cent), after
# settle_for_fleet or not, and prints how many bytes glibc had mapped for them while each was alive (mallinfo2's
# hblkhd: blocks given a mapping of their own, unmapped at their free), less what it had mapped before.
_PROBE = r"""
import ctypes, sys
from nvtopy.sources.gc_policy import settle_for_fleet
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
if sys.argv[1] == "settled":
    settle_for_fleet()
before = mallinfo2().hblkhd
mapped = []
for mib in (20, 21, 22):
    block = b"x" * (mib << 20)
    mapped.append(mallinfo2().hblkhd - before)
    del block
print(*mapped)
"""


def _mapped_for_blocks(how: str) -> list[int]:
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    done = subprocess.run([sys.executable, "-c", _PROBE, how], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.split()]


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)
def test_a_fleet_views_allocator_keeps_the_large_blocks_it_frees():
    """A fleet refresh frees a 21 MB answer and takes the next a second later: settled for a fleet, glibc serves
    each from the heap it freed the last into (nothing mapped for it), where by default each block larger than any
    before gets a mapping of its own, unmapped at its free (every page of it faulted in afresh the next time)."""
    if tuple(int(part) for part in platform.libc_ver()[1].split(".")[:2]) < (2, 33):
        pytest.skip("mallinfo2 (glibc 2.33) reads what is mapped")
    assert all(mapped >= 20 << 20 for mapped in _mapped_for_blocks("default")), "the default maps each block"
    assert all(mapped < 1 << 20 for mapped in _mapped_for_blocks("settled")), "settled: from the heap"


def test_keeping_freed_blocks_says_whether_it_took():
    """True where the allocator took the settings (glibc), False elsewhere; never an error (in a child: the settings
    are the process's for good)."""
    probe = "from nvtopy.sources.gc_policy import keep_freed_blocks; print(keep_freed_blocks())"
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert done.stdout.strip() == str(glibc)
