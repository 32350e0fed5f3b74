"""What the exporter answers: the WSGI app that serves the latest snapshot's exposition to a scrape.

The server (:mod:`.server`) moves bytes under deadlines; this is what the bytes are. A scrape
gets :class:`~nvtopy.formats.prometheus.expose.Exposition`'s bytes of the latest snapshot, rendered once
per snapshot and shared, then the exporter's own series, made per scrape: ``nvtopy_exporter_ready``
always (so ``/metrics`` is never empty, not even before the first collection) and, with
``--self-metrics``, :mod:`.selfmetrics`'. ``GET /health`` (dcgm-exporter's path, which its Helm
chart probes; ``/ready`` the same) answers :mod:`.readiness`' verdict: 200 or 503 and one line of
text. ``GET /once.txt`` and ``/once.json`` answer the latest snapshot as ``nvtopy --once --no-color``
and ``nvtopy --once --json`` print it (the same renderers, so the same escaping), for curl and
scripts; 503 before the first collection. Anything else goes to prometheus-client's own app, as it
always did.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...formats.prometheus.collect import SnapshotHolder
from ...formats.prometheus.expose import GZIP_LEVEL, Exposition, last_stored_block
from ...model import Snapshot
from .readiness import Readiness
from .selfmetrics import SelfMetrics

__all__ = ["HEALTH_PATHS", "ONCE_PATHS", "ScrapeBody", "WsgiApp", "metrics_app", "once_body"]

StartResponse = Callable[..., Any]  # WSGI's start_response(status, headers, exc_info=None)
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

HEALTH_PATHS = ("/health", "/ready")
"""Where the readiness verdict is answered (every other path serves the metrics, as prometheus-client's app does)."""

ONCE_PATHS = ("/once.txt", "/once.json")
"""The latest snapshot as ``nvtopy --once`` prints it: text, or ``--json``'s document."""

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # RFC 1952: deflate, no name, no mtime, OS unknown


def metrics_app(
    body: ScrapeBody,
    fallback: WsgiApp,
    *,
    readiness: Readiness,
    self_metrics: SelfMetrics | None = None,
    snapshots: SnapshotHolder | None = None,
) -> WsgiApp:
    """The WSGI app: ``/health`` gets ``readiness``' verdict; a GET, the exposition and the exporter's own series.

    ``fallback`` is prometheus-client's app over the same source: it answers
    OPTIONS, other methods and ``/favicon.ico`` as it always did. A ``name[]``
    filter (rare) gets the families it names, rendered for that request. Any
    other path serves the metrics, as prometheus-client's app does.
    """
    from urllib.parse import parse_qs

    from prometheus_client.exposition import gzip_accepted

    def own_families() -> list[Any]:
        return readiness.families() + (self_metrics.families() if self_metrics is not None else [])

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")
        if path in HEALTH_PATHS and method in ("GET", "HEAD"):
            verdict = readiness.verdict()
            text = (verdict.reason + "\n").encode("utf-8")
            status = "200 OK" if verdict.ready else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(text)))])
            return [text] if method == "GET" else []
        if path in ONCE_PATHS and method in ("GET", "HEAD") and snapshots is not None:
            status, content_type, text = once_body(snapshots.latest, json_format=path == "/once.json")
            start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(text)))])
            return [text] if method == "GET" else []
        if method != "GET" or path == "/favicon.ico":
            return fallback(environ, start_response)
        started = time.perf_counter()
        query = environ.get("QUERY_STRING")
        names = parse_qs(query).get("name[]") if query else None  # as prometheus-client reads it (name%5B%5D too)
        headers = [("Content-Type", body.content_type)]
        if names:
            chunks = body.selected(names, own_families())
        else:
            own = readiness.text() if self_metrics is None else readiness.text() + _render(self_metrics.families())
            if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
                chunks = body.chunks(own, gzip=True)
                headers.append(("Content-Encoding", "gzip"))
            else:
                chunks = body.chunks(own)
        headers.append(("Content-Length", str(sum(map(len, chunks)))))
        start_response("200 OK", headers)
        if self_metrics is None:
            return chunks
        return _Timed(chunks, lambda: self_metrics.scraped(time.perf_counter() - started))

    return app


