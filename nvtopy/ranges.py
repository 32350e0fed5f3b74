"""What each reading of the model can physically be: outside its range a value is N/A, never clamped, never 0.

Why one table: values enter the model from the NVML driver, the simulation, a
recording (``replay``, ``report``), another host's exporter (``--remote``) and a
Prometheus server (``--prometheus``). A driver or a sample pair can give NaN, an
infinity, 1e308, a negative or a 250 % figure; a peer or a file can say
anything. Each of those used to be handled (or not) where it entered: clamped to
0-100 here, read as N/A there, an OverflowError further on. Now there is one
rule: :func:`within` says whether a value fits its field, and
:mod:`nvtopy.model` applies it to every reading it is built with (an
out-of-range one becomes ``None`` with the reason ``out_of_range``), so no entry
point can forget it. Readers of outside formats use the same limits (in their
own units) before converting, so that a conversion never overflows.

The ranges are generous: they reject what no GPU can report, not what is merely
unusual (a fan "may exceed 100 %", NVML says; a superchip module draws kW).
"""

from __future__ import annotations

__all__ = [
    "BYTES",
    "BYTES_PER_S",
    "COUNT",
    "CPUS",
    "CPU_PERCENT",
    "DCGM_INT64_BLANK",
    "FAN_PERCENT",
    "FIELD_RANGES",
    "LINK_GEN",
    "LINK_WIDTH",
    "LOAD",
    "MHZ",
    "PERCENT",
    "PSTATE",
    "SECONDS",
    "SMALL_COUNT",
    "TEMPERATURE_C",
    "UNIX_TIME",
    "WATTS",
    "fits",
    "within",
]

PERCENT = (0, 100)  # utilisation, encoder, decoder, GPM activity: a share of time or of a maximum
FAN_PERCENT = (0, 200)  # NVML: a fan's speed "may exceed 100%" on some boards
TEMPERATURE_C = (-60, 250)  # a reading or a threshold outside is a broken sensor
WATTS = (0, 20_000)  # a board, or a superchip module, draws a few kW at most
MHZ = (0, 100_000)
PSTATE = (0, 15)  # P0..P15; NVML's 32 is "unknown", said as such by the backend
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
"""DCGM's "blank" for an integer field (``DCGM_INT64_BLANK`` in dcgm_structs.h; +1 not found, +2 not
supported, +3 no permission): what dcgm-exporter serves when DCGM could not read the field. DCGM's
own test is ``value >= DCGM_INT64_BLANK``, and NVML's "not available" (2**64 - 1) is above it too.
No counter gets there: as the energy counter (mJ) it would be 2.56 billion kWh."""
# NVML's unsigned 64-bit counters: energy (mJ), ECC errors, replays, retired pages. The top is below DCGM's
# blank, so a sentinel from the driver, a recording or an exporter is N/A (out of range), never a figure.
COUNT = (0, DCGM_INT64_BLANK - 1)
BYTES = (0, 2**64 - 1)  # memory sizes: 64-bit in NVML and in the kernel
BYTES_PER_S = (0, 2**50)  # a petabyte per second: no bus or link carries that
LINK_GEN = (0, 64)  # PCIe generation (1..6 today)
LINK_WIDTH = (0, 64)  # PCIe lanes (x1..x32)
SMALL_COUNT = (0, 1024)  # fans, NVLinks, an NVLink's version: a handful on any board
SECONDS = (0, 10 * 365 * 86400)  # a duration: ten years is longer than any process or stall lasts
UNIX_TIME = (1, 2**33)  # a process's start: after 1970, before the year 2242
CPU_PERCENT = (0, 100 * 4096)  # psutil: 100 per CPU used
LOAD = (0, 1_000_000)  # a load average: runnable tasks, a few per CPU even on a sick host
CPUS = (1, 1 << 20)  # logical CPUs of a host

