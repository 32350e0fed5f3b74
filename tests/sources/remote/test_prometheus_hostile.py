"""A Prometheus server (or anything answering on its port) that answers with hostile JSON or claims a huge fleet.

The answers are decoded by the same rules as a recording's lines (``nvtopy.jsondecode``: nested too deeply or a
number too long is a one-line refusal, never a RecursionError), and what a fleet view takes from them is bounded
as ``--remote`` bounds it: at most ``MAX_HOSTS`` hosts (a line says how many the server claims), the list of hosts
read up to ``HOST_LIST_BYTES``, hosts that come and go forgotten past the cap.
"""

# ruff: noqa: F811 -- the fixtures serve and fake are imported from the modules that define them

from __future__ import annotations

import json
import time

import pytest

from nvtopy.commands.dispatch import main
from nvtopy.errors import UsageError
from nvtopy.formats.prometheus.parse import MAX_HOSTS
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.sources.remote.fleet import HOST_LIST_BYTES, PrometheusFleet
from nvtopy.sources.remote.prometheus import PrometheusClient, PrometheusError

from .test_fleet import NOW, add_hosts, fake, run_cli  # noqa: F401
from .test_prometheus_api import send, serve  # noqa: F401

DEEP = b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
LONG_NUMBER = b'{"status": "success", "data": {"resultType": "vector", "result": [], "n": ' + b"7" * 5000 + b"}}"


def _replying(body: bytes):
    return lambda handler: send(handler, 200, body, Content_Type="application/json")


# ----------------------------------------------------------------- the decoder


@pytest.mark.parametrize(
    ("body", "said"),
    [(DEEP, "nested too deeply"), (LONG_NUMBER, "Exceeds the limit (4300 digits)")],
    ids=["nested-100000-deep", "5000-digits"],
)
def test_json_no_decoder_reads_is_one_line_not_a_recursion_error(serve, body, said):
    client = PrometheusClient(serve(_replying(body)).url, timeout=5)
    with pytest.raises(PrometheusError) as error:
        client.query("up")
    assert error.value.kind == "json" and "answered JSON that cannot be read (" in str(error.value)
    assert said in str(error.value) and "\n" not in str(error.value)


def test_the_fleet_view_says_why_instead_of_blaming_the_connection(serve):
    """The monitor's refresh raised RecursionError out of the source; the TUI then said 'closed the connection'."""
    fleet = PrometheusFleet(serve(_replying(DEEP)).url, timeout=5)
    snapshot = fleet.poll_once()
    assert [g.lost for g in snapshot.gpus] == [True]
    assert "answered JSON that cannot be read (nested too deeply)" in snapshot.gpus[0].note
    with pytest.raises(PrometheusError, match="nested too deeply"):
        fleet.read_once()


def test_once_and_report_say_it_in_one_line_and_exit_1(serve, capsys):
    url = serve(_replying(DEEP)).url
    result = run_cli("--prometheus", url, "--once")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "nested too deeply" in result.stderr
    assert main(["report", "--prometheus", url, "--since", "1h"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nvtopy: error: prometheus ") and "nested too deeply" in err


# ----------------------------------------------------------------- how many hosts


def _newest_rows(names: range | list[str], at: float = NOW - 0.5) -> list[dict]:
    return [{"metric": {"instance": f"{n}:9400", "Hostname": f"{n}"}, "value": [at, repr(at)]} for n in names]


def _with_ghosts(fake, ghosts: list[str]):
    """The fake answers the first query (each host's newest sample) with its own hosts and ``ghosts`` more."""

    def reply(handler, query: str) -> bool:
        if not query.startswith("max by (instance, hostname, Hostname) (timestamp("):
            return False  # the second query: what the fake's own series say
        data = json.loads(fake.answer(query))
        data["data"]["result"].extend(_newest_rows(ghosts))
        send(handler, 200, json.dumps(data).encode(), Content_Type="application/json")
        return True

    fake.reply = reply


def test_a_server_claiming_thousands_of_hosts_shows_the_first_by_name_and_says_so(fake):
    add_hosts(fake, 3, gpus=1)  # node0, node1, node2: first by name
    _with_ghosts(fake, [f"zz-ghost{n}" for n in range(3000)])
    fleet = PrometheusFleet(fake.url, timeout=10)
    started = time.process_time()
    snapshot = fleet.read_once()
    assert time.process_time() - started < 5.0  # a fraction of a second; 300,000 hosts took 16 s and 870 MB
    shown = [g for g in snapshot.gpus if not g.note]
    assert [(g.static.host, g.static.host_index) for g in shown] == [("node0", 0), ("node1", 0), ("node2", 0)]
    notes = [g.note for g in snapshot.gpus if g.note]
    assert notes == [f"the server has 3003 hosts: showing the first {MAX_HOSTS} by name (narrow them with --where)"]
    assert fleet.status_line().startswith(f"PROMETHEUS {fleet.client.label} {MAX_HOSTS} of 3003 hosts ⚠")
    assert len(fleet._known) == MAX_HOSTS
    read = fake.queries[-1]
    assert 'instance=~"' in read and "zz-ghost9:9400" in read and "zz-ghost2999" not in read, "only the hosts shown"


def test_a_list_of_hosts_too_long_to_show_is_one_line_asking_for_where(fake):
    rows = _newest_rows([f"ghost{n}" for n in range(60_000)])
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}).encode()
    assert len(body) > HOST_LIST_BYTES
    fake.reply = lambda handler, query: send(handler, 200, body, Content_Type="application/json") or True
    fleet = PrometheusFleet(fake.url, timeout=10)
    with pytest.raises(PrometheusError) as error:
        fleet.read_once()
    assert str(error.value) == (
        f"prometheus {fleet.client.label}: answer larger than 4 MiB: far more hosts than the {MAX_HOSTS} shown; "
        "narrow them with --where"
    )


