"""One HTTP exchange with another host, bounded in time and size: what ``--remote`` and ``--prometheus`` share.

Why one module: the limits here are the security-relevant part of reading a peer nvtopy
does not control, and they were written twice (the exporter scraper and the Prometheus
client), each with its own constants and reading loop. Here they exist once:

- **one deadline per exchange**, covering the connection, the TLS handshake and the whole
  body: the body is read in chunks of :data:`CHUNK` with the socket's timeout shrunk to what
  is left (:func:`read_body`), so a peer that sends one byte a second cannot stretch it, as a
  per-read timeout would let it. The exchange runs on a daemon thread of its own
  (:class:`Exchange`) which the caller waits for no longer than the deadline and
  :data:`GRACE`, so even a name lookup that hangs (no socket timeout reaches it) costs the
  caller no more; :meth:`Exchange.abort` shuts its sockets from any thread;
- **a bounded answer**: at most the caller's ``limit`` bytes, counted after gzip is undone
  (a small gzip bomb stays small); each caller keeps its own cap (an exporter's page is far
  smaller than a Prometheus answer about a fleet);
- **credentials** in a URL (``http://user:pw@host``) become an HTTP basic-auth header
  (:func:`basic_authorization`) and are never shown;
- **TLS** is verified with the context of :mod:`nvtopy.sources.remote.tls` (``--ca-file``), or
  the system's CAs when there is none;
- **why it failed**, classified once (:func:`failure`), in words each caller phrases its own way.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

if TYPE_CHECKING:
    import ssl

__all__ = [
    "CHUNK",
    "GRACE",
    "Exchange",
    "Failure",
    "TooLargeError",
    "TooSlowError",
    "basic_authorization",
    "failure",
    "read_body",
]

CHUNK = 64 * 1024  # bytes asked of the socket per read: each read gets what is left of the deadline
INFLATE_PIECE = 1 << 20  # bytes of a gzip body undone a call (read_body): a fleet's 21 MB answer in 21 calls
GRACE = 0.2  # how long past its deadline a caller waits for an exchange to report its own reason

T = TypeVar("T")


class TooSlowError(TimeoutError):
    """The answer did not arrive by the deadline."""


class TooLargeError(Exception):
    """The answer is larger than the caller's limit (after gzip is undone)."""


def basic_authorization(parts: urllib.parse.SplitResult) -> str | None:
    """The ``Authorization`` header for a URL's ``user:password@`` (None without them); urllib sends none itself."""
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


# ----------------------------------------------------------------- the exchange, on a thread of its own


