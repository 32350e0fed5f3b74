"""``nvtopy``: the interactive monitor.

Data flow: the app shows any :class:`~nvtopy.sources.base.SnapshotSource` (a
local :class:`~nvtopy.sources.poller.Poller`, a replay, remote hosts) and uses
only what the source declares. The source's thread makes a snapshot and posts
:class:`SnapshotReady` (thread-safe; a newer one replaces an unprocessed older
one). The UI thread only filters, sorts and draws what it got. Signals go
through ``source.signal`` after a confirmation that names the targets (the
poller sends them on its own thread; a replay or remote hosts refuse); the UI
never calls NVML or psutil. Read-only is the app's decision: ``--readonly``, or
a source that cannot signal.

A slow or stuck driver never holds the UI: the CLI hands the poller an ``opener``
and the poller's thread opens the backend (``nvmlInit`` and the reads the GPU
selection needs) while the app draws and says how long the driver has kept it
waiting (``source.busy_since``); an error there ends the app with
:attr:`NvtopyApp.open_error` for the CLI to report. Quitting joins the source's
thread for :data:`QUIT_WAIT` at most: a thread inside a driver call is left to
the process's exit (it is a daemon).

GPU health (:mod:`nvtopy.health`) arrives in the snapshots like every other
value: the panels show each GPU's verdict, ``H`` opens the health screen (every
finding, the Xid timeline, memory and link readings), ``f`` narrows the table
to flagged processes. A GPU whose driver call is stuck is drawn "not
responding" with its last values dimmed by the same refresh that draws the
others: no key waits on the source.

MIG: a MIG-enabled GPU shows its instances under its panel or compact line,
the process table gets a MIG column (``1/2/0``: GPU/GI/CI) while some GPU has
instances, and the GPU picker (``g``) lists each GPU's instances: choosing some
narrows that GPU's panel and processes to them. The snapshot is never changed:
:meth:`visible_gpus` applies the filter to what the views get.

The view -- filter, sort, grouping, tree, GPU layout, columns, the charts' mode
and window -- is one frozen :class:`~nvtopy.tui.view_state.ViewState`: a key
that changes it calls :meth:`NvtopyApp.change_view`, which redraws once. The
help is made from :attr:`NvtopyApp.BINDINGS` (:func:`~nvtopy.tui.screens.help_sections`).

Alerts (:mod:`.alert_feed`): with ``alerts`` settings (the CLI passes the config's ``[alerts]``), the
local alert engine runs on each snapshot the app applies; each transition is a toast (a burst: one
summarising toast), ``a`` opens the alerts screen (:mod:`.alerts_screen`: what fires now, the history),
the header counts what fires, and ``notify`` -- the seam for :mod:`nvtopy.notify`'s channels -- is given
every transition of a live source (never a replay's: a source that can step is a recording).

Preferences: the CLI sets the starting sort, grouping, columns, theme and chart
window from the config file (:func:`~nvtopy.tui.preferences.configure`); ``C``
opens the column chooser, whose choice is written back to that file. The
``colorblind`` theme recolours nvtopy's own cells too (:mod:`.themes`).
"""

from __future__ import annotations

import asyncio
import signal as signals
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.driver import Driver
from textual.filter import LineFilter
from textual.screen import Screen
from textual.theme import Theme
from textual.timer import Timer
from textual.widgets import Input

from ..alerts.events import AlertEvent
from ..alerts.settings import AlertSettings
from ..backends.base import Backend, SignalOutcome
from ..health.verdict import HealthThresholds
from ..interval import DEFAULT_INTERVAL, MAX_INTERVAL, MIN_INTERVAL, STALE_INTERVALS
from ..model import GpuProcess, GpuState, Snapshot
from ..render.cells import NOT_VISIBLE
from ..render.gpu import has_interconnect, mig_rows, panel_extra_rows
from ..render.processes import (
    COLUMNS,
    FLAG_FILTERS,
    GROUP_MODES,
    GROUP_TITLES,
    HOST_COLUMN,
    HOST_GROUPING,
    MIG_COLUMN,
    ProcessFilter,
    ProcessGroup,
    SortOrder,
    Tags,
    build_groups,
    build_rows,
    host_labels,
)
from ..render.tree import AncestorRow
from ..sources.base import SnapshotSource
from ..sources.poller import Poller, SelectGpus
from ..textsafe import safe_text
from .alert_feed import AlertFeed, Notify, Toast
from .charts import ChartView, spare_rows
from .gpu_view import MODES, GpuView, host_groups, plan_layout
from .header import STARTING, HeaderBar, HostBar, KeyFooter, header_pieces, waiting_text, with_stall_notice
from .messages import SnapshotReady, SourceFailed
from .notices import LateNotices
from .plain import honour_terminal
from .preferences import chosen_columns, remember_columns
from .process_screen import ProcessHistory, ProcessScreen
from .process_table import ProcessTable
from .terminal_driver import prompt_driver
from .themes import apply_palette, known_theme, register_themes
from .truecolor import FastTruecolor, fast_filters
from .view_state import ViewState

if TYPE_CHECKING:
    from .screens import GpuChoice, HelpRows

# The dialogs and screens a key opens (help, health, alerts, columns, sort by, GPU picker, confirm) are imported when
# first opened, not with the app: about 5 ms of the start (their modules and Textual's SelectionList) that the first
# frame does not show.

__all__ = ["INTERVALS", "NvtopyApp"]

# The steps of + and -, from the shortest refresh interval --interval takes to the longest (one set of limits).
INTERVALS = (MIN_INTERVAL, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 3600.0, MAX_INTERVAL)
SIGNALS = {"SIGTERM": signals.SIGTERM, "SIGKILL": signals.SIGKILL, "SIGINT": signals.SIGINT}
# At quit, the longest wait for an idle source thread to end; one inside a driver call is not waited for.
QUIT_WAIT = 0.1
# A poll (or opening the backend) taking longer than this is shown in the header, with its duration.
STALL_AFTER = 2.0


