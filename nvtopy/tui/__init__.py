"""The interactive Textual app. Nothing outside this package imports Textual."""

from __future__ import annotations

__all__ = ["NvtopyApp"]


def __getattr__(name: str) -> object:
    if name == "NvtopyApp":
        from .app import NvtopyApp

        return NvtopyApp
    raise AttributeError(name)
