"""Which GPUs a view shows: ``--gpus`` lists and CUDA_VISIBLE_DEVICES rules.

Shared by every view (TUI, ``--once``, logger, exporter, Python API) so that a
GPU means the same thing everywhere. Everything here is pure: it works on the
static identities the backend reported and never touches NVML itself.

:func:`select_gpus` is the one place ``--gpus`` / ``gpus=`` and ``--only-visible`` /
``only_visible=`` are applied. It never prints: it returns the warnings, and each
front end reports them its way -- the CLI one line each on stderr
(``nvtopy: warning: ...``, made terminal-safe), the Python API with
:func:`warnings.warn` as a :class:`SelectionWarning` (shown once per call site by
Python's default filter; silence or escalate it with :mod:`warnings` filters).

MIG: a :class:`Selection` can name MIG instances as well as GPUs. ``--gpus``
takes ``MIG-<uuid>`` (or a unique prefix of it; the ``MIG-`` prefix is required,
a bare hex string is a GPU UUID prefix) and the legacy
``MIG-GPU-<gpu-uuid>/<gi>/<ci>`` form; such an entry shows its parent GPU limited
to that instance (its other instances and their processes are left out), and a
GPU named whole as well stays whole. ``--only-visible`` follows CUDA's MIG rule
(:func:`parse_cuda_visible_devices`): a CUDA process uses at most one MIG device.

Narrowing a GPU to some of its MIG instances has one home here, for the collector
(``--gpus MIG-...``) and the TUI's GPU picker alike: the instances chosen are a
:data:`ChosenInstances` (keys, :class:`~nvtopy.model.MigKey`), :func:`instances_named`
matches a selection's UUIDs to them, and :func:`narrow_to_instances` gives the GPU
as the views show it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import field
from types import MappingProxyType

from .errors import SelectionError
from .model import GpuState, GpuStatic, MigInstance, MigKey
from .records import dataclass
from .textsafe import quoted

__all__ = [
    "ChosenInstances",
    "Selection",
    "SelectionWarning",
    "VisibleDevice",
    "VisibleDevices",
    "format_bus_id",
    "instances_named",
    "narrow_to_instances",
    "parse_bus_id",
    "parse_cuda_visible_devices",
    "resolve_gpu_list",
    "resolve_gpu_selection",
    "select_gpus",
]

BusId = tuple[int, int, int, int]  # (domain, bus, device, function)

# [domain:]bus:device[.function], hex, any case. NVML prints an 8-digit domain,
# lspci a 4-digit one, users often none at all.
_BUS_ID_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})(?:\.(?P<function>[0-7]))?$",
    re.IGNORECASE,
)
_UUID_BODY_RE = re.compile(r"^[0-9a-f-]+$", re.IGNORECASE)
_DIGITS_RE = re.compile(r"^[0-9]+$")  # ASCII only: str.isdigit() also takes "²", which int() refuses
# The MIG device form of drivers before R470: MIG-GPU-<parent uuid or unique prefix>/<GPU instance>/<compute instance>.
_LEGACY_MIG_RE = re.compile(r"^MIG-(?P<parent>GPU-[0-9a-f-]+)/(?P<gi>[0-9]+)/(?P<ci>[0-9]+)$", re.IGNORECASE)
# MIG devices an error message lists at most (7 per GPU, 8 GPUs would make a very long line).
_MAX_LISTED = 12
# How the MIG rule's warning ends: select_gpus drops it when --gpus leaves that MIG device out anyway.
_SHOWING_IT = "; showing it"
# More digits than this (leading zeros aside) is no GPU index and no CUDA ordinal: out of range.
_MAX_DIGITS = 9


def _small_int(digits: str) -> int | None:
    """The value of a string of ASCII digits, or ``None`` when it is too large to name a device.

    Never ``int()`` of a long string: Python refuses more than 4,300 digits (ValueError).
    """
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_DIGITS else None


def parse_bus_id(text: str) -> BusId | None:
    """Parse a PCI bus id in any common form; ``None`` when ``text`` is not one."""
    match = _BUS_ID_RE.match(text.strip())
    if match is None:
        return None
    return (
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"] or "0", 16),
    )


def format_bus_id(bus_id: BusId) -> str:
    """NVML's form, ``00000000:3B:00.0``."""
    domain, bus, device, function = bus_id
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"


