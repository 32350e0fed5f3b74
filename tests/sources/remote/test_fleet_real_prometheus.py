"""``nvtopy --prometheus`` against a real Prometheus server scraping real exporters.

Three ``nvtopy exporter --demo`` processes (node-a, node-b, node-c: distinct seeds, 2,
4 and 1 GPUs) are scraped every second by Debian's ``prometheus`` on loopback
(:func:`~tests.prometheus_fixtures.three_exporter_fleet`); the fleet source, ``--once
--json`` and the text ``--once`` must show what the exporters served. A scale test
serves 64 exporters x 8 GPUs from this process and measures a refresh.

Skipped where no ``prometheus`` binary is on PATH (``apt-get install prometheus``;
``.ci/run`` installs it as root). Run it with::

    .venv/bin/python -m pytest tests/sources/remote/test_fleet_real_prometheus.py

``nvtopy report --prometheus`` tests reuse the same fleet: import
``three_exporter_fleet`` from ``tests.prometheus_fixtures`` into the test module.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.model import Snapshot
from nvtopy.sources.remote import fleet as fleet_module
from nvtopy.sources.remote.fleet import MAX_QUERIES_PER_REFRESH, PrometheusFleet, read_query

from ... import prometheus_fixtures
from ...prometheus_fixtures import (
    DATA_S,
    FLEET_HOSTS,
    Fleet,
    exporter_fleet,
    prometheus,
    requires_prometheus,
    scrape_config,
    served_expositions,
    simulated_exposition,
    targets_up,
    wait,
)
from ...waiting import until

pytestmark = [requires_prometheus, pytest.mark.real_server]
three_exporter_fleet = prometheus_fixtures.three_exporter_fleet  # the fixture, here by its name

MIB = 1 << 20
GPUS = {hostname: gpus for hostname, _, gpus in FLEET_HOSTS}


def complete(fleet: PrometheusFleet, expected: int, deadline_s: float = DATA_S) -> Snapshot:
    """Refresh until every expected GPU is shown with its values (the server may still be filling in)."""
    last: list[Snapshot] = []

    def every_gpu_shown() -> Snapshot | None:
        snapshot = fleet.poll_once()
        last[:] = [snapshot]
        shown = [g for g in snapshot.gpus if g.note is None and g.sample.memory_used_bytes is not None]
        return snapshot if len(shown) == expected == len(snapshot.gpus) else None

    def lines() -> str:  # on failure: each host's lines at the last refresh
        return f"the fleet showing {expected} GPUs: {[(g.static.host, g.note) for g in last[0].gpus]}"

    return until(every_gpu_shown, deadline_s, lines, step=0.5)


def test_the_fleet_shows_every_exporters_gpus_and_processes(three_exporter_fleet: Fleet):
    fleet = PrometheusFleet(three_exporter_fleet.url, interval=1.0)
    complete(fleet, sum(GPUS.values()))
    # Memory in use: as Prometheus holds it at the time the fleet read it. Every host read in one query, then the
    # same series asked at that query's time. A scrape whose samples are dated just before that time but stored
    # just after the fleet's query makes the two differ (CI saw it once in many runs): asked again, a few times.
    mismatches = []
    for _ in range(5):
        snapshot = fleet.read_once()
        evaluated = fleet.client.evaluated_at  # the time the server read the values at
        assert evaluated is not None
        used = {
            (labels["Hostname"], int(labels["gpu"])): round(value * MIB)
            for labels, value in fleet.client.query("DCGM_FI_DEV_FB_USED", at=evaluated)
        }
        mismatches = [
            (gpu.static.host, gpu.static.host_index, gpu.sample.memory_used_bytes, used.get(key))
            for gpu in snapshot.gpus
            if gpu.sample.memory_used_bytes != used.get(key := (gpu.static.host, gpu.static.host_index))
        ]
        if not mismatches:
            break
    assert not mismatches, f"the fleet's memory in use is not the server's at its evaluation time: {mismatches}"
    hosts = [g.static.host for g in snapshot.gpus]
    assert hosts == [h for h in sorted(GPUS) for _ in range(GPUS[h])], "grouped by host, in order"
    assert [g.index for g in snapshot.gpus] == list(range(len(hosts)))
    for exporter in three_exporter_fleet.exporters:
        served = parse_exposition(exporter.metrics(), f"http://{exporter.target}/metrics")
        mine = [g for g in snapshot.gpus if g.static.host == exporter.hostname]
        assert [g.static.host_index for g in mine] == [s.index for s, _, _ in served.gpus]
        for gpu, (static, _, _) in zip(mine, served.gpus, strict=True):
            assert (gpu.static.uuid, gpu.static.name, gpu.static.bus_id) == (static.uuid, static.name, static.bus_id)
            assert gpu.static.memory_total_bytes == static.memory_total_bytes
    # The processes: as Prometheus holds them at the time the fleet read them.
    pids = {
        (labels["Hostname"], int(labels["gpu"]), int(labels["pid"]))
        for labels, _ in fleet.client.query("nvtopy_process_gpu_memory_bytes", at=evaluated)
    }
    shown = {(p.host, snapshot.gpus[p.gpu_index].static.host_index, p.pid) for p in snapshot.processes}
    assert shown and shown == pids
    assert all(p.user and p.command for p in snapshot.processes)
    assert not fleet.can_signal


def test_the_real_servers_read_answer_fits_a_row_type_per_series(three_exporter_fleet: Fleet):
    """Prometheus (2.42 on) names the identity rows as read_query asks (``label_replace`` of ``__name__``), and
    every row of its answer fits its name's type: the answer is decoded the fast way, not as any JSON."""
    fleet = PrometheusFleet(three_exporter_fleet.url, interval=1.0)
    complete(fleet, sum(GPUS.values()))
    answers: list[bytes] = []
    found: list[object] = []
    answer, decode = fleet_module._ROWS.answer, fleet_module._ROWS.decode
    as_any_json: list[bytes] = []

    def kept(raw: bytes) -> object:
        answers.append(raw)
        found.append(answer(raw))
        return found[-1]

    def counted(chunk: bytes, rows: object) -> object:
        as_any_json.append(chunk)
        return type(fleet.client)._chunk_rows(fleet.client, chunk, rows)

    fleet_module._ROWS.answer = kept  # type: ignore[method-assign]
    fleet.client._chunk_rows = counted  # type: ignore[method-assign]
    try:
        snapshot = fleet.read_once()  # the snapshot of this very answer: fleet.latest is an earlier refresh's
    finally:
        del fleet_module._ROWS.answer
        del fleet.client._chunk_rows
    assert len(answers) == 1
    # Read from its end (TaggedRows.answer): the real server's answer begins as _ANSWER_HEAD says, so its rows
    # were never skipped over whole by msgspec nor copied out.
    assert getattr(found[0], "last", None) is not None, "the real server's answer was not read from its end"
    assert not as_any_json, "a chunk of the read answer did not fit the row types"
    rows = decode(answers[0])
    assert rows is not None, "the read answer does not fit the row types"
    names = {row.metric.name for row in rows.data.result}
    assert "DCGM_FI_DEV_FB_USED" in names and "nvtopy_process_gpu_memory_bytes" in names
    # A GPU's identity row carries whether it is lost (GPU_LOST: every GPU of nvtopy's exporter has the series);
    # no row of nvtopy_gpu_lost of its own comes.
    lost = {
        (row.metric.instance, row.metric.gpu): float(row.value[1])
        for row in rows.data.result
        if row.metric.name == fleet_module.GPU_LOST
    }
    assert "nvtopy_gpu_lost" not in names
    # The rows of no name are the identity rows of what has no lost flag or start time (GPU_IDENTITY and
    # PROCESS_IDENTITY decode with name None): no GPU here, but a process the exporter has just found may not have
    # its start time yet (CI on 16bb8bd, the clone without ../shared, had one).
    unnamed = [row for row in rows.data.result if row.metric.name is None]
    lostless = [row for row in unnamed if row.metric.pid is None]
    if lostless:  # CI on 2e5e441 saw one once: say whole what the server answered of that GPU, to find out why
        near = [
            (row.metric, row.value)
            for row in rows.data.result
            if (row.metric.instance, row.metric.gpu) in {(r.metric.instance, r.metric.gpu) for r in lostless}
            and row.metric.name in (None, fleet_module.GPU_LOST)
        ]
        raise AssertionError(f"every GPU of nvtopy's exporter has a lost flag; that GPU's identity rows: {near!r}")
    held_lost = fleet.client.query("nvtopy_gpu_lost", at=float(rows.data.result[0].value[0]))
    assert len(lost) == sum(GPUS.values()) and lost == {(m["instance"], m["gpu"]): v for m, v in held_lost}
    # A process's identity row carries its start time (PROCESS_STARTED), and no start time row of its own comes.
    started = {
        (row.metric.instance, row.metric.gpu, row.metric.pid): float(row.value[1])
        for row in rows.data.result
        if row.metric.name == fleet_module.PROCESS_STARTED
    }
    assert "nvtopy_process_start_time_seconds" not in names
    at = float(rows.data.result[0].value[0])
    held = fleet.client.query("nvtopy_process_start_time_seconds", at=at)
    assert started and started == {(m["instance"], m["gpu"], m["pid"]): value for m, value in held}
    assert not {(row.metric.instance, row.metric.gpu, row.metric.pid) for row in unnamed} & set(started)
    shown = sorted(p.create_time for p in snapshot.processes if p.create_time is not None)
    assert shown == sorted(started.values()), "each process shown with its start time"
    assert sum(p.create_time is None for p in snapshot.processes) == len(unnamed), "and one without it, without"
    # Two parts of value series (a group asked of some hosts: a term of its own): the server's `or` keeps both
    # (or-ed on the names too; a plain `or` keeps one row a GPU, the first part's).
    two = read_query(parts=((["DCGM_FI_DEV_FB_USED"], None), (["DCGM_FI_DEV_GPU_TEMP"], None)))
    shown = {(labels.get("__name__"), labels["instance"], labels["gpu"]) for labels, _ in fleet.client.query(two)}
    gpus = sum(GPUS.values())
    assert len({s for s in shown if s[0] == "DCGM_FI_DEV_FB_USED"}) == gpus
    assert len({s for s in shown if s[0] == "DCGM_FI_DEV_GPU_TEMP"}) == gpus
    # The same for two parts of process values (a process's utilisation asked of some hosts: a term of its own).
    memory, utilisation = "nvtopy_process_gpu_memory_bytes", "nvtopy_process_sm_utilization_percent"
    both = read_query(parts=((["DCGM_FI_DEV_FB_USED"], None),), process_parts=(([memory], None), ([utilisation], None)))
    read = {
        (labels.get("__name__"), labels["instance"], labels["gpu"], labels["pid"])
        for labels, _ in fleet.client.query(both, at=at)
        if "pid" in labels and labels.get("__name__") in (memory, utilisation)
    }
    for name in (memory, utilisation):
        held_now = {(m["instance"], m["gpu"], m["pid"]) for m, _ in fleet.client.query(name, at=at)}
        assert held_now and {r[1:] for r in read if r[0] == name} == held_now, name


