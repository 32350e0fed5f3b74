"""The exporter renders each snapshot once: every scrape of it shares the same bytes.

Counted, not timed: :meth:`Exposition._render` is the one place the text of a
snapshot is made, so a test wraps it and counts. And the bytes served (plain and
gzip) are held to prometheus-client's own ``generate_latest`` of the same
snapshot, byte for byte, on a fleet with hostile process names, MIG, NVLinks
and owners, so the faster renderer cannot drift from the library it stands in for.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import threading
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.backends.simulated.catalog import Workload, find_model
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.commands.exporter.command import EXPORTER_GROUPS
from nvtopy.commands.exporter.server import serve
from nvtopy.formats.prometheus import collect as prometheus
from nvtopy.formats.prometheus.collect import SnapshotCollector, age_families
from nvtopy.formats.prometheus.expose import Exposition, TextRenderer
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller

from ..builders import LatestSource
from ..prometheus_fixtures import shutdown_server

# Quotes, backslashes, a newline, control characters, non-UTF-8 argv: what label escaping exists for.
HOSTILE = "python -c \"print('x')\" C:\\temp\\x.py --sep=\\n\nrm\x1b[31m\x07 r\udcffsum \u00e9\u6f22"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, *, gzip_ok: bool = False) -> tuple[dict[str, str], bytes]:
    """(headers, raw body) of a GET: the body as sent, still compressed if it was."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    with _OPENER.open(request, timeout=10) as response:
        assert response.status == 200
        return dict(response.headers.items()), response.read()


def _reference(source: Any) -> bytes:
    """prometheus-client's own text of the source's latest snapshot."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    return generate_latest(registry)


def _own(body: bytes, reference: bytes) -> dict[str, float]:
    """The exporter's own series that follow the snapshot's text in a served body, by name.

    What a scrape serves is the snapshot's exposition (``reference``) and then what the exporter
    says of itself: ``nvtopy_exporter_ready`` (``exporter/readiness.py``), made per scrape.
    """
    assert body.startswith(reference), "the snapshot's text comes first, unchanged"
    return {s.name: s.value for f in text_string_to_metric_families(body[len(reference) :].decode()) for s in f.samples}


def _served_as(body: bytes, reference: bytes) -> bool:
    """``body`` is ``reference`` followed by the readiness gauge alone, at 1 (a published snapshot)."""
    return _own(body, reference) == {"nvtopy_exporter_ready": 1.0}


@dataclasses.dataclass
class Served:
    poller: Poller
    server: Any
    renders: list[Any]  # the snapshots Exposition._render was called for, in order

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"


@pytest.fixture
def served(sim, monkeypatch) -> Iterator[Callable[..., Served]]:
    """A factory: an exporter over a simulated backend (one snapshot published), its renders counted."""
    renders: list[Any] = []
    original = Exposition._render

    def counted(self: Exposition, snapshot: Any) -> bytes:
        renders.append(snapshot)
        return original(self, snapshot)

    monkeypatch.setattr(Exposition, "_render", counted)
    servers = []
    pollers: list[Poller] = []

    def make(*, faults: list[str] | None = None, gpus: int = 4, **kwargs: Any) -> Served:
        if faults:
            model = kwargs.get("model", "H100 80GB HBM3")
            kwargs["faults"] = parse_fault_specs(faults, gpus=gpus, model=find_model(model))
        backend = sim(gpus=gpus, **kwargs)
        poller = Poller(backend, interval=1.0, groups=EXPORTER_GROUPS, collector=Collector(backend, history=1))
        pollers.append(poller)
        server, _ = serve(poller, "127.0.0.1", 0)
        servers.append(server)
        poller.poll_once(slow=True)  # published after serve(): what a running exporter sees
        return Served(poller, server, renders)

    yield make
    for server in servers:
        shutdown_server(server)
    for poller in pollers:  # their collectors' GPU worker threads end
        if poller.collector is not None:
            poller.collector.close()


# ---------------------------------------------------------------- once per snapshot


def test_many_scrapes_of_one_snapshot_render_it_once(served):
    ex = served()
    bodies = {_get(ex.url)[1] for _ in range(10)}
    bodies |= {gzip.decompress(_get(ex.url, gzip_ok=True)[1]) for _ in range(10)}
    assert len(bodies) == 1
    assert ex.renders == [ex.poller.latest], "20 scrapes (plain and gzip) of one snapshot: one render"


def test_concurrent_scrapes_share_one_render(served):
    ex = served()
    bodies: list[bytes] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def scrape() -> None:
        try:
            start.wait(5)
            for _ in range(3):
                bodies.append(_get(ex.url)[1])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert errors == []
    assert len(bodies) == 24 and len(set(bodies)) == 1
    assert len(ex.renders) == 1


def test_a_new_snapshot_renders_again_when_it_is_published(served, clock):
    ex = served()
    first = _get(ex.url)[1]
    assert len(ex.renders) == 1
    clock.advance(1.0)
    snapshot = ex.poller.poll_once()
    # Rendered as the poller publishes it (something scrapes this exporter), not by the next scrape.
    assert ex.renders == [ex.renders[0], snapshot]
    second = _get(ex.url)[1]
    assert len(ex.renders) == 2
    assert second != first, "the new snapshot's figures are served"
    assert _served_as(second, _reference(ex.poller))


def test_nothing_is_rendered_before_the_first_scrape(served, clock):
    ex = served()
    for _ in range(3):
        clock.advance(1.0)
        ex.poller.poll_once()
    assert ex.renders == [], "an exporter nobody scrapes renders nothing"
    _get(ex.url)
    assert ex.renders == [ex.poller.latest]


def test_a_closed_server_renders_no_more(served, clock):
    ex = served()
    _get(ex.url)
    shutdown_server(ex.server)
    clock.advance(1.0)
    ex.poller.poll_once()
    assert len(ex.renders) == 1, "the poller outlives the server: its snapshots are not rendered for nobody"


# ---------------------------------------------------------------- the bytes: prometheus-client's, exactly


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"gpus": 8, "processes_per_gpu": 64, "steady": True},
        {"steady": True, "workloads": [Workload(HOSTILE, (0.1, 0.2), (0.2, 0.4), (5000, 9000))]},
        {"faults": ["mig=3@1", "mig=7@2", "lost@3"]},
        {"gpus": 2, "model": "RTX 4090"},
    ],
    ids=["default", "512-processes", "hostile-labels", "mig-and-lost", "geforce"],
)
def test_the_bytes_are_prometheus_clients_own(served, kwargs):
    ex = served(**kwargs)
    reference = _reference(ex.poller)
    headers, body = _get(ex.url)
    assert _served_as(body, reference)
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["Content-Length"]) == len(body)
    headers, packed = _get(ex.url, gzip_ok=True)
    assert headers["Content-Encoding"] == "gzip"
    assert int(headers["Content-Length"]) == len(packed)
    assert gzip.decompress(packed) == body


def test_gzip_is_one_complete_member(served):
    """The cached deflate stream plus the scrape's final block make one gzip member: a strict reader agrees."""
    ex = served()
    _, packed = _get(ex.url, gzip_ok=True)
    reader = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one member, checks the CRC-32 and length trailer
    text = reader.decompress(packed)
    assert reader.eof and reader.unused_data == b""
    assert _served_as(text, _reference(ex.poller))
    corrupt = bytearray(packed)
    corrupt[-8] ^= 0xFF  # the CRC is checked: a wrong one is an error (so the one above was right)
    with pytest.raises(zlib.error):
        zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(bytes(corrupt))