def _describe(gpus: Sequence[GpuStatic]) -> str:
    if not gpus:
        return "no GPUs are present"
    items = []
    for gpu in gpus:
        parts = [str(gpu.index)]
        if gpu.short_bus_id:
            parts.append(gpu.short_bus_id)
        if gpu.uuid:
            parts.append(gpu.uuid[:12])
        if gpu.mig_instances:
            parts.append(f"({len(gpu.mig_instances)} MIG)")
        items.append(" ".join(parts))
    return "available: " + ", ".join(items)


def _describe_instance(gpu: GpuStatic, instance: MigInstance) -> str:
    """``1/2/0 MIG-2cd424ee 3g.40gb``: its label, the start of its UUID, its profile."""
    parts = [instance.label(gpu.index), instance.uuid[:12] if instance.uuid else "(no UUID)"]
    if instance.profile:
        parts.append(instance.profile)
    return " ".join(parts)


def _describe_mig(gpus: Sequence[GpuStatic]) -> str:
    """The MIG devices of ``gpus``, for an error message about a MIG entry (at most :data:`_MAX_LISTED`)."""
    items = [_describe_instance(g, m) for g in gpus for m in g.mig_instances]
    if not items:
        if len(gpus) == 1:
            return f"GPU {gpus[0].index} has no MIG devices"
        return "no GPU here has MIG devices"
    more = len(items) - _MAX_LISTED
    listed = ", ".join(items[:_MAX_LISTED]) + (f", and {more} more" if more > 0 else "")
    return (f"GPU {gpus[0].index}'s MIG devices: " if len(gpus) == 1 else "MIG devices: ") + listed


def _match_uuid(entry: str, gpus: Sequence[GpuStatic]) -> list[GpuStatic]:
    """GPUs whose UUID starts with ``entry`` (case-insensitive; the ``GPU-`` prefix is optional)."""
    needle = entry.lower()
    if not needle.startswith("gpu-"):
        needle = "gpu-" + needle
    exact = [g for g in gpus if g.uuid and g.uuid.lower() == needle]
    if exact:
        return exact
    return [g for g in gpus if g.uuid and g.uuid.lower().startswith(needle)]


def _match_mig_uuid(entry: str, gpus: Sequence[GpuStatic]) -> list[tuple[GpuStatic, MigInstance]]:
    """MIG devices whose UUID is ``entry`` or starts with it (case-insensitive; ``entry`` starts with ``MIG-``)."""
    needle = entry.lower()
    named = [(g, m) for g in gpus for m in g.mig_instances if m.uuid]
    exact = [(g, m) for g, m in named if m.uuid and m.uuid.lower() == needle]
    return exact or [(g, m) for g, m in named if m.uuid and m.uuid.lower().startswith(needle)]


def _legacy_instance(gpu: GpuStatic, gi_text: str, ci_text: str) -> MigInstance | None:
    """The MIG device of ``gpu`` with GPU instance ``gi_text`` and compute instance ``ci_text`` (digits)."""
    gi, ci = _small_int(gi_text), _small_int(ci_text)
    if gi is None or ci is None:
        return None
    return next(
        (m for m in gpu.mig_instances if m.gpu_instance_id == gi and m.compute_instance_id == ci),
        None,
    )


