"""dcgm-exporter's metric names, units and labels, mapped to nvtopy's model -- both ways.

One table so that the exporter writes and ``nvtopy --remote`` reads the same
thing: a Grafana dashboard built for dcgm-exporter (e.g. 12239) works unchanged
on nvtopy's exporter, and nvtopy can show any exporter that speaks these names.

Units follow dcgm-exporter up to 4.8 (its "legacy" naming): framebuffer memory in MiB,
power in W, energy in mJ, clocks in MHz, utilisation and fan in percent, profiling fields
as ratios from 0 to 1 or in bytes per second. Labels: ``gpu``, ``UUID``, ``pci_bus_id``,
``device`` (``nvidia<index>``), ``modelName``, the host and the driver version, spelled as a
naming says: :mod:`nvtopy.formats.dcgm_naming` (``Naming.gpu_labels``, ``Naming.labels_of``)
holds them, and dcgm-exporter 4.9's names and units of these fields.

MIG: dcgm-exporter watches each GPU instance as an entity of its own and labels
its series with the parent's labels plus ``GPU_I_PROFILE`` (the GPU instance's
profile, ``3g.40gb``) and ``GPU_I_ID`` (NVML's GPU instance id). nvtopy exports
per GPU instance what is the instance's own (:data:`INSTANCE_FIELDS`: the
framebuffer used, free and total, in MiB, and its GPM activity) under those labels, and keeps the
GPU's own series as they are. Two differences from dcgm-exporter's default
(its "flex" mode exports a MIG GPU's instances only, every field repeated
with the parent's values): the whole GPU's series stay (a query that sums
memory over series selects ``GPU_I_ID=""`` for GPUs or ``GPU_I_ID!=""`` for
instances), and what is the parent's (temperature, power, clocks) is not repeated
per instance. Several compute instances in one GPU instance share its memory:
one series per GPU instance, as dcgm-exporter has.

Health (DCGM field ids in brackets, from DCGM's ``dcgm_fields.h``): the last
Xid (``DCGM_FI_DEV_XID_ERRORS`` [230], 0 when none has happened; left out when
events are not watched, since 0 would then claim something nvtopy cannot
know). Once an Xid has come, the series also carries dcgm-exporter's labels of
that row (its "attributes", since 3.3.6): ``err_code`` (the Xid) and ``err_msg``
(its meaning, :func:`xid_labels`). So "none" (``0``, no ``err_code``) and an
Xid 0 (``0`` with ``err_code="0"``) differ, which the value alone cannot say:
``DCGM_FI_DEV_XID_ERRORS{err_code!=""}`` selects the GPUs that had one.
The PCIe replay counter [202], remapped rows [393-396], retired pages
[390-392], the PCIe link now and at most [235-238]. Flags are 1/0, as DCGM
reports them (``DCGM_FI_DEV_RETIRED_PENDING`` too: DCGM's help says "number of
pages" but its value is NVML's pending status, a yes or no).

Profiling ("DCP") fields, from NVML's GPM (Hopper and newer; :data:`GPM_DCGM_FIELDS`): DCGM's
``DCGM_FI_PROF_*`` names [1001-1012] with dcgm-exporter's help texts and types (gauges), in DCGM's
units: the ``*_ACTIVE`` fields and ``DCGM_FI_PROF_SM_OCCUPANCY`` are ratios from 0 to 1 (GPM's
percentage / 100), ``DCGM_FI_PROF_{PCIE,NVLINK}_{TX,RX}_BYTES`` rates in bytes per second (GPM's
MiB/s * 1048576; the model holds bytes/s already). A GPU without GPM (before Hopper) has no
such series: absent, never 0. Per GPU instance of a MIG GPU, the instance's own activity (its
GPM, ``nvmlGpmMigSampleGet``) under the same names and ``GPU_I_PROFILE``/``GPU_I_ID``, as
dcgm-exporter exports profiling fields per GPU instance. The pairing of GPM metrics with DCGM
fields is by their descriptions (NVIDIA documents no identity between the two).

Left out on purpose:

- ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` [449]: DCGM documents it only as "NV Link
  Bandwidth Counter total for all Lanes"; dcgm-exporter types it a counter, its
  maintainers answered "as far as I can tell the units are KB/s"
  (NVIDIA/dcgm-exporter#472, #195), and users measured an instantaneous rate in
  MB/s (KempnerInstitute/kempnerpulse#10). A value under that name would be read
  with a unit and a type nobody agrees on, so nvtopy exports NVLink throughput
  only under its own names, in bytes per second (:mod:`nvtopy.formats.prometheus`).
- NVML's PCIe throughput (a 20 ms window, nvmlDeviceGetPcieThroughput) under
  ``DCGM_FI_PROF_PCIE_TX_BYTES`` / ``RX_BYTES``: those are profiling fields, which
  count protocol headers as well as payload over the profiling interval. They are
  exported from GPM's PCIe rates (also measured over an interval; paired with DCGM's
  by description) where the GPU has GPM; NVML's 20 ms figure stays
  ``nvtopy_pcie_{rx,tx}_bytes_per_second``.
- ``decoder_active_percent`` (GPM's mean over the NVDECs): DCGM has per-decoder fields
  only (``DCGM_FI_PROF_NVDEC0_ACTIVE``...); ``DCGM_FI_DEV_DEC_UTIL`` carries the decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..health.xid import describe_xid
from ..model import MIG_GPM_FIELDS, THROTTLE_REASON_BITS, GpuState, MigState
from ..ranges import (
    BYTES_PER_S,
    COUNT,
    DCGM_INT64_BLANK,
    FAN_PERCENT,
    LINK_GEN,
    LINK_WIDTH,
    MHZ,
    PERCENT,
    PSTATE,
    TEMPERATURE_C,
    WATTS,
)
from .fields import field_reader

__all__ = [
    "FIELDS",
    "GPM_DCGM_FIELDS",
    "INSTANCE_FIELDS",
    "INSTANCE_GPM_FIELDS",
    "INT64_BLANK",
    "MIB",
    "MIG_LABELS",
    "WATTS",
    "DcgmField",
    "gpu_instance_profile",
    "gpu_instances",
    "last_xid_metric",
    "ranged",
    "throttle_mask",
    "throttle_names",
    "xid_labels",
]

MIB = 1024 * 1024
# dcgm-exporter's, on a GPU instance's series (after the GPU's labels, Naming.gpu_labels), in every naming.
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One metric: where its value lives in the model and how dcgm-exporter scales it."""

    name: str
    help: str
    attribute: str  # a GpuSample field, "static.<field>" for a GpuStatic one, "health.<field>" for a GpuHealth one
    to_metric: Callable[[object], float]
    from_metric: Callable[[float], object]
    counter: bool = False  # dcgm-exporter's type; exposed as a gauge (see exporter.py)
    read: Callable[[GpuState], object] | None = None  # where the value is not one attribute as it is
    when_lost: bool = False  # exported for a lost GPU too (its health: a lost GPU is the worst case)
    # Labels of a GPU's series beyond the GPU's own (dcgm-exporter's "attributes"); None: none.
    labels: Callable[[GpuState], dict[str, str] | None] | None = None

    def reader(self) -> Callable[[GpuState], object]:
        """The getter of its raw value: ``read``, else the attribute (:func:`~nvtopy.formats.fields.field_reader`)."""
        return self.read if self.read is not None else field_reader(self.attribute)

    def value(self, gpu: GpuState) -> float | None:
        raw = self.reader()(gpu)
        return None if raw is None else self.to_metric(raw)


