"""The data model every view reads: immutable, typed snapshots of GPUs and their processes.

Why frozen dataclasses: a snapshot is built on the poller thread and read on the
UI thread (and by exporters, loggers and the Python API) without locks. Nothing
in it can change after it is published, so any reader may keep a reference.

Why ``None`` plus a reason map instead of sentinel values: every NVML field can
fail on its own (not supported on this board, no permission, GPU lost, ...).
A missing value is ``None`` -- never 0, which would be a lie -- and
``unavailable[field]`` says why, so views can print "N/A" and a tooltip, JSON
can print ``null``, and one failing field never hides another.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, TypeVar

from .history import SampleRing
from .ranges import FIELD_RANGES
from .records import dataclass, field

__all__ = [
    "EMPTY_REASONS",
    "HISTORY_LENGTH",
    "GpuHistory",
    "GpuProcess",
    "GpuSample",
    "GpuState",
    "GpuStatic",
    "HistoryBuffer",
    "HostInfo",
    "HostProcess",
    "HostUsage",
    "ProcessType",
    "RawGpuProcess",
    "Reason",
    "Snapshot",
    "fast_constructor",
    "freeze",
]


class Reason(str, enum.Enum):
    """Why a value is missing. The string values appear in JSON output."""

    NOT_SUPPORTED = "not_supported"
    NO_PERMISSION = "no_permission"
    LOST = "lost"
    UNKNOWN = "unknown"
    NOT_AVAILABLE = "not_available"  # the driver answered "N/A" (e.g. per-process memory under MIG/WDDM)
    NOT_RESPONDING = "not_responding"  # a driver call on this GPU is stuck: nothing read yet (nvtopy.sources.workers)
    NOT_VISIBLE = "not_visible"  # NVML lists the pid, this PID namespace has no such process: nothing to read
    OUT_OF_RANGE = "out_of_range"  # NaN, infinite, negative or past what any GPU can have (nvtopy.ranges)

    def __str__(self) -> str:  # "not supported" reads better in a UI than the enum repr
        return self.value.replace("_", " ")


Reasons = Mapping[str, Reason]
EMPTY_REASONS: Reasons = MappingProxyType({})


class _Repr:
    """One ``__repr__`` for every model class.

    Why: ``@dataclass`` compiles a repr per class at import time, which made
    ``import nvtopy.model`` the largest cost of ``nvtopy --once``; this one reads
    the dataclass fields when called instead.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__)  # type: ignore[attr-defined]
        return f"{type(self).__name__}({fields})"


class _Ranged(_Repr):
    """Readings that hold to :mod:`nvtopy.ranges`: a value outside its field's range is ``None``, and why.

    Why here, when the object is built: values come from the driver, the simulation,
    recordings and other hosts, and every one of those must follow the same rule (N/A
    with the reason ``out_of_range``; never clamped, never 0, never an OverflowError
    further on). Checked once per object, so no entry point can forget it. A class
    with an ``unavailable`` map gets the reason there; :class:`NvLink` has none (its
    ``None`` says "not readable").
    """

    __slots__ = ()

    def __post_init__(self) -> None:
        # Every reading built comes here: first the class's straight-line check (one compiled expression, no
        # loop, no getattr call: GpuProcess's 14 ranged fields 1.6 -> 0.4 us); only a value out of its range
        # (or not a number) goes on to the per-field check below, which names it and says why. The check is
        # compiled at a class's RANGE_CHECK_COMPILED_AT-th object: compiling costs as much as a few hundred
        # objects' per-field checks (GpuSample's 0.8 ms, about 400 of its 2 us checks), and a one-shot
        # builds 8 GpuSamples and GpuStatics; until then the per-field check alone, which is the rule itself.
        cls = type(self)
        fits = _IN_RANGE.get(cls)
        if fits is None:
            seen = _UNCOMPILED_SEEN[cls] = _UNCOMPILED_SEEN.get(cls, 0) + 1
            if seen < RANGE_CHECK_COMPILED_AT:
                self._mark_out_of_range()
                return
            fits = _IN_RANGE[cls] = _make_range_check(cls)
        if fits(self):
            return
        self._mark_out_of_range()

    def _mark_out_of_range(self) -> None:
        """The per-field check: each value out of its range ``None``, with the reason ``out_of_range``."""
        # nvtopy.ranges.fits, inlined: this runs for every reading built (~2 us for a GpuSample's 43 fields).
        bad: list[str] | None = None
        for name, low, high in _ranged_fields(type(self)):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                if low <= value <= high:  # NaN and the infinities fail this
                    continue
            except TypeError:  # not a number at all
                pass
            if bad is None:
                bad = []
            bad.append(name)
        if bad is None:
            return
        for name in bad:
            object.__setattr__(self, name, None)
        reasons = getattr(self, "unavailable", None)
        if reasons is not None:
            object.__setattr__(self, "unavailable", freeze({**reasons, **dict.fromkeys(bad, Reason.OUT_OF_RANGE)}))


_RANGED_FIELDS: dict[type, tuple[tuple[str, int, int], ...]] = {}
_IN_RANGE: dict[type, Callable[[Any], bool]] = {}
_UNCOMPILED_SEEN: dict[type, int] = {}  # objects of a class checked field by field before its check is compiled
RANGE_CHECK_COMPILED_AT = 200  # a class's straight-line range check is compiled at its 200th object (__post_init__)


