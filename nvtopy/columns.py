"""The process table's columns: one list, in their default order, that everything else reads.

Why one list here, in the shared vocabulary: the config file names the columns
(``columns = [...]``, checked in :mod:`nvtopy.config`), the table lays them out and
sorts by them (:mod:`nvtopy.render.processes`), its cells are drawn in their order
(:func:`nvtopy.render.cells.process_cells`) and the column chooser lists and describes
them (:mod:`nvtopy.tui.columns_screen`). Each of those once kept its own list, held
equal by import-time assertions; now each derives what it needs from
:data:`TABLE_COLUMNS`, so a column is added or moved in one place.

HOST, MIG and FLAGS are shown only while there is something to show
(:attr:`Column.shown_when`): a table without other hosts, MIG instances or flagged
processes stays as it was. The rest are the columns every table has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from .model import GpuProcess, MigKey, OwnerKind
from .records import dataclass

__all__ = [
    "COLUMN_IDS",
    "TABLE_COLUMNS",
    "Column",
    "host_sort_value",
    "instance_sort_value",
    "owner_label",
]

Condition = Literal["host", "mig", "flags"]


@dataclass(frozen=True, slots=True)
class Column:
    """One process-table column: its config id, title, layout, what it sorts by, and what the chooser says of it."""

    key: str  # its id in the config file and the sort order
    title: str
    width: int  # cells; the last column (COMMAND) takes what is left
    align: str  # "left" or "right"
    value: Callable[[GpuProcess], Any]  # what it sorts by; None sorts last in both directions
    descending_first: bool  # numbers: biggest first on the first press
    priority: int  # columns with the highest priority number are dropped first on narrow terminals
    description: str  # the column chooser's words for it
    # Shown only while the snapshot spans other hosts ("host"), some GPU has MIG instances ("mig"), some
    # process is flagged ("flags"); None: in every table.
    shown_when: Condition | None = None


def _cpu(p: GpuProcess) -> float | None:
    return p.cpu_percent


def owner_label(p: GpuProcess) -> str | None:
    """The OWNER column's words, unescaped (sorting, grouping): ``"-"`` for a host process, None when unknown."""
    owner = p.owner
    if owner is None:
        return None
    return "-" if owner.kind is OwnerKind.HOST else owner.label


def _flags(p: GpuProcess) -> str | None:
    return ",".join(p.flags) if p.flags else None


def instance_sort_value(p: GpuProcess) -> tuple[int, int, int] | None:
    """What the MIG column sorts by: GPU, GI, CI as numbers (``1/10/0`` after ``1/2/0``); None off MIG."""
    if p.gpu_instance_id is None:
        return None
    return MigKey(p.gpu_index, p.gpu_instance_id, p.compute_instance_id).order


def host_sort_value(p: GpuProcess) -> tuple[str, int] | None:
    """What the HOST column sorts by: the host, then the GPU (a host's GPUs stay in order); None: a local one."""
    return None if p.host is None else (p.host, p.gpu_index)


TABLE_COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", 4, "right", lambda p: p.gpu_index, False, 0, "the GPU's index"),
    # The host a process runs on, with its GPU's own index there (``node2/3``), beside the GPU column's global
    # index. At small widths it outlasts every column but GPU, PID, GPU-MEM and COMMAND: on a fleet, which host
    # a process is on is the first thing to know.
    Column(
        "host",
        "HOST",
        14,
        "left",
        host_sort_value,
        False,
        1,
        "host/its GPU index (--remote, --prometheus)",
        shown_when="host",
    ),
    # The MIG instance a process runs on (``1/2/0``: GPU/GI/CI). At small widths it goes after OWNER, before USER.
    Column(
        "mig",
        "MIG",
        6,
        "left",
        instance_sort_value,
        False,
        2,
        "MIG instance GPU/GI/CI (while a GPU has MIG)",
        shown_when="mig",
    ),
    Column("pid", "PID", 7, "right", lambda p: p.pid, False, 0, "process id"),
    Column("user", "USER", 10, "left", lambda p: p.user, False, 1, "user name (other users' dimmed)"),
    Column("owner", "OWNER", 11, "left", owner_label, False, 3, "container, pod, Slurm job or service"),
    Column(
        "type", "TYPE", 4, "left", lambda p: p.type.value, False, 4, "C compute, G graphics, C+G both, M MPS client"
    ),
    Column("gpu_memory", "GPU-MEM", 8, "right", lambda p: p.gpu_memory_bytes, True, 0, "GPU memory used"),
    Column("sm", "SM%", 4, "right", lambda p: p.sm_percent, True, 2, "share of the SMs the process uses"),
    Column("cpu", "CPU%", 6, "right", _cpu, True, 2, "CPU use"),
    Column("host_memory", "HOST-MEM", 8, "right", lambda p: p.host_memory_bytes, True, 3, "host memory (resident)"),
    Column("time", "TIME", 9, "right", lambda p: p.running_seconds, True, 2, "running time"),
    # The real-work flags ("idle-held 12 min", "hang?"). Not in the ``s`` cycle (a click on its title sorts by it);
    # at small widths the first of the priority-2 columns to go (a flagged row keeps a marker), unless the flag
    # filter asked for flagged processes.
    Column(
        "flags",
        "FLAGS",
        16,
        "left",
        _flags,
        False,
        2,
        "idle-held, suspected hang (while one is flagged)",
        shown_when="flags",
    ),
    Column(
        "command", "COMMAND", 0, "left", lambda p: p.command, False, 0, "command line (takes the width that is left)"
    ),
)
"""Every column of the process table, in its default place (what the chooser lists and the config names)."""

COLUMN_IDS: tuple[str, ...] = tuple(c.key for c in TABLE_COLUMNS)
"""The columns' ids in their default order: the config file's ``columns`` default and what it accepts."""
