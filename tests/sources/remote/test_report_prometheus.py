"""``nvtopy report --prometheus``: the same figures from a server's history, in a constant number of queries.

Against a fake client (exact answers), a tiny ``http.server`` answering like
Prometheus's ``/api/v1/query_range`` (the real client, deadlines), and a real
Prometheus scraping three ``nvtopy exporter --demo`` (skipped without the binary).
"""

from __future__ import annotations

import http.server
import json
import math
import re
import threading
import time
import urllib.parse
from typing import Any

import pytest

from nvtopy.commands.dispatch import main
from nvtopy.errors import UsageError
from nvtopy.sources.remote import prometheus as prometheus_api
from nvtopy.sources.remote.prometheus import PrometheusError
from nvtopy.sources.remote.prometheus_accounting import account, data_span, default_step, queries, step_for, where_text
from nvtopy.textsafe import unescape_text

from ...prometheus_fixtures import DATA_S, FLEET_HOSTS, exporter_fleet, requires_prometheus

STEP = 60.0
END = 1_795_003_600.0
START = END - 3600.0
GIB = 2**30


class Fleet:
    """A made-up fleet's history, answered per query as Prometheus would (a matrix per range query).

    ``hosts`` hosts of ``gpus`` GPUs each; on every GPU one process of ``user(h)`` holding 4 GiB,
    at ``util`` %, drawing ``watts`` (its energy counter grows accordingly). ``missing(host, t)``:
    no point at all for that host then (it stopped reporting). Scraped every ``scrape`` seconds
    (at whole multiples of it) since ``born`` (None: always): what the data-span probe counts.
    """

    def __init__(self, hosts: int = 1, gpus: int = 2, util: float = 50.0, watts: float = 300.0) -> None:
        self.hosts, self.gpus, self.util, self.watts = hosts, gpus, util, watts
        self.scrape = 15.0
        self.born: float | None = None
        self.missing = lambda host, t: False
        self.user = lambda host: f"user{host % 3}"
        self.labels: dict[str, str] = {}  # extra labels on every process series
        self.renamed: set[int] = set()  # hosts whose exporter is dcgm-exporter 4.9 (its names, units, hostname)
        self.extra: dict[str, list[tuple[dict[str, str], list[tuple[float, Any]]]]] = {}

    def gpu_labels(self, host: int, gpu: int) -> dict[str, str]:
        spelling = "hostname" if host in self.renamed else "Hostname"
        return {spelling: f"node{host}", "gpu": str(gpu), "UUID": f"GPU-{host}-{gpu}", "instance": f"n{host}:9400"}

    @staticmethod
    def renamed_factor(expr: str, kind: str) -> float | None:
        """What the query multiplies a 4.9 host's series by (Prometheus would); None: the query does not ask for it.

        The 4.9 names and units are the documented ones (dcgm-names.md), written here, not taken from nvtopy."""
        name = {
            "utilization": "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "energy": "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
            "power": "DCGM_FI_DEV_BOARD_POWER_WATTS",
        }[kind]
        for term in expr.split(" or "):
            if f"({name}{{" in term:
                scaled = re.search(r"\) \* ([0-9.e+]+)\)$", term)
                return float(scaled.group(1)) if scaled else 1.0
        return None

    def scrapes(self, after: float, until: float) -> int:
        """How many scrapes there were in ``(after, until]``."""
        below = math.floor(after / self.scrape)  # scrapes k * scrape with k above this, up to until's
        if self.born is not None:
            below = max(below, math.ceil(self.born / self.scrape) - 1)
        return max(0, math.floor(until / self.scrape) - below)

    def answer(self, expr: str, start: float, end: float, step: float) -> list[tuple[dict[str, str], list]]:
        times = [start + i * step for i in range(round((end - start) / step) + 1)]
        if self.born is not None:
            times = [t for t in times if t >= self.born]
        if expr.startswith("max(count_over_time("):  # the data-span probe: samples per window, busiest GPU
            window = float(expr.split("[", 1)[1].split("]", 1)[0].removesuffix("s"))
            assert window == step, expr
            present = [t for t in times if any(not self.missing(h, t) for h in range(self.hosts)) and self.hosts]
            points = [(t, float(self.scrapes(t - step, t))) for t in present if self.scrapes(t - step, t)]
            return [({}, points)] if points else []
        if "nvtopy_process_" in expr:
            kind = "processes" if expr.startswith("count by") else "memory"
        elif "SM_ACTIVE" in expr:
            return self.extra.get("sm_active", [])
        elif "GPU_UTIL" in expr:
            kind = "utilization"
        elif "ENERGY" in expr:
            kind = "energy"
        elif "POWER_USAGE" in expr:
            kind = "power"
        else:
            raise AssertionError(expr)
        out = list(self.extra.get(kind, []))
        # A 4.9 host's unit per legacy unit: utilisation a ratio, energy in J, power in W.
        per_legacy = {"utilization": 0.01, "energy": 0.001, "power": 1.0}.get(kind)
        for host in range(self.hosts):
            scale = 1.0
            if host in self.renamed and per_legacy is not None:
                factor = self.renamed_factor(expr, kind)
                if factor is None:
                    continue  # the query does not name the host's series: no answer for it
                scale = per_legacy * factor
            for gpu in range(self.gpus):
                labels = self.gpu_labels(host, gpu)
                if kind in ("processes", "memory"):  # count by / sum by: the GPU's labels, user and owner
                    labels = {**labels, "user": self.user(host), **self.labels}
                values = {
                    "processes": lambda t: 1.0,
                    "memory": lambda t: 4.0 * GIB,
                    "utilization": lambda t: self.util,
                    "energy": lambda t: 1e9 + (t - START) * self.watts * 1000,
                    "power": lambda t: self.watts,
                }[kind]
                points = [(t, values(t) * scale) for t in times if not self.missing(host, t)]
                out.append((labels, points))
        return out