def _make_range_check(cls: type) -> Callable[[Any], bool]:
    """``obj`` of ``cls`` -> whether every ranged field is ``None`` or ``low <= value <= high`` (made once per class).

    The same test as :meth:`_Ranged._mark_out_of_range`, written out per field with the bounds as literals;
    a value that is not a number at all (TypeError) counts as not fitting, so the per-field check decides.
    """
    checks = [f"((v := obj.{name}) is None or {low!r} <= v <= {high!r})" for name, low, high in _ranged_fields(cls)]
    source = "\n".join(
        [
            "def fits(obj):",
            "    try:",
            f"        return {' and '.join(checks) or 'True'}",
            "    except TypeError:  # not a number at all",
            "        return False",
        ]
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<range check of {cls.__name__}>", "exec"), namespace)
    made: Callable[[Any], bool] = namespace["fits"]
    return made


def _ranged_fields(cls: type) -> tuple[tuple[str, int, int], ...]:
    """(field, lowest, highest) for each field of ``cls`` that has a range (worked out once per class)."""
    fields = _RANGED_FIELDS.get(cls)
    if fields is None:
        names = cls.__dataclass_fields__  # type: ignore[attr-defined]
        fields = _RANGED_FIELDS[cls] = tuple((name, *FIELD_RANGES[name]) for name in names if name in FIELD_RANGES)
    return fields


_T = TypeVar("_T")


def fast_constructor(cls: type[_T]) -> Callable[..., _T]:
    """``cls(*values)`` -- every field, in the dataclass's order -- built without the dataclass ``__init__``.

    Why: ``nvtopy --ssh`` builds a GpuSample, a GpuProcess and NvLinks for every GPU, process and
    link of 64 hosts a second, and a frozen dataclass's ``__init__`` (an ``object.__setattr__`` per
    field) with :class:`_Ranged`'s generic check costs 12-26 us an object: most of a refresh. The
    constructor made here fills a twin of the class (the same slots, no frozen ``__setattr__``) by
    plain assignments, then makes it the class itself (``__class__``: the layouts are the same), and
    checks every ranged field first in straight-line code (``None``, or ``low <= value <= high``, as
    ``__post_init__`` checks it). Validation is not skipped: a call with a value outside its range
    (NaN, an infinity, a negative, a huge figure, not a number) goes to ``cls(*values)`` itself, whose
    ``__post_init__`` makes it ``None`` with the reason ``out_of_range``. So the object is always the
    one ``cls(*values)`` builds, only faster (GpuSample 22 -> 3 us). Made once per class.
    """
    made = _FAST.get(cls)
    if made is None:
        made = _FAST[cls] = _make_fast_constructor(cls)
    return made


_FAST: dict[type, Callable[..., Any]] = {}


def _fast_fields(cls: type) -> tuple[str, ...]:
    """``cls``'s fields, where a fast constructor or replacer may build it; else TypeError (what either would skip)."""
    names = tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    if getattr(cls, "__slots__", None) != names or len(cls.__bases__) != 1:
        raise TypeError(f"{cls.__name__}: a fast constructor needs a slotted dataclass of one base")
    post_init = getattr(cls, "__post_init__", None)
    if post_init is not None and post_init is not _Ranged.__post_init__:  # work this would skip: refused
        raise TypeError(f"{cls.__name__}: a fast constructor checks the ranges only, not another __post_init__")
    return names


def _make_fast_constructor(cls: type[_T]) -> Callable[..., _T]:
    names = _fast_fields(cls)
    twin = type(f"_{cls.__name__}Twin", cls.__bases__, {"__slots__": names})  # settable; the same layout
    arguments = ", ".join(f"a{n}" for n in range(len(names)))
    ranged = _ranged_fields(cls) if issubclass(cls, _Ranged) else ()
    # int bounds written as literals: constants, not look-ups; NaN and the infinities fail these comparisons
    checks = [f"(a{n} is None or {low!r} <= a{n} <= {high!r})" for n, low, high in _positions(names, ranged)]
    source = "\n".join(
        [
            f"def make({arguments}):",
            "    try:",
            f"        fits = {' and '.join(checks) or 'True'}",
            "    except TypeError:  # not a number at all",
            "        fits = False",
            "    if not fits:  # the checked constructor: each value out of range None, and why",
            f"        return cls({arguments})",
            "    self = new(twin)",
            *(f"    self.{name} = a{n}" for n, name in enumerate(names)),
            "    self.__class__ = cls",
            "    return self",
        ]
    )
    namespace: dict[str, Any] = {"cls": cls, "twin": twin, "new": object.__new__}
    exec(compile(source, f"<fast constructor of {cls.__name__}>", "exec"), namespace)
    make: Callable[..., _T] = namespace["make"]
    return make


def fast_replacer(cls: type[_T]) -> Callable[[_T, dict[str, Any]], _T]:
    """``dataclasses.replace(old, **changes)`` for an object of ``cls``, without the dataclass ``__init__``.

    Why: ``nvtopy --ssh`` patches a few figures (CPU %, memory, running time) of some 1,200
    processes of 64 hosts a second; a GpuProcess has 31 fields, and reading them all out to
    build it again (:func:`fast_constructor`) cost 6 us a process. Made here: the twin (as in
    :func:`fast_constructor`) takes each slot of ``old`` in straight-line code, then the changes;
    only the changed values are checked against their ranges, since ``old``'s own values are
    already in range (or ``None``: its constructor saw to that). A changed value out of its range
    goes to ``cls(...)`` itself, as ``dataclasses.replace`` does: ``None`` and the reason. ``changes``
    must name fields of ``cls`` (an unknown name is an AttributeError). Made once per class; for each
    set of changed fields seen (a far side's process patches use a few: memory, SM %, CPU %, running
    time), straight-line code that reads and checks each changed value once, without a loop.
    """
    made = _REPLACERS.get(cls)
    if made is None:
        made = _REPLACERS[cls] = _make_fast_replacer(cls)
    return made


_REPLACERS: dict[type, Callable[..., Any]] = {}


def _make_fast_replacer(cls: type[_T]) -> Callable[[_T, dict[str, Any]], _T]:
    names = _fast_fields(cls)  # the same refusals: a slotted dataclass of one base whose only work is the range rule
    twin = type(f"_{cls.__name__}Twin", cls.__bases__, {"__slots__": names})
    ranged = {name: (low, high) for name, low, high in (_ranged_fields(cls) if issubclass(cls, _Ranged) else ())}
    source = "\n".join(
        [
            "def replace(old, changes):",
            "    self = new(twin)",
            *(f"    self.{name} = old.{name}" for name in names),
            "    for name, value in changes.items():",
            "        bounds = ranged.get(name)",
            "        if bounds is not None and value is not None:",
            "            try:",
            "                fits = bounds[0] <= value <= bounds[1]",
            "            except TypeError:  # not a number at all",
            "                fits = False",
            "            if not fits:  # the checked constructor: the value None, and why",
            "                values = {n: getattr(old, n) for n in names if fields[n].init}",
            "                values.update((n, v) for n, v in changes.items() if fields[n].init)",
            "                return cls(**values)",
            "        setattr(self, name, value)",
            "    self.__class__ = cls",
            "    return self",
        ]
    )
    namespace: dict[str, Any] = {
        "cls": cls,
        "twin": twin,
        "new": object.__new__,
        "ranged": ranged,
        "names": names,
        "fields": cls.__dataclass_fields__,  # type: ignore[attr-defined]
        "getattr": getattr,
        "setattr": setattr,
    }
    compiled: list[Callable[[_T, dict[str, Any]], _T]] = []

    def generic(old: _T, changes: dict[str, Any]) -> _T:
        """The replacer of any changed fields: compiled when first needed (a value out of range, a key set past
        :data:`_SPECIAL_KEY_SETS`, an unknown name), since most runs never need it and a one-shot would pay its
        compile (0.3 ms) for nothing."""
        if not compiled:
            exec(compile(source, f"<fast replacer of {cls.__name__}>", "exec"), namespace)
            compiled.append(namespace["replace"])
        return compiled[0](old, changes)

    fields = frozenset(names)
    special: dict[tuple[str, ...], Callable[[_T, dict[str, Any]], _T]] = {}

    def specialised(keys: tuple[str, ...]) -> Callable[[_T, dict[str, Any]], _T]:
        """The replacer of these changed fields, in straight-line code: each changed value read and range-checked
        once, every other slot copied; a value out of its range goes to the generic replacer (``cls(...)``'s None
        and reason). Unknown names, or more key sets than :data:`_SPECIAL_KEY_SETS`: the generic one, as it is."""
        if not fields.issuperset(keys) or len(special) >= _SPECIAL_KEY_SETS:
            return generic
        checks = [
            f"(v{n} is None or {ranged[name][0]!r} <= v{n} <= {ranged[name][1]!r})"
            for n, name in enumerate(keys)
            if name in ranged
        ]
        code = "\n".join(
            [
                "def replace(old, changes):",
                *(f"    v{n} = changes[{name!r}]" for n, name in enumerate(keys)),
                "    try:",
                f"        fits = {' and '.join(checks) or 'True'}",
                "    except TypeError:  # not a number at all",
                "        fits = False",
                "    if not fits:",
                "        return generic(old, changes)",
                "    self = new(twin)",
                *(f"    self.{name} = old.{name}" for name in names if name not in keys),
                *(f"    self.{name} = v{n}" for n, name in enumerate(keys)),
                "    self.__class__ = cls",
                "    return self",
            ]
        )
        scope: dict[str, Any] = {"cls": cls, "twin": twin, "new": object.__new__, "generic": generic}
        exec(compile(code, f"<fast replacer of {cls.__name__}: {', '.join(keys)}>", "exec"), scope)
        made: Callable[[_T, dict[str, Any]], _T] = special.setdefault(keys, scope["replace"])
        return made

    def replace(old: _T, changes: dict[str, Any]) -> _T:
        keys = tuple(changes)
        made = special.get(keys)
        if made is None:
            made = specialised(keys)
        return made(old, changes)

    return replace


_SPECIAL_KEY_SETS = 64
"""Changed-field sets a replacer keeps straight-line code for (a far side's process patches use a handful)."""


def _positions(names: tuple[str, ...], ranged: tuple[tuple[str, int, int], ...]) -> list[tuple[int, int, int]]:
    return [(names.index(name), low, high) for name, low, high in ranged]


def freeze(mapping: Mapping[str, Reason] | None) -> Reasons:
    """Return a read-only view of ``mapping`` (shared empty view when there is nothing)."""
    if not mapping:
        return EMPTY_REASONS
    return MappingProxyType(dict(mapping))


class ProcessType(str, enum.Enum):
    """Which NVML process list(s) a pid appeared in on one GPU."""

    COMPUTE = "C"
    GRAPHICS = "G"
    BOTH = "C+G"
    MPS = "M"  # a client of the MPS server (CUDA Multi-Process Service): a compute process

    def __str__(self) -> str:
        return self.value

    def merge(self, other: ProcessType) -> ProcessType:
        """A pid that is in both lists of one GPU is one row of type C+G; an MPS client stays M."""
        if self is other:
            return self
        if ProcessType.MPS in (self, other):
            return ProcessType.MPS
        return ProcessType.BOTH


@dataclass(frozen=True, slots=True, repr=False)
class HostInfo(_Repr):
    """Per-host facts, read once per backend."""

    hostname: str
    driver_version: str | None
    cuda_driver_version: str | None  # "12.4", from NVML's integer 12040
    nvml_version: str | None = None
    backend: str = "nvml"  # "nvml" or "simulated"
    user: str | None = None  # the user nvtopy runs as: views highlight their processes
    pid_namespace_foreign: bool = False  # NVML pids cannot be resolved here (container without --pid=host)
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)