def throttle_mask(reasons: tuple[str, ...]) -> int:
    """Throttle-reason names back to NVML's clock-event bitmask."""
    bits = {name: bit for bit, name in THROTTLE_REASON_BITS}
    mask = 0
    for reason in reasons:
        if reason in bits:
            mask |= bits[reason]
        elif reason.startswith("0x"):
            mask |= int(reason, 16)
    return mask


def throttle_names(mask: float) -> tuple[str, ...]:
    from ..model import decode_throttle_reasons

    return decode_throttle_reasons(int(mask))


def _identity(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def _to_mib(value: object) -> float:
    return float(value) / MIB  # type: ignore[arg-type]


def _from_mib(value: float) -> int:
    return round(value * MIB)


def _to_int(value: float) -> int:
    return round(value)


def _flag_to_metric(value: object) -> float:
    return 1.0 if value else 0.0


def last_xid_metric(gpu: GpuState) -> int | None:
    """``DCGM_FI_DEV_XID_ERRORS``: the last Xid, 0 when none happened, None when events are not watched."""
    health = gpu.health
    last = health.last_xid
    if last is not None:
        return last
    if health.events_note is not None and not health.xid_counts:
        return None  # not watched: "no Xid" would be a claim nvtopy cannot make
    return 0


def xid_labels(gpu: GpuState) -> dict[str, str] | None:
    """``err_code`` and ``err_msg`` of ``DCGM_FI_DEV_XID_ERRORS`` once an Xid has come (None: none has).

    Why: the value is the last Xid and 0 when none came, so an Xid 0 (a number outside NVIDIA's
    catalogue that a driver can still report) read as "none"; the label says one came. The names
    are dcgm-exporter's; its message texts are NVIDIA's, nvtopy's the catalogue's meaning.
    """
    last = gpu.health.last_xid
    if last is None:
        return None
    return {"err_code": str(last), "err_msg": describe_xid(last).meaning}


# What a value read from an exporter (``nvtopy --remote``) may be, in the metric's unit: the
# model's ranges (nvtopy.ranges) where the units agree, and these where DCGM's differ. A value
# outside its range, or not finite (+Inf, -Inf and NaN are valid exposition), reads as
# unavailable: None, shown N/A ("out of range") -- never an exception, a "nan" or a 300-digit
# number. PSTATE and the link's generation and width are whole; NVML's pstate 32 is N/A.
FB_MIB = (0, (2**64 - MIB) // MIB)  # framebuffer memory in MiB: its bytes fit in 64 bits
MASK = (0, 2**64 - 1)  # the throttle-reason bitmask, whole
FLAG = (0, 1)  # yes or no, whole
XID = (0, 2**32 - 1)  # an Xid number (NVML's eventData is 64-bit; Xids in use are below 200); 0 is "none"
RATIO = (0, 1)  # a profiling ratio (DCGM_FI_PROF_*_ACTIVE): the share of time or cycles

INT64_BLANK = DCGM_INT64_BLANK  # one home: nvtopy.ranges


def ranged(
    limits: tuple[int, int], convert: Callable[[float], object], whole: bool = False
) -> Callable[[float], object]:
    """A ``from_metric``: ``convert(value)`` for a value within ``limits`` (and whole if asked), else None."""
    low, high = limits

    def read(value: float) -> object:
        if not low <= value <= high:  # NaN and the infinities fail this too
            return None
        if whole and value != int(value):
            return None
        return convert(value)

    return read


_percent = ranged(PERCENT, _to_int)
_fan = ranged(FAN_PERCENT, _to_int)
_celsius = ranged(TEMPERATURE_C, _to_int)
_watts = ranged(WATTS, float)
_mhz = ranged(MHZ, _to_int)
_pstate = ranged(PSTATE, _to_int, whole=True)
_count = ranged(COUNT, _to_int)
_mib = ranged(FB_MIB, _from_mib)
_throttle_names = ranged(MASK, throttle_names, whole=True)
_flag = ranged(FLAG, bool, whole=True)
_xid = ranged(XID, _to_int, whole=True)
_whole_count = ranged(COUNT, _to_int, whole=True)
_link_gen = ranged(LINK_GEN, _to_int, whole=True)
_link_width = ranged(LINK_WIDTH, _to_int, whole=True)


def _ratio(percent: object) -> float:
    """GPM's percentage as DCGM's ratio (0-100 -> 0-1)."""
    return float(percent) / 100  # type: ignore[arg-type]


def _percent_of_ratio(ratio: float) -> float:
    return ratio * 100


_from_ratio = ranged(RATIO, _percent_of_ratio)
_rate = ranged(BYTES_PER_S, float)


FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization_gpu_percent", _identity, _percent),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "utilization_memory_percent", _identity, _percent
    ),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", "encoder_percent", _identity, _percent),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", "decoder_percent", _identity, _percent),
    DcgmField("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used_bytes", _to_mib, _mib),
    DcgmField("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "memory_free_bytes", _to_mib, _mib),
    DcgmField(
        "DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", "memory_reserved_bytes", _to_mib, _mib
    ),
    DcgmField("DCGM_FI_DEV_FB_TOTAL", "Total framebuffer memory (in MiB).", "static.memory_total_bytes", _to_mib, _mib),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", _identity, _celsius),
    DcgmField(
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        "Slowdown temperature threshold (in C).",
        "static.temperature_slowdown_c",
        _identity,
        _celsius,
    ),
    DcgmField("DCGM_FI_DEV_FAN_SPEED", "Fan speed for the device in percent 0-100.", "fan_percent", _identity, _fan),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_draw_w", _identity, _watts),
    DcgmField("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", "power_limit_w", _identity, _watts),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "energy_mj",
        _identity,
        _count,
        counter=True,
    ),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "clock_sm_mhz", _identity, _mhz),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "clock_mem_mhz", _identity, _mhz),
    DcgmField("DCGM_FI_DEV_PSTATE", "Performance state (P-State) 0-15.", "pstate", _identity, _pstate),
    DcgmField(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (bitmask).",
        "throttle_reasons",
        lambda reasons: float(throttle_mask(reasons)),  # type: ignore[arg-type]
        _throttle_names,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        "ecc_corrected_volatile",
        _identity,
        _count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        "ecc_uncorrected_volatile",
        _identity,
        _count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "Total number of single-bit persistent ECC errors.",
        "ecc_corrected_aggregate",
        _identity,
        _count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "Total number of double-bit persistent ECC errors.",
        "ecc_uncorrected_aggregate",
        _identity,
        _count,
        counter=True,
    ),
    # ---- health
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        "health.last_xid",
        _identity,
        _xid,
        read=last_xid_metric,
        labels=xid_labels,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        "pcie_replay_counter",
        _identity,
        _whole_count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        "remapped_rows_corrected",
        _identity,
        _whole_count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        "remapped_rows_uncorrected",
        _identity,
        _whole_count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed",
        "remapped_rows_failure",
        _flag_to_metric,
        _flag,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "Whether remapping of rows is pending",
        "remapped_rows_pending",
        _flag_to_metric,
        _flag,
    ),
    DcgmField(
        "DCGM_FI_DEV_RETIRED_SBE",
        "Total number of retired pages due to single-bit errors.",
        "retired_pages_sbe",
        _identity,
        _whole_count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_RETIRED_DBE",
        "Total number of retired pages due to double-bit errors.",
        "retired_pages_dbe",
        _identity,
        _whole_count,
        counter=True,
    ),
    DcgmField(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "Whether pages are pending retirement (1/0).",
        "retired_pages_pending",
        _flag_to_metric,
        _flag,
    ),
    DcgmField("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe Current Link Generation.", "pcie_link_gen", _identity, _link_gen),
    DcgmField("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe Current Link Width.", "pcie_link_width", _identity, _link_width),
    DcgmField(
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        "PCIe Max Link Generation.",
        "static.pcie_link_gen_max",
        _identity,
        _link_gen,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
        "PCIe Max Link Width.",
        "static.pcie_link_width_max",
        _identity,
        _link_width,
    ),
)