FIELD_RANGES: dict[str, tuple[int, int]] = {
    # GpuStatic
    "memory_total_bytes": BYTES,
    "power_default_limit_w": WATTS,
    "power_min_limit_w": WATTS,
    "power_max_limit_w": WATTS,
    "temperature_slowdown_c": TEMPERATURE_C,
    "temperature_shutdown_c": TEMPERATURE_C,
    "clock_sm_max_mhz": MHZ,
    "clock_mem_max_mhz": MHZ,
    "fan_count": SMALL_COUNT,
    "pcie_link_gen_max": LINK_GEN,
    "pcie_link_width_max": LINK_WIDTH,
    "nvlink_count": SMALL_COUNT,
    # GpuSample (and MigUsage: memory and GPM under the same names)
    "memory_used_bytes": BYTES,
    "memory_free_bytes": BYTES,
    "memory_reserved_bytes": BYTES,
    "utilization_gpu_percent": PERCENT,
    "utilization_memory_percent": PERCENT,
    "encoder_percent": PERCENT,
    "decoder_percent": PERCENT,
    "temperature_c": TEMPERATURE_C,
    "fan_percent": FAN_PERCENT,
    "power_draw_w": WATTS,
    "power_limit_w": WATTS,
    "energy_mj": COUNT,
    "pstate": PSTATE,
    "clock_sm_mhz": MHZ,
    "clock_mem_mhz": MHZ,
    "ecc_corrected_volatile": COUNT,
    "ecc_uncorrected_volatile": COUNT,
    "ecc_corrected_aggregate": COUNT,
    "ecc_uncorrected_aggregate": COUNT,
    "pcie_rx_bytes_per_s": BYTES_PER_S,
    "pcie_tx_bytes_per_s": BYTES_PER_S,
    "remapped_rows_corrected": COUNT,
    "remapped_rows_uncorrected": COUNT,
    "retired_pages_sbe": COUNT,
    "retired_pages_dbe": COUNT,
    "pcie_link_gen": LINK_GEN,
    "pcie_link_width": LINK_WIDTH,
    "pcie_replay_counter": COUNT,
    "nvlink_rx_bytes_per_s": BYTES_PER_S,
    "nvlink_tx_bytes_per_s": BYTES_PER_S,
    "graphics_active_percent": PERCENT,
    "sm_active_percent": PERCENT,
    "sm_occupancy_percent": PERCENT,
    "tensor_active_percent": PERCENT,
    "dram_active_percent": PERCENT,
    "fp64_active_percent": PERCENT,
    "fp32_active_percent": PERCENT,
    "fp16_active_percent": PERCENT,
    "decoder_active_percent": PERCENT,
    "gpm_pcie_rx_bytes_per_s": BYTES_PER_S,
    "gpm_pcie_tx_bytes_per_s": BYTES_PER_S,
    "gpm_nvlink_rx_bytes_per_s": BYTES_PER_S,
    "gpm_nvlink_tx_bytes_per_s": BYTES_PER_S,
    # NvLink
    "version": SMALL_COUNT,
    "rx_bytes_per_s": BYTES_PER_S,
    "tx_bytes_per_s": BYTES_PER_S,
    "errors": COUNT,
    # GpuProcess (encoder_percent and decoder_percent as above)
    "gpu_memory_bytes": BYTES,
    "sm_percent": PERCENT,
    "memory_percent": PERCENT,
    "cpu_percent": CPU_PERCENT,
    "host_memory_bytes": BYTES,
    "create_time": UNIX_TIME,
    "running_seconds": SECONDS,
    "idle_seconds": SECONDS,
    # HostUsage
    "cpu_busy_percent": PERCENT,
    "cpu_count": CPUS,
    "load_1m": LOAD,
    "load_5m": LOAD,
    "load_15m": LOAD,
    "ram_total_bytes": BYTES,
    "ram_used_bytes": BYTES,
    "swap_total_bytes": BYTES,
    "swap_used_bytes": BYTES,
}
"""Model field name -> (lowest, highest), both included, in the model's units. One name, one meaning."""


def fits(value: object, limits: tuple[int, int]) -> bool:
    """Whether ``value`` lies within ``limits`` (both included). NaN, the infinities and non-numbers do not."""
    try:
        return limits[0] <= value <= limits[1]  # type: ignore[operator]
    except TypeError:
        return False


def within(name: str, value: object) -> bool:
    """Whether ``value`` may be field ``name``'s reading: None (no reading) and fields without a range always may."""
    limits = FIELD_RANGES.get(name)
    return limits is None or value is None or fits(value, limits)
