"""``nvtopy --remote URL[,URL...]``: other hosts' GPUs in the monitor, read from their exporters.

Each host runs ``nvtopy exporter`` (or NVIDIA's dcgm-exporter: the same metric
names, without per-process series); the monitor scrapes each one's
``/metrics`` over HTTP every interval, parses it with prometheus-client's
parser and shows every host's GPUs, titled with the host's name. A host that
does not answer is marked unreachable and asked again at the next refresh.
Hosts that report the same hostname are told apart by their ``host:port``
(:func:`host_names`), and a host keeps its name while it is down; each process
row carries its host too (``GpuProcess.host``), for the table's HOST column.

One host never stops the others. Each host is fetched and parsed on its own
daemon thread, and whatever goes wrong there (refused, not HTTP at all, HTTP
but not metrics, a value no GPU has, an exception of any kind) marks that host
only, with one short line saying why. A poll has one deadline for all hosts,
``timeout`` seconds: a body is read in chunks against that deadline (a peer
sending one byte at a time cannot stretch it, as urllib's per-read timeout
would let it; :mod:`nvtopy.sources.remote.fetch`, shared with ``--prometheus``),
and the poll itself waits on the threads no longer than that,
so a fetch stuck where no timeout reaches (name resolution) is marked "no
answer" and left behind. A host whose last fetch is still running is not
asked again until it ends, and stopping the monitor never waits for a fetch:
the threads are daemons (a ThreadPoolExecutor's are joined at exit) and their
sockets are shut down.

What a host says is bounded too: values outside their range (see
:mod:`nvtopy.formats.dcgm`) read as N/A, at most :data:`MAX_GPUS_PER_HOST` GPUs (with
an index up to :data:`MAX_GPU_INDEX`) and :data:`MAX_PROCESSES_PER_HOST`
processes are shown, with a note saying so, and labels are cut to
:data:`MAX_LABEL` characters. Credentials in a URL (``http://user:pw@host``)
are sent as HTTP basic auth and never shown: hosts are named ``host:port``.
So is how many hosts: at most :data:`MAX_HOSTS` URLs, the hosts ``--prometheus`` shows at most.

Health comes back where the exporter says it (nvtopy's own exporter): the
verdict (``nvtopy_gpu_health``), whether the GPU's driver answers
(``nvtopy_gpu_responding``, ``nvtopy_gpu_stalled_seconds``), the Xid counts
(``nvtopy_xid_events_total``) and the last Xid (``DCGM_FI_DEV_XID_ERRORS``,
which dcgm-exporter has too). An exporter tells the last Xid, not when it came:
the event is dated when this monitor first saw that Xid on that GPU. The
findings' sentences are not exported; a host's verdict is shown without them.
A dcgm-exporter host has no verdict: its GPUs read OK, with their last Xid.

The real work comes back too: dcgm-exporter's profiling series (``DCGM_FI_PROF_*``,
ratios 0-1 and bytes per second, from GPM on nvtopy's exporter) become the GPU's
GPM fields (``sm_active_percent``, ... as percentages), and a MIG GPU instance's
its own; a host that exports none (no GPM before Hopper, or dcgm-exporter without
profiling) shows them N/A.

MIG comes back as the exporter says it: the mode (``nvtopy_gpu_mig_mode``),
the MIG devices (``nvtopy_mig_device_*``; from dcgm-exporter, one per GPU
instance), each one's memory (the ``GPU_I_ID`` framebuffer series) and the
GPU and compute instance of each process, so a remote MIG GPU shows its
instances as a local one does. A GPU instance's series never stand for the
whole GPU's (see :func:`~nvtopy.formats.prometheus.parse.parse_exposition`).

This is for a handful of machines watched from one terminal. For a fleet, point
a Prometheus server at the exporters and use Grafana: the names are
dcgm-exporter's, so its dashboards work as they are.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..._version import __version__
from ...errors import UsageError
from ...formats.prometheus.parse import MAX_HOSTS, HostScrape, parse_exposition
from ...model import (
    GpuSample,
    GpuState,
    GpuStatic,
    HostInfo,
    Snapshot,
)
from ...textsafe import excerpt
from ..base import SnapshotSource
from .fetch import GRACE, Exchange, basic_authorization, failure, read_body
from .hostscrape import HostGpus
from .hostscrape import process as _process  # noqa: F401 - its old name here (tests read remote rows with it)
from .tls import client_context

if TYPE_CHECKING:
    import ssl

__all__ = ["RemoteHosts", "host_names", "metrics_url"]

MAX_BYTES = 16 * 1024 * 1024  # an exporter's page: 512 GPUs with their processes take about 2 MiB


def _split_netloc(text: str) -> tuple[str, str, str]:
    """``scheme://``, the netloc without credentials, and the rest (a path, a query)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    end = min([i for i in (rest.find(c) for c in "/?#") if i >= 0], default=len(rest))
    return (scheme + sep, rest[:end].rpartition("@")[2], rest[end:])