def _resolve_mig_entry(entry: str, gpus: Sequence[GpuStatic]) -> tuple[GpuStatic, str]:
    """A ``--gpus`` entry starting with ``MIG-``: the parent GPU and the MIG device's UUID, else SelectionError."""
    if entry[4:].lower().startswith("gpu-"):
        match = _LEGACY_MIG_RE.match(entry)
        if match is None:
            raise SelectionError(
                f"--gpus: {quoted(entry)} is not a MIG device: give MIG-<uuid> or MIG-GPU-<gpu-uuid>/<gi>/<ci> "
                f"({_describe_mig(gpus)})"
            )
        parents = _match_uuid(match["parent"], gpus)
        if not parents:
            raise SelectionError(f"--gpus: no GPU matches the parent of {quoted(entry)} ({_describe(gpus)})")
        if len(parents) > 1:
            which = ", ".join(str(g.index) for g in parents)
            raise SelectionError(f"--gpus: the parent of {quoted(entry)} matches GPUs {which}; give more of the UUID")
        gpu = parents[0]
        instance = _legacy_instance(gpu, match["gi"], match["ci"])
        if instance is None:
            ids = quoted(f"{match['gi']}/{match['ci']}", 24)
            raise SelectionError(
                f"--gpus: {quoted(entry)}: GPU {gpu.index} has no GPU instance/compute instance {ids} "
                f"({_describe_mig([gpu])})"
            )
        if not instance.uuid:
            raise SelectionError(
                f"--gpus: {quoted(entry)} is MIG device {instance.label(gpu.index)}, whose UUID the driver did not "
                f"report: it cannot be shown alone; name GPU {gpu.index} instead"
            )
        return gpu, instance.uuid
    hits = _match_mig_uuid(entry, gpus) if len(entry) > 4 and _UUID_BODY_RE.match(entry[4:]) else []
    if not hits:
        raise SelectionError(f"--gpus: no MIG device matches {quoted(entry)} ({_describe_mig(gpus)})")
    if len(hits) > 1:
        which = ", ".join(m.label(g.index) for g, m in hits[:_MAX_LISTED])
        raise SelectionError(f"--gpus: {quoted(entry)} matches MIG devices {which}; give more of the UUID")
    gpu, instance = hits[0]
    assert instance.uuid is not None  # _match_mig_uuid only matches instances with a UUID
    return gpu, instance.uuid


def _resolve_gpu_entry(entry: str, gpus: Sequence[GpuStatic]) -> GpuStatic:
    """A ``--gpus`` entry naming a whole GPU (index, bus id, UUID or prefix), else SelectionError."""
    matches: list[GpuStatic]
    if _DIGITS_RE.match(entry):
        index = _small_int(entry)  # 5,000 digits name no GPU: no int() of them
        matches = [g for g in gpus if g.index == index][:1]
    elif (bus := parse_bus_id(entry)) is not None:
        matches = [g for g in gpus if g.bus_id and parse_bus_id(g.bus_id) == bus][:1]
    elif _UUID_BODY_RE.match(entry[4:] if entry.lower().startswith("gpu-") else entry):
        matches = _match_uuid(entry, gpus)
    else:
        matches = []
    if not matches:
        raise SelectionError(f"--gpus: no GPU matches {quoted(entry)} ({_describe(gpus)})")
    if len(matches) > 1:
        which = ", ".join(str(g.index) for g in matches)
        raise SelectionError(f"--gpus: {quoted(entry)} matches GPUs {which}; give more of the UUID")
    return matches[0]


def resolve_gpu_selection(spec: str, gpus: Sequence[GpuStatic]) -> Selection:
    """Resolve a ``--gpus`` value to a :class:`Selection`: GPUs in the order given, and the MIG devices named.

    Entries are indices (``0``), PCI bus ids in any form (``3b:00.0``,
    ``0000:3b:00.0``, ``00000000:3B:00.0``), UUIDs and unique UUID prefixes
    (``GPU-5e3f``, ``5e3f0c1a``), and MIG devices: ``MIG-<uuid>`` or a unique
    prefix of it (``MIG-2cd4``; case-insensitive, ``MIG-`` required), or the legacy
    ``MIG-GPU-<gpu-uuid>/<gi>/<ci>`` (the GPU UUID may be a unique prefix; ``gi``
    and ``ci`` are matched against each instance's GPU and compute instance ids).

    A MIG device selects its parent GPU, limited to the MIG devices named of it
    (:attr:`Selection.instances`); a GPU also named whole (``1,MIG-...`` of GPU 1)
    is shown whole. A GPU's place in the order is where it is first named.

    Raises :class:`SelectionError`, one line naming the entry, for an entry that
    matches nothing (the message lists what is available, MIG devices for a MIG
    entry), a prefix that matches several GPUs or MIG devices, or an unknown
    ``gi``/``ci``.
    """
    order: list[int] = []
    whole: set[int] = set()
    named: dict[int, list[str]] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            raise SelectionError(f"--gpus: empty entry in {quoted(spec)} ({_describe(gpus)})")
        if entry.lower().startswith("mig-"):
            gpu, uuid = _resolve_mig_entry(entry, gpus)
            uuids = named.setdefault(gpu.index, [])
            if uuid.lower() not in (u.lower() for u in uuids):
                uuids.append(uuid)
        else:
            gpu = _resolve_gpu_entry(entry, gpus)
            whole.add(gpu.index)
        if gpu.index not in order:
            order.append(gpu.index)
    return Selection(tuple(order), instance_pairs=tuple((i, tuple(u)) for i, u in named.items() if i not in whole))