@dataclass(frozen=True, slots=True, repr=False)
class HostUsage(_Ranged):
    """The host's CPU, load, memory and swap at one poll: the line a top-like tool shows above its GPUs.

    Why apart from :class:`HostInfo`: that is read once, this every poll. Each figure can
    fail on its own (no ``/proc/loadavg`` in a sandbox, no swap readable): ``None`` and
    why in ``unavailable``. ``ram_used_bytes`` is total minus *available* (what the
    kernel could not hand out without swapping: the pressure a user asks about), not
    psutil's ``used``, which leaves the reclaimable caches out and hides pressure.
    """

    cpu_busy_percent: float | None = None  # every CPU together, since the previous poll
    cpu_count: int | None = None  # logical CPUs: what the load figures compare with
    load_1m: float | None = None
    load_5m: float | None = None
    load_15m: float | None = None
    ram_total_bytes: int | None = None
    ram_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)


@dataclass(frozen=True, slots=True, repr=False)
class GpuStatic(_Ranged):
    """Fields that never change while the driver is loaded: read once, cached by the poller."""

    index: int
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None  # NVML form: 00000000:3B:00.0
    serial: str | None = None
    memory_total_bytes: int | None = None
    power_default_limit_w: float | None = None
    power_min_limit_w: float | None = None
    power_max_limit_w: float | None = None
    temperature_slowdown_c: int | None = None
    temperature_shutdown_c: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    compute_capability: str | None = None  # "9.0"
    # Windows only (NVML answers "not supported" on Linux): "WDDM" (per-process memory N/A), "TCC" or "MCDM".
    driver_model: str | None = None
    # "none" (bare metal), "passthrough", "vgpu" (a guest: the host owns its sensors), "host_vgpu", "host_vsga".
    virtualization_mode: str | None = None
    mig_mode: bool | None = None  # MIG mode in force now
    mig_mode_pending: bool | None = None  # the mode after the next GPU reset: differs from mig_mode until then
    mig_instances: tuple[MigInstance, ...] = ()  # the MIG devices configured on it, by MIG device index
    fan_count: int | None = None
    pcie_link_gen_max: int | None = None  # the link the GPU and its slot can reach: a lower current link is a downgrade
    pcie_link_width_max: int | None = None
    nvlink_count: int | None = None  # NVLinks the board has (0: none); per-link state is read in the "nvlink" group
    host: str | None = None  # set when the GPU belongs to another host (nvtopy --remote)
    host_index: int | None = None  # its index on that host
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)

    @property
    def mig_devices(self) -> tuple[str, ...]:
        """UUIDs of its MIG devices (``MIG-...``): what CUDA_VISIBLE_DEVICES names."""
        return tuple(m.uuid for m in self.mig_instances if m.uuid)

    @property
    def mig_pending_change(self) -> bool:
        """MIG mode changes at the next GPU reset (an admin switched it; nothing happens until then)."""
        return (
            self.mig_mode is not None and self.mig_mode_pending is not None and self.mig_mode != self.mig_mode_pending
        )

    @property
    def short_bus_id(self) -> str | None:
        """``3B:00.0`` -- what users read and type; the full form stays in ``bus_id``.

        A PCI domain other than 0 is kept, as lspci writes it (``0008:06:00.0``): Azure VMs put each
        GPU at ``00:00.0`` of a domain of its own and GB200/GB300 trays repeat bus ``06`` in four
        domains, so without it every GPU of those machines reads the same."""
        if self.bus_id is None:
            return None
        parts = self.bus_id.split(":")
        if len(parts) < 2:
            return self.bus_id
        domain = parts[-3].lstrip("0") if len(parts) >= 3 else ""
        return ":".join([domain.zfill(4)] * bool(domain) + parts[-2:])


STATIC_FIELDS: tuple[str, ...] = tuple(
    name
    for name in GpuStatic.__dataclass_fields__
    if name not in ("index", "mig_instances", "unavailable", "host", "host_index")
)

