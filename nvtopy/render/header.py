"""The monitor's one-line header, key footer and host line, laid out by priority for any width.

Why a layout by priority and not a cut at the edge: at 80 columns the header used
to lose its clock and the footer stopped mid-word. Here a line is a list of
:class:`Part` s, each with a rank (0: always kept); while the line is too wide the
least important part still shown goes whole, the later of two equals first. Only a
terminal too narrow for the parts ranked 0 is cut, with an ellipsis.

Pure: (text, style name) pieces in, pieces out, so the TUI (rich ``Text``) and
``--once`` (plain or ANSI text) draw the same line and tests need no terminal.
Text given here must already be safe for a terminal (:func:`nvtopy.textsafe.safe_text`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import HostUsage
from ..records import dataclass
from .cells import DIM, RICH_STYLES, load_category, used_of_total
from .units import NA
from .units import width_of as cell_len

__all__ = ["Part", "Piece", "choose", "fit", "host_usage_parts", "plain", "width_of"]

Piece = tuple[str, str]  # (text, rich style definition)

SEPARATOR: Piece = (" │ ", "")
BAR_MAX = 30  # cells: a wider bar says nothing more
_BAR_MIN = 6  # cells: a narrower bar is noise
_EIGHTHS = " ▏▎▍▌▋▊▉"


@dataclass(frozen=True, slots=True)
class Part:
    """Pieces shown together or not at all; ``rank`` 0 is always kept, a higher rank goes sooner."""

    pieces: tuple[Piece, ...]
    rank: int = 0

    @property
    def cells(self) -> int:
        return sum(cell_len(text) for text, _ in self.pieces)


def width_of(pieces: Sequence[Piece]) -> int:
    return sum(cell_len(text) for text, _ in pieces)


def plain(pieces: Sequence[Piece]) -> str:
    return "".join(text for text, _ in pieces)


def fit(
    parts: Sequence[Part],
    width: int,
    *,
    lead: Sequence[Piece] = (),
    right: Part | None = None,
    separator: Piece = SEPARATOR,
) -> list[Piece]:
    """``lead``, then ``parts`` joined by ``separator``, then ``right`` at the right edge, in ``width`` cells.

    Parts go whole, least important first; ``right`` (the clock) and the parts ranked 0 stay.
    The result is never wider than ``width`` (a last-resort cut ends with an ellipsis).
    """
    kept = choose(parts, width, lead=lead, right=right, separator=separator)
    pieces: list[Piece] = list(lead)
    for i, part in enumerate(kept):
        if i:
            pieces.append(separator)
        pieces.extend(part.pieces)
    if right is not None:
        gap = width - width_of(pieces) - right.cells
        pieces.append((" " * max(cell_len(separator[0]), gap), ""))
        pieces.extend(right.pieces)
    return _cut(pieces, width)


def choose(
    parts: Sequence[Part],
    width: int,
    *,
    lead: Sequence[Piece] = (),
    right: Part | None = None,
    separator: Piece = SEPARATOR,
) -> list[Part]:
    """The parts :func:`fit` shows in ``width`` cells, in order."""
    kept = [part for part in parts if part.pieces]
    sep = cell_len(separator[0])
    tail = right.cells + sep if right is not None else 0

    def size() -> int:
        return width_of(lead) + sum(p.cells for p in kept) + sep * max(0, len(kept) - 1) + tail

    while size() > width:
        droppable = [i for i, part in enumerate(kept) if part.rank > 0]
        if not droppable:
            break
        del kept[max(droppable, key=lambda i: (kept[i].rank, i))]
    return kept


def _cut(pieces: list[Piece], width: int) -> list[Piece]:
    """At most ``width`` cells; a cut line ends with ``…``."""
    if width_of(pieces) <= width:
        return pieces
    kept: list[Piece] = []
    room = max(0, width - 1)
    for text, style in pieces:
        size = cell_len(text)
        if size <= room:
            kept.append((text, style))
            room -= size
            continue
        if room:
            head = ""
            for char in text:
                if cell_len(head + char) > room:
                    break
                head += char
            kept.append((head, style))
        break
    if width >= 1:
        kept.append(("…", ""))
    return kept


# ----------------------------------------------------------------- the host line


def _bar(fraction: float, width: int) -> list[Piece]:
    """A bar of ``width`` cells, eighth-cell precision, coloured as the GPU panels' memory bars."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part and full < width else "")
    return [(filled, RICH_STYLES[load_category(fraction)]), ("░" * (width - len(filled)), "bright_black")]


