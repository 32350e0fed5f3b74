"""A fleet read again asks its processes' identity rows only where new since its last read (issue 27).

Why: at 4,096 GPUs the ~8,000 identity rows (a command line each) are the answer's largest, and a
process's identity labels and start time do not change. ``read_query(identities_since=(..., T))`` leaves
out each process whose identity and start time are as they were at T (``@ T``, ``==``); the fleet lays
what it kept under that process's value rows. What must hold: every process shows the identity and start
time it has now -- a new one, a pid reused with the same labels, one the fleet never kept -- and a server
that refuses ``@`` costs one refresh, not the fleet.

Each test stores a host's scrapes a second apart (the newest as the fake's series, the others as the history
it answers ``@`` from), and refreshes after each scrape.
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import json

from nvtopy.sources.remote.fleet import PROCESS_STARTED

from ...prometheus_fixtures import Series, exposition_series, simulated_exposition
from .test_fleet import NOW, fake  # noqa: F401
from .test_fleet import fleet_of as any_fleet_of
from .test_prometheus_api import send

INSTANCE = "10.0.0.1:9400"
TEXT = simulated_exposition("node", 1, 2)


def fleet_of(fake, **kwargs):
    """A fleet refreshing every second, as its hosts are scraped."""
    return any_fleet_of(fake, interval=1.0, **kwargs)


def _scrapes(fake, scrapes: list[list[Series]]) -> None:
    """The host's scrapes so far (oldest first): the newest its series, the others their history (``@``); the
    fake's clock just after the newest."""
    fake.history = [s for scrape in scrapes[:-1] for s in scrape]
    fake.set_series(scrapes[-1])
    fake.now = scrapes[-1][0].timestamp + 0.1


def _scrape(at: float, change=None) -> list[Series]:
    series = exposition_series(TEXT, INSTANCE, at)
    if change is not None:
        series = [s for s in series if change(s) is not False]
    return series


def _identities_in_last_answer(fake, query: str) -> int:
    result = json.loads(fake.answer(query))["data"]["result"]
    return sum(1 for row in result if row["metric"].get("__name__") == PROCESS_STARTED)


def _shown(snapshot) -> list[tuple]:
    return sorted((p.host, p.gpu_index, p.pid, p.user, p.command, p.owner, p.create_time) for p in snapshot.processes)


def _three_reads(fake, fleet, third=None):
    """Three refreshes of 1 s scrapes (T of the second and third: the scrape the refresh before read)."""
    scrapes = [_scrape(NOW - 3)]
    _scrapes(fake, scrapes)
    first = fleet.poll_once()
    scrapes.append(_scrape(NOW - 2))
    _scrapes(fake, scrapes)
    second = fleet.poll_once()
    scrapes.append(_scrape(NOW - 1, third))
    _scrapes(fake, scrapes)
    return first, second, fleet.poll_once(), scrapes


def test_a_steady_read_asks_no_identity_it_kept_and_shows_the_same_processes(fake):
    fleet = fleet_of(fake)
    first, second, third, _ = _three_reads(fake, fleet)
    assert first.processes and _shown(first) == _shown(second) == _shown(third)
    assert all(p.command and p.user and p.create_time for p in third.processes)
    read = fake.queries[-1]
    assert " @ " in read and " unless on(" in read
    assert _identities_in_last_answer(fake, read) == 0, "every identity was kept: none asked again"
    assert _identities_in_last_answer(fake, fake.queries[-3]) == 0
    assert _identities_in_last_answer(fake, fake.queries[-5]) == len(first.processes), "the first read: all"


def test_a_new_process_shows_its_identity_at_once(fake):
    fleet = fleet_of(fake)
    first, _, third, _ = _three_reads(fake, fleet)
    pid = first.processes[0].pid

    def renamed(s):  # the process gone, another one (a new pid, another command) in its place
        if s.labels.get("pid") == str(pid):
            s.labels["pid"] = "424242"
            if "command" in s.labels:
                s.labels["command"] = "python new.py"
            if s.labels["__name__"] == "nvtopy_process_start_time_seconds":
                s.value = NOW - 1.5

    fleet2 = fleet_of(fake)
    _, _, third, _ = _three_reads(fake, fleet2, renamed)
    new = [p for p in third.processes if p.pid == 424242]
    assert new and all(p.command == "python new.py" and p.create_time == NOW - 1.5 for p in new)
    assert pid not in {p.pid for p in third.processes}
    assert _identities_in_last_answer(fake, fake.queries[-1]) == len(new)