GPM_PERCENT_FIELDS: tuple[str, ...] = (
    "graphics_active_percent",  # time any graphics/compute engine was active (GPU-Util's meaning, measured)
    "sm_active_percent",  # SMs busy: a GPU at 100 % util and 5 % SM active computes almost nothing
    "sm_occupancy_percent",  # resident warps against the maximum
    "tensor_active_percent",  # tensor pipes (any precision) busy
    "dram_active_percent",  # DRAM bandwidth used against the maximum
    "fp64_active_percent",  # non-tensor FP64 / FP32 / FP16 pipes busy
    "fp32_active_percent",
    "fp16_active_percent",
    "decoder_active_percent",  # the mean over the GPU's video decoders (NVDEC)
)
GPM_RATE_FIELDS: tuple[str, ...] = (
    "gpm_pcie_rx_bytes_per_s",  # measured by GPM over the interval (bytes/s)
    "gpm_pcie_tx_bytes_per_s",
    "gpm_nvlink_rx_bytes_per_s",
    "gpm_nvlink_tx_bytes_per_s",
)
GPM_FIELDS: tuple[str, ...] = GPM_PERCENT_FIELDS + GPM_RATE_FIELDS
MIG_GPM_FIELDS: tuple[str, ...] = (
    "graphics_active_percent",
    "sm_active_percent",
    "sm_occupancy_percent",
    "tensor_active_percent",
    "dram_active_percent",
)
"""What a MIG instance reports of its own activity (``nvmlGpmMigSampleGet``)."""

# Dynamic fields, grouped by the NVML calls that fill them. The poller reads
# each group at its own cadence (fast every tick, slow every few seconds) and
# keeps the last value of a group between reads.
SAMPLE_GROUPS: dict[str, tuple[str, ...]] = {
    "memory": ("memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes"),
    "utilization": ("utilization_gpu_percent", "utilization_memory_percent"),
    "codec": ("encoder_percent", "decoder_percent"),
    "temperature": ("temperature_c",),
    "fan": ("fan_percent",),
    "power": ("power_draw_w",),
    "power_limit": ("power_limit_w",),
    "energy": ("energy_mj",),
    "pstate": ("pstate",),
    "clocks": ("clock_sm_mhz", "clock_mem_mhz"),
    "ecc": (
        "ecc_mode",
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
    ),
    "throttle": ("throttle_reasons",),
    "pcie": ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"),
    "modes": ("persistence_mode", "compute_mode"),
    # Health readings (nvtopy.health): they change rarely and are read at a slow cadence.
    "remapped_rows": (
        "remapped_rows_corrected",
        "remapped_rows_uncorrected",
        "remapped_rows_pending",
        "remapped_rows_failure",
    ),
    "retired_pages": ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"),
    "pcie_link": ("pcie_link_gen", "pcie_link_width", "pcie_replay_counter"),
    "nvlink": ("nvlinks", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s"),
    # Per MIG instance (a MIG-enabled GPU; () elsewhere): memory, read through each MIG device's handle.
    "mig": ("mig_usage",),
    # GPU Performance Monitoring (Hopper and newer): how much of the GPU really works, averaged
    # over the interval between two GPM samples (the figures of DCGM's profiling fields, without DCGM).
    "gpm": GPM_FIELDS,
}
HEALTH_GROUPS: frozenset[str] = frozenset({"remapped_rows", "retired_pages", "pcie_link", "nvlink"})
ALL_GROUPS: frozenset[str] = frozenset(SAMPLE_GROUPS)
SAMPLE_FIELDS: tuple[str, ...] = tuple(f for fields in SAMPLE_GROUPS.values() for f in fields)
GROUP_OF_FIELD: dict[str, str] = {f: g for g, fields in SAMPLE_GROUPS.items() for f in fields}


@dataclass(frozen=True, slots=True, repr=False)
class NvLink(_Ranged):
    """One NVLink of a GPU, as its last health reading saw it. ``None``: not readable."""

    link: int
    active: bool | None = None
    version: int | None = None
    rx_bytes_per_s: int | None = None  # data payload; None until two readings give a rate
    tx_bytes_per_s: int | None = None
    errors: int | None = None  # CRC, replay and recovery errors since driver load, summed over kinds
    remote: str | None = None  # the PCI bus id of what the link reaches (peer GPU or NVSwitch), outside text


class OnMigInstance(Protocol):
    """What the "runs on a MIG instance" rule reads of a process: a GpuProcess, a raw one, or the API's view."""

    @property
    def gpu_instance_id(self) -> int | None: ...

    @property
    def compute_instance_id(self) -> int | None: ...


@dataclass(frozen=True, slots=True, repr=False)
class MigInstance(_Repr):
    """One MIG device of a GPU: a compute instance inside a GPU instance, as an admin configured it.

    Read with the GPU's static fields: instances change only when an admin
    reconfigures MIG, which needs the GPU idle (nvtopy reads them again when it
    restarts, as nvidia-smi does per call). ``None``: that value was not readable.
    """

    index: int  # NVML's MIG device index on its GPU (nvidia-smi's "MIG dev")
    uuid: str | None = None  # MIG-...: what CUDA_VISIBLE_DEVICES and --gpus take
    gpu_instance_id: int | None = None  # GI: processes carry it
    compute_instance_id: int | None = None  # CI, within its GPU instance
    profile: str | None = None  # "3g.40gb"; "1c.3g.40gb" for a compute instance smaller than its GPU instance
    memory_total_bytes: int | None = None
    sm_count: int | None = None  # streaming multiprocessors the instance computes with
    slices: int | None = None  # GPU-instance slices (a full GPU has 7)
    copy_engines: int | None = None
    encoders: int | None = None
    decoders: int | None = None
    jpeg_decoders: int | None = None
    ofa: int | None = None  # optical-flow accelerators
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)

    def key(self, gpu_index: int) -> MigKey:
        """This instance on GPU ``gpu_index`` as processes name it (:class:`MigKey`)."""
        return MigKey(gpu_index, self.gpu_instance_id, self.compute_instance_id)

    def label(self, gpu_index: int) -> str:
        """``0/1/0``: GPU, GPU instance, compute instance (:attr:`MigKey.label`)."""
        return self.key(gpu_index).label

    def runs(self, process: OnMigInstance) -> bool:
        """Whether ``process`` runs on this instance (NVML names the GPU and compute instance of each process)."""
        return _runs_on(self.gpu_instance_id, self.compute_instance_id, process)


class MigKey(NamedTuple):
    """A MIG instance as processes name it: its GPU's index, its GPU instance id, its compute instance id.

    The one identity of a chosen instance (``--gpus MIG-...`` once its UUID is matched, the TUI's GPU
    picker; :data:`nvtopy.selection.ChosenInstances`). Why ids and not the instance's UUID or NVML
    index: processes carry GPU and compute instance ids, so a process is matched without the GPU's
    static fields, and the key reads as the MIG column does (``1/2/0``). None: not readable -- an
    unknown GPU instance runs no process, an unknown compute instance any of its GPU instance's.
    """

    gpu_index: int
    gpu_instance_id: int | None
    compute_instance_id: int | None

    @property
    def label(self) -> str:
        """``0/1/0``: GPU, GPU instance, compute instance (nvidia-smi's columns), ``?`` where unknown."""
        gi = "?" if self.gpu_instance_id is None else self.gpu_instance_id
        ci = "?" if self.compute_instance_id is None else self.compute_instance_id
        return f"{self.gpu_index}/{gi}/{ci}"

    @property
    def order(self) -> tuple[int, int, int]:
        """What keys sort by: GPU, GI, CI as numbers (``1/10/0`` after ``1/2/0``), an unknown id first."""
        gi = -1 if self.gpu_instance_id is None else self.gpu_instance_id
        return (self.gpu_index, gi, -1 if self.compute_instance_id is None else self.compute_instance_id)

    def runs(self, process: GpuProcess) -> bool:
        """Whether ``process`` runs on this instance (its GPU, then :meth:`MigInstance.runs`'s rule)."""
        return process.gpu_index == self.gpu_index and _runs_on(self.gpu_instance_id, self.compute_instance_id, process)