def resolve_gpu_list(spec: str, gpus: Sequence[GpuStatic]) -> list[int]:
    """Resolve a ``--gpus`` value to NVML indices, in the order given, without duplicates.

    The entries of :func:`resolve_gpu_selection`; a MIG device counts as its parent
    GPU here (:func:`resolve_gpu_selection` says which of its instances were named).
    An entry that matches nothing, or a prefix that matches several GPUs, raises
    :class:`SelectionError` naming it.
    """
    return list(resolve_gpu_selection(spec, gpus).indices)


@dataclass(frozen=True, slots=True)
class VisibleDevice:
    """One CUDA device: its CUDA ordinal, the NVML GPU behind it, and the MIG instance if any."""

    cuda_index: int
    nvml_index: int
    mig_uuid: str | None = None  # MIG-<uuid>; the entry itself for a legacy entry nvtopy could not check


@dataclass(frozen=True, slots=True)
class VisibleDevices:
    """The result of applying CUDA_VISIBLE_DEVICES: devices in CUDA order, plus warnings to show.

    ``devices``: what the variable names, entry by entry (CUDA's list rules applied).
    ``usable``: what a CUDA process can use of them -- ``devices`` after CUDA's
    MIG rule (one MIG device at most; see :func:`parse_cuda_visible_devices`);
    ``None``: the same as ``devices``.
    """

    devices: tuple[VisibleDevice, ...]
    warnings: tuple[str, ...] = field(default=())
    usable: tuple[VisibleDevice, ...] | None = None

    @property
    def process_devices(self) -> tuple[VisibleDevice, ...]:
        """The devices a CUDA process started with this CUDA_VISIBLE_DEVICES can use, in CUDA order."""
        return self.devices if self.usable is None else self.usable

    @property
    def nvml_indices(self) -> list[int]:
        """Distinct physical GPUs a CUDA process can use, in CUDA order (several MIG devices share one GPU)."""
        seen: list[int] = []
        for device in self.process_devices:
            if device.nvml_index not in seen:
                seen.append(device.nvml_index)
        return seen

    @property
    def instances(self) -> Mapping[int, tuple[str, ...]]:
        """GPU index -> the MIG device UUIDs a CUDA process can use of it; GPUs usable whole are absent.

        A legacy ``MIG-GPU-.../<gi>/<ci>`` entry nvtopy could not check (the GPU's
        instances are unknown) leaves its GPU whole: there is no UUID to limit it to.
        """
        devices = self.process_devices
        whole = {d.nvml_index for d in devices if d.mig_uuid is None or "/" in d.mig_uuid}
        named: dict[int, tuple[str, ...]] = {}
        for device in devices:
            if device.mig_uuid is not None and device.nvml_index not in whole:
                named[device.nvml_index] = (*named.get(device.nvml_index, ()), device.mig_uuid)
        return MappingProxyType(named)


def _strtoul(token: str) -> int | None:
    """CUDA reads ordinals like ``strtol``: optional sign, leading digits, rest ignored.

    ``"1abc"`` is 1, ``"+3"`` is 3, ``"-0"`` is 0; ``"-1"`` is negative, ``"abc"``
    has no digits and a number too large for ``strtol`` (which then says ERANGE)
    is out of range: all return ``None``, which ends the list. Digits are ASCII
    only, as for ``strtol`` in the C locale.
    """
    match = re.match(r"^([+-]?)([0-9]+)", token)
    if match is None:
        return None
    value = _small_int(match[2])
    if value is None or (match[1] == "-" and value != 0):
        return None
    return value


