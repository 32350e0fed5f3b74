"""``nvtopy --prometheus URL`` (``nvtopy.sources.remote.fleet``) against a fake Prometheus in a thread.

The fake (:class:`~tests.prometheus_fixtures.FakePrometheus`) stores what simulated
exporters serve and evaluates the fleet's own queries over it, so these tests run
anywhere; ``test_fleet_real_prometheus.py`` does the same against a real server.
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time

import pytest

from nvtopy.errors import UsageError
from nvtopy.formats.prometheus.parse import MAX_LABEL, parse_exposition
from nvtopy.render.text import render_snapshot
from nvtopy.sources.remote import fleet as fleet_module
from nvtopy.sources.remote.fleet import GONE_AFTER, PrometheusFleet, newest_query, read_query
from nvtopy.sources.remote.hostscrape import HostGpus
from nvtopy.sources.remote.prometheus import parse_matchers
from nvtopy.tui.app import NvtopyApp

from ...builders import run_nvtopy as run_cli
from ...prometheus_fixtures import FakePrometheus, Series, exposition_series, simulated_exposition
from ...tui_helpers import started
from ...waiting import until

NOW = 1_795_000_000.0

_A100 = 'modelName="NVIDIA A100-SXM4-80GB",Hostname="dgx-3",DCGM_FI_DRIVER_VERSION="535.154.05"'
_GPU0 = f'gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",device="nvidia0",{_A100}'
_GPU1 = f'gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:0F:00.0",device="nvidia1",{_A100}'
_POD = 'pod="trainer-0",namespace="ml",container="main"'
# As dcgm-exporter writes it under Kubernetes (pod labels) and with Slurm job mapping (hpc_job): no process series.
DCGM = f"""\
DCGM_FI_DEV_GPU_UTIL{{{_GPU0},{_POD}}} 87
DCGM_FI_DEV_FB_USED{{{_GPU0},{_POD}}} 40960
DCGM_FI_DEV_GPU_UTIL{{{_GPU1},hpc_job="4711"}} 3
DCGM_FI_DEV_FB_USED{{{_GPU1},hpc_job="4711"}} 1024
DCGM_FI_DEV_XID_ERRORS{{{_GPU1},hpc_job="4711"}} 48
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="1",UUID="GPU-bbbb",Hostname="dgx-3"}} 2
"""


@pytest.fixture
def fake():
    with FakePrometheus() as server:
        server.now = NOW
        yield server


def fleet_of(fake: FakePrometheus, **kwargs) -> PrometheusFleet:
    kwargs.setdefault("timeout", 5.0)
    return PrometheusFleet(fake.url, **kwargs)


def add_hosts(fake: FakePrometheus, count: int, gpus: int = 2, *, age: float = 0.5) -> dict[str, str]:
    """``count`` simulated exporters (node0, node1, ...) scraped ``age`` seconds ago; their texts by instance."""
    texts = {}
    for n in range(count):
        instance = f"10.0.{n // 250}.{n % 250}:9400"
        texts[instance] = simulated_exposition(f"node{n}", n, gpus)
        fake.add_exposition(texts[instance], instance, timestamp=NOW - age)
    return texts


def comparable(gpu):
    """A GpuState without what depends on when or where it was read (time, position, the long history)."""
    static = dataclasses.replace(gpu.static, index=0)
    sample = dataclasses.replace(gpu.sample, timestamp=0.0)
    processes = tuple(dataclasses.replace(p, gpu_index=0, running_seconds=None) for p in gpu.processes)
    return (static, sample, processes, gpu.health, gpu.note)


# ----------------------------------------------------------------- what the fleet shows


def test_the_fleet_shows_what_each_exporter_serves(fake):
    """The same GPUs, values, health and processes as --remote reads from each exporter's own text."""
    texts = {
        "10.0.0.1:9400": simulated_exposition("node-a", 1, 2),
        "10.0.0.2:9400": simulated_exposition("node-b", 2, 3, faults=["mig=3@1"]),
        "10.0.0.3:9400": DCGM,
    }
    for instance, text in texts.items():
        fake.add_exposition(text, instance, timestamp=NOW - 0.5)
    snapshot = fleet_of(fake).poll_once()
    expected = []
    reference = HostGpus()
    for instance, text in sorted(texts.items(), key=lambda item: parse_exposition(item[1], "x").hostname):
        scrape = parse_exposition(text, f"http://{instance}/metrics")
        expected.extend(reference.gpus(scrape, len(expected), NOW))
    assert [(g.static.host, g.static.host_index) for g in snapshot.gpus] == [
        ("dgx-3", 0),
        ("dgx-3", 1),
        ("node-a", 0),
        ("node-a", 1),
        ("node-b", 0),
        ("node-b", 1),
        ("node-b", 2),
    ]
    assert [g.index for g in snapshot.gpus] == list(range(7))
    for got, want in zip(snapshot.gpus, expected, strict=True):
        assert comparable(got)[0] == comparable(want)[0], "identity and static fields"
        assert comparable(got)[1] == comparable(want)[1], f"values of {got.static.host}/{got.static.host_index}"
        assert comparable(got)[2] == comparable(want)[2], "process rows"
        assert got.health.verdict == want.health.verdict and got.health.xid_counts == want.health.xid_counts
        assert got.health.last_xid == want.health.last_xid
    assert snapshot.gpus[5].static.mig_instances, "MIG instances read back"
    assert snapshot.gpus[1].health.last_xid == 48 and snapshot.gpus[1].sample.ecc_uncorrected_volatile == 2
    assert all(p.host == p_gpu.static.host for p_gpu in snapshot.gpus for p in p_gpu.processes)
    assert snapshot.host.backend == "prometheus" and snapshot.host.hostname == "3 hosts"


