"""A fleet refresh's CPU (``PrometheusFleet.refresh_cpu_seconds``) counts the queries' own threads.

Why: each answer is asked, read and its gzip undone on a thread of its own (so a stuck server can be cut off),
and at 4,096 GPUs that is some 40 ms a refresh; a measure of the refreshing thread alone said the refresh cost
less than it did (``make bench``'s fleet figures, until 2026-12-01)."""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import time

from nvtopy.sources.remote import prometheus as prometheus_module
from nvtopy.sources.remote.fetch import Exchange

from .test_fleet import add_hosts, fake, fleet_of  # noqa: F401

BUSY_S = 0.15


def _busy(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU (bounded: at most 20 s of wall time)."""
    until, deadline = time.thread_time() + seconds, time.monotonic() + 20
    while time.thread_time() < until and time.monotonic() < deadline:
        sum(range(1000))


def test_an_exchange_says_its_threads_cpu():
    class Busy(Exchange[int]):
        def work(self) -> int:
            _busy(BUSY_S)
            return 1

    call = Busy(time.monotonic() + 30).start()
    assert call.done.wait(30)
    assert call.result == 1 and BUSY_S <= call.cpu_seconds < BUSY_S + 1


def test_a_refresh_counts_its_queries_threads_cpu(fake, monkeypatch):
    add_hosts(fake, 2)
    fleet = fleet_of(fake)
    fleet.poll_once()
    real = prometheus_module._Call.work

    def busy_work(self):
        _busy(BUSY_S)  # as reading and undoing the gzip of a large answer would
        return real(self)

    monkeypatch.setattr(prometheus_module._Call, "work", busy_work)
    before = fleet.client.queries
    fleet.poll_once()
    asked = fleet.client.queries - before
    assert asked >= 1
    assert fleet.refresh_cpu_seconds >= asked * BUSY_S, (asked, fleet.refresh_cpu_seconds)
