"""Themes (the colour-blind palette), NO_COLOR in the monitor, and the config file wired into ``nvtopy``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rich.style import Style

from nvtopy.commands import dispatch
from nvtopy.render.cells import ALERT, BAD, GOOD, HOT, PALETTES, RICH_STYLES, WARN, use_palette
from nvtopy.render.processes import SortOrder
from nvtopy.tui.app import NvtopyApp

from ..tui_helpers import started, widget_strips

SIZE = (120, 40)
STATUS = (GOOD, WARN, HOT, ALERT, BAD)


def colours(style_text: str) -> set[str]:
    style = Style.parse(style_text)
    return {c.name for c in (style.color, style.bgcolor) if c is not None}


# --------------------------------------------------------------------------- the colour-blind palette


def test_the_colorblind_palette_never_says_red_against_green():
    default, safe = PALETTES["default"], PALETTES["colorblind"]
    for category in STATUS:
        assert safe[category] != default[category], category
        assert not colours(safe[category]) & {"red", "green", "bright_red", "bright_green"}, category
    # OK, warning and alert stay three different colours.
    assert len({frozenset(colours(safe[c])) for c in (GOOD, WARN, ALERT)}) == 3
    use_palette("colorblind")
    assert RICH_STYLES[GOOD] == "#56B4E9" and RICH_STYLES[ALERT] == "bold white on #D55E00"
    use_palette("default")
    assert default == RICH_STYLES


def _segment_colours(app, widget_id: str) -> set[str]:
    found = set()
    for strip in widget_strips(app.query_one(widget_id)):
        for segment in strip:
            if segment.style is not None:
                for color in (segment.style.color, segment.style.bgcolor):
                    if color is not None and color.triplet is not None:
                        found.add(color.triplet.hex.upper())
                    elif color is not None:
                        found.add(color.name)
    return found


async def test_the_colorblind_theme_recolours_panels_and_table_and_a_theme_change_goes_back(sim):
    backend = sim(gpus=2, seed=1, processes_per_gpu=3, faults=_hot())
    app = NvtopyApp.for_backend(backend, interval=2.0)
    app.theme = "colorblind"
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert RICH_STYLES[GOOD] == "#56B4E9"
        panel = _segment_colours(app, "#gpus")
        assert panel & {"#56B4E9", "#E69F00", "#D55E00"}, panel
        assert not panel & {"green", "red"}, panel
        app.theme = "nord"  # the command palette's "Change theme" does this
        await pilot.pause()
        await pilot.pause()
        assert RICH_STYLES[GOOD] == "green"
        panel = _segment_colours(app, "#gpus")
        assert not panel & {"#56B4E9", "#E69F00", "#D55E00"}, panel
        app.theme = "colorblind"
        await pilot.pause()
        await pilot.pause()
        assert _segment_colours(app, "#gpus") & {"#56B4E9", "#E69F00", "#D55E00"}


async def test_a_theme_changed_under_an_open_screen_recolours_the_monitor_once_it_closes(sim):
    """The health screen on top: the change still drops the monitor's cached panels and table lines."""
    from nvtopy.tui.health_screen import HealthScreen

    backend = sim(gpus=2, seed=1, processes_per_gpu=3, faults=_hot())
    app = NvtopyApp.for_backend(backend, interval=2.0)
    app.theme = "colorblind"
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert _segment_colours(app, "#gpus") & {"#56B4E9", "#E69F00", "#D55E00"}
        await pilot.press("H")
        await pilot.pause()
        assert isinstance(app.screen, HealthScreen)
        app.theme = "nord"
        await pilot.pause()
        await pilot.press("escape")
        app.source.poll_once(slow=True)  # the same readings (the clock stands still): every panel is cached
        await pilot.pause()
        await pilot.pause()
        panel = _segment_colours(app, "#gpus")
        assert panel and not panel & {"#56B4E9", "#E69F00", "#D55E00"}, panel


def _hot():
    from nvtopy.backends.simulated.faults import parse_fault_specs

    return parse_fault_specs(("hot@1",))


async def test_colorblind_is_a_registered_theme(sim):
    app = NvtopyApp.for_backend(sim(gpus=1), interval=2.0)
    assert "colorblind" in app.available_themes
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.theme == "textual-dark" and RICH_STYLES[GOOD] == "green"


# --------------------------------------------------------------------------- NO_COLOR


