"""``nvtopy --remote``: other hosts' GPUs read from their exporters (nvtopy's or dcgm-exporter's)."""

from __future__ import annotations

import html
import socket
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from nvtopy.commands.exporter.server import serve
from nvtopy.errors import UsageError
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.sources.remote.exporters import RemoteHosts, metrics_url
from nvtopy.tui.app import NvtopyApp

from ...tui_helpers import started

MIB = 1 << 20


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("node2:9400", "http://node2:9400/metrics"),
        ("http://node2:9400", "http://node2:9400/metrics"),
        ("http://node2:9400/", "http://node2:9400/metrics"),
        ("https://gpu.example.org/gpu/metrics", "https://gpu.example.org/gpu/metrics"),
        ("[::1]:9400", "http://[::1]:9400/metrics"),
    ],
)
def test_metrics_url(given, url):
    assert metrics_url(given) == url


@pytest.mark.parametrize("bad", ["", "ftp://node2:21", "http://", "node2:99999"])
def test_bad_urls(bad):
    with pytest.raises(UsageError):
        metrics_url(bad)


def exporter_poller(sim, **kwargs):
    backend = sim(**kwargs)
    poller = Poller(backend, collector=Collector(backend, history=1))
    poller.poll_once()
    return poller


def test_an_exporters_output_reads_back_as_the_same_gpus(sim):
    poller = exporter_poller(sim, gpus=2, seed=4, hostname="node-a")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(poller))
    scrape = parse_exposition(generate_latest(registry).decode(), "http://node-a:9400/metrics")
    snapshot = poller.latest
    assert scrape.hostname == "node-a" and scrape.driver_version == "550.54.15"
    assert [s.index for s, _, _ in scrape.gpus] == [0, 1]
    for (static, values, lost), gpu in zip(scrape.gpus, snapshot.gpus, strict=True):
        assert not lost
        assert (static.uuid, static.bus_id, static.name) == (gpu.static.uuid, gpu.static.bus_id, gpu.static.name)
        assert static.memory_total_bytes == gpu.static.memory_total_bytes
        assert values["utilization_gpu_percent"] == gpu.sample.utilization_gpu_percent
        assert values["temperature_c"] == gpu.sample.temperature_c
        assert values["power_draw_w"] == pytest.approx(gpu.sample.power_draw_w)
        assert abs(values["memory_used_bytes"] - gpu.sample.memory_used_bytes) < MIB, "MiB resolution"
        assert values["throttle_reasons"] == tuple(r for r in gpu.sample.throttle_reasons)
        assert values["ecc_mode"] is True
        rows = {row["pid"]: row for row in scrape.processes[gpu.index]}
        for proc in gpu.processes:
            assert rows[proc.pid]["user"] == proc.user and rows[proc.pid]["command"] == proc.command
            assert rows[proc.pid]["gpu_memory_bytes"] == proc.gpu_memory_bytes
            assert rows[proc.pid]["type"] == proc.type.value
            assert rows[proc.pid]["start_time_seconds"] == pytest.approx(proc.create_time)