def test_a_gpu_held_by_a_pod_or_a_slurm_job_says_so_beside_its_processes(fake):
    fake.add_exposition(DCGM, "10.0.0.3:9400", timestamp=NOW - 0.5)
    gpu0, gpu1 = fleet_of(fake).poll_once().gpus
    assert gpu0.processes_hint == "held by pod ml/trainer-0 (container main)"
    assert gpu1.processes_hint == "held by Slurm job 4711"


def test_process_owners_come_from_their_labels(fake):
    add_hosts(fake, 1, gpus=4)
    owners = [p.owner for p in fleet_of(fake).poll_once().processes if p.owner is not None]
    assert owners and {o.kind.value for o in owners} >= {"kubernetes"}, "the TUI can group by owner"
    assert all(o.pod for o in owners if o.kind.value == "kubernetes")


def test_exporters_reporting_the_same_hostname_are_told_apart_by_instance(fake):
    text = simulated_exposition("demo-node", 0, 1)
    fake.add_exposition(text, "10.0.0.1:9400", timestamp=NOW - 0.5)
    fake.add_exposition(simulated_exposition("demo-node", 1, 1), "10.0.0.2:9400", timestamp=NOW - 0.5)
    snapshot = fleet_of(fake).poll_once()
    assert [g.static.host for g in snapshot.gpus] == ["10.0.0.1:9400", "10.0.0.2:9400"]
    assert {p.host for p in snapshot.processes} == {"10.0.0.1:9400", "10.0.0.2:9400"}


def test_gpus_are_sorted_by_host_then_index_naturally(fake):
    add_hosts(fake, 12, gpus=2)
    hosts = [g.static.host for g in fleet_of(fake).poll_once().gpus]
    assert hosts[:4] == ["node0", "node0", "node1", "node1"] and hosts[-2:] == ["node11", "node11"]


# ----------------------------------------------------------------- queries