class FakeClient:
    """The ``PrometheusClient`` interface, answering from a :class:`Fleet`."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.queries = 0
        self.warnings: list[str] = []
        self.asked: list[str] = []

    def query_range(self, expr: str, start: float, end: float, step: float):
        self.queries += 1
        self.asked.append(expr)
        return self.fleet.answer(expr, start, end, step)


def report(fleet: Fleet, by=("user",), **kwargs):
    client = FakeClient(fleet)
    return account(client, by=by, start=START, end=END, step=STEP, **kwargs), client


def test_figures_from_the_servers_history():
    result, client = report(Fleet(hosts=1, gpus=2, util=50.0, watts=300.0))
    (row,) = result.rows
    assert row.key == ("user0",)
    assert row.held_gpu_hours == pytest.approx(2.0)  # two GPUs for an hour
    assert row.busy_gpu_hours == pytest.approx(1.0)
    assert row.energy_kwh == pytest.approx(0.6)
    assert row.peak_memory_bytes == 4 * GIB
    assert row.gpus == 2
    assert client.queries == 6


def test_sm_activity_wins_over_utilisation_and_is_a_ratio():
    fleet = Fleet(hosts=1, gpus=1, util=100.0)
    times = [START + i * STEP for i in range(61)]
    fleet.extra["sm_active"] = [(fleet.gpu_labels(0, 0), [(t, 0.25) for t in times])]
    result, _ = report(fleet)
    assert result.rows[0].busy_gpu_hours == pytest.approx(0.25)


def test_a_fleet_of_4_8_and_4_9_hosts_reports_the_same_figures_per_host():
    """node1 runs dcgm-exporter 4.9 (hostname, a ratio, J, BOARD_POWER_WATTS): node0's figures, under its name."""
    fleet = Fleet(hosts=2, gpus=2, util=50.0, watts=300.0)
    fleet.renamed = {1}
    result, client = report(fleet, by=("host",))
    rows = {row.key[0]: row for row in result.rows}
    assert sorted(rows) == ["node0", "node1"], "a 4.9 host is named by its hostname label, not its instance"
    for host in ("node0", "node1"):
        assert rows[host].held_gpu_hours == pytest.approx(2.0), host
        assert rows[host].busy_gpu_hours == pytest.approx(1.0), host  # 50 %, not 0.5 %
        assert rows[host].energy_kwh == pytest.approx(0.6), host  # 300 W for 2 GPU-hours, not a thousandth of it
    assert client.queries == 6, "one query a figure for both namings"


