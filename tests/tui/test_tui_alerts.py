"""Alerts in the monitor: the local engine on the snapshots the app takes, toasts, the alerts screen, the seam.

Driven through Textual's pilot: on the simulated backend (a fault injected as ``--demo-fault`` does)
through the real poller, on hand-made snapshots where the times must be exact (hysteresis, bursts),
and on a real recording for the replay. The toasts' rate limit is also tested alone, on a manual clock.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from textual.widgets._toast import Toast

from nvtopy.alerts.events import AlertEvent, Transition
from nvtopy.alerts.settings import AlertSettings, alert_settings
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.model import GpuHealth
from nvtopy.sources.collector import Collector
from nvtopy.sources.replay import ReplayPlayer, load_recording
from nvtopy.tui.alert_feed import TOASTS_PER_WINDOW, AlertFeed, ToastLimiter
from nvtopy.tui.alerts_screen import AlertsScreen
from nvtopy.tui.app import NvtopyApp

from ..builders import NOW, FixedSource, gpu_process, gpu_sample, gpu_state, host_info, run_nvtopy, snapshot_of
from ..tui_helpers import header_line, screen_text, started, wait_until

pytestmark = pytest.mark.timeout(120)

ME = "alice"
WINDOW_S = 1.5  # the toasts' window in the app tests (TOAST_WINDOW_S in use)
HOSTILE = "[bold]x\x1b[2J [red]boom[/red]"


def lost(index: int, *, is_lost: bool = True):
    return gpu_state(index, sample=gpu_sample(lost=is_lost))


def snap(*gpus, timestamp: float = NOW):
    return snapshot_of(*gpus, timestamp=timestamp, host=host_info(user=ME))


async def show(pilot, app: NvtopyApp, snapshot) -> None:
    target = app.snapshots_applied + 1
    app.source._publish(snapshot)
    await wait_until(pilot, lambda: app.snapshots_applied >= target, message="the snapshot")
    await pilot.pause()


def toasts(app: NvtopyApp) -> list[tuple[str, str, str]]:
    """Every notification the app has up now: (title, message, severity)."""
    return [(n.title, n.message, n.severity) for n in app._notifications]


def alert_toasts(app: NvtopyApp) -> list[tuple[str, str, str]]:
    return [t for t in toasts(app) if "alerts" in t[1] or t[0].startswith(("FIRING", "cleared"))]


def alerts_text(app: NvtopyApp) -> str:
    """Everything the alerts screen holds (scrolled out of view or not)."""
    screen = app.screen
    assert isinstance(screen, AlertsScreen), screen
    return screen.texts["firing"].plain + "\nHistory\n" + screen.query_one("#alerts-history").plain


def fixed_app(notify=None, settings: AlertSettings | None = None, **kwargs) -> NvtopyApp:
    alerts = settings if settings is not None else AlertSettings()
    return NvtopyApp(FixedSource(), poll=False, alerts=alerts, notify=notify, **kwargs)


# --------------------------------------------------------------------------- on the simulated backend


async def test_an_injected_fault_toasts_lists_and_reaches_the_seam(sim):
    seen: list[AlertEvent] = []
    faults = parse_fault_specs(["lost@1"], gpus=3)
    app = NvtopyApp.for_backend(sim(gpus=3, seed=2, faults=faults), alerts=AlertSettings(), notify=seen.append)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await wait_until(pilot, lambda: any(e.rule_id == "gpu-lost" for e in seen), message="gpu-lost fired")
        await pilot.pause()
        lost_event = next(e for e in seen if e.rule_id == "gpu-lost")
        assert lost_event.transition is Transition.FIRING and lost_event.gpu_index == 1
        got = alert_toasts(app)
        assert got, toasts(app)
        assert any("GPU lost" in title + message for title, message, _ in got)
        assert all("\\n" not in message for _, message, _ in got), "lines, not escaped newlines"
        assert all(severity == "error" for title, _, severity in got if "critical" in title), got
        assert "1 alert (a)" in header_line(app) or "alerts (a)" in header_line(app)
        await pilot.press("a")
        await pilot.pause()
        text = alerts_text(app)
        assert "CRITICAL" in text and "GPU lost" in text and "GPU 1" in text
        assert "fell off the bus" in text and "do: Drain the node" in text
        assert "FIRING critical GPU lost" in " ".join(text.split())
        # The monitor's keys do not reach past it; esc closes it.
        order = app.order
        await pilot.press("s", "K")
        await pilot.pause()
        assert isinstance(app.screen, AlertsScreen) and app.order == order
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, AlertsScreen)


# --------------------------------------------------------------------------- hand-made snapshots, exact times


async def test_a_cleared_alert_leaves_the_firing_list_for_the_history_newest_first():
    seen: list[AlertEvent] = []
    app = fixed_app(seen.append)
    clear_s = AlertSettings().get("gpu-lost").rule.clear_s
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, snap(lost(0), lost(1, is_lost=False), timestamp=NOW))
        assert [e.transition for e in seen] == [Transition.FIRING]
        await pilot.press("a")
        await pilot.pause()
        text = alerts_text(app)
        assert text.index("Firing now") < text.index("GPU lost") < text.index("History")
        assert "nothing fires" not in text
        # Back, and clear for the rule's clear_s: it clears, and the screen follows while open.
        await show(pilot, app, snap(lost(0, is_lost=False), lost(1, is_lost=False), timestamp=NOW + 1))
        await show(pilot, app, snap(lost(0, is_lost=False), lost(1, is_lost=False), timestamp=NOW + 2 + clear_s))
        assert [e.transition for e in seen] == [Transition.FIRING, Transition.CLEARED]
        text = alerts_text(app)
        firing_part, history = text.split("History", 1)
        assert "nothing fires" in firing_part and "GPU lost" not in firing_part
        assert history.index("cleared") < history.index("FIRING"), "newest first"
        assert "2 transitions" in screen_text(app) and "0 firing" in screen_text(app)
        await pilot.press("q")  # q closes it, it does not quit the monitor
        await pilot.pause()
        assert not isinstance(app.screen, AlertsScreen) and app.is_running
        assert "alert" not in header_line(app), "nothing fires: no count in the header"


async def test_a_burst_becomes_one_summarising_toast():
    app = fixed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, snap(*(lost(i) for i in range(8))))
        got = alert_toasts(app)
        assert len(got) == 1, got
        title, message, severity = got[0]
        assert title == "8 alerts: 8 fired" and "GPU lost x8" in message and severity == "error"
        assert "8 alerts (a)" in header_line(app)


async def test_a_storm_over_many_snapshots_is_limited_then_summed_up(clock):
    """One transition a snapshot: the first few toast alone; the rest wait for the window and come as one."""
    app = fixed_app()
    assert app.alerts is not None
    # The window on a manual clock (however slow the machine, the storm is inside it), short: the app's timer
    # for the held transitions waits this long in real time.
    app.alerts.toasts = ToastLimiter(window=WINDOW_S, clock=clock)
    async with app.run_test(size=(120, 40)) as pilot:
        # GPU i is lost from snapshot i on: one new gpu-lost a snapshot.
        for step in range(TOASTS_PER_WINDOW + 4):
            gpus = [lost(i, is_lost=i <= step) for i in range(TOASTS_PER_WINDOW + 4)]
            await show(pilot, app, snap(*gpus, timestamp=NOW + step))
        assert len(alert_toasts(app)) == TOASTS_PER_WINDOW, alert_toasts(app)
        assert app.alerts is not None and app.alerts.toasts.held == 4
        clock.advance(WINDOW_S)
        # Once the window allows, the 4 held ones are one toast (the app's timer flushes them).
        await wait_until(
            pilot,
            lambda: any(t[0] == "4 alerts: 4 fired" for t in alert_toasts(app)),
            timeout=WINDOW_S + 10,
            message="the summary of the held transitions",
        )
        assert app.alerts.toasts.held == 0


def test_the_toast_limiter_alone_on_a_manual_clock(clock):
    app_clock = clock
    limiter = ToastLimiter(window=10.0, most=2, clock=app_clock)
    feed = AlertFeed(AlertSettings())
    one = feed.observe(snap(lost(0)))
    assert [t.title for t in limiter.add(one)] == ["FIRING critical: GPU lost"]
    two = feed.observe(snap(lost(0), lost(1), timestamp=NOW + 1))
    assert [t.severity for t in limiter.add(two)] == ["error"]
    three = feed.observe(snap(lost(0), lost(1), lost(2), timestamp=NOW + 2))
    four = feed.observe(snap(lost(0), lost(1), lost(2), lost(3), timestamp=NOW + 3))
    assert limiter.add(three) == [] and limiter.add(four) == [], "two toasts in 10 s at most"
    assert limiter.held == 2 and limiter.due() == pytest.approx(10.0)
    app_clock.advance(10.0)
    assert limiter.due() == 0.0
    summary = limiter.flush()
    assert [t.title for t in summary] == ["2 alerts: 2 fired"] and limiter.held == 0 and limiter.due() is None


async def test_the_seam_gets_each_event_and_a_failing_one_is_said_once():
    calls: list[AlertEvent] = []

    def broken(event: AlertEvent) -> None:
        calls.append(event)
        raise RuntimeError("the webhook is down")

    app = fixed_app(broken)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, snap(lost(0), lost(1)))
        await show(pilot, app, snap(lost(0), lost(1), lost(2), timestamp=NOW + 1))
        assert [(e.rule_id, e.gpu_index, e.transition) for e in calls] == [
            ("gpu-lost", 0, Transition.FIRING),
            ("gpu-lost", 1, Transition.FIRING),
            ("gpu-lost", 2, Transition.FIRING),
        ]
        failures = [m for _, m, _ in toasts(app) if "alert notifications failed" in m]
        assert failures == ["alert notifications failed: RuntimeError: the webhook is down (said once)"]
        assert app.is_running


async def test_the_screen_and_the_toasts_show_outside_text_literally():
    """A process's command line in an alert's words (process-ended): never markup, never a terminal escape."""
    mine = gpu_process(0, 4242, user=ME, command=HOSTILE, name="[bold]x")
    app = fixed_app()
    async with app.run_test(size=(160, 40), notifications=True) as pilot:  # the toasts drawn, as users see them
        await show(pilot, app, snap(gpu_state(0, mine)))
        await show(pilot, app, snap(gpu_state(0), timestamp=NOW + 1))  # it ended
        got = alert_toasts(app)
        assert len(got) == 1 and "[bold]x\\e[2J [red]boom[/red]" in got[0][1], got
        await wait_until(pilot, lambda: bool(app.screen.query(Toast)), message="the toast drawn")
        drawn = [str(toast.render().plain) for toast in app.screen.query(Toast)]
        assert any("[bold]x\\e[2J [red]boom[/red]" in words for words in drawn), drawn
        await pilot.press("a")
        await pilot.pause()
        text = alerts_text(app)
        assert "[bold]x\\e[2J [red]boom[/red]" in text and "\x1b" not in text
        shown = screen_text(app)
        assert "[bold]x\\e[2J" in shown, "drawn as written, not as bold"
        assert "Process ended" in text or "process" in text.lower()


async def test_the_screen_fits_80x24_and_200x50_and_the_header_counts():
    for size in ((80, 24), (200, 50)):
        app = fixed_app()
        async with app.run_test(size=size) as pilot:
            await show(pilot, app, snap(*(lost(i) for i in range(6))))
            assert "6 alerts (a)" in header_line(app), header_line(app)
            await pilot.press("a")
            await pilot.pause()
            shown = screen_text(app)
            assert "Alerts" in shown and "6 firing (6 critical)" in shown
            assert "esc, q or a closes" in shown.splitlines()[size[1] - 1]
            body = app.screen.query_one("#alerts-body")
            await pilot.press("end")
            await pilot.pause()
            assert size == (200, 50) or body.scroll_y > 0, "80x24: the list scrolls"
            await pilot.press("a")  # a closes it too
            await pilot.pause()
            assert not isinstance(app.screen, AlertsScreen)


async def test_an_app_without_alert_settings_evaluates_nothing():
    app = NvtopyApp(FixedSource(), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, snap(lost(0)))
        assert app.alerts is None and app.firing_alerts() == () and not alert_toasts(app)
        assert "alert" not in header_line(app)


async def test_the_config_scope_applies_in_the_monitor():
    settings = alert_settings({"gpu-lost": {"gpus": [1]}})
    app = fixed_app(settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await show(pilot, app, snap(lost(0), lost(1)))
        assert [e.gpu_index for e in app.firing_alerts() if e.rule_id == "gpu-lost"] == [1]


# --------------------------------------------------------------------------- replay


@pytest.fixture
def lost_recording(tmp_path, sim, clock):
    """Eight seconds of a simulated node whose GPU 1 is lost, as ``nvtopy record`` writes them."""
    backend = sim(gpus=2, seed=5, faults=parse_fault_specs(["lost@1"], gpus=2))
    collector = Collector(backend)
    path = tmp_path / "lost.jsonl"
    lines = []
    for _ in range(8):
        clock.advance(1)
        lines.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_a_replay_lists_and_toasts_its_alerts_but_never_notifies(lost_recording):
    seen: list[AlertEvent] = []
    player = ReplayPlayer(load_recording(str(lost_recording)), speed=64.0)
    app = NvtopyApp(player, alerts=AlertSettings(), notify=seen.append)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: player.position == 7 and app.snapshot is player.snapshots[7])
        assert app.alerts is not None
        assert any(e.rule_id == "gpu-lost" for e in app.alerts.history), list(app.alerts.history)
        assert seen == [], "a recording's alerts are never sent out"
        assert not app.alerts.live
        await pilot.press("a")
        await pilot.pause()
        assert "GPU lost" in alerts_text(app) and "a recording's: shown, not sent" in screen_text(app)
        # Stepping back starts the engine over there: the recording is watched again, nothing fires early.
        await pilot.press("escape", "left_square_bracket", "left_square_bracket")
        await pilot.pause()
        assert seen == []


def test_the_feed_without_notify_and_live_sends_nothing_and_a_replay_step_back_restarts():
    calls: list[AlertEvent] = []
    feed = AlertFeed(AlertSettings(), calls.append, live=False)
    feed.observe(snap(lost(0)))
    assert calls == [] and len(feed.history) == 1
    live = AlertFeed(AlertSettings(), calls.append)
    live.observe(snap(lost(0), timestamp=NOW + 5))
    engine = live.engine
    live.observe(snap(lost(0), timestamp=NOW))  # back in time: a new engine, which fires again
    assert live.engine is not engine and len(calls) == 2


def test_health_worse_and_not_responding_words_survive_nan_values():
    """A GPU whose stall time is NaN: the engine's words say N/A, and the screen's text builds."""
    from nvtopy.tui.alerts_screen import firing_text, history_text

    stalled = dataclasses.replace(
        lost(0, is_lost=False), health=GpuHealth(responding=False, stalled_seconds=float("nan"))
    )
    feed = AlertFeed(AlertSettings())
    feed.observe(snap(stalled))
    feed.observe(snap(stalled, timestamp=NOW + 120))
    text = firing_text(feed.firing(), NOW + 120).plain + history_text(feed.history, NOW + 120).plain
    assert "not responding" in text.lower() and "nan" not in text.lower()


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ("[alerts.nope]\nenabled = false\n", "nvtopy: error: alerts.nope: unknown rule 'nope'"),
        ('[alerts.gpu-free]\nmemory_mib = "lots"\n', "alerts.gpu-free.memory_mib: must be a number from 0 to 1e9"),
    ],
)
def test_a_bad_alerts_entry_is_one_line_and_exit_2_before_the_monitor_draws(tmp_path, table, said):
    config = tmp_path / "config.toml"
    config.write_text(table)
    env = {**os.environ, "NVTOPY_CONFIG": str(config)}
    for args in (("--demo",), ("--remote", "127.0.0.1:9")):
        done = run_nvtopy(*args, env=env, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (args, done.stderr)
        assert "\x1b[?1049h" not in done.stdout, "nothing was drawn"


def test_a_bad_alerts_entry_stops_a_replay_too(tmp_path, lost_recording):
    config = tmp_path / "config.toml"
    config.write_text("[alerts.gpu-lost]\nfor = -1\n")
    done = run_nvtopy("replay", str(lost_recording), env={**os.environ, "NVTOPY_CONFIG": str(config)}, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvtopy: error: alerts.gpu-lost.for: must be seconds"), lines


def test_the_cli_gives_the_local_monitor_the_channels_and_a_fleet_none(monkeypatch, tmp_path):
    """The seam: the local monitor's notify is ``watch.channels_notifier``'s; a fleet's monitor sends nothing."""
    from nvtopy.commands import dispatch, watch

    config = tmp_path / "config.toml"
    config.write_text('[alerts]\nchannels = ["desktop"]\n[alerts.gpu-lost]\ngpus = [1]\n')
    monkeypatch.setenv("NVTOPY_CONFIG", str(config))
    given: list[AlertSettings] = []

    class Dispatcher:
        """Stands in for nvtopy.notify's (its own tests send for real): what the monitor hands it, and its close."""

        closed = False

        def send(self, event: AlertEvent) -> None:
            calls.append(event)

        def close(self, timeout: float) -> bool:
            Dispatcher.closed = True
            return True

    def sender(settings: AlertSettings, on_problem):
        given.append(settings)
        return dispatcher

    calls: list[AlertEvent] = []
    dispatcher = Dispatcher()
    monkeypatch.setattr(watch, "channels_notifier", sender)
    apps: list[NvtopyApp] = []
    monkeypatch.setattr(NvtopyApp, "run", lambda app, *a, **k: apps.append(app))
    assert dispatch.main(["--demo"]) == 0
    assert dispatch.main(["--remote", "127.0.0.1:9"]) == 0
    local, fleet = apps
    assert local.alerts is not None and local.alerts.live and local.alerts.notify == dispatcher.send
    assert Dispatcher.closed, "the monitor closes its channels when it ends"
    assert given and given[0].channels == ("desktop",) and given[0].get("gpu-lost").gpus == ("1",)
    assert fleet.alerts is not None and fleet.alerts.notify is None, "a fleet's alerts are shown, not sent"
    assert fleet.alerts.settings.get("gpu-lost").gpus == ("1",)
    assert len(given) == 1, "no sender is even made for a fleet"


