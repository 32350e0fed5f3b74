"""What ``nvtopy doctor`` says: a finding, its status, and the exit status they make.

Every check module returns :class:`DoctorFinding` objects; the output
(:mod:`.output`) writes them. A finding of a GPU's state maps its status to the
monitor's :class:`~nvtopy.model.Severity` (:attr:`Status.severity`), which is how
doctor's colours come from the one severity -> colour map in :mod:`nvtopy.render.cells`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...model import GpuStatic, Severity

__all__ = ["DoctorFinding", "Status", "counts", "exit_code", "gpu_label", "gpu_list"]


class Status(str, enum.Enum):
    """A finding's status, worst last but ``skip`` (a check that could not be made). Values appear in JSON."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    def __str__(self) -> str:
        return self.value

    @property
    def severity(self) -> Severity | None:
        """The monitor's severity of the same name; None for ``skip`` (nothing was judged)."""
        return None if self is Status.SKIP else Severity(self.value.upper())

    @classmethod
    def of(cls, severity: Severity) -> Status:
        """The status of a health rule's finding (:mod:`nvtopy.health.verdict`): the same word."""
        return cls(severity.value.lower())


@dataclass(frozen=True, slots=True)
class DoctorFinding:
    """One thing doctor found: what (``title``), why it matters (``detail``), what to do (``fix``).

    Text is kept as written, outside text (GPU names, driver messages,
    environment values) included: each output escapes it where it writes.
    ``gpus``: the GPUs it is about (empty: the whole machine).
    """

    id: str
    status: Status
    title: str
    detail: str | None = None
    fix: str | None = None
    gpus: tuple[int, ...] = ()


def gpu_list(indices: Sequence[int]) -> str:
    """``GPU 2`` or ``GPUs 0, 3``."""
    return f"GPU {indices[0]}" if len(indices) == 1 else "GPUs " + ", ".join(str(i) for i in indices)


def gpu_label(static: GpuStatic) -> str:
    """``GPU 1 (NVIDIA H100 80GB HBM3)``: outside text, escaped by each output where it writes."""
    return f"GPU {static.index} ({static.name})" if static.name else f"GPU {static.index}"


def exit_code(findings: Iterable[DoctorFinding]) -> int:
    """1 when any finding is FAIL, else 0 (WARN alone is no failure)."""
    return 1 if any(f.status is Status.FAIL for f in findings) else 0


def counts(findings: Sequence[DoctorFinding]) -> dict[str, int]:
    """How many findings of each status, by its JSON value (``{"ok": 9, "warn": 1, "fail": 0, "skip": 2}``)."""
    return {status.value: sum(1 for f in findings if f.status is status) for status in Status}