def test_a_ratio_is_not_read_as_a_percentage():
    """The fake answers a 4.9 host only where the query scales its series: without the * 100 it reads 0.5 %."""
    fleet = Fleet(hosts=1, gpus=1, util=50.0)
    fleet.renamed = {0}
    asked = queries(STEP)
    assert Fleet.renamed_factor(asked["utilization"], "utilization") == 100.0
    assert Fleet.renamed_factor(asked["energy"], "energy") == 1000.0
    assert Fleet.renamed_factor(asked["power"], "power") == 1.0
    assert Fleet.renamed_factor('avg_over_time(DCGM_FI_DEV_GPU_UTIL{GPU_I_ID=""}[60s])', "utilization") is None
    result, _ = report(fleet)
    assert result.rows[0].busy_gpu_hours == pytest.approx(0.5)


def test_the_number_of_queries_does_not_grow_with_the_fleet():
    small = report(Fleet(hosts=1))[1]
    large_result, large = report(Fleet(hosts=64, gpus=8), by=("host",))
    assert small.queries == large.queries == 6
    assert len(large_result.rows) == 64
    assert large_result.total.held_gpu_hours == pytest.approx(64 * 8)


def test_by_host_and_gpu():
    result, _ = report(Fleet(hosts=2, gpus=2), by=("gpu",))
    assert [row.key for row in result.rows] == [("node0", 0), ("node0", 1), ("node1", 0), ("node1", 1)]
    assert all(row.held_gpu_hours == pytest.approx(1.0) for row in result.rows)


def test_a_host_that_stopped_reporting_is_a_gap_not_held_time():
    fleet = Fleet(hosts=2, gpus=1)
    fleet.missing = lambda host, t: host == 1 and START + 600 < t < START + 2400  # half an hour without data
    result, _ = report(fleet, by=("host",))
    held = {row.key[0]: row.held_gpu_hours for row in result.rows}
    assert held["node0"] == pytest.approx(1.0)
    assert held["node1"] == pytest.approx(0.5)
    assert result.gaps == 1
    assert result.gap_gpu_hours == pytest.approx(0.5)


def test_the_where_matchers_reach_every_query_quoted():
    where = where_text('Hostname=~"node[1-4]", job!="x\\"y"')
    assert where == 'Hostname=~"node[1-4]", job!="x\\"y"'
    _, client = report(Fleet(), where=where)
    assert len(client.asked) == 6
    for expr in client.asked:
        assert 'Hostname=~"node[1-4]"' in expr
    assert sum('GPU_I_ID=""' in expr for expr in client.asked) == 4  # whole GPUs, not MIG instances


@pytest.mark.parametrize(
    "where",
    ['Hostname="a"} or vector(1) or {x="', "Hostname", 'Hostname="unterminated', '__name__="up"', "a=b"],
)
def test_a_where_that_is_not_matchers_is_a_usage_error(where):
    with pytest.raises(UsageError, match="--where"):
        where_text(where)


def test_queries_are_the_documented_ones():
    asked = queries(60.0)
    assert asked["energy"] == (
        'last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{GPU_I_ID=""}[60s])'
        ' or (last_over_time(DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{GPU_I_ID=""}[60s]) * 1000)'
    )
    assert asked["utilization"] == (
        'avg_over_time(DCGM_FI_DEV_GPU_UTIL{GPU_I_ID=""}[60s])'
        ' or (avg_over_time(DCGM_FI_DEV_GPU_UTIL_RATIO{GPU_I_ID=""}[60s]) * 100)'
    )
    assert asked["power"] == (
        'avg_over_time(DCGM_FI_DEV_POWER_USAGE{GPU_I_ID=""}[60s])'
        ' or avg_over_time(DCGM_FI_DEV_BOARD_POWER_WATTS{GPU_I_ID=""}[60s])'
    )
    assert asked["sm_active"] == (
        'avg_over_time(DCGM_FI_PROF_SM_ACTIVE{GPU_I_ID=""}[60s])'
        ' or avg_over_time(DCGM_FI_PROF_SM_UTIL_RATIO{GPU_I_ID=""}[60s])'
    )
    by = "hostname, Hostname, instance, gpu, UUID, user, owner_kind, container, pod, namespace, slurm_job"
    first = "last_over_time(nvtopy_process_gpu_memory_bytes{}[60s])"
    assert asked["processes"].startswith(f"count by ({by}) ({first} or ")
    assert asked["memory"] == f"sum by ({by}) (last_over_time(nvtopy_process_gpu_memory_bytes{{}}[60s]))"
    assert default_step(86400) == 60.0
    assert default_step(1800) == 15.0