def test_the_age_is_new_on_every_scrape_the_rest_is_shared(served, monkeypatch):
    """Only ``nvtopy_snapshot_age_seconds`` is made per scrape: it comes last, after the cached bytes."""
    ex = served()
    snapshot = ex.poller.latest
    live = dataclasses.replace(snapshot, host=dataclasses.replace(snapshot.host, backend="nvml"))

    exposition = Exposition(LatestSource(live))
    now = [live.timestamp + 2.5]
    monkeypatch.setattr(prometheus.time, "time", lambda: now[0])
    first = b"".join(exposition.chunks())
    now[0] += 4.0
    second = b"".join(exposition.chunks())
    head, age = first.rsplit(b"# HELP nvtopy_snapshot_age_seconds", 1)
    assert age.endswith(b"\nnvtopy_snapshot_age_seconds 2.5\n")
    assert second == head + b"# HELP nvtopy_snapshot_age_seconds" + age.replace(b" 2.5\n", b" 6.5\n")
    assert gzip.decompress(b"".join(exposition.chunks(gzip=True))).endswith(b"\nnvtopy_snapshot_age_seconds 6.5\n")


def test_before_the_first_snapshot_the_info_alone(sim):
    assert b"".join(Exposition(LatestSource(None)).chunks()) == _reference(LatestSource(None))
    assert b"nvtopy_exporter_info" in _reference(LatestSource(None))


# ---------------------------------------------------------------- the renderer against generate_latest


def _generate_latest(families: list[Any]) -> bytes:
    class Families:
        def collect(self) -> list[Any]:
            return families

    return generate_latest(Families())  # type: ignore[arg-type]


