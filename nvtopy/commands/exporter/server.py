"""The exporter's HTTP(S) server: the exposition, rendered once per snapshot, on a bounded pool of threads.

Why not prometheus-client's own server: it starts a thread per connection, so
2,000 half-open connections left 2,000 threads and a 4.6 s scrape; and with TLS
it wraps the listening socket, so the handshake runs in its accepting thread,
without a deadline: one client that connects and sends nothing stops every
scrape. Here one dispatcher thread accepts connections, does their TLS
handshakes and collects request heads without blocking, and only complete
requests reach :data:`WORKERS` worker threads; slow or silent clients run out
of time (:data:`REQUEST_DEADLINE`, from connect to the end of the request head,
handshake included), and the number of waiting connections is capped
(:data:`MAX_PENDING`). Writing a response has a deadline of its own
(:data:`WRITE_TIMEOUT`, in total, not per send).

What a request gets is :mod:`.app`'s WSGI app: the bytes of the latest snapshot
(:class:`~nvtopy.formats.prometheus.expose.Exposition`), made once per snapshot and shared.
:func:`serve` wires a source (:class:`~nvtopy.formats.prometheus.collect.SnapshotHolder`) to a :class:`MetricsServer`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from ...errors import NvtopyError, UsageError
from ...formats.dcgm_naming import LEGACY, Naming
from ...formats.prometheus.collect import SnapshotHolder
from ...formats.prometheus.expose import Exposition
from ...sources.base import SnapshotSource
from ...textsafe import safe_text
from .app import ScrapeBody, WsgiApp, metrics_app
from .readiness import Readiness
from .selfmetrics import SelfMetrics

if TYPE_CHECKING:
    import ssl


__all__ = ["MAX_PENDING", "WORKERS", "MetricsServer", "serve", "tls_context"]

log = logging.getLogger(__name__)


# The HTTP server: prometheus-client's exposition (its WSGI app), served by a fixed pool of workers.
WORKERS = 4  # threads that answer requests; a scrape takes milliseconds


MAX_PENDING = 256  # connections still sending their request; past this the oldest is closed


MAX_QUEUED = 32  # complete requests waiting for a worker; past this a new one is closed


REQUEST_DEADLINE = 10.0  # seconds from connect to the end of the request's head


WRITE_TIMEOUT = 10.0  # seconds to send a whole response to a client that does not read it


# Go's net/http answers the same to a plain-HTTP request on a TLS port: better than a reset for who typed http://.
PLAIN_HTTP_REFUSAL = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"Client sent an HTTP request to an HTTPS server.\n"
)


MAX_HEAD = 65536 + 2  # a request line longer than this gets wsgiref's 414 from a worker


def _head_complete(data: bytes | bytearray) -> bool:
    """Whether ``data`` holds a whole request head (or an HTTP/0.9 request line, which has none)."""
    if b"\r\n\r\n" in data or b"\n\n" in data:
        return True
    end = data.find(b"\n")
    return end >= 0 and b" HTTP/" not in data[:end]


class _HeadReader(io.RawIOBase):
    """The bytes the dispatcher already read, then the socket, all before a deadline."""

    def __init__(self, head: bytes, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _SocketWriter(io.BufferedIOBase):
    """Writes to the socket, all before a deadline (the response's, not each send's).

    Why not ``sendall``: on a TLS socket it is a loop of sends, each with the
    socket's timeout, so a client reading one record every few seconds would hold
    a worker for minutes. Here every send gets what is left of one deadline.
    """

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        with memoryview(data) as view, view.cast("B") as left:
            size = left.nbytes
            while left:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("response deadline passed")
                self._sock.settimeout(remaining)
                sent = self._sock.send(left[:262144])
                left = left[sent:]
        return size


class _QuietServerHandler(ServerHandler):
    """wsgiref's handler prints a traceback to stderr when the app fails: one log line instead."""

    request_handler: WSGIRequestHandler  # set as wsgiref's own handle() sets it (for its logging)

    def log_exception(self, exc_info: Any) -> None:
        log.error("exporter request failed: %s: %s", exc_info[0].__name__, safe_text(str(exc_info[1])))


class _RequestHandler(WSGIRequestHandler):
    """wsgiref's handler, on a connection whose request head the dispatcher already read.

    ``request`` is what :class:`MetricsServer`'s worker hands it: (connection, the head, the request's deadline).
    """

    server: WSGIServer

    def setup(self) -> None:
        connection, head, deadline = self.request
        self.request = self.connection = connection
        connection.settimeout(max(0.001, deadline - time.monotonic()))
        self.rfile = io.BufferedReader(_HeadReader(head, connection, deadline))
        self.wfile = _SocketWriter(connection, deadline)  # until the request is read: the request's deadline

    def handle(self) -> None:  # WSGIRequestHandler.handle, with a timeout for the response
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():  # an error was sent
            return
        writer = self.wfile = _SocketWriter(self.connection, time.monotonic() + WRITE_TIMEOUT)
        stdout = cast("IO[bytes]", writer)  # ServerHandler only writes and flushes it
        handler = _QuietServerHandler(self.rfile, stdout, self.get_stderr(), self.get_environ(), multithread=False)
        handler.request_handler = self
        app = self.server.get_app()
        assert app is not None  # MetricsServer sets it before it listens
        handler.run(app)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # like prometheus-client's own handler: no access log