def _runs_on(gpu_instance_id: int | None, compute_instance_id: int | None, process: OnMigInstance) -> bool:
    """The one rule for "a process runs on a MIG instance": its GPU instance, and its compute instance
    where both are known (NVML may name only the GPU instance of a process)."""
    if gpu_instance_id is None or process.gpu_instance_id != gpu_instance_id:
        return False
    return (
        compute_instance_id is None
        or process.compute_instance_id is None
        or process.compute_instance_id == compute_instance_id
    )


MIG_ATTRIBUTE_FIELDS: tuple[str, ...] = (
    "memory_total_bytes",
    "sm_count",
    "slices",
    "copy_engines",
    "encoders",
    "decoders",
    "jpeg_decoders",
    "ofa",
)
"""The :class:`MigInstance` fields NVML's ``nvmlDeviceGetAttributes`` gives, in its order."""


def mig_profile(device_name: str) -> str | None:
    """The profile in a MIG device's name: ``NVIDIA H100 80GB HBM3 MIG 3g.40gb`` -> ``3g.40gb``.

    ``None`` when the name carries none (the word after the last " MIG ", if it
    looks like ``<n>g.<size>`` with optional ``<n>c.`` prefix and ``+me`` style suffixes).
    """
    _, sep, tail = device_name.rpartition(" MIG ")
    if not sep:
        return None
    profile = tail.strip().split(" ")[0]
    parts = profile.split("+")[0].split(".")
    ok = len(parts) in (2, 3) and all(p and p[0].isdigit() for p in parts) and parts[-2].endswith("g")
    return profile if ok else None


@dataclass(frozen=True, slots=True, repr=False)
class MigUsage(_Ranged):
    """One MIG instance's readings at one poll, matched to its :class:`MigInstance` by ``index``."""

    index: int
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    # The instance's own activity from GPM (Hopper and newer), as on GpuSample; None: N/A, see unavailable.
    graphics_active_percent: float | None = None
    sm_active_percent: float | None = None
    sm_occupancy_percent: float | None = None
    tensor_active_percent: float | None = None
    dram_active_percent: float | None = None
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)


MIG_USAGE_FIELDS: tuple[str, ...] = ("memory_used_bytes", "memory_free_bytes")


@dataclass(frozen=True, slots=True, repr=False)
class MigState(_Repr):
    """What a view shows of one MIG instance: how it is configured, its readings, its processes."""

    gpu_index: int
    instance: MigInstance
    usage: MigUsage | None  # None: not read (yet), or the GPU's readings are unavailable
    processes: tuple[GpuProcess, ...] = ()

    @property
    def label(self) -> str:
        return self.instance.label(self.gpu_index)

    @property
    def memory_used_bytes(self) -> int | None:
        return None if self.usage is None else self.usage.memory_used_bytes

    @property
    def memory_total_bytes(self) -> int | None:
        """The instance's memory, as nvidia-smi shows it (its profile's size), else what it reports (used + free)."""
        if self.instance.memory_total_bytes is not None:
            return self.instance.memory_total_bytes
        usage = self.usage
        if usage is not None and usage.memory_used_bytes is not None and usage.memory_free_bytes is not None:
            return usage.memory_used_bytes + usage.memory_free_bytes
        return None

    @property
    def memory_used_percent(self) -> float | None:
        used, total = self.memory_used_bytes, self.memory_total_bytes
        return None if used is None or not total else 100.0 * used / total

    def why(self, name: str) -> Reason | None:
        """Why a reading (``memory_used_bytes``) is missing."""
        if self.usage is None:
            return Reason.NOT_AVAILABLE
        return self.usage.unavailable.get(name)


@dataclass(frozen=True, slots=True, repr=False)
class GpuSample(_Ranged):
    """One reading of a GPU's dynamic fields. ``None`` = unavailable, see ``unavailable``."""

    timestamp: float
    lost: bool = False
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None  # memory *bandwidth* busy, not capacity
    encoder_percent: int | None = None
    decoder_percent: int | None = None
    temperature_c: int | None = None
    fan_percent: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None  # the enforced limit
    energy_mj: int | None = None  # total energy since driver load, millijoules
    pstate: int | None = None  # 0..15
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    ecc_mode: bool | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    pcie_rx_bytes_per_s: int | None = None
    pcie_tx_bytes_per_s: int | None = None
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    # Memory health: row remapping (Ampere and later) and page retirement (up to Turing).
    remapped_rows_corrected: int | None = None
    remapped_rows_uncorrected: int | None = None
    remapped_rows_pending: bool | None = None  # remapping happens at the next GPU reset
    remapped_rows_failure: bool | None = None  # a bank ran out of spare rows: the board needs replacing
    retired_pages_sbe: int | None = None  # pages retired for multiple single-bit errors
    retired_pages_dbe: int | None = None  # pages retired for a double-bit error
    retired_pages_pending: bool | None = None  # retirement waits for a driver reload or GPU reset
    # The PCIe link now (it may train down at idle: see nvtopy.health) and its retry counter.
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    pcie_replay_counter: int | None = None  # link-level retries since driver load: growth means a bad link
    nvlinks: tuple[NvLink, ...] | None = None  # per link; () when the board has none
    nvlink_rx_bytes_per_s: int | None = None  # all links, data payload
    nvlink_tx_bytes_per_s: int | None = None
    mig_usage: tuple[MigUsage, ...] | None = None  # per MIG instance; () when MIG is off or has no instance
    # GPM (see GPM_FIELDS): percentages 0-100 as floats, rates in bytes/s; None: not supported (before Hopper),
    # not permitted, or no interval measured yet (the first poll only takes the first sample).
    graphics_active_percent: float | None = None
    sm_active_percent: float | None = None
    sm_occupancy_percent: float | None = None
    tensor_active_percent: float | None = None
    dram_active_percent: float | None = None
    fp64_active_percent: float | None = None
    fp32_active_percent: float | None = None
    fp16_active_percent: float | None = None
    decoder_active_percent: float | None = None
    gpm_pcie_rx_bytes_per_s: float | None = None
    gpm_pcie_tx_bytes_per_s: float | None = None
    gpm_nvlink_rx_bytes_per_s: float | None = None
    gpm_nvlink_tx_bytes_per_s: float | None = None
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)

    def why(self, name: str) -> Reason | None:
        """The reason ``name`` is missing, or ``None`` when it has a value."""
        return self.unavailable.get(name)


