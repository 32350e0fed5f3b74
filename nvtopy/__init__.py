"""nvtopy: a top-like monitor for NVIDIA GPUs.

``import nvtopy`` is cheap: it imports neither Textual, rich, torch nor NVML.
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
