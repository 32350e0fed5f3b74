"""``nvtopy --remote URL[,URL...]``: other hosts' GPUs in the monitor, read from their exporters.

Each host runs ``nvtopy exporter`` (or NVIDIA's dcgm-exporter: the same metric
names, without per-process series); the monitor scrapes each one's
``/metrics`` over HTTP every interval, parses it with prometheus-client's
parser and shows every host's GPUs, titled with the host's name. A host that
does not answer is marked unreachable and asked again at the next refresh.

This is for a handful of machines watched from one terminal. For a fleet, point
a Prometheus server at the exporters and use Grafana: the names are
dcgm-exporter's, so its dashboards work as they are.
"""

from __future__ import annotations

import collections
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ._version import __version__
from .backends.base import SignalOutcome
from .dcgm import BY_NAME
from .errors import UsageError
from .model import (
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    HostInfo,
    ProcessType,
    Reason,
    Snapshot,
    freeze,
    history_of,
    history_row,
)
from .source import SnapshotSource

__all__ = ["HostScrape", "RemoteHosts", "metrics_url", "parse_exposition"]

HISTORY = 300
MAX_BYTES = 16 * 1024 * 1024


def metrics_url(text: str) -> str:
    """``host:9400`` -> ``http://host:9400/metrics``; a scheme or path given is kept."""
    text = text.strip()
    if not text:
        raise UsageError("--remote: empty URL")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--remote {text!r}: give http://HOST:PORT or HOST:PORT")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise UsageError(f"--remote {text!r}: bad port") from None
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass
class HostScrape:
    """One host's GPUs as its exporter last described them (or why it could not be read)."""

    url: str
    hostname: str
    driver_version: str | None = None
    gpus: list[tuple[GpuStatic, dict[str, Any], bool]] = field(default_factory=list)  # static, sample values, lost
    processes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # gpu index -> process values
    error: str | None = None


def parse_exposition(text: str, url: str) -> HostScrape:
    """GPUs and processes out of a Prometheus text exposition with dcgm-exporter's names."""
    from prometheus_client.parser import text_string_to_metric_families

    host = urllib.parse.urlsplit(url).hostname or url
    statics: dict[int, dict[str, Any]] = {}
    values: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    lost: dict[int, bool] = {}
    processes: dict[tuple[int, int], dict[str, Any]] = {}
    driver = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if "gpu" not in labels or not labels["gpu"].isdigit():
                continue
            index = int(labels["gpu"])
            if sample.name.startswith("nvtopy_process_") and "pid" in labels and labels["pid"].isdigit():
                row = processes.setdefault(
                    (index, int(labels["pid"])),
                    {
                        "user": labels.get("user") or None,
                        "command": labels.get("command") or None,
                        "type": labels.get("type") or "C",
                    },
                )
                row[sample.name.removeprefix("nvtopy_process_")] = sample.value
                continue
            static = statics.setdefault(index, {})
            if labels.get("Hostname"):
                host = labels["Hostname"]
            driver = labels.get("DCGM_FI_DRIVER_VERSION") or driver
            static.setdefault("uuid", labels.get("UUID") or None)
            static.setdefault("bus_id", labels.get("pci_bus_id") or None)
            static.setdefault("name", labels.get("modelName") or None)
            if sample.name == "nvtopy_gpu_lost":
                lost[index] = sample.value >= 1
                continue
            name = sample.name
            if name not in BY_NAME and name.endswith("_total"):
                name = name[:-6]  # prometheus-client's parser renames dcgm's counters (energy, ECC) to *_total
            known = BY_NAME.get(name)
            if known is None:
                continue
            value = known.from_metric(sample.value)
            if known.attribute.startswith("static."):
                static[known.attribute[7:]] = value
            else:
                values[index][known.attribute] = value
    scrape = HostScrape(url=url, hostname=host, driver_version=driver)
    for gpu_values in values.values():
        if any(k.startswith("ecc_") for k in gpu_values):
            gpu_values["ecc_mode"] = True  # dcgm has no ECC-mode metric: counters are exported only when it is on
    for index in sorted(statics):
        static = GpuStatic(index=index, **statics[index])
        scrape.gpus.append((static, dict(values.get(index, {})), lost.get(index, False)))
    for (index, _pid), row in sorted(processes.items()):
        scrape.processes.setdefault(index, []).append({"pid": _pid, **row})
    return scrape