def once_body(snapshot: Snapshot | None, *, json_format: bool) -> tuple[str, str, bytes]:
    """``/once.txt`` or ``/once.json`` of ``snapshot``: (status, content type, UTF-8 body).

    The CLI's renderers (``nvtopy --once --no-color``, ``--once --json``), so the same escaping of
    untrusted text; the text to a string, which is no terminal: no colour, commands whole.
    """
    if snapshot is None:
        return "503 Service Unavailable", "text/plain; charset=utf-8", b"no snapshot yet: the first collection runs\n"
    if json_format:
        from ...formats.contract import dumps

        return "200 OK", "application/json; charset=utf-8", (dumps(snapshot) + "\n").encode("utf-8")
    import io

    from ...render.text import render_snapshot

    out = io.StringIO()
    render_snapshot(snapshot, out, color=False)
    return "200 OK", "text/plain; charset=utf-8", out.getvalue().encode("utf-8")


class ScrapeBody:
    """A scrape's body: the exposition's bytes, then the exporter's own series; with gzip, one gzip member.

    Why not :meth:`Exposition.chunks(gzip=True) <nvtopy.formats.prometheus.expose.Exposition.chunks>`:
    its member ends with the age, and the exporter's own series come after it; a second
    gzip member would be valid gzip, but curl (7.88) stops reading after the first. So
    the same splice here: the text's deflate stream, sync-flushed (byte-aligned, not
    final), is kept while the exposition's text is the same bytes (one snapshot); a scrape
    adds what follows it (the age and the exporter's own series, a few hundred bytes) as a
    final stored block of its own and writes the trailer from the kept CRC-32. Like the exposition, once a
    scrape asked for gzip, the deflate of each new snapshot is made as it is published
    (:meth:`prerender`), not by the scrape that finds it.
    """

    def __init__(self, exposition: Exposition, *, level: int = GZIP_LEVEL) -> None:
        self.exposition = exposition
        self.content_type = exposition.content_type
        self._level = level
        self._lock = threading.Lock()
        self._text: bytes | None = None  # the exposition's text whose deflate is kept
        self._prefix = b""  # gzip header and that text's deflate stream, flushed but not finished
        self._crc = 0
        self._gzip_wanted = False  # the last scrape asked for gzip: prerender it too
        self._closed = False

    def chunks(self, own: bytes, *, gzip: bool = False) -> list[bytes]:
        """The exposition of the latest snapshot, then ``own`` (the exporter's series), as a WSGI body."""
        head, *rest = self.exposition.chunks()
        self._gzip_wanted = gzip
        if not gzip:
            return [head, *rest, own]
        tail = b"".join(rest) + own
        prefix, crc = self._deflated(head)
        trailer = struct.pack("<II", zlib.crc32(tail, crc), (len(head) + len(tail)) & 0xFFFFFFFF)
        return [prefix, last_stored_block(tail) + trailer]

    def selected(self, names: list[str], own: list[Any]) -> list[bytes]:
        """The families named ``names`` (``?name[]=``), the exporter's own among them, for this request only."""
        wanted = set(names)
        chosen = [f for f in own if f.name in wanted or any(sample[0] in wanted for sample in f.samples)]
        return [self.exposition.selected(names), _render(chosen)]

    def prerender(self, snapshot: Snapshot) -> None:
        """Deflate the new snapshot's text now (a poller's subscriber, after the exposition's), if gzip is asked for."""
        if self._gzip_wanted and not self._closed:
            self._deflated(self.exposition.chunks()[0])

    def close(self) -> None:
        """No more prerendering (the server is gone; the poller may go on); the bytes go."""
        self._closed = True
        self.exposition.close()
        with self._lock:
            self._text, self._prefix = None, b""

    def _deflated(self, text: bytes) -> tuple[bytes, int]:
        """The gzip header and ``text``'s deflate stream, and its CRC-32: made once while ``text`` is the same."""
        with self._lock:  # concurrent scrapes of a new snapshot: one of them deflates it
            if self._text is not text:
                deflate = zlib.compressobj(self._level, zlib.DEFLATED, -zlib.MAX_WBITS)
                self._prefix = _GZIP_HEADER + deflate.compress(text) + deflate.flush(zlib.Z_SYNC_FLUSH)
                self._text, self._crc = text, zlib.crc32(text)
            return self._prefix, self._crc


class _Families:
    """A handful of families, as prometheus-client's ``generate_latest`` takes them (a collector)."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> list[Any]:
        return self._families


def _render(families: list[Any]) -> bytes:
    """prometheus-client's text of a handful of families (made per scrape: there is nothing to cache)."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(_Families(families))


class _Timed:
    """A WSGI body that reports, when the server closes it, how long the request took: its bytes sent, or not."""

    def __init__(self, body: list[bytes], done: Callable[[], None]) -> None:
        self._body = body
        self._done: Callable[[], None] | None = done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            done()