def _mig_parent(token: str, gpus: Sequence[GpuStatic]) -> tuple[GpuStatic, str] | None:
    """Resolve ``MIG-<uuid>`` (R470+; a unique prefix too) or ``MIG-GPU-<uuid>/<gi>/<ci>`` (older drivers).

    Returns the parent GPU and the MIG device's UUID; ``None`` when the entry names
    no MIG device (which ends CUDA's list). A legacy entry on a GPU in MIG mode
    whose instances are unknown (none read) is taken on trust, with the entry
    itself as its "UUID"; on a GPU without MIG it names nothing.
    """
    if token[4:].upper().startswith("GPU-"):  # legacy form names the parent directly
        match = _LEGACY_MIG_RE.match(token)
        if match is None:
            return None
        parents = _match_uuid(match["parent"], gpus)
        if len(parents) != 1:
            return None
        gpu = parents[0]
        if not gpu.mig_instances:
            return (gpu, token) if gpu.mig_mode else None
        instance = _legacy_instance(gpu, match["gi"], match["ci"])
        if instance is None:
            return None
        return gpu, instance.uuid or token
    hits = _match_mig_uuid(token, gpus)
    if len(hits) != 1 or hits[0][1].uuid is None:
        return None
    return hits[0][0], hits[0][1].uuid


def _one_mig_device(
    devices: Sequence[VisibleDevice], gpus: Sequence[GpuStatic], value: str | None
) -> tuple[tuple[VisibleDevice, ...], tuple[str, ...]]:
    """CUDA's MIG rule: what a process can use of ``devices``, and the warning when that is less than they name.

    A CUDA process enumerates at most one MIG device. A MIG-enabled GPU named whole
    (by index or GPU UUID, or every GPU when CUDA_VISIBLE_DEVICES is unset) is not
    enumerated itself: its MIG devices are. So the first MIG device -- named, or
    the first (lowest MIG device index) of the first MIG-enabled GPU named whole --
    is kept in its place, every later one is dropped; GPUs without MIG stay. A
    MIG-enabled GPU without any MIG device exposes nothing at all: it is dropped,
    and a warning says so (else the view would show a GPU no CUDA process can use).
    """
    by_index = {g.index: g for g in gpus}
    kept: list[VisibleDevice] = []
    chosen: tuple[VisibleDevice, GpuStatic | None] | None = None
    count = 0
    implied = False
    empty: list[int] = []  # MIG-enabled GPUs named whole that have no MIG device: CUDA exposes nothing there
    for device in devices:
        mig = device.mig_uuid
        if mig is None:
            gpu = by_index.get(device.nvml_index)
            if gpu is not None and gpu.mig_mode and not gpu.mig_instances:
                empty.append(gpu.index)
                continue
            instances = sorted((m for m in gpu.mig_instances if m.uuid), key=lambda m: m.index) if gpu else []
            if not instances:  # no MIG, or its instances' UUIDs are unknown: the GPU as CUDA_VISIBLE_DEVICES names it
                kept.append(device)
                continue
            implied = True
            count += len(instances)
            mig = instances[0].uuid
        else:
            count += 1
        if chosen is None:
            chosen = (VisibleDevice(device.cuda_index, device.nvml_index, mig), by_index.get(device.nvml_index))
            kept.append(chosen[0])
    usable = tuple(VisibleDevice(k, d.nvml_index, d.mig_uuid) for k, d in enumerate(kept))
    dropped = (_no_mig_device(empty),) if empty else ()
    if count <= 1 or chosen is None:
        return usable, dropped
    device, gpu = chosen
    assert device.mig_uuid is not None
    name = quoted(device.mig_uuid) if "/" in device.mig_uuid else device.mig_uuid
    instance = next((m for m in gpu.mig_instances if m.uuid == device.mig_uuid), None) if gpu else None
    if instance is not None:
        name += f", GPU {instance.label(device.nvml_index)}"
    if value is None:
        head = f"CUDA_VISIBLE_DEVICES is unset and the GPUs have {count} MIG devices"
    elif implied:
        head = f"CUDA_VISIBLE_DEVICES exposes {count} MIG devices (a MIG-enabled GPU counts as its MIG devices)"
    else:
        head = f"CUDA_VISIBLE_DEVICES lists {count} MIG devices"
    return usable, (*dropped, f"{head}: a CUDA process uses only the first ({name}){_SHOWING_IT}")


def _no_mig_device(indices: Sequence[int]) -> str:
    """Why MIG-enabled GPUs without a MIG device are left out of what CUDA exposes."""
    which = f"GPU {indices[0]} has" if len(indices) == 1 else f"GPUs {', '.join(map(str, indices))} have"
    return f"{which} MIG enabled and no MIG device configured: CUDA exposes nothing there"


