"""The process tree: GPU processes under their parents, as htop and nvitop draw them -- no Textual here.

Why apart from the widget: which process hangs under which, and in what order, is
the logic users reason about ("the ranks under their torchrun"); it is tested on
plain rows, and the table only draws what :func:`build_tree` returns.

Each GPU process carries its parent pid and its ancestors (nearest first, up to
pid 1 not included), read by the backend with the host facts (see
:class:`~nvtopy.model.GpuProcess`). A process whose ancestor is another shown GPU
process hangs under it; the ancestors that are not GPU processes (a launcher, a
shell, a container's shim) are drawn too, dimmed (:class:`AncestorRow`), so a job's
processes gather under what started them. Siblings keep the table's order (its
sort): an ancestor stands where its first descendant would. A process on several
GPUs is one row per GPU, side by side; its children hang under its last row.

A recording or a remote host has no parents: every process is then a root, and
the tree is the table as it was. O(n * depth) in the number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import GpuProcess, ProcessRelative
from ..textsafe import safe_text
from .cells import DIM, PLAIN, PROCESS_CELL_KEYS, Cell
from .units import NA

__all__ = ["AncestorRow", "TreeEntry", "ancestor_cells", "build_tree"]

BRANCH, LAST, PIPE, SPACE = "├ ", "└ ", "│ ", "  "


@dataclass(frozen=True, slots=True)
class AncestorRow:
    """A process of the tree that is not a GPU process: shown (dimmed) because GPU processes descend from it."""

    pid: int
    name: str | None = None
    user: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        """Stable identity across refreshes (the cursor follows it)."""
        return ("ancestor", self.pid)


TreeRow = GpuProcess | AncestorRow


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One line of the tree: its row, its depth, and the glyphs drawn before its command."""

    row: TreeRow
    depth: int
    prefix: str  # "│ └ ": one two-cell unit per level (empty for a root)


def build_tree(rows: Sequence[GpuProcess], *, ancestors: bool = True) -> list[TreeEntry]:
    """``rows`` (filtered and sorted) as a tree, depth first; ``ancestors``: draw non-GPU ancestors too.

    Without ``ancestors`` a GPU process hangs under its nearest GPU ancestor (if shown),
    else it is a root. Parent pids only ever link rows of this host's PID namespace
    (a foreign row has none) and a loop of reused pids is cut where it closes.
    """
    order: list[int] = []  # node pids, in the order they are first met
    rows_of: dict[int, list[GpuProcess]] = {}
    for row in rows:
        if row.pid not in rows_of:
            rows_of[row.pid] = []
            order.append(row.pid)
        rows_of[row.pid].append(row)
    parent_of: dict[int, int] = {}
    relatives: dict[int, ProcessRelative] = {}
    for pid in order:
        first = rows_of[pid][0]
        chain = first.parents or (
            (ProcessRelative(first.ppid),) if first.ppid is not None and first.ppid in rows_of else ()
        )
        child = pid
        for relative in chain:
            if relative.pid <= 1 or relative.pid == pid:
                break
            if relative.pid in rows_of:  # a GPU process: its own chain goes on from its own row
                parent_of.setdefault(child, relative.pid)
                break
            if not ancestors:
                continue
            parent_of.setdefault(child, relative.pid)
            if relative.pid in relatives:  # met through another process: the rest of the chain is known
                break
            relatives[relative.pid] = relative
            child = relative.pid
    children: dict[int | None, list[int]] = {}
    for pid in (*order, *relatives):
        parent = parent_of.get(pid)
        if parent is not None and _loops(pid, parent_of):
            parent = None  # reused pids made a loop: cut it here
            parent_of.pop(pid, None)
        children.setdefault(parent, []).append(pid)
    rank: dict[int, int] = {}  # a node's place: the first place of its own rows or of any descendant's
    for position, pid in enumerate(order):
        node: int | None = pid
        seen: set[int] = set()
        while node is not None and node not in seen and (node not in rank or rank[node] > position):
            seen.add(node)
            rank[node] = position
            node = parent_of.get(node)
    entries: list[TreeEntry] = []

    def visit(pid: int, depth: int, lead: str, last: bool) -> None:
        own = rows_of.get(pid)
        glyph = (LAST if last else BRANCH) if depth else ""
        under = lead + (SPACE if last else PIPE) if depth else ""
        kids = sorted(children.get(pid, ()), key=lambda kid: rank.get(kid, len(order)))
        if own is None:
            relative = relatives[pid]
            entries.append(TreeEntry(AncestorRow(pid, relative.name, relative.user), depth, lead + glyph))
        else:
            # A process on several GPUs: its rows side by side, each a sibling; its children under the last.
            for i, row in enumerate(own):
                alone = i == len(own) - 1 and last
                entries.append(TreeEntry(row, depth, lead + ((LAST if alone else BRANCH) if depth else "")))
        for i, kid in enumerate(kids):
            visit(kid, depth + 1, under, i == len(kids) - 1)

    roots = sorted(children.get(None, ()), key=lambda pid: rank.get(pid, len(order)))
    for pid in roots:
        visit(pid, 0, "", True)
    return entries


def _loops(pid: int, parent_of: dict[int, int]) -> bool:
    """Whether following parents from ``pid`` comes back to it."""
    seen = {pid}
    node = parent_of.get(pid)
    while node is not None:
        if node in seen:
            return node == pid
        seen.add(node)
        node = parent_of.get(node)
    return False


def ancestor_cells(row: AncestorRow, me: str | None) -> tuple[Cell, ...]:
    """Every column of a non-GPU ancestor's row (:data:`PROCESS_CELL_KEYS` order): its pid, user and name, dim.

    The figures are not read for it (it is no GPU process): blank, not N/A.
    """
    user = safe_text(row.user) if row.user else NA
    name = safe_text(row.name) if row.name else f"{NA} (not readable)"
    cells: dict[str, Cell] = dict.fromkeys(PROCESS_CELL_KEYS, ("", PLAIN))
    cells["pid"] = (str(row.pid), DIM)
    cells["user"] = (user, PLAIN if row.user is not None and row.user == me else DIM)
    cells["command"] = (name, DIM)
    return tuple(cells[key] for key in PROCESS_CELL_KEYS)
