"""The process table's logic: columns, filtering and sorting -- no Textual here (its cells: render/cells.py).

Why apart from the widget: this is what users reason about ("sort by GPU memory,
only my processes, matching 'train'"), so it is tested on its own, on plain
snapshots, and the widget only draws what it returns. Everything here is
O(n log n) in the number of processes.

MIG: the MIG column (``1/2/0``: GPU/GI/CI) is shown only while some GPU has MIG
instances, and the filter can narrow a GPU to some of its instances
(:attr:`ProcessFilter.instances`, a :data:`~nvtopy.selection.ChosenInstances`): then only
their processes are listed and :meth:`ProcessFilter.limit` gives the GPU as the panels show
it, with only those instances (:func:`~nvtopy.selection.narrow_to_instances`, as the collector
narrows it for ``--gpus MIG-...``). Filtering stays a view concern: the snapshot is never changed.

Hosts: the HOST column (``node2/3``: the host and the GPU's own index there,
beside the GPU column's global index) is shown only while the snapshot spans
other hosts (``--remote``, ``--prometheus``: some GPU's ``static.host`` is set);
the filter text matches the host name, and sorting by HOST keeps a host's GPUs
in order. A local snapshot's table is as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from ..columns import COLUMN_IDS, TABLE_COLUMNS, Column, owner_label
from ..model import GpuProcess, GpuState, MigKey, ProcessType
from ..records import dataclass
from ..selection import ChosenInstances, narrow_to_instances
from ..textsafe import safe_text
from .cells import DIM, REMOTE, Cell, host_label, plural
from .units import NA

__all__ = [
    "COLUMNS",
    "FLAGS_COLUMN",
    "FLAG_FILTERS",
    "GROUP_MODES",
    "GROUP_TITLES",
    "HOST_COLUMN",
    "HOST_GROUPING",
    "MIG_COLUMN",
    "ProcessFilter",
    "ProcessGroup",
    "SortOrder",
    "Tags",
    "build_groups",
    "build_rows",
    "group_host_cell",
    "group_value",
    "host_cell",
    "host_labels",
    "visible_columns",
]


_BY_KEY = {c.key: c for c in TABLE_COLUMNS}
COLUMNS: tuple[Column, ...] = tuple(c for c in TABLE_COLUMNS if c.shown_when is None)
"""The columns every table has, in order (:data:`~nvtopy.columns.TABLE_COLUMNS` without HOST, MIG and FLAGS)."""
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
FLAGS_COLUMN = _BY_KEY["flags"]
"""The real-work flags (cells.process_flags_cell), before COMMAND, while some process has a flag (most of the
time none has: an empty column would cost COMMAND 17 cells); not in the ``s`` cycle."""
MIG_COLUMN = _BY_KEY["mig"]
"""The MIG instance a process runs on (cells.process_instance_cell), after GPU, while some GPU of the snapshot
has MIG instances (a layout without MIG stays as it was); in the ``s`` cycle then, right after GPU."""
HOST_COLUMN = _BY_KEY["host"]
"""The host a process runs on (:func:`host_cell`), after GPU, while the snapshot spans other hosts (``--remote``,
``--prometheus``): a local table stays as it was. The GPU column keeps the global index (what ``g`` and the
panels use). In the ``s`` cycle then, right after GPU."""
WIDE_HOST_WIDTH = 24  # the widest HOST gets (an FQDN, host:port): longer names are cut with an ellipsis


def host_labels(gpus: Iterable[GpuState]) -> dict[int, str] | None:
    """``{global GPU index: "node2/3"}`` when some GPU is another host's (the HOST column is shown); None for
    a local snapshot (it is hidden). The labels are made safe for a terminal here (host names are outside text)."""
    labels = {gpu.index: label for gpu in gpus if (label := host_label(gpu.static)) is not None}
    return labels or None


def host_cell(process: GpuProcess, labels: Mapping[int, str]) -> Cell:
    """The HOST column: ``node2/3`` (its GPU's label in ``labels``, from :func:`host_labels`), else the process's
    own host (made safe); N/A (dim) for a process of no known host."""
    label = labels.get(process.gpu_index)
    if label is None and process.host is not None:
        label = safe_text(process.host)
    return (NA, DIM) if label is None else (label, REMOTE)


def group_host_cell(group: ProcessGroup, labels: Mapping[int, str]) -> Cell:
    """A group's HOST: its one GPU's label (group-by GPU), the host all its processes share, or how many hosts."""
    if len(group.gpus) == 1:
        return host_cell(group.members[0], labels)
    hosts = {p.host for p in group.members}
    if len(hosts) == 1:
        (host,) = hosts
        return (NA, DIM) if host is None else (safe_text(host), REMOTE)
    return (plural(len(hosts), "host"), DIM)


MIN_COMMAND_WIDTH = 25
"""COMMAND never gets fewer cells while another column can give way: the command is what names a job."""
# OWNER widens up to this on a wide terminal (``ns/pod`` names are long) while COMMAND keeps WIDE_COMMAND_WIDTH.
WIDE_OWNER_WIDTH = 32
WIDE_COMMAND_WIDTH = 60
GROUP_SM_TITLE = "SM%/GPU"
"""The SM column's title while the table is grouped: a group's SM% is its average per GPU
(:attr:`ProcessGroup.sm_percent`), and a process's is of its own GPU."""


def _fitted(column: Column, widest: int | None, most: int) -> Column:
    """``column`` as wide as its widest cell (``widest``; None: unknown, its default width), at least its title."""
    if widest is None:
        return column
    return dataclasses.replace(column, width=max(len(column.title), min(widest, most)))


def visible_columns(
    width: int,
    *,
    flags: bool = False,
    keep_flags: bool = False,
    mig: bool = False,
    chosen: Sequence[str] | None = None,
    hosts: bool | int = False,
    users: int | None = None,
    owners: int | None = None,
    grouped: bool = False,
) -> tuple[Column, ...]:
    """The columns that fit ``width`` cells, dropping low-priority ones while COMMAND would be narrower than
    :data:`MIN_COMMAND_WIDTH`: the command shrinks last.

    Dropped first: TYPE, then HOST-MEM, then OWNER, then FLAGS (when shown), TIME, CPU%, SM% and MIG (in
    that order), then USER, then HOST. ``flags``: show FLAGS (some process has a flag); ``keep_flags``:
    never drop it (the user filtered by flags); ``mig``: show MIG after GPU (some GPU has MIG instances);
    ``hosts``: show HOST after GPU (the snapshot spans other hosts); a number: as wide as that (its widest
    label, at most :data:`WIDE_HOST_WIDTH`). ``users``, ``owners``: the widest USER and OWNER cell of the
    rows (None: unknown): those columns are no wider than that, so a short name leaves its cells to
    COMMAND. OWNER is at most 11 cells wide on a narrow terminal and grows up to :data:`WIDE_OWNER_WIDTH`
    (or its widest cell) while COMMAND keeps :data:`WIDE_COMMAND_WIDTH` cells. ``grouped``: the rows are
    groups, SM% is titled :data:`GROUP_SM_TITLE`. ``chosen``: the user's columns in their order (the
    column chooser, ``columns`` in the config; None: :data:`~nvtopy.columns.COLUMN_IDS`); HOST, MIG and FLAGS among them
    still show only when there is something to show.
    """
    shown = {"host": bool(hosts), "mig": mig, "flags": flags or keep_flags}
    keys = COLUMN_IDS if chosen is None else chosen
    listed = (_BY_KEY[key] for key in keys if key in _BY_KEY)
    columns = [c for c in listed if c.shown_when is None or shown[c.shown_when]]
    if hosts is not True and hosts and HOST_COLUMN in columns:  # as wide as its widest label
        width_of_host = max(len(HOST_COLUMN.title), min(int(hosts), WIDE_HOST_WIDTH))
        columns[columns.index(HOST_COLUMN)] = dataclasses.replace(HOST_COLUMN, width=width_of_host)
    if keep_flags and FLAGS_COLUMN in columns:
        columns[columns.index(FLAGS_COLUMN)] = dataclasses.replace(FLAGS_COLUMN, priority=0)
    fitted: dict[str, Callable[[Column], Column]] = {
        "user": lambda c: _fitted(c, users, c.width),
        "owner": lambda c: _fitted(c, owners, c.width),
        "sm": lambda c: dataclasses.replace(c, title=GROUP_SM_TITLE, width=len(GROUP_SM_TITLE)) if grouped else c,
    }
    columns = [fitted[c.key](c) if c.key in fitted else c for c in columns]
    order = {c.key: i for i, c in enumerate(columns)}
    command = MIN_COMMAND_WIDTH if any(c.key == "command" for c in columns) else 0
    while True:
        fixed = sum(c.width + 1 for c in columns if c.key != "command")
        if width - fixed >= command:
            break
        droppable = [c for c in columns if c.priority > 0]
        if not droppable:
            break
        columns.remove(max(droppable, key=lambda c: (c.priority, order[c.key])))
    spare = width - fixed - (WIDE_COMMAND_WIDTH if command else 0)
    owner = next((c for c in columns if c.key == "owner"), None)
    if spare > 0 and owner is not None:
        most = WIDE_OWNER_WIDTH if owners is None else max(len(owner.title), min(owners, WIDE_OWNER_WIDTH))
        if most > owner.width:
            columns[columns.index(owner)] = dataclasses.replace(owner, width=min(most, owner.width + spare))
    return tuple(columns)


@dataclass(frozen=True, slots=True)
class SortOrder:
    """The process table's sort: a column and its direction."""

    column: str = "gpu"
    reverse: bool = False

    def cycle(self, step: int, *, mig: bool = False, hosts: bool = False) -> SortOrder:
        """The next (or previous) column, in its natural direction (from FLAGS: its neighbours, TIME and COMMAND).

        ``mig``: the MIG column is shown, and in the cycle after GPU (hidden, it is left where GPU's neighbour is);
        ``hosts``: so is HOST, right after GPU (before MIG).
        """
        keys = ("gpu", *(("host",) if hosts else ()), *(("mig",) if mig else ()), *COLUMN_KEYS[1:])
        if self.column in keys:
            index = keys.index(self.column) + step
        elif self.column in ("mig", "host"):  # shown no more: step on from where it stood, between GPU and PID
            index = keys.index("gpu") + (step if step > 0 else step + 1)
        else:  # FLAGS, which sits between TIME and COMMAND but is not in the cycle
            index = keys.index("command") + (step - 1 if step > 0 else step)
        key = keys[index % len(keys)]
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


FLAG_FILTERS: tuple[str | None, ...] = (None, "flagged", "idle-held", "suspected-hang")
"""What the flag filter cycles through: everything, any flag, then each flag (GpuProcess.flags)."""


@dataclass(frozen=True, slots=True)
class ProcessFilter:
    """What the user narrowed the table to. The empty filter shows everything."""

    text: str = ""
    mine_only: bool = False
    process_type: str | None = None  # "C" or "G"; C+G rows match both
    gpus: frozenset[int] | None = None  # None: every GPU of the snapshot
    flag: str | None = None  # FLAG_FILTERS: "flagged" (any flag), "idle-held", "suspected-hang"
    # MIG instances chosen (the GPU picker): a GPU one of them is on shows only those; other GPUs are whole.
    instances: ChosenInstances = frozenset()

    def __post_init__(self) -> None:
        # Keys given as plain ``(gpu, gi, ci)`` tuples become MigKeys (equal to them, and they read as keys).
        object.__setattr__(self, "instances", frozenset(MigKey(*key) for key in self.instances))

    @property
    def active(self) -> bool:
        return bool(
            self.text or self.mine_only or self.process_type or self.gpus is not None or self.flag or self.instances
        )

    def instances_of(self, gpu_index: int) -> ChosenInstances | None:
        """The instances GPU ``gpu_index`` is narrowed to; None: the whole GPU."""
        keys = frozenset(key for key in self.instances if key.gpu_index == gpu_index)
        return keys or None

    def shows_gpu(self, gpu_index: int) -> bool:
        return self.gpus is None or gpu_index in self.gpus

    def limit(self, gpu: GpuState) -> GpuState:
        """``gpu`` as the views show it: narrowed to the chosen instances (their readings and processes), if any.

        The GPU's own readings (memory, temperature, power, health) stay: the instances share the board.
        """
        keys = self.instances_of(gpu.index)
        return gpu if keys is None else narrow_to_instances(gpu, keys)

    def replace(self, **changes: Any) -> ProcessFilter:
        return dataclasses.replace(self, **changes)

    def describe(self) -> list[str]:
        """Short labels for the header, e.g. ``['"train"', 'mine', 'type C', 'GPUs 0,2', 'idle-held']``."""
        labels = []
        if self.text:
            labels.append(f'"{safe_text(self.text)}"')  # typed or pasted: shown in the header
        if self.mine_only:
            labels.append("mine")
        if self.process_type:
            labels.append(f"type {self.process_type}")
        narrowed = {key.gpu_index for key in self.instances}
        whole = None if self.gpus is None else sorted(self.gpus - narrowed)
        if whole is not None and (whole or not narrowed):  # a narrowed GPU is named by its instances
            labels.append("GPUs " + (",".join(str(i) for i in whole) or "none"))
        if self.instances:
            labels.append("MIG " + ",".join(key.label for key in sorted(self.instances, key=lambda key: key.order)))
        if self.flag:
            labels.append(self.flag)
        return labels

    def matches(self, process: GpuProcess, me: str | None) -> bool:
        if self.gpus is not None and process.gpu_index not in self.gpus:
            return False
        if self.instances:
            keys = self.instances_of(process.gpu_index)
            if keys is not None and not any(key.runs(process) for key in keys):
                return False
        if self.flag and not (process.flags if self.flag == "flagged" else self.flag in process.flags):
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
                or _owner_matches(process, needle)
                or needle in (process.instance_label or "")
                or needle in (process.host or "").lower()
            ):
                return False
        return True