def test_hostile_labels_and_values_are_checked():
    fleet = Fleet(hosts=1, gpus=1)
    fleet.user = lambda host: "\\x1b]0;pwned\\x07" + "u" * 1000  # as nvtopy's exporter escapes it
    fleet.extra["utilization"] = [
        ({"Hostname": "bad", "gpu": "99999999999", "UUID": "x"}, [(START, 50.0)]),  # no GPU index
        ({"Hostname": "nan", "gpu": "0", "UUID": "n"}, [(START, math.nan), (END, math.inf), (END + 1, -5.0)]),
    ]
    result, _ = report(fleet)
    (row,) = result.rows
    assert row.key[0].startswith("\x1b]0;pwned\x07uuu")  # unescaped: the views escape it where they write
    assert len(row.key[0]) == 256  # cut
    assert result.gpus == 1  # the GPU with nothing readable is observed nowhere


def test_partial_answers_are_said():
    fleet = Fleet()
    client = FakeClient(fleet)
    client.warnings = ["remote read of store-2 failed"]
    result = account(client, by=("user",), start=START, end=END, step=STEP)
    assert "prometheus warned (processes): remote read of store-2 failed" in result.notes


def test_too_many_points_is_a_usage_error_before_any_query():
    client = FakeClient(Fleet())
    with pytest.raises(UsageError, match="more than 11000 points"):
        account(client, by=("user",), start=END - 86400 * 7, end=END, step=1.0)
    assert client.queries == 0


def test_only_dcgm_exporter_says_why_nothing_is_held():
    fleet = Fleet()
    original = fleet.answer
    fleet.answer = lambda expr, *a: [] if "nvtopy_process_" in expr else original(expr, *a)
    result, _ = report(fleet)
    assert result.rows == ()
    assert any("no nvtopy_process_* series" in note for note in result.notes)


# ----------------------------------------------------------------- the CLI, with a fake client


@pytest.fixture
def fake_server(monkeypatch):
    """``PrometheusClient`` replaced by a fake answering from a Fleet (returned, to be shaped by the test)."""
    fleet = Fleet(hosts=3, gpus=2)
    made: list[FakeClient] = []

    def client(url, *, timeout=5.0, ca_file=None):
        made.append(FakeClient(fleet))
        made[-1].timeout = timeout
        made[-1].ca_file = ca_file
        return made[-1]

    monkeypatch.setattr(prometheus_api, "PrometheusClient", client)
    fleet.made = made
    return fleet


