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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import SelectionError
from .model import GpuStatic

__all__ = [
    "Selection",
    "SelectionWarning",
    "VisibleDevice",
    "VisibleDevices",
    "format_bus_id",
    "parse_bus_id",
    "parse_cuda_visible_devices",
    "resolve_gpu_list",
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
# More digits than this (leading zeros aside) is no GPU index and no CUDA ordinal: out of range.
_MAX_DIGITS = 9


def _small_int(digits: str) -> int | None:
    """The value of a string of ASCII digits, or ``None`` when it is too large to name a device.

    Never ``int()`` of a long string: Python refuses more than 4,300 digits (ValueError).
    """
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_DIGITS else None


def _shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters (a 5,000-digit entry stays one short line)."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


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
        items.append(" ".join(parts))
    return "available: " + ", ".join(items)


def _match_uuid(entry: str, gpus: Sequence[GpuStatic]) -> list[GpuStatic]:
    """GPUs whose UUID starts with ``entry`` (case-insensitive; the ``GPU-`` prefix is optional)."""
    needle = entry.lower()
    if not needle.startswith("gpu-"):
        needle = "gpu-" + needle
    exact = [g for g in gpus if g.uuid and g.uuid.lower() == needle]
    if exact:
        return exact
    return [g for g in gpus if g.uuid and g.uuid.lower().startswith(needle)]


def resolve_gpu_list(spec: str, gpus: Sequence[GpuStatic]) -> list[int]:
    """Resolve a ``--gpus`` value to NVML indices, in the order given, without duplicates.

    Entries are indices (``0``), PCI bus ids in any form (``3b:00.0``,
    ``0000:3b:00.0``, ``00000000:3B:00.0``) or UUIDs and unique UUID prefixes
    (``GPU-5e3f``, ``5e3f0c1a``). An entry that matches nothing, or a prefix that
    matches several GPUs, raises :class:`SelectionError` naming it.
    """
    by_index = {g.index: g for g in gpus}
    by_bus = {parse_bus_id(g.bus_id): g for g in gpus if g.bus_id}
    chosen: list[int] = []
    entries = spec.split(",")
    for raw in entries:
        entry = raw.strip()
        if not entry:
            raise SelectionError(f"--gpus: empty entry in {_shown(spec)} ({_describe(gpus)})")
        matches: list[GpuStatic]
        if _DIGITS_RE.match(entry):
            gpu = by_index.get(_small_int(entry))  # 5,000 digits name no GPU: no int() of them
            matches = [gpu] if gpu else []
        elif (bus := parse_bus_id(entry)) is not None:
            gpu = by_bus.get(bus)
            matches = [gpu] if gpu else []
        elif entry.lower().startswith("mig-"):
            raise SelectionError(
                f"--gpus: {_shown(entry)} is a MIG device; name its parent GPU instead ({_describe(gpus)})"
            )
        elif _UUID_BODY_RE.match(entry[4:] if entry.lower().startswith("gpu-") else entry):
            matches = _match_uuid(entry, gpus)
        else:
            matches = []
        if not matches:
            raise SelectionError(f"--gpus: no GPU matches {_shown(entry)} ({_describe(gpus)})")
        if len(matches) > 1:
            which = ", ".join(str(g.index) for g in matches)
            raise SelectionError(f"--gpus: {_shown(entry)} matches GPUs {which}; give more of the UUID")
        if matches[0].index not in chosen:
            chosen.append(matches[0].index)
    return chosen


@dataclass(frozen=True, slots=True)
class VisibleDevice:
    """One CUDA device: its CUDA ordinal, the NVML GPU behind it, and the MIG instance if any."""

    cuda_index: int
    nvml_index: int
    mig_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class VisibleDevices:
    """The result of applying CUDA_VISIBLE_DEVICES: devices in CUDA order, plus warnings to show."""

    devices: tuple[VisibleDevice, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def nvml_indices(self) -> list[int]:
        """Distinct physical GPUs, in CUDA order (several MIG devices share one GPU)."""
        seen: list[int] = []
        for device in self.devices:
            if device.nvml_index not in seen:
                seen.append(device.nvml_index)
        return seen


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
    """Resolve ``MIG-<uuid>`` (CUDA 11.1+) or ``MIG-GPU-<uuid>/<gi>/<ci>`` (older) to its parent."""
    body = token[4:]
    if body.upper().startswith("GPU-"):  # legacy form names the parent directly
        parent_uuid = body.split("/", 1)[0]
        matches = _match_uuid(parent_uuid, gpus)
        return (matches[0], token) if len(matches) == 1 else None
    needle = token.lower()
    hits = [(g, m) for g in gpus for m in g.mig_devices if m.lower().startswith(needle)]
    if len(hits) != 1:
        return None
    return hits[0]


def parse_cuda_visible_devices(
    value: str | None,
    gpus: Sequence[GpuStatic],
    environ: Mapping[str, str] | None = None,
) -> VisibleDevices:
    """Apply CUDA's rules for CUDA_VISIBLE_DEVICES to the GPUs NVML reports.

    - unset: every GPU; set but empty: none;
    - integers (read like ``strtol``: ``1abc`` is 1) or ``GPU-``/``MIG-`` UUIDs and
      unique UUID prefixes; the kind of the first entry decides, and an entry of
      the other kind ends the list;
    - the first invalid entry (negative, out of range, unknown UUID, ambiguous
      prefix, no digits) ends the list: ``0,2,-1,1`` exposes 0 and 2;
    - an entry that repeats an earlier device exposes no device at all;
    - integers are positions in CUDA_DEVICE_ORDER. ``PCI_BUS_ID`` is NVML's order.
      For the default ``FASTEST_FIRST`` nvtopy also assumes NVML order, which is
      what CUDA does when all GPUs are the same model; with mixed models a warning
      says the mapping may differ.
    """
    environ = environ if environ is not None else {}
    ordered = sorted(gpus, key=lambda g: g.index)
    warnings: list[str] = []
    if value is None:
        return VisibleDevices(tuple(VisibleDevice(i, g.index) for i, g in enumerate(ordered)))

    tokens = [t.strip() for t in value.split(",")]
    if not value.strip():
        return VisibleDevices(())
    uuid_mode = tokens[0].upper().startswith(("GPU-", "MIG-"))
    devices: list[VisibleDevice] = []
    seen: set[tuple[int, str | None]] = set()
    used_integers = False
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
    return VisibleDevices(tuple(devices), tuple(warnings))


class SelectionWarning(UserWarning):
    """A selection that works but may not mean what was meant (the Python API's category for selection warnings)."""


@dataclass(frozen=True, slots=True)
class Selection:
    """The NVML indices a view shows, in order, and the warnings to report (see the module docstring)."""

    indices: tuple[int, ...]
    warnings: tuple[str, ...] = field(default=())


def select_gpus(
    statics: Sequence[GpuStatic],
    gpus: str | Sequence[int | str] | None = None,
    only_visible: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Selection:
    """Apply ``--gpus`` and ``--only-visible`` to the GPUs the backend reports; both = intersection.

    ``gpus``: a ``--gpus`` string, or a list of indices, PCI bus ids and UUID
    prefixes (:func:`resolve_gpu_list`; its order is kept). ``only_visible``: the
    GPUs CUDA_VISIBLE_DEVICES exposes in ``environ`` (default :data:`os.environ`),
    in CUDA order when ``gpus`` is not given. Neither: every GPU, in NVML order.
    Raises :class:`~nvtopy.errors.SelectionError` for an entry of ``gpus`` that
    names no GPU or several.
    """
    indices = [g.index for g in statics]
    if gpus is None and not only_visible:
        return Selection(tuple(indices))
    if gpus is not None:
        spec = gpus if isinstance(gpus, str) else ",".join(str(g) for g in gpus)
        indices = resolve_gpu_list(spec, statics)
    warnings: tuple[str, ...] = ()
    if only_visible:
        environ = os.environ if environ is None else environ
        visible = parse_cuda_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), statics, environ)
        warnings = visible.warnings
        allowed = visible.nvml_indices
        indices = [i for i in indices if i in allowed] if gpus is not None else allowed
    return Selection(tuple(indices), warnings)