async def test_a_new_transition_wraps_only_itself_in_the_history():
    """500 transitions: a new one is wrapped alone (the others' lines are reused), and the list scrolls to its end."""
    from textual.app import App

    feed = AlertFeed(AlertSettings())
    for cycle in range(250):  # GPU 0 lost and back, again and again (past clear and cooldown): 500 transitions
        at = NOW + cycle * 1000
        for is_lost, later in ((True, 0), (False, 1), (False, 100)):
            feed.observe(snap(lost(0, is_lost=is_lost), timestamp=at + later))
    assert len(feed.history) == 500

    class Screen(App[None]):
        def on_mount(self) -> None:
            self.push_screen(AlertsScreen(feed.firing(), feed.history, end))

    end = NOW + 250 * 1000  # the newest transition's time: "now" for the screen, before and after
    app = Screen()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        history = screen.query_one("#alerts-history")
        before = list(history._lines)
        assert len(before) >= 1000
        feed.observe(snap(lost(0), timestamp=end))
        screen.show(feed.firing(), feed.history, end)
        await pilot.pause()
        after = history._lines
        assert len(after) == len(before), "one in, the oldest out"
        reused = {id(strip) for strip in before} & {id(strip) for strip in after}
        assert len(reused) == len(after) - 2, "every line but the new transition's two is the one drawn before"
        await pilot.press("end")
        await pilot.pause()
        assert screen.query_one("#alerts-body").scroll_y > 900


def test_the_alerts_screen_picture_at_80x24(snap_compare, utc):
    """The screen on an app of its own (the monitor under it has pictures of its own): a critical and a warning
    firing, a cleared one in the history, a hostile command line shown as written."""
    from textual.app import App

    feed = AlertFeed(AlertSettings())
    hot = gpu_state(2, sample=gpu_sample(remapped_rows_pending=True))
    mine = gpu_process(0, 4242, user=ME, command=HOSTILE)
    feed.observe(snap(gpu_state(0, mine), lost(1), hot, timestamp=NOW))
    feed.observe(snap(gpu_state(0), lost(1), hot, timestamp=NOW + 30))
    clear_s = AlertSettings().get("gpu-lost").rule.clear_s
    feed.observe(snap(gpu_state(0), lost(1, is_lost=False), hot, timestamp=NOW + 40))
    feed.observe(snap(gpu_state(0), lost(1, is_lost=False), hot, timestamp=NOW + 41 + clear_s))

    class Screen(App[None]):
        CSS_PATH = None

        def on_mount(self) -> None:
            self.push_screen(AlertsScreen(feed.firing(), feed.history, NOW + 300))

    assert snap_compare(Screen(), terminal_size=(80, 24))
