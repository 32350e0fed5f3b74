"""``nvtopy exporter``: Prometheus metrics under dcgm-exporter's names, from the poller's latest snapshot.

Why from the snapshot: a scrape only renders what the poller thread last
collected, so any number of scrapers (Prometheus, a second Prometheus, curl)
never adds a single NVML call. The HTTP server is prometheus-client's own.

Names and labels follow dcgm-exporter (see :mod:`nvtopy.formats.dcgm`), so its Grafana
dashboards work unchanged. dcgm-exporter declares energy and ECC totals as
counters; prometheus-client would rename a counter to ``*_total``, which no
dashboard queries, so those keep dcgm's exact names and are typed gauge
(PromQL's ``rate``/``increase`` work on them all the same). Per-process figures
are ``nvtopy_process_*`` with ``pid``, ``user`` and ``command`` labels; a process
that exits is gone from the next scrape. Unavailable values are left out, never 0.

It binds to 127.0.0.1 unless told otherwise: a wider address is an explicit choice.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import logging
import queue
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import NvtopyError, UsageError
from ..formats.dcgm import FIELDS, GPU_LABELS, gpu_labels
from ..model import ALL_GROUPS, Snapshot
from ..textsafe import escape_text, safe_text
from . import dispatch as cli

__all__ = ["SnapshotCollector", "build_parser", "parse_listen", "run", "serve"]

log = logging.getLogger(__name__)

PROCESS_LABELS = ("gpu", "UUID", "pid", "type", "user", "command", "Hostname")
COMMAND_LABEL_MAX = 120
# The exporter publishes everything but the modes (no dcgm name for them).
EXPORTER_GROUPS = ALL_GROUPS - {"modes"}


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or ``PORT`` (loopback). Raises UsageError."""
    text = text.strip()
    host, port_text = "127.0.0.1", text
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            raise UsageError(f"--listen {text!r}: write an IPv6 address as [::1]:9400")
        host, port_text = text[1:end], text[end + 2 :]
    elif ":" in text:
        host, port_text = text.rsplit(":", 1)
        host = host or "0.0.0.0"  # ":9400" means every interface, as with most servers
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"--listen {text!r}: the port must be a number, e.g. 127.0.0.1:9400") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"--listen {text!r}: the port must be between 0 and 65535")
    if not host or any(c.isspace() for c in host):
        raise UsageError(f"--listen {text!r}: give a host, e.g. 127.0.0.1:9400")
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _label_text(text: str | None) -> str:
    """Outside text (argv, user names, GPU names, host names) as a label value.

    :func:`~nvtopy.textsafe.escape_text`, the rule of every file nvtopy writes:
    valid UTF-8 (a non-UTF-8 argv arrives as lone surrogates, which would make
    the encoding of the whole exposition fail and every scrape answer 500), no
    control characters, and reversible with ``unescape_text`` (``--remote`` does).
    prometheus-client then escapes backslash, quote and newline for the format,
    and a parser undoes exactly that, so a reader sees the escaped text.
    """
    return escape_text(text) or ""


