"""Metric families as the text ``nvtopy exporter`` answers: rendered once per snapshot, shared by every scrape.

:class:`Exposition` holds the latest snapshot's text (and its gzip), made by
:class:`TextRenderer` from :class:`~nvtopy.formats.prometheus.collect.SnapshotCollector`'s
families (in the naming it is given: :mod:`nvtopy.formats.dcgm_naming`); only
``nvtopy_snapshot_age_seconds`` is made per scrape.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...model import Snapshot
from ..dcgm_naming import LEGACY, Naming
from .collect import AGE_HELP, AGE_NAME, SnapshotCollector, SnapshotHolder, age_families, age_seconds

__all__ = ["CONTENT_TYPE", "GZIP_LEVEL", "Exposition", "TextRenderer", "age_text", "last_stored_block"]


# prometheus-client's text format, version 0.0.4: what ``nvtopy exporter`` always answers, as dcgm-exporter does
# (every Prometheus accepts it; the OpenMetrics text of the same families holds the same samples).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Family type -> (suffix of its samples' name, its TYPE in the text format), for the types rendered here.
_TEXT_TYPES = {"gauge": ("", "gauge"), "counter": ("_total", "counter"), "unknown": ("", "untyped")}
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")
_FINITE = float("inf")  # samples the text format moves to families of their own

GZIP_LEVEL = 1  # 3.5 ms and 100 kB for 1.2 MB of text (8 GPUs x 512 processes); level 9: 16 ms and 70 kB
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # RFC 1952: deflate, no name, no mtime, OS unknown


class TextRenderer:
    """Families as prometheus-client's ``generate_latest`` writes them, byte for byte, in a fraction of its time.

    Why: ``generate_latest`` formats every label of every sample anew, and a node's
    series carry 7 to 12 labels each: 70 ms of CPU for 8 GPUs and 512 processes,
    once a second. Here the label text of a series is made once and kept while the
    series exists -- a GPU's labels never change, a process's not while it lives,
    and its seven families share them -- so a render mostly joins strings it already
    has. Label and metric names go through prometheus-client's own escaping and
    values through its ``floatToGoString``; a family this does not know (a histogram,
    OpenMetrics-only samples) is handed to ``generate_latest`` itself. Not thread-safe:
    one renderer per caller (:class:`Exposition` holds its lock).
    """

    def __init__(self) -> None:
        # id of a label dict -> (the dict, its text) of the last render. Label dicts are never changed once their
        # sample is made (prometheus-client's, and the collector's, which keeps a GPU's or a process's dict from
        # one snapshot to the next while it is equal): a dict seen before is not read again. The entry holds the
        # dict, so no other object can have its id meanwhile.
        self._series: dict[int, tuple[dict[str, str], str]] = {}
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}  # the last render's label texts, by content
        self._values: dict[float, str] = {}  # the last render's value texts
        self._names: dict[str, str] = {}
        # (family name, type, help) -> its HELP and TYPE lines and its OpenMetrics-only sample names; None where
        # the type is not one rendered here.
        self._heads: dict[tuple[str, str, str], tuple[str, frozenset[str]] | None] = {}
        # id of a family -> (the family, its text) of the last render: a family object rendered again (the
        # SnapshotCollector reuses those whose inputs did not change) is not formatted again. The entry holds the
        # family, so no other object can have its id meanwhile.
        self._texts: dict[int, tuple[Any, str]] = {}

    def render(self, families: Iterable[Any]) -> bytes:
        from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
        from prometheus_client.utils import floatToGoString

        series_before = self._series
        series_now: dict[int, tuple[dict[str, str], str]] = {}
        previous = self._labels
        labels: dict[tuple[tuple[str, str], ...], str] = {}
        old_values = self._values
        values: dict[float, str] = {}
        names = self._names
        heads = self._heads
        old_texts, texts = self._texts, {}
        out: list[str] = []
        append = out.append
        for family in families:
            done = old_texts.get(id(family))
            if done is not None and done[0] is family:
                append(done[1])
                texts[id(family)] = done
                continue
            start = len(out)
            head_key = (family.name, family.type, family.documentation)
            if head_key in heads:
                head = heads[head_key]
            else:
                head = heads[head_key] = _head(family, escape_metric_name)
            if head is None:
                append(_generate_latest([family]))
                texts[id(family)] = (family, _joined(out, start))
                continue
            append(head[0])
            special = head[1]
            raw_name = sample_name = None
            for sample in family.samples:  # Sample: name, labels, value, timestamp, ... (indexed: the fastest way in)
                if sample[0] is not raw_name:
                    raw_name = sample[0]
                    if raw_name in special:  # an OpenMetrics-only sample: prometheus-client writes the family
                        del out[start:]
                        append(_generate_latest([family]))
                        break
                    sample_name = names.get(raw_name)
                    if sample_name is None:
                        sample_name = names[raw_name] = escape_metric_name(raw_name)
                series = sample[1]
                entry = series_now.get(id(series))
                if entry is None:
                    entry = series_before.get(id(series))
                    if entry is None or entry[0] is not series:
                        key = tuple(series.items())
                        text = labels.get(key)
                        if text is None:
                            text = previous.get(key)
                            if text is None:
                                text = ",".join(f'{escape_label_name(k)}="{_quoted(v)}"' for k, v in sorted(key))
                                text = f"{{{text}}}" if text else ""
                            labels[key] = text
                        entry = (series, text)
                    series_now[id(series)] = entry
                text = entry[1]
                value = sample[2]
                if type(value) is not float:
                    value = float(value)
                # Values repeat (totals, limits, start times, zeros): each one's text is kept a render long.
                # 0.0 is not (-0.0 equals it and is written "-0.0"), nor NaN (never equal, never found).
                shown = values.get(value) if value else None
                if shown is None:
                    shown = old_values.get(value) if value else None
                    if shown is None:
                        shown = repr(value)
                        # floatToGoString's own cases: not finite, or Go's exponent form (a dot past the 6th digit).
                        if not -_FINITE < value < _FINITE or (value > 0 and shown.find(".") > 6):
                            shown = floatToGoString(value)  # type: ignore[no-untyped-call]  # client's, untyped
                    if value:
                        values[value] = shown
                stamp = sample[3]
                if stamp is None:
                    append(f"{sample_name}{text} {shown}\n")
                else:
                    append(f"{sample_name}{text} {shown} {int(float(stamp) * 1000):d}\n")
            texts[id(family)] = (family, _joined(out, start))
        self._texts = texts
        self._series = series_now  # a series gone from this render is forgotten
        self._labels = labels
        self._values = values
        if len(names) > 4096:
            names.clear()
        if len(heads) > 4096:
            heads.clear()
        return "".join(out).encode("utf-8")


def _head(family: Any, escape_metric_name: Callable[[str], str]) -> tuple[str, frozenset[str]] | None:
    """A family's HELP and TYPE lines and its OpenMetrics-only sample names; None for a type not rendered here."""
    known = _TEXT_TYPES.get(family.type)
    if known is None:
        return None
    name = escape_metric_name(family.name + known[0])
    help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {known[1]}\n", frozenset(
        family.name + s for s in _OPENMETRICS_ONLY
    )