class _Pending:
    __slots__ = ("address", "data", "deadline", "handshaking", "writing")

    def __init__(self, address: Any, deadline: float, handshaking: bool) -> None:
        self.address = address
        self.deadline = deadline
        self.data = bytearray()
        self.handshaking = handshaking  # a TLS connection whose handshake is not done
        self.writing = False  # the handshake waits to write (registered for EVENT_WRITE)


class MetricsServer(WSGIServer):
    """wsgiref's WSGI server with a fixed pool of workers instead of a thread per connection.

    Why: prometheus-client's server starts a thread per connection and waits
    without a deadline, so 2,000 idle connections made 2,000 threads and
    scrapes of seconds. Here one dispatcher thread accepts connections and
    collects each request's head without blocking (an idle or slow client
    costs a socket, no thread, and is closed after REQUEST_DEADLINE); only a
    complete request goes to one of WORKERS threads. Every wait is bounded.
    """

    request_queue_size = 128  # listen backlog: a burst of connects waits in the kernel

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        app: WsgiApp,
        *,
        tls: ssl.SSLContext | None = None,
        exposition: ScrapeBody | None = None,
    ) -> None:
        """Bind and listen on ``address`` (a resolved one, of ``family``) and start the workers; ``serve_forever``
        then dispatches. ``app`` answers each request; ``tls``: HTTPS; ``exposition``: closed with the server.
        OSError when the address cannot be bound (:meth:`listen` says it in words)."""
        self.address_family = family
        self.tls = tls
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._jobs: queue.Queue[tuple[socket.socket, Any, bytes, float] | None] = queue.Queue(MAX_QUEUED)
        self._pending: dict[socket.socket, _Pending] = {}  # oldest first
        self.workers: list[threading.Thread] = []
        self.exposition = exposition  # closed with the server: the poller may outlive it
        super().__init__(address, _RequestHandler)  # binds and listens (OSError: closed again)
        self.set_app(app)
        self.socket.setblocking(False)
        self.workers = [
            threading.Thread(target=self._work, name=f"nvtopy-exporter-{i}", daemon=True) for i in range(WORKERS)
        ]
        for worker in self.workers:
            worker.start()

    @classmethod
    def listen(
        cls,
        host: str,
        port: int,
        app: WsgiApp,
        *,
        tls: ssl.SSLContext | None = None,
        exposition: ScrapeBody | None = None,
    ) -> MetricsServer:
        """A server on ``host:port`` (a name or an address, IPv4 or IPv6). Raises NvtopyError in one line."""
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            return cls((str(sockaddr[0]), port), family, app, tls=tls, exposition=exposition)
        except OSError as exc:
            raise NvtopyError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    # ------------------------------------------------------------- the dispatcher

    def start(self) -> threading.Thread:
        """:meth:`serve_forever` in a thread of its own, marked busy before that thread's first step.

        Why before: a :meth:`shutdown` that came before the thread had run (a SIGTERM right after the port
        opened, on a loaded machine) found the server idle, returned at once, and the socket was closed; the
        thread then registered a closed socket and died with a traceback on stderr.
        """
        self._idle.clear()
        thread = threading.Thread(target=self.serve_forever, name="nvtopy-exporter", daemon=True)
        thread.start()
        return thread

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Accept, read and hand over requests until :meth:`shutdown`.

        ``poll_interval``: the longest wait between two looks at the pending connections' deadlines; None (the
        default) waits for the next connection, byte or deadline only. Why not socketserver's 0.5 s: nothing else
        is due between them (:meth:`shutdown` wakes the loop itself), and two wakes a second of an otherwise
        idle thread were about 3 % of an exporter's steady CPU.
        """
        self._idle.clear()
        selector = selectors.DefaultSelector()
        selector.register(self.socket, selectors.EVENT_READ, "listen")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                oldest = next(iter(self._pending.values()), None)
                timeout = poll_interval
                if oldest is not None:
                    timeout = max(
                        0.0, oldest.deadline - now if timeout is None else min(timeout, oldest.deadline - now)
                    )
                for key, _ in selector.select(timeout):
                    if key.data == "listen":
                        self._accept(selector)
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._read(selector, key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                while self._pending:  # oldest first: stop at the first still in time
                    connection, pending = next(iter(self._pending.items()))
                    if pending.deadline > now:
                        break
                    self._drop(selector, connection)
        finally:
            for connection in list(self._pending):
                self._drop(selector, connection)
            selector.close()
            self._idle.set()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(MAX_PENDING):  # what is waiting now, then the others get a turn
            try:
                connection, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors (EMFILE) or the peer gave up: free one, try later
                if self._pending:
                    self._drop(selector, next(iter(self._pending)))
                else:
                    self._stop.wait(0.05)
                return
            connection.setblocking(False)
            if self.tls is not None:  # the handshake is done by _read, as the client's bytes come
                try:
                    connection = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
                except OSError:  # gone already
                    connection.close()
                    continue
            if len(self._pending) >= MAX_PENDING:
                self._drop(selector, next(iter(self._pending)))
            deadline = time.monotonic() + REQUEST_DEADLINE  # handshake and request head, both
            self._pending[connection] = _Pending(address, deadline, self.tls is not None)
            selector.register(connection, selectors.EVENT_READ, "client")

    def _read(self, selector: selectors.BaseSelector, connection: socket.socket) -> None:
        pending = self._pending.get(connection)
        if pending is None:
            return
        if pending.handshaking and not self._handshake(selector, connection, pending):
            return
        while True:
            try:
                chunk = connection.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if not _tls_wants(exc):  # a TLS socket raises SSLWantReadError for "nothing yet"
                    self._drop(selector, connection)
                return
            if chunk:
                pending.data += chunk
            if _head_complete(pending.data) or len(pending.data) > MAX_HEAD:
                break
            if not chunk:  # closed before a whole request head: no request to answer, nobody to read it
                self._drop(selector, connection)
                return
            # TLS: what OpenSSL already decrypted wakes no selector; read it now. Plain: wait for the next event.
            if self.tls is None or not connection.pending():  # type: ignore[attr-defined]
                return
        selector.unregister(connection)
        del self._pending[connection]
        connection.setblocking(True)
        try:
            self._jobs.put_nowait((connection, pending.address, bytes(pending.data), pending.deadline))
        except queue.Full:  # every worker busy and the queue full: refuse rather than wait
            self.shutdown_request(connection)

    def _handshake(self, selector: selectors.BaseSelector, connection: Any, pending: _Pending) -> bool:
        """One step of a TLS handshake, without blocking; True once it is done. Bounded by the request's deadline.

        A client that fails it (a plain-HTTP request, no or a wrong client
        certificate under mTLS, garbage) is closed; a plain-HTTP request gets
        a 400 in plain text first.
        """
        import ssl

        try:
            connection.do_handshake()
        except ssl.SSLWantReadError:
            self._wait_for(selector, connection, pending, writing=False)
            return False
        except ssl.SSLWantWriteError:
            self._wait_for(selector, connection, pending, writing=True)
            return False
        except ssl.SSLError as exc:
            log.debug("exporter: TLS handshake with %s failed: %s", pending.address, safe_text(str(exc)))
            if exc.reason == "HTTP_REQUEST":  # the bytes were a plain HTTP request
                with contextlib.suppress(OSError):
                    socket.socket.send(connection, PLAIN_HTTP_REFUSAL)  # below TLS: the raw socket
            self._drop(selector, connection)
            return False
        except OSError:
            self._drop(selector, connection)
            return False
        pending.handshaking = False
        self._wait_for(selector, connection, pending, writing=False)
        return True

    @staticmethod
    def _wait_for(selector: selectors.BaseSelector, connection: Any, pending: _Pending, *, writing: bool) -> None:
        if pending.writing != writing:
            selector.modify(connection, selectors.EVENT_WRITE if writing else selectors.EVENT_READ, "client")
            pending.writing = writing

    def _drop(self, selector: selectors.BaseSelector, connection: socket.socket) -> None:
        self._pending.pop(connection, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(connection)
        connection.close()

    # ------------------------------------------------------------- the workers

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            connection, address, head, deadline = job
            try:
                self.finish_request((connection, head, deadline), address)  # type: ignore[arg-type]
            except OSError:
                pass  # the client went away, or ran out of time: its problem only
            except Exception:  # a bug in a request's handling: logged, the worker goes on
                log.exception("exporter request failed")
            finally:
                self.shutdown_request(connection)

    # ------------------------------------------------------------- lifecycle

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` (at once, not at its next poll) and wait for it."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._idle.wait()

    def server_close(self) -> None:
        super().server_close()
        if self.exposition is not None:  # the poller may outlive the server: no more renders for nobody
            self.exposition.close()
        while True:  # requests nobody will answer now
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].close()
        for _ in self.workers:
            self._jobs.put(None)
        for end in (self._wake_r, self._wake_w):
            end.close()


def _tls_wants(exc: OSError) -> bool:
    """Whether ``exc`` is a TLS socket's "would block" (SSLWantRead/WriteError), not a failure."""
    ssl = sys.modules.get("ssl")  # imported by whoever made a TLS context; without one, no TLS socket exists
    return ssl is not None and isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError))