def test_hosts_that_come_and_go_by_the_thousand_are_forgotten_past_the_cap(fake):
    """Each vanished host was kept for its 'no longer reported' line for 10 minutes, however many there were."""
    fleet = PrometheusFleet(fake.url, timeout=10)
    for batch in range(3):
        names = [f"batch{batch}-node{n}" for n in range(MAX_HOSTS)]
        body = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": _newest_rows(names)}}
        ).encode()
        fake.reply = lambda handler, query, body=body: send(handler, 200, body, Content_Type="application/json") or True
        snapshot = fleet.poll_once()
        assert len(fleet._known) == MAX_HOSTS
        assert len(snapshot.gpus) <= MAX_HOSTS + 1


def test_remote_takes_as_many_hosts_as_a_fleet_shows():
    RemoteHosts([f"node{n}:9400" for n in range(MAX_HOSTS)])
    with pytest.raises(UsageError) as error:
        RemoteHosts([f"node{n}:9400" for n in range(MAX_HOSTS + 1)])
    assert str(error.value) == f"--remote: {MAX_HOSTS + 1} hosts; at most {MAX_HOSTS} (for a fleet, use --prometheus)"


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({"metric": {"instance": "0:9400", "Hostname": 7}, "value": [1, "2"]}, "a label value that is not text"),
        ({"metric": {"instance": "0:9400", "job": None}, "value": [1, "2"]}, "another label's value that is not text"),
        ({"metric": {"instance": "0:9400"}, "value": [1, 7 * 10**400]}, "a value no float holds"),
        ({"metric": {"instance": "0:9400"}, "value": [1, "two"]}, "a value that is not a number"),
        ({"metric": {"instance": "0:9400"}, "value": [1]}, "a value without its time"),
        ({"metric": ["instance"], "value": [1, "2"]}, "labels that are not an object"),
        ({"value": [1, "2"]}, "no labels"),
        ("a string", "an item that is not an object"),
    ],
)
def test_a_malformed_item_in_the_fleets_answer_is_one_line(fake, item, why):
    """The fleet checks each item of its big answer where it reads it (no list of pairs made first): as strictly."""
    add_hosts(fake, 1, gpus=1)

    def reply(handler, query: str) -> bool:
        if query.startswith("max by (instance, hostname, Hostname) (timestamp("):
            return False  # the first query: the fake's own hosts
        data = json.loads(fake.answer(query))
        data["data"]["result"].insert(1, item)
        send(handler, 200, json.dumps(data).encode(), Content_Type="application/json")
        return True

    fake.reply = reply
    fleet = PrometheusFleet(fake.url, timeout=10)
    snapshot = fleet.poll_once()
    assert [g.note for g in snapshot.gpus] == [
        f"prometheus {fleet.client.label}: answered a malformed vector; asked again every 2 s"
    ], why
    with pytest.raises(PrometheusError, match="answered a malformed vector"):
        fleet.read_once()