async def test_no_color_makes_the_monitor_monochrome(sim, monkeypatch):
    """Textual reads NO_COLOR itself (no-color.org): every colour becomes grey."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = NvtopyApp.for_backend(sim(gpus=2, seed=1, faults=_hot()), interval=2.0)
    assert app.no_color
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        segments = app.screen._compositor.render_update(full=True)
        from rich.console import Console

        console = Console(color_system="truecolor", file=open("/dev/null", "w"), width=SIZE[0])  # noqa: SIM115
        seen = set()
        for segment in console.render(segments):
            style = segment.style
            if style is None:
                continue
            for color in (style.color, style.bgcolor):
                if color is not None:
                    r, g, b = color.get_truecolor()
                    seen.add((r, g, b))
        assert seen and all(r == g == b for r, g, b in seen), sorted(seen)[:5]


# --------------------------------------------------------------------------- the config file in `nvtopy`


def _run_captured(monkeypatch, argv: list[str]) -> NvtopyApp:
    """``nvtopy ARGV`` until the app would run: the app as the CLI configured it (after a first snapshot)."""
    captured: list[NvtopyApp] = []

    def run_in_pilot(app: NvtopyApp, *args, **kwargs) -> None:
        async def session() -> None:
            async with app.run_test(size=SIZE, notifications=True) as pilot:
                await started(pilot, app)
                app.seen_notifications = [n.message for n in app._notifications]  # type: ignore[attr-defined]
                app.seen_titles = app.query_one("#processes")._placed  # type: ignore[attr-defined]
                app.seen_chart_window = app.query_one("#charts").window  # type: ignore[attr-defined]

        asyncio.run(session())
        captured.append(app)

    monkeypatch.setattr(NvtopyApp, "run", run_in_pilot)
    assert dispatch.main(argv) == 0
    (app,) = captured
    return app


def _write_config(text: str) -> Path:
    import os

    path = Path(os.environ["XDG_CONFIG_HOME"]) / "nvtopy" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_the_monitor_starts_as_the_config_file_says(monkeypatch):
    path = _write_config(
        'interval = 3\nview = "compact"\ncolumns = ["pid", "gpu_memory", "command"]\nsort = "pid desc"\n'
        'group_by = "user"\ntheme = "colorblind"\n[health]\nhang_after = 2\n'
    )
    app = _run_captured(monkeypatch, ["--demo", "--demo-gpus", "2"])
    assert app.source.interval == 3.0
    assert app.layout_mode == "compact"
    assert app.columns == ("pid", "gpu_memory", "command")
    assert [p.column.key for p in app.seen_titles] == ["pid", "gpu_memory", "command"]
    assert app.order == SortOrder("pid", True)
    assert app.group_by == "user"
    assert app.theme == "colorblind"
    assert app.source._thresholds.hang_seconds == 120
    assert app.config_path == path


def test_flags_win_over_the_config_file_in_the_monitor(monkeypatch):
    _write_config('interval = 3\nview = "compact"\ntheme = "colorblind"\nsort = "gpu_memory"\n')
    app = _run_captured(monkeypatch, ["--demo", "--interval", "0.5", "--view", "full", "--theme", "nord"])
    assert (app.source.interval, app.layout_mode, app.theme) == (0.5, "full", "nord")
    assert app.order == SortOrder("gpu_memory", True), "a column alone sorts its own way: memory biggest first"


def test_a_bad_config_file_is_a_warning_in_the_monitor_too(monkeypatch, capsys):
    path = _write_config('interval = 3\nview = "wide"\n')
    app = _run_captured(monkeypatch, ["--demo"])
    line = f"{path} line 2: 'view': must be one of auto, full, compact (not 'wide'); using defaults"
    assert capsys.readouterr().err == f"nvtopy: warning: {line}\n"
    assert app.startup_warnings == [line]
    assert line in app.seen_notifications
    assert app.source.interval == 1.0 and app.layout_mode == "auto"


def test_a_thousand_problems_are_one_warning_and_one_notification(monkeypatch, capsys):
    """Each problem was a notification of its own: 1,000 unknown keys buried the screen under 1,000 of them."""
    _write_config("".join(f"colour{n} = {n}\n" for n in range(1000)) + 'view = "compact"\n')
    app = _run_captured(monkeypatch, ["--demo"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1000 problems: line 1: unknown key 'colour0' ignored;" in err
    assert len(app.startup_warnings) == 1 and app.startup_warnings[0] in app.seen_notifications
    assert len(app.seen_notifications) == 1
    assert app.layout_mode == "compact", "unknown keys are ignored: the rest of the file applies"


def _recording(tmp_path, sim) -> Path:
    """A short recording of a simulated node, as ``nvtopy record`` writes it."""
    import json

    from nvtopy.formats.contract import snapshot_to_dict
    from nvtopy.sources.collector import Collector

    collector = Collector(sim(gpus=2, seed=3, processes_per_gpu=2), timeline=False)
    path = tmp_path / "run.jsonl"
    lines = []
    for _ in range(4):
        collector.backend._clock.advance(1)
        lines.append(json.dumps(snapshot_to_dict(collector.collect()), separators=(",", ":")))
    path.write_text("\n".join(lines) + "\n")
    collector.close()
    return path


def test_replay_starts_as_the_config_file_says(monkeypatch, tmp_path, sim):
    path = _write_config(
        'view = "compact"\ncolumns = ["pid", "gpu_memory", "command"]\nsort = "pid desc"\n'
        'group_by = "user"\ntheme = "colorblind"\nchart_window = "10m"\n'
    )
    app = _run_captured(monkeypatch, ["replay", str(_recording(tmp_path, sim))])
    assert app.layout_mode == "compact"
    assert [p.column.key for p in app.seen_titles] == ["pid", "gpu_memory", "command"]
    assert app.order == SortOrder("pid", True) and app.group_by == "user"
    assert app.theme == "colorblind" and app.seen_chart_window == 600.0
    assert app.config_path == path and app.readonly


def test_replay_flags_win_and_a_bad_file_is_one_warning(monkeypatch, tmp_path, sim, capsys):
    recording = str(_recording(tmp_path, sim))
    path = _write_config('view = "compact"\ntheme = "colorblind"\n')
    app = _run_captured(monkeypatch, ["replay", recording, "--view", "full", "--theme", "nord"])
    assert (app.layout_mode, app.theme) == ("full", "nord")
    path.write_text('view = "wide"\n')
    app = _run_captured(monkeypatch, ["replay", recording, "--config", str(path)])
    line = f"{path} line 1: 'view': must be one of auto, full, compact (not 'wide'); using defaults"
    assert capsys.readouterr().err == f"nvtopy: warning: {line}\n"
    assert app.startup_warnings == [line] and line in app.seen_notifications
    assert app.layout_mode == "auto"


@pytest.mark.parametrize("argv", [["--demo", "--once"], ["--demo", "--once", "--json"]])
def test_once_reads_the_health_thresholds_and_warns_about_a_bad_file(monkeypatch, capsys, argv):
    _write_config("[health]\nhang_after = 'soon'\n")
    assert dispatch.main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'health.hang_after'" in err


async def test_the_chart_window_comes_from_the_config(sim):
    from nvtopy.config import Config
    from nvtopy.tui.preferences import configure

    app = NvtopyApp.for_backend(sim(gpus=1), interval=2.0)
    configure(app, Config(chart_window="1h"))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.query_one("#charts").window == 3600.0


def test_configure_needs_only_what_configurable_names():
    """configure sets the starting view through change_view (one ViewState) and the theme through use_theme."""
    from dataclasses import dataclass, field

    from nvtopy.config import Config
    from nvtopy.tui.preferences import configure, configured_view
    from nvtopy.tui.view_state import ViewState

    @dataclass
    class Monitor:
        view: ViewState = field(default_factory=lambda: ViewState(layout_mode="compact"))
        config_path: Path | None = None
        themes: list[str | None] = field(default_factory=list)

        def change_view(self, view: ViewState) -> None:
            self.view = view

        def use_theme(self, name: str | None) -> None:
            self.themes.append(name)

    monitor = Monitor()
    config = Config(sort="pid desc", group_by="user", columns=("pid", "command"), chart_window="1h", theme="nord")
    configure(monitor, config, "/somewhere/config.toml")
    assert monitor.view == ViewState(
        order=SortOrder("pid", True),
        group_by="user",
        layout_mode="compact",  # the flag's, given to the app: the config leaves it
        columns=("pid", "command"),
        chart_window=3600.0,
    )
    assert monitor.themes == ["nord"] and monitor.config_path == Path("/somewhere/config.toml")
    assert configured_view(ViewState(), Config()) == ViewState(), "an empty config file: the defaults"
