"""GPU figures as TensorBoard scalars, from a :class:`~nvtopy.Sampler` or on demand.

    from nvtopy.integrations.tensorboard import TensorBoardLogger
    tb = TensorBoardLogger(log_dir="runs/gpu")        # or TensorBoardLogger(writer=your_writer)
    with nvtopy.Sampler(interval=5, callbacks=[tb]):   # every sample becomes scalars
        train()
    tb.log(step=global_step)                            # or on demand, at your step

Scalars, per GPU index ``i``: ``gpu/i/memory_used_percent``, ``gpu/i/utilization_percent``,
``gpu/i/memory_bandwidth_percent``, ``gpu/i/temperature_c``, ``gpu/i/power_w``,
``gpu/i/process_memory_gib`` (this process, as NVML counts it) and, when the job's
torch has initialised CUDA, ``gpu/i/torch_allocated_gib``, ``gpu/i/torch_reserved_gib``,
``gpu/i/torch_peak_allocated_gib``.

The writer is any object with ``add_scalar(tag, value, step, walltime)``: torch's
``SummaryWriter`` (``torch.utils.tensorboard``) or tensorboardX's. Given only a
``log_dir``, torch's is used if torch is already imported, else tensorboardX
(``pip install 'nvtopy[tensorboard]'``). Nothing here runs at ``import nvtopy``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from ..api.torchmem import cuda_torch, torch_memory
from ..model import Snapshot

__all__ = ["TensorBoardLogger", "make_writer"]

GIB = float(1 << 30)


def make_writer(log_dir: str | None = None) -> Any:
    """A SummaryWriter: torch's if torch is imported (we never import it ourselves), else tensorboardX's."""
    if "torch" in sys.modules:
        try:
            from torch.utils.tensorboard import SummaryWriter

            return SummaryWriter(log_dir=log_dir)
        except ImportError:  # torch without the tensorboard package
            pass
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ImportError(
            "TensorBoard logging needs torch.utils.tensorboard or tensorboardX: pip install 'nvtopy[tensorboard]'"
        ) from None
    return SummaryWriter(logdir=log_dir)


class TensorBoardLogger:
    """Writes each snapshot's per-GPU figures as scalars. Callable: pass it as a Sampler callback."""

    def __init__(self, writer: Any | None = None, *, log_dir: str | None = None, prefix: str = "gpu") -> None:
        self.writer = writer if writer is not None else make_writer(log_dir)
        self.prefix = prefix
        self._step = 0
        self._lock = threading.Lock()

    def __call__(self, snapshot: Snapshot) -> None:
        with self._lock:
            step = self._step
            self._step += 1
        self.log(snapshot, step=step)

    def log(self, snapshot: Snapshot | None = None, step: int | None = None) -> int:
        """Write ``snapshot`` (default: a fresh one of this job's GPUs) at ``step``; returns scalars written."""
        from ..api.usage import job_gpus

        if snapshot is None:
            from ..api.usage import snapshot as take

            snapshot = take(gpus=list(job_gpus().indices))
        torch = cuda_torch()
        ordinals = dict(job_gpus().torch_ordinals) if torch is not None else {}
        pid = os.getpid()
        written = 0
        for gpu in snapshot.gpus:
            tag = f"{self.prefix}/{gpu.index}"
            sample = gpu.sample
            own = next((p.gpu_memory_bytes for p in gpu.processes if p.pid == pid), None)
            scalars: dict[str, float | None] = {
                "memory_used_percent": gpu.memory_used_percent,
                "utilization_percent": sample.utilization_gpu_percent,
                "memory_bandwidth_percent": sample.utilization_memory_percent,
                "temperature_c": sample.temperature_c,
                "power_w": sample.power_draw_w,
                "process_memory_gib": None if own is None else own / GIB,
            }
            if torch is not None and gpu.index in ordinals:
                memory = torch_memory(torch, ordinals[gpu.index])
                scalars["torch_allocated_gib"] = memory.allocated_bytes / GIB
                scalars["torch_reserved_gib"] = memory.reserved_bytes / GIB
                scalars["torch_peak_allocated_gib"] = memory.peak_allocated_bytes / GIB
            for name, value in scalars.items():
                if value is None:
                    continue  # unavailable: omitted, never written as 0
                self.writer.add_scalar(f"{tag}/{name}", float(value), step, walltime=snapshot.timestamp)
                written += 1
        return written

    def flush(self) -> None:
        flush = getattr(self.writer, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        close = getattr(self.writer, "close", None)
        if close is not None:
            close()