# ---- profiling (DCP) fields, from GPM. Help texts and types are dcgm-exporter's (etc/dcp-metrics-included.csv);
# NVLink's bytes are not in its files: their texts follow its PCIe ones and DCGM's dcgm_fields.h ("the total
# number of bytes of active NvLink tx data including both header and payload"), reported as a rate.
GPM_DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        "graphics_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        "sm_occupancy_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "Ratio of cycles the fp64 pipes are active.",
        "fp64_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "Ratio of cycles the fp32 pipes are active.",
        "fp32_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "Ratio of cycles the fp16 pipes are active.",
        "fp16_active_percent",
        _ratio,
        _from_ratio,
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - "
        "in bytes per second.",
        "gpm_pcie_tx_bytes_per_s",
        _identity,
        _rate,
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
        "in bytes per second.",
        "gpm_pcie_rx_bytes_per_s",
        _identity,
        _rate,
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, all links - including both protocol headers and data payloads - "
        "in bytes per second.",
        "gpm_nvlink_tx_bytes_per_s",
        _identity,
        _rate,
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, all links - including both protocol headers and data payloads - "
        "in bytes per second.",
        "gpm_nvlink_rx_bytes_per_s",
        _identity,
        _rate,
    ),
)
FIELDS += GPM_DCGM_FIELDS
BY_NAME = {field.name: field for field in FIELDS}


