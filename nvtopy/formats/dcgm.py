"""dcgm-exporter's metric names, units and labels, mapped to nvtopy's model -- both ways.

One table so that the exporter writes and ``nvtopy --remote`` reads the same
thing: a Grafana dashboard built for dcgm-exporter (e.g. 12239) works unchanged
on nvtopy's exporter, and nvtopy can show any exporter that speaks these names.

Units follow dcgm-exporter: framebuffer memory in MiB, power in W, energy in
mJ, clocks in MHz, utilisation and fan in percent. Labels: ``gpu``, ``UUID``,
``pci_bus_id``, ``device`` (``nvidia<index>``), ``modelName``, ``Hostname`` and
``DCGM_FI_DRIVER_VERSION``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..model import THROTTLE_REASON_BITS, GpuState, HostInfo

__all__ = ["FIELDS", "GPU_LABELS", "MIB", "DcgmField", "gpu_labels", "throttle_mask", "throttle_names"]

MIB = 1024 * 1024
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One metric: where its value lives in the model and how dcgm-exporter scales it."""

    name: str
    help: str
    attribute: str  # a GpuSample field, or "static.<field>" for a GpuStatic one
    to_metric: Callable[[object], float]
    from_metric: Callable[[float], object]
    counter: bool = False  # dcgm-exporter's type; exposed as a gauge (see exporter.py)

    def value(self, gpu: GpuState) -> float | None:
        if self.attribute.startswith("static."):
            raw = getattr(gpu.static, self.attribute[7:])
        else:
            raw = getattr(gpu.sample, self.attribute)
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


# What a value read from an exporter (``nvtopy --remote``) may be, in the metric's unit. A
# value outside its range, or not finite (+Inf, -Inf and NaN are valid exposition), reads as
# unavailable: None, shown N/A -- never an exception, a "nan" or a 300-digit number. The
# ranges are generous: they reject what no GPU can report, not what is merely unusual.
PERCENT = (0, 100)  # utilisation, encoder, decoder: NVML's range
FAN_PERCENT = (0, 200)  # NVML: a fan's speed "may exceed 100%" on some boards
TEMPERATURE_C = (-60, 250)  # a reading or a threshold outside is a broken sensor
WATTS = (0, 20_000)  # a board, or a superchip module, draws a few kW at most
MHZ = (0, 100_000)
PSTATE = (0, 15)  # P0..P15, whole; NVML's 32 ("unknown") is out of range, so N/A
COUNT = (0, 2**64 - 1)  # energy (mJ) and ECC errors: NVML's unsigned 64-bit counters
FB_MIB = (0, (2**64 - MIB) // MIB)  # framebuffer memory in MiB: its bytes fit in 64 bits
MASK = (0, 2**64 - 1)  # the throttle-reason bitmask, whole


def _reading(
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


_percent = _reading(PERCENT, _to_int)
_fan = _reading(FAN_PERCENT, _to_int)
_celsius = _reading(TEMPERATURE_C, _to_int)
_watts = _reading(WATTS, float)
_mhz = _reading(MHZ, _to_int)
_pstate = _reading(PSTATE, _to_int, whole=True)
_count = _reading(COUNT, _to_int)
_mib = _reading(FB_MIB, _from_mib)
_throttle_names = _reading(MASK, throttle_names, whole=True)


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
)
BY_NAME = {field.name: field for field in FIELDS}


def gpu_labels(gpu: GpuState, host: HostInfo) -> dict[str, str]:
    """dcgm-exporter's labels for one GPU (empty strings where a value is unknown)."""
    static = gpu.static
    return {
        "gpu": str(static.index),
        "UUID": static.uuid or "",
        "pci_bus_id": static.bus_id or "",
        "device": f"nvidia{static.index}",
        "modelName": static.name or "",
        "Hostname": host.hostname,
        "DCGM_FI_DRIVER_VERSION": host.driver_version or "",
    }