@pytest.mark.slow
def test_the_queries_per_refresh_do_not_grow_with_hosts(fake):
    """1 host and 64 hosts x 8 GPUs: two queries at a refresh with new samples, one without."""
    counts = {}
    for hosts in (1, 64):
        fake.set_series([])
        add_hosts(fake, hosts, gpus=8)
        # The fake answers the first full read of 64 hosts in about 2 s of Python on an idle 2-core machine; on a
        # loaded one (a whole suite, another run beside it) past fleet_of's 5 s, and the refresh that timed out
        # was read again at the next one ([2, 2, 1, 2], twice in 2 runs): the test counts queries, not seconds.
        fleet = fleet_of(fake, timeout=60.0)
        made = []
        for _ in range(3):  # the first reads everything; the next two find nothing new
            before = fleet.client.queries
            snapshot = fleet.poll_once()
            made.append(fleet.client.queries - before)
        fake.set_series([Series(s.labels, s.value, s.timestamp + 1.0) for s in fake.series])  # a scrape later
        before = fleet.client.queries
        fleet.poll_once()
        made.append(fleet.client.queries - before)
        assert len(snapshot.gpus) == 8 * hosts
        counts[hosts] = made
        print(f"\n{hosts} hosts: queries per refresh {made}; last refresh {fleet.refresh_seconds * 1000:.0f} ms")
    assert counts[1] == counts[64] == [2, 1, 1, 2]


def test_a_refresh_reads_only_the_hosts_with_new_samples(fake):
    texts = add_hosts(fake, 3, gpus=1)
    fleet = fleet_of(fake)
    fleet.poll_once()
    assert fleet.hosts_read == 3
    moved = "10.0.0.1:9400"
    fake.set_series([s for s in fake.series if s.labels["instance"] != moved])
    fake.add_exposition(texts[moved], moved, timestamp=NOW)
    before = len(fake.queries)
    snapshot = fleet.poll_once()
    assert fleet.hosts_read == 1 and len(snapshot.gpus) == 3
    read = fake.queries[before + 1]
    assert 'instance=~"10\\\\.0\\\\.0\\\\.1:9400"' in read, "only that host is asked for, its address escaped"


def test_where_goes_into_every_selector_escaped(fake):
    add_hosts(fake, 3, gpus=1)
    fleet = fleet_of(fake, where='Hostname=~"node[02]"')
    snapshot = fleet.poll_once()
    assert [g.static.host for g in snapshot.gpus] == ["node0", "node2"]
    for query in fake.queries:
        assert query.count('Hostname=~"node[02]"') == query.count("{__name__") > 0


def test_a_where_value_cannot_break_out_of_its_string(fake):
    add_hosts(fake, 2, gpus=1)
    hostile = 'node0"} or {__name__=~".+'
    fleet = fleet_of(fake, where=f"Hostname={json.dumps(hostile)}")
    snapshot = fleet.poll_once()
    assert snapshot.gpus == (), "the whole text is one Hostname value, matching no host"
    assert fleet._failure is None, "and the query is well formed"
    assert '"node0\\"} or {__name__=~\\".+"' in fake.queries[0]


@pytest.mark.parametrize("bad", ["Hostname", 'Hostname=~"node\\d"', '__name__="up"', "Hostname='x"])
def test_a_bad_where_is_a_usage_error_at_once(fake, bad):
    with pytest.raises(UsageError):
        fleet_of(fake, where=bad)
    assert fake.queries == [], "nothing is asked"


def test_the_queries_are_well_formed_promql():
    """What the fake evaluates is the text the fleet sends: its quoting round-trips."""
    where = parse_matchers('Hostname=~"a\\"b", pod!=""')
    for query in (newest_query(where), read_query(where, instances=['x"y:1', "a.b"])):
        assert query.count("(") == query.count(")") and query.count("{") == query.count("}")
        assert 'Hostname=~"a\\"b"' in query


# ----------------------------------------------------------------- stale, gone, failures