def _mig_usage_reader(name: str) -> Callable[[MigState], float | None]:
    def read(mig: MigState) -> float | None:
        return None if mig.usage is None else getattr(mig.usage, name)

    return read


# dcgm name -> the GPU's MIG_GPM_FIELDS field it carries, per GPU instance: what GPM measures of an instance.
INSTANCE_GPM_FIELDS: dict[str, str] = {
    field.name: field.attribute for field in GPM_DCGM_FIELDS if field.attribute in MIG_GPM_FIELDS
}

# What a GPU instance's series carry, in the model's units (converted by the field's to_metric): its own
# framebuffer (MiB) and its own activity (GPM ratios): dcgm name -> the MigState value.
INSTANCE_FIELDS: dict[str, Callable[[MigState], float | None]] = {
    "DCGM_FI_DEV_FB_USED": lambda mig: mig.memory_used_bytes,
    "DCGM_FI_DEV_FB_FREE": lambda mig: None if mig.usage is None else mig.usage.memory_free_bytes,
    "DCGM_FI_DEV_FB_TOTAL": lambda mig: mig.memory_total_bytes,
    **{name: _mig_usage_reader(attribute) for name, attribute in INSTANCE_GPM_FIELDS.items()},
}


def gpu_instance_profile(profile: str | None) -> str | None:
    """The GPU instance's profile of a MIG device's: ``1c.3g.40gb`` -> ``3g.40gb`` (``3g.40gb`` as it is).

    A compute instance smaller than its GPU instance is named ``<n>c.`` before the GPU
    instance's profile; dcgm-exporter's ``GPU_I_PROFILE`` names the GPU instance.
    """
    if profile is None:
        return None
    head, sep, rest = profile.partition(".")
    if sep and head.endswith("c") and head[:-1].isdigit() and "." in rest:
        return rest
    return profile


def gpu_instances(gpu: GpuState) -> list[MigState]:
    """One MIG device per GPU instance (the first of its compute instances), by GPU instance id.

    Devices whose GPU instance id is unknown are left out: there is no ``GPU_I_ID`` to give them.
    """
    seen: dict[int, MigState] = {}
    for mig in gpu.mig:
        gi = mig.instance.gpu_instance_id
        if gi is not None and gi not in seen:
            seen[gi] = mig
    return [seen[gi] for gi in sorted(seen)]
