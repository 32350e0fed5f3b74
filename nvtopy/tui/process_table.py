"""The process table: a Line-API widget with a fixed header line and a row cursor.

Why not ``DataTable``: it re-renders every visible cell whenever any cell
changes (its render cache is keyed on a global update count), and ``sort()`` /
``clear()`` move the cursor by position. Here each line has a signature (its
formatted cells, whether it is selected or tagged); a refresh redraws only the
lines whose signature changed, and the cursor follows its process by identity
(GPU, pid, create time) wherever sorting or filtering moves it.

Each cell's words and colour category come from
:func:`~nvtopy.render.cells.process_cells`, the function ``nvtopy --once``
draws its process table with; this widget only maps categories to styles and
adds its own state (cursor, tags). The FLAGS column (real-work flags such as
"idle-held 12 min", :func:`~nvtopy.render.cells.process_flags_cell`) appears
only while some process has a flag; a flagged row is also marked with ``!``
beside the tag marker, so it stands out where FLAGS had to give way. The MIG
column (``1/2/0``: the GPU, GPU instance and compute instance a process runs
on) appears only while some GPU has MIG instances, the HOST column (``node2/3``) only while the
rows are other hosts' (``--remote``, ``--prometheus``). All text is drawn with rich ``Text`` (never
parsed as markup) after :func:`~nvtopy.textsafe.safe_text` has replaced
control characters.

Tree view (``tree=True``): the rows come in :func:`~nvtopy.render.tree.build_tree`'s
order, each command led by its tree glyphs, and the non-GPU ancestors of GPU
processes (:class:`~nvtopy.render.tree.AncestorRow`) are rows of their own, dimmed.

Groups (group-by): each group is one row of totals, folded (``▸``); Enter or → on it
lists its processes under it (``▾``), Enter or ← folds it again, ← on one of its processes
too. The table keeps which groups are open by their key (mode and shared value), so the
state survives refreshes and re-sorting; Enter on a process still opens the process screen
(the app's binding: :class:`~textual.actions.SkipAction` passes the key on).

Widths: USER and OWNER are as wide as their widest cell (at most their default widths,
OWNER wider on a wide terminal), so short names leave their cells to COMMAND, which
shrinks last (:func:`~nvtopy.render.processes.visible_columns`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import cast

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.actions import SkipAction
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..columns import Column
from ..model import GpuProcess, ProcessOwner
from ..render.cells import (
    DIM,
    PLAIN,
    PROCESS_CELL_KEYS,
    RICH_STYLES,
    WARN,
    Cell,
    group_cells,
    group_instance_cell,
    owner_cell,
    process_cells,
    process_flags_cell,
    process_instance_cell,
)
from ..render.processes import ProcessGroup, SortOrder, group_host_cell, host_cell, visible_columns
from ..render.styled import style
from ..render.tree import BRANCH, LAST, AncestorRow, ancestor_cells, build_tree
from ..render.units import NA
from ..textsafe import safe_text
from .redraw import refresh_lines

__all__ = ["ProcessTable"]

_STYLE_TAGGED = Style(color="yellow", bold=True)
_STYLE_CURSOR = Style(reverse=True)
_STYLE_CURSOR_UNFOCUSED = Style(bgcolor="grey23")
# Without colour (NO_COLOR, TERM=dumb) a grey bar is no cursor: underlined as well.
_STYLE_CURSOR_UNFOCUSED_PLAIN = Style(bgcolor="grey23", underline=True)
_STYLE_HEADER = Style(bold=True, reverse=True)
_STYLE_HEADER_SORTED = Style(bold=True, reverse=True, color="cyan")
_STYLE_GROUP = Style(bold=True)
_FLAG_MARK = "!"  # beside the tag marker: the row has a real-work flag (idle-held, suspected hang)

Row = GpuProcess | ProcessGroup | AncestorRow  # a process, processes folded into a group, a tree's ancestor


def _cell_style(category: str, tagged: bool) -> Style | None:
    """A cell's style: its category's (render/cells.py, as in ``--once``); a tagged row is yellow but keeps colours."""
    if not tagged:
        return style(RICH_STYLES[category])
    if category in (PLAIN, DIM):
        return _STYLE_TAGGED
    return _STYLE_TAGGED + style(RICH_STYLES[category])


@dataclass(frozen=True, slots=True)
class _Placed:
    column: Column
    x: int
    width: int


def _fit(text: str, width: int, align: str) -> str:
    """``text`` in exactly ``width`` cells (wide characters counted as two)."""
    if text.isascii():
        if len(text) > width:
            return text[: width - 1] + "…" if width > 1 else text[:width]
        return text.rjust(width) if align == "right" else text.ljust(width)
    length = cell_len(text)
    if length > width:
        return set_cell_size(text, width - 1) + "…" if width > 1 else set_cell_size(text, width)
    padding = " " * (width - length)
    return padding + text if align == "right" else text + padding


class ProcessTable(ScrollView, can_focus=True):
    """Processes of the selected GPUs; the app gives it rows already filtered and sorted."""

    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding(
            "enter",
            "toggle_group",
            "Open or fold",
            show=False,
            tooltip="On a group row (b groups): list its processes under it, or fold them",
        ),
        Binding("right", "unfold_group", "Open group", show=False, tooltip="On a group row: list its processes"),
        Binding("left", "fold_group", "Fold group", show=False, tooltip="On a group or one of its processes: fold it"),
    ]

    KEYS_HELP = "Open or fold a group (b); ← on one of its rows folds it"
    """The help screen's line for the keys above that have a tooltip (one line: the help is long)."""

    class HeaderClicked(Message):
        """The user clicked a column title: sort by it."""

        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Row] = []
        self._cells: dict[int, tuple[Cell, ...]] = {}
        self.cursor = 0
        self._cursor_key: tuple[object, ...] | None = None
        self._me: str | None = None
        self._tags: frozenset[tuple[int, int, float | None]] = frozenset()
        self._order = SortOrder()
        self._placed: list[_Placed] = []
        self._layout_width = -1
        self._line_cache: dict[int, tuple[tuple[object, ...], Strip, list[Segment] | None]] = {}
        self._shown: list[tuple[object, ...]] = []  # signature of each row line as last drawn
        self._flags = (False, False)  # FLAGS shown (some process has a flag), and kept at any width
        self._mig = False  # MIG shown (some GPU has MIG instances)
        self._hosts: Mapping[int, str] | None = None  # HOST shown: each GPU's "node2/3" (None: a local table)
        self._host_width = 0  # the widest of those labels (0: no HOST column)
        self._chosen: tuple[str, ...] | None = None  # the user's columns in order (None: the defaults)
        self._prefixes: list[str] = []  # the tree view and open groups: each row's glyphs ([]: none)
        self._group_of: list[ProcessGroup | None] = []  # each row's open group, for its processes ([]: no groups)
        self._unfolded: set[tuple[object, ...]] = set()  # the keys of the groups listed open
        self._given: list[Row] = []  # the rows as the app gave them (groups folded)
        self._tree = False
        self._widths: tuple[int | None, int | None, bool] = (
            None,
            None,
            False,
        )  # the widest USER and OWNER cells, and whether the rows are groups
        self._owner_widths: dict[ProcessOwner, int] = {}
        self._user_widths: dict[str, int] = {}
        self.empty_message = "No GPU processes"
        self._width_of: tuple[object, int] = ((), 0)  # _width's last (key, width)

    # ----------------------------------------------------------------- data in

    @property
    def selected(self) -> Row | None:
        """The process, or the group (group-by), under the cursor."""
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def set_rows(
        self,
        rows: list[Row],
        *,
        me: str | None,
        tags: frozenset[tuple[int, int, float | None]],
        order: SortOrder,
        flags: bool = False,
        keep_flags: bool = False,
        mig: bool = False,
        tree: bool = False,
        hosts: Mapping[int, str] | None = None,
    ) -> None:
        """Show ``rows``; the cursor stays on its process (or group) if it is still there.

        ``flags``: show the FLAGS column (some process has a flag); ``keep_flags``: keep it
        at any width (the user filters by flags); ``mig``: show the MIG column (some GPU has instances);
        ``tree``: show the processes of ``rows`` under their parents (groups are not drawn as a tree);
        ``hosts``: show the HOST column, each GPU's label by its global index
        (:func:`~nvtopy.render.processes.host_labels`; None: a local table, no HOST).
        """
        header_changed = order != self._order
        host_width = 0 if hosts is None else max((cell_len(label) for label in hosts.values()), default=4)
        if (flags, keep_flags) != self._flags or mig != self._mig or host_width != self._host_width:
            self._flags = (flags, keep_flags)
            self._mig = mig
            self._host_width = host_width
            self._layout_width = -1  # the columns change: lay them out again, redraw every line
            self._shown = []
            header_changed = True
        self._order = order
        self._me = me
        self._tags = tags
        self._hosts = hosts
        self._given = rows
        self._tree = tree
        self._show(header_changed)

    def _show(self, header_changed: bool = False) -> None:
        """Lay out the rows the app gave (:meth:`set_rows`): as a tree, or with the open groups' processes."""
        rows = self._given
        self._group_of = []
        if self._tree:
            entries = build_tree([row for row in rows if isinstance(row, GpuProcess)])
            rows = [entry.row for entry in entries]
            self._prefixes = [entry.prefix for entry in entries]
        elif any(isinstance(row, ProcessGroup) for row in rows):
            rows, self._prefixes, self._group_of = self._unfold(rows)
        else:
            self._prefixes = []
        widths = self._widest(rows)
        if widths != self._widths:
            self._widths = widths
            self._layout_width = -1
            self._shown = []
            header_changed = True
        self.rows = rows
        self._cells = {}  # formatted lazily, visible rows only: drawing 1000 processes costs what 30 do
        if self._cursor_key is not None:
            for index, process in enumerate(rows):
                if process.key == self._cursor_key:
                    self.cursor = index
                    break
        self.cursor = max(0, min(self.cursor, len(rows) - 1))
        self._cursor_key = rows[self.cursor].key if rows else None
        height = len(rows) + 1
        if self.virtual_size.height != height:
            self.virtual_size = Size(self.size.width, height)
        if header_changed:
            self.refresh(Region(0, 0, self._width, 1))
        self._keep_cursor_visible()
        self._refresh_changed_lines()

    def _unfold(self, given: list[Row]) -> tuple[list[Row], list[str], list[ProcessGroup | None]]:
        """The groups with the processes of the open ones under them; their glyphs; each row's open group."""
        rows: list[Row] = []
        prefixes: list[str] = []
        group_of: list[ProcessGroup | None] = []
        modes = {row.mode for row in given if isinstance(row, ProcessGroup)}
        self._unfolded = {key for key in self._unfolded if key[1] in modes}  # another grouping: all folded
        for row in given:
            rows.append(row)
            prefixes.append("")
            group_of.append(None)
            if isinstance(row, ProcessGroup) and row.key in self._unfolded:
                last = len(row.members) - 1
                for i, member in enumerate(row.members):
                    rows.append(member)
                    prefixes.append(LAST if i == last else BRANCH)
                    group_of.append(row)
        return rows, prefixes, group_of

    def _widest(self, rows: list[Row]) -> tuple[int | None, int | None, bool]:
        """The widest USER and OWNER cells of ``rows`` (a group's and its processes'), and whether any is a group.

        Why all rows and not the visible ones: the columns would change width while scrolling.
        """
        if set(map(type, rows)) <= {GpuProcess}:  # plain processes (no groups, no tree's ancestors): by name
            return self._widest_processes(cast("list[GpuProcess]", rows))
        users = owners = 0
        grouped = False
        for row in rows:
            if isinstance(row, ProcessGroup):
                grouped = True
                cells = group_cells(row, self._me)
                users = max(users, cell_len(cells[_USER_INDEX][0]))
                owners = max(owners, cell_len(cells[_OWNER_INDEX][0]))
                members: tuple[GpuProcess | AncestorRow, ...] = row.members
            else:
                members = (row,)
            for member in members:
                users = max(users, 1 if isinstance(member, GpuProcess) and member.foreign else self._user_width(member))
                if isinstance(member, GpuProcess):
                    owners = max(owners, self._owner_width(member))
        return (users or None, owners or None, grouped)

    def _widest_processes(self, rows: list[GpuProcess]) -> tuple[int | None, int | None, bool]:
        """:meth:`_widest` of plain processes, each user and owner measured once (a table has few of each and
        a row for every process, every second)."""
        foreign = any(map(_FOREIGN, rows))  # a process of another PID namespace: its USER is "?", one cell
        if foreign:
            by_user = {row.user: row for row in rows if not row.foreign}
        else:
            by_user = dict(zip(map(_USER, rows), rows, strict=True))
        by_owner = dict(zip(map(id, map(_OWNER, rows)), rows, strict=True))  # by object: an owner hashes in Python
        users = max(map(self._user_width, by_user.values()), default=0)
        if foreign:
            users = max(users, 1)
        owners = max(map(self._owner_width, by_owner.values()), default=0)
        return (users or None, owners or None, False)

    def _user_width(self, row: GpuProcess | AncestorRow) -> int:
        """The width of ``row``'s USER cell (made safe: an escape is wider than the character), by name."""
        if row.user is None:
            return len(NA)
        width = self._user_widths.get(row.user)
        if width is None:
            if len(self._user_widths) > 4096:
                self._user_widths.clear()
            width = self._user_widths[row.user] = cell_len(safe_text(row.user))
        return width

    def _owner_width(self, process: GpuProcess) -> int:
        """The width of ``process``'s OWNER cell, remembered by owner (few owners, many processes)."""
        owner = process.owner
        if owner is None:
            return len(NA)
        width = self._owner_widths.get(owner)
        if width is None:
            if len(self._owner_widths) > 4096:
                self._owner_widths.clear()
            width = self._owner_widths[owner] = cell_len(owner_cell(process)[0])
        return width

    # ----------------------------------------------------------------- groups

    def _group_at_cursor(self) -> ProcessGroup | None:
        """The group the cursor is on, or the open group of the process it is on."""
        row = self.selected
        if isinstance(row, ProcessGroup):
            return row
        if self._group_of and 0 <= self.cursor < len(self._group_of):
            return self._group_of[self.cursor]
        return None

    def _set_open(self, group: ProcessGroup, unfolded: bool) -> None:
        """List ``group``'s processes under it, or fold them (the cursor goes to the group)."""
        if unfolded:
            self._unfolded.add(group.key)
        else:
            self._unfolded.discard(group.key)
            self._cursor_key = group.key
        self._cells = {}
        self._show()
        self.refresh()

    def action_toggle_group(self) -> None:
        """Enter: open or fold the group under the cursor; on a process, the app's Enter (its screen)."""
        row = self.selected
        if not isinstance(row, ProcessGroup):
            raise SkipAction()
        self._set_open(row, row.key not in self._unfolded)

    def action_unfold_group(self) -> None:
        row = self.selected
        if not isinstance(row, ProcessGroup):
            raise SkipAction()
        if row.key not in self._unfolded:
            self._set_open(row, True)

    def action_fold_group(self) -> None:
        group = self._group_at_cursor()
        if group is None:
            raise SkipAction()
        if group.key in self._unfolded:
            self._set_open(group, False)
        else:
            self.move_cursor(self.rows.index(group))

    def is_unfolded(self, group: ProcessGroup) -> bool:
        """Whether ``group``'s processes are listed under it."""
        return group.key in self._unfolded

    # ----------------------------------------------------------------- cursor

    @property
    def _width(self) -> int:
        """Drawable width: the scrollbar takes the last column when it is shown.

        Kept while the widget's size, its scrollbar and its gutter stay as they were: Textual works the region
        out anew at each call (about 4 us), and every line drawn asks, 16 rows a second at 200x50."""
        styles = self.styles
        key = (self._size, self.show_vertical_scrollbar, styles.gutter, styles.scrollbar_size_vertical)
        kept, width = self._width_of
        if kept != key:
            width = max(1, self.scrollable_content_region.width)
            self._width_of = (key, width)
        return width

    def _viewport_rows(self) -> int:
        return max(1, self.size.height - 1)

    def _keep_cursor_visible(self) -> None:
        top = round(self.scroll_offset.y)
        rows = self._viewport_rows()
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + rows:
            self.scroll_to(y=self.cursor - rows + 1, animate=False, immediate=True)

    def move_cursor(self, index: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(index, len(self.rows) - 1))
        self._cursor_key = self.rows[self.cursor].key
        self._keep_cursor_visible()
        self._refresh_changed_lines()

    def action_move(self, step: int) -> None:
        self.move_cursor(self.cursor + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor + step * self._viewport_rows())

    def action_jump(self, where: int) -> None:
        self.move_cursor(len(self.rows) - 1 if where < 0 else 0)

    def on_focus(self) -> None:
        self._refresh_changed_lines()

    def on_blur(self) -> None:
        self._refresh_changed_lines()

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            for placed in self._placed:
                if placed.x <= event.x < placed.x + placed.width + 1:
                    self.post_message(self.HeaderClicked(placed.column.key))
                    return
            return
        index = round(self.scroll_offset.y) + event.y - 1
        if 0 <= index < len(self.rows):
            self.move_cursor(index)

    # ----------------------------------------------------------------- drawing

    def _layout(self, width: int) -> list[_Placed]:
        if width != self._layout_width:
            self._layout_width = width
            placed = []
            x = 2  # a tag marker and a space come first
            flags, keep_flags = self._flags
            users, owners, grouped = self._widths
            columns = visible_columns(
                width - x,
                flags=flags,
                keep_flags=keep_flags,
                mig=self._mig,
                chosen=self._chosen,
                hosts=self._host_width,
                users=users,
                owners=owners,
                grouped=grouped,
            )
            rest = width - x - sum(c.width + 1 for c in columns if c.key != "command")  # COMMAND's, wherever it is
            for column in columns:
                cell = column.width if column.key != "command" else max(1, rest)
                placed.append(_Placed(column, x, cell))
                x += cell + 1
            self._placed = placed
            self._line_cache.clear()
        return self._placed

    def _cells_of(self, index: int) -> tuple[Cell, ...]:
        """The row's cells in :data:`PROCESS_CELL_KEYS` order, then its FLAGS, MIG and HOST cells."""
        cells = self._cells.get(index)
        if cells is None:
            row = self.rows[index]
            hosts = self._hosts or {}
            if isinstance(row, ProcessGroup):
                extra = (_group_flags_cell(row), group_instance_cell(row), group_host_cell(row, hosts))
                cells = (*group_cells(row, self._me, unfolded=row.key in self._unfolded), *extra)
            elif isinstance(row, AncestorRow):
                cells = (*ancestor_cells(row, self._me), ("", PLAIN), ("", PLAIN), ("", PLAIN))
            else:
                extra = (process_flags_cell(row), process_instance_cell(row), host_cell(row, hosts))
                cells = (*process_cells(row, self._me), *extra)
            if self._prefixes and self._prefixes[index]:  # the tree's glyphs lead the command
                text, category = cells[_COMMAND_INDEX]
                glyphs = (self._prefixes[index] + text, category)
                cells = (*cells[:_COMMAND_INDEX], glyphs, *cells[_COMMAND_INDEX + 1 :])
            self._cells[index] = cells
        return cells

    def _tagged(self, row: Row) -> bool:
        if isinstance(row, ProcessGroup):
            return all(p.key in self._tags for p in row.members)
        return row.key in self._tags

    def _signature(self, index: int) -> tuple[object, ...]:
        """What a row line shows: its cells (words and categories), cursor, focus, tag, group."""
        row = self.rows[index]
        return (self._cells_of(index), index == self.cursor, self.has_focus, self._tagged(row), type(row))

    def _refresh_changed_lines(self) -> None:
        """Refresh the visible lines whose content differs from what was last drawn."""
        width = self._width
        top = round(self.scroll_offset.y)
        height = self._viewport_rows()
        shown = self._shown
        changed = []
        for y in range(height):
            index = top + y
            signature = self._signature(index) if index < len(self.rows) else ()
            if y >= len(shown) or shown[y] != signature:
                changed.append(y + 1)
        if not self.rows and 1 not in changed:
            changed.append(1)
        refresh_lines(self, changed, width)  # one refresh call, a region per changed line

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._shown = []

    def on_resize(self) -> None:
        self._shown = []
        self.refresh()

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The columns the user chose, in order (None: the defaults); see :meth:`set_columns`."""
        return self._chosen

    def set_columns(self, columns: tuple[str, ...] | None) -> None:
        """Show ``columns`` in this order (None: the defaults); MIG and FLAGS still only when there is something
        to show, and narrow terminals still drop the least important first."""
        if columns != self._chosen:
            self._chosen = columns
            self.restyle()

    def restyle(self) -> None:
        """Lay out and draw every line again (new columns, or new colours: the theme changed)."""
        self._layout_width = -1
        self._shown = []
        self.refresh()

    def _header_strip(self, width: int) -> Strip:
        text = Text("  ", style=_STYLE_HEADER, end="")
        for placed in self._layout(width):
            title = placed.column.title
            style = _STYLE_HEADER
            if placed.column.key == self._order.column:
                title += "▼" if self._order.reverse else "▲"
                style = _STYLE_HEADER_SORTED
            text.append(_fit(title, placed.width, placed.column.align), style=style)
            text.append(" ", style=_STYLE_HEADER)
        self._to_width(text, width)
        return Strip(list(text.render(self.app.console)), width)

    def _to_width(self, text: Text, width: int) -> None:
        """Pad or cut a row to ``width`` cells. Its cells were fitted (:func:`_fit`), so their total is
        the layout's end: only a row wider than the terminal pays for :meth:`Text.truncate`, which measures
        every character again (grapheme by grapheme once a cell holds "…")."""
        placed = self._layout(width)
        used = placed[-1].x + placed[-1].width + 1 if placed else 2
        if used > width:
            text.truncate(width, pad=True)
        elif used < width:
            text.append(" " * (width - used))

    def _overlay(self, signature: tuple[object, ...]) -> Style | None:
        """What a row's cells wear on top of their own style: bold for a group, reversed for the cursor."""
        _, selected, focused, _, kind = signature
        overlay = _STYLE_GROUP if kind is ProcessGroup else None
        if selected:
            unfocused = _STYLE_CURSOR_UNFOCUSED_PLAIN if self.app.no_color else _STYLE_CURSOR_UNFOCUSED
            cursor = _STYLE_CURSOR if focused else unfocused
            overlay = cursor if overlay is None else overlay + cursor
        return overlay

    def _row_strip(self, index: int, width: int, signature: tuple[object, ...]) -> tuple[Strip, list[Segment] | None]:
        """One row as segments, made directly: every visible row changes each second (TIME, SM %), and
        going through :class:`~rich.text.Text` (spans, then render) cost 3x as much per row.

        Also its segments (a segment a cell, at ``2 + 2 * column``), for :meth:`_spliced`; None when the row
        was cut to the terminal's width (its segments no longer match the columns)."""
        cells, _, _, tagged, _ = signature
        row_style = _STYLE_TAGGED if tagged else None
        overlay = self._overlay(signature)

        def on_top(cell_style: Style | None) -> Style | None:
            if overlay is None:
                return cell_style
            return overlay if cell_style is None else cell_style + overlay

        flagged = bool(cells[_FLAGS_INDEX][0])  # type: ignore[index]
        gap = on_top(row_style)
        segments = [
            Segment("●" if tagged else " ", gap),
            Segment(_FLAG_MARK if flagged else " ", on_top(style(RICH_STYLES[WARN]) if flagged else row_style)),
        ]
        placed = self._layout(width)
        for column in placed:
            cell_text, category = cells[_COLUMN_INDEX[column.column.key]]  # type: ignore[index]
            segments.append(
                Segment(_fit(cell_text, column.width, column.column.align), on_top(_cell_style(category, bool(tagged))))
            )
            segments.append(Segment(" ", gap))
        used = placed[-1].x + placed[-1].width + 1 if placed else 2  # the cells were fitted: no measuring
        if used < width:
            segments.append(Segment(" " * (width - used)))
        elif used == width + 1:  # the last cell ends at the edge (COMMAND takes the rest): its gap goes
            segments.pop()  # what cropping gave, without measuring every segment of every row again
            used = width
        if used > width:
            return Strip(segments, used).crop(0, width), None
        return Strip(segments, width), segments

    def _spliced(
        self, old: tuple[object, ...], segments: list[Segment], signature: tuple[object, ...], width: int
    ) -> tuple[Strip, list[Segment]] | None:
        """The row drawn last at this line (``old``, ``segments``) with only the cells that changed made again:
        a steady refresh changes a row's TIME and perhaps a figure or two, not its dozen other cells. None
        when more than cells changed (cursor, focus, tag, kind, flags): the row is made whole."""
        cells, old_cells = signature[0], old[0]
        if signature[1:] != old[1:] or cells[_FLAGS_INDEX] != old_cells[_FLAGS_INDEX]:  # type: ignore[index]
            return None
        overlay = self._overlay(signature)
        tagged = bool(signature[3])
        segments = list(segments)
        for i, column in enumerate(self._layout(width)):
            k = _COLUMN_INDEX[column.column.key]
            cell = cells[k]  # type: ignore[index]
            if cell == old_cells[k]:  # type: ignore[index]
                continue
            cell_text, category = cell
            cell_style = _cell_style(category, tagged)
            if overlay is not None:
                cell_style = overlay if cell_style is None else cell_style + overlay
            segments[2 + 2 * i] = Segment(_fit(cell_text, column.width, column.column.align), cell_style)
        return Strip(segments, width), segments

    def render_line(self, y: int) -> Strip:
        width = self._width
        if y == 0:
            return self._header_strip(width)
        index = round(self.scroll_y) + y - 1  # scroll_offset.y, without the Offset made for it
        while len(self._shown) < y:
            self._shown.append(())
        if index >= len(self.rows):
            self._shown[y - 1] = ()
            if index == 0 and y == 1:
                text = Text(f"  {self.empty_message}", style="dim", end="")
                text.truncate(width, pad=True)
                return Strip(list(text.render(self.app.console)), width)
            return Strip.blank(width, self.rich_style)
        signature = self._signature(index)
        self._shown[y - 1] = signature
        self._layout(width)  # a new layout empties the cache first: nothing drawn at another one is reused
        cached = self._line_cache.get(index)
        if cached is not None and cached[0] == signature:
            return cached[1]
        made = None
        if cached is not None and cached[2] is not None:  # the row drawn here last: only its changed cells
            made = self._spliced(cached[0], cached[2], signature, width)
        strip, segments = made or self._row_strip(index, width, signature)
        self._line_cache[index] = (signature, strip, segments)
        if len(self._line_cache) > 4 * max(1, self._size.height):  # the outer height: a bound, not a layout
            self._line_cache.clear()
            self._line_cache[index] = (signature, strip, segments)
        return strip


def _group_flags_cell(group: ProcessGroup) -> Cell:
    """A group's FLAGS: how many of its processes are flagged (their flags are on their own rows)."""
    flagged = sum(1 for p in group.members if p.flags)
    return (f"{flagged} flagged", WARN) if flagged else ("", PLAIN)


_FOREIGN, _USER, _OWNER = attrgetter("foreign"), attrgetter("user"), attrgetter("owner")
_COLUMN_INDEX = {key: i for i, key in enumerate(PROCESS_CELL_KEYS)}
_COMMAND_INDEX = _COLUMN_INDEX["command"]
_USER_INDEX = _COLUMN_INDEX["user"]
_OWNER_INDEX = _COLUMN_INDEX["owner"]
_FLAGS_INDEX = _COLUMN_INDEX["flags"] = len(PROCESS_CELL_KEYS)
_COLUMN_INDEX["mig"] = len(PROCESS_CELL_KEYS) + 1
_COLUMN_INDEX["host"] = len(PROCESS_CELL_KEYS) + 2
