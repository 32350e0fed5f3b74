"""What the exporter answers: the WSGI app that serves the latest snapshot's exposition to a scrape.

The server (:mod:`.server`) moves bytes under deadlines; this is what the bytes are. A scrape
gets :class:`~nvtopy.formats.prometheus.expose.Exposition`'s bytes of the latest snapshot, rendered once
per snapshot and shared; anything else goes to prometheus-client's own app, as it always did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...formats.prometheus.expose import Exposition

__all__ = ["WsgiApp", "metrics_app"]

StartResponse = Callable[..., Any]  # WSGI's start_response(status, headers, exc_info=None)
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def metrics_app(exposition: Exposition, fallback: WsgiApp) -> WsgiApp:
    """The WSGI app: a GET is answered with ``exposition``'s bytes; anything else goes to ``fallback``.

    ``fallback`` is prometheus-client's app over the same source: it answers
    OPTIONS, other methods and ``/favicon.ico`` as it always did. A ``name[]``
    filter (rare) gets the families it names, rendered for that request. Any
    path serves the metrics, as prometheus-client's app does.
    """
    from urllib.parse import parse_qs

    from prometheus_client.exposition import gzip_accepted

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico":
            return fallback(environ, start_response)
        query = environ.get("QUERY_STRING")
        names = parse_qs(query).get("name[]") if query else None  # as prometheus-client reads it (name%5B%5D too)
        if names:
            body = exposition.selected(names)
            start_response("200 OK", [("Content-Type", exposition.content_type), ("Content-Length", str(len(body)))])
            return [body]
        gzip = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
        chunks = exposition.chunks(gzip=gzip)
        headers = [("Content-Type", exposition.content_type), ("Content-Length", str(sum(map(len, chunks))))]
        if gzip:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return chunks

    return app