def test_a_host_whose_newest_sample_is_old_is_stale_with_its_age(fake):
    fake.add_exposition(simulated_exposition("fresh", 1, 1), "10.0.0.1:9400", timestamp=NOW - 1)
    fake.add_exposition(simulated_exposition("old", 2, 2), "10.0.0.2:9400", timestamp=NOW - 1000)
    snapshot = fleet_of(fake).poll_once()
    fresh, *old = snapshot.gpus
    assert fresh.note is None and fresh.static.host == "fresh"
    assert [g.static.host for g in old] == ["old", "old"] and all(g.note for g in old)
    assert "stale: newest sample 17 min old" in old[0].note
    assert old[0].static.uuid and old[0].processes == (), "its identity, not its old processes"


def test_stale_means_three_of_the_hosts_own_scrape_intervals(fake):
    text = simulated_exposition("node", 1, 1)
    fleet = fleet_of(fake)
    for step in range(3):  # scraped every 5 s: learned from how its newest sample moves
        fake.set_series(exposition_series(text, "10.0.0.1:9400", NOW + 5 * step))
        fake.now = NOW + 5 * step + 1
        assert fleet.poll_once().gpus[0].note is None
    fake.now = NOW + 10 + 14  # 14 s after its last sample: still within 15 s
    assert fleet.poll_once().gpus[0].note is None
    fake.now = NOW + 10 + 16
    note = fleet.poll_once().gpus[0].note
    assert note and note.startswith("stale: newest sample 16 s old (scraped every 5 s)")


def test_a_host_that_vanishes_is_no_longer_reported_then_forgotten(fake, monkeypatch):
    add_hosts(fake, 2, gpus=1)
    fleet = fleet_of(fake)
    fleet.poll_once()
    fake.set_series([s for s in fake.series if s.labels["instance"] != "10.0.0.1:9400"])
    gone = fleet.poll_once().gpus[1]
    assert gone.static.host == "node1" and gone.note.startswith("no longer reported") and gone.lost
    later = time.time() + GONE_AFTER + 1
    monkeypatch.setattr("nvtopy.sources.remote.fleet.time.time", lambda: later)
    assert [g.static.host for g in fleet.poll_once().gpus] == ["node0"]


def test_a_query_error_is_one_line_and_the_next_refresh_retries(fake):
    add_hosts(fake, 1, gpus=1)

    def refuse(handler, query):
        body = json.dumps(
            {"status": "error", "errorType": "execution", "error": "query\nprocessing would load too many samples"}
        )
        handler.send_response(422)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body.encode())
        return True

    fake.reply = refuse
    fleet = fleet_of(fake)
    (line,) = fleet.poll_once().gpus
    assert "query error (execution): query processing would load too many samples" in line.note
    assert "asked again every" in line.note and "\n" not in line.note
    assert "✗ query error" in fleet.status_line()
    fake.reply = None
    assert len(fleet.poll_once().gpus) == 1 and "1 hosts" in fleet.status_line()


def test_a_server_that_hangs_never_holds_a_refresh_past_its_deadline(fake):
    add_hosts(fake, 1, gpus=1)
    release = threading.Event()
    fake.reply = lambda handler, query: release.wait(30) or True
    fleet = fleet_of(fake, timeout=0.5)
    started_at = time.monotonic()
    (line,) = fleet.poll_once().gpus
    assert time.monotonic() - started_at < 1.5
    assert "no answer within 0.5 s" in line.note
    release.set()


def test_stop_does_not_wait_for_a_query_in_progress(fake):
    release = threading.Event()
    asked = threading.Event()
    fake.reply = lambda handler, query: asked.set() or release.wait(30) or True
    fleet = fleet_of(fake, timeout=20, interval=60)
    fleet.start()
    # The first query under way (the server holds it): a stop before it would have nothing to cut off.
    until(asked.is_set, 10.0, "the first query at the server")
    started_at = time.monotonic()
    fleet.stop()
    assert time.monotonic() - started_at < 1.5 and not fleet.running
    release.set()