def run_report(capsys, *argv):
    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_json_from_prometheus(fake_server, capsys):
    code, out, err = run_report(capsys, "--prometheus", "http://prom:9090", "--since", "1h", "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["source"] == {"prometheus": "http://prom:9090", "step_s": 15.0, "scrape_interval_s": 15.0, "queries": 7}
    assert {r["user"]: r["held_gpu_hours"] for r in data["rows"]} == pytest.approx(
        {"user0": 2.0, "user1": 2.0, "user2": 2.0}, abs=0.01
    )
    assert fake_server.made[0].timeout == 5.0 and fake_server.made[0].ca_file is None


def test_cli_a_compound_step_is_read_whole(fake_server, capsys):
    code, out, err = run_report(
        capsys, "--prometheus", "http://prom:9090", "--since", "1h", "--step", "1m30s", "--format", "json"
    )
    assert (code, err) == (0, "")
    assert json.loads(out)["source"]["step_s"] == 90.0  # not 60: the whole text counts


DCGM_BLANK = 9223372036854775792  # DCGM_INT64_BLANK: what dcgm-exporter serves for a field DCGM could not read


def test_blank_and_impossible_readings_from_the_server_are_skipped_and_said(fake_server, capsys):
    """One DCGM blank in one GPU's energy series was 2.56 billion kWh; a power of DCGM's FP64 blank (2**47 W)
    and one above any GPU's were dropped without a word. Each is skipped and counted, in every format."""
    answer = fake_server.answer

    def with_blanks(expr, start, end, step):
        out = answer(expr, start, end, step)
        if "ENERGY" in expr or "POWER_USAGE" in expr:
            _, points = out[0]  # node0's GPU 0
            middle = len(points) // 2
            if "ENERGY" in expr:  # a blank, and a leap of 1e9 J in a step (and back)
                changed = {middle: float(DCGM_BLANK), middle + 5: points[middle + 5][1] + 1e12}
            else:  # DCGM's FP64 blank, and a megawatt
                changed = {middle: 2.0**47, middle + 5: 1e6}
            for at, value in changed.items():
                points[at] = (points[at][0], value)
        return out

    fake_server.answer = with_blanks
    code, out, err = run_report(capsys, "--prometheus", "http://prom:9090", "--since", "1h", "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["total"]["energy_kwh"] == pytest.approx(6 * 0.3, rel=0.01)  # 6 GPUs at 300 W for an hour
    assert data["skipped_readings"] == {"energy_blank": 1, "energy_implausible": 1, "power": 2}
    code, out, _ = run_report(capsys, "--prometheus", "http://prom:9090", "--since", "1h")
    assert code == 0
    notes = out.splitlines()[-3:]
    assert notes[0].startswith("energy counter: 1 reading skipped, no value (DCGM's blank, 9223372036854775792")
    assert notes[1].startswith("energy counter: 1 increment skipped, more than 20 kW over the interval")
    assert notes[2] == "power: 2 readings skipped, negative or above 20 kW"


def test_cli_ca_file_reaches_the_client(fake_server, capsys):
    code, _, err = run_report(capsys, "--prometheus", "https://prom:9090", "--ca-file", "/etc/pki/fleet-ca.pem")
    assert (code, err) == (0, "")
    assert fake_server.made[0].ca_file == "/etc/pki/fleet-ca.pem"


def test_cli_table_from_prometheus(fake_server, capsys):
    argv = ("--prometheus", "http://prom:9090", "--by", "host", "--step", "1m", "--timeout", "2")
    code, out, _ = run_report(capsys, *argv)
    assert code == 0
    assert "Prometheus http://prom:9090, a point every 60 s" in out.splitlines()[0]
    assert [line.split()[0] for line in out.splitlines()[3:6]] == ["node0", "node1", "node2"]
    assert fake_server.made[0].timeout == 2.0


def test_cli_hostile_labels_are_escaped(fake_server, capsys):
    fake_server.user = lambda host: "=cmd|\\x1b[2J"
    _, out, _ = run_report(capsys, "--prometheus", "http://prom:9090", "--format", "csv")
    assert out.splitlines()[1].startswith("'=cmd|\\x1b[2J,")
    _, out, _ = run_report(capsys, "--prometheus", "http://prom:9090")
    assert "\x1b" not in out and "=cmd|\\e[2J" in out
    _, out, _ = run_report(capsys, "--prometheus", "http://prom:9090", "--format", "json")
    assert unescape_text(json.loads(out)["rows"][0]["user"]) == "=cmd|\x1b[2J"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--where", 'Hostname="a"}'], 2, "nvtopy: error: --where "),
        (["--since", "24"], 2, "nvtopy: error: --since: '24' is not a duration"),
        (["--step", "0s"], 2, "nvtopy: error: --step: give more than 0"),
        (["--step", "1s", "--since", "7d"], 2, "nvtopy: error: --step 1s gives more than 11000 points"),
    ],
)
def test_cli_usage_errors_ask_nothing(fake_server, capsys, argv, code, message):
    got, out, err = run_report(capsys, "--prometheus", "http://prom:9090", *argv)
    assert (got, out) == (code, "")
    assert err.startswith(message) and err.count("\n") == 1, err
    assert all(client.queries == 0 for client in fake_server.made)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ("prometheus prom:9090: query error (bad_data): parse error", None),
        (
            "prometheus prom:9090: answer larger than 64 MiB",
            "prometheus prom:9090: answer larger than 64 MiB: use a longer --step, a shorter --since or a narrower "
            "--where",
        ),
    ],
)
def test_cli_a_server_error_is_one_line(monkeypatch, capsys, error, said):
    class Failing:
        queries = 0
        warnings: list[str] = []

        def __init__(self, url, *, timeout, ca_file=None):
            pass

        def query_range(self, *args):
            raise PrometheusError(error)

    monkeypatch.setattr(prometheus_api, "PrometheusClient", Failing)
    code, out, err = run_report(capsys, "--prometheus", "http://prom:9090")
    assert (code, out) == (1, "")
    assert err == f"nvtopy: error: {said or error}\n"


# ----------------------------------------------------------------- what the server holds: span, scrape interval


def span_of(fleet: Fleet, start: float = START, end: float = END):
    client = FakeClient(fleet)
    return data_span(client, start=start, end=end), client