def _fetch(url: str, timeout: float) -> HostScrape:
    request = urllib.request.Request(url, headers={"User-Agent": f"nvtopy/{__version__}"})
    host = urllib.parse.urlsplit(url).hostname or url
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        return HostScrape(url, host, error=f"{_where(url)} answered HTTP {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        text = getattr(reason, "strerror", None) or str(reason)
        return HostScrape(url, host, error=f"{_where(url)} unreachable: {text.lower()}")
    if len(body) > MAX_BYTES:
        return HostScrape(url, host, error=f"{_where(url)}: answer too large to be an exporter's")
    try:
        return parse_exposition(body.decode("utf-8", errors="replace"), url)
    except ValueError as exc:
        return HostScrape(url, host, error=f"{_where(url)}: not Prometheus metrics ({exc})")


class RemoteHosts(SnapshotSource):
    """A snapshot source for the monitor: every host's GPUs, scraped in parallel each interval."""

    thread_name = "nvtopy-remote"

    def __init__(self, urls: Sequence[str], interval: float = 2.0, timeout: float = 2.0) -> None:
        super().__init__(interval)
        self.urls = [metrics_url(u) for u in urls]
        self.timeout = min(timeout, max(0.2, interval))
        self.collector = type("_Indices", (), {"indices": []})()
        self._history: dict[tuple[str, int], collections.deque[tuple[Any, ...]]] = {}
        self._sequence = 0
        self._last: list[HostScrape] = []

    def submit(self, function: Callable[[], Any]) -> Future[SignalOutcome]:
        future: Future[SignalOutcome] = Future()
        future.set_result(SignalOutcome(False, "processes of remote hosts cannot be signalled from here"))
        return future

    def status(self) -> str:
        up = sum(1 for s in self._last if s.error is None)
        state = "⏸ " if self._paused else ""
        return f"{state}REMOTE {up}/{len(self.urls)} hosts ⟳ {self._interval:g}s"

    # ----------------------------------------------------------------- scraping

    def poll_once(self) -> Snapshot:
        with ThreadPoolExecutor(max_workers=min(16, len(self.urls))) as pool:
            scrapes = list(pool.map(lambda url: _fetch(url, self.timeout), self.urls))
        self._last = scrapes
        snapshot = self._snapshot(scrapes)
        self._publish(snapshot)
        return snapshot

    def _snapshot(self, scrapes: list[HostScrape]) -> Snapshot:
        now = time.time()
        gpus: list[GpuState] = []
        for scrape in scrapes:
            if scrape.error is not None:
                static = GpuStatic(index=len(gpus), host=scrape.hostname)
                note = scrape.error
                gpus.append(GpuState(static, GpuSample(now, lost=True), note=note))
                continue
            for remote_static, values, lost in scrape.gpus:
                index = len(gpus)
                static = GpuStatic(
                    index=index,
                    host=scrape.hostname,
                    host_index=remote_static.index,
                    **{k: getattr(remote_static, k) for k in ("uuid", "name", "bus_id")},
                    memory_total_bytes=remote_static.memory_total_bytes,
                    temperature_slowdown_c=remote_static.temperature_slowdown_c,
                )
                reasons = {k: Reason.NOT_AVAILABLE for k in ("fan_percent", "power_draw_w") if k not in values}
                sample = GpuSample(now, lost=lost, unavailable=freeze(reasons), **values)
                processes = tuple(
                    GpuProcess(
                        gpu_index=index,
                        gpu_uuid=static.uuid,
                        pid=int(row["pid"]),
                        type=ProcessType(row["type"]) if row["type"] in ("C", "G", "C+G") else ProcessType.COMPUTE,
                        gpu_memory_bytes=_int(row.get("gpu_memory_bytes")),
                        sm_percent=_int(row.get("sm_utilization_percent")),
                        memory_percent=_int(row.get("memory_utilization_percent")),
                        user=row.get("user"),
                        command=row.get("command"),
                        cpu_percent=row.get("cpu_percent"),
                        host_memory_bytes=_int(row.get("host_memory_bytes")),
                        create_time=row.get("start_time_seconds"),
                        running_seconds=None
                        if row.get("start_time_seconds") is None
                        else max(0.0, now - row["start_time_seconds"]),
                    )
                    for row in scrape.processes.get(remote_static.index, [])
                )
                key = (scrape.url, remote_static.index)
                rows = self._history.setdefault(key, collections.deque(maxlen=HISTORY))
                state = GpuState(static, sample, processes)
                rows.append(history_row(sample, state.memory_used_percent))
                history = history_of(rows)
                gpus.append(GpuState(static, sample, processes, history=history))
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

    def _run(self) -> None:
        self._run_periodic(self.poll_once)


def _where(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def _int(value: Any) -> int | None:
    return None if value is None else round(value)
