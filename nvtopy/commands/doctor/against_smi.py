"""``nvtopy doctor --against-nvidia-smi [FILE]``: nvtopy's figures beside nvidia-smi's, field by field.

Why: users judge a monitor first by whether its numbers match ``nvidia-smi`` on
their card, driver and platform. This runs ``nvidia-smi -q -x`` (or reads a
saved ``-q -x`` / ``-q`` capture), reads the same GPUs through nvtopy's own
path (the one ``--once --json`` takes), pairs them by UUID, else by PCI bus id,
and says for each field whether the two agree.

Values that move between two reads are compared within a stated tolerance
(:data:`TOLERANCES`); static ones (identity, totals, limits, modes, ECC
counters) exactly. N/A on both sides agrees; N/A on one side only does not.
The performance state may change between the reads as well (nvidia-smi itself
wakes an idle GPU), so a different P-state is a warning, not a disagreement.

Exit status: 0 when everything agrees, 1 on a disagreement outside tolerance (a
GPU only one side sees included), 2 when the file cannot be read as nvidia-smi
output. nvidia-smi missing, failing or not answering within ``--timeout`` is
one line and exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..._version import __version__
from ...boundedfile import FileRefusedError, read_bounded
from ...errors import NvtopyError, UsageError
from ...formats.nvidia_smi import MAX_BYTES, SmiError, SmiGpu, SmiLog, parse_nvidia_smi
from ...textsafe import escape_text, safe_text
from .. import options

__all__ = ["TOLERANCES", "Row", "compare", "read_nvtopy", "render_json", "render_text", "run", "run_nvidia_smi"]

SCHEMA_VERSION = 1
MIB = 1 << 20

# The tolerance of each kind of moving value, in its unit: what two reads a moment apart may differ by.
TOLERANCES: dict[str, tuple[float, str]] = {
    "utilization": (10.0, "points"),
    "power": (10.0, "W"),
    "temperature": (3.0, "°C"),
    "clock": (150.0, "MHz"),
    "memory": (64.0, "MiB"),
}


@dataclass(frozen=True, slots=True)
class Field:
    """One compared field: nvidia-smi's key (:mod:`~nvtopy.formats.nvidia_smi`), nvtopy's contract key, how."""

    key: str  # nvidia-smi's field (nvidia_smi.SmiGpu.fields)
    label: str
    ours: str  # the key in nvtopy's --once --json GPU object
    unit: str = ""
    tolerance: str | None = None  # a TOLERANCES key: moving; None: exact
    scale: float = 1.0  # nvtopy's value / scale = nvidia-smi's unit
    warn_only: bool = False  # a state that may change between the reads


FIELDS: tuple[Field, ...] = (
    Field("name", "name", "name"),
    Field("serial", "serial", "serial"),
    Field("memory_total_mib", "memory total", "memory_total_bytes", "MiB", scale=MIB),
    Field("memory_reserved_mib", "memory reserved", "memory_reserved_bytes", "MiB", scale=MIB),
    Field("memory_used_mib", "memory used", "memory_used_bytes", "MiB", "memory", MIB),
    Field("utilization_gpu_percent", "GPU utilisation", "utilization_gpu_percent", "%", "utilization"),
    Field("utilization_memory_percent", "memory utilisation", "utilization_memory_percent", "%", "utilization"),
    Field("encoder_percent", "encoder", "encoder_percent", "%", "utilization"),
    Field("decoder_percent", "decoder", "decoder_percent", "%", "utilization"),
    Field("temperature_c", "temperature", "temperature_c", "°C", "temperature"),
    Field("temperature_slowdown_c", "slowdown temperature", "temperature_slowdown_c", "°C"),
    Field("temperature_shutdown_c", "shutdown temperature", "temperature_shutdown_c", "°C"),
    Field("fan_percent", "fan", "fan_percent", "%", "utilization"),
    Field("power_draw_w", "power draw", "power_draw_w", "W", "power"),
    Field("power_limit_w", "power limit", "power_limit_w", "W"),
    Field("power_default_limit_w", "default power limit", "power_default_limit_w", "W"),
    Field("power_min_limit_w", "min power limit", "power_min_limit_w", "W"),
    Field("power_max_limit_w", "max power limit", "power_max_limit_w", "W"),
    Field("clock_sm_mhz", "SM clock", "clock_sm_mhz", "MHz", "clock"),
    Field("clock_mem_mhz", "memory clock", "clock_mem_mhz", "MHz", "clock"),
    Field("clock_sm_max_mhz", "max SM clock", "clock_sm_max_mhz", "MHz"),
    Field("clock_mem_max_mhz", "max memory clock", "clock_mem_max_mhz", "MHz"),
    Field("pstate", "performance state", "pstate", warn_only=True),
    Field("persistence_mode", "persistence mode", "persistence_mode"),
    Field("compute_mode", "compute mode", "compute_mode"),
    Field("ecc_mode", "ECC mode", "ecc_mode"),
    Field("ecc_corrected_volatile", "ECC corrected (volatile)", "ecc_corrected_volatile"),
    Field("ecc_uncorrected_volatile", "ECC uncorrected (volatile)", "ecc_uncorrected_volatile"),
    Field("ecc_corrected_aggregate", "ECC corrected (aggregate)", "ecc_corrected_aggregate"),
    Field("ecc_uncorrected_aggregate", "ECC uncorrected (aggregate)", "ecc_uncorrected_aggregate"),
    Field("mig_mode", "MIG mode", "mig_mode"),
    Field("mig_mode_pending", "MIG mode pending", "mig_mode_pending"),
)

AGREE, DIFFER, WARN = "agree", "differ", "warn"


@dataclass(frozen=True, slots=True)
class Row:
    """One comparison: ``gpu`` names the GPU (``None``: the machine), ``status`` agree / differ / warn."""

    gpu: str | None
    field: str
    nvidia_smi: Any
    nvtopy: Any
    status: str
    unit: str = ""
    detail: str | None = None


# --------------------------------------------------------------------- comparing


def _figure(value: Any, unit: str) -> str:
    """A figure as nvidia-smi writes it: ``N/A``, ``Enabled``, ``300 W`` (a whole float without its ``.0``)."""
    if value is None:
        return "N/A"
    if isinstance(value, bool):
        return "Enabled" if value else "Disabled"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value} {unit}".strip() if unit else str(value)


def _same_text(a: str, b: str) -> bool:
    def norm(text: str) -> str:
        return text.replace("_", " ").strip().lower()

    return norm(a) == norm(b)


def _compare_one(gpu: str | None, spec: Field, theirs: Any, ours_raw: Any) -> Row:
    ours = ours_raw
    if isinstance(ours_raw, int | float) and not isinstance(ours_raw, bool) and spec.scale != 1.0:
        ours = round(ours_raw / spec.scale, 1)
    row = Row(gpu, spec.label, theirs, ours, AGREE, spec.unit)
    if theirs is None or ours is None:
        if theirs is None and ours is None:
            return row
        side = "nvidia-smi" if theirs is None else "nvtopy"
        return Row(gpu, spec.label, theirs, ours, DIFFER, spec.unit, f"N/A in {side} only")
    if isinstance(theirs, bool) or isinstance(ours, bool) or isinstance(theirs, str) or isinstance(ours, str):
        same = _same_text(str(theirs), str(ours)) if isinstance(theirs, str) else theirs == ours
        if same:
            return row
        status = WARN if spec.warn_only else DIFFER
        detail = "may change between the two reads" if spec.warn_only else None
        return Row(gpu, spec.label, theirs, ours, status, spec.unit, detail)
    off = abs(float(theirs) - float(ours))
    if spec.tolerance is None:
        unit = spec.unit
        if spec.scale != 1.0 and _whole_unit_of(theirs, ours_raw / spec.scale):
            return row
        limit = 0.0 if spec.scale != 1.0 else 0.005  # watts to the centiwatt: a rounding's worth is no disagreement
    else:
        limit, unit = TOLERANCES[spec.tolerance]
    if off <= limit:
        return row
    said = f"off by {_figure(round(off, 2), unit)}"
    said += f", tolerance ±{_figure(limit, unit)}" if spec.tolerance else ", must be equal"
    return Row(gpu, spec.label, theirs, ours, DIFFER, spec.unit, said)


def _whole_unit_of(theirs: Any, exact: float) -> bool:
    """Whether nvidia-smi's whole figure is ``exact`` (nvtopy's bytes in MiB) rounded down or up.

    nvidia-smi prints whole MiB and rounds down on some drivers, up on others: a real H200 on
    580.159.04 showed 615.06 MiB reserved as 616, and in the 61 captures reserved + used + free
    differ from total by -2 to +2. Either whole MiB next to the exact figure agrees; one further off does not.
    """
    if not isinstance(theirs, int | float) or not math.isfinite(exact):
        return False
    return math.floor(exact) <= theirs <= math.ceil(exact)


def _gpu_name(smi: SmiGpu | None, ours: dict[str, Any] | None) -> str:
    """How a GPU is named in the rows: nvidia-smi's index, its UUID (else bus id)."""
    uuid = (smi.uuid if smi else None) or (ours.get("uuid") if ours else None)
    bus = (smi.bus_id if smi else None) or (ours.get("bus_id") if ours else None)
    index = ours.get("index") if ours else smi.position if smi else None
    return f"GPU {index} {uuid or bus or '(no UUID or bus id)'}"


