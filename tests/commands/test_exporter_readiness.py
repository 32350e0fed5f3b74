"""The exporter's readiness: ``GET /health``, ``nvtopy_exporter_ready``, and ``--self-metrics``.

What counts as a completed collection is what the poller really publishes when the
driver hangs (``nvtopy/commands/exporter/readiness.py``): snapshots keep coming, and a
GPU that did not answer keeps its last sample (older than the snapshot) or, if it never
answered, a fresh placeholder marked not responding. Hand-made snapshots of each case
here, on a hand-driven clock; the real process on the fake driver's hang knob is
``tests/end_to_end/test_exporter_readiness_fake_nvml.py``.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.commands.exporter.command import EXPORTER_GROUPS, build_parser
from nvtopy.commands.exporter.readiness import STALE_FLOOR_S, Readiness, stale_after
from nvtopy.commands.exporter.selfmetrics import SELF_METRIC_NAMES
from nvtopy.commands.exporter.server import serve
from nvtopy.model import GpuHealth, Snapshot
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller

from ..builders import NOW, LatestSource, gpu_sample, gpu_state, snapshot_of
from ..conftest import ManualClock
from ..prometheus_fixtures import shutdown_server

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def _request(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, raw body) of a request; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


def _samples(text: str) -> dict[str, float]:
    """Every unlabelled sample of an exposition, by name (the exporter's own series have no labels)."""
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


# ---------------------------------------------------------------- hand-made snapshots

SILENT = GpuHealth(responding=False, stalled_seconds=30.0)


def _answered(*indices: int, at: float = NOW) -> Snapshot:
    """A snapshot taken at ``at`` in which every GPU in ``indices`` answered."""
    return snapshot_of(*(gpu_state(i, sample=gpu_sample(at, bare=True)) for i in indices), timestamp=at)


def _stale(*indices: int, at: float, read_at: float = NOW) -> Snapshot:
    """A snapshot at ``at`` whose GPUs still show what was read at ``read_at`` (their reads are outstanding)."""
    return snapshot_of(*(gpu_state(i, sample=gpu_sample(read_at, bare=True)) for i in indices), timestamp=at)


class Holder(LatestSource):
    """A source a test publishes to by hand: ``latest`` is what it last set."""

    def publish(self, snapshot: Snapshot) -> None:
        self.latest = snapshot


@pytest.fixture
def watched() -> tuple[Holder, ManualClock, Readiness]:
    """A readiness over a holder with no snapshot yet, at a 1 s interval (so 10 s to stale), on a manual clock."""
    holder, clock = Holder(None), ManualClock(0.0)
    return holder, clock, Readiness(holder, interval=1.0, clock=clock)


def test_not_ready_before_the_first_collection(watched):
    _, clock, readiness = watched
    clock.advance(2.5)
    verdict = readiness.verdict()
    assert not verdict.ready
    assert verdict.reason == "not ready: no collection completed yet (started 2.5 s ago)"
    assert readiness.completed_age() is None


def test_ready_once_a_gpu_answered_then_stale_past_the_window_then_ready_again(watched):
    holder, clock, readiness = watched
    holder.publish(_answered(0, 1))
    assert readiness.verdict() == (True, "ok: 2 GPUs, last collection 0.0 s ago")
    for step in range(10):  # the poller goes on publishing, but no GPU answers: its reads are stuck
        clock.advance(1.0)
        holder.publish(_stale(0, 1, at=NOW + step + 1))
        assert readiness.verdict().ready, f"{step + 1} s: within max(3 intervals, 10 s)"
    clock.advance(0.01)
    verdict = readiness.verdict()
    assert not verdict.ready
    assert (
        verdict.reason
        == "not ready: no collection completed in 10 s (the driver does not answer: GPUs 0, 1 not responding)"
    )
    clock.advance(5.0)
    holder.publish(_answered(0, 1, at=NOW + 20))
    assert readiness.verdict() == (True, "ok: 2 GPUs, last collection 0.0 s ago")


def test_the_window_is_three_intervals_and_at_least_ten_seconds():
    assert stale_after(0.1) == STALE_FLOOR_S == 10.0
    assert stale_after(1.0) == 10.0
    assert stale_after(5.0) == 15.0
    clock = ManualClock(0.0)
    holder = Holder(_answered(0))
    readiness = Readiness(holder, interval=5.0, clock=clock)
    assert readiness.verdict().ready, "a holder's snapshot: dated when it is first seen"
    clock.advance(14.9)
    assert readiness.verdict().ready
    clock.advance(0.2)
    assert not readiness.verdict().ready


def test_placeholders_of_gpus_that_never_answered_are_no_collection(watched):
    """A GPU stuck from the start is published as a fresh placeholder marked not responding: not an answer."""
    holder, clock, readiness = watched
    for step in range(3):
        clock.advance(0.5)
        holder.publish(snapshot_of(gpu_state(0, health=SILENT), gpu_state(1, health=SILENT), timestamp=NOW + step))
        verdict = readiness.verdict()
        assert not verdict.ready
    assert verdict.reason == "not ready: no collection completed yet (started 1.5 s ago; GPUs 0, 1 not responding)"


def test_some_gpus_silent_is_ready_and_names_them(watched):
    """The others' metrics are still good: 200, and the reason (and the gauge) name the GPUs that do not answer."""
    holder, clock, readiness = watched
    holder.publish(_answered(0, 1, 2, 3))
    clock.advance(12.0)
    fresh = [gpu_state(i, sample=gpu_sample(NOW + 12)) for i in (0, 2, 3)]
    holder.publish(snapshot_of(fresh[0], gpu_state(1, health=SILENT), *fresh[1:], timestamp=NOW + 12))
    verdict = readiness.verdict()
    assert verdict == (True, "ok: 4 GPUs, last collection 0.0 s ago; not responding: GPU 1 (for up to 12 s)")
    assert readiness.not_responding() == 1


def test_a_gpu_silent_past_the_window_is_named_before_it_is_marked(watched):
    """Not marked yet (its --timeout is longer) but without an answer for longer than the window: named too."""
    holder, clock, readiness = watched
    holder.publish(_answered(0, 1))
    clock.advance(11.0)
    holder.publish(snapshot_of(gpu_state(0, sample=gpu_sample(NOW + 11)), gpu_state(1), timestamp=NOW + 11))
    assert readiness.verdict() == (
        True,
        "ok: 2 GPUs, last collection 0.0 s ago; not responding: GPU 1 (for up to 11 s)",
    )


def test_a_host_without_gpus_is_ready(watched):
    holder, _, readiness = watched
    holder.publish(snapshot_of())
    assert readiness.verdict() == (True, "ok: no GPUs, last collection 0.0 s ago")


def test_the_reason_stays_one_short_line(watched):
    holder, clock, readiness = watched
    clock.advance(30.0)
    holder.publish(snapshot_of(*(gpu_state(i, health=SILENT) for i in range(64))))
    reason = readiness.verdict().reason
    assert "\n" not in reason and len(reason) < 160
    assert reason.endswith("(started 30.0 s ago; GPUs 0, 1, 2, 3, 4, 5, 6, 7 and 56 more not responding)")


def test_a_publication_is_counted_once_and_its_time_is_when_it_came(watched):
    """The poller calls observe() as it publishes; a question afterwards does not count it again or re-date it."""
    holder, clock, readiness = watched
    snapshot = _answered(0)
    holder.publish(snapshot)
    readiness.observe(snapshot)
    clock.advance(4.0)
    assert readiness.verdict().reason == "ok: 1 GPU, last collection 4.0 s ago"
    assert readiness.collections == 1


# ---------------------------------------------------------------- the switch can fail


def _switch(make: Callable[[Holder, ManualClock], Readiness]) -> list[bool]:
    """Readiness at each step of: nothing yet, a GPU answered, 9 s of stuck reads, 11 s, an answer again."""
    holder, clock = Holder(None), ManualClock(0.0)
    readiness = make(holder, clock)
    seen = [readiness.verdict().ready]
    holder.publish(_answered(0))
    seen.append(readiness.verdict().ready)
    clock.advance(9.0)
    holder.publish(_stale(0, at=NOW + 9))
    seen.append(readiness.verdict().ready)
    clock.advance(2.0)
    holder.publish(_stale(0, at=NOW + 11))
    seen.append(readiness.verdict().ready)
    holder.publish(_answered(0, at=NOW + 11))
    seen.append(readiness.verdict().ready)
    return seen


class _NeverStale(Readiness):
    """Broken: the window is ignored."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stale_after = float("inf")


class _AnySnapshotCounts(Readiness):
    """Broken: a published snapshot counts as a collection whether or not a GPU answered in it."""

    def _observe(self, snapshot: Snapshot) -> None:
        fresh = [
            dataclasses.replace(g, sample=dataclasses.replace(g.sample, timestamp=snapshot.timestamp))
            for g in snapshot.gpus
        ]
        super()._observe(dataclasses.replace(snapshot, gpus=tuple(fresh)))


def test_the_switch_turns_and_a_broken_one_is_caught():
    expected = [False, True, True, False, True]
    assert _switch(lambda h, c: Readiness(h, interval=1.0, clock=c)) == expected
    assert _switch(lambda h, c: _NeverStale(h, interval=1.0, clock=c)) != expected, "a window ignored is seen"
    assert _switch(lambda h, c: _AnySnapshotCounts(h, interval=1.0, clock=c)) != expected, "stuck reads are seen"


# ---------------------------------------------------------------- over HTTP (simulated GPUs, a real server)


@dataclasses.dataclass
class Served:
    poller: Poller
    server: Any

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def metrics(self) -> dict[str, float]:
        status, _, body = _request(self.url("/metrics"))
        assert status == 200
        return _samples(body.decode())


@pytest.fixture
def served(sim) -> Iterator[Callable[..., Served]]:
    """A factory: an exporter over simulated GPUs; nothing published until the test polls."""
    made: list[Served] = []

    def make(*, self_metrics: bool = False, **kwargs: Any) -> Served:
        backend = sim(**kwargs)
        poller = Poller(backend, interval=1.0, groups=EXPORTER_GROUPS, collector=Collector(backend, history=1))
        server, _ = serve(poller, "127.0.0.1", 0, self_metrics=self_metrics)
        made.append(Served(poller, server))
        return made[-1]

    yield make
    for ex in made:
        shutdown_server(ex.server)
        if ex.poller.collector is not None:
            ex.poller.collector.close()


def test_health_over_http_before_and_after_the_first_collection(served):
    ex = served(gpus=4)
    status, headers, body = _request(ex.url("/health"))
    assert status == 503
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert body.decode().startswith("not ready: no collection completed yet (started ")
    assert body.endswith(b"\n") and body.count(b"\n") == 1
    assert _request(ex.url("/ready"))[0] == 503
    status, headers, body = _request(ex.url("/health"), method="HEAD")
    assert status == 503 and body == b""
    metrics = ex.metrics()
    assert metrics["nvtopy_exporter_ready"] == 0, "/metrics is never empty: the gauge is there, at 0"

    ex.poller.poll_once()
    status, _, body = _request(ex.url("/health"))
    assert status == 200 and body.decode().startswith("ok: 4 GPUs, last collection ")
    assert _request(ex.url("/ready"))[0] == 200
    assert ex.metrics()["nvtopy_exporter_ready"] == 1


def test_the_ready_gauge_reaches_curl_through_gzip(served):
    """The exposition and the exporter's own series are one gzip member: curl reads it to the end.

    (curl 7.88 stops after a first gzip member: a second one for the exporter's series would be lost.)
    """
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    ex = served()
    ex.poller.poll_once()
    out = subprocess.run([curl, "-sf", "--compressed", ex.url("/metrics")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "DCGM_FI_DEV_GPU_UTIL{" in out.stdout and _samples(out.stdout)["nvtopy_exporter_ready"] == 1


def test_self_metrics_are_off_by_default(served):
    ex = served()
    ex.poller.poll_once()
    own = {name for name in ex.metrics() if name.startswith("nvtopy_exporter_")}
    assert own == {"nvtopy_exporter_ready"}


def test_self_metrics_with_the_flag_and_their_values(served):
    ex = served(self_metrics=True, gpus=2)
    before = ex.metrics()
    assert before["nvtopy_exporter_collections_total"] == 0
    assert before["nvtopy_exporter_scrapes_total"] == 1, "the scrape being answered counts"
    assert "nvtopy_exporter_last_collection_age_seconds" not in before, "no collection yet: no age, never 0"
    assert "nvtopy_exporter_scrape_duration_seconds" not in before, "no scrape finished yet"
    for _ in range(3):
        ex.poller.poll_once()
    _request(ex.url("/health"))  # not a scrape
    after = ex.metrics()
    assert set(SELF_METRIC_NAMES) <= set(after)
    assert after["nvtopy_exporter_collections_total"] == 3
    assert after["nvtopy_exporter_scrapes_total"] == 2
    assert after["nvtopy_exporter_collection_duration_seconds"] == ex.poller.latest.collect_seconds
    assert 0 <= after["nvtopy_exporter_last_collection_age_seconds"] < 5
    assert 0 < after["nvtopy_exporter_scrape_duration_seconds"] < 5
    assert after["nvtopy_exporter_gpus_not_responding"] == 0
    assert after["nvtopy_exporter_ready"] == 1
    text = _request(ex.url("/metrics"))[2].decode()
    assert "# TYPE nvtopy_exporter_scrapes_total counter" in text
    assert "# TYPE nvtopy_exporter_collections_total counter" in text


def test_a_name_filter_selects_the_exporters_own_series_too(served):
    ex = served(self_metrics=True)
    ex.poller.poll_once()
    _, _, body = _request(ex.url("/metrics?name[]=nvtopy_exporter_ready&name[]=DCGM_FI_DEV_GPU_TEMP"))
    families = {f.name for f in text_string_to_metric_families(body.decode())}
    assert families == {"nvtopy_exporter_ready", "DCGM_FI_DEV_GPU_TEMP"}


def test_the_flag_is_in_a_group_of_its_own_after_the_health_flags():
    parser = build_parser("exporter")
    assert parser.parse_args([]).exporter_self_metrics is None, "not given: the config file decides"
    assert parser.parse_args(["--self-metrics"]).exporter_self_metrics is True
    text = parser.format_help()
    assert text.index("health flags") < text.index("the exporter's own series") < text.index("--self-metrics")