def _edge_families() -> list[Any]:
    gauge = GaugeMetricFamily("edge_gauge", 'Help with \\ backslash,\nnewline and "quotes".', labels=["b", "a"])
    for i, value in enumerate(
        [0.0, -0.0, 1, 1.5, -2.25, 123456.0, 1234567.0, 12345678901.0, 1e-7, 1e300, math.inf, -math.inf, math.nan]
    ):
        gauge.add_metric([f"v{i}", 'q"uo\\te\nline'], value)
    gauge.add_metric(["t", ""], 3.0, timestamp=1_700_000_000.123)
    counter = CounterMetricFamily("edge_events", "A counter.", labels=["kind"])
    counter.add_metric(["a"], 5)
    counter.add_metric(["b"], 7.0, created=1_700_000_000.0)  # an OpenMetrics-only _created sample: handed over
    plain = CounterMetricFamily("edge_plain", "A counter without created.", labels=["kind"])
    plain.add_metric(["a"], 5)
    plain.add_metric(["b"], 2.5e9)
    unlabelled = GaugeMetricFamily("edge_alone", "No labels.", value=42)
    info = InfoMetricFamily("edge_build", "An info family.", value={"version": "1"})
    histogram = HistogramMetricFamily("edge_latency", "A histogram.", buckets=[("1.0", 2), ("+Inf", 3)], sum_value=4)
    unknown = UnknownMetricFamily("edge_unknown", "Untyped.", value=1)
    return [gauge, counter, plain, unlabelled, info, histogram, unknown]


def test_the_renderer_writes_what_generate_latest_writes():
    families = _edge_families()
    renderer = TextRenderer()
    assert renderer.render(families) == _generate_latest(families)
    assert renderer.render(families) == _generate_latest(families), "again, from its label cache"


def test_a_changed_label_is_never_served_from_the_cache():
    renderer = TextRenderer()
    before = GaugeMetricFamily("m", "h", labels=["command"])
    before.add_metric(["train.py"], 1.0)
    renderer.render([before])
    after = GaugeMetricFamily("m", "h", labels=["command"])
    after.add_metric(['evil" x="1'], 1.0)
    assert renderer.render([after]) == _generate_latest([after])
    assert b'command="evil\\" x=\\"1"' in renderer.render([after])


def test_a_process_whose_labels_change_is_never_served_from_the_kept_labels(served, clock):
    """The collector keeps each process's label dict between snapshots: a changed command or user shows at once."""
    ex = served(steady=True)
    collector = SnapshotCollector(ex.poller)
    before = ex.poller.latest
    collector.families(before)
    gpu = before.gpus[0]
    proc = gpu.processes[0]
    renamed = dataclasses.replace(proc, command='evil" x="1', user="mallory")
    changed_gpu = dataclasses.replace(gpu, processes=(renamed, *gpu.processes[1:]))
    after = dataclasses.replace(before, gpus=(changed_gpu, *before.gpus[1:]))

    text = _generate_latest(collector.families(after) + age_families(after))
    assert text == _reference(LatestSource(after)), "what a fresh collector makes of the changed snapshot"
    assert b'command="evil\\" x=\\"1"' in text and b'user="mallory"' in text


@pytest.mark.parametrize("query", ["name[]=DCGM_FI_DEV_GPU_TEMP", "name%5B%5D=DCGM_FI_DEV_GPU_TEMP"])
def test_a_name_filter_is_still_prometheus_clients(served, query):
    """``?name[]=`` selects families, as prometheus-client's app does (rendered for that request, not cached)."""
    ex = served()
    _, body = _get(f"{ex.url}?{query}")
    families = {line.split()[2] for line in body.decode().splitlines() if line.startswith("# TYPE ")}
    assert families == {"DCGM_FI_DEV_GPU_TEMP"}
    assert ex.renders == []


@pytest.mark.parametrize("faults", [None, ["mig=3@1", "lost@2"]], ids=["plain", "mig-and-lost"])
def test_families_reused_between_snapshots_never_show_stale_values(served, clock, faults):
    """A family whose inputs did not change is reused whole (no samples, no text made again); a scrape still
    equals prometheus-client's own text of a fresh collector, snapshot after snapshot."""
    ex = served(faults=faults)
    collector = SnapshotCollector(ex.poller)  # one kept from snapshot to snapshot, as the exporter's is
    renderer = TextRenderer()
    before: list[Any] = []
    reused = rebuilt = 0
    for step in range(8):
        clock.advance(1 if step % 3 else 7)  # every tick, and slow groups coming due
        snapshot = ex.poller.poll_once()
        _, body = _get(ex.url)
        reference = _reference(ex.poller)
        assert _served_as(body, reference), f"snapshot {step}: the served text went stale"
        families = collector.families(snapshot)
        kept = {id(f) for f in before}
        reused += sum(1 for f in families if id(f) in kept)
        rebuilt += sum(1 for f in families if id(f) not in kept)
        text = renderer.render([*families, *age_families(snapshot)])
        assert text.split(b"# HELP nvtopy_snapshot_age")[0] == reference.split(b"# HELP nvtopy_snapshot_age")[0]
        before = families
    assert reused > 0, "unchanged families are reused"
    assert rebuilt > len(before), "changed ones are built again"
