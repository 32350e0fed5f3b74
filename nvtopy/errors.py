"""Errors that reach the user as one line, never as a traceback.

Why a small hierarchy: the CLI maps each class to an exit code (2 for things the
user typed wrong, 1 for a machine that cannot be monitored), and the library
API raises the same classes so callers can catch them precisely.
"""

from __future__ import annotations

__all__ = ["BackendUnavailableError", "NvtopyError", "SelectionError", "UsageError"]


class NvtopyError(Exception):
    """Base class: ``str(error)`` is a complete, single-line message for the user."""

    exit_code = 1


class UsageError(NvtopyError):
    """A command-line argument or option value is invalid."""

    exit_code = 2


class SelectionError(UsageError):
    """A ``--gpus`` entry names no GPU, or more than one."""


class BackendUnavailableError(NvtopyError):
    """The GPUs cannot be read at all: no NVIDIA library, driver not loaded, version mismatch."""
