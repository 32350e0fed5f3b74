"""``nvtopy exporter``: Prometheus metrics under dcgm-exporter's names, from the poller's latest snapshot.

Why from the snapshot: a scrape only renders what the poller thread last
collected, so any number of scrapers (Prometheus, a second Prometheus, curl)
never adds a single NVML call. The HTTP server is prometheus-client's own.

Names and labels follow dcgm-exporter (see :mod:`nvtopy.dcgm`), so its Grafana
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
import ipaddress
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from . import cli
from .dcgm import FIELDS, GPU_LABELS, gpu_labels
from .errors import NvtopyError, UsageError
from .model import ALL_GROUPS, Snapshot
from .textsafe import safe_text

__all__ = ["SnapshotCollector", "build_parser", "parse_listen", "run", "serve"]

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
    """Untrusted text (argv, user names) as a label value: no control characters, always encodable.

    A non-UTF-8 argv reaches Python as lone surrogates (surrogateescape); left
    as they are, the UTF-8 encoding of the whole exposition fails and every
    scrape answers 500. They become visible ``\\udcXX`` escapes instead.
    """
    return safe_text(text or "").encode("utf-8", "backslashreplace").decode("utf-8")


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
        from ._version import __version__

        info.add_metric([__version__, "none" if snapshot is None else snapshot.host.backend], 1.0)
        yield info
        if snapshot is None:
            return
        host = snapshot.host
        labels = [(gpu, gpu_labels(gpu, host)) for gpu in snapshot.gpus]
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
        hostname = snapshot.host.hostname
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                command = _label_text(proc.command)
                if len(command) > COMMAND_LABEL_MAX:
                    command = command[: COMMAND_LABEL_MAX - 1] + "…"
                user = _label_text(proc.user)
                values = [
                    str(gpu.index),
                    gpu.static.uuid or "",
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


def serve(source: Any, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Start prometheus-client's HTTP server for ``source``; returns (server, thread)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    try:
        return start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise NvtopyError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def run(command: str, args: argparse.Namespace) -> int:
    from .collector import Collector
    from .poller import Poller

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