class SnapshotCollector:
    """A prometheus-client collector that renders the latest snapshot of a snapshot source."""

    def __init__(self, source: Any) -> None:
        self.source = source  # anything with a ``latest`` Snapshot (a Poller)

    def describe(self) -> list[Any]:
        return []  # metrics depend on the GPUs present: not known at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        snapshot: Snapshot | None = self.source.latest
        info = GaugeMetricFamily(
            "nvtopy_exporter_info", "nvtopy exporter build and backend.", labels=["version", "backend"]
        )
        from .._version import __version__

        info.add_metric([__version__, "none" if snapshot is None else snapshot.host.backend], 1.0)
        yield info
        if snapshot is None:
            return
        host = snapshot.host
        labels = [
            (gpu, {name: _label_text(value) for name, value in gpu_labels(gpu, host).items()}) for gpu in snapshot.gpus
        ]
        for field in FIELDS:
            family = GaugeMetricFamily(field.name, field.help, labels=list(GPU_LABELS))
            for gpu, gpu_label in labels:
                if gpu.lost:
                    continue
                value = field.value(gpu)
                if value is not None:
                    family.add_metric([gpu_label[name] for name in GPU_LABELS], value)
            yield family
        lost = GaugeMetricFamily(
            "nvtopy_gpu_lost", "1 when the GPU fell off the bus (GpuIsLost).", labels=list(GPU_LABELS)
        )
        for gpu, gpu_label in labels:
            lost.add_metric([gpu_label[name] for name in GPU_LABELS], 1.0 if gpu.lost else 0.0)
        yield lost
        age = GaugeMetricFamily("nvtopy_snapshot_age_seconds", "Seconds since the metrics were collected.")
        age.add_metric([], max(0.0, time.time() - snapshot.timestamp) if host.backend == "nvml" else 0.0)
        yield age
        yield from self._processes(snapshot)

    @staticmethod
    def _processes(snapshot: Snapshot) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        families = {
            "gpu_memory_bytes": ("GPU memory used by the process, as NVML reports it (bytes).", "gpu_memory_bytes"),
            "sm_utilization_percent": ("The process's share of SM time (%).", "sm_percent"),
            "memory_utilization_percent": ("The process's share of memory bandwidth (%).", "memory_percent"),
            "cpu_percent": ("CPU use of the process (% of one core).", "cpu_percent"),
            "host_memory_bytes": ("Resident host memory of the process (bytes).", "host_memory_bytes"),
            "start_time_seconds": ("Start time of the process since the Unix epoch (seconds).", "create_time"),
        }
        made = {
            key: GaugeMetricFamily(f"nvtopy_process_{key}", help_, labels=list(PROCESS_LABELS))
            for key, (help_, _) in families.items()
        }
        hostname = _label_text(snapshot.host.hostname)
        for gpu in snapshot.gpus:
            uuid = _label_text(gpu.static.uuid)
            for proc in gpu.processes:
                command = proc.command or ""
                if len(command) > COMMAND_LABEL_MAX:  # cut before escaping: never half an escape
                    command = command[: COMMAND_LABEL_MAX - 1] + "…"
                command = _label_text(command)
                user = _label_text(proc.user)
                values = [
                    str(gpu.index),
                    uuid,
                    str(proc.pid),
                    proc.type.value,
                    user,
                    command,
                    hostname,
                ]
                for key, (_, attribute) in families.items():
                    value = getattr(proc, attribute)
                    if value is not None:
                        made[key].add_metric(values, float(value))
        yield from made.values()


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = cli.command_parser(command, "Serve the GPUs' metrics to Prometheus, under dcgm-exporter's names.")
    parser.add_argument(
        "--listen",
        default="127.0.0.1:9400",
        metavar="HOST:PORT",
        help="address to serve /metrics on (default 127.0.0.1:9400; 0.0.0.0:9400 for every interface)",
    )
    parser.add_argument(
        "--interval", type=cli.interval_type, default=1.0, metavar="SECONDS", help="collection interval (default 1)"
    )
    cli.add_gpu_options(parser)
    return parser


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
            if not (_head_complete(pending.data) or len(pending.data) > MAX_HEAD or (not chunk and pending.data)):
                if not chunk:  # closed before sending anything
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


def run(command: str, args: argparse.Namespace) -> int:
    from ..sources.collector import Collector
    from ..sources.poller import Poller

    host, port = parse_listen(args.listen)
    backend = cli.open_backend(args)
    poller = None
    server = None
    # SIGTERM stops cleanly from the start: once the port answers, a stop must not kill the process.
    stop = threading.Event()
    previous: Any = None
    try:
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        collector = Collector(backend, history=1)
        collector.select(cli.resolve_selection(args, collector))
        poller = Poller(backend, interval=args.interval, groups=EXPORTER_GROUPS, collector=collector)
        server, _ = serve(poller, host, port)
        poller.start()
        bound = server.server_address[1]
        print(f"nvtopy exporter: serving http://{host}:{bound}/metrics (Ctrl-C stops)", file=sys.stderr, flush=True)
        if not _is_loopback(host):
            print(
                f"nvtopy: warning: listening on {host}: "
                "anyone who can reach this port can read GPU and process metrics",
                file=sys.stderr,
                flush=True,
            )
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if server is not None:
            server.shutdown()
            server.server_close()
        if poller is not None:
            poller.stop()
        backend.close()