def test_the_span_of_a_server_older_than_the_period_is_the_period_in_one_query():
    fleet = Fleet()
    span, client = span_of(fleet)
    assert (span.earliest, span.interval, client.queries) == (START, 15.0, 1)
    assert step_for(span, 3600) == 15.0  # the scrape interval at least
    assert step_for(span_of(fleet, END - 86400)[0], 86400) == 60.0  # a minute a point for a day
    fleet.scrape = 1.0
    assert step_for(span_of(fleet)[0], 3600) == 3.0  # 1,440 points of an hour: no 15 s floor when scraped each second


def test_the_span_of_a_young_server_is_its_data_found_in_a_second_closer_look():
    fleet = Fleet()
    fleet.scrape, fleet.born = 1.0, END - 10.5  # ten seconds of data, a scrape a second
    span, client = span_of(fleet, END - 86400, END)
    assert client.queries == 2
    assert END - 12 <= span.earliest <= END - 10.5  # never after the first sample: a query from there misses none
    assert span.interval == pytest.approx(1.0) and span.samples in (10, 11)
    assert step_for(span, 86400) == 1.0  # not a day's 60 s: ten points of ten seconds


def test_a_server_without_gpu_series_has_no_span():
    fleet = Fleet(hosts=0)
    assert span_of(fleet)[0] is None


def test_the_probe_counts_any_gpu_series_and_trusts_no_answer():
    asked = queries(60.0)  # the probe reads what the report reads, MIG instances left out
    _, client = span_of(Fleet(), END - 86400)
    (probe,) = client.asked
    assert probe.startswith('max(count_over_time(DCGM_FI_DEV_POWER_USAGE{GPU_I_ID=""}[60s]) or count_over_time(')
    assert "DCGM_FI_DEV_GPU_UTIL" in probe and "ENERGY" in asked["energy"] and "ENERGY" in probe

    class Hostile(FakeClient):
        def query_range(self, expr, start, end, step):
            self.queries += 1
            return [({}, [(START, math.nan), (START + 60, -3.0), ("x", 4.0), (END + 86400, 4.0), (END, True)])] * 3

    assert data_span(Hostile(Fleet()), start=START, end=END) is None


def test_a_young_server_is_reported_with_the_data_it_holds(fake_server, capsys):
    """Issue 23 item 5: ten seconds of data at a scrape a second was "no GPU series" (a day's 60 s step,
    its end aligned before the data) or rows of zeros (a 15 s step: one point per GPU)."""
    fake_server.scrape, fake_server.born = 1.0, time.time() - 10.5
    for since in (None, "1m"):
        argv = ["--prometheus", "http://prom:9090", "--format", "json", *(["--since", since] if since else [])]
        code, out, err = run_report(capsys, *argv)
        assert (code, err) == (0, ""), since
        data = json.loads(out)
        assert (data["source"]["step_s"], data["source"]["scrape_interval_s"]) == (1.0, 1.0)
        held = data["total"]["held_gpu_hours"] * 3600 / 6  # seconds each of the 6 GPUs was held
        assert 8 <= held <= 11, held
        (note,) = [n for n in data["notes"] if "of data" in n]
        assert note.startswith("http://prom:9090 holds 1") and f"of data of the last {since or '24h'}: from " in note
        assert note.endswith("a sample every 1 s")
    code, out, _ = run_report(capsys, "--prometheus", "http://prom:9090")
    assert code == 0 and out.splitlines()[-1].endswith("a sample every 1 s")  # said under the table


def test_a_server_with_one_scrape_is_too_little_data(fake_server, capsys):
    # One scrape, on the scrape grid at or before now. With a 15 s interval the next scrape could fall inside the
    # test (born was up to 15.5 s old: a flake); an hour's interval leaves it an hour away whatever the clock says.
    fake_server.scrape = 3600.0
    now = time.time()
    fake_server.born = now - now % 3600
    code, out, err = run_report(capsys, "--prometheus", "http://prom:9090")
    assert (code, out) == (1, "")
    assert err.startswith("nvtopy: error: nothing to report: too little data: http://prom:9090 holds one sample of ")
    assert err.endswith("a report needs two, a scrape interval apart\n") and err.count("\n") == 1


