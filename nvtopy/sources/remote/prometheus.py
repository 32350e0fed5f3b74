"""A small client of Prometheus's HTTP query API, for views that read a Prometheus server rather than hosts.

Why not a library: the standard library has all it takes (http.client, json, zlib),
and the client must hold promises none of the small Python clients make. Each one
is checked by a test:

- **one deadline per request** (``timeout``), covering the connection, the TLS
  handshake and the whole body, and **a bounded answer**: at most ``max_bytes`` of
  JSON, counted after gzip is undone -- the exchange of :mod:`nvtopy.sources.remote.fetch`,
  the same one ``--remote`` reads an exporter with. The request runs on a daemon thread
  the caller waits for no longer than the deadline, so even a name lookup that hangs
  costs the caller ``timeout`` seconds and no more; :meth:`PrometheusClient.abort`
  cuts a request off from any thread;
- **one line per failure** (:class:`PrometheusError`): unreachable, no answer in
  time, an HTTP status, Prometheus's own ``errorType`` and ``error``, an answer that
  is not JSON, a result that is not a vector (or a matrix for a range query);
- **credentials** in the URL (``http://user:pw@prom:9090``) are sent as HTTP basic
  auth and never shown: the client is named by its URL without them;
- **TLS** (``https://``) verifies the server's certificate against the system's CAs, or only those of
  ``--ca-file`` (:mod:`nvtopy.sources.remote.tls`);
- queries are POSTed form-encoded, so a long label matcher fits; ``NaN`` and
  ``±Inf`` values parse (as floats); Prometheus's ``warnings`` (a partial answer)
  are kept in :attr:`PrometheusClient.warnings`.

Label matchers given by a user (``--where 'Hostname=~"node[1-4]"'``) are parsed
here (:func:`parse_matchers`) and written back with :func:`quote`, never pasted:
what reaches the server is exactly the matchers the user meant, or a usage error.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._version import __version__
from ...boundedfile import size_text
from ...errors import NvtopyError, UsageError
from ...jsondecode import ChunkedRows, JsonRefusedError, TaggedRows, VectorRows, decode_json
from ...textsafe import excerpt
from ..gc_policy import paused_gc
from .fetch import GRACE, Exchange, basic_authorization, failure, read_body
from .tls import client_context

if TYPE_CHECKING:
    import ssl

__all__ = [
    "MAX_BYTES",
    "VECTOR_ERRORS",
    "Matcher",
    "PrometheusClient",
    "PrometheusError",
    "parse_matchers",
    "quote",
    "selector",
]

MAX_BYTES = 64 * 1024 * 1024  # of JSON, after gzip: 512 GPUs with their processes take about 4 MiB
MAX_ERROR = 200  # characters kept of a server's error text

Vector = list[tuple[dict[str, str], float]]
# What reading an item of a vector raises when it has the wrong shape (PrometheusClient.query_items); OverflowError:
# a time or value that is an integer of hundreds of digits (JSON allows it; float() cannot hold it).
VECTOR_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError)
Matrix = list[tuple[dict[str, str], list[tuple[float, float]]]]


class PrometheusError(NvtopyError):
    """A request to Prometheus failed; ``str()`` is one line naming the server (never its credentials).

    ``kind``: ``"unreachable"``, ``"timeout"``, ``"http"``, ``"size"`` (an answer larger than
    allowed), ``"query"`` (Prometheus said ``status: error``; ``error_type`` is its ``errorType``,
    e.g. ``bad_data``), ``"json"`` or ``"result"`` (a result of the wrong shape).
    """

    def __init__(self, message: str, *, kind: str = "error", error_type: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.error_type = error_type


# ----------------------------------------------------------------- label matchers

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPERATORS = ("=~", "!~", "!=", "=")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``name op "value"`` (``op``: ``=``, ``!=``, ``=~``, ``!~``)."""

    name: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.name}{self.op}{quote(self.value)}"