def _norm_bus(bus: Any) -> str | None:
    if not isinstance(bus, str):
        return None
    head, _, rest = bus.upper().rpartition(":")
    domain, _, bus_no = head.partition(":")
    try:
        return f"{int(domain, 16):08X}:{int(bus_no, 16):02X}:{rest}"
    except ValueError:
        return bus.upper()


def _pair(
    smi_gpus: Sequence[SmiGpu], ours: Sequence[dict[str, Any]]
) -> list[tuple[SmiGpu | None, dict[str, Any] | None]]:
    """Pairs by UUID, else by PCI bus id; what one side alone has is paired with ``None``."""
    left = list(ours)
    pairs: list[tuple[SmiGpu | None, dict[str, Any] | None]] = []
    for smi in smi_gpus:
        match = next((g for g in left if smi.uuid and g.get("uuid") == smi.uuid), None)
        if match is None and smi.bus_id:
            match = next((g for g in left if _norm_bus(g.get("bus_id")) == _norm_bus(smi.bus_id)), None)
        if match is not None:
            left.remove(match)
        pairs.append((smi, match))
    pairs += [(None, g) for g in left]
    return pairs


def compare(log: SmiLog, ours: dict[str, Any], *, selected_only: bool = False) -> list[Row]:
    """Every row: the machine's versions, then each GPU's fields; a GPU one side lacks is one DIFFER row.

    ``ours`` is nvtopy's snapshot as ``--once --json`` writes it. ``selected_only``:
    nvtopy read only some GPUs (``--gpus``), so nvidia-smi's others are not missing.
    """
    rows: list[Row] = []
    for label, theirs, key in (
        ("driver version", log.driver_version, "driver_version"),
        ("CUDA version", log.cuda_version, "cuda_driver_version"),
    ):
        rows.append(_compare_one(None, Field(key, label, key), theirs, ours.get(key)))
    for smi, gpu in _pair(log.gpus, ours.get("gpus") or []):
        name = _gpu_name(smi, gpu)
        if gpu is None:
            if not selected_only:
                rows.append(Row(name, "GPU", "present", "absent", DIFFER, detail="nvidia-smi lists it, nvtopy not"))
            continue
        if smi is None:
            rows.append(Row(name, "GPU", "absent", "present", DIFFER, detail="nvtopy reads it, nvidia-smi lists none"))
            continue
        for key, theirs in (("uuid", smi.uuid), ("bus_id", smi.bus_id)):
            if theirs is not None:
                same = _norm_bus(theirs) == _norm_bus(gpu.get(key)) if key == "bus_id" else theirs == gpu.get(key)
                rows.append(Row(name, key.replace("_", " "), theirs, gpu.get(key), AGREE if same else DIFFER))
        for spec in FIELDS:
            if spec.key in smi.fields:  # nvidia-smi printed it (a value or N/A)
                rows.append(_compare_one(name, spec, smi.fields[spec.key], gpu.get(spec.ours)))
    return rows