def test_an_unreachable_server_is_one_line():
    fleet = PrometheusFleet("http://127.0.0.1:9", timeout=2)
    (line,) = fleet.poll_once().gpus
    assert line.lost and "prometheus 127.0.0.1:9: unreachable" in line.note
    assert "✗ unreachable" in fleet.status_line()


def test_a_partial_answer_keeps_the_gpus_and_says_so(fake):
    add_hosts(fake, 1, gpus=2)
    fake.warnings = ["store gateway eu-1 timed out: results may be incomplete"]
    fleet = fleet_of(fake)
    snapshot = fleet.poll_once()
    assert [g.static.host for g in snapshot.gpus[:2]] == ["node0", "node0"]
    notes = [g.note for g in snapshot.gpus[2:]]
    assert notes and notes[0] == "partial answer: store gateway eu-1 timed out: results may be incomplete"
    assert "⚠ partial" in fleet.status_line()


# ----------------------------------------------------------------- hostile servers


def test_hostile_labels_are_cut_and_never_reach_the_terminal(fake):
    text = simulated_exposition("node", 1, 1)
    series = exposition_series(text, "10.0.0.1:9400", NOW - 0.5)
    hostile = "\x1b]0;pwned\x07\x1b[2J" + "h" * 100_000
    for s in series:
        if "Hostname" in s.labels:
            s.labels["Hostname"] = hostile
        if "command" in s.labels:
            s.labels["command"] = "\x1b[31mrm -rf /\x1b[0m" + "c" * 100_000
    fake.set_series(series)
    snapshot = fleet_of(fake).poll_once()
    gpu = snapshot.gpus[0]
    assert len(gpu.static.host) <= MAX_LABEL
    assert all(len(p.command) <= 4096 for p in snapshot.processes)
    out = io.StringIO()
    render_snapshot(snapshot, out, color=False)
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()


def test_gpu_and_pid_labels_no_gpu_has_are_left_out(fake):
    text = simulated_exposition("node", 1, 1)
    series = exposition_series(text, "10.0.0.1:9400", NOW - 0.5)
    extra = [Series({**s.labels, "gpu": "9" * 400}, s.value, s.timestamp) for s in series if "gpu" in s.labels]
    extra += [Series({**s.labels, "pid": "-1"}, s.value, s.timestamp) for s in series if "pid" in s.labels]
    fake.set_series(series + extra)
    snapshot = fleet_of(fake).poll_once()
    assert len([g for g in snapshot.gpus if g.note is None]) == 1
    assert all(p.pid > 0 for p in snapshot.processes)


# ----------------------------------------------------------------- read-only, the monitor, the CLI


def test_the_fleet_refuses_to_signal_saying_why(fake):
    fleet = fleet_of(fake)
    assert not fleet.can_signal
    outcome = fleet.signal(1234, None, 15).result(timeout=1)
    assert not outcome.ok and "other hosts cannot be signalled" in outcome.message


async def test_the_fleet_in_the_monitor(fake):
    add_hosts(fake, 3, gpus=2)
    app = NvtopyApp(fleet_of(fake, interval=60.0))
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot, app)
        assert len(app.snapshot.gpus) == 6 and app.readonly
        text = app.export_screenshot().replace("\xa0", " ")
        for fragment in ("node0/0", "node2/1", "PROMETHEUS", "read-only"):
            assert fragment in text
        assert app.query_one("#processes").rows
        await pilot.press("K")
        await pilot.pause()
        assert any("read-only" in str(n.message) for n in app._notifications)
        await pilot.press("q")


def test_once_json_lists_every_gpu_with_its_host(fake):
    add_hosts(fake, 2, gpus=2)
    result = run_cli("--prometheus", fake.url, "--once", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(g["host"], g["host_index"]) for g in data["gpus"]] == [
        ("node0", 0),
        ("node0", 1),
        ("node1", 0),
        ("node1", 1),
    ]
    processes = [p for g in data["gpus"] for p in g["processes"]]
    assert processes and {p["host"] for p in processes} == {"node0", "node1"}
    assert data["backend"] == "prometheus" and data["hostname"] == "2 hosts"


