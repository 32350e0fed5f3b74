"""Where a GPU field named by a dotted string lives in the model: one resolver for every format.

The formats name a GPU's values by one string each: ``"memory_used_bytes"`` (a
:class:`~nvtopy.model.GpuSample` field), ``"static.memory_total_bytes"`` (a
:class:`~nvtopy.model.GpuStatic` one) or ``"health.last_xid"`` (a
:class:`~nvtopy.model.GpuHealth` one). dcgm's table (:mod:`nvtopy.formats.dcgm`), nvtopy's own
series, the exporter, its parser and the JSON ``readings`` object all use that naming.
Why one resolver: each of them once split the string itself, and a part added to one
(``health.``) was missing from another.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Literal

from ..model import GpuState

__all__ = ["FieldPart", "field_part", "field_reader"]

FieldPart = Literal["static", "health", "sample"]
"""The part of a :class:`~nvtopy.model.GpuState` a field belongs to."""


def field_part(attribute: str) -> tuple[FieldPart, str]:
    """``"static.memory_total_bytes"`` -> ``("static", "memory_total_bytes")``; no prefix is the sample's."""
    if attribute.startswith("static."):
        return "static", attribute[7:]
    if attribute.startswith("health."):
        return "health", attribute[7:]
    return "sample", attribute


@functools.cache
def field_reader(attribute: str) -> Callable[[GpuState], object]:
    """A getter of the field's raw value from a GPU (made once per name: the exporter reads 60 per GPU per second)."""
    part, name = field_part(attribute)
    read: Callable[[GpuState], object] = operator.attrgetter(f"{part}.{name}")
    return read
