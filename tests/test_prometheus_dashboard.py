"""NVIDIA's Grafana dashboard 12239 on nvtopy's exporter, through a real Prometheus server.

``nvtopy exporter --demo`` (simulated H100s, which have GPM) is scraped by a real
``prometheus`` every second; then each of the dashboard's eight panel queries is run
through Prometheus's HTTP API, as Grafana would, and must return data. The queries are
the dashboard's own, from both of its forms in NVIDIA/dcgm-exporter's
``grafana/dcgm-exporter-dashboard.json``: the older one (variables ``$instance`` and
``$gpu``, GPU utilisation from ``DCGM_FI_DEV_GPU_UTIL``) and the current one (variables
``$Hostname`` and ``$gpu`` filled from ``DCGM_FI_DEV_FB_FREE``, ``max ... by`` the
labels its legends print, GPU utilisation from ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``).
Each variable is given Grafana's "All" (``.*``). A MIG variant
(``--demo-fault mig=3@1``) checks the GPU instances' series and their
``GPU_I_ID``/``GPU_I_PROFILE`` labels, which the current dashboard groups by.

Skipped where ``prometheus`` is not on PATH (Debian: ``apt-get install prometheus``;
``.ci/run`` installs it where it can). Every wait has a deadline, and both processes
are stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus is not on PATH (Debian: apt-get install prometheus): the dashboard needs a real server",
)

STARTUP_S = 60.0  # the exporter answering, Prometheus ready (a cold start on a busy CI runner)
DATA_S = 60.0  # until every panel has data: a few scrapes at 1 s

# The dashboard's panels: (title, older query, current query), exactly as its JSON has them.
PANELS: tuple[tuple[str, str, str], ...] = (
    (
        "GPU Temperature",
        'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)',
    ),
    (
        "GPU Avg. Temp",
        'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})',
        'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"})',
    ),
    (
        "GPU Power Usage",
        'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, uuid)',
    ),
    (
        "GPU Power Total",
        'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})',
        'sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) by (gpu))',
    ),
    (
        "GPU SM Clocks",
        'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000',
        'max(DCGM_FI_DEV_SM_CLOCK{Hostname=~"$Hostname", gpu=~"$gpu"} * 1000000) by (Hostname, UUID, gpu)',
    ),
    (
        "GPU Utilization",
        'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"})'
        " by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    ),
    (
        "GPU Framebuffer Mem Used",
        'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)',
    ),
    (
        "Tensor Core Utilization",
        'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"})'
        " by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    ),
)
# What the current dashboard's legends print ({{Hostname}} - GPU {{gpu}}, ...), per panel: labels every series has.
LEGEND_LABELS = {
    "GPU Temperature": ("Hostname", "gpu"),
    "GPU Power Usage": ("Hostname", "gpu"),
    "GPU SM Clocks": ("Hostname", "gpu"),
    "GPU Utilization": ("gpu",),
    "GPU Framebuffer Mem Used": ("Hostname", "gpu"),
    "Tensor Core Utilization": ("Hostname", "gpu"),
}
ALL = ".*"  # Grafana's "All" for a variable
# Any free port (it says which), a poll every half second: a scrape each second sees fresh values.
EXPORTER = (sys.executable, "-m", "nvtopy", "exporter", "--demo", "--listen", "127.0.0.1:0", "--interval", "0.5")


def _fill(query: str) -> str:
    return query.replace("$instance", ALL).replace("$Hostname", ALL).replace("$gpu", ALL)


def _queries() -> list[tuple[str, str]]:
    """(panel and form, its query with every variable at "All")."""
    return [
        (f"{title} ({form})", _fill(query))
        for title, old, new in PANELS
        for form, query in (("older", old), ("current", new))
    ]


# Never through a proxy from the environment: both servers are on loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(what: str, deadline_s: float, check: Any, logs: list[Path]) -> Any:
    """Call ``check`` until it returns something true, at most ``deadline_s`` seconds; fail saying what and why."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = check()
        except (OSError, ValueError) as exc:  # not listening yet, or an answer cut short
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}" for log in logs if log.exists())
    pytest.fail(f"{what}: nothing within {deadline_s:.0f} s (last: {last!r})\n{tails}")


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s: the process (started in a session of its own) never outlives the test."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class Server:
    """A Prometheus server that has scraped nvtopy's exporter."""

    url: str
    target: str  # the exporter's host:port, Prometheus's ``instance`` label
    logs: list[Path]
    seconds_to_data: float  # from starting the exporter until every panel had data

    def query(self, promql: str) -> list[dict[str, Any]]:
        status, body = _get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", f"{promql}: {status} {answer}"
        assert answer["data"]["resultType"] == "vector", promql
        return answer["data"]["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        """Grafana's ``label_values(match, label)``, through the API it uses."""
        url = f"{self.url}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
        status, body = _get(url)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", answer
        return answer["data"]


def _all_panels_have_data(server: Server) -> bool:
    return all(_values(server.query(q)) for _, q in _queries())


def _values(result: list[dict[str, Any]]) -> list[float]:
    return [float(series["value"][1]) for series in result]


@contextlib.contextmanager
def _prometheus_on_nvtopy(tmp: Path, *exporter_args: str) -> Iterator[Server]:
    exporter_log, prometheus_log = tmp / "exporter.log", tmp / "prometheus.log"
    logs = [exporter_log, prometheus_log]
    exporter: subprocess.Popen[bytes] | None = None
    prometheus: subprocess.Popen[bytes] | None = None
    started = time.monotonic()
    try:
        with exporter_log.open("wb") as out:
            exporter = subprocess.Popen(
                [*EXPORTER, *exporter_args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def exporter_port() -> str | None:
            assert exporter is not None and exporter.poll() is None, "the exporter exited"
            found = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", exporter_log.read_text(errors="replace"))
            return found.group(1) if found else None

        target = f"127.0.0.1:{_wait('the exporter', STARTUP_S, exporter_port, logs)}"
        _wait("the exporter's /metrics", STARTUP_S, lambda: _get(f"http://{target}/metrics")[0] == 200, logs)

        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: nvtopy\n"
            "    scrape_timeout: 1s\n"
            "    static_configs:\n"
            f"      - targets: ['{target}']\n",
            encoding="utf-8",
        )
        web = f"127.0.0.1:{_free_port()}"
        with prometheus_log.open("wb") as out:
            prometheus = subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address={web}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=tmp,
            )
        server = Server(f"http://{web}", target, logs, 0.0)

        def ready() -> bool:
            assert prometheus is not None and prometheus.poll() is None, "prometheus exited"
            return _get(f"{server.url}/-/ready")[0] == 200

        _wait("prometheus ready", STARTUP_S, ready, logs)
        _wait("a successful scrape of nvtopy", DATA_S, lambda: _values(server.query('up{job="nvtopy"}')) == [1.0], logs)
        _wait("data in every panel", DATA_S, lambda: _all_panels_have_data(server), logs)
        server.seconds_to_data = time.monotonic() - started
        yield server
    finally:
        _stop(prometheus)
        _stop(exporter)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Iterator[Server]:
    """Four simulated H100s, scraped by Prometheus."""
    with _prometheus_on_nvtopy(tmp_path_factory.mktemp("prometheus-plain")) as server:
        yield server


@pytest.fixture(scope="module")
def mig(tmp_path_factory) -> Iterator[Server]:
    """Four simulated H100s, GPU 1 split into three MIG instances, scraped by Prometheus."""
    with _prometheus_on_nvtopy(tmp_path_factory.mktemp("prometheus-mig"), "--demo-fault", "mig=3@1") as server:
        yield server


@pytest.mark.parametrize("setup", ["plain", "mig"])
@pytest.mark.parametrize(("panel", "query"), _queries(), ids=[name for name, _ in _queries()])
def test_every_panel_has_data(request, setup, panel, query):
    server: Server = request.getfixturevalue(setup)
    result = server.query(query)
    assert result, f"panel {panel!r} has no data: {query}"
    for value in _values(result):
        assert math.isfinite(value), (panel, value)
    title = panel.rsplit(" (", 1)[0]
    if panel.endswith("(current)"):
        for series in result:
            for label in LEGEND_LABELS.get(title, ()):
                assert series["metric"].get(label), f"{panel}: the legend's {{{{{label}}}}} is empty in {series}"


def test_the_series_have_the_labels_the_dashboard_groups_by(plain):
    result = plain.query('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~".*", gpu=~".*"}')
    assert sorted(series["metric"]["gpu"] for series in result) == ["0", "1", "2", "3"]
    for series in result:
        labels = series["metric"]
        assert labels["Hostname"] == "demo-node" and labels["UUID"].startswith("GPU-")
        assert labels["instance"] == plain.target and labels["job"] == "nvtopy"
        assert "GPU_I_ID" not in labels, "a whole GPU has no GPU instance label"
    values = _values(result)
    assert all(0 <= v <= 1 for v in values), f"percentunit: a ratio from 0 to 1, not percent: {values}"
    assert any(v > 0 for v in values), "the demo's jobs use tensor cores"
    for name in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"):
        assert all(0 <= v <= 1 for v in _values(plain.query(name))), name
    assert _values(plain.query("max(DCGM_FI_PROF_PCIE_RX_BYTES)"))[0] > 1 << 20, "bytes per second, not MiB/s"


def test_the_dashboards_variables_list_hosts_and_gpus(plain):
    """``label_values(DCGM_FI_DEV_FB_FREE, Hostname)`` and ``... {Hostname=~"$Hostname"}, gpu)``."""
    assert plain.label_values("Hostname", "DCGM_FI_DEV_FB_FREE") == ["demo-node"]
    assert plain.label_values("gpu", 'DCGM_FI_DEV_FB_FREE{Hostname=~".*"}') == ["0", "1", "2", "3"]
    assert plain.label_values("instance", "DCGM_FI_DEV_GPU_TEMP") == [plain.target]


def test_gpu_instances_have_their_own_series(mig):
    for name in ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"):
        result = mig.query(f'{name}{{GPU_I_ID!=""}}')
        assert sorted((s["metric"]["gpu"], s["metric"]["GPU_I_ID"]) for s in result) == [
            ("1", "1"),
            ("1", "2"),
            ("1", "3"),
        ], name
        assert {s["metric"]["GPU_I_PROFILE"] for s in result} == {"3g.40gb", "2g.20gb"}, name
        if name.startswith("DCGM_FI_PROF"):
            assert all(0 <= v <= 1 for v in _values(result)), name
    # The current dashboard's panel: one line per GPU and one per GPU instance ("GPU 1/2 (2g.20gb)").
    panel = dict(_queries())["Tensor Core Utilization (current)"]
    groups = sorted((s["metric"]["gpu"], s["metric"].get("GPU_I_ID", "")) for s in mig.query(panel))
    assert [g for g in groups if g[0] == "1"] == [("1", ""), ("1", "1"), ("1", "2"), ("1", "3")]
    assert [g for g in groups if g[0] != "1"] == [("0", ""), ("2", ""), ("3", "")]


def test_a_scrape_reaches_the_dashboard_within_seconds(plain, mig):
    """From a cold start of both processes to every panel filled (reported with -s; a bound for slow runners)."""
    print(f"\nevery panel had data {plain.seconds_to_data:.1f} s (MIG: {mig.seconds_to_data:.1f} s) after start")
    assert plain.seconds_to_data < STARTUP_S + DATA_S
