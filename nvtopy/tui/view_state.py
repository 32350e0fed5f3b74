"""What the user chose to see: one frozen value, changed only by :meth:`~nvtopy.tui.app.NvtopyApp.change_view`.

Why one value: the filter, the sort, the grouping, the tree, the GPU layout, the
columns and the charts' mode and window were a dozen attributes of the app, each
changed in its own place with its own redraw. As one frozen dataclass a change is
``change_view(replace(app.view, ...))``: one assignment, one redraw, and the
config file (:mod:`.preferences`) sets the starting value the same way.

What is *not* here: the tagged processes (a selection of processes, pruned by
every snapshot, like the cursor), the theme (Textual's own reactive), and the
source's state (paused, the refresh interval, a replay's speed): each redraws for
its own reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from ..render.processes import ProcessFilter, SortOrder
from ..sources.timeline import WINDOWS
from .charts import CHART_MODES, DEFAULT_WINDOW
from .gpu_view import MODES

__all__ = ["ViewState"]

_T = TypeVar("_T")


def _following(values: Sequence[_T], current: _T, step: int = 1) -> _T:
    """The value ``step`` places after ``current`` in ``values``, round; one not in them counts as the first."""
    index = values.index(current) if current in values else 0
    return values[(index + step) % len(values)]


@dataclass(frozen=True, slots=True)
class ViewState:
    """The monitor's view: what the table shows and how, how the GPUs and the charts are drawn."""

    row_filter: ProcessFilter = field(default_factory=ProcessFilter)
    order: SortOrder = field(default_factory=SortOrder)
    group_by: str | None = None  # None, "user", "owner", "gpu" or "host" (render.processes.GROUP_MODES)
    tree_view: bool = False  # the process table as a tree (t, w); a grouped table is never a tree
    layout_mode: str = "auto"  # the GPU view (v): gpu_view.MODES
    columns: tuple[str, ...] | None = None  # the process table's columns in order (None: the defaults)
    chart_mode: str = CHART_MODES[0]  # the history charts (c): per metric, per GPU, off
    chart_window: float = DEFAULT_WINDOW  # the history charts' window in seconds (z, Z): sources.timeline.WINDOWS

    def grouped(self, mode: str | None) -> ViewState:
        """Grouped by ``mode`` (None: one row a process); groups are not drawn as a tree."""
        return replace(self, group_by=mode, tree_view=self.tree_view and mode is None)

    def toggled_tree(self) -> ViewState:
        """A tree, or the plain list again; a tree is never grouped."""
        tree = not self.tree_view
        return replace(self, tree_view=tree, group_by=None if tree else self.group_by)

    def next_layout(self) -> ViewState:
        """The GPU view after this one: auto, full panels, compact lines."""
        return replace(self, layout_mode=_following(MODES, self.layout_mode))

    def next_chart_mode(self) -> ViewState:
        """The charts after these: one per metric, one per GPU, none."""
        return replace(self, chart_mode=_following(CHART_MODES, self.chart_mode))

    def zoomed(self, step: int) -> ViewState:
        """The charts' next (``step`` 1) or previous (-1) window: 1 min, 10 min, 1 h, 24 h, round."""
        return replace(self, chart_window=_following(WINDOWS, self.chart_window, step))