def age_text(snapshot: Snapshot | None) -> bytes:
    """``nvtopy_snapshot_age_seconds`` as of now, as :class:`TextRenderer` writes :func:`~.collect.age_families`.

    Made per scrape, so written here without a family: its HELP and TYPE lines are the same every time.
    """
    if snapshot is None:
        return b""
    from prometheus_client.utils import floatToGoString

    value: str = floatToGoString(age_seconds(snapshot))  # type: ignore[no-untyped-call]  # client's, untyped
    return _AGE_HEAD + value.encode("ascii") + b"\n"


_AGE_HEAD = f"# HELP {AGE_NAME} {AGE_HELP}\n# TYPE {AGE_NAME} gauge\n{AGE_NAME} ".encode("ascii")


def last_stored_block(data: bytes) -> bytes:
    """``data`` as the last blocks of a byte-aligned deflate stream, stored (RFC 1951 3.2.4): no compressor made.

    Why: a scrape's own few hundred bytes (the age, the readiness gauge) follow the cached deflate stream of
    the snapshot's text; a compressor made for them allocated and cleared some 256 kB, about as much CPU as the
    rest of the scrape, to save some 150 bytes.
    """
    blocks = []
    for start in range(0, len(data), 65535):  # at most 65,535 bytes a stored block
        part = data[start : start + 65535]
        last = start + 65535 >= len(data)
        blocks.append(struct.pack("<BHH", 1 if last else 0, len(part), len(part) ^ 0xFFFF) + part)
    return b"".join(blocks) or b"\x01\x00\x00\xff\xff"


def _joined(out: list[str], start: int) -> str:
    """``out[start:]`` replaced by their concatenation, which is returned."""
    text = "".join(out[start:])
    out[start:] = [text]
    return text


def _quoted(value: str) -> str:
    """A label value as the text format quotes it (prometheus-client's ``_escape`` for UTF-8 values)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _generate_latest(families: list[Any]) -> str:
    """prometheus-client's own text of ``families``."""
    from prometheus_client.exposition import generate_latest

    class Families:
        def collect(self) -> list[Any]:
            return families

    return generate_latest(Families()).decode("utf-8")


