"""dcgm-exporter's naming generations -- legacy (3.x to 4.8) and 4.9 -- one table for writers and readers.

Why a module of its own: dcgm-exporter 4.9.0 (DCGM 4.7) renamed 23 of its default and
profiling fields to DCGM's canonical names, changed the unit of eleven of them, renamed the
driver label, and 4.8.3 had already renamed the host label. nvtopy writes either naming
(``nvtopy exporter --names``) and reads every generation, per host, into the model's units.
The sources and what is unconfirmed are in ``docs/dcgm-names.md``; in short:

- **Renamed** (:data:`RENAMES_4_9`): each legacy field of :mod:`nvtopy.formats.dcgm` that
  dcgm-exporter 4.9 exports under a new name, with the factor from the legacy unit to the new
  one: clocks MHz -> Hz (x 1e6), energy mJ -> J (/ 1000), utilisation % -> ratio (/ 100),
  framebuffer MiB -> bytes (x 1048576). ``DCGM_FI_DEV_FB_TOTAL`` (never one of dcgm-exporter's
  defaults) is written as 4.9's new default ``DCGM_FI_DEV_FB_CAPACITY_BYTES``.
- **Kept**: a field with no documented 4.9 name (P-state, fan, ECC, retired pages, PCIe link,
  throttle reasons, power limit, slowdown temperature; the PCIe and NVLink byte rates, which
  4.9 keeps) keeps its name: DCGM keeps the old names as deprecated aliases.
- **Left out** in both: ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` (MB/s; 4.9's
  ``..._NVLINK_THROUGHPUT_BYTES_PER_SECOND``): whether it counts headers, and both directions,
  is documented nowhere; nvtopy's own ``nvtopy_nvlink_*`` series carry NVLink throughput.
- **Labels**: the host is ``Hostname`` up to 4.8.2 and ``hostname`` from 4.8.3; the driver
  ``DCGM_FI_DRIVER_VERSION`` up to 4.8 and ``DCGM_FI_SYSTEM_DRIVER_VERSION`` in 4.9; the UUID
  ``uuid`` with dcgm-exporter's ``--use-old-namespace``. Readers take either spelling
  (:data:`HOST_LABELS`, :data:`DRIVER_LABELS`, :data:`UUID_LABELS`); writers write their naming's.

A reader normalises a series it reads with :func:`legacy_reading`: the legacy name and the value in
the legacy unit, then goes on as for a legacy series -- one path, so a fleet in the middle of an
upgrade shows every GPU with the same figures whichever generation its exporter speaks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..model import GpuState, HostInfo
from .dcgm import FIELDS, MIB, DcgmField

__all__ = [
    "DEFAULT_NAMING",
    "DRIVER_LABELS",
    "HOST_LABELS",
    "LEGACY",
    "NAMINGS",
    "NAMING_4_9",
    "READ_ALIASES",
    "RENAMES_4_9",
    "UUID_LABELS",
    "Naming",
    "Rename",
    "first_label",
    "legacy_reading",
]


@dataclass(frozen=True, slots=True)
class Rename:
    """A legacy field's 4.9 name and unit: ``new value = legacy value * scale``."""

    legacy: str
    new: str
    scale: float
    help: str  # the 4.9 series' help text (dcgm-exporter's 4.9 texts are unconfirmed: these say the unit)


_PERCENT_TO_RATIO = 0.01
_MHZ_TO_HZ = 1e6
_MJ_TO_J = 1e-3