def parse_cuda_visible_devices(
    value: str | None,
    gpus: Sequence[GpuStatic],
    environ: Mapping[str, str] | None = None,
) -> VisibleDevices:
    """Apply CUDA's rules for CUDA_VISIBLE_DEVICES to the GPUs NVML reports.

    - unset: every GPU; set but empty: none;
    - integers (read like ``strtol``: ``1abc`` is 1) or ``GPU-``/``MIG-`` UUIDs and
      unique UUID prefixes, and the legacy ``MIG-GPU-<uuid>/<gi>/<ci>``; the kind of
      the first entry decides, and an entry of the other kind ends the list;
    - the first invalid entry (negative, out of range, unknown UUID, ambiguous
      prefix, no digits, a legacy MIG entry whose GPU has no such GI/CI) ends the
      list: ``0,2,-1,1`` exposes 0 and 2;
    - an entry that repeats an earlier device exposes no device at all;
    - integers are positions in CUDA_DEVICE_ORDER. ``PCI_BUS_ID`` is NVML's order.
      For the default ``FASTEST_FIRST`` nvtopy also assumes NVML order, which is
      what CUDA does when all GPUs are the same model; with mixed models a warning
      says the mapping may differ.

    ``devices`` is what the list names. What a CUDA process can use of it
    (``usable``, :attr:`VisibleDevices.process_devices`) follows CUDA's MIG rule
    (MIG user guide, "CUDA Device Enumeration": a process enumerates a single MIG
    device): a GPU with MIG enabled is never used whole -- named whole (by index,
    by UUID, or because the variable is unset) it counts as its MIG devices -- and
    of all the MIG devices named, a process uses only the first (MIG device index
    order within a GPU named whole). The others are dropped, with one warning that
    says how many were listed and which one is used. GPUs without MIG named beside
    a MIG device are kept. (nvitop's NVML-only reading also drops those; the
    driver's behaviour with such a mix is not documented.)
    """
    environ = environ if environ is not None else {}
    ordered = sorted(gpus, key=lambda g: g.index)
    warnings: list[str] = []
    if value is None:
        every = tuple(VisibleDevice(i, g.index) for i, g in enumerate(ordered))
        usable, mig_warnings = _one_mig_device(every, ordered, value)
        return VisibleDevices(every, mig_warnings, usable)

    tokens = [t.strip() for t in value.split(",")]
    if not value.strip():
        return VisibleDevices(())
    uuid_mode = tokens[0].upper().startswith(("GPU-", "MIG-"))
    devices: list[VisibleDevice] = []
    seen: set[tuple[int, str | None]] = set()
    used_integers = False
    key: tuple[int, str | None]
    for token in tokens:
        if uuid_mode:
            upper = token.upper()
            if upper.startswith("MIG-"):
                hit = _mig_parent(token, ordered)
                if hit is None:
                    break
                gpu, mig = hit
                key = (gpu.index, mig.lower())
                device = VisibleDevice(len(devices), gpu.index, mig)
            elif upper.startswith("GPU-"):
                matches = _match_uuid(token, ordered)
                if len(matches) != 1:
                    break
                gpu = matches[0]
                key = (gpu.index, None)
                device = VisibleDevice(len(devices), gpu.index)
            else:
                break
        else:
            ordinal = _strtoul(token)
            if ordinal is None or ordinal >= len(ordered):
                break
            used_integers = True
            gpu = ordered[ordinal]
            key = (gpu.index, None)
            device = VisibleDevice(len(devices), gpu.index)
        if key in seen:
            return VisibleDevices((), ("CUDA_VISIBLE_DEVICES names a device twice: CUDA exposes no device",))
        seen.add(key)
        devices.append(device)

    order = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper() or "FASTEST_FIRST"
    if used_integers and order != "PCI_BUS_ID" and len({g.name for g in ordered}) > 1:
        warnings.append(
            "CUDA_DEVICE_ORDER is FASTEST_FIRST and the GPUs differ: nvtopy assumes PCI bus order, "
            "which CUDA may not use; set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs"
        )
    usable, mig_warnings = _one_mig_device(devices, ordered, value)
    return VisibleDevices(tuple(devices), (*warnings, *mig_warnings), usable)


class SelectionWarning(UserWarning):
    """A selection that works but may not mean what was meant (the Python API's category for selection warnings)."""