def test_a_pid_reused_with_the_same_labels_shows_its_new_start(fake):
    fleet = fleet_of(fake)
    first = _three_reads(fake, fleet_of(fake))[0]
    pid = first.processes[0].pid

    def restarted(s):  # the same pid, user, command and owner: another process, started just now
        if s.labels.get("pid") == str(pid) and s.labels["__name__"] == "nvtopy_process_start_time_seconds":
            s.value = NOW - 1.25

    _, _, third, scrapes = _three_reads(fake, fleet, restarted)
    shown = [p for p in third.processes if p.pid == pid]
    assert shown and all(p.create_time == NOW - 1.25 for p in shown)
    assert _identities_in_last_answer(fake, fake.queries[-1]) == len(shown)
    for at in (NOW, NOW + 1):  # and kept as it is now: at the read whose T is past the restart, not asked
        scrapes.append(_scrape(at, restarted))
        _scrapes(fake, scrapes)
        later = fleet.poll_once()
    assert _identities_in_last_answer(fake, fake.queries[-1]) == 0
    assert [p.create_time for p in later.processes if p.pid == pid] == [NOW - 1.25] * len(shown)


def test_a_process_the_fleet_never_kept_is_read_whole_at_the_next_read(fake):
    """A host shown stale at a read keeps no process of it (its lines are the stale ones): at the next read its
    processes the same as at T are left out of the answer with nothing kept. Shown without an identity this
    once; the host's every identity asked at the read after."""
    fleet = fleet_of(fake, stale_after=5.0)
    scrapes = [_scrape(NOW - 3)]
    _scrapes(fake, scrapes)
    first = fleet.poll_once()
    scrapes.append(_scrape(NOW - 2))
    _scrapes(fake, scrapes)
    fake.now = NOW + 60  # the scrape read 62 s old: stale
    stale = fleet.poll_once()
    assert not stale.processes and "stale" in (stale.gpus[0].note or "")
    scrapes.append(_scrape(NOW + 60))
    _scrapes(fake, scrapes)
    third = fleet.poll_once()
    assert " @ " in fake.queries[-1] and _identities_in_last_answer(fake, fake.queries[-1]) == 0
    assert third.processes and all(p.command is None and p.create_time is None for p in third.processes)
    scrapes.append(_scrape(NOW + 61))
    _scrapes(fake, scrapes)
    assert _shown(fleet.poll_once()) == _shown(first)
    assert " @ " not in fake.queries[-1], "the host's every identity asked"
    scrapes.append(_scrape(NOW + 62))
    _scrapes(fake, scrapes)
    assert _shown(fleet.poll_once()) == _shown(first)
    assert " @ " in fake.queries[-1], "then only the new ones again"


def test_a_server_that_refuses_at_costs_one_refresh(fake):
    """Prometheus before 2.25 (or 2.25-2.32 without the feature flag) refuses ``@``: that refresh is one line, and
    every later one asks every identity, as before."""
    fleet = fleet_of(fake)
    scrapes = [_scrape(NOW - 3)]
    _scrapes(fake, scrapes)
    first = fleet.poll_once()

    def refuse_at(handler, query: str) -> bool:
        if " @ " not in query:
            return False
        body = {"status": "error", "errorType": "bad_data", "error": "@ modifier is disabled"}
        send(handler, 400, json.dumps(body).encode(), Content_Type="application/json")
        return True

    fake.reply = refuse_at
    scrapes.append(_scrape(NOW - 2))
    _scrapes(fake, scrapes)
    refused = fleet.poll_once()
    assert not refused.processes and "@ modifier is disabled" in (refused.gpus[0].note or "")
    for at in (NOW - 1, NOW):
        scrapes.append(_scrape(at))
        _scrapes(fake, scrapes)
        assert _shown(fleet.poll_once()) == _shown(first)
        assert " @ " not in fake.queries[-1]
