"""``--remote``: hosts are told apart, and each process row names its host.

Two exporters that report the same hostname (``demo-node``: the simulated
backend's default, a container's default name, a copied config) used to read as
two indistinguishable ``demo-node/0``. Now such hosts are named by their
``host:port``, a host keeps its name while it is down, and every process row
carries its host (the HOST column, the JSON contract).

The exporters here are tiny HTTP servers in the test process that serve what
nvtopy's exporter would (prometheus-client's exposition of a simulated backend):
a test can stop one and start it again on the same port.
"""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.sources.remote.exporters import RemoteHosts, _Target, host_names

from ...builders import run_nvtopy as nvtopy


def targets(*texts: str) -> list[_Target]:
    return [_Target.of(text) for text in texts]


# --------------------------------------------------------------------------- host_names, alone


def test_names_are_the_reported_hostnames_when_they_differ():
    assert host_names(targets("10.0.0.1:9400", "10.0.0.2:9400"), ["node-a", "node-b"]) == ["node-a", "node-b"]


def test_two_hosts_reporting_the_same_name_are_named_host_port():
    names = host_names(targets("10.0.0.1:9400", "10.0.0.2:9400", "10.0.0.3:9400"), ["demo-node", "demo-node", "c"])
    assert names == ["10.0.0.1:9400", "10.0.0.2:9400", "c"], "only the colliding ones change"


def test_a_host_never_reached_is_named_by_its_url_and_collisions_there_too():
    names = host_names(targets("127.0.0.1:9400", "127.0.0.1:9401", "gpu7:9400"), [None, None, None])
    assert names == ["127.0.0.1:9400", "127.0.0.1:9401", "gpu7"]


def test_the_same_exporter_given_twice_is_numbered():
    names = host_names(targets("http://h:80/a/metrics", "http://h:80/b/metrics"), ["x", "x"])
    assert names == ["h:80#1", "h:80#2"]


def test_credentials_never_reach_a_name():
    names = host_names(targets("http://bob:s3cret@h:9400", "http://h2:9400"), ["n", "n"])
    assert names == ["h:9400", "h2:9400"]


# --------------------------------------------------------------------------- exporters over HTTP


def exposition(sim, hostname: str, seed: int, gpus: int = 2) -> bytes:
    """What ``nvtopy exporter`` serves for a simulated host."""
    backend = sim(gpus=gpus, seed=seed, hostname=hostname, processes_per_gpu=2)
    poller = Poller(backend, collector=Collector(backend, history=1))
    poller.poll_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(poller))
    return generate_latest(registry)


class Exporter:
    """An HTTP server on loopback serving ``body`` at /metrics; stopped and started again on the same port."""

    def __init__(self, body: bytes, port: int = 0) -> None:
        self.body = body
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(exporter.body)))
                self.end_headers()
                self.wfile.write(exporter.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporters(sim):
    """Two exporters that both say ``demo-node``, and one ``node-c``."""
    started = [
        Exporter(exposition(sim, "demo-node", 1)),
        Exporter(exposition(sim, "demo-node", 2)),
        Exporter(exposition(sim, "node-c", 3, gpus=1)),
    ]
    yield started
    for exporter in started:
        exporter.stop()


def hosts_of(snapshot) -> list[tuple[str | None, int | None]]:
    return [(gpu.static.host, gpu.static.host_index) for gpu in snapshot.gpus]


def test_hosts_reporting_the_same_name_are_told_apart_and_so_are_their_processes(exporters):
    a, b, c = exporters
    snapshot = RemoteHosts([a.url, b.url, c.url], timeout=5.0).poll_once()
    assert hosts_of(snapshot) == [(a.url, 0), (a.url, 1), (b.url, 0), (b.url, 1), ("node-c", 0)]
    for gpu in snapshot.gpus:
        assert gpu.processes, f"GPU {gpu.index} of {gpu.static.host} lists processes"
        assert {p.host for p in gpu.processes} == {gpu.static.host}, "a process row names its GPU's host"
        assert {p.gpu_index for p in gpu.processes} == {gpu.index}, "the global index stays"


def test_a_host_that_goes_down_keeps_its_name_and_so_do_the_others(exporters):
    a, b, c = exporters
    source = RemoteHosts([a.url, b.url, c.url], timeout=2.0)
    first = hosts_of(source.poll_once())
    port = b.port
    b.stop()
    down = source.poll_once()
    # b is one line saying why, still named as before; a is still host:port although its name is now unique
    # among the hosts that answer (names never flip while a host comes and goes).
    assert hosts_of(down) == [(a.url, 0), (a.url, 1), (b.url, None), ("node-c", 0)]
    assert down.gpus[2].lost and "unreachable" in down.gpus[2].note
    assert source.status_line().startswith("REMOTE 2/3")
    back = Exporter(b.body, port)
    exporters[1] = back
    assert hosts_of(source.poll_once()) == first


def test_a_host_first_seen_down_takes_its_reported_name_once_it_answers(sim):
    up = Exporter(exposition(sim, "node-a", 1))
    later = Exporter(exposition(sim, "node-b", 2))
    port = later.port
    later.stop()
    try:
        source = RemoteHosts([up.url, f"127.0.0.1:{port}"], timeout=2.0)
        assert hosts_of(source.poll_once())[-1] == ("127.0.0.1", None), "never answered: the URL's host"
        later = Exporter(later.body, port)
        assert hosts_of(source.poll_once())[-2:] == [("node-b", 0), ("node-b", 1)]
        later.stop()
        assert hosts_of(source.poll_once())[-1] == ("node-b", None), "down again: keeps the name it reported"
    finally:
        up.stop()
        later.stop()


def test_remote_hosts_refuse_signals_in_plain_words():
    refusal = RemoteHosts(["node2:9400"]).signal_refusal
    assert refusal == "read-only: processes on other hosts cannot be signalled from here"
    outcome = RemoteHosts(["node2:9400"]).signal(1234, None, 15).result(timeout=1)
    assert not outcome.ok and outcome.message == refusal


# --------------------------------------------------------------------------- --once, text and JSON


def test_once_text_has_a_host_column_naming_each_process_host(exporters):
    a, b, c = exporters
    result = nvtopy("--once", "--remote", f"{a.url},{b.url},{c.url}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["GPU", "Host", "PID"])
    rows = [line.split() for line in lines[start + 1 :] if line.split() and line.split()[0].isdigit()]
    # The GPU column keeps the global index; Host names the host and the GPU's own index there.
    want = {"0": f"{a.url}/0", "1": f"{a.url}/1", "2": f"{b.url}/0", "3": f"{b.url}/1", "4": "node-c/0"}
    assert rows and {row[0]: row[1] for row in rows} == want


def test_once_json_carries_each_process_host(exporters):
    a, b, c = exporters
    result = nvtopy("--once", "--json", "--remote", f"{a.url},{b.url},{c.url}")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [g["host"] for g in data["gpus"]] == [a.url, a.url, b.url, b.url, "node-c"]
    for gpu in data["gpus"]:
        assert gpu["processes"] and {p["host"] for p in gpu["processes"]} == {gpu["host"]}


def test_a_local_snapshot_has_no_host_anywhere():
    result = nvtopy("--demo", "--once", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert all(p["host"] is None for g in data["gpus"] for p in g["processes"])
    text = nvtopy("--demo", "--once")
    assert text.returncode == 0, text.stderr
    assert any(line.split()[:3] == ["GPU", "PID", "Type"] for line in text.stdout.splitlines()), "no Host column"