class Exchange(Generic[T]):
    """One HTTP exchange on a daemon thread of its own, by ``deadline``; its sockets can be shut from any thread.

    A subclass says what the exchange is (:meth:`work`, run on the thread); its
    connections come from :meth:`connection` or :meth:`opener`, which hand each socket
    to the exchange once connected, so :meth:`abort` and :meth:`set_timeout` reach it.
    ``result`` is what :meth:`work` returned, ``error`` what it raised; ``done`` is set
    when it ends (and by ``abort(release=True)``, for a caller that waits on it).
    """

    thread_name = "nvtopy-fetch"

    def __init__(self, deadline: float, tls: ssl.SSLContext | None = None) -> None:
        self.deadline = deadline
        self.tls = tls  # the ssl.SSLContext https:// is verified with (None: the system's CAs)
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._aborted = False
        self.received = 0  # bytes of body read off the socket (before gzip is undone): what a benchmark counts
        # The exchange thread's own CPU time (connecting, reading, undoing gzip), set as it ends: a caller that
        # measures what a refresh costs counts it beside its own thread's (a fleet's answer of 21 MB: some 40 ms).
        self.cpu_seconds = 0.0

    def work(self) -> T:
        """The exchange itself, on the exchange's thread."""
        raise NotImplementedError

    def finished(self) -> None:
        """Called on the exchange's thread once it ended (``done`` is set): a subclass tells whoever waits."""

    def start(self) -> Exchange[T]:
        """Start the thread; RuntimeError when no thread is to be had (a process at its limit)."""
        threading.Thread(target=self._run, name=self.thread_name, daemon=True).start()
        return self

    def _run(self) -> None:
        started = time.thread_time()
        try:
            self.result = self.work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who says it in one line
            self.error = exc
        finally:
            self.cpu_seconds = time.thread_time() - started
            self.done.set()
            self.finished()
            with self._lock:
                self._sockets.clear()

    @property
    def aborted(self) -> bool:
        return self._aborted

    def left(self) -> float:
        """Seconds left until the deadline; TooSlowError once it passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TooSlowError
        return left

    def track(self, sock: socket.socket) -> None:
        """Called by a connection once connected; after an abort the socket is shut at once."""
        with self._lock:
            self._sockets.append(sock)
            aborted = self._aborted
        if aborted:
            _shut(sock)

    def abort(self, *, release: bool = False) -> None:
        """Shut the sockets (a read blocked on the exchange's thread wakes); ``release``: set ``done`` now too.

        Without ``release`` the exchange stays not done until its thread ends: a caller that
        starts no second exchange while one runs (a name lookup no socket timeout reaches) sees it.
        """
        with self._lock:
            self._aborted = True
            sockets = list(self._sockets)
        if release:
            self.done.set()
        for sock in sockets:
            _shut(sock)

    def set_timeout(self, seconds: float) -> None:
        """Shrink the socket's timeout to what is left of the deadline."""
        with self._lock:
            sockets = list(self._sockets[-1:])
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed: the read says so
                sock.settimeout(max(0.001, seconds))

    def connection(self, host: str, port: int | None, *, https: bool, timeout: float) -> http.client.HTTPConnection:
        """An http.client connection whose socket this exchange can shut (https: verified with ``tls``)."""
        if https:
            return _HTTPSConnection(host, port, timeout=timeout, context=self.tls, exchange=self)
        return _HTTPConnection(host, port, timeout=timeout, exchange=self)

    def opener(self) -> urllib.request.OpenerDirector:
        """A urllib opener (redirects followed, as urllib does) whose connections this exchange can shut."""
        return urllib.request.build_opener(_HTTPHandler(self), _HTTPSHandler(self))


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # not connected, or closed already
        sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread


class _Tracked:
    """A connection that hands its socket to its exchange once connected, so a deadline can shut it."""

    sock: socket.socket

    def __init__(self, *args: Any, exchange: Exchange[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._exchange = exchange

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._exchange.track(self.sock)


class _HTTPConnection(_Tracked, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Tracked, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, exchange: Exchange[Any]) -> None:
        super().__init__()
        self._exchange = exchange

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection(_HTTPConnection, self._exchange), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, exchange: Exchange[Any]) -> None:
        super().__init__(context=exchange.tls)
        self._exchange = exchange

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection(_HTTPSConnection, self._exchange), req, context=self._context)  # type: ignore[attr-defined]


def _connection(cls: type[_Tracked], exchange: Exchange[Any]) -> Callable[..., http.client.HTTPConnection]:
    def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        connection = cls(*args, exchange=exchange, **kwargs)
        assert isinstance(connection, http.client.HTTPConnection)
        return connection

    return make


# ----------------------------------------------------------------- the body, by the deadline


def read_body(response: http.client.HTTPResponse, exchange: Exchange[Any], limit: int, *, gzip: bool = False) -> bytes:
    """The whole body by the exchange's deadline, chunk by chunk, at most ``limit`` bytes (once gzip is undone).

    Each read gets the socket's timeout shrunk to what is left: TooSlowError when the
    deadline passes, TooLargeError past ``limit``, IncompleteRead when the peer closes
    before the Content-Length it announced, zlib.error for broken gzip.

    A gzip body is read whole as sent (at most a deflate's worst expansion of ``limit``), then undone in pieces of
    :data:`INFLATE_PIECE` (never past ``limit``: a gzip bomb costs at most that). Why not undone as it comes: a
    server writes its gzip in pieces of a few kB (Prometheus: some 1,000 reads of 1.6 kB for a fleet's answer of
    21 MB), and a call of zlib and a new buffer each, while the server is still busy writing, cost 2-6x the
    CPU of undoing it once the last piece came (measured at 4,096 GPUs: 28-170 ms, against some 25 ms).
    """
    chunks: list[bytes] = []
    size = 0
    bound = limit if not gzip else limit + (limit >> 10) + 1024  # deflate's worst expansion: 5 bytes a 16 kB block
    while True:
        exchange.set_timeout(exchange.left())
        try:
            chunk = response.read1(CHUNK)
        except TimeoutError:
            raise TooSlowError from None
        if not chunk:
            if response.length:  # the peer closed before the Content-Length it announced
                raise http.client.IncompleteRead(b"", response.length)
            break
        exchange.received += len(chunk)
        size += len(chunk)
        if size > bound:
            raise TooLargeError
        chunks.append(chunk)
    if not gzip:
        return b"".join(chunks)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b"".join(chunks)
    del chunks[:]
    size = 0
    while pending:
        piece = inflate.decompress(pending, min(INFLATE_PIECE, limit - size + 1))
        size += len(piece)
        if size > limit:
            raise TooLargeError
        chunks.append(piece)
        pending = inflate.unconsumed_tail
        if inflate.eof:
            break  # what follows the gzip stream's end is not read, as before
    rest = inflate.flush()
    size += len(rest)
    if size > limit:
        raise TooLargeError
    chunks.append(rest)
    return b"".join(chunks)


# ----------------------------------------------------------------- why it failed

Kind = Literal[
    "slow", "timeout", "size", "gzip", "cut short", "closed", "aborted", "not http", "untrusted", "unreachable", "other"
]


class Failure:
    """What went wrong in an exchange, classified once; each caller phrases it in its own words.

    ``kind``: ``"slow"`` (the body did not arrive by the deadline), ``"timeout"`` (no answer by it),
    ``"size"``, ``"gzip"`` (broken gzip), ``"cut short"``, ``"closed"`` (closed without answering),
    ``"aborted"`` (ECONNABORTED: the local stack gave the connection up; an OSError like a refusal),
    ``"not http"``, ``"untrusted"`` (a TLS certificate not verified; ``verify`` says why),
    ``"unreachable"`` (refused, no route, an unknown name, another TLS failure), ``"other"``.
    ``exc``: the exception itself, urllib's wrapping taken off.
    """

    __slots__ = ("exc", "kind", "verify")

    def __init__(self, kind: Kind, exc: BaseException, verify: str | None = None) -> None:
        self.kind = kind
        self.exc = exc
        self.verify = verify


def failure(exc: BaseException) -> Failure:
    """Why an exchange failed, from the exception it raised."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason  # urllib wraps what went wrong while sending
    if isinstance(exc, TooSlowError):
        return Failure("slow", exc)
    if isinstance(exc, TimeoutError):
        return Failure("timeout", exc)
    if isinstance(exc, TooLargeError):
        return Failure("size", exc)
    if isinstance(exc, zlib.error):
        return Failure("gzip", exc)
    if isinstance(exc, http.client.IncompleteRead):
        return Failure("cut short", exc)
    if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
        return Failure("closed", exc)
    if isinstance(exc, ConnectionAbortedError):
        return Failure("aborted", exc)
    if isinstance(exc, http.client.HTTPException):
        return Failure("not http", exc)
    verify = getattr(exc, "verify_message", None)  # ssl.SSLCertVerificationError's own words
    if verify:
        return Failure("untrusted", exc, str(verify))
    if isinstance(exc, (OSError, urllib.error.URLError)):  # refused, no route, unknown name, another TLS failure
        return Failure("unreachable", exc)
    return Failure("other", exc)