def exit_code(rows: Sequence[Row]) -> int:
    return 1 if any(r.status == DIFFER for r in rows) else 0


def _counts(rows: Sequence[Row]) -> dict[str, int]:
    return {status: sum(1 for r in rows if r.status == status) for status in (AGREE, DIFFER, WARN)}


# --------------------------------------------------------------------- output


def tolerances_text() -> str:
    kinds = ", ".join(f"{kind} ±{value:g} {unit}" for kind, (value, unit) in TOLERANCES.items())
    return f"moving values within {kinds}; static values exactly, MiB to nvidia-smi's whole MiB either side"


def render_text(rows: Sequence[Row], source: str, out: IO[str]) -> None:
    """The rows grouped by GPU: status, field, nvidia-smi's value, nvtopy's, and why they differ."""
    lines = [f"nvtopy doctor --against-nvidia-smi: {safe_text(source)}", f"({tolerances_text()})", ""]
    width = max((len(r.field) for r in rows), default=0)
    group: object = object()
    for row in rows:
        if row.gpu != group:
            group = row.gpu
            lines.append(safe_text(row.gpu) if row.gpu is not None else "machine")
        word = {AGREE: "agree", DIFFER: "DIFFER", WARN: "warn"}[row.status]
        theirs = safe_text(_figure(row.nvidia_smi, row.unit))
        if row.status == AGREE:
            lines.append(f"  {word:<7} {row.field:<{width}}  {theirs}")
            continue
        ours = safe_text(_figure(row.nvtopy, row.unit))
        line = f"  {word:<7} {row.field:<{width}}  nvidia-smi {theirs}, nvtopy {ours}"
        lines.append(f"{line}: {safe_text(row.detail)}" if row.detail else line)
    counts = _counts(rows)
    verdict = "DIFFER" if counts[DIFFER] else "AGREE"
    lines += [
        "",
        f"{verdict}: {counts[AGREE]} agree, {counts[DIFFER]} differ, {counts[WARN]} warn (exit {exit_code(rows)})",
    ]
    out.write("\n".join(lines) + "\n")