def _na() -> Piece:
    return (NA, RICH_STYLES[DIM])


def _load(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def host_usage_parts(
    usage: HostUsage | None, width: int, *, missing: str = "not in this source's data", bars: bool = True
) -> list[Piece]:
    """`` CPU 23% │ load 7.42 8.10 8.00 │ MEM 120.5/256.0GiB ████░░ │ swap 0.1/8.0GiB`` in ``width`` cells.

    Each figure is N/A on its own; ``usage`` None (a remote host's, an older recording's) is one
    N/A line that says why (``missing``). Narrow, the CPU count goes first, then the load, then swap:
    memory and CPU stay. Bars take the room left: memory's first (pressure is what
    the line is for), then CPU's, then swap's, each at most :data:`BAR_MAX` (``bars=False``: none).
    """
    label = RICH_STYLES[DIM]
    if usage is None:
        return fit([Part((("host CPU, load, memory, swap: ", label), _na(), (f" ({missing})", label)))], width)
    u = usage
    cpu = Part((("CPU ", "bold"), (f"{u.cpu_busy_percent:.0f}%", "") if u.cpu_busy_percent is not None else _na()))
    loads = (u.load_1m, u.load_5m, u.load_15m)
    load_text: list[Piece] = [("load ", "bold")]
    load_text += [(_load(v), "") if v is not None else _na() for v in loads[:1]]
    load_text += [(" ", "")] + [(_load(v), "") if v is not None else _na() for v in loads[1:2]]
    load_text += [(" ", "")] + [(_load(v), "") if v is not None else _na() for v in loads[2:]]
    cpus = Part(((f"{u.cpu_count} CPUs", label),), rank=3) if u.cpu_count is not None else None
    ram_known = u.ram_used_bytes is not None and u.ram_total_bytes is not None
    mem = Part((("MEM ", "bold"), (used_of_total(u.ram_used_bytes, u.ram_total_bytes), "") if ram_known else _na()))
    if u.swap_total_bytes == 0:
        swap = Part((("swap ", "bold"), ("off", label)), rank=1)
    elif u.swap_used_bytes is not None and u.swap_total_bytes is not None:
        swap = Part((("swap ", "bold"), (used_of_total(u.swap_used_bytes, u.swap_total_bytes), "")), rank=1)
    else:
        swap = Part((("swap ", "bold"), _na()), rank=1)
    parts = [cpu, Part(tuple(load_text), rank=2), mem, swap, *((cpus,) if cpus is not None else ())]
    lead = ((" ", ""),)
    kept = choose(parts, width, lead=lead)
    room = width - width_of(fit(kept, width, lead=lead))
    # The room left goes to bars after their figures, in this order while each gets 6 cells or more.
    wants: list[tuple[Part, float]] = []
    if ram_known and u.ram_total_bytes:
        wants.append((mem, u.ram_used_bytes / u.ram_total_bytes))  # type: ignore[operator]
    if u.cpu_busy_percent is not None:
        wants.append((cpu, u.cpu_busy_percent / 100))
    if u.swap_total_bytes and u.swap_used_bytes is not None:
        wants.append((swap, u.swap_used_bytes / u.swap_total_bytes))
    wants = [(part, fraction) for part, fraction in wants if bars and any(part is k for k in kept)]
    while wants and room // len(wants) - 1 < _BAR_MIN:
        wants.pop()
    if not wants:
        return fit(kept, width, lead=lead)
    cells = min(BAR_MAX, room // len(wants) - 1)
    barred = {id(part): fraction for part, fraction in wants}
    kept = [
        Part((*part.pieces, (" ", ""), *_bar(barred[id(part)], cells)), part.rank) if id(part) in barred else part
        for part in kept
    ]
    return fit(kept, width, lead=lead)
