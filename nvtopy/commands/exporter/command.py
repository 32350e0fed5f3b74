"""``nvtopy exporter``: Prometheus metrics under dcgm-exporter's names, from the poller's latest snapshot.

Why from the snapshot: a scrape only renders what the poller thread last
collected, so any number of scrapers (Prometheus, a second Prometheus, curl)
never adds a single NVML call. The HTTP(S) server is :mod:`.server` (deadlines, TLS,
a bounded pool of threads), what it answers :mod:`.app`; this module is the command:
its options, and the wiring from them to a poller and a server.

Names and labels follow dcgm-exporter (see :mod:`nvtopy.formats.dcgm`), so its Grafana
dashboards work unchanged: ``--names`` (or ``[exporter] names`` in the config file; the flag
wins) chooses which generation's: ``dcgm-legacy`` (up to 4.8: the names NVIDIA's dashboard
12239 and its forks read; the default) or ``dcgm-4.9`` (4.9's names, its units -- Hz, J,
ratios, bytes -- and its ``hostname`` and ``DCGM_FI_SYSTEM_DRIVER_VERSION`` labels):
:mod:`nvtopy.formats.dcgm_naming`. dcgm-exporter declares energy and ECC totals as
counters; prometheus-client would rename a counter to ``*_total``, which no
dashboard queries, so those keep dcgm's exact names and are typed gauge
(PromQL's ``rate``/``increase`` work on them all the same). Per-process figures
are ``nvtopy_process_*`` with ``pid``, ``user`` and ``command`` labels; a process
that exits is gone from the next scrape. Unavailable values are left out, never 0.
The real work (NVML's GPM, Hopper and newer) is under DCGM's profiling names,
``DCGM_FI_PROF_*`` (ratios 0-1, bytes per second), so dashboards that need DCGM's
profiling module (12239's tensor panel, its current utilisation panel) work without it.
A MIG GPU's instances get dcgm-exporter's framebuffer and profiling series labelled
``GPU_I_PROFILE``/``GPU_I_ID`` beside the GPU's own, and ``nvtopy_mig_device_*``
per MIG device (:mod:`nvtopy.formats.prometheus`).

It binds to 127.0.0.1 unless told otherwise: a wider address is an explicit choice.
With ``--tls-cert``/``--tls-key`` it serves HTTPS, and with ``--tls-client-ca`` only
to clients whose certificate that CA signed (mutual TLS): the files are checked
before anything starts, and a bad one is a one-line usage error.

A scrape costs no rendering: the exposition of each snapshot is made once, as
bytes, and every scrape of that snapshot shares them (:class:`~nvtopy.formats.prometheus.expose.Exposition`).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import signal
import sys
from typing import TYPE_CHECKING

from ...errors import UsageError
from ...formats.dcgm_naming import DEFAULT_NAMING, NAMINGS
from ...model import ALL_GROUPS
from .. import options
from ..signals import stop_on_signals
from .server import serve

if TYPE_CHECKING:
    import ssl

__all__ = ["add_tls_options", "build_parser", "is_loopback", "parse_listen", "run", "tls_from_args"]

log = logging.getLogger(__name__)

# The exporter publishes everything but the modes (no dcgm name for them): "gpm" (the DCGM_FI_PROF_* series)
# and "mig" (the GPU instances' series) included.
EXPORTER_GROUPS = ALL_GROUPS - {"modes"}
assert {"gpm", "mig"} <= EXPORTER_GROUPS


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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = options.command_parser(command, "Serve the GPUs' metrics to Prometheus, under dcgm-exporter's names.")
    parser.add_argument(
        "--listen",
        default="127.0.0.1:9400",
        metavar="HOST:PORT",
        help="address to serve /metrics on (default 127.0.0.1:9400; 0.0.0.0:9400 for every interface)",
    )
    parser.add_argument(
        "--names",
        dest="exporter_names",
        choices=tuple(NAMINGS),
        metavar="|".join(NAMINGS),
        help=f"metric names, units and labels: {DEFAULT_NAMING} (dcgm-exporter up to 4.8, what Grafana dashboard "
        "12239 and its forks read) or dcgm-4.9 (4.9's: Hz, J, ratios 0-1, bytes, hostname); "
        f"default [exporter] names in the config file, else {DEFAULT_NAMING}",
    )
    options.add_interval_option(parser, "collection interval")
    options.add_timeout_option(parser, "seconds a GPU's stuck driver call is waited for before it is marked")
    add_tls_options(parser, "scrape")
    options.add_gpu_options(parser)
    options.add_demo_hostname_option(parser, "several exporters of one fleet")
    options.add_health_options(parser)
    own = parser.add_argument_group("the exporter's own series")
    own.add_argument(
        "--self-metrics",
        dest="exporter_self_metrics",
        action="store_true",
        default=None,
        help="also serve nvtopy_exporter_* series: collections and their duration, scrapes and their duration, "
        "GPUs not responding, the last collection's age (off: series nobody asked for on every node; "
        "default [exporter] self_metrics in the config file, else off)",
    )
    return parser


def add_tls_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--tls-cert``, ``--tls-key``, ``--tls-client-ca``: one set of TLS flags for every nvtopy server
    (the exporter, ``nvtopy web``); ``verb`` is what a client does there ("scrape"). :func:`tls_from_args` reads them.
    """
    tls = parser.add_argument_group("TLS (HTTPS) and mutual TLS")
    tls.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate (chain)")
    tls.add_argument("--tls-key", metavar="FILE", help="the certificate's PEM private key (unencrypted)")
    tls.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help=f"mutual TLS: only clients with a certificate signed by a CA in this PEM file may {verb}",
    )