@dataclass(frozen=True, slots=True, repr=False)
class RawGpuProcess(_Repr):
    """A process as NVML lists it on one GPU, before joining host information."""

    pid: int
    type: ProcessType
    gpu_memory_bytes: int | None  # None = NVML reported "not available"; 0 is a real 0
    sm_percent: int | None = None
    memory_percent: int | None = None  # memory-bandwidth utilisation of this process
    encoder_percent: int | None = None
    decoder_percent: int | None = None
    gpu_instance_id: int | None = None  # MIG
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True, repr=False)
class HostProcess(_Repr):
    """What the host knows of a pid (psutil on the NVML path). ``None`` fields are unavailable."""

    pid: int
    user: str | None = None
    uid: int | None = None
    name: str | None = None
    command: str | None = None
    cpu_percent: float | None = None
    host_memory_bytes: int | None = None  # RSS
    create_time: float | None = None
    status: str = "running"  # psutil status; "zombie" for an exited, unreaped process
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)
    owner: ProcessOwner | None = None  # read once per process (nvtopy.backends.host.owners); None: unknown
    ns_pid: int | None = None  # its pid inside its own PID namespace, when that differs
    cuda_visible_devices: str | None = None  # from its environment, where readable
    ppid: int | None = None  # its parent's pid (None: unknown)
    parents: tuple[ProcessRelative, ...] = ()  # its ancestors, nearest first, up to (not including) pid 1


@dataclass(frozen=True, slots=True, repr=False)
class GpuProcess(_Ranged):
    """One row of the process table: a pid on one GPU, joined with host information."""

    gpu_index: int
    gpu_uuid: str | None
    pid: int
    type: ProcessType
    gpu_memory_bytes: int | None
    sm_percent: int | None = None
    memory_percent: int | None = None
    encoder_percent: int | None = None
    decoder_percent: int | None = None
    user: str | None = None
    uid: int | None = None
    name: str | None = None
    command: str | None = None
    cpu_percent: float | None = None
    host_memory_bytes: int | None = None
    create_time: float | None = None
    running_seconds: float | None = None
    status: str = "running"
    foreign: bool = False  # pid not visible from this PID namespace (NVML lists it): no user/command, never killed
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)
    owner: ProcessOwner | None = None  # the container, pod, Slurm job or service it runs in (None: unknown)
    ns_pid: int | None = None  # its pid as its own (container's) PID namespace sees it, when that differs
    cuda_visible_devices: str | None = None  # from its environment, where readable: the GPUs it believes it has
    host_pid: int | None = None  # nvtopy in a container: the host pid NVML gave, proven to be local ``pid``
    # Real-work flags (nvtopy.health): "idle-held" (holds memory, computes nothing, for long),
    # "suspected-hang" (its GPU looks busy while its SMs idle -- or, without GPM, busy at low power).
    flags: tuple[str, ...] = ()
    idle_seconds: float | None = None  # how long it has held memory at ~0 % SM; None: not idle (or unknown)
    gpu_instance_id: int | None = None  # the MIG instance it runs on (None: MIG off, or not named)
    compute_instance_id: int | None = None
    ppid: int | None = None  # its parent's pid (None: unknown); the tree view hangs it under its parent
    parents: tuple[ProcessRelative, ...] = ()  # its ancestors, nearest first, up to (not including) pid 1
    host: str | None = None  # the host it runs on, when that is not this one (--remote, --prometheus); outside text

    @property
    def instance_label(self) -> str | None:
        """``0/1/0`` (GPU/GI/CI) for a process on a MIG instance; ``None`` for a whole GPU."""
        if self.gpu_instance_id is None:
            return None
        return MigKey(self.gpu_index, self.gpu_instance_id, self.compute_instance_id).label

    @property
    def key(self) -> tuple[int, int, float | None]:
        """Stable identity across refreshes: GPU, pid and create time (pids are reused)."""
        return (self.gpu_index, self.pid, self.create_time)


