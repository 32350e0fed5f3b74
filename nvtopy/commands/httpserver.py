"""The exporter's HTTP server: prometheus-client's WSGI app on a bounded pool of threads.

Why not prometheus-client's own server: it starts a thread per connection, so
2,000 half-open connections left 2,000 threads and a 4.6 s scrape. Here one
dispatcher thread accepts connections and collects request heads without
blocking, and only complete requests reach :data:`WORKERS` worker threads;
slow or silent clients run out of time (:data:`REQUEST_DEADLINE`), and the
number of waiting connections is capped (:data:`MAX_PENDING`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import threading
import time
from typing import Any

from ..errors import NvtopyError
from ..formats.prometheus import SnapshotCollector
from ..textsafe import safe_text

__all__ = ["MAX_PENDING", "WORKERS", "serve"]

log = logging.getLogger(__name__)


# The HTTP server: prometheus-client's exposition (its WSGI app), served by a fixed pool of workers.
WORKERS = 4  # threads that answer requests; a scrape takes milliseconds


MAX_PENDING = 256  # connections still sending their request; past this the oldest is closed


MAX_QUEUED = 32  # complete requests waiting for a worker; past this a new one is closed


REQUEST_DEADLINE = 10.0  # seconds from connect to the end of the request's head


WRITE_TIMEOUT = 10.0  # seconds to send a response to a client that does not read it


MAX_HEAD = 65536 + 2  # a request line longer than this gets wsgiref's 414 from a worker


def _head_complete(data: bytes) -> bool:
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
    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)  # bounded by the socket's timeout, in total (Python 3.5+)
        with memoryview(data) as view:
            return view.nbytes


def _handler_class() -> type:
    from wsgiref.simple_server import ServerHandler, WSGIRequestHandler

    class QuietServerHandler(ServerHandler):
        """wsgiref's handler prints a traceback to stderr when the app fails: one log line instead."""

        def log_exception(self, exc_info: Any) -> None:
            log.error("exporter request failed: %s: %s", exc_info[0].__name__, safe_text(str(exc_info[1])))

    class Handler(WSGIRequestHandler):
        """wsgiref's handler, on a connection whose request head the dispatcher already read."""

        def setup(self) -> None:
            connection, head, deadline = self.request
            self.request = self.connection = connection
            connection.settimeout(max(0.001, deadline - time.monotonic()))
            self.rfile = io.BufferedReader(_HeadReader(head, connection, deadline))
            self.wfile = _SocketWriter(connection)

        def handle(self) -> None:  # WSGIRequestHandler.handle, with a timeout for the response
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return
            if not self.parse_request():  # an error was sent
                return
            self.connection.settimeout(WRITE_TIMEOUT)
            handler = QuietServerHandler(
                self.rfile, self.wfile, self.get_stderr(), self.get_environ(), multithread=False
            )
            handler.request_handler = self
            handler.run(self.server.get_app())

        def log_message(self, format: str, *args: Any) -> None:
            pass  # like prometheus-client's own handler: no access log

    return Handler


class _Pending:
    __slots__ = ("address", "data", "deadline")

    def __init__(self, address: Any, deadline: float) -> None:
        self.address = address
        self.deadline = deadline
        self.data = bytearray()


def _server_class() -> type:
    from wsgiref.simple_server import WSGIServer

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

        def __init__(self, address: tuple[str, int], family: int, app: Any) -> None:
            self.address_family = family
            self._stop = threading.Event()
            self._idle = threading.Event()
            self._idle.set()
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            self._jobs: queue.Queue[tuple[socket.socket, Any, bytes, float] | None] = queue.Queue(MAX_QUEUED)
            self._pending: dict[socket.socket, _Pending] = {}  # oldest first
            self.workers: list[threading.Thread] = []
            super().__init__(address, _handler_class())  # binds and listens (OSError: closed again)
            self.set_app(app)
            self.socket.setblocking(False)
            self.workers = [
                threading.Thread(target=self._work, name=f"nvtopy-exporter-{i}", daemon=True) for i in range(WORKERS)
            ]
            for worker in self.workers:
                worker.start()

        # ------------------------------------------------------------- the dispatcher

        def serve_forever(self, poll_interval: float = 0.5) -> None:
            self._idle.clear()
            selector = selectors.DefaultSelector()
            selector.register(self.socket, selectors.EVENT_READ, "listen")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
            try:
                while not self._stop.is_set():
                    now = time.monotonic()
                    oldest = next(iter(self._pending.values()), None)
                    timeout = poll_interval if oldest is None else min(poll_interval, oldest.deadline - now)
                    for key, _ in selector.select(max(0.0, timeout)):
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
                if len(self._pending) >= MAX_PENDING:
                    self._drop(selector, next(iter(self._pending)))
                self._pending[connection] = _Pending(address, time.monotonic() + REQUEST_DEADLINE)
                selector.register(connection, selectors.EVENT_READ, "client")

        def _read(self, selector: selectors.BaseSelector, connection: socket.socket) -> None:
            pending = self._pending.get(connection)
            if pending is None:
                return
            try:
                chunk = connection.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(selector, connection)
                return
            if chunk:
                pending.data += chunk
            if not (_head_complete(pending.data) or len(pending.data) > MAX_HEAD):
                if not chunk:  # closed before a whole request head: no request to answer, nobody to read it
                    self._drop(selector, connection)
                return
            selector.unregister(connection)
            del self._pending[connection]
            connection.setblocking(True)
            try:
                self._jobs.put_nowait((connection, pending.address, bytes(pending.data), pending.deadline))
            except queue.Full:  # every worker busy and the queue full: refuse rather than wait
                self.shutdown_request(connection)

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

    return MetricsServer


def serve(source: Any, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve prometheus-client's exposition of ``source`` on host:port; returns (server, its thread).

    The threads are bounded: one dispatcher and :data:`WORKERS` workers, however
    many connections there are (see ``MetricsServer``).
    """
    from prometheus_client import CollectorRegistry, make_wsgi_app

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        server = _server_class()((sockaddr[0], port), family, make_wsgi_app(registry))
    except OSError as exc:
        raise NvtopyError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    thread = threading.Thread(target=server.serve_forever, name="nvtopy-exporter", daemon=True)
    thread.start()
    return server, thread