def test_once_text_shows_the_hosts(fake):
    add_hosts(fake, 2, gpus=1)
    result = run_cli("--prometheus", fake.url, "--once", "--no-color")
    assert result.returncode == 0, result.stderr
    assert "node0/0" in result.stdout and "node1/0" in result.stdout and "\x1b" not in result.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--prometheus", "", "--once"], "--prometheus: empty URL"),
        (["--prometheus", "ftp://prom:21", "--once"], "give http://HOST:PORT"),
        (["--where", 'Hostname="a"', "--once"], "--where needs --prometheus"),
        (["--prometheus", "prom:9090", "--remote", "node:9400"], "give one"),
        (["--prometheus", "prom:9090", "--demo", "--once"], "cannot be combined"),
        (["--prometheus", "prom:9090", "--gpus", "0", "--once"], "cannot be combined"),
        (["--prometheus", "prom:9090", "--where", "Hostname", "--once"], "expected =, !=, =~ or !~"),
        (["--ca-file", "ca.pem", "--once"], "--ca-file needs --remote or --prometheus"),
        (["--remote", "https://127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem", "--once"], "': no such file"),
        (["--prometheus", "https://127.0.0.1:1", "--ca-file", "/nonexistent/ca.pem", "--once"], "': no such file"),
    ],
)
def test_cli_usage_errors_are_one_line_exit_2(args, said):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_cli_an_unreachable_server_is_one_line_exit_1():
    result = run_cli("--prometheus", "http://127.0.0.1:9", "--once", "--timeout", "2")
    assert result.returncode == 1
    assert "prometheus 127.0.0.1:9: unreachable" in result.stderr and result.stderr.count("\n") == 1


def test_cli_a_regex_the_server_refuses_is_a_usage_error(fake):
    add_hosts(fake, 1, gpus=1)
    result = run_cli("--prometheus", fake.url, "--where", 'Hostname=~"node[1"', "--once")
    assert result.returncode == 2, result.stderr
    assert "--where: the server refused it" in result.stderr and result.stderr.count("\n") == 1


def test_an_instance_label_from_the_server_is_escaped_into_the_next_query(fake):
    """A host's ``instance`` (outside text) goes back to the server in a regex: quoted and escaped, never pasted."""
    evil = 'x"} or {__name__=~".+'
    texts = {evil: simulated_exposition("evil", 1, 1), "10.0.0.2:9400": simulated_exposition("plain", 2, 1)}
    for instance, text in texts.items():
        fake.add_exposition(text, instance, timestamp=NOW - 5)
    fleet = fleet_of(fake)
    fleet.poll_once()
    fake.set_series([s for s in fake.series if s.labels["instance"] != evil])
    fake.add_exposition(texts[evil], evil, timestamp=NOW - 1)  # only the evil host has a new sample
    snapshot = fleet.poll_once()
    assert fleet.hosts_read == 1 and fleet._failure is None
    assert [g.static.host for g in snapshot.gpus] == ["evil", "plain"] and all(g.note is None for g in snapshot.gpus)
    assert 'instance=~"x\\"\\\\} or \\\\{__name__=~\\"\\\\.\\\\+"' in fake.queries[-1]


def test_exporter_demo_hostname_is_checked():
    result = run_cli("exporter", "--demo-hostname", "two words")
    assert result.returncode == 2 and "invalid hostname" in result.stderr and result.stderr.count("\n") == 1