class _EncryptedKeyError(Exception):
    """OpenSSL asked for the key's password: the key is encrypted, and nobody is there to type it."""


def tls_context(cert: str, key: str | None = None, client_ca: str | None = None) -> ssl.SSLContext:
    """The server's TLS context: its certificate and key; with ``client_ca``, mutual TLS. Raises UsageError.

    As prometheus-client's ``start_http_server(certfile=, keyfile=, client_cafile=,
    client_auth_required=True)`` and nvitop-exporter's ``--certfile``/``--client-cafile``
    set it up (TLS 1.2 at least), with an error that names the file at fault: a
    missing or unreadable file, one with no PEM certificate or key, a key that is
    not the certificate's, an encrypted key (nothing could type its password).
    """
    import ssl

    from ...boundedfile import FileRefusedError, read_bounded
    from ...sources.remote.tls import MAX_PEM_BYTES, pem_certificates

    texts = {}
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if path is not None:
            try:  # a regular file of at most 4 MiB, checked before OpenSSL reads it by its name
                texts[flag] = read_bounded(path, MAX_PEM_BYTES)
            except FileRefusedError as exc:
                raise UsageError(f"{flag} {path}: {exc}") from None
    client_cas = None
    if client_ca is not None:
        try:
            client_cas = pem_certificates(client_ca)
        except FileRefusedError as exc:
            raise UsageError(f"--tls-client-ca {client_ca}: {exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in texts["--tls-cert"]:
        raise UsageError(f"--tls-cert {cert}: no PEM certificate in it")
    if b"PRIVATE KEY-----" not in texts["--tls-key" if key is not None else "--tls-cert"]:
        if key is None:
            raise UsageError(f"--tls-cert {cert}: no private key in it; give the key with --tls-key")
        raise UsageError(f"--tls-key {key}: no PEM private key in it")

    def no_password() -> str:
        raise _EncryptedKeyError

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    key_file = key if key is not None else cert
    try:
        context.load_cert_chain(cert, key, password=no_password)
    except _EncryptedKeyError:
        raise UsageError(
            f"--tls-key {key_file}: the key is encrypted; give it unencrypted (readable only by the exporter)"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise UsageError(f"--tls-key {key_file} is not the private key of --tls-cert {cert}") from None
        raise UsageError(
            f"--tls-cert {cert}, --tls-key {key_file}: not a usable certificate and key ({exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise UsageError(f"--tls-cert {cert}, --tls-key {key_file}: {exc.strerror or exc}") from None
    if client_cas is not None:
        try:
            context.load_verify_locations(cadata=client_cas)
        except (ssl.SSLError, ValueError) as exc:
            why = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise UsageError(f"--tls-client-ca {client_ca}: no usable CA certificate in it ({why})") from None
        context.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: no certificate signed by that CA, no scrape
    return context


def serve(
    source: SnapshotHolder,
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None = None,
    naming: Naming = LEGACY,
    self_metrics: bool = False,
) -> tuple[MetricsServer, threading.Thread]:
    """Serve the exposition of ``source`` on host:port (HTTPS with ``tls``); returns (server, its thread).

    The threads are bounded: one dispatcher and :data:`WORKERS` workers, however
    many connections there are (see :class:`MetricsServer`). A source that publishes
    (a Poller) has each new snapshot rendered as it comes, once something scrapes.
    ``naming``: the names, units and labels written (``--names``).
    ``GET /health`` answers whether its collections are fresh (:mod:`.readiness`), judged from
    now on: call it before the poller starts. ``self_metrics``: the exporter's own series too
    (:mod:`.selfmetrics`).
    """
    from prometheus_client import CollectorRegistry, make_wsgi_app

    fallback = make_wsgi_app(CollectorRegistry(auto_describe=False))  # OPTIONS, 405, favicon: it renders nothing
    exposition = Exposition(source, naming=naming)
    body = ScrapeBody(exposition)
    readiness = Readiness(source)  # a poller: follows each snapshot as it is published
    own = SelfMetrics(readiness) if self_metrics else None
    app = metrics_app(body, fallback, readiness=readiness, self_metrics=own, snapshots=source)
    server = MetricsServer.listen(host, port, app, tls=tls, exposition=body)
    if isinstance(source, SnapshotSource):  # a poller: render each snapshot as it is published (text, then gzip)
        source.subscribe(exposition.prerender)
        source.subscribe(body.prerender)
    return server, server.start()
