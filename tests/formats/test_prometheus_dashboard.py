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

dcgm-exporter 4.9's names (``--names dcgm-4.9``): the same panels rewritten to 4.9's names,
units and ``hostname`` label (:data:`PANELS_4_9`, the unit conversion in the query) have data
on ``nvtopy exporter --demo --names dcgm-4.9``, where the legacy panels have none; and one
snapshot (:func:`~tests.builders.every_field_snapshot`) served in both namings to one
Prometheus gives each legacy panel and its rewrite the same numbers (within 1e-9).

Skipped where ``prometheus`` is not on PATH (Debian: ``apt-get install prometheus``;
``.ci/run`` installs it where it can). Every wait has a deadline, and both processes
are stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvtopy.formats.dcgm_naming import LEGACY, NAMING_4_9, Naming
from nvtopy.formats.prometheus.expose import Exposition

from ..builders import LatestSource, every_field_snapshot
from ..prometheus_fixtures import (
    DATA_S,
    STARTUP_S,
    Server,
    prometheus,
    requires_prometheus,
    scrape_config,
    served_expositions,
    start_exporter,
    stop,
    targets_up,
    wait,
)

# One pytest-xdist group for the whole module: test_every_panel_has_data asks for its server (plain or mig, module
# scoped) by name, which tests/conftest.py cannot see, so its cases were spread over every worker and each worker
# started its own Prometheus and exporter again (11 set-ups of about 6 s in one run, for 3 servers).
pytestmark = [requires_prometheus, pytest.mark.real_server, pytest.mark.xdist_group("test_prometheus_dashboard")]

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
# The same panels for dcgm-exporter 4.9's names: its units converted back to what each panel shows (the SM clock
# is in Hz already: no * 1000000; utilisation is a ratio: * 100; the framebuffer in bytes: / 1048576) and its
# ``hostname`` label for ``Hostname``. ``$Hostname`` is the dashboard's variable, which keeps its name.
PANELS_4_9: tuple[tuple[str, str, str], ...] = (
    (
        "GPU Temperature",
        'DCGM_FI_DEV_GPU_TEMP_CELSIUS{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_DEV_GPU_TEMP_CELSIUS{hostname=~"$Hostname", gpu=~"$gpu"}) by (hostname, gpu, uuid)',
    ),
    (
        "GPU Avg. Temp",
        'avg(DCGM_FI_DEV_GPU_TEMP_CELSIUS{instance=~"$instance", gpu=~"$gpu"})',
        'avg(DCGM_FI_DEV_GPU_TEMP_CELSIUS{hostname=~"$Hostname", gpu=~"$gpu"})',
    ),
    (
        "GPU Power Usage",
        'DCGM_FI_DEV_BOARD_POWER_WATTS{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_DEV_BOARD_POWER_WATTS{hostname=~"$Hostname", gpu=~"$gpu"}) by (hostname, gpu, uuid)',
    ),
    (
        "GPU Power Total",
        'sum(DCGM_FI_DEV_BOARD_POWER_WATTS{instance=~"$instance", gpu=~"$gpu"})',
        'sum(max(DCGM_FI_DEV_BOARD_POWER_WATTS{hostname=~"$Hostname", gpu=~"$gpu"}) by (gpu))',
    ),
    (
        "GPU SM Clocks",
        'DCGM_FI_DEV_SM_CLOCK_HERTZ{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_DEV_SM_CLOCK_HERTZ{hostname=~"$Hostname", gpu=~"$gpu"}) by (hostname, UUID, gpu)',
    ),
    (
        "GPU Utilization",
        'DCGM_FI_DEV_GPU_UTIL_RATIO{instance=~"$instance", gpu=~"$gpu"} * 100',
        'max(DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO{hostname=~"$Hostname", gpu=~"$gpu"})'
        " by (hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    ),
    (
        "GPU Framebuffer Mem Used",
        'DCGM_FI_DEV_FB_USED_BYTES{instance=~"$instance", gpu=~"$gpu"} / 1048576',
        'max(DCGM_FI_DEV_FB_USED_BYTES{hostname=~"$Hostname", gpu=~"$gpu"} / 1048576)'
        " by (hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    ),
    (
        "Tensor Core Utilization",
        'DCGM_FI_PROF_TENSOR_UTIL_RATIO{instance=~"$instance", gpu=~"$gpu"}',
        'max(DCGM_FI_PROF_TENSOR_UTIL_RATIO{hostname=~"$Hostname", gpu=~"$gpu"})'
        " by (hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    ),
)
assert [title for title, _, _ in PANELS_4_9] == [title for title, _, _ in PANELS]
ALL = ".*"  # Grafana's "All" for a variable


def _fill(query: str, instance: str = ALL, host: str = ALL) -> str:
    """``query`` with the dashboard's variables set: ``$gpu`` at "All", the instance and host as given."""
    return query.replace("$instance", instance).replace("$Hostname", host).replace("$gpu", ALL)


def _queries() -> list[tuple[str, str]]:
    """(panel and form, its query with every variable at "All")."""
    return [
        (f"{title} ({form})", _fill(query))
        for title, old, new in PANELS
        for form, query in (("older", old), ("current", new))
    ]


def _all_panels_have_data(server: Server) -> bool:
    return all(_values(server.query(q)) for _, q in _queries())


def _values(result: list[dict[str, Any]]) -> list[float]:
    return [float(series["value"][1]) for series in result]


@contextlib.contextmanager
def _prometheus_on_nvtopy(tmp: Path, *exporter_args: str) -> Iterator[Server]:
    logs: list[Path] = []
    started = time.monotonic()
    exporter, target = start_exporter(tmp, "exporter", *exporter_args, logs=logs)
    try:
        with prometheus(tmp, scrape_config([target]), [target], logs) as server:
            wait("a successful scrape of nvtopy", DATA_S, lambda: targets_up(server), logs)
            wait("data in every panel", DATA_S, lambda: _all_panels_have_data(server), logs)
            server.seconds_to_data = time.monotonic() - started
            yield server
    finally:
        stop(exporter)


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


# ----------------------------------------------------------------- dcgm-exporter 4.9's names


def _panel_queries(panels: tuple[tuple[str, str, str], ...], instance: str, host: str) -> list[tuple[str, str]]:
    """(panel and form, its query) of ``panels`` with the variables selecting one exporter: its instance and host."""
    return [
        (f"{title} ({form})", _fill(query, instance, host))
        for title, old, new in panels
        for form, query in (("older", old), ("current", new))
    ]


def _exposition(naming: Naming) -> bytes:
    """What ``nvtopy exporter --names <naming>`` answers for :func:`every_field_snapshot` (host node-7)."""
    snapshot = every_field_snapshot()
    return b"".join(Exposition(LatestSource(snapshot), naming=naming).chunks())


class Named:
    """One Prometheus scraping ``nvtopy exporter --demo --names dcgm-4.9`` and one snapshot served in both namings."""

    def __init__(self, server: Server, exporter: str, legacy: str, new: str) -> None:
        self.server = server
        self.exporter = exporter  # the real exporter's instance (host demo-node)
        self.legacy = legacy  # the snapshot's legacy exposition (host node-7)
        self.new = new  # the same snapshot's 4.9 exposition (host node-7)

    def exporter_panels(self, panels: tuple[tuple[str, str, str], ...]) -> list[tuple[str, str]]:
        return _panel_queries(panels, self.exporter, "demo-node")


@pytest.fixture(scope="module")
def named(tmp_path_factory) -> Iterator[Named]:
    tmp = tmp_path_factory.mktemp("prometheus-names")
    logs: list[Path] = []
    exporter, target = start_exporter(tmp, "exporter-4.9", "--names", "dcgm-4.9", logs=logs)
    try:
        with served_expositions([_exposition(LEGACY), _exposition(NAMING_4_9)]) as (legacy, new):
            targets = [target, legacy, new]
            with prometheus(tmp, scrape_config(targets), targets, logs) as server:
                found = Named(server, target, legacy, new)
                queries = [
                    *found.exporter_panels(PANELS_4_9),
                    *_panel_queries(PANELS, legacy, "node-7"),
                    *_panel_queries(PANELS_4_9, new, "node-7"),
                ]
                wait("a successful scrape of every target", DATA_S, lambda: targets_up(server), logs)
                wait("data in every panel", DATA_S, lambda: all(_values(server.query(q)) for _, q in queries), logs)
                yield found
    finally:
        stop(exporter)


@pytest.mark.parametrize("index", range(len(PANELS) * 2), ids=[name for name, _ in _panel_queries(PANELS, "", "")])
def test_the_4_9_panels_have_data_on_a_4_9_exporter_and_the_legacy_ones_none(named, index):
    panel, query = named.exporter_panels(PANELS_4_9)[index]
    result = named.server.query(query)
    assert result, f"panel {panel!r} has no data: {query}"
    assert all(math.isfinite(v) for v in _values(result)), (panel, result)
    if panel.endswith("(current)"):
        for series in result:
            for label in LEGEND_LABELS.get(panel.rsplit(" (", 1)[0], ()):
                label = "hostname" if label == "Hostname" else label
                assert series["metric"].get(label), f"{panel}: the legend's {{{{{label}}}}} is empty in {series}"
    legacy_panel, legacy_query = named.exporter_panels(PANELS)[index]
    assert not named.server.query(legacy_query), f"{legacy_panel}: legacy names on a dcgm-4.9 exporter"


def _by_series(result: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], float]:
    """Each series of an answer by its labels, in 4.9's spelling, without the target's and the metric's name."""
    rename = {"Hostname": "hostname", "DCGM_FI_DRIVER_VERSION": "DCGM_FI_SYSTEM_DRIVER_VERSION"}
    found = {}
    for series in result:
        labels = series["metric"]
        key = tuple(sorted((rename.get(k, k), v) for k, v in labels.items() if k not in ("__name__", "instance")))
        assert key not in found, key
        found[key] = float(series["value"][1])
    return found


@pytest.mark.parametrize("index", range(len(PANELS) * 2), ids=[name for name, _ in _panel_queries(PANELS, "", "")])
def test_each_panel_and_its_4_9_rewrite_give_the_same_numbers(named, index):
    """One snapshot in both namings: a legacy panel on the legacy exposition equals its rewrite on the 4.9 one."""
    panel, legacy_query = _panel_queries(PANELS, named.legacy, "node-7")[index]
    _, new_query = _panel_queries(PANELS_4_9, named.new, "node-7")[index]
    legacy, new = _by_series(named.server.query(legacy_query)), _by_series(named.server.query(new_query))
    assert legacy, f"{panel}: no data to compare ({legacy_query})"
    assert legacy.keys() == new.keys(), panel
    for key, value in legacy.items():
        assert math.isclose(new[key], value, rel_tol=1e-9), (panel, key, value, new[key])