def _owner_matches(process: GpuProcess, needle: str) -> bool:
    """The filter text in the owner's label or names (namespace, pod, container, job, ...)."""
    owner = process.owner
    if owner is None:
        return False
    words = (owner.label, owner.name, owner.namespace, owner.pod, owner.container, owner.job, owner.project)
    return any(needle in word.lower() for word in words if word)


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


# ----------------------------------------------------------------- group-by

GROUP_MODES: tuple[str | None, ...] = (None, "user", "owner", "gpu", "host")
GROUP_TITLES = {"user": "user", "owner": "owner", "gpu": "GPU", "host": "host"}
HOST_GROUPING = "host"
"""The group mode that only means something when the table spans hosts (``--remote``, ``--prometheus``): the
``b`` key skips it otherwise."""


def group_value(process: GpuProcess, mode: str) -> str | int | None:
    """The value ``process`` is grouped by: its user, its owner's label, its GPU, or its host (None: unknown;
    for the host, this machine's own processes)."""
    if mode == "user":
        return "?" if process.foreign else process.user
    if mode == "owner":
        return owner_label(process)
    if mode == HOST_GROUPING:
        return process.host
    return process.gpu_index


def _total(values: Iterable[float | int | None]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _per_gpu(members: Sequence[GpuProcess]) -> int | None:
    """The SM% of ``members`` summed per GPU, averaged over the GPUs that have a figure; None: none has."""
    per_gpu: dict[int, int] = {}
    for p in members:
        if p.sm_percent is not None:
            per_gpu[p.gpu_index] = per_gpu.get(p.gpu_index, 0) + p.sm_percent
    return round(sum(per_gpu.values()) / len(per_gpu)) if per_gpu else None


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """Processes folded into one row of the table (group-by), with their totals.

    A process on two GPUs is two rows of the snapshot but one process: ``processes``,
    CPU and host memory count it once; GPU memory adds up per GPU. SM% is the average per GPU
    of the group (what its processes use of each of its GPUs' SMs, 0-100 %): a sum over several
    GPUs (209 %) reads as nothing.
    """

    mode: str  # "user", "owner", "gpu" or "host"
    value: str | int | None  # what its processes share (None: unknown)
    members: tuple[GpuProcess, ...]  # one entry per (GPU, process), in table order
    gpus: tuple[int, ...]
    processes: int
    gpu_memory_bytes: int | None
    sm_percent: int | None  # the average per GPU (of its GPUs), rounded
    cpu_percent: float | None
    host_memory_bytes: int | None
    running_seconds: float | None  # the longest

    @classmethod
    def of(cls, mode: str, value: str | int | None, members: Iterable[GpuProcess]) -> ProcessGroup:
        members = tuple(members)
        unique = {(p.host, p.pid, p.create_time): p for p in members}.values()  # pids repeat across hosts
        return cls(
            mode=mode,
            value=value,
            members=members,
            gpus=tuple(sorted({p.gpu_index for p in members})),
            processes=len(unique),
            gpu_memory_bytes=_total(p.gpu_memory_bytes for p in members),
            sm_percent=_per_gpu(members),
            cpu_percent=_total(p.cpu_percent for p in unique),
            host_memory_bytes=_total(p.host_memory_bytes for p in unique),
            running_seconds=max((p.running_seconds for p in members if p.running_seconds is not None), default=None),
        )

    @property
    def key(self) -> tuple[str, str, str | int | None]:
        """Stable identity across refreshes (the cursor follows it): the mode and the shared value."""
        return ("group", self.mode, self.value)

    @property
    def label(self) -> str:
        """The shared value in words (unescaped): ``alice``, ``ns/pod``, ``GPU 3``, ``node2:9400``; N/A when
        unknown ("this host" for the local machine's processes)."""
        if self.value is None:
            return "this host" if self.mode == HOST_GROUPING else "N/A"
        return f"GPU {self.value}" if self.mode == "gpu" else str(self.value)

    def targets(self) -> list[GpuProcess]:
        """Its processes, one entry each (a process on two GPUs is signalled once)."""
        return list({(p.host, p.pid, p.create_time): p for p in self.members}.values())

    def shared(self, column: str) -> Any:
        """The value every member has in ``column`` (user, owner, type), else None."""
        values = {_BY_KEY[column].value(p) for p in self.members}
        return values.pop() if len(values) == 1 else None


def _group_sort_value(group: ProcessGroup, column: str) -> Any:
    """What a group sorts by in ``column``: the totals (processes for PID, its GPUs for GPU)."""
    if column == "gpu":
        return group.gpus or None
    if column == "pid":
        return group.processes
    if column == "user":
        return group.value if group.mode == "user" else group.shared("user")
    if column == "owner":
        return group.value if group.mode == "owner" else group.shared("owner")
    if column == "type":
        return group.shared("type")
    if column == "command":
        return group.label.lower() if group.value is not None else None
    if column == "flags":
        return sum(1 for p in group.members if p.flags) or None
    if column == "mig":
        return group.shared("mig")
    if column == "host":
        hosts = {p.host for p in group.members}
        return (hosts.pop(), min(group.gpus)) if len(hosts) == 1 and None not in hosts else None
    return {
        "gpu_memory": group.gpu_memory_bytes,
        "sm": group.sm_percent,
        "cpu": group.cpu_percent,
        "host_memory": group.host_memory_bytes,
        "time": group.running_seconds,
    }[column]


def build_groups(rows: Iterable[GpuProcess], mode: str, order: SortOrder) -> list[ProcessGroup]:
    """Fold ``rows`` (already filtered and sorted) into groups, sorted like rows by their totals.

    Ties break by GPU memory (biggest first), then by the shared value; None sorts last.
    """
    folded: dict[str | int | None, list[GpuProcess]] = {}
    for process in rows:
        folded.setdefault(group_value(process, mode), []).append(process)
    groups = [ProcessGroup.of(mode, value, members) for value, members in folded.items()]
    groups.sort(key=lambda g: (g.value is None, str(g.value) if mode != "gpu" else g.value or 0))
    groups.sort(key=lambda g: -(g.gpu_memory_bytes or 0))
    present = [g for g in groups if _group_sort_value(g, order.column) is not None]
    missing = [g for g in groups if _group_sort_value(g, order.column) is None]
    present.sort(key=lambda g: _group_sort_value(g, order.column), reverse=order.reverse)
    return present + missing