def test_once_json_and_text_show_the_fleet(three_exporter_fleet: Fleet):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "nvtopy", "--prometheus", three_exporter_fleet.url, "--once", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    result = run("--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    counts: dict[str, int] = {}
    for gpu in data["gpus"]:
        counts[gpu["host"]] = counts.get(gpu["host"], 0) + 1
        assert gpu["memory_total_bytes"] > 0 and gpu["memory_used_bytes"] is not None
        assert all(p["host"] == gpu["host"] for p in gpu["processes"])
    assert counts == GPUS
    assert any(gpu["processes"] for gpu in data["gpus"])
    text = run("--no-color")
    assert text.returncode == 0, text.stderr
    for hostname, gpus in GPUS.items():
        assert f"{hostname}/{gpus - 1}" in text.stdout
    assert "[prometheus]" in text.stdout


def test_where_selects_hosts_and_its_values_stay_values(three_exporter_fleet: Fleet):
    chosen = PrometheusFleet(three_exporter_fleet.url, where='Hostname=~"node-[ab]"')
    assert {g.static.host for g in complete(chosen, GPUS["node-a"] + GPUS["node-b"]).gpus} == {"node-a", "node-b"}
    hostile = PrometheusFleet(three_exporter_fleet.url, where='Hostname="node-a\\"} or vector(1) or {a=\\""')
    snapshot = hostile.poll_once()
    assert snapshot.gpus == () and hostile._failure is None, "one odd Hostname, matching nothing; no error"


def test_prometheus_reads_every_exporters_ready_gauge_through_gzip(three_exporter_fleet: Fleet):
    """Prometheus asks for gzip: the exporter's own series, after the snapshot's text, are in the same gzip member."""
    server = three_exporter_fleet.server

    def ready() -> dict[str, float]:
        found = {s["metric"]["instance"]: float(s["value"][1]) for s in server.query("nvtopy_exporter_ready")}
        return found if found == dict.fromkeys(server.targets, 1.0) else {}

    wait("nvtopy_exporter_ready 1 from every exporter", DATA_S, ready, server.logs)


def test_a_stopped_exporter_is_shown_as_no_longer_reported(tmp_path: Path):
    with exporter_fleet(tmp_path, (("up-node", 5, 1), ("down-node", 6, 1))) as fleet:
        source = PrometheusFleet(fleet.url, interval=1.0)
        complete(source, 2)
        down = next(e for e in fleet.exporters if e.hostname == "down-node")
        down.process.terminate()
        down.process.wait(timeout=10)

        def gone() -> bool:
            lines = {g.static.host: g.note for g in source.poll_once().gpus}
            return (lines.get("down-node") or "").startswith("no longer reported") and lines["up-node"] is None

        wait("the stopped host shown as no longer reported", DATA_S, gone, fleet.server.logs)


@pytest.mark.slow
@pytest.mark.timing  # its bounds are on the clock (wall median < 200 ms): run apart from the loaded main pass
def test_64_hosts_x_8_gpus(tmp_path: Path):
    """The scale the issue asks for: 512 GPUs in Prometheus, the same queries per refresh as one host.

    The exporters are served from this process (one port each) and scraped every 15 s, a
    usual interval (dcgm-exporter itself collects every 30 s): each refresh then reads only
    the hosts with new samples, about 64/15 of them. Measured: the wall time of a refresh
    (both queries, the server's evaluation included, and the build) and the CPU time this
    process spent on it, over :data:`REFRESHES` refreshes.

    Not shorter by a reload at a shorter interval first: Prometheus 2.42 then ends the old
    loops' series (staleness markers two old intervals on), and each host vanished until
    its first scrape at 15 s (seen: 64 -> 32 hosts up for 13 s).
    """
    bodies = [simulated_exposition(f"node{n:02d}", n, 8).encode() for n in range(64)]
    logs: list[Path] = []
    with (
        served_expositions(bodies) as targets,
        prometheus(tmp_path, scrape_config(targets, interval="15s"), targets, logs) as server,
    ):
        wait("every target scraped", DATA_S, lambda: targets_up(server), logs)
        wait("512 GPUs in Prometheus", DATA_S, lambda: server.values("count(nvtopy_gpu_lost)") == [512.0], logs)
        began = time.monotonic()  # every host read at most once a 15 s from here
        one = PrometheusFleet(server.url, where='Hostname="node07"', interval=1.0)
        fleet = PrometheusFleet(server.url, interval=1.0)
        first_one = _queries(one)
        first = _queries(fleet)
        snapshot = fleet.latest
        assert snapshot is not None and len(snapshot.gpus) == 512
        assert len(one.latest.gpus) == 8 and one.latest.gpus[0].static.host == "node07"
        assert first == first_one == MAX_QUERIES_PER_REFRESH, "the full first read: as many queries as one host"
        assert snapshot.gpus[0].static.host == "node00" and snapshot.gpus[-1].static.host == "node63"
        full = (fleet.refresh_seconds, fleet.refresh_cpu_seconds)
        walls, cpus, counts, read = [], [], [], []
        for _ in range(REFRESHES):
            time.sleep(1.0)
            counts.append(_queries(fleet))
            counts.append(_queries(one))
            walls.append(fleet.refresh_seconds * 1000)
            cpus.append(fleet.refresh_cpu_seconds * 1000)
            read.append(fleet.hosts_read)
        scrapes = int((time.monotonic() - began) // 15) + 1  # of each host, at most, at one every 15 s
        print(
            f"\n64 hosts x 8 GPUs: first (full) refresh {full[0] * 1000:.0f} ms ({full[1] * 1000:.0f} ms CPU); "
            f"then median {statistics.median(walls):.0f} ms, p90 {_p90(walls):.0f} ms, "
            f"max {max(walls):.0f} ms wall; CPU median {statistics.median(cpus):.0f} ms, "
            f"max {max(cpus):.0f} ms; hosts read per refresh {read}"
        )
        assert max(counts) <= MAX_QUERIES_PER_REFRESH, counts
        # Scraped every 15 s: a host has new samples at most once a 15 s, not at every refresh.
        assert sum(read) <= scrapes * 64, f"hosts read per refresh {read}: not a 15 s scrape interval"
        # The monitor's own work per refresh (decoding the answers, building the snapshot) is its CPU time:
        # under 100 ms at the median and p90. The wall time adds the server evaluating the two queries, on
        # this same 2-core machine, which also serves the 64 targets: 60-108 ms medians seen, so it is held
        # to a looser bound that still catches a refresh gone slow (a query per host, a full read each time).
        assert statistics.median(cpus) < 100 and _p90(cpus) < 100, "the monitor's work under 100 ms"
        assert statistics.median(walls) < 200, "a refresh, queries and build, in well under the interval"


REFRESHES = 12
"""Refreshes measured, a second apart (20 before: 8 s more of a timing pass that is the suite's tail; the
median and p90 of 12 are the 6.5th and 11th values; a host's 15 s scrape lands in the window at most once)."""


def _p90(values: list[float]) -> float:
    """The value 90 % of them are at or under (the 18th of 20, the 11th of 12)."""
    return sorted(values)[math.ceil(0.9 * len(values)) - 1]


def _queries(fleet: PrometheusFleet) -> int:
    before = fleet.client.queries
    fleet.poll_once()
    return fleet.client.queries - before


def test_the_real_server_answers_a_gpu_instances_memory_total_at_every_refresh(tmp_path: Path):
    """A GPU's memory total is in the static timed group, a GPU instance's (``GPU_I_ID``, one of its own series) in a
    part of its own at every refresh: Prometheus's answer to a read that asks no slow group has the instances'
    totals and no GPU's (the ``GPU_I_ID!=""`` matcher), and a fleet shows the instance's total at every refresh
    as the server holds it, and the GPU's as read at the first refresh."""
    from .test_fleet_memory_total import _exposition

    logs: list[Path] = []
    with (
        served_expositions([_exposition(0, ("0", "1")).encode()]) as targets,
        prometheus(tmp_path, scrape_config(targets), targets, logs) as server,
    ):
        wait("the target scraped", DATA_S, lambda: targets_up(server), logs)
        wait("two instances' totals", DATA_S, lambda: server.values("count(DCGM_FI_DEV_FB_TOTAL)") == [4.0], logs)
        client = PrometheusFleet(server.url).client
        live = client.query(read_query(parts=((fleet_module.LIVE_NAMES, None),), hostname=False))
        totals = {(m["gpu"], m.get("GPU_I_ID")): v for m, v in live if m.get("__name__") == "DCGM_FI_DEV_FB_TOTAL"}
        assert totals == {("0", "1"): 40000.0, ("1", "1"): 40000.0}, "the instances' totals, not the GPUs'"
        used = {(m["gpu"], m.get("GPU_I_ID")) for m, _ in live if m.get("__name__") == "DCGM_FI_DEV_FB_USED"}
        assert used == {("0", None), ("1", None), ("0", "1"), ("1", "1")}, "every part's rows kept"
        fleet = PrometheusFleet(server.url, interval=1.0)
        for _ in range(3):
            for known in fleet._known.values():
                known.newest = None  # read as new: the second and third reads ask the groups due (not the static)
            gpus = fleet.poll_once().gpus
            assert [g.static.memory_total_bytes for g in gpus] == [80000 * MIB] * 2
            assert [g.static.mig_instances[0].memory_total_bytes for g in gpus] == [40000 * MIB] * 2