class GpuHistory:
    """Recent values per metric, oldest first, for sparklines. ``None`` entries are gaps.

    Immutable, and compared, hashed and shown as the tuples it holds. Why not a frozen dataclass
    of tuples, as the rest of the model: a source made every GPU's tuples again at every refresh
    (8 columns of 300 points), and a fleet of 512 GPUs spent 45 ms a refresh on copies nobody
    reads -- a view shows a few GPUs' sparklines. A history a
    :class:`HistoryBuffer` makes is a window onto its ring's columns instead
    (:meth:`~nvtopy.history.SampleRing.view`: points are only appended there, never changed), and
    a metric's tuple is made the first time it is read.
    """

    __slots__ = ("_columns", "_made", "_start", "_stop")

    FIELDS = (
        "timestamps",
        "utilization_gpu_percent",
        "utilization_memory_percent",
        "memory_used_percent",
        "power_draw_w",
        "temperature_c",
        "sm_active_percent",  # GPM (Hopper and newer): None where not measured
        "tensor_active_percent",
    )

    def __init__(
        self,
        *,
        timestamps: Sequence[float] = (),
        utilization_gpu_percent: Sequence[int | None] = (),
        utilization_memory_percent: Sequence[int | None] = (),
        memory_used_percent: Sequence[float | None] = (),
        power_draw_w: Sequence[float | None] = (),
        temperature_c: Sequence[int | None] = (),
        sm_active_percent: Sequence[float | None] = (),
        tensor_active_percent: Sequence[float | None] = (),
    ) -> None:
        self._columns: tuple[Sequence[Any], ...] = (
            timestamps,
            utilization_gpu_percent,
            utilization_memory_percent,
            memory_used_percent,
            power_draw_w,
            temperature_c,
            sm_active_percent,
            tensor_active_percent,
        )
        self._start = 0
        self._stop: int | None = None
        self._made: list[tuple[Any, ...] | None] | None = None

    @classmethod
    def window(cls, columns: tuple[Sequence[Any], ...], start: int, stop: int) -> GpuHistory:
        """The points ``start:stop`` of ``columns`` (one per :attr:`FIELDS`), which must never change there."""
        history = cls.__new__(cls)
        history._columns, history._start, history._stop, history._made = columns, start, stop, None
        return history

    def _column(self, n: int) -> tuple[Any, ...]:
        made = self._made
        if made is None:
            made = self._made = [None] * len(self.FIELDS)
        column = made[n]
        if column is None:  # two threads may both make it: the same tuple, no harm
            column = made[n] = tuple(self._columns[n][self._start : self._stop])
        return column

    def values(self) -> tuple[tuple[Any, ...], ...]:
        """Every metric's tuple, in :attr:`FIELDS` order."""
        return tuple(map(self._column, range(len(self.FIELDS))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GpuHistory):
            return NotImplemented
        return self.values() == other.values()

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={column!r}" for name, column in zip(self.FIELDS, self.values(), strict=True))
        return f"GpuHistory({fields})"

    @property
    def timestamps(self) -> tuple[float, ...]:
        return self._column(0)

    @property
    def utilization_gpu_percent(self) -> tuple[int | None, ...]:
        return self._column(1)

    @property
    def utilization_memory_percent(self) -> tuple[int | None, ...]:
        return self._column(2)

    @property
    def memory_used_percent(self) -> tuple[float | None, ...]:
        return self._column(3)

    @property
    def power_draw_w(self) -> tuple[float | None, ...]:
        return self._column(4)

    @property
    def temperature_c(self) -> tuple[int | None, ...]:
        return self._column(5)

    @property
    def sm_active_percent(self) -> tuple[float | None, ...]:
        return self._column(6)

    @property
    def tensor_active_percent(self) -> tuple[float | None, ...]:
        return self._column(7)


HISTORY_LENGTH = 300
"""Points kept per GPU for the charts, by every source (five minutes at the default 1 s interval)."""


def memory_used_percent_of(static: GpuStatic, sample: GpuSample) -> float | None:
    """GPU memory used as a share of the board's, in percent (None: either is unknown, or the total is 0).

    One formula for the panels (:attr:`GpuState.memory_used_percent`), the sparklines'
    history and the charts' timeline, so that they never disagree.
    """
    used, total = sample.memory_used_bytes, static.memory_total_bytes
    return 100.0 * used / total if used is not None and total else None


class HistoryBuffer:
    """One GPU's recent points, the oldest dropped past ``length``: what a :class:`GpuHistory` is made of.

    The one place history is appended to: the collector, a replay and remote hosts
    each keep one buffer per GPU and append every sample they publish. The points are a
    :class:`~nvtopy.history.SampleRing` of lists: each value comes back as it went in.
    """

    __slots__ = ("_ring",)

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self._ring: SampleRing[float | None] = SampleRing(7, length, typecode=None)  # GpuHistory's figures

    def __len__(self) -> int:
        return len(self._ring)

    def append(self, static: GpuStatic, sample: GpuSample) -> None:
        """Add ``sample``'s point (in :class:`GpuHistory`'s field order; memory as a share of ``static``'s total)."""
        self._ring.append(
            sample.timestamp,
            (
                sample.utilization_gpu_percent,
                sample.utilization_memory_percent,
                memory_used_percent_of(static, sample),
                sample.power_draw_w,
                sample.temperature_c,
                sample.sm_active_percent,
                sample.tensor_active_percent,
            ),
        )

    def history(self) -> GpuHistory:
        """The points so far, oldest first: a window onto the ring, nothing copied (see :class:`GpuHistory`)."""
        return GpuHistory.window(*self._ring.view())


class Severity(str, enum.Enum):
    """A health verdict, worst last. The values appear in JSON, CSV and the exporter."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.OK: 0, Severity.WARN: 1, Severity.FAIL: 2}


@dataclass(frozen=True, slots=True, repr=False)
class Finding(_Repr):
    """One reason for a GPU's verdict: a code for machines, a sentence and its fix for people."""

    severity: Severity
    code: str  # stable: "xid", "remap-failure", "remap-pending", "pcie-downgrade", "not-responding", ...
    text: str  # what is wrong, in plain words: "row remapping failed"
    action: str | None = None  # what to do: "replace the board"


@dataclass(frozen=True, slots=True, repr=False)
class GpuEvent(_Repr):
    """An NVML event on one GPU (today: an Xid critical error), in the order it arrived."""

    timestamp: float  # Unix time nvtopy received it
    gpu_index: int
    kind: str = "xid"
    xid: int | None = None  # the Xid number (eventData)
    gpu_instance_id: int | None = None  # MIG instance, when the driver names one
    compute_instance_id: int | None = None


EVENTS_PER_GPU = 64
"""Events kept per GPU in the timeline (the oldest dropped first); counts per Xid are kept whole."""


@dataclass(frozen=True, slots=True, repr=False)
class GpuHealth(_Repr):
    """What is wrong with a GPU, and the evidence: its verdict, the findings behind it, its events."""

    verdict: Severity = Severity.OK
    findings: tuple[Finding, ...] = ()
    events: tuple[GpuEvent, ...] = ()  # the recent timeline, oldest first (bounded: EVENTS_PER_GPU)
    xid_counts: tuple[tuple[int, int], ...] = ()  # (xid, events seen since nvtopy started), by xid; only grows
    events_note: str | None = None  # why events are not watched ("not supported on this GPU"), else None
    responding: bool = True  # False: a driver call on this GPU has been outstanding too long
    stalled_seconds: float | None = None  # how long the outstanding call has run (None: it answered)
    throttle: str | None = None  # throttling in plain words: "HW slowdown: SM at 45 % of max"; None: not throttled
    idle_held_bytes: int | None = None  # GPU memory held by idle-held processes
    suspected_hang_seconds: float | None = None  # how long the GPU has looked busy and idle (SMs, else power)

    @property
    def last_xid(self) -> int | None:
        for event in reversed(self.events):
            if event.xid is not None:
                return event.xid
        return None


OK_HEALTH = GpuHealth()


class ChartSeries(Protocol):
    """One metric over a window, oldest first, as the charts draw it (``sources.timeline.Series``)."""

    @property
    def step(self) -> float: ...

    @property
    def buckets(self) -> Sequence[int]: ...

    @property
    def lo(self) -> Sequence[float]: ...

    @property
    def mean(self) -> Sequence[float]: ...

    @property
    def hi(self) -> Sequence[float]: ...


class ChartHistory(Protocol):
    """What a view reads of a GPU's long history (``sources.timeline.Timeline``, which a source keeps).

    A protocol here, not the class: the model is below the sources that keep the history.
    """

    def series(self, metric: str, window: float, end: float) -> ChartSeries: ...


@dataclass(frozen=True, slots=True, repr=False)
class GpuState(_Repr):
    """Everything a view needs about one GPU at one instant."""

    static: GpuStatic
    sample: GpuSample
    processes: tuple[GpuProcess, ...] = ()
    processes_unavailable: Reason | None = None  # why the process list itself is missing
    history: GpuHistory = field(default_factory=GpuHistory)
    note: str | None = None  # a sentence shown instead of values (e.g. "host unreachable: ...")
    # A sentence about the process list, shown beside it (values stay): e.g. memory in use and no process visible.
    processes_hint: str | None = None
    health: GpuHealth = OK_HEALTH
    # The GPU's long history for the charts (a sources.timeline.Timeline, or None): shared by every
    # snapshot of its source, not copied; thread-safe, and read as of the snapshot's time. Not compared.
    timeline: ChartHistory | None = field(default=None, compare=False)

    @property
    def index(self) -> int:
        return self.static.index

    @property
    def mig(self) -> tuple[MigState, ...]:
        """Its MIG instances, each with its readings and processes; () when MIG is off or has none."""
        instances = self.static.mig_instances
        if not instances:
            return ()
        usage = {u.index: u for u in self.sample.mig_usage or ()}
        return tuple(
            MigState(
                self.static.index,
                instance,
                usage.get(instance.index),
                tuple(p for p in self.processes if instance.runs(p)),
            )
            for instance in instances
        )

    @property
    def lost(self) -> bool:
        return self.sample.lost

    @property
    def stands_for_host(self) -> bool:
        """A fleet view's line for a host, not one of its GPUs: its note says why it shows none (connecting,
        lost, a remark such as "read with nvidia-smi"). A stale host's GPUs keep their place on the host
        (``host_index``) and stay GPUs: only their figures are missing."""
        return bool(self.note) and self.static.host_index is None

    @property
    def memory_used_percent(self) -> float | None:
        return memory_used_percent_of(self.static, self.sample)


@dataclass(frozen=True, slots=True, repr=False)
class Snapshot(_Repr):
    """One published state of every selected GPU. Views render it; they never mutate it."""

    timestamp: float  # Unix time the collection started
    host: HostInfo
    gpus: tuple[GpuState, ...]
    sequence: int = 0  # increases by one per published snapshot
    interval: float | None = None  # the poll interval in force when it was taken
    collect_seconds: float | None = None  # how long the backend took to collect it
    # The host's CPU, load, memory and swap (None: the source has no such data: --remote, an old recording).
    host_usage: HostUsage | None = None

    @property
    def processes(self) -> tuple[GpuProcess, ...]:
        """All process rows of all GPUs, in GPU order."""
        return tuple(p for gpu in self.gpus for p in gpu.processes)

    def gpu(self, index: int) -> GpuState | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return None


def sample_from_fields(timestamp: float, lost: bool, values: Mapping[str, Any], reasons: Reasons) -> GpuSample:
    """Build a :class:`GpuSample` from a field dict (unknown keys are a programming error)."""
    return GpuSample(timestamp=timestamp, lost=lost, unavailable=freeze(reasons), **values)


# Clock-event ("throttle") reason bits, as NVML defines them, and the names
# nvtopy reports. GPU idle is normal at rest; the rest explain lower clocks.
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clock-event mask (unknown bits are reported as hex)."""
    names = [name for bit, name in THROTTLE_REASON_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASON_BITS:
        known |= bit
    if mask & ~known:
        names.append(f"0x{mask & ~known:x}")
    return tuple(names)


COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def cuda_version_string(version: int) -> str:
    """NVML's integer CUDA driver version (12040) as users write it ("12.4")."""
    return f"{version // 1000}.{(version % 1000) // 10}"


class OwnerKind(str, enum.Enum):
    """What owns a process, as its cgroup path tells (``nvtopy.backends.host.owners``). The values appear in JSON."""

    DOCKER = "docker"
    KUBERNETES = "kubernetes"
    PODMAN = "podman"
    SLURM = "slurm"
    SYSTEMD_SERVICE = "systemd-service"
    USER_SESSION = "user-session"
    CGROUP = "cgroup"  # a cgroup path no rule recognises: kept raw
    HOST = "host"  # the root cgroup ("/") or none at all

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, repr=False)
class ProcessOwner(_Repr):
    """Who a process belongs to: a container, a pod, a Slurm job, a service or a session.

    Every field but ``kind`` may be ``None`` (not in the path, or the runtime's files
    were unreadable). Names are kept as read -- possibly hostile text, escaped by the
    views where they write -- but cut to a sane length when read.
    """

    kind: OwnerKind
    id: str | None = None  # docker/podman: container id; kubernetes: pod UID; slurm: job id; systemd: unit
    name: str | None = None  # container name, pod name, Slurm job name, service name
    namespace: str | None = None  # kubernetes
    pod: str | None = None  # kubernetes pod name
    container: str | None = None  # container name (docker, podman, kubernetes)
    container_id: str | None = None  # the runtime's 64-hex container id (docker, podman, kubernetes)
    job: str | None = None  # slurm job id
    step: str | None = None  # slurm step: "0", "batch", "extern", "interactive", ...
    project: str | None = None  # docker compose project
    uid: int | None = None  # from the path: user-<uid>.slice, user@<uid>.service, slurm uid_<uid>
    cgroup: str | None = None  # the raw cgroup path it was read from

    @property
    def label(self) -> str:
        """The short name an OWNER column shows: ``web-1``, ``ns/pod``, ``slurm 1234.0``, ``nginx``, ..."""
        kind = self.kind
        if kind in (OwnerKind.DOCKER, OwnerKind.PODMAN):
            return self.name or (self.container_id or self.id or "")[:12] or kind.value
        if kind is OwnerKind.KUBERNETES:
            if self.namespace and self.pod:
                return f"{self.namespace}/{self.pod}"
            if self.pod:
                return self.pod
            return f"pod {self.id[:8]}" if self.id else "pod"
        if kind is OwnerKind.SLURM:
            if self.job is None:
                return "slurm"
            return f"slurm {self.job}.{self.step}" if self.step else f"slurm {self.job}"
        if kind is OwnerKind.SYSTEMD_SERVICE:
            return self.name or self.id or "service"
        if kind is OwnerKind.USER_SESSION:
            if self.id:
                return f"session {self.id}"
            return f"user {self.uid}" if self.uid is not None else "session"
        if kind is OwnerKind.CGROUP:
            return self.cgroup or "cgroup"
        return "host"


