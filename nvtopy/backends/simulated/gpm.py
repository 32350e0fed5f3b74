"""GPM on simulated GPUs: how much of a Hopper-or-newer GPU really works, consistent with its load.

Why it matters for the demo: the point of these figures is that utilisation
alone misleads. So the simulation makes them differ the way real jobs do: a
training job keeps most SMs busy and the tensor pipes half busy, an inference
server far less, a notebook almost nothing, and a deadlocked collective (the
``stuck`` fault) shows 100 % utilisation with about 3 % of its SMs active.
The formulas follow ../shared/fake-nvml (its README, "GPM"), so both backends
tell the same story. Boards before Hopper have no GPM: NotSupported.
"""

from __future__ import annotations

import math
from typing import Any

from ...model import GPM_FIELDS, GPM_RATE_FIELDS, MIG_GPM_FIELDS, MigInstance
from .catalog import GpuModel

__all__ = ["STUCK_SM_ACTIVE_PERCENT", "absurd_gpm_values", "gpm_supported", "gpm_values", "mig_gpm_values"]

MIB = 1024 * 1024
STUCK_SM_ACTIVE_PERCENT = 3.0  # a spinning collective: the engine "active", almost no SM doing work


def gpm_supported(model: GpuModel) -> bool:
    """GPM is for Hopper (compute capability 9.0) and newer."""
    return int(model.compute_capability.split(".")[0]) >= 9


def _clamp(value: float) -> float:
    return max(0.0, min(100.0, value))


def gpm_values(
    *,
    util: float,
    memory_util: float,
    decoder: float,
    tensor_share: float,
    stuck: bool,
    now: float,
    phase: float,
    pcie_rx: float,
    pcie_tx: float,
    nvlink_rx: float,
    nvlink_tx: float,
) -> dict[str, float]:
    """The GPM fields of a GPU at ``util`` % utilisation (``tensor_share``: 0..1 of SM time on tensor pipes)."""
    sm = util * (0.80 + 0.12 * math.sin(2 * math.pi * now / 23 + phase))
    if stuck:
        sm = STUCK_SM_ACTIVE_PERCENT + 0.5 * math.sin(now / 5 + phase)
    sm = _clamp(min(sm, util))
    values = {
        "graphics_active_percent": _clamp(util),
        "sm_active_percent": sm,
        "sm_occupancy_percent": _clamp(sm * (0.45 + 0.2 * math.sin(now / 17 + phase))),
        "tensor_active_percent": _clamp(sm * tensor_share),
        "dram_active_percent": _clamp(memory_util),
        "fp64_active_percent": _clamp(sm * 0.04),
        "fp32_active_percent": _clamp(sm * 0.35),
        "fp16_active_percent": _clamp(sm * 0.12),
        "decoder_active_percent": _clamp(decoder),
        "gpm_pcie_rx_bytes_per_s": max(0.0, pcie_rx),
        "gpm_pcie_tx_bytes_per_s": max(0.0, pcie_tx),
        "gpm_nvlink_rx_bytes_per_s": max(0.0, nvlink_rx),
        "gpm_nvlink_tx_bytes_per_s": max(0.0, nvlink_tx),
    }
    assert set(values) == set(GPM_FIELDS)
    return values


def mig_gpm_values(
    instance: MigInstance, *, busy: bool, tensor_share: float, now: float, phase: float
) -> dict[str, Any]:
    """One MIG instance's own activity: busy while a process runs on it (its own phase per GPU instance)."""
    phase += 0.9 * (instance.gpu_instance_id or 0)
    util = (70 + 20 * math.sin(2 * math.pi * now / 31 + phase)) if busy else 0.0
    sm = _clamp(util * (0.80 + 0.12 * math.sin(2 * math.pi * now / 23 + phase)))
    values = {
        "graphics_active_percent": _clamp(util),
        "sm_active_percent": sm,
        "sm_occupancy_percent": _clamp(sm * 0.5),
        "tensor_active_percent": _clamp(sm * tensor_share),
        "dram_active_percent": _clamp(util * 0.5),
    }
    assert set(values) == set(MIG_GPM_FIELDS)
    return values


def absurd_gpm_values(value: float, fields: tuple[str, ...]) -> dict[str, float]:
    """``fields`` as a buggy driver gives them (the ``gpm-absurd`` fault): every metric ``value``, the rates
    in MiB/s as NVML's are (so ``over``, 250, is a real rate), as FAKE_NVML_GPM_ABSURD does. Not clamped here:
    what the model makes of it is the point."""
    return {name: value * MIB if name in GPM_RATE_FIELDS else value for name in fields}