def _json_value(value: Any) -> Any:
    return escape_text(value) if isinstance(value, str) else value


def render_json(rows: Sequence[Row], source: str) -> str:
    counts = _counts(rows)
    data = {
        "nvtopy_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "source": escape_text(source),
        "tolerances": {kind: {"value": value, "unit": unit} for kind, (value, unit) in TOLERANCES.items()},
        "status": DIFFER if counts[DIFFER] else AGREE,
        "exit_code": exit_code(rows),
        "counts": counts,
        "rows": [
            {
                "gpu": _json_value(r.gpu),
                "field": r.field,
                "nvidia_smi": _json_value(r.nvidia_smi),
                "nvtopy": _json_value(r.nvtopy),
                "unit": r.unit,
                "status": r.status,
                "detail": _json_value(r.detail),
            }
            for r in rows
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False)


# --------------------------------------------------------------------- reading both sides


def run_nvidia_smi(timeout_s: float, program: str = "nvidia-smi") -> bytes:
    """``nvidia-smi -q -x``'s output, within ``timeout_s`` and :data:`MAX_BYTES`; one-line NvtopyError otherwise.

    Why a file and not a pipe: the output is bounded by size at the end, and a
    child that leaves a grandchild holding the pipe cannot keep us waiting. The
    child runs in its own session so a hung one is killed with what it started.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                [program, "-q", "-x"], stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        except FileNotFoundError:
            raise NvtopyError(
                "nvidia-smi is not installed (not on PATH): pass a saved 'nvidia-smi -q -x' capture as FILE"
            ) from None
        except OSError as exc:
            raise NvtopyError(f"cannot run nvidia-smi: {exc.strerror or exc}") from None
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise NvtopyError(
                f"nvidia-smi did not answer within {timeout_s:g} s (the driver may be stuck: read "
                "'sudo dmesg | grep -i xid'); --timeout sets how long to wait"
            ) from None
        if code != 0:
            err.seek(0)
            said = err.read(400).decode("utf-8", "replace").strip().splitlines()
            out.seek(0)
            said = said or out.read(400).decode("utf-8", "replace").strip().splitlines()
            raise NvtopyError(f"nvidia-smi failed (exit {code}): {said[0] if said else 'no message'}")
        size = out.seek(0, os.SEEK_END)
        if size > MAX_BYTES:
            raise NvtopyError(f"nvidia-smi wrote more than {MAX_BYTES >> 20} MiB: not read")
        out.seek(0)
        return out.read(MAX_BYTES)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """End the child and whatever it started (its own session), waiting at most a moment."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):  # stuck in the kernel: left behind, as a driver call
        proc.wait(2.0)


def read_capture(path: str) -> SmiLog:
    """A saved capture, bounded; a file that is not nvidia-smi output is a usage error (exit 2)."""
    try:
        data = read_bounded(path, MAX_BYTES)
    except FileRefusedError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    try:
        return parse_nvidia_smi(data)
    except SmiError as exc:
        raise UsageError(f"{path} is not nvidia-smi -q -x or -q output: {exc}") from None


def read_nvtopy(args: argparse.Namespace) -> dict[str, Any]:
    """nvtopy's own snapshot of the GPUs, as ``--once --json`` reads and writes it, within ``--timeout``."""
    from ...formats.contract import snapshot_to_dict

    snapshot, _ = options.read_one_snapshot(args)
    return snapshot_to_dict(snapshot, processes=False)


def run(
    args: argparse.Namespace,
    write_json: Callable[[str], object],
    *,
    nvidia_smi: Callable[[float], bytes] = run_nvidia_smi,
) -> int:
    """Read nvidia-smi's view (the file, else the command), then nvtopy's, compare and print; exit per the rows.

    ``write_json`` writes the JSON document (:func:`nvtopy.commands.options.write_utf8`); text goes to stdout.
    """
    path = args.against_nvidia_smi
    if path:
        log, source = read_capture(path), path
    else:
        data = nvidia_smi(args.timeout)
        try:
            log = parse_nvidia_smi(data)
        except SmiError as exc:
            raise NvtopyError(f"nvidia-smi -q -x wrote what nvtopy cannot read: {exc}") from None
        source = "nvidia-smi -q -x"
    ours = read_nvtopy(args)
    rows = compare(log, ours, selected_only=args.gpus is not None or args.only_visible)
    if args.json:
        write_json(render_json(rows, source) + "\n")
    else:
        render_text(rows, source, sys.stdout)
    return exit_code(rows)
