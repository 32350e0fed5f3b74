"""The short history: the last N samples of a few figures, each with its time -- one bounded ring.

Who keeps one: every GPU, for its sparklines (:class:`~nvtopy.model.HistoryBuffer`,
:data:`~nvtopy.model.HISTORY_LENGTH` points), and every process the monitor follows, for the
process screen's charts (``nvtopy.tui.process_screen.ProcessHistory``, a map of rings). The long
history behind the zoomable charts is another idea -- min / mean / max per time bucket at three
resolutions, bounded by time rather than by count -- and lives in :mod:`nvtopy.sources.timeline`.

Parallel columns, no tuple per point. With a ``typecode`` they are arrays, no object per value
either: the time as a double (a float32 of a Unix time is off by up to two minutes), each figure as
``typecode`` -- float32 where 7 significant digits are plenty (a chart; NaN: no value). With
``typecode=None`` they are lists that keep each value as it came (``None`` for a gap, an ``int`` an
``int``: what a :class:`~nvtopy.model.GpuHistory` must give back) and are read back without making
an object per value (the collector reads a GPU's whole window on every refresh).

The ring grows a quarter past its length (at least 16 points) and is then cut back in one go, so an
append is amortised O(1) and the memory is bounded by ``points + slack`` rows. The cut makes new
columns rather than deleting from the old ones, so a :meth:`SampleRing.view` handed out earlier --
a GPU's history in a published snapshot -- never changes under its reader.
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from typing import Any, Generic, TypeVar, cast

__all__ = ["SampleRing"]

V = TypeVar("V", float, "float | None")
_consume: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend  # runs an iterator out


class SampleRing(Generic[V]):
    """The last ``points`` samples of ``figures`` figures, oldest first: a time column and a column per figure.

    ``typecode``: the figures' array type (``"f"``: float32, NaN for a missing value), or None for
    lists that keep the values appended (``None`` included). Not thread-safe: one owner appends
    and reads (the collector's thread, the UI thread).
    """

    __slots__ = ("_append", "figures", "points", "slack", "times")

    def __init__(self, figures: int, points: int, typecode: str | None = "f") -> None:
        self.points = max(1, points)
        self.slack = max(16, self.points // 4)  # trimmed in bulk, a quarter over: amortised O(1) a point
        self.times: MutableSequence[float] = [] if typecode is None else array("d")
        self.figures: tuple[MutableSequence[V], ...] = tuple(
            cast("MutableSequence[V]", [] if typecode is None else array(typecode)) for _ in range(figures)
        )
        self._append: Callable[[Any, Any], None] = list.append if typecode is None else array.append

    def __len__(self) -> int:
        return min(len(self.times), self.points)

    def append(self, when: float, values: Sequence[V]) -> None:
        """Add one sample: its time and one value per figure, in column order."""
        times = self.times
        if len(values) != len(self.figures):
            raise ValueError(f"{len(values)} values for {len(self.figures)} figures")
        times.append(when)
        _consume(map(self._append, self.figures, values))  # each column's append, in C: every GPU, every refresh
        held = len(times)
        if held > self.points + self.slack:  # cut into new columns: a view() of the old ones stays as it was
            cut = held - self.points
            self.times = times[cut:]
            self.figures = tuple(column[cut:] for column in self.figures)

    def window(self) -> tuple[tuple[float, ...], tuple[tuple[V, ...], ...]]:
        """The last ``points`` samples, oldest first: their times, and each figure's values."""
        points = self.points
        if len(self.times) <= points:  # not full: each column whole, copied once (a slice would copy it twice)
            return tuple(self.times), tuple(map(tuple, self.figures))
        return tuple(self.times[-points:]), tuple(tuple(column[-points:]) for column in self.figures)

    def view(self) -> tuple[tuple[Sequence[Any], ...], int, int]:
        """The last ``points`` samples without copying them: the columns (time first) and the slice to read.

        The slice of these very columns keeps its values: a column is only ever appended to, and the
        oldest samples are cut by making new columns (:meth:`append`), never by changing these. So a
        view taken now reads the same later, from any thread (a slice of a list is one step under the
        GIL), whatever was appended since.
        """
        stop = len(self.times)
        return (self.times, *self.figures), max(0, stop - self.points), stop

    def nbytes(self) -> int:
        """Bytes the columns take (the arrays or lists, over-allocation included; not the objects a list holds)."""
        return sys.getsizeof(self.times) + sum(sys.getsizeof(column) for column in self.figures)