_A100 = 'modelName="NVIDIA A100-SXM4-80GB",Hostname="dgx-3"'
_GPU0 = f'gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",device="nvidia0",{_A100}'
_GPU1 = f'gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:0F:00.0",device="nvidia1",{_A100}'
_DRIVER = 'DCGM_FI_DRIVER_VERSION="535.154.05"'
# As dcgm-exporter writes it: counters declared as such, without the _total suffix.
DCGM_SAMPLE = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{_GPU0},{_DRIVER}}} 87
DCGM_FI_DEV_GPU_UTIL{{{_GPU1},{_DRIVER}}} 3
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{{_GPU0}}} 40960
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{_GPU0}}} 123456789
# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.
# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{_GPU1}}} 2
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="0",UUID="GPU-aaaa"}} 0.5
"""


def test_a_dcgm_exporter_exposition_is_understood():
    scrape = parse_exposition(DCGM_SAMPLE, "http://dgx-3:9400/metrics")
    assert scrape.hostname == "dgx-3" and scrape.driver_version == "535.154.05"
    (s0, v0, _), (_, v1, _) = scrape.gpus
    assert (s0.uuid, s0.name, s0.bus_id) == ("GPU-aaaa", "NVIDIA A100-SXM4-80GB", "00000000:07:00.0")
    assert v0 == {
        "utilization_gpu_percent": 87,
        "memory_used_bytes": 40960 * MIB,
        "energy_mj": 123456789,
        "tensor_active_percent": 50.0,  # dcgm's ratio 0.5, as the model's percentage
    }
    assert v1 == {"utilization_gpu_percent": 3, "ecc_uncorrected_volatile": 2, "ecc_mode": True}
    assert scrape.processes == {}, "dcgm-exporter has no per-process series"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def two_hosts(sim):
    servers = []
    ports = []
    for name, model in (("node-a", "H100 80GB HBM3"), ("node-b", "RTX 4090")):
        poller = exporter_poller(sim, gpus=2, seed=1, hostname=name, model=model)
        server, _ = serve(poller, "127.0.0.1", 0)
        servers.append(server)
        ports.append(server.server_address[1])
    yield ports
    for server in servers:
        server.shutdown()
        server.server_close()


def test_unreachable_hosts_are_marked_and_retried(two_hosts, sim):
    late = free_port()
    source = RemoteHosts([f"127.0.0.1:{p}" for p in two_hosts] + [f"127.0.0.1:{late}"], interval=1.0, timeout=1.0)
    first = source.poll_once()
    hosts = [(g.static.host, g.static.host_index) for g in first.gpus]
    assert hosts == [("node-a", 0), ("node-a", 1), ("node-b", 0), ("node-b", 1), ("127.0.0.1", None)]
    assert [g.index for g in first.gpus] == [0, 1, 2, 3, 4]
    down = first.gpus[4]
    assert down.note == f"127.0.0.1:{late} unreachable: connection refused" and down.lost
    assert first.gpus[2].static.name == "NVIDIA GeForce RTX 4090" and first.gpus[2].sample.fan_percent is not None
    assert first.host.hostname == "3 hosts" and source.status_line().startswith("REMOTE 2/3")
    assert all(p.gpu_index in (0, 1, 2, 3) for g in first.gpus for p in g.processes)

    poller = exporter_poller(sim, gpus=1, seed=2, hostname="node-c")
    server, _ = serve(poller, "127.0.0.1", late)
    try:
        second = source.poll_once()
    finally:
        server.shutdown()
        server.server_close()
    assert [g.static.host for g in second.gpus] == ["node-a", "node-a", "node-b", "node-b", "node-c"]
    assert second.gpus[4].note is None and source.status_line().startswith("REMOTE 3/3")
    assert len(second.gpus[0].history.timestamps) == 2, "history per host and GPU across scrapes"


def test_a_non_exporter_answer_is_an_error_not_a_crash(tmp_path):
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>this is not prometheus {{{</html>"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        snapshot = RemoteHosts([f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/other"], timeout=1.0).poll_once()
    finally:
        server.shutdown()
        server.server_close()
    notes = [g.note for g in snapshot.gpus]
    assert notes[0].endswith(")") and "not Prometheus metrics" in notes[0]
    assert notes[1] == f"127.0.0.1:{port} answered HTTP 404"


async def test_remote_hosts_in_the_monitor(two_hosts):
    # A long interval: the one snapshot checked here is the first (a second, slower one under load could differ).
    source = RemoteHosts([f"127.0.0.1:{p}" for p in two_hosts] + ["127.0.0.1:9"], interval=60.0, timeout=10.0)
    app = NvtopyApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot, app)  # applied *and* laid out: the panels' height changes with the first snapshot
        assert len(app.snapshot.gpus) == 5
        text = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        for fragment in ("node-a/0", "node-b/1", "unreachable", "REMOTE 2/3"):
            assert fragment in text
        assert app.query_one("#processes").rows, "remote processes are listed"
        await pilot.press("K")
        await pilot.pause()
        assert any("read-only" in str(n.message) for n in app._notifications)
        await pilot.press("q")


def test_remote_cli_errors():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nvtopy", *args], capture_output=True, text=True, timeout=60)

    for args in (["--remote", "node2:9400", "--gpus", "0"], ["--remote", "ftp://x", "--once"], ["--remote", ","]):
        result = run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    port = free_port()
    for form in ([], ["--json"], ["--no-color"]):  # nothing could be read: an error, one line, exit 1, no table
        down = run("--once", *form, "--remote", f"127.0.0.1:{port}")
        assert down.returncode == 1, (form, down.stdout, down.stderr)
        assert down.stderr == (
            f"nvtopy: error: the host could not be read: 127.0.0.1:{port} unreachable: connection refused\n"
        )
        assert down.stdout == ""
    both = run("--once", "--remote", f"127.0.0.1:{port},127.0.0.1:{port}/other")
    assert both.returncode == 1 and both.stderr.startswith("nvtopy: error: none of 2 hosts could be read: ")
    assert both.stderr.count("\n") == 1


def test_once_puts_a_host_that_could_not_be_read_on_its_own_line(two_hosts):
    """Never in the Name column: a sentence there stretched every column of the table to its width."""
    down = free_port()
    hosts = ",".join(f"127.0.0.1:{p}" for p in (*two_hosts, down))
    result = subprocess.run(
        [sys.executable, "-m", "nvtopy", "--once", "--no-color", "--remote", hosts],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr  # two hosts answered
    lines = result.stdout.splitlines()
    header, rule = lines[1], lines[2]
    rows = lines[3:7]
    assert [row.split()[1] for row in rows] == ["node-a/0", "node-a/1", "node-b/0", "node-b/1"]
    assert lines[7] == f"127.0.0.1: 127.0.0.1:{down} unreachable: connection refused"
    assert "unreachable" not in "".join(lines[:7])
    assert len(rule) == len(header.rstrip()) < 160, "the table is as wide as its columns, not the error"


def test_a_hosts_error_is_made_safe_on_its_own_line():
    from io import StringIO

    from nvtopy.model import GpuSample, GpuState, GpuStatic, HostInfo, Snapshot
    from nvtopy.render.text import render_snapshot

    note = "evil:9400 answered \x1b]0;pwned\x07\x1b[2J HTTP 500"
    gpu = GpuState(GpuStatic(0, host="evil\x1b[31m"), GpuSample(1.0, lost=True), note=note)
    snapshot = Snapshot(timestamp=1.0, host=HostInfo("x", None, None, backend="remote"), gpus=(gpu,))
    out = StringIO()
    render_snapshot(snapshot, out, color=False)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert text.splitlines()[1].startswith("evil") and "HTTP 500" in text.splitlines()[1]
    assert "GPU  Name" not in text, "no table of no GPU"