def tls_from_args(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The ``ssl.SSLContext`` the TLS options ask for, or None for plain HTTP. Raises UsageError."""
    cert, key, client_ca = args.tls_cert, args.tls_key, args.tls_client_ca
    if cert is None:
        if key is not None or client_ca is not None:
            raise UsageError(f"{'--tls-key' if key is not None else '--tls-client-ca'} needs --tls-cert")
        return None
    from .server import tls_context

    return tls_context(cert, key, client_ca)


def run(command: str, args: argparse.Namespace) -> int:
    from ...sources.collector import Collector
    from ...sources.poller import Poller

    host, port = parse_listen(args.listen)
    tls = tls_from_args(args)  # before the backend: a bad file is told at once
    config = options.user_config(args, "exporter_names", "exporter_self_metrics")  # the flags, else the file's
    naming = NAMINGS[config.exporter_names]
    backend = options.open_backend_within(args, args.timeout)
    poller = None
    collector = None
    server = None
    # SIGTERM stops cleanly from the start: once the port answers, a stop must not kill the process.
    try:
        with stop_on_signals((signal.SIGTERM,)) as stop:
            collector = Collector(backend, history=1, thresholds=options.health_thresholds(args), timeline=False)
            options.open_selection(args, collector)
            poller = Poller(
                backend,
                interval=args.interval,
                groups=EXPORTER_GROUPS,
                collector=collector,
                events=True,
                stall_after=args.timeout,
            )
            server, _ = serve(poller, host, port, tls=tls, naming=naming, self_metrics=config.exporter_self_metrics)
            poller.start()
            bound = server.server_address[1]
            scheme = "http" if tls is None else "https"
            mutual = " (clients need a certificate signed by --tls-client-ca)" if args.tls_client_ca else ""
            served = f"{scheme}://{host}:{bound}/metrics{mutual}"
            print(
                f"nvtopy exporter: serving {served}, {naming.key} names (Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            if not is_loopback(host) and not args.tls_client_ca:
                print(
                    f"nvtopy: warning: listening on {host}: "
                    "anyone who can reach this port can read GPU and process metrics"
                    + ("" if tls is None else " (--tls-client-ca restricts it to clients with a certificate)"),
                    file=sys.stderr,
                    flush=True,
                )
            # No timeout: SIGTERM sets it, Ctrl-C raises here (a signal interrupts the wait); a wait of 0.5 s at a
            # time woke this thread twice a second for nothing (about 1 % of the exporter's steady CPU).
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
        return 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        options.release_backend(backend, collector, poller)