InstancePairs = tuple[tuple[int, tuple[str, ...]], ...]


@dataclass(frozen=True, slots=True)
class Selection:
    """The NVML indices a view shows, in order, the MIG devices it limits GPUs to, and the warnings to report.

    ``instance_pairs``: ``(GPU index, MIG device UUIDs)`` for each GPU shown only in
    part (a mapping is accepted too); read it as the mapping :attr:`instances`.
    A GPU not in it is shown whole. Kept as a tuple so a Selection stays immutable,
    comparable and hashable.
    """

    indices: tuple[int, ...]
    warnings: tuple[str, ...] = field(default=())
    instance_pairs: InstancePairs = field(default=())

    def __post_init__(self) -> None:
        pairs: Iterable[tuple[int, Iterable[str]]]
        raw = self.instance_pairs
        pairs = raw.items() if isinstance(raw, Mapping) else raw
        shown = set(self.indices)
        normalized: dict[int, tuple[str, ...]] = {}
        for index, uuids in pairs:
            listed = tuple(uuids)
            if index in shown and listed:
                normalized[index] = (*normalized.get(index, ()), *listed)
        order = {index: k for k, index in enumerate(self.indices)}
        object.__setattr__(self, "instance_pairs", tuple(sorted(normalized.items(), key=lambda pair: order[pair[0]])))
        object.__setattr__(self, "indices", tuple(self.indices))
        object.__setattr__(self, "warnings", tuple(self.warnings))

    @property
    def instances(self) -> Mapping[int, tuple[str, ...]]:
        """GPU index -> the MIG device UUIDs shown of it (``MIG-...``); GPUs shown whole are absent."""
        return MappingProxyType(dict(self.instance_pairs))


def _intersect(first: Selection, second: Selection) -> Selection:
    """GPUs in both, in ``first``'s order; a GPU's MIG devices are those both show (none in common: left out)."""
    mine, theirs = first.instances, second.instances
    indices: list[int] = []
    pairs: list[tuple[int, tuple[str, ...]]] = []
    for index in first.indices:
        if index not in second.indices:
            continue
        a, b = mine.get(index), theirs.get(index)
        if a is None and b is None:
            indices.append(index)
            continue
        if a is None or b is None:
            common = a if b is None else b
        else:
            allowed = {u.lower() for u in b}
            common = tuple(u for u in a if u.lower() in allowed)
        assert common is not None
        if common:
            indices.append(index)
            pairs.append((index, common))
    return Selection(tuple(indices), (*first.warnings, *second.warnings), tuple(pairs))