def _without_credentials(text: str) -> str:
    """A URL as it may be shown: ``user:password@`` removed."""
    return "".join(_split_netloc(text))


def metrics_url(text: str) -> str:
    """``host:9400`` -> ``http://host:9400/metrics``; a scheme or path given is kept (credentials too)."""
    text = text.strip()
    if not text:
        raise UsageError("--remote: empty URL")
    if "://" not in text:
        text = "http://" + text
    shown = _without_credentials(text)
    parts = urllib.parse.urlsplit(text)
    try:
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise UsageError(f"--remote {shown!r}: bad port or address") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise UsageError(f"--remote {shown!r}: give http://HOST:PORT or HOST:PORT")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass(frozen=True)
class _Target:
    """One host to scrape: the URL without credentials, how it is shown, and its basic-auth header."""

    url: str
    label: str  # host:port, never the credentials: what titles and errors show
    authorization: str | None = None

    @classmethod
    def of(cls, text: str) -> _Target:
        url = metrics_url(text)
        parts = urllib.parse.urlsplit(url)
        scheme, netloc, rest = _split_netloc(url)
        return cls(url=scheme + netloc + rest, label=netloc, authorization=basic_authorization(parts))

    @property
    def hostname(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or self.label


class NamedHost(Protocol):
    """What :func:`host_names` needs of a host: the name it was given by, and its ``host:port``."""

    @property
    def hostname(self) -> str: ...

    @property
    def label(self) -> str: ...


def host_names(targets: Sequence[NamedHost], reported: Sequence[str | None]) -> list[str]:
    """What each target's GPUs are titled with: the hostname its exporter reported (``None``: never
    answered, so the URL's host), except where two targets would share a name: those are ``host:port``.

    Why: two exporters that report the same hostname (``demo-node``, a container's default
    name, a copied config) would be two indistinguishable ``demo-node/0``. A name never
    depends on whether the host answers right now -- ``reported`` is the last name each
    ever reported -- so a host that goes down keeps its title, and so do the others. The
    same netloc given twice (two paths on one server) is numbered: ``host:port#2``.
    """
    names = [said or target.hostname for target, said in zip(targets, reported, strict=True)]
    counts = collections.Counter(names)
    names = [target.label if counts[name] > 1 else name for target, name in zip(targets, names, strict=True)]
    counts = collections.Counter(names)
    seen: collections.Counter[str] = collections.Counter()
    unique = []
    for name in names:
        if counts[name] > 1:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        unique.append(name)
    return unique


# ----------------------------------------------------------------- fetching, with one deadline (.fetch)


class _Job(Exchange[HostScrape]):
    """One fetch of one host, on its own daemon thread (:class:`~.fetch.Exchange`); ``abort()`` shuts its sockets.

    Every failure is this host's :class:`HostScrape` with its error, never an exception.
    """

    thread_name = "nvtopy-remote-fetch"

    def __init__(
        self,
        target: _Target,
        deadline: float,
        timeout: float,
        changed: threading.Event,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(deadline, tls)
        self.target = target
        self.timeout = timeout
        self._changed = changed

    def start(self) -> _Job:
        try:
            super().start()
        except RuntimeError:  # no thread to be had (a process at its limit): this host waits for the next poll
            self.result = _failed(self.target, f"{self.target.label}: not asked (no thread available)")
            self.done.set()
        return self

    def work(self) -> HostScrape:
        try:
            return _fetch(self.target, self.deadline, self)
        except Exception as exc:  # noqa: BLE001 - whatever it is, it is this host's, said in one line
            return _failed(self.target, f"{self.target.label}: could not be read ({type(exc).__name__})")

    def finished(self) -> None:
        self._changed.set()


def _failed(target: _Target, error: str) -> HostScrape:
    return HostScrape(target.url, target.hostname, error=error)


# How a peer's words are quoted in a host's one-line reason: up to 48 characters, then "...", an escape never
# cut; ASCII only where they may be the peer's bytes (http.client decodes a status line as Latin-1, one byte
# a character, shown \\xNN as repr() would).
_quote = functools.partial(excerpt, mark="...", whole_escapes=True, mark_within=False)


def _said(what: BaseException | str) -> str:
    """What an exception says, or its type's name when it says nothing."""
    return str(what) or type(what).__name__


def _reason(target: _Target, exc: BaseException, timeout: float) -> str:
    """One short line: why ``target`` could not be read."""
    where = target.label
    why = failure(exc)
    exc = why.exc
    if why.kind == "slow":
        return f"{where}: answer not complete within {timeout:g} s"
    if why.kind == "timeout":
        return f"{where}: no answer within {timeout:g} s"
    if why.kind == "size":
        return f"{where}: answer too large to be an exporter's"
    if why.kind in ("closed", "aborted"):
        return f"{where}: closed the connection without answering"
    if why.kind == "cut short":
        return f"{where}: answer cut short"
    if why.kind == "not http":
        return f"{where}: not an HTTP answer ({type(exc).__name__}: {_quote(_said(exc), 48, ascii_only=True)})"
    if isinstance(exc, OSError):  # refused, no route, unknown name, a TLS failure
        text = _quote(_said(exc.strerror if isinstance(exc.strerror, str) else exc), 80)
        return f"{where} unreachable: {text.lower()}"
    return f"{where}: could not be read ({type(exc).__name__})"


def _fetch(target: _Target, deadline: float, job: _Job) -> HostScrape:
    """Scrape and parse one host by ``deadline``; every failure is this host's error, never an exception."""
    timeout = job.timeout
    request = urllib.request.Request(target.url, headers={"User-Agent": f"nvtopy/{__version__}"})
    if target.authorization:
        request.add_unredirected_header("Authorization", target.authorization)  # not sent on to a redirect
    left = deadline - time.monotonic()
    if left <= 0:
        return _failed(target, f"{target.label}: no answer within {timeout:g} s")
    try:
        with job.opener().open(request, timeout=left) as response:
            body = read_body(response, job, MAX_BYTES)
    except urllib.error.HTTPError as exc:
        exc.close()
        return _failed(target, f"{target.label} answered HTTP {exc.code}")
    except Exception as exc:  # noqa: BLE001 - http.client's own (BadStatusLine...) are not OSError
        return _failed(target, _reason(target, exc, timeout))
    try:
        scrape = parse_exposition(body.decode("utf-8", errors="replace"), target.url)
    except Exception as exc:  # noqa: BLE001 - the parser's ValueError, or whatever hostile text makes it raise
        return _failed(target, f"{target.label}: not Prometheus metrics ({_quote(_said(exc), 48, ascii_only=True)})")
    if not scrape.gpus:  # nothing to show: the host is marked as one that could not be read
        return _failed(target, f"{target.label}: {scrape.note or 'no GPU metrics in the answer (is it an exporter?)'}")
    return scrape


class RemoteHosts(SnapshotSource):
    """A snapshot source for the monitor: every host's GPUs, scraped in parallel each interval.

    Its status line counts the hosts that answer; it refuses to signal (the
    processes are other hosts'), and cannot step or change speed.
    """

    thread_name = "nvtopy-remote"
    signal_refusal = "read-only: processes on other hosts cannot be signalled from here"

    def __init__(
        self, urls: Sequence[str], interval: float = 2.0, timeout: float = 2.0, ca_file: str | None = None
    ) -> None:
        """``ca_file``: verify https:// hosts against only the CAs of this PEM file (:mod:`.https`)."""
        super().__init__(interval)
        if len(urls) > MAX_HOSTS:  # a thread and a line each: as many as --prometheus shows, no more
            raise UsageError(f"--remote: {len(urls)} hosts; at most {MAX_HOSTS} (for a fleet, use --prometheus)")
        self.targets = [_Target.of(u) for u in urls]
        self._tls = client_context(ca_file)  # read now: a bad file is a usage error before anything is asked
        self.urls = [t.url for t in self.targets]  # without credentials
        self.timeout = min(timeout, max(0.2, interval))
        self._gpus = HostGpus()  # each GPU's history, timeline and Xid dates, by (host URL, the host's GPU index)
        self._sequence = 0
        self._reported: list[str | None] = [None] * len(self.targets)  # each target's last reported hostname
        self._last: list[HostScrape] = []
        self._jobs: dict[int, _Job] = {}  # target position -> its latest fetch
        self._changed = threading.Event()  # a fetch ended, or stop() was called

    def status_line(self) -> str:
        up = sum(1 for s in self._last if s.error is None)
        state = "⏸ " if self._paused else ""
        return f"{state}REMOTE {up}/{len(self.urls)} hosts ⟳ {self._interval:g}s"

    def stop(self, timeout: float | None = 2.0) -> None:
        """Stop at once: a poll in progress returns without waiting for its fetches, which are cut off."""
        self._stopping = True
        self._changed.set()
        for job in list(self._jobs.values()):
            job.abort()
        super().stop(timeout)

    # ----------------------------------------------------------------- scraping

    def poll_once(self) -> Snapshot:
        """Scrape every host, each on its own thread, and return (and publish) the snapshot by the deadline."""
        deadline = time.monotonic() + self.timeout
        jobs: list[_Job] = []
        for position, target in enumerate(self.targets):
            job = self._jobs.get(position)
            if job is None or job.done.is_set():  # never a second fetch while one is stuck (DNS, a handshake)
                job = self._jobs[position] = _Job(target, deadline, self.timeout, self._changed, self._tls).start()
            jobs.append(job)
        end = deadline + GRACE
        while not self._stopping:
            self._changed.clear()
            if all(job.done.is_set() for job in jobs):
                break
            left = end - time.monotonic()
            if left <= 0:
                break
            self._changed.wait(left)
        scrapes = []
        for job in jobs:
            if job.done.is_set() and job.result is not None:
                scrapes.append(job.result)
            else:
                job.abort()  # its thread ends as soon as the socket says so; a DNS lookup ends by itself
                scrapes.append(_failed(job.target, f"{job.target.label}: no answer within {self.timeout:g} s"))
        self._last = scrapes
        snapshot = self._snapshot(scrapes)
        if not self._stopping:
            self._publish(snapshot)
        return snapshot

    def names(self, scrapes: Sequence[HostScrape]) -> list[str]:
        """Each host's title (:func:`host_names`), ``scrapes`` in target order; remembers what each reported."""
        if len(scrapes) != len(self.targets):  # not one per target: each as it says
            return [s.hostname for s in scrapes]
        for position, scrape in enumerate(scrapes):
            if scrape.error is None:
                self._reported[position] = scrape.hostname
        return host_names(self.targets, self._reported)

    def _snapshot(self, scrapes: list[HostScrape]) -> Snapshot:
        now = time.time()
        gpus: list[GpuState] = []
        for scrape, name in zip(scrapes, self.names(scrapes), strict=True):
            scrape.hostname = name  # this fetch's own object (status_line counts its error, if any, below)
        for scrape in scrapes:
            if scrape.error is None:
                try:
                    host_gpus = self._host_gpus(scrape, len(gpus), now)
                except Exception as exc:  # noqa: BLE001 - a value the model refuses: this host's, in one line
                    scrape.error = f"{scrape.hostname}: could not be shown ({type(exc).__name__})"
                else:
                    gpus.extend(host_gpus)
                    continue
            static = GpuStatic(index=len(gpus), host=scrape.hostname)
            gpus.append(GpuState(static, GpuSample(now, lost=True), note=scrape.error))
        self._sequence += 1
        names = [s.hostname for s in scrapes]
        drivers = {s.driver_version for s in scrapes if s.driver_version}
        host = HostInfo(
            hostname=names[0] if len(names) == 1 else f"{len(names)} hosts",
            driver_version=drivers.pop() if len(drivers) == 1 else ("mixed" if drivers else None),
            cuda_driver_version=None,
            backend="remote",
        )
        return Snapshot(timestamp=now, host=host, gpus=tuple(gpus), sequence=self._sequence, interval=self._interval)

    def _host_gpus(self, scrape: HostScrape, first: int, now: float) -> list[GpuState]:
        """One host's GPUs, numbered from ``first``, then a line saying what was left out (if anything)."""
        return self._gpus.gpus(scrape, first, now)

    def _run(self) -> None:
        self._run_periodic(self.poll_once)
