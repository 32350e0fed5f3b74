"""The monitor's first frame (issue 27): the poller's head start, warnings said before the app ran, the collector.

``nvtopy`` starts its poller before Textual and the app's modules are imported, so the driver is opened
and the first poll taken while they load; the collector is off until the first frame is out and then
settled (:func:`nvtopy.sources.gc_policy.settle_for_monitor`); a selection warning said on the poller's
thread before the app mounted waits for it (:class:`nvtopy.tui.notices.LateNotices`).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator

import pytest

from nvtopy.commands import dispatch, monitor
from nvtopy.sources.gc_policy import MONITOR_THRESHOLDS
from nvtopy.sources.poller import Poller
from nvtopy.tui import notices as notices_module
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.notices import MAX_HELD, LateNotices

from ..tui_helpers import started, wait_until

SIZE = (120, 40)
TWICE = "CUDA_VISIBLE_DEVICES names a device twice: CUDA exposes no device"


@pytest.fixture
def collector_restored() -> Iterator[None]:
    """The monitor settles this process's collector (frozen, thresholds raised): the next test gets it as it was."""
    before, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)
    (gc.enable if enabled else gc.disable)()


def test_late_notices_are_held_until_shown_then_pass_straight_through():
    notices, shown = LateNotices(), []
    notices.say("one")
    notices.say("two")
    assert shown == []
    notices.show_with(shown.append)
    assert shown == ["one", "two"], "what was said before, in order"
    notices.say("three")
    assert shown == ["one", "two", "three"], "after show_with: at once"


def test_late_notices_hold_a_bounded_number_and_say_how_many_more():
    notices, shown = LateNotices(), []
    for n in range(MAX_HELD + 5):
        notices.say(f"w{n}")
    notices.show_with(shown.append)
    assert shown == [f"w{n}" for n in range(MAX_HELD)] + ["and 5 more warnings (listed after the monitor ends)"]
    notices.say("later")
    assert shown[-1] == "later"


def test_late_notices_from_many_threads_lose_none_and_show_each_once(monkeypatch):
    monkeypatch.setattr(notices_module, "MAX_HELD", 10_000)  # the bound is tested above; here, the lock
    notices, shown = LateNotices(), []
    threads = [threading.Thread(target=lambda n=n: [notices.say(f"{n}-{i}") for i in range(200)]) for n in range(4)]
    for thread in threads[:2]:
        thread.start()
    notices.show_with(shown.append)
    for thread in threads[2:]:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(shown) == sorted(f"{n}-{i}" for n in range(4) for i in range(200))


def _run_in_pilot(monkeypatch, seen: dict[str, object], before_pilot=None) -> None:
    """``NvtopyApp.run`` as a pilot session: the first snapshot drawn, what the test asks recorded in ``seen``."""

    def run_in_pilot(app: NvtopyApp, *args, **kwargs) -> None:
        if before_pilot is not None:
            before_pilot(app)

        async def session() -> None:
            async with app.run_test(size=SIZE, notifications=True) as pilot:
                await started(pilot, app)
                await wait_until(pilot, gc.isenabled, message="the collector back on after the first frame")
                seen["frozen"] = gc.get_freeze_count()
                seen["threshold"] = gc.get_threshold()
                seen["notifications"] = [n.message for n in app._notifications]  # type: ignore[attr-defined]

        asyncio.run(session())

    monkeypatch.setattr(NvtopyApp, "run", run_in_pilot)


def test_the_poller_starts_before_the_app_is_imported_and_the_collector_settles_after_the_first_frame(
    monkeypatch, collector_restored
):
    order: list[object] = []
    start, import_app = Poller.start, monitor._import_app_without_tls

    def recorded_start(poller: Poller) -> Poller:
        order.append("poller started")
        started_pollers.append(poller)
        return start(poller)

    def recorded_import() -> type[NvtopyApp]:
        (poller,) = started_pollers
        order.append(("app imported, collector on", gc.isenabled(), "first snapshot", poller.latest is not None))
        return import_app()

    started_pollers: list[Poller] = []
    monkeypatch.setattr(Poller, "start", recorded_start)
    monkeypatch.setattr(monitor, "_import_app_without_tls", recorded_import)
    monkeypatch.setattr(monitor, "HEAD_START_WAIT_S", 20.0)  # a loaded test machine: the bound, never the wait
    seen: dict[str, object] = {}
    _run_in_pilot(monkeypatch, seen)
    gc.unfreeze()  # the count below is this run's freeze, not an earlier test's
    assert dispatch.main(["--demo", "--demo-gpus", "2"]) == 0
    assert order[:2] == ["poller started", ("app imported, collector on", False, "first snapshot", True)]
    assert seen["threshold"] == MONITOR_THRESHOLDS
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 1000, "settled: what was alive then frozen"
    assert gc.isenabled()


def test_the_collector_is_on_again_when_the_app_never_draws(monkeypatch, collector_restored):
    """An app that ends before its first frame (here: never run) leaves the collector as it found it."""
    monkeypatch.setattr(NvtopyApp, "run", lambda app, *args, **kwargs: None)
    assert dispatch.main(["--demo", "--demo-gpus", "1"]) == 0
    assert gc.isenabled()


def test_a_selection_warning_said_before_the_app_mounted_is_a_toast_and_a_line_after(
    monkeypatch, capsys, collector_restored
):
    """Said on the poller's thread while the app's modules load: held, shown once the app mounts, on stderr after."""

    def first_poll_done(app: NvtopyApp) -> None:
        deadline = time.monotonic() + 20
        while app.source.latest is None:  # the selection (and its warning) comes before the first poll
            assert time.monotonic() < deadline, "the poller never published"
            time.sleep(0.01)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0")
    seen: dict[str, object] = {}
    _run_in_pilot(monkeypatch, seen, before_pilot=first_poll_done)
    assert dispatch.main(["--demo", "--demo-gpus", "2", "--only-visible"]) == 0
    assert seen["notifications"] == [TWICE]
    assert capsys.readouterr().err == f"nvtopy: warning: {TWICE}\n"


class _SlowOpen:
    """An opener that takes ``seconds`` (or fails after them): what a slow driver's ``nvmlInit`` does."""

    def __init__(self, backend, seconds: float, error: Exception | None = None) -> None:
        self.backend, self.seconds, self.error = backend, seconds, error

    def __call__(self):
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return self.backend


def test_waiting_for_the_first_snapshot_is_bounded_and_ends_with_it_or_an_open_error(sim):
    """The monitor's wait before it imports the UI: the snapshot once there, never longer than asked, at once on an
    open error."""
    quick = Poller.for_monitor(None, opener=_SlowOpen(sim(gpus=1), 0.0), events=False).start()
    try:
        assert quick.wait_for_first(20.0) and quick.latest is not None
    finally:
        quick.stop()
    slow = Poller.for_monitor(None, opener=_SlowOpen(sim(gpus=1), 3.0), events=False).start()
    try:
        began = time.monotonic()
        assert not slow.wait_for_first(0.1)
        assert time.monotonic() - began < 2.0, "the bound, not the driver"
    finally:
        slow.stop(timeout=0.0)
    failing = Poller.for_monitor(None, opener=_SlowOpen(None, 0.05, RuntimeError("no driver")), events=False).start()
    try:
        began = time.monotonic()
        assert not failing.wait_for_first(20.0)
        assert time.monotonic() - began < 10.0 and isinstance(failing.open_error, RuntimeError)
    finally:
        failing.stop()