def quote(value: str) -> str:
    """``value`` as a PromQL string literal: double-quoted, with backslash, quote and control characters escaped.

    Why every time: a label value from a user or a server pasted between quotes
    could close the string and add matchers (or whole expressions) of its own.
    Raises ValueError for text that is not valid Unicode (a lone surrogate).
    """
    value.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
    out = ['"']
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "\n":
            out.append("\\n")
        elif char < " " or char == "\x7f":
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def selector(*matchers: Matcher | str) -> str:
    """``{m1, m2, ...}``: matchers (objects, or text made by :func:`quote`) as one selector."""
    return "{" + ", ".join(str(m) for m in matchers) + "}"


def parse_matchers(text: str, option: str = "--where") -> tuple[Matcher, ...]:
    """Label matchers as PromQL writes them between braces: ``Hostname=~"node[1-4]", pod!=""``.

    Braces around them are allowed; strings in double or single quotes (with PromQL's
    escapes) or backticks (raw). ``__name__`` is refused: the metric names are the
    caller's to choose. A regex is checked by the server (RE2, not Python's ``re``).
    Raises :class:`~nvtopy.errors.UsageError` with one line saying what is wrong where.
    """
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    matchers: list[Matcher] = []
    position = 0

    def fail(why: str) -> UsageError:
        shown = body if len(body) <= 80 else body[:77] + "..."
        return UsageError(f"{option} {shown!r}: {why} (at character {position + 1}); e.g. 'Hostname=~\"node[1-4]\"'")

    def skip_space() -> None:
        nonlocal position
        while position < len(body) and body[position].isspace():
            position += 1

    while True:
        skip_space()
        if position >= len(body):
            break
        name = _LABEL_NAME.match(body, position)
        if name is None:
            raise fail("expected a label name")
        position = name.end()
        skip_space()
        op = next((o for o in _OPERATORS if body.startswith(o, position)), None)
        if op is None:
            raise fail("expected =, !=, =~ or !~ after the label name")
        position += len(op)
        skip_space()
        value, position = _string(body, position, fail)
        if name.group() == "__name__":
            raise UsageError(f"{option}: __name__ cannot be matched (the metrics are chosen by nvtopy); match labels")
        matchers.append(Matcher(name.group(), op, value))
        skip_space()
        if position >= len(body):
            break
        if body[position] != ",":
            raise fail("expected a comma between matchers")
        position += 1
    return tuple(matchers)