def test_a_step_longer_than_the_data_is_too_little_data(fake_server, capsys):
    fake_server.scrape, fake_server.born = 1.0, time.time() - 10.5
    code, out, err = run_report(capsys, "--prometheus", "http://prom:9090", "--since", "1h", "--step", "15s")
    assert (code, out) == (1, "")
    assert err.startswith("nvtopy: error: nothing to report: too little data for --step 15s: http://prom:9090 holds 1")
    assert err.endswith("of data in the last 1h (a sample every 1 s); give a shorter --step (at least 1s)\n")


def test_cli_an_empty_server_is_nothing_to_report(fake_server, capsys):
    fake_server.hosts = 0
    code, out, err = run_report(capsys, "--prometheus", "http://prom:9090", "--where", 'job="gpu"')
    assert (code, out) == (1, "")
    assert err == (
        "nvtopy: error: nothing to report: http://prom:9090 has no GPU series (DCGM_FI_DEV_*, nvtopy_process_*) "
        'matching job="gpu" in the last 24h\n'
    )


# ----------------------------------------------------------------- a tiny server answering like Prometheus


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(length).decode()).items()}
        server.asked.append((self.path, form))
        if server.stall:
            time.sleep(server.stall)
        result = server.fleet.answer(form["query"], float(form["start"]), float(form["end"]), float(form["step"]))
        body = json.dumps(
            {
                "status": "success",
                "data": {
                    "resultType": "matrix",
                    "result": [{"metric": m, "values": [[t, str(v)] for t, v in points]} for m, points in result],
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A stalled answer written after the client gave up (BrokenPipe): no traceback on a later test's stderr."""


@pytest.fixture
def tiny_prometheus():
    server = _QuietServer(("127.0.0.1", 0), _Handler)
    server.fleet = Fleet(hosts=2, gpus=2)
    server.asked = []
    server.stall = 0.0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.stall = 0.0
    server.shutdown()
    server.server_close()


def test_through_http_like_prometheus(tiny_prometheus, capsys):
    url = f"http://127.0.0.1:{tiny_prometheus.server_address[1]}"
    code, out, err = run_report(capsys, "--prometheus", url, "--since", "2h", "--by", "user,host", "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert [(r["user"], r["host"]) for r in data["rows"]] == [("user0", "node0"), ("user1", "node1")]
    assert data["total"]["held_gpu_hours"] == pytest.approx(8.0, abs=0.1)  # 4 GPUs for 2 h
    assert data["source"]["queries"] == 7  # the data's span, then the six
    paths = [path for path, _ in tiny_prometheus.asked]
    assert paths == ["/api/v1/query_range"] * 7
    form = tiny_prometheus.asked[1][1]
    assert float(form["end"]) - float(form["start"]) == 7200.0
    assert float(form["step"]) == 15.0


def test_credentials_in_the_url_are_never_shown(tiny_prometheus, capsys):
    url = f"http://alice:s3cret@127.0.0.1:{tiny_prometheus.server_address[1]}"
    for fmt in ("table", "json", "csv"):
        code, out, err = run_report(capsys, "--prometheus", url, "--format", fmt)
        assert code == 0
        assert "s3cret" not in out + err and "alice:" not in out + err
    assert json.loads(run_report(capsys, "--prometheus", url, "--format", "json")[1])["source"]["prometheus"] == (
        f"http://127.0.0.1:{tiny_prometheus.server_address[1]}"
    )


def test_a_server_that_does_not_answer_costs_the_timeout_and_no_more(tiny_prometheus, capsys):
    tiny_prometheus.stall = 5.0
    url = f"http://127.0.0.1:{tiny_prometheus.server_address[1]}"
    started = time.monotonic()
    code, out, err = run_report(capsys, "--prometheus", url, "--timeout", "0.5")
    elapsed = time.monotonic() - started
    assert (code, out) == (1, "")
    assert err == f"nvtopy: error: prometheus 127.0.0.1:{tiny_prometheus.server_address[1]}: no answer within 0.5 s\n"
    assert elapsed < 2.5  # the deadline (--timeout), not the server's 5 s


def test_an_unreachable_server_is_one_line(capsys):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, err = run_report(capsys, "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert (code, out) == (1, "")
    assert err.startswith(f"nvtopy: error: prometheus 127.0.0.1:{port}: unreachable: ") and err.count("\n") == 1


# ----------------------------------------------------------------- a real Prometheus


def _served(text: str) -> tuple[dict[str, float], set[tuple[str, str]]]:
    """What one exporter serves: energy counter per GPU (mJ), and its (host, user) pairs of processes."""
    from prometheus_client.parser import text_string_to_metric_families

    energy: dict[str, float] = {}
    users: set[tuple[str, str]] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                energy[sample.labels["UUID"]] = sample.value
            elif sample.name == "nvtopy_process_gpu_memory_bytes":
                users.add((sample.labels["Hostname"], unescape_text(sample.labels["user"]) or "?"))
    return energy, users


@requires_prometheus
@pytest.mark.slow
@pytest.mark.real_server
def test_report_against_a_real_prometheus(tmp_path, capsys):
    """Three exporters (every process slot always busy), a real Prometheus scraping them every second.

    The report over a window inside the time the exporters were watched: per host, the GPUs it
    served, every user it served, every GPU held the whole window, and about the energy its
    counters grew by in that window.
    """
    with exporter_fleet(tmp_path, FLEET_HOSTS, "--demo-steady") as fleet:
        first = {e.hostname: _served(e.metrics()) for e in fleet.exporters}
        time.sleep(12)
        code, out, err = run_report(
            capsys, "--prometheus", fleet.url, "--since", "10s", "--step", "1s", "--by", "host", "--format", "json"
        )
        last = {e.hostname: _served(e.metrics()) for e in fleet.exporters}
        code_users, out_users, _ = run_report(
            capsys, "--prometheus", fleet.url, "--since", "1m", "--step", "1s", "--by", "host,user", "--format", "json"
        )
        code_where, out_where, _ = run_report(
            capsys,
            "--prometheus",
            fleet.url,
            "--since",
            "1m",
            "--step",
            "1s",
            "--by",
            "host",
            "--where",
            'Hostname=~"node-[ab]"',
            "--format",
            "json",
        )
    assert (code, err, code_users, code_where) == (0, "", 0, 0), (err, out_users, out_where)
    data = json.loads(out)
    assert data["source"]["queries"] - 6 in (1, 2)  # the data's span (a closer look where it is young), the six
    rows = {r["host"]: r for r in data["rows"]}
    assert sorted(rows) == ["node-a", "node-b", "node-c"]
    gpus = {hostname: count for hostname, _, count in FLEET_HOSTS}
    span = 10 / 3600
    for host, row in rows.items():
        assert row["gpus"] == gpus[host]
        assert row["held_gpu_hours"] == pytest.approx(gpus[host] * span, rel=0.25)  # steady: always held
        grown = sum(last[host][0][u] - first[host][0][u] for u in first[host][0]) / 3.6e9  # mJ -> kWh, in ~12 s
        assert 0 < row["energy_kwh"] < grown * 1.5
        assert row["energy_kwh"] > grown * 10 / 12 * 0.4
    reported = {(r["host"], r["user"]) for r in json.loads(out_users)["rows"]}
    served = set().union(*(first[h][1] for h in first))
    assert served <= reported
    assert sorted(r["host"] for r in json.loads(out_where)["rows"]) == ["node-a", "node-b"]


@requires_prometheus
@pytest.mark.slow
@pytest.mark.real_server
def test_report_on_a_young_real_prometheus(tmp_path, capsys):
    """Issue 23 item 5 against a real server: seconds after its first scrape (one a second), a day's report
    covers the data the server holds, a point a scrape, and says how young that data is (it was "no GPU
    series": a 60 s step whose end, aligned to a minute, fell before the first sample)."""
    started = time.monotonic()
    with exporter_fleet(tmp_path, (("node-y", 7, 2),), "--demo-steady") as fleet:
        deadline = time.monotonic() + DATA_S
        while True:  # ready is every GPU in Prometheus: one scrape of it may be all there is yet
            code, out, err = run_report(capsys, "--prometheus", fleet.url, "--format", "json")
            if code == 0 or time.monotonic() > deadline:
                break
            assert "too little data" in err, err
            time.sleep(0.2)
        age = time.monotonic() - started
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["source"]["step_s"] == 1.0
    assert data["source"]["scrape_interval_s"] == pytest.approx(1.0, abs=0.25)
    held = data["total"]["held_gpu_hours"] * 3600 / 2  # seconds each of its 2 GPUs was held (steady: always)
    assert 1 <= held <= age + 1, (held, age)
    (note,) = [n for n in data["notes"] if "of data" in n]
    assert note.startswith(f"{fleet.url} holds ") and "of data of the last 24h: from " in note, note