def test_rows_are_told_apart_by_instance_alone_only_where_each_instance_names_one_host(fake):
    """Where every instance has one Hostname the answer leaves Hostname out (20 bytes less of each row);
    two Hostnames behind one instance (a federating exporter) keep it, and stay two hosts with their own values."""
    one = fleet_of(fake)
    add_hosts(fake, 2, gpus=1)
    shown = one.poll_once()
    assert [g.static.host for g in shown.gpus] == ["node0", "node1"]
    assert "Hostname" not in fake.queries[-1] and "Hostname" in fake.queries[-2], "the first query names the hosts"
    shared = "10.0.9.9:9400"
    fake.set_series([])
    fake.add_exposition(simulated_exposition("left", 1, 1), shared, timestamp=NOW - 0.5)
    fake.add_exposition(simulated_exposition("right", 2, 2), shared, timestamp=NOW - 0.5)
    two = fleet_of(fake).poll_once()
    assert "Hostname" in fake.queries[-1]
    hosts = [(g.static.host, g.static.host_index, g.static.uuid) for g in two.gpus]
    expected = [
        (hostname, gpu.static.host_index, gpu.static.uuid)
        for hostname, seed, gpus in (("left", 1, 1), ("right", 2, 2))
        for gpu in HostGpus().gpus(parse_exposition(simulated_exposition(hostname, seed, gpus), "x"), 0, NOW)
    ]
    assert hosts == expected


def test_a_process_whose_labels_change_shows_what_they_say_now(fake):
    """A process's identity (user, command, owner) is kept between refreshes only while its labels are the
    same: the same pid with another command (the pid reused, or a relabelled series) shows the new one."""
    text = simulated_exposition("node", 1, 1)
    instance = "10.0.0.1:9400"
    fake.set_series(exposition_series(text, instance, NOW - 0.5))
    fleet = fleet_of(fake)
    first = fleet.poll_once()
    assert first.processes, "the simulated host runs processes"
    pid = first.processes[0].pid
    series = exposition_series(text, instance, NOW)
    for s in series:
        if s.labels.get("pid") == str(pid) and "command" in s.labels:
            s.labels["command"] = "relabelled --now"
            s.labels["user"] = "someone-else"
    fake.set_series(series)
    again = fleet.poll_once()
    assert fleet.hosts_read == 1
    shown = [p for p in again.processes if p.pid == pid]
    assert shown and all((p.command, p.user) == ("relabelled --now", "someone-else") for p in shown)
    unchanged = [(p.pid, p.command, p.user, p.owner) for p in again.processes if p.pid != pid]
    assert unchanged == [(p.pid, p.command, p.user, p.owner) for p in first.processes if p.pid != pid]


def test_values_read_through_a_full_memo_are_the_same_as_read_afresh(fake, monkeypatch):
    """The readings kept per value text (PrometheusFleet's memo) are bounded (MEMO_VALUES a series name) and
    change nothing: refresh after refresh of other values, past a memo full at once, every GPU and process
    reads as --remote reads the same exposition (out-of-range values too: N/A)."""
    monkeypatch.setattr(fleet_module, "MEMO_VALUES", 3)
    fleet = fleet_of(fake)
    for seed in range(4):
        texts = {  # DCGM's: one value out of range (250 %), one below its range (-1 %)
            "10.0.0.1:9400": simulated_exposition("node-a", seed, 3),
            "10.0.0.3:9400": DCGM.replace("} 87", "} 250").replace("} 3\n", f"}} {-1 - seed}\n"),
        }
        fake.set_series([s for i, t in texts.items() for s in exposition_series(t, i, NOW - 0.5 + seed)])
        snapshot = fleet.read_once()  # everything asked (no slow group kept from before)
        want, reference = [], HostGpus()
        for instance, text in sorted(texts.items(), key=lambda item: parse_exposition(item[1], "x").hostname):
            want.extend(reference.gpus(parse_exposition(text, f"http://{instance}/metrics"), len(want), NOW))
        assert [comparable(g)[1:3] for g in snapshot.gpus] == [comparable(g)[1:3] for g in want], seed
        assert snapshot.gpus[0].sample.utilization_gpu_percent is None, "out of range: N/A, memo or not"
    assert all(len(memo) <= 3 for *_, memo in fleet._routes.values())
    assert all(len(memo) <= 3 for _, memo, _ in fleet._process_routes.values())