def _string(body: str, position: int, fail: Any) -> tuple[str, int]:
    """The PromQL string literal at ``position``: its value and the position after it."""
    if position >= len(body) or body[position] not in "\"'`":
        raise fail("expected a quoted value")
    quote_char = body[position]
    position += 1
    out: list[str] = []
    while True:
        if position >= len(body):
            raise fail("unterminated string")
        char = body[position]
        if char == quote_char:
            position += 1
            break
        if char == "\n" and quote_char != "`":
            raise fail("a newline inside a quoted string")
        if char != "\\" or quote_char == "`":
            out.append(char)
            position += 1
            continue
        escape = body[position + 1 : position + 2]
        if escape in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[escape])
            position += 2
        elif escape == quote_char:
            out.append(escape)
            position += 2
        elif escape in _HEX_ESCAPES:
            digits = body[position + 2 : position + 2 + _HEX_ESCAPES[escape]]
            if len(digits) != _HEX_ESCAPES[escape] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise fail(f"bad \\{escape} escape")
            code = int(digits, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise fail(f"\\{escape}{digits} is no character")
            out.append(chr(code))
            position += 2 + len(digits)
        elif escape and escape in "01234567":
            digits = body[position + 1 : position + 4]
            if len(digits) != 3 or not all(c in "01234567" for c in digits) or int(digits, 8) > 255:
                raise fail("bad octal escape")
            out.append(chr(int(digits, 8)))
            position += 4
        else:
            raise fail(f"unknown escape \\{escape} (a regex's backslash is written \\\\ in PromQL)")
    value = "".join(out)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise fail("the value is not valid UTF-8") from None
    return value, position


# ----------------------------------------------------------------- the client


class _Call(Exchange[tuple[int, bytes]]):
    """One POST to the server on a daemon thread of its own (:class:`~.fetch.Exchange`): its status and body."""

    thread_name = "nvtopy-prometheus-call"

    def __init__(self, client: PrometheusClient, path: str, body: bytes, deadline: float, limit: int) -> None:
        super().__init__(deadline, client._tls())
        self.client = client
        self.path = path
        self.body = body
        self.limit = limit  # bytes of JSON, once gzip is undone

    def work(self) -> tuple[int, bytes]:
        client = self.client
        connection = self.connection(client._host, client._port, https=client._https, timeout=self.left())
        try:
            connection.connect()
            if self.aborted:
                raise TimeoutError
            connection.putrequest("POST", client._path + self.path, skip_accept_encoding=True)
            connection.putheader("User-Agent", f"nvtopy/{__version__}")
            connection.putheader("Accept", "application/json")
            connection.putheader("Accept-Encoding", "gzip")
            connection.putheader("Content-Type", "application/x-www-form-urlencoded")
            connection.putheader("Content-Length", str(len(self.body)))
            if client._authorization:
                connection.putheader("Authorization", client._authorization)
            connection.endheaders(self.body)
            self.set_timeout(self.left())
            response = connection.getresponse()
            gzipped = (response.getheader("Content-Encoding") or "").strip().lower() == "gzip"
            return response.status, read_body(response, self, self.limit, gzip=gzipped)
        finally:
            connection.close()


class PrometheusClient:
    """Instant and range queries against one Prometheus server (or anything with its HTTP API: Thanos, Mimir).

    ``url``: ``http[s]://[user:password@]host[:port][/prefix]`` (no scheme: http); a
    prefix is where a reverse proxy serves the API (``/prometheus``). ``timeout``:
    seconds per request, all of it (also sent as the query's own ``timeout``, so the
    server gives up too). One request at a time; :meth:`abort` may come from any thread.
    """

    def __init__(
        self, url: str, *, timeout: float = 5.0, max_bytes: int = MAX_BYTES, ca_file: str | None = None
    ) -> None:
        text = url.strip()
        if not text:
            raise UsageError("--prometheus: empty URL")
        if "://" not in text:
            text = "http://" + text
        parts = urllib.parse.urlsplit(text)
        netloc = parts.netloc.rpartition("@")[2]
        shown = f"{parts.scheme}://{netloc}{parts.path}".rstrip("/")
        try:
            host, port = parts.hostname, parts.port
        except ValueError:
            raise UsageError(f"--prometheus {shown!r}: bad port or address") from None
        if parts.scheme not in ("http", "https") or not host:
            raise UsageError(f"--prometheus {shown!r}: give http://HOST:PORT (or https://)")
        if parts.query or parts.fragment:
            raise UsageError(f"--prometheus {shown!r}: give the server's URL, without a query")
        self.url = shown  # never the credentials: what messages and titles show
        self.label = netloc  # host:port, for one-line messages
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.queries = 0  # HTTP requests made so far
        self.bytes_received = 0  # bytes of answers' bodies read so far, as sent (gzip-compressed where it was)
        self.json_bytes = 0  # the same answers' JSON, gzip undone
        self.rows_received = 0  # instant query answers' rows (series) read so far: what a fleet refresh decodes
        self.exchange_cpu_seconds = 0.0  # the CPU time of the threads that asked and read the answers so far
        self.warnings: list[str] = []  # Prometheus's warnings in the last answer (a partial answer)
        self.evaluated_at: float | None = None  # the server's evaluation time of the last instant query
        self._https = parts.scheme == "https"
        self._host = host
        self._port = port
        self._path = parts.path.rstrip("/")
        self._authorization = basic_authorization(parts)  # sent as basic auth: never in a message
        self._call: _Call | None = None
        self._ssl = client_context(ca_file)  # --ca-file: read now (a usage error); None: made when first needed

    def __repr__(self) -> str:
        return f"PrometheusClient({self.url!r})"

    # ----------------------------------------------------------------- the API

    def query(self, expr: str, at: float | None = None, *, max_bytes: int | None = None) -> Vector:
        """An instant query: each series' labels and value (``NaN``, ``±Inf`` included) at ``at`` (default: now).

        :attr:`evaluated_at` becomes the time the server evaluated it at (its clock, not ours).
        ``max_bytes``: a smaller bound than the client's for this answer (a list of hosts, not their GPUs).
        """
        before = self.evaluated_at
        result = self.query_items(expr, at, max_bytes=max_bytes)
        out: Vector = []
        try:
            for item in result:
                metric = item["metric"]
                _, value = item["value"]
                "".join(metric.values())  # TypeError unless every label value is text (fast: in C)
                out.append((metric, float(value)))
        except VECTOR_ERRORS:
            self.evaluated_at = before  # as if it had not been read
            raise self.malformed() from None
        return out

    def query_items(
        self, expr: str, at: float | None = None, *, max_bytes: int | None = None, rows: VectorRows | None = None
    ) -> list[Any] | ChunkedRows:
        """An instant query's result as decoded, each item not yet checked: ``{"metric": {...}, "value": [t, "v"]}``.

        Why: a fleet's answer is some 50 series a GPU (200,000 at 4,096 GPUs), and a caller
        that reads each item once anyway checks it there (as :meth:`query` does: a ``metric``
        of text values, a ``value`` pair whose second is a number's text), catching
        :data:`VECTOR_ERRORS` and raising :meth:`malformed`, rather than have a list of
        pairs made first and walked again. :attr:`evaluated_at` is set as by :meth:`query`.

        ``rows``: the items as its rows instead (``.metric`` of its labels as attributes, ``.value``), each
        checked here but for its value's text (the caller's ``float()``): decoded straight into them where
        the answer fits them exactly, else decoded as any JSON, checked item by item as :meth:`query`
        does (:meth:`malformed`) and made into them, the labels the rows do not name left out. ``rows`` a
        :class:`~nvtopy.jsondecode.TaggedRows`: the rows of a well-formed answer come as
        :class:`~nvtopy.jsondecode.ChunkedRows`, decoded a chunk at a time as the caller iterates them (each
        chunk's rows read while still in the caches), a chunk that does not fit them as any JSON, checked item by
        item; :attr:`rows_received` counts each chunk's rows as it is decoded.
        """
        form = {"query": expr, "timeout": f"{self.timeout:g}s"}
        if at is not None:
            form["time"] = repr(float(at))
        data = self._post("/api/v1/query", form, max_bytes, rows)
        if data.get("resultType") != "vector":
            raise self._error(f"answered a {_shown_type(data)} where a vector was asked for", "result")
        result = data.get("result")
        if isinstance(result, ChunkedRows):
            first = result.first()
            evaluated = at
            if first is not None:
                try:
                    evaluated = float(first.value[0])
                except VECTOR_ERRORS:
                    raise self.malformed() from None
            self.evaluated_at = evaluated
            return result
        if not isinstance(result, list):
            raise self._error("answered a malformed result", "result")
        if rows is not None and not isinstance(result, _Decoded):
            result = self._rows(result, rows)
        evaluated = at
        if result:
            try:
                evaluated = float(result[0].value[0] if rows is not None else result[0]["value"][0])
            except VECTOR_ERRORS:
                raise self.malformed() from None
        self.evaluated_at = evaluated
        self.rows_received += len(result)
        return result

    def _rows(self, result: list[Any], rows: VectorRows) -> list[Any]:
        """An answer's items decoded as any JSON, checked as :meth:`query` checks them, made rows."""
        made = rows.row
        out = []
        try:
            for item in result:
                labels = item["metric"]
                _, _ = value = item["value"]
                "".join(labels.values())  # TypeError unless every label value is text (fast: in C)
                out.append(made(labels, value))
        except VECTOR_ERRORS:
            raise self.malformed() from None
        return out

    def _chunk_rows(self, chunk: bytes, rows: VectorRows) -> list[Any]:
        """A chunk of an answer's rows (:class:`~nvtopy.jsondecode.ChunkedRows`) that does not fit the typed rows:
        decoded as any JSON and checked item by item, with the errors a whole answer read so gets."""
        try:
            items = decode_json(chunk)
        except JsonRefusedError as exc:
            if not exc.syntax:
                raise self._error(f"answered JSON that cannot be read ({exc})", "json") from None
            raise self._error("answered something that is not Prometheus's JSON", "json") from None
        if not isinstance(items, list):
            raise self.malformed()
        return self._rows(items, rows)

    def _keep_warnings(self, warnings: object) -> None:
        """An answer's warnings (a partial answer), at most 10, each one line of at most MAX_ERROR characters."""
        if isinstance(warnings, list):
            self.warnings = [_one_line(w, MAX_ERROR) for w in warnings[:10]]

    def _count_rows(self, count: int) -> None:
        self.rows_received += count

    def malformed(self) -> PrometheusError:
        """The error of an instant query's result with an item of the wrong shape."""
        return self._error("answered a malformed vector", "result")

    def query_range(self, expr: str, start: float, end: float, step: float) -> Matrix:
        """A range query: each series' labels and its (time, value) points from ``start`` to ``end``, every ``step``."""
        form = {
            "query": expr,
            "start": repr(float(start)),
            "end": repr(float(end)),
            "step": repr(float(step)),
            "timeout": f"{self.timeout:g}s",
        }
        data = self._post("/api/v1/query_range", form)
        if data.get("resultType") != "matrix":
            raise self._error(f"answered a {_shown_type(data)} where a matrix was asked for", "result")
        result = data.get("result")
        if not isinstance(result, list):
            raise self._error("answered a malformed result", "result")
        out: Matrix = []
        try:
            for item in result:
                metric = item["metric"]
                "".join(metric.values())  # TypeError unless every label value is text
                out.append((metric, [(float(t), float(v)) for t, v in item["values"]]))
        except VECTOR_ERRORS:
            raise self._error("answered a malformed matrix", "result") from None
        return out

    def abort(self) -> None:
        """Cut the request in progress off (from any thread): it fails at once as not answered in time."""
        call = self._call
        if call is not None:
            call.abort(release=True)  # the caller waiting on it goes at once

    # ----------------------------------------------------------------- one request

    def _tls(self) -> ssl.SSLContext | None:
        """What https:// is verified with: ``--ca-file``'s context, or the system's CAs (made when first needed)."""
        if not self._https:
            return None
        if self._ssl is None:
            import ssl

            self._ssl = ssl.create_default_context()  # the system's CAs (--ca-file: see .tls); the host name too
        return self._ssl

    def _post(
        self, path: str, form: dict[str, str], max_bytes: int | None = None, rows: VectorRows | None = None
    ) -> dict[str, Any]:
        """POST ``form`` to ``path``; the answer's ``data`` (warnings kept), or PrometheusError in one line.

        ``rows``: a successful answer that fits them exactly is decoded straight into them
        (``data["result"]`` a :class:`_Decoded` list of them); any other is decoded and read as always.
        """
        limit = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
        self.warnings = []
        self.queries += 1
        try:
            body = urllib.parse.urlencode(form).encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError("the query is not valid UTF-8") from None
        try:
            call = self._call = _Call(self, path, body, time.monotonic() + self.timeout, limit)
            call.start()
        except RuntimeError:  # no thread to be had (a process at its limit)
            raise self._error("not asked (no thread available)", "unreachable") from None
        if not call.done.wait(self.timeout + GRACE):
            call.abort(release=True)  # its thread ends as soon as the socket says so; a name lookup ends by itself
            raise self._error(f"no answer within {self.timeout:g} s", "timeout")
        self.exchange_cpu_seconds += call.cpu_seconds  # set before done was: the exchange's thread has ended
        if call.aborted:  # abort() from another thread (the source stopping): whatever the socket said after
            raise self._error("request cut off", "timeout")
        if call.error is not None:
            raise self._failure(call.error, limit) from None
        assert call.result is not None
        status, raw = call.result
        self.bytes_received += call.received
        self.json_bytes += len(raw)
        refused: JsonRefusedError | None = None
        with paused_gc():
            if isinstance(rows, TaggedRows) and status == 200:
                found = rows.answer(raw)
                if found is not None:
                    self._keep_warnings(found.envelope.warnings)
                    tagged = rows
                    chunked = ChunkedRows(
                        found.buffer,
                        tagged.decode_rows,
                        lambda chunk: self._chunk_rows(chunk, tagged),
                        self._count_rows,
                        start=found.start,
                        end=found.end,
                        last=found.last,
                    )
                    return {"resultType": found.envelope.data.resultType, "result": chunked}
            typed = rows.decode(raw) if rows is not None and status == 200 else None
            if typed is not None and typed.status == "success":
                self._keep_warnings(typed.warnings)
                return {"resultType": typed.data.resultType, "result": _Decoded(typed.data.result)}
            try:
                answer = decode_json(raw)
            except JsonRefusedError as exc:  # as a recording's line: malformed, nested too deeply, a number too long
                answer, refused = None, exc
        if status == 200 and refused is not None and not refused.syntax:
            raise self._error(f"answered JSON that cannot be read ({refused})", "json")
        if status != 200 or not isinstance(answer, dict) or answer.get("status") != "success":
            if isinstance(answer, dict) and answer.get("status") == "error":
                kind = _one_line(answer.get("errorType"), 40)
                why = _one_line(answer.get("error"), MAX_ERROR)
                raise self._error(f"query error ({kind}): {why}", "query", error_type=kind)
            if status != 200:
                raise self._error(f"answered HTTP {status}", "http")
            raise self._error("answered something that is not Prometheus's JSON", "json")
        self._keep_warnings(answer.get("warnings"))
        data = answer.get("data")
        if not isinstance(data, dict):
            raise self._error("answered without data", "result")
        return data

    def _error(self, what: str, kind: str, error_type: str | None = None) -> PrometheusError:
        return PrometheusError(f"prometheus {self.label}: {what}", kind=kind, error_type=error_type)

    def _failure(self, exc: BaseException, limit: int) -> PrometheusError:
        """One line for what went wrong in the exchange (``limit``: the bytes the answer was allowed)."""
        why = failure(exc)
        exc = why.exc
        if why.kind in ("slow", "timeout"):
            return self._error(f"no answer within {self.timeout:g} s", "timeout")
        if why.kind == "size":
            return self._error(f"answer larger than {size_text(limit)}", "size")
        if why.kind == "gzip":
            return self._error("answered broken gzip", "http")
        if why.kind == "cut short":
            return self._error("answer cut short", "http")
        if why.kind == "closed":
            return self._error("closed the connection without answering", "unreachable")
        if why.kind == "not http":
            return self._error(f"not an HTTP answer ({type(exc).__name__})", "http")
        if why.kind == "untrusted":
            return self._error(f"TLS certificate not trusted: {_one_line(why.verify, 120)}", "unreachable")
        if isinstance(exc, OSError):  # refused, no route, unknown name, another TLS failure
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc) or type(exc).__name__
            return self._error(f"unreachable: {_one_line(reason, 120).lower()}", "unreachable")
        return self._error(f"could not be read ({type(exc).__name__})", "unreachable")


class _Decoded(list[Any]):
    """An answer's rows as :class:`~nvtopy.jsondecode.VectorRows` decoded them: told apart from any list of JSON."""


def _shown_type(data: dict[str, Any]) -> str:
    kind = data.get("resultType")
    return _one_line(kind, 20) if isinstance(kind, str) else "result without a type"


def _one_line(text: object, limit: int) -> str:
    """A server's text in one line of at most ``limit`` characters (the views make it terminal-safe)."""
    return excerpt(" ".join(str(text if text is not None else "").split()), limit, mark="...", safe=False)
