"""nvtopy: a top-like monitor for NVIDIA GPUs, and a small API for training code.

``import nvtopy`` is cheap: it imports neither Textual, rich, torch, TensorBoard nor NVML.
The API's names are loaded on first use:

- :func:`snapshot` -- one typed snapshot (the model ``nvtopy --once --json`` comes from);
- :func:`print_usage` / :func:`usage_lines` -- a line per GPU this job uses;
- :func:`job_gpus` -- which GPUs this process uses, matched by identity;
- :class:`track` -- a decorator / context manager reporting a call's GPU memory and utilisation;
- :class:`Sampler` -- background sampling with history, summaries and callbacks;
- :func:`configure` -- choose the backend (NVML, or simulated GPUs).

TensorBoard: :mod:`nvtopy.integrations.tensorboard`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .api.sampler import Sampler, Stats
    from .api.state import configure
    from .api.tracking import GpuUsage, TorchUsage, TrackReport, track
    from .api.usage import job_gpus, print_usage, snapshot, usage_lines

__all__ = [
    "GpuUsage",
    "Sampler",
    "Stats",
    "TorchUsage",
    "TrackReport",
    "__version__",
    "configure",
    "job_gpus",
    "print_usage",
    "snapshot",
    "track",
    "usage_lines",
]

_LAZY = {
    "snapshot": "api.usage",
    "print_usage": "api.usage",
    "usage_lines": "api.usage",
    "job_gpus": "api.usage",
    "configure": "api.state",
    "Sampler": "api.sampler",
    "Stats": "api.sampler",
    "track": "api.tracking",
    "TrackReport": "api.tracking",
    "GpuUsage": "api.tracking",
    "TorchUsage": "api.tracking",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nvtopy' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
