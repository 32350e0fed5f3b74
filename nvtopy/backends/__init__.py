"""GPU backends: NVML (real GPUs) and simulated. See :mod:`nvtopy.backends.base` for the interface."""

from __future__ import annotations

from .base import Backend, ProcessReading, Reading, SignalOutcome

__all__ = ["Backend", "ProcessReading", "Reading", "SignalOutcome"]