@dataclass
class _Rendered:
    """One snapshot's exposition, but its age: the text, and its gzip once asked for."""

    snapshot: Snapshot | None
    text: bytes
    gzip: bytes | None = None  # gzip header and the text's deflate stream, flushed but not finished
    crc: int = 0  # CRC-32 of the text (the gzip trailer's, before the age is added)


class Exposition:
    """The latest snapshot's exposition as bytes: rendered once per snapshot, shared by every scrape.

    Why: a scrape rendered the whole exposition again (30 ms at 8 GPUs and 64
    processes, 80 ms at 512), and gzipped it again, for every scraper and every
    idle-then-retried connection. A snapshot never changes once published, so its
    text -- everything but ``nvtopy_snapshot_age_seconds``, which comes last -- is
    made once, by the first scrape after it or, once something has scraped, by
    :meth:`prerender` as soon as the poller publishes it (so a scrape finds it ready).
    Concurrent scrapes wait for that one render and share its bytes.

    gzip the same way: the text's deflate stream is made once, ended with a sync
    flush (byte-aligned, not final); a scrape adds the age as a final stored
    (uncompressed) block of its own and writes the trailer (CRC-32 and length, from the
    cached CRC). The result is one ordinary gzip member, which any gzip reader accepts.
    """

    content_type = CONTENT_TYPE

    def __init__(self, source: SnapshotHolder, *, naming: Naming = LEGACY, gzip_level: int = GZIP_LEVEL) -> None:
        """``naming``: the names, units and labels written (``nvtopy exporter --names``; dcgm-exporter's legacy)."""
        self.source = source  # anything with a ``latest`` Snapshot (a Poller)
        self._collector = SnapshotCollector(source, naming)
        self._renderer = TextRenderer()
        self._gzip_level = gzip_level
        self._lock = threading.Lock()
        self._rendered: _Rendered | None = None
        self._gzip_wanted = False  # the last scrape asked for gzip: prerender it too

    def prerender(self, snapshot: Snapshot) -> None:
        """Render ``snapshot`` now, as a scrape would (a poller's subscriber): nothing until a first scrape."""
        with self._lock:
            if self._rendered is not None:  # else nobody scrapes (yet, or any more): no work
                self._current(snapshot, self._gzip_wanted)

    def close(self) -> None:
        """No more prerendering until a scrape comes (the server is gone; the poller may go on); the bytes go."""
        with self._lock:
            self._rendered = None

    def chunks(self, *, gzip: bool = False) -> list[bytes]:
        """The exposition of the latest snapshot, as a WSGI body (gzip: one gzip member), age as of now."""
        snapshot: Snapshot | None = self.source.latest
        with self._lock:
            self._gzip_wanted = gzip
            rendered = self._current(snapshot, gzip)
        age = age_text(snapshot)
        if not gzip:
            return [rendered.text, age]
        crc = zlib.crc32(age, rendered.crc)
        size = (len(rendered.text) + len(age)) & 0xFFFFFFFF
        assert rendered.gzip is not None
        return [rendered.gzip, last_stored_block(age) + struct.pack("<II", crc, size)]

    def selected(self, names: Iterable[str]) -> bytes:
        """The families named ``names`` (``?name[]=``), age included, rendered for this request only.

        prometheus-client's own ``name[]`` filter finds families by what a collector
        declares up front, and the families of a snapshot are not known before it:
        it answered nothing. A family is selected by its name or one of its samples'.
        """
        wanted = set(names)
        snapshot: Snapshot | None = self.source.latest
        families = self._collector.families(snapshot) + age_families(snapshot)
        chosen = [f for f in families if f.name in wanted or any(sample[0] in wanted for sample in f.samples)]
        return TextRenderer().render(chosen)

    def _current(self, snapshot: Snapshot | None, gzip: bool) -> _Rendered:
        """The rendering of ``snapshot``, made if it is not the one kept (the lock is held)."""
        rendered = self._rendered
        if rendered is None or rendered.snapshot is not snapshot:
            rendered = self._rendered = _Rendered(snapshot, self._render(snapshot))
        if gzip and rendered.gzip is None:
            deflate = zlib.compressobj(self._gzip_level, zlib.DEFLATED, -zlib.MAX_WBITS)
            body = deflate.compress(rendered.text) + deflate.flush(zlib.Z_SYNC_FLUSH)
            rendered.gzip, rendered.crc = _GZIP_HEADER + body, zlib.crc32(rendered.text)
        return rendered

    def _render(self, snapshot: Snapshot | None) -> bytes:
        """The text of every family of ``snapshot`` but its age: the work done once per snapshot."""
        return self._renderer.render(self._collector.families(snapshot))