def _members(row: GpuProcess | ProcessGroup | AncestorRow) -> tuple[GpuProcess | AncestorRow, ...]:
    """The processes of a table row: itself (a tree's ancestor too), or a group's."""
    return row.members if isinstance(row, ProcessGroup) else (row,)


class NvtopyApp(App[None]):
    """The monitor of a snapshot source (:meth:`for_backend`: of a local backend)."""

    TITLE = "nvtopy"
    CSS_PATH = "app.tcss"
    # Keys as htop and nvitop have them where those agree on a meaning (h help, t tree, , . sort column, o sort by,
    # q closes every dialog); nvtopy's own features on keys they leave free. The help screen is made from this list.
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("h,question_mark,f1", "help", "Help"),
        Binding("slash,backslash", "filter", "Filter", tooltip="Filter processes by pid, user, owner or command text"),
        Binding("g", "pick_gpus", "GPUs", tooltip="Choose the GPUs to show (panels and processes)"),
        Binding("u", "toggle_mine", "Mine", tooltip="Only my processes (toggle)"),
        Binding("y", "cycle_type", "Type", tooltip="Process type: all, compute (C), graphics (G)"),
        Binding(
            "f",
            "cycle_flags",
            "Flags",
            show=False,
            tooltip="Flagged processes: all, any flag, idle-held, suspected hang",
        ),
        Binding("escape", "clear_filters", "Clear filters", show=False, tooltip="Clear every filter"),
        Binding("s,greater_than_sign,full_stop", "sort(1)", "Sort", tooltip="Sort by the next column"),
        Binding("S,less_than_sign,comma", "sort(-1)", "Sort (previous column)", show=False),
        Binding(
            "o",
            "sort_by",
            "Sort by",
            show=False,
            tooltip="Sort by a column's letter, as in nvitop: o then p PID, g GPU memory, s SM% (upper case: reversed)",
        ),
        Binding("r", "reverse", "Reverse", show=False, tooltip="Reverse the sort order"),
        Binding(
            "b",
            "cycle_group",
            "Group",
            show=False,
            tooltip="Group by: none, user, owner, GPU, host (totals per group; T/K/I signal the whole group)",
        ),
        Binding(
            "space", "tag", "Tag", show=False, tooltip="Tag or untag the selected process (signals go to all tagged)"
        ),
        Binding("U", "untag", "Untag all", show=False),
        Binding(
            "T", "signal('SIGTERM')", "Term", tooltip="Send SIGTERM to the selected or tagged processes (asks first)"
        ),
        Binding(
            "K", "signal('SIGKILL')", "Kill", tooltip="Send SIGKILL to the selected or tagged processes (asks first)"
        ),
        Binding(
            "I",
            "signal('SIGINT')",
            "Interrupt",
            show=False,
            tooltip="Send SIGINT to the selected or tagged processes (asks first)",
        ),
        Binding("v", "cycle_layout", "View", tooltip="GPU view: auto, full panels, compact lines"),
        Binding(
            "C,f2",
            "choose_columns",
            "Columns",
            show=False,
            tooltip="Choose, hide and reorder the process table's columns",
        ),
        Binding("p", "toggle_pause", "Pause", tooltip="Pause or resume refreshing"),
        Binding(
            "H",
            "health",
            "Health",
            tooltip="GPU health: findings and fixes, Xid events, memory and link readings",
        ),
        Binding(
            "a",
            "alerts",
            "Alerts",
            show=False,
            tooltip="Alerts: what fires now (severity, subject, since when, what to do) and what fired and cleared",
        ),
        Binding(
            "enter",
            "open_process",
            "Details",
            show=False,
            tooltip="Open the process screen: history, cwd, parents, children",
        ),
        Binding(
            "t,w",
            "toggle_tree",
            "Tree",
            show=False,
            tooltip="Tree view: processes under their parents",
        ),
        Binding(
            "z", "zoom(1)", "Zoom", show=False, tooltip="History charts: a longer window (1 min, 10 min, 1 h, 24 h)"
        ),
        Binding("Z", "zoom(-1)", "Zoom in", show=False, tooltip="History charts: a shorter window"),
        Binding("c", "cycle_charts", "Charts", show=False, tooltip="History charts: per metric, per GPU, off"),
        Binding("plus,equals_sign", "interval(-1)", "Faster refresh", show=False, tooltip="Faster (replay: speed up)"),
        Binding("minus", "interval(1)", "Slower refresh", show=False, tooltip="Slower (replay: slow down)"),
        Binding(
            "right_square_bracket",
            "step(1)",
            "Step",
            show=False,
            tooltip="Refresh now (replay: next snapshot)",
        ),
        Binding("left_square_bracket", "step(-1)", "Step back", show=False, tooltip="Replay: previous snapshot"),
    ]
    # The help's sections in order, and the section of each action of BINDINGS (tests/tui/test_tui_keys.py checks
    # that every action has one).
    HELP_ORDER: ClassVar[tuple[str, ...]] = ("General", "Processes", "Sorting", "Filtering", "View")
    HELP_SECTIONS: ClassVar[dict[str, str]] = {
        "quit": "General",
        "help": "General",
        "filter": "Filtering",
        "pick_gpus": "Filtering",
        "toggle_mine": "Filtering",
        "cycle_type": "Filtering",
        "cycle_flags": "Filtering",
        "clear_filters": "Filtering",
        "sort": "Sorting",
        "sort_by": "Sorting",
        "reverse": "Sorting",
        "cycle_group": "Sorting",
        "tag": "Processes",
        "untag": "Processes",
        "signal": "Processes",
        "toggle_tree": "View",
        "open_process": "View",
        "cycle_layout": "View",
        "toggle_pause": "View",
        "interval": "View",
        "step": "View",
        "health": "View",
        "alerts": "View",
        "zoom": "View",
        "cycle_charts": "View",
        "choose_columns": "View",
    }

    def __init__(
        self,
        source: SnapshotSource,
        *,
        readonly: bool = False,
        layout: str = "auto",
        poll: bool = True,
        alerts: AlertSettings | None = None,
        notify: Notify | None = None,
        notices: LateNotices | None = None,
        after_first_frame: Callable[[], object] | None = None,
    ) -> None:
        """Show ``source``; ``poll=False``: its thread is not started (the caller has it publish).

        Read-only with ``readonly`` (``--readonly``) or when the source cannot signal. ``alerts``: the
        local alert rules to evaluate (None: no alerts); ``notify``: called with every transition
        (FIRING, CLEARED) of a live source, on the UI thread -- it must not block. ``notices``: warnings
        said on another thread, perhaps before the app runs (a source started before it): shown as
        toasts from the mount on (:mod:`.notices`). ``after_first_frame``: called once on the UI thread
        when the first frame with a snapshot has been drawn, or at the first half-second tick without one
        (the CLI settles the garbage collector there: work the first frame need not wait for).
        """
        super().__init__()
        self._fast_filters: dict[int, FastTruecolor] = {}  # get_line_filters' wrappers, by wrapped filter
        self.source = source
        self.open_error: BaseException | None = None
        self.readonly = readonly or not source.can_signal
        # What the user chose to see; changed only by change_view (preferences.configure sets its start).
        self.view = ViewState(layout_mode=layout if layout in MODES else "auto")
        self.snapshot: Snapshot | None = None
        self.tags = Tags()  # a selection of processes, not a view setting: pruned by every snapshot
        self.process_history = ProcessHistory()  # per-process figures for the process screen (view-side)
        self._poll = poll
        register_themes(self)
        honour_terminal(self)  # NO_COLOR: readable greys; TERM=dumb: no colour, ASCII (.plain)
        self.config_path: Path | None = None  # where the column chooser remembers (None: the XDG config file)
        self.startup_warnings: list[str] = []  # shown once the app runs (a bad config file)
        self.snapshots_applied = 0
        self.last_outcomes: list[SignalOutcome] = []
        self._header_counts: tuple[int, int, int] | None = None
        self._stall_shown = False
        self._snapshot_at = time.monotonic()  # when the current snapshot arrived (a stalled GPU's age grows from it)
        self._notice_shown = False  # the source's startup notice (shown once)
        self._taken_at_mount: Snapshot | None = None  # a snapshot the source had published before the app mounted
        # The alert engine and what it said (None: no alerts). A source that can step is a recording: its
        # alerts are listed and toasted, never sent out.
        self.alerts = None if alerts is None else AlertFeed(alerts, notify, live=not source.can_step)
        self._toast_timer: Timer | None = None
        self._late_notices = notices
        self._after_first_frame = after_first_frame

    @classmethod
    def for_backend(
        cls,
        backend: Backend | None,
        *,
        interval: float = DEFAULT_INTERVAL,
        opener: Callable[[], Backend] | None = None,
        select: SelectGpus | None = None,
        waiting_for: str | None = None,
        readonly: bool = False,
        layout: str = "auto",
        poll: bool = True,
        events: bool = True,
        thresholds: HealthThresholds | None = None,
        isolate: bool = True,
        alerts: AlertSettings | None = None,
        notify: Notify | None = None,
    ) -> NvtopyApp:
        """The monitor of a local backend: a :class:`~nvtopy.sources.poller.Poller` of what the panels show.

        ``backend`` is open already, or None with an ``opener`` that the poller's thread
        runs (``select`` then picks the GPUs); ``waiting_for`` names what a slow start
        waits for ("the NVIDIA driver"). ``events``: watch Xid events while the monitor
        runs (the health screen's timeline); ``thresholds``: of the health flags
        (``--idle-held-after`` and friends); ``isolate``: each GPU on its own thread with a deadline (False: in
        turn on the polling thread, as pictures need: no timing may enter them); ``alerts``, ``notify``: as
        :class:`NvtopyApp` has them. See :class:`~nvtopy.sources.poller.Poller`.
        """
        poller = Poller.for_monitor(
            backend,
            interval=interval,
            opener=opener,
            select=select,
            waiting_for=waiting_for,
            events=events,
            thresholds=thresholds,
            isolate=isolate,
        )
        return cls(poller, readonly=readonly, layout=layout, poll=poll, alerts=alerts, notify=notify)

    # ----------------------------------------------------------------- lifecycle

    def compose(self) -> ComposeResult:
        yield HeaderBar(STARTING, id="header")
        yield GpuView(id="gpus")
        yield HostBar(id="host")  # in the blank line that parted the GPUs from the rest: no row taken
        yield ChartView(id="charts")
        yield ProcessTable(id="processes")
        yield Input(placeholder="filter: pid, user, owner or command text (enter keeps it, esc clears)", id="filter")
        yield KeyFooter()

    def on_mount(self) -> None:
        self._end_on_signals()
        self.query_one(ProcessTable).focus()
        self.refresh_view()  # the table and the charts take the view's columns, mode and window (no snapshot yet)
        apply_palette(self.theme, monochrome=self.no_color)  # the theme's (colorblind: Okabe-Ito), or none
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        for warning in self.startup_warnings:  # a bad config file: also on stderr, before and after the app
            self.notify(safe_text(warning), severity="warning", timeout=15, markup=False)
        if self._late_notices is not None:  # said on the source's thread, perhaps before the app ran
            self._late_notices.show_with(self._warning_toast)
        self.source.subscribe(self._from_source)
        self.source.subscribe_failure(self._failed_in_source)
        # A source started before the app (a replay indexing its file has a head start) may have published or
        # failed already: what it did before the subscriptions is taken now.
        if self.source.open_error is not None:
            self.post_message(SourceFailed(self.source.open_error))
        elif self.source.latest is not None:
            self._taken_at_mount = self.source.latest
            self.post_message(SnapshotReady(self.source.latest))
        self.set_interval(0.5, self._show_waiting)
        if self._poll:
            self.source.start()
        self._show_notice()

    def _end_on_signals(self) -> None:
        """SIGTERM (``kill``, systemd, tmux's kill-pane) and SIGHUP (the terminal closed) end the monitor as ``q``
        does: the terminal is given back (out of the alternate screen, the cursor shown, the keyboard modes reset)
        and the source stopped (``--ssh``'s sessions closed). Python's default for both ends the process where it
        stands and leaves the user's terminal in the monitor's modes. Only where the event loop can take signals
        (its main thread, a Unix loop); the handlers go with the loop."""
        try:
            loop = asyncio.get_running_loop()
            for signum in (signals.SIGTERM, signals.SIGHUP):
                loop.add_signal_handler(signum, self.exit)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass  # not the main thread (an embedding), or a platform without them: the default stands

    def _warning_toast(self, text: str) -> None:
        """A warning from outside (a driver's or a config's words): a toast, never markup; thread-safe."""
        self.notify(safe_text(text), severity="warning", timeout=15, markup=False)

    def _show_notice(self) -> None:
        """The source's startup notice, once, as soon as it has one (a replay's once its file is indexed)."""
        notice = None if self._notice_shown else self.source.startup_notice
        if notice is not None:  # it may quote a file name or a line: outside text
            self._notice_shown = True
            self.notify(safe_text(notice), severity="warning", timeout=15, markup=False)

    def _from_source(self, snapshot: Snapshot) -> None:
        """Runs on the source's thread: hand the snapshot to the UI thread."""
        self.post_message(SnapshotReady(snapshot))

    def _failed_in_source(self, error: BaseException) -> None:
        """Runs on the source's thread: it could not start; the app ends (the CLI reports ``error``)."""
        self.post_message(SourceFailed(error))

    def on_source_failed(self, message: SourceFailed) -> None:
        self.open_error = message.error
        self.exit()

    def get_line_filters(self) -> list[LineFilter]:
        """Textual's filters, its ANSI-to-truecolor one made cheaper with the same output (:mod:`.truecolor`)."""
        return fast_filters(list(super().get_line_filters()), self._fast_filters)

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, with an input thread that ends at once on quit (:mod:`.terminal_driver` says why)."""
        return prompt_driver(super().get_driver_class())

    def on_unmount(self) -> None:
        # Never wait for a driver call in progress: the thread is a daemon and owns the backend.
        busy = self._waited() is not None
        self.source.stop(timeout=0.0 if busy else QUIT_WAIT)

    def _waited(self) -> float | None:
        """Seconds the read in progress (opening the backend, or a poll) has taken so far; None when idle."""
        since = self.source.busy_since
        return None if since is None else max(0.0, time.monotonic() - since)

    def _stuck_for(self) -> float | None:
        """Seconds the driver has kept the monitor waiting: the read in progress, or -- the poll no
        longer waits for a stuck GPU -- the stall of every shown GPU when none of them answers."""
        waited = self._waited()
        gpus = self.visible_gpus()
        if gpus and all(not g.health.responding for g in gpus):
            since_snapshot = max(0.0, time.monotonic() - self._snapshot_at)
            stalled = max(g.health.stalled_seconds or 0.0 for g in gpus) + since_snapshot
            waited = stalled if waited is None else max(waited, stalled)
        return waited

    def _first_frame_drawn(self) -> None:
        """The first frame is out (or half a second has passed): what was left until then runs, once."""
        callback, self._after_first_frame = self._after_first_frame, None
        if callback is not None:
            callback()

    def _show_waiting(self) -> None:
        """Twice a second: say so when the driver keeps the monitor waiting (before the first sample, or stuck)."""
        self._first_frame_drawn()  # at the latest now, with or without a snapshot
        waited = self._waited()
        if self.snapshot is not None:
            waited = self._stuck_for()
            stalled = waited is not None and waited >= STALL_AFTER
            if stalled or self._stall_shown:
                self._update_header()
            return
        if waited is None or waited < 1.0:
            return
        try:
            header = self.query_one(HeaderBar)
            gpu_view = self.query_one(GpuView)
        except NoMatches:
            return
        waiting = f"waiting for {self.source.waiting_for}: {int(waited)} s"
        header.show(waiting_text(waiting))
        gpu_view.message = f"{waiting} (q quits at any time)"
        gpu_view.show((), gpu_view.plan)

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        if message.snapshot is self.snapshot and message.snapshot is self._taken_at_mount:
            return  # taken at mount and delivered by the source as well: drawn already
        if not self._notice_shown:
            self._show_notice()
        self.snapshot = message.snapshot
        self._snapshot_at = time.monotonic()
        self.snapshots_applied += 1
        self.process_history.add(message.snapshot)
        self._alerts_from(message.snapshot)  # before the redraw: the header counts what fires
        self.refresh_view()  # new data, same view
        if self._after_first_frame is not None:
            self.call_after_refresh(self._first_frame_drawn)
        if len(self.screen_stack) > 1:  # a screen over the monitor: one that follows the snapshots?
            self._show_on_screens(message.snapshot)

    def _show_on_screens(self, snapshot: Snapshot) -> None:
        """The open health, process and alerts screens (perhaps under the help) follow the live snapshots."""
        from .alerts_screen import AlertsScreen
        from .health_screen import HealthScreen

        for screen in self.screen_stack:
            if isinstance(screen, HealthScreen):  # open (perhaps under the help): it follows the live snapshots
                screen.show(snapshot, self.visible_gpus())
            elif isinstance(screen, ProcessScreen):
                screen.show(snapshot)
            elif isinstance(screen, AlertsScreen) and self.alerts is not None:
                screen.show(self.alerts.firing(), self.alerts.history, snapshot.timestamp)

    # ----------------------------------------------------------------- alerts

    def _alerts_from(self, snapshot: Snapshot) -> None:
        """The alert engine on ``snapshot``: its transitions to ``notify`` (live) and as toasts, rate-limited."""
        feed = self.alerts
        if feed is None:
            return
        events = feed.observe(snapshot)
        failure = feed.failure_to_say()
        if failure is not None:
            self.notify(failure, severity="warning", timeout=15, markup=False)
        if events:
            self._show_toasts(feed.toasts.add(events))

    def _show_toasts(self, toasts: list[Toast]) -> None:
        for toast in toasts:  # words made safe by alert_feed; never markup
            self.notify(toast.message, title=toast.title, severity=toast.severity, timeout=toast.timeout, markup=False)
        self._schedule_held_toasts()

    def _schedule_held_toasts(self) -> None:
        """Transitions held back by the toasts' rate limit: one summarising toast as soon as the window allows."""
        feed = self.alerts
        due = None if feed is None else feed.toasts.due()
        if due is None or self._toast_timer is not None:
            return

        def flush() -> None:
            self._toast_timer = None
            if self.alerts is not None:
                self._show_toasts(self.alerts.toasts.flush())

        self._toast_timer = self.set_timer(max(0.05, due), flush)

    def firing_alerts(self) -> tuple[AlertEvent, ...]:
        """What fires now (the header's count); nothing when the app evaluates no alerts."""
        return () if self.alerts is None else self.alerts.firing()

    def action_alerts(self) -> None:
        """Open the alerts screen on what the feed holds (never waits for the source: it follows later snapshots)."""
        from .alerts_screen import AlertsScreen

        if isinstance(self.screen, AlertsScreen):
            return
        feed = self.alerts
        if feed is None:
            self.notify("alerts are off here", severity="warning", timeout=3)
            return
        now = None if self.snapshot is None else self.snapshot.timestamp
        self.push_screen(AlertsScreen(feed.firing(), feed.history, now, live=feed.live))

    def on_resize(self) -> None:
        self.refresh_view()  # a new size, same view: the layout plan and the columns that fit

    def _theme_changed(self, theme: Theme) -> None:
        """A new theme (the command palette's "Change theme"): nvtopy's cells take its palette, cached lines go."""
        apply_palette(theme.name, monochrome=self.no_color)
        try:
            gpu_view = self.query_one(GpuView)
            table = self.query_one(ProcessTable)
            header = self.query_one(HeaderBar)
        except NoMatches:
            return
        gpu_view._panels.clear()  # panels are cached by what they show, not by colour
        table.restyle()
        header.restyle()
        self.refresh_view()  # new colours, same view

    # ----------------------------------------------------------------- drawing

    def visible_gpus(self) -> tuple[GpuState, ...]:
        """The GPUs the filter shows, each narrowed to its chosen MIG instances (if any)."""
        if self.snapshot is None:
            return ()
        row_filter = self.view.row_filter
        return tuple(row_filter.limit(g) for g in self.snapshot.gpus if row_filter.shows_gpu(g.index))

    def mig_shown(self) -> bool:
        """Whether the process table has its MIG column: some GPU of the snapshot has MIG instances."""
        return self.snapshot is not None and any(g.static.mig_instances for g in self.snapshot.gpus)

    def hosts_shown(self) -> bool:
        """Whether the process table has its HOST column: the snapshot spans other hosts (--remote, --prometheus)."""
        return self.snapshot is not None and any(g.static.host is not None for g in self.snapshot.gpus)

    # ----------------------------------------------------------------- the view

    def change_view(self, view: ViewState) -> None:
        """The one way the view changes (``change_view(replace(self.view, order=...))``): then one redraw.

        Before the app runs (:func:`~nvtopy.tui.preferences.configure`) it only records: the mount draws it.
        """
        self.view = view
        self.refresh_view()

    def use_theme(self, name: str | None) -> None:
        """Theme ``name`` if this Textual has it, else the default (a config file's name, :mod:`.themes`)."""
        self.theme = known_theme(self, name)

    # Read-only names of the view's parts, as callers (tests, the palette) have read them: the state is self.view.
    @property
    def row_filter(self) -> ProcessFilter:
        return self.view.row_filter

    @property
    def order(self) -> SortOrder:
        return self.view.order

    @property
    def group_by(self) -> str | None:
        return self.view.group_by

    @property
    def tree_view(self) -> bool:
        return self.view.tree_view

    @property
    def layout_mode(self) -> str:
        return self.view.layout_mode

    @property
    def columns(self) -> tuple[str, ...] | None:
        return self.view.columns

    def refresh_view(self) -> None:
        """Redraw everything from the current snapshot and view (cheap when little changed)."""
        snapshot, view = self.snapshot, self.view
        try:
            header = self.query_one(HeaderBar)
            gpu_view = self.query_one(GpuView)
            table = self.query_one(ProcessTable)
            charts = self.query_one(ChartView)
        except (NoMatches, ScreenStackError):
            # Not running yet (the config file sets the view first: on_mount draws it), or quitting (a snapshot
            # posted before the source stopped arrives after the widgets went).
            return
        table.set_columns(view.columns)  # no-ops when unchanged
        charts.mode, charts.window = view.chart_mode, view.chart_window
        if snapshot is None:
            return
        gpus = self.visible_gpus()
        if not snapshot.gpus:
            found_none = self.source.gpus_found == 0
            gpu_view.message = "No NVIDIA GPU found" if found_none else "No GPUs selected"
        else:
            gpu_view.message = "No GPUs selected (g to choose)"
        links = any(has_interconnect(g) for g in gpus)
        extra = [mig_rows(g) for g in gpus]
        tall = [panel_extra_rows(g) for g in gpus]
        size = self.size
        # Several hosts' GPUs: compact lines under a header per host (nothing changes for a local snapshot).
        groups = [len(g.gpus) for g in host_groups(gpus)] if any(g.static.host is not None for g in gpus) else []
        plan = plan_layout(
            len(gpus),
            size.width,
            size.height,
            view.layout_mode,
            links=links,
            extra=extra,
            panel_extra=tall,
            groups=groups,
        )
        if gpu_view.styles.height is None or gpu_view.styles.height.value != plan.lines:
            gpu_view.styles.height = plan.lines
        interval = snapshot.interval or self.source.interval
        gpu_view.show(gpus, plan, now=snapshot.timestamp, stale_after=STALE_INTERVALS * interval)
        everything = snapshot.processes
        self.tags.prune(everything)
        me = snapshot.host.user
        rows = build_rows(everything, view.order, view.row_filter, me)
        shown: list[GpuProcess] | list[ProcessGroup] = rows
        if view.group_by is not None:
            shown = build_groups(rows, view.group_by, view.order)
        hints = [f"GPU {g.index}: {safe_text(g.processes_hint)}" for g in gpus if g.processes_hint]
        table.empty_message = (
            "No process matches the filters (esc clears)"
            if view.row_filter.active
            else "No GPU processes" + (" · " + " · ".join(hints) if hints else "")
        )
        flags = any(p.flags for p in everything)
        table.set_rows(
            list(shown),
            me=me,
            tags=frozenset(self.tags.keys),
            order=view.order,
            flags=flags,
            keep_flags=view.row_filter.flag is not None,
            mig=self.mig_shown(),
            tree=view.tree_view and view.group_by is None,
            hosts=host_labels(snapshot.gpus),
        )
        filter_shown = self.query_one("#filter", Input).has_class("shown")
        spare = spare_rows(size.height, plan.lines, filter_shown)
        charts.show(snapshot, gpus, spare, table_rows=len(table.rows) + 1)  # rows to spare: charts
        self._header_counts = (sum(not g.stands_for_host for g in gpus), len(rows), len(everything))
        self._update_header(header)  # after the charts: it says when they have no room
        self.query_one(HostBar).show(snapshot, size.width)

    def _update_header(self, header: HeaderBar | None = None) -> None:
        """The header line, led by how long the driver has kept the poll (or every shown GPU) waiting when stuck."""
        snapshot, counts = self.snapshot, self._header_counts
        if snapshot is None or counts is None:
            return
        try:
            header = self.query_one(HeaderBar) if header is None else header
            charts = self.query_one(ChartView)
        except NoMatches:
            return
        width = max(1, self.size.width)
        pieces = header_pieces(self, snapshot, counts, width, no_chart_room=bool(charts.no_room()))
        waited = self._stuck_for()
        self._stall_shown = waited is not None and waited >= STALL_AFTER
        if waited is not None and self._stall_shown:
            header.show(with_stall_notice(Text.assemble(*pieces), self.source.waiting_for, waited, width))
        else:
            header.show_pieces(pieces)  # the same line as its Text, without making one each second

    # ----------------------------------------------------------------- filters and sort

    def set_filter(self, **changes: object) -> None:
        """Change the parts of the filter named in ``changes`` (:class:`~nvtopy.render.processes.ProcessFilter`)."""
        self.change_view(replace(self.view, row_filter=self.view.row_filter.replace(**changes)))

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        self.set_filter(text=event.value.strip())

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.remove_class("shown")
        self.query_one(ProcessTable).focus()

    def action_clear_filters(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.query_one(ProcessTable).focus()
        self.change_view(replace(self.view, row_filter=ProcessFilter()))

    def action_toggle_mine(self) -> None:
        self.set_filter(mine_only=not self.view.row_filter.mine_only)

    def action_cycle_type(self) -> None:
        following = {None: "C", "C": "G", "G": None}[self.view.row_filter.process_type]
        self.set_filter(process_type=following)

    def action_cycle_flags(self) -> None:
        """All processes, then those with any real-work flag, then idle-held only, then suspected hangs only."""
        following = FLAG_FILTERS[(FLAG_FILTERS.index(self.view.row_filter.flag) + 1) % len(FLAG_FILTERS)]
        self.set_filter(flag=following)  # the header's filter names it

    def action_pick_gpus(self) -> None:
        from .screens import GpuPickerScreen

        if self.snapshot is None:
            return
        statics = [g.static for g in self.snapshot.gpus]

        def chosen(result: GpuChoice | None) -> None:
            if result is not None:  # None: cancelled
                gpus, instances = result
                self.set_filter(gpus=gpus, instances=instances)

        self.push_screen(GpuPickerScreen(statics, self.view.row_filter.gpus, self.view.row_filter.instances), chosen)

    def set_sort(self, order: SortOrder) -> None:
        self.change_view(replace(self.view, order=order))

    def action_sort(self, step: int) -> None:
        self.set_sort(self.view.order.cycle(step, mig=self.mig_shown(), hosts=self.hosts_shown()))

    def action_sort_by(self) -> None:
        """``o``, then a column's letter (nvitop's ``op``, ``og``, ``oS``...): sort by that column."""
        from .screens import SortByScreen

        if isinstance(self.screen, SortByScreen):
            return
        shown = (*(("host",) if self.hosts_shown() else ()), *(("mig",) if self.mig_shown() else ()))
        columns = (*(c.key for c in COLUMNS), *shown, "flags")

        def chosen(order: SortOrder | None) -> None:
            if order is not None:  # None: cancelled
                self.set_sort(order)

        self.push_screen(SortByScreen(columns), chosen)

    def action_reverse(self) -> None:
        self.set_sort(self.view.order.flipped())

    def set_group(self, mode: str | None) -> None:
        """Fold the table into groups by ``mode`` (None: one row a process).

        The cursor goes to the row holding what it was on: a process's group, a group's first process.
        """
        table = self.query_one(ProcessTable)
        previous = table.selected
        was = {p.key for p in _members(previous)} if previous is not None else set()
        self.change_view(self.view.grouped(mode))
        index = next((i for i, row in enumerate(table.rows) if any(p.key in was for p in _members(row))), 0)
        table.move_cursor(index)

    def group_modes(self) -> tuple[str | None, ...]:
        """The group-by modes ``b`` cycles through: by host only while the table spans hosts."""
        if self.hosts_shown():
            return GROUP_MODES
        return tuple(mode for mode in GROUP_MODES if mode != HOST_GROUPING)

    def action_cycle_group(self) -> None:
        modes = self.group_modes()
        # by host on one host now (a fleet that went, or the config's): host is the last mode, so None follows
        group_by = self.view.group_by
        following = modes[(modes.index(group_by) + 1) % len(modes)] if group_by in modes else None
        self.set_group(following)  # the header says "grouped by ..." (a mode: no notification over the table)

    def action_toggle_tree(self) -> None:
        """The process table as a tree (processes under their parents) or as a list; a tree is never grouped."""
        table = self.query_one(ProcessTable)
        previous = table.selected
        was = {p.key for p in _members(previous)} if isinstance(previous, (GpuProcess, ProcessGroup)) else set()
        self.change_view(self.view.toggled_tree())
        index = next((i for i, row in enumerate(table.rows) if row.key in was), None)
        if index is not None:
            table.move_cursor(index)

    def action_open_process(self) -> None:
        """The process screen of the selected process (history, command line, cwd, parents, children...)."""
        selected = self.query_one(ProcessTable).selected
        if isinstance(selected, ProcessGroup):
            self.notify("a group: ungroup (b) or open one of its processes", severity="warning", timeout=3)
            return
        if isinstance(selected, AncestorRow):
            self.notify(f"pid {selected.pid} uses no GPU: open one of the processes under it", timeout=3)
            return
        if selected is None or self.snapshot is None or isinstance(self.screen, ProcessScreen):
            return
        self.push_screen(ProcessScreen(selected, self.snapshot, self.process_history, readonly=self.readonly))

    @on(ProcessTable.HeaderClicked)
    def _header_clicked(self, event: ProcessTable.HeaderClicked) -> None:
        self.set_sort(self.view.order.by(event.column))

    # ----------------------------------------------------------------- view and refresh

    def action_choose_columns(self) -> None:
        """The column chooser; what it applies is remembered in the config file (``columns``)."""
        from .columns_screen import ColumnsScreen

        if isinstance(self.screen, ColumnsScreen):
            return
        table = self.query_one(ProcessTable)

        def chosen(columns: tuple[str, ...] | None) -> None:
            if columns is None:  # cancelled
                return
            self.change_view(replace(self.view, columns=chosen_columns(columns)))  # None: the defaults
            message, saved = remember_columns(self.view.columns, self.config_path)
            self.notify(safe_text(message), severity="information" if saved else "warning", timeout=4, markup=False)

        self.push_screen(ColumnsScreen(table.columns), chosen)

    def action_zoom(self, step: int) -> None:
        """The history charts' window: 1 min, 10 min, 1 h, 24 h (``step`` -1: back)."""
        self.change_view(self.view.zoomed(step))  # the header says the window ("charts per metric · 10 min")

    def action_cycle_charts(self) -> None:
        """The history charts: one per metric (GPUs overlaid), one per GPU, none."""
        self.change_view(self.view.next_chart_mode())  # the header says it ("charts per GPU", "charts off")

    def action_cycle_layout(self) -> None:
        self.change_view(self.view.next_layout())  # the header says "view compact" (auto says nothing)

    def action_toggle_pause(self) -> None:
        if self.source.paused:
            self.source.resume()
        else:
            self.source.pause()
        self.refresh_view()  # the source's state, not the view: the header says "PAUSED"

    def action_step(self, count: int) -> None:
        if self.source.can_step:
            self.source.step(count)
        elif count > 0:  # a live source: refresh now
            self.source.refresh()

    def action_interval(self, step: int) -> None:
        if self.source.can_change_speed:  # replay: + and - change the speed
            (self.source.faster if step < 0 else self.source.slower)()
            self.refresh_view()  # the source's state, not the view: the header's replay status says the speed
            return
        current = self.source.interval
        # Outside the steps (--interval 0.1 or 60) a key never moves the other way: it stays.
        if step < 0:
            smaller = [i for i in INTERVALS if i < current - 1e-9]
            target = smaller[-1] if smaller else min(current, INTERVALS[0])
        else:
            bigger = [i for i in INTERVALS if i > current + 1e-9]
            target = bigger[0] if bigger else max(current, INTERVALS[-1])
        self.source.set_interval(target)
        self.refresh_view()  # the source's state, not the view: the header says "⟳ 2s"

    def action_help(self) -> None:
        from .screens import HelpScreen

        self.push_screen(HelpScreen(self.help_sections()))

    def action_health(self) -> None:
        """Open the health screen on the snapshot at hand (never waits for the source: it follows later ones)."""
        from .health_screen import HealthScreen

        if isinstance(self.screen, HealthScreen):
            return
        self.push_screen(HealthScreen(self.snapshot, self.visible_gpus()))

    def help_sections(self) -> list[tuple[str, HelpRows]]:
        """The help: the bindings by :attr:`HELP_SECTIONS`, and the keys that are no binding of the app."""
        from .screens import help_keys, help_sections

        table_keys = " ".join(
            help_keys(b, self.get_key_display) for b in ProcessTable.BINDINGS if isinstance(b, Binding) and b.tooltip
        )
        extra = {
            "Processes": [
                ("↑ ↓ PgUp PgDn Home End", "Move the selection"),
                ("click", "Select a row; click a column title to sort by it"),
            ],
            "Sorting": [(table_keys, ProcessTable.KEYS_HELP)],  # the table's own: open and fold a group
            "General": [("ctrl+p", "Command palette (every action by name)")],
        }
        sections, order = self.HELP_SECTIONS, self.HELP_ORDER
        return help_sections(self.BINDINGS, sections, self.get_key_display, order=order, extra=extra)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        shown = (*((HOST_COLUMN,) if self.hosts_shown() else ()), *((MIG_COLUMN,) if self.mig_shown() else ()))
        for column in (*COLUMNS[:1], *shown, *COLUMNS[1:]):
            yield SystemCommand(
                f"Sort by {column.title}",
                f"Sort the process table by {column.title}",
                lambda key=column.key: self.set_sort(SortOrder(key, SortOrder().by(key).reverse)),
            )
        for mode in self.group_modes():
            title = GROUP_TITLES[mode] if mode else "nothing"
            yield SystemCommand(
                f"Group by {title}",
                "Fold the process table into one row per " + (title if mode else "process") + ", with totals",
                lambda m=mode: self.set_group(m),
            )
        yield SystemCommand("Only my processes", "Toggle showing only your processes", self.action_toggle_mine)
        yield SystemCommand("Tree view", "Processes under their parents, or the plain list", self.action_toggle_tree)
        yield SystemCommand("GPU health", "Findings, Xid events, memory and link readings", self.action_health)
        yield SystemCommand("Alerts", "What fires now, and what fired and cleared", self.action_alerts)
        for flag in FLAG_FILTERS:
            title = f"{flag} processes" if flag else "every process (no flag filter)"
            yield SystemCommand(
                f"Show {title}",
                "Narrow the process table by real-work flag (idle-held, suspected hang)",
                lambda f=flag: self.set_filter(flag=f),
            )
        yield SystemCommand("Choose GPUs", "Pick the GPUs to show", self.action_pick_gpus)
        yield SystemCommand("Clear filters", "Show every process of every GPU", self.action_clear_filters)
        yield SystemCommand("Pause or resume", "Stop or restart refreshing", self.action_toggle_pause)
        yield SystemCommand(
            "Choose columns", "Show, hide and reorder the process table's columns", self.action_choose_columns
        )
        for mode in MODES:
            yield SystemCommand(f"GPU view: {mode}", f"Show GPUs as {mode} panels", lambda m=mode: self._set_layout(m))

    def _set_layout(self, mode: str) -> None:
        self.change_view(replace(self.view, layout_mode=mode))

    # ----------------------------------------------------------------- acting on processes

    def action_tag(self) -> None:
        table = self.query_one(ProcessTable)
        process = table.selected
        if process is None:
            return
        if isinstance(process, ProcessGroup):  # a group: tag all of it, or untag all of it
            if all(p.key in self.tags.keys for p in process.members):
                self.tags.keys -= {p.key for p in process.members}
            else:
                self.tags.keys |= {p.key for p in process.members}
        elif not isinstance(process, AncestorRow):  # a tree's ancestor uses no GPU: never tagged
            self.tags.toggle(process)
        table.move_cursor(table.cursor + 1)
        self.refresh_view()  # the tags are a selection, not the view (every snapshot prunes them): marks, header

    def action_untag(self) -> None:
        self.tags.keys.clear()
        self.refresh_view()  # the tags are a selection, not the view: marks, header

    def signal_targets(self) -> list[GpuProcess]:
        """The tagged processes still shown, else the selected one (a group: all of it); one entry per process."""
        table = self.query_one(ProcessTable)
        shown = [p for row in table.rows for p in (row.members if isinstance(row, ProcessGroup) else (row,))]
        selected = table.selected
        if isinstance(selected, AncestorRow):  # a tree's ancestor uses no GPU: not a target
            selected = None
        targets = [p for p in shown if p.key in self.tags.keys and isinstance(p, GpuProcess)] or (
            list(selected.members) if isinstance(selected, ProcessGroup) else [selected] if selected is not None else []
        )
        unique: dict[tuple[int, float | None], GpuProcess] = {}
        for process in targets:
            unique.setdefault((process.pid, process.create_time), process)
        return list(unique.values())

    def action_signal(self, name: str) -> None:
        selected = self.query_one(ProcessTable).selected
        group = None
        if isinstance(selected, ProcessGroup) and not self.tags.keys:
            group = selected.label if selected.mode == "gpu" else f"{GROUP_TITLES[selected.mode]} {selected.label}"
        self.confirm_signal(self.signal_targets(), name, group=group)

    def confirm_signal(self, targets: list[GpuProcess], name: str, *, group: str | None = None) -> None:
        """Ask before sending ``name`` to ``targets`` (the table's, or the process screen's), then send it.

        Read-only, and pids not visible from this PID namespace (a group holding one: all of it), refuse
        here; the dialog captures each target's start time, which the source checks before it signals.
        """
        if self.readonly:  # the source's own sentence when it cannot signal (remote hosts: "read-only: ...")
            refusal = self.source.signal_refusal
            if refusal is None:
                message = "read-only (--readonly): sending signals is disabled"
            else:
                message = refusal if refusal.startswith("read-only") else f"read-only: {refusal}"
            self.notify(safe_text(message), severity="warning", markup=False)
            return
        if not targets:
            self.notify("no process selected", severity="warning")
            return
        foreign = [p for p in targets if p.foreign]
        if foreign:
            others = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            self.notify(
                f"pid {foreign[0].pid}{others} is {NOT_VISIBLE}: it cannot be signalled from here; nothing sent",
                severity="error",
            )
            return

        def answered(confirmed: bool | None) -> None:
            if confirmed:
                self.run_worker(self._send(targets, name), exclusive=False)

        from .screens import ConfirmSignalScreen

        self.push_screen(ConfirmSignalScreen(targets, name, group=group), answered)

    async def _send(self, targets: list[GpuProcess], name: str) -> None:
        signum = SIGNALS[name]
        futures = [self.source.signal(p.pid, p.create_time, signum) for p in targets]
        outcomes: list[SignalOutcome] = []
        for future in futures:
            try:
                outcomes.append(await asyncio.wrap_future(future))
            except Exception as exc:  # noqa: BLE001 - reported to the user, never a crash
                outcomes.append(SignalOutcome(False, f"could not send {name}: {exc}"))
        self.last_outcomes = outcomes
        for outcome in outcomes:
            # The message names the process (its name comes from the process itself): never markup.
            self.notify(
                safe_text(outcome.message), severity="information" if outcome.ok else "error", timeout=6, markup=False
            )
        sent = {(p.gpu_index, p.pid, p.create_time) for p, o in zip(targets, outcomes, strict=True) if o.ok}
        self.tags.keys -= sent
        self.source.refresh()