def select_gpus(
    statics: Sequence[GpuStatic],
    gpus: str | Sequence[int | str] | None = None,
    only_visible: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Selection:
    """Apply ``--gpus`` and ``--only-visible`` to the GPUs the backend reports; both = intersection.

    ``gpus``: a ``--gpus`` string, or a list of indices, PCI bus ids, UUID prefixes
    and MIG devices (:func:`resolve_gpu_selection`; its order is kept).
    ``only_visible``: what a CUDA process started with CUDA_VISIBLE_DEVICES in
    ``environ`` (default :data:`os.environ`) can use, in CUDA order when ``gpus``
    is not given: its GPUs, and of a MIG-enabled GPU the one MIG device CUDA's
    rule leaves (:func:`parse_cuda_visible_devices`; a warning says so when the
    variable exposes several). Neither: every GPU, whole, in NVML order.

    Both: the GPUs both name, in ``gpus``' order, each limited to the MIG devices
    both show of it (``--gpus 1`` and a visible MIG device of GPU 1: that device;
    different MIG devices of one GPU: the GPU is left out). A selection of nothing from GPUs
    that are there carries a warning saying why (the two options have no GPU in common,
    CUDA_VISIBLE_DEVICES is empty or names none of them).

    Raises :class:`~nvtopy.errors.SelectionError` for an entry of ``gpus`` that
    names no GPU or MIG device, or several.
    """
    if gpus is None and not only_visible:
        return Selection(tuple(g.index for g in statics))
    chosen: Selection | None = None
    spec = ""
    if gpus is not None:
        spec = gpus if isinstance(gpus, str) else ",".join(str(g) for g in gpus)
        chosen = resolve_gpu_selection(spec, statics)
    if not only_visible:
        assert chosen is not None
        return chosen
    environ = os.environ if environ is None else environ
    value = environ.get("CUDA_VISIBLE_DEVICES")
    visible = parse_cuda_visible_devices(value, statics, environ)
    exposed = Selection(tuple(visible.nvml_indices), visible.warnings, tuple(visible.instances.items()))
    if chosen is None:
        if exposed.indices or not statics or visible.warnings:  # shown, nothing to show, or already said why
            return exposed
        return Selection((), (_nothing_exposed(value, statics),))
    both = _intersect(chosen, exposed)
    warnings = both.warnings
    used = next((d for d in visible.process_devices if d.mig_uuid is not None), None)
    if used is not None and used.nvml_index not in both.indices:
        # The MIG device CUDA's rule leaves is not shown (--gpus left it out): its warning would say otherwise.
        warnings = tuple(w for w in warnings if not w.endswith(_SHOWING_IT))
    if not both.indices:  # a view of nothing says why, never a bare "No GPUs selected"
        warnings = (
            *warnings,
            f"--gpus {quoted(spec)} and --only-visible have nothing in common: {_exposes(value, exposed)}",
        )
    return Selection(both.indices, warnings, both.instance_pairs)


def _cvd_words(value: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES='1'`` or ``CUDA_VISIBLE_DEVICES (unset)``, for a message (the value quoted and cut)."""
    return "CUDA_VISIBLE_DEVICES (unset)" if value is None else f"CUDA_VISIBLE_DEVICES={quoted(value)}"


def _nothing_exposed(value: str | None, statics: Sequence[GpuStatic]) -> str:
    """Why ``--only-visible`` shows nothing when no other warning says it (an empty or unmatched variable)."""
    if value is not None and not value.strip():
        return "CUDA_VISIBLE_DEVICES is set but empty: CUDA exposes no GPU"
    return (
        f"{_cvd_words(value)} names no GPU here: CUDA stops at its first entry that names none ({_describe(statics)})"
    )


def _exposes(value: str | None, exposed: Selection) -> str:
    """What CUDA_VISIBLE_DEVICES exposes, in words: ``CUDA_VISIBLE_DEVICES='1' exposes GPU 1 only``."""
    if not exposed.indices:
        return f"{_cvd_words(value)} exposes no GPU"
    instances = exposed.instances
    shown = [f"GPU {i}" + (f" ({', '.join(instances[i])})" if i in instances else "") for i in exposed.indices]
    return f"{_cvd_words(value)} exposes {', '.join(shown)} only"


# ----------------------------------------------------------------- narrowing a GPU to MIG instances

ChosenInstances = frozenset[MigKey]
"""MIG instances chosen to be shown, of any GPUs: a GPU none of them is on is shown whole (the caller's rule)."""


def instances_named(static: GpuStatic, uuids: Iterable[str]) -> ChosenInstances:
    """The instances of ``static`` whose UUIDs are among ``uuids`` (``MIG-...``, any case): a
    :class:`Selection`'s :attr:`~Selection.instances` of one GPU, as keys. An instance without a UUID is
    never named."""
    wanted = {uuid.lower() for uuid in uuids}
    return frozenset(m.key(static.index) for m in static.mig_instances if m.uuid and m.uuid.lower() in wanted)


def narrow_to_instances(gpu: GpuState, chosen: Collection[MigKey]) -> GpuState:
    """``gpu`` with only the MIG instances of it in ``chosen``: their readings and the processes on them.

    The GPU's own readings (memory, temperature, power, health) stay: the instances share the board.
    Keys of other GPUs are ignored; none of this one leaves it no instance and no process (whether a
    GPU is narrowed at all is the caller's to say). The snapshot given is never changed.
    """
    keys = frozenset(key for key in chosen if key.gpu_index == gpu.index)
    kept = tuple(m for m in gpu.static.mig_instances if m.key(gpu.index) in keys)
    indices = {m.index for m in kept}
    sample = gpu.sample
    if sample.mig_usage is not None:
        sample = dataclasses.replace(sample, mig_usage=tuple(u for u in sample.mig_usage if u.index in indices))
    return dataclasses.replace(
        gpu,
        static=dataclasses.replace(gpu.static, mig_instances=kept),
        sample=sample,
        processes=tuple(p for p in gpu.processes if any(key.runs(p) for key in keys)),
    )