__all__ += [
    "EVENTS_PER_GPU",
    "GPM_FIELDS",
    "GPM_PERCENT_FIELDS",
    "GPM_RATE_FIELDS",
    "HEALTH_GROUPS",
    "MIG_ATTRIBUTE_FIELDS",
    "MIG_GPM_FIELDS",
    "MIG_USAGE_FIELDS",
    "OK_HEALTH",
    "Finding",
    "GpuEvent",
    "GpuHealth",
    "MigInstance",
    "MigKey",
    "MigState",
    "MigUsage",
    "NvLink",
    "OwnerKind",
    "ProcessOwner",
    "Severity",
    "mig_profile",
]


@dataclass(frozen=True, slots=True, repr=False)
class ProcessRelative(_Repr):
    """A parent or a child of a process, as the host names it: pid, name (``comm``), user. Outside text."""

    pid: int
    name: str | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True, repr=False)
class ProcessDetails(_Repr):
    """What the process screen shows beyond the snapshot, read on demand by the backend (one process).

    Read only for a process of this PID namespace, and only while ``pid`` is still the
    process started at ``create_time``. A ``None`` field could not be read (``unavailable``
    says why: no permission for another user's cwd, executable or environment). Every
    string is outside text, kept as read: views escape it where they write it.
    """

    pid: int
    create_time: float | None = None
    cmdline: tuple[str, ...] | None = None  # the full argv
    exe: str | None = None
    cwd: str | None = None
    user: str | None = None
    uid: int | None = None
    status: str | None = None
    threads: int | None = None
    parents: tuple[ProcessRelative, ...] = ()  # nearest first, up to pid 1 (included)
    children: tuple[ProcessRelative, ...] = ()  # direct children (at most CHILDREN_SHOWN), by pid
    children_count: int = 0  # all of them, when more than listed
    cuda_visible_devices: str | None = None  # as its environment says now
    environ_readable: bool = False  # False: unreadable (another user's process), so "unset" is not known
    unavailable: Reasons = field(default_factory=lambda: EMPTY_REASONS)


CHILDREN_SHOWN = 64
"""Children a :class:`ProcessDetails` lists by name (a fork bomb or a big pool is counted, not listed)."""

__all__ += ["CHILDREN_SHOWN", "ProcessDetails", "ProcessRelative"]
