"""The process table's logic: columns, filtering and sorting -- no Textual here (its cells: render/cells.py).

Why apart from the widget: this is what users reason about ("sort by GPU memory,
only my processes, matching 'train'"), so it is tested on its own, on plain
snapshots, and the widget only draws what it returns. Everything here is
O(n log n) in the number of processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model import GpuProcess, ProcessType
from ..textsafe import safe_text
from .cells import PROCESS_CELL_KEYS

__all__ = ["COLUMNS", "Column", "ProcessFilter", "SortOrder", "Tags", "build_rows", "visible_columns"]


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    width: int  # cells; the last column (COMMAND) takes what is left
    align: str  # "left" or "right"
    value: Callable[[GpuProcess], Any]  # what it sorts by; None sorts last in both directions
    descending_first: bool  # numbers: biggest first on the first press
    priority: int  # columns with the highest priority number are dropped first on narrow terminals


def _cpu(p: GpuProcess) -> float | None:
    return p.cpu_percent


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", 4, "right", lambda p: p.gpu_index, False, 0),
    Column("pid", "PID", 7, "right", lambda p: p.pid, False, 0),
    Column("user", "USER", 10, "left", lambda p: p.user, False, 1),
    Column("type", "TYPE", 4, "left", lambda p: p.type.value, False, 4),
    Column("gpu_memory", "GPU-MEM", 8, "right", lambda p: p.gpu_memory_bytes, True, 0),
    Column("sm", "SM%", 4, "right", lambda p: p.sm_percent, True, 2),
    Column("cpu", "CPU%", 6, "right", _cpu, True, 2),
    Column("host_memory", "HOST-MEM", 8, "right", lambda p: p.host_memory_bytes, True, 3),
    Column("time", "TIME", 9, "right", lambda p: p.running_seconds, True, 2),
    Column("command", "COMMAND", 0, "left", lambda p: p.command, False, 0),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
if COLUMN_KEYS != PROCESS_CELL_KEYS:  # cells.process_cells draws these columns, in this order
    raise AssertionError(f"process columns {COLUMN_KEYS} != cells {PROCESS_CELL_KEYS}")
_BY_KEY = {c.key: c for c in COLUMNS}
MIN_COMMAND_WIDTH = 20


def visible_columns(width: int) -> tuple[Column, ...]:
    """The columns that fit ``width`` cells, dropping low-priority ones while COMMAND would be too narrow."""
    columns = list(COLUMNS)
    while True:
        fixed = sum(c.width + 1 for c in columns if c.key != "command")
        if width - fixed >= MIN_COMMAND_WIDTH:
            break
        droppable = [c for c in columns if c.priority > 0]
        if not droppable:
            break
        columns.remove(max(droppable, key=lambda c: (c.priority, COLUMNS.index(c))))
    return tuple(columns)


@dataclass(frozen=True, slots=True)
class SortOrder:
    column: str = "gpu"
    reverse: bool = False

    def cycle(self, step: int) -> SortOrder:
        """The next (or previous) column, in its natural direction."""
        index = (COLUMN_KEYS.index(self.column) + step) % len(COLUMN_KEYS)
        key = COLUMN_KEYS[index]
        return SortOrder(key, _BY_KEY[key].descending_first)

    def by(self, key: str) -> SortOrder:
        """Sort by ``key``: a new column starts in its natural direction, the same column flips."""
        if key == self.column:
            return SortOrder(key, not self.reverse)
        return SortOrder(key, _BY_KEY[key].descending_first)

    def flipped(self) -> SortOrder:
        return SortOrder(self.column, not self.reverse)

    @property
    def title(self) -> str:
        return _BY_KEY[self.column].title


def _is_type(kind: ProcessType, wanted: str) -> bool:
    """The type filter: C+G matches both C and G; MPS clients (M) are compute work, so C keeps them."""
    return kind is ProcessType.BOTH or kind.value == wanted or (wanted == "C" and kind is ProcessType.MPS)


@dataclass(frozen=True, slots=True)
class ProcessFilter:
    """What the user narrowed the table to. The empty filter shows everything."""

    text: str = ""
    mine_only: bool = False
    process_type: str | None = None  # "C" or "G"; C+G rows match both
    gpus: frozenset[int] | None = None  # None: every GPU of the snapshot

    @property
    def active(self) -> bool:
        return bool(self.text or self.mine_only or self.process_type or self.gpus is not None)

    def replace(self, **changes: Any) -> ProcessFilter:
        return dataclasses.replace(self, **changes)

    def describe(self) -> list[str]:
        """Short labels for the header, e.g. ``['"train"', 'mine', 'type C', 'GPUs 0,2']``."""
        labels = []
        if self.text:
            labels.append(f'"{safe_text(self.text)}"')  # typed or pasted: shown in the header
        if self.mine_only:
            labels.append("mine")
        if self.process_type:
            labels.append(f"type {self.process_type}")
        if self.gpus is not None:
            labels.append("GPUs " + (",".join(str(i) for i in sorted(self.gpus)) or "none"))
        return labels

    def matches(self, process: GpuProcess, me: str | None) -> bool:
        if self.gpus is not None and process.gpu_index not in self.gpus:
            return False
        if self.mine_only and (me is None or process.user != me):
            return False
        if self.process_type and not _is_type(process.type, self.process_type):
            return False
        if self.text:
            needle = self.text.lower()
            if not (
                needle in str(process.pid)
                or needle in (process.user or "").lower()
                or needle in (process.command or "").lower()
            ):
                return False
        return True


def build_rows(
    processes: Iterable[GpuProcess], order: SortOrder, row_filter: ProcessFilter, me: str | None
) -> list[GpuProcess]:
    """Filter then sort. Ties (and the default GPU order) break by GPU memory, then pid.

    Missing values (None) always sort last, whichever the direction, so "N/A"
    never pushes real figures off the top of the table.
    """
    rows = [p for p in processes if row_filter.matches(p, me)]
    # Stable sorts, least significant first: pid, then GPU memory (biggest first), then the column.
    rows.sort(key=lambda p: p.pid)
    rows.sort(key=lambda p: -(p.gpu_memory_bytes or 0))
    column = _BY_KEY[order.column]
    present = [p for p in rows if column.value(p) is not None]
    missing = [p for p in rows if column.value(p) is None]
    present.sort(key=column.value, reverse=order.reverse)
    return present + missing


@dataclass(slots=True)
class Tags:
    """Processes the user tagged for a batch action, by identity (GPU, pid, create time)."""

    keys: set[tuple[int, int, float | None]] = field(default_factory=set)

    def toggle(self, process: GpuProcess) -> None:
        self.keys.symmetric_difference_update({process.key})

    def prune(self, alive: Iterable[GpuProcess]) -> None:
        """Forget tags of processes that exited."""
        self.keys &= {p.key for p in alive}