RENAMES_4_9: tuple[Rename, ...] = (
    Rename("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", _PERCENT_TO_RATIO, "GPU utilization (ratio 0-1)."),
    Rename(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        _PERCENT_TO_RATIO,
        "Memory utilization (ratio 0-1).",
    ),
    Rename("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_ENC_UTIL_RATIO", _PERCENT_TO_RATIO, "Encoder utilization (ratio 0-1)."),
    Rename("DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_DEC_UTIL_RATIO", _PERCENT_TO_RATIO, "Decoder utilization (ratio 0-1)."),
    Rename("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", MIB, "Framebuffer memory used (in bytes)."),
    Rename("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", MIB, "Framebuffer memory free (in bytes)."),
    Rename("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED_BYTES", MIB, "Framebuffer memory reserved (in bytes)."),
    Rename("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES", MIB, "Total framebuffer memory (in bytes)."),
    Rename("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0, "GPU temperature (in C)."),
    Rename("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0, "Board power draw (in W)."),
    Rename(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        _MJ_TO_J,
        "Total energy consumption since the driver was loaded (in J).",
    ),
    Rename("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", _MHZ_TO_HZ, "SM clock frequency (in Hz)."),
    Rename("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", _MHZ_TO_HZ, "Memory clock frequency (in Hz)."),
    Rename("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 1.0, "Value of the last XID error encountered."),
    Rename("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", 1.0, "Total number of PCIe retries."),
    Rename(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
        1.0,
        "Number of remapped rows for correctable errors.",
    ),
    Rename(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
        1.0,
        "Number of remapped rows for uncorrectable errors.",
    ),
    Rename(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED", 1.0, "Whether remapping of rows has failed."
    ),
    Rename(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        1.0,
        "Ratio of time the graphics engine is active.",
    ),
    Rename(
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_UTIL_RATIO",
        1.0,
        "The ratio of cycles an SM has at least 1 warp assigned.",
    ),
    Rename(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
        1.0,
        "The ratio of number of warps resident on an SM.",
    ),
    Rename(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        1.0,
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    Rename(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_DRAM_UTIL_RATIO",
        1.0,
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    Rename(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_FP64_UTIL_RATIO",
        1.0,
        "Ratio of cycles the fp64 pipes are active.",
    ),
    Rename(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_FP32_UTIL_RATIO",
        1.0,
        "Ratio of cycles the fp32 pipes are active.",
    ),
    Rename(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_FP16_UTIL_RATIO",
        1.0,
        "Ratio of cycles the fp16 pipes are active.",
    ),
)

# Reading: either spelling of a label, the newer first (a series carries one of them).
HOST_LABELS = ("hostname", "Hostname")
DRIVER_LABELS = ("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION")
UUID_LABELS = ("UUID", "uuid")

# A 4.9 name -> (the legacy name, the factor from the 4.9 unit back to the legacy one).
READ_ALIASES: dict[str, tuple[str, float]] = {r.new: (r.legacy, 1.0 / r.scale) for r in RENAMES_4_9}


def legacy_reading(name: str, value: float) -> tuple[str, float]:
    """A series as a legacy one: ``(legacy name, value in the legacy unit)``; a legacy or nvtopy series as it is.

    Why at the reader's door: everything after it (ranges, the model's units, MIG instance fields,
    the fleet's slow groups) is written once, for the legacy names. A value that is not finite stays
    what it is, and the range check after reads it as N/A.
    """
    alias = READ_ALIASES.get(name)
    if alias is None:
        return name, value
    legacy, factor = alias
    return legacy, value * factor if math.isfinite(value) else value


def first_label(labels: Mapping[str, str], spellings: tuple[str, ...]) -> str | None:
    """The first of ``spellings`` that ``labels`` has (non-empty, text), raw; None if none."""
    for name in spellings:
        value = labels.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _scaled(field: DcgmField, rename: Rename) -> DcgmField:
    """``field`` under its 4.9 name and unit (the reverse scale on reading)."""
    scale, to_metric, from_metric = rename.scale, field.to_metric, field.from_metric
    if scale == 1.0:
        return dataclasses.replace(field, name=rename.new, help=rename.help)

    # A factor below 1 (% -> ratio, mJ -> J) divides by its whole inverse: 41 / 100 is 0.41, the double nearest
    # the true ratio, as dcgm-exporter would write it; 41 * 0.01 is 0.41000000000000003.
    divisor = round(1.0 / scale) if scale < 1.0 and round(1.0 / scale) * scale == 1.0 else None

    def scaled_to(raw: object) -> float:
        value = to_metric(raw)
        return value / divisor if divisor is not None else value * scale

    def scaled_from(value: float) -> object:
        return from_metric(value / scale)

    return dataclasses.replace(field, name=rename.new, help=rename.help, to_metric=scaled_to, from_metric=scaled_from)


@dataclass(frozen=True, slots=True)
class Naming:
    """What an exporter writes: its GPU series (name, unit, help), and its host and driver labels."""

    key: str  # as --names takes it
    title: str  # for the README and --help
    fields: tuple[DcgmField, ...]  # every dcgm-named GPU series, in FIELDS' order
    host_label: str
    driver_label: str
    names: Mapping[str, str]  # legacy name -> the name written (itself where unchanged)

    @property
    def gpu_labels(self) -> tuple[str, ...]:
        """The labels of every GPU series, in dcgm-exporter's order."""
        return ("gpu", "UUID", "pci_bus_id", "device", "modelName", self.host_label, self.driver_label)

    def labels_of(self, gpu: GpuState, host: HostInfo) -> dict[str, str]:
        """dcgm-exporter's labels for one GPU (empty strings where a value is unknown)."""
        static = gpu.static
        return {
            "gpu": str(static.index),
            "UUID": static.uuid or "",
            "pci_bus_id": static.bus_id or "",
            "device": f"nvidia{static.index}",
            "modelName": static.name or "",
            self.host_label: host.hostname,
            self.driver_label: host.driver_version or "",
        }

    def name(self, legacy: str) -> str:
        """The name this naming writes for a legacy name (an nvtopy name as it is)."""
        return self.names.get(legacy, legacy)


def _naming_4_9() -> Naming:
    renames = {r.legacy: r for r in RENAMES_4_9}
    fields = tuple(_scaled(f, renames[f.name]) if f.name in renames else f for f in FIELDS)
    return Naming(
        "dcgm-4.9",
        "dcgm-exporter 4.9: DCGM 4.7's names and units (Hz, J, ratios 0-1, bytes), hostname, "
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
        fields,
        "hostname",
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
        {r.legacy: r.new for r in RENAMES_4_9},
    )


LEGACY = Naming(
    "dcgm-legacy",
    "dcgm-exporter 3.x-4.8: the names and units Grafana dashboard 12239 reads (MHz, mJ, %, MiB), Hostname, "
    "DCGM_FI_DRIVER_VERSION",
    FIELDS,
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    {},
)
NAMING_4_9 = _naming_4_9()
NAMINGS: dict[str, Naming] = {naming.key: naming for naming in (LEGACY, NAMING_4_9)}
DEFAULT_NAMING = LEGACY.key  # what dashboards in use read today (12239 and its forks): see the README

assert {r.legacy for r in RENAMES_4_9} <= {f.name for f in FIELDS}, "a rename of a field nvtopy has"
