"""dcgm-exporter's naming generations read back: 3.3, 4.8 (``hostname``) and 4.9 (new names and units).

The golden captures (``tests/data/dcgm-exporter/<generation>.metrics``, written from the
documented names and units by that folder's ``build.py``, never by nvtopy's exporter) each
describe one machine -- two H100s, one in MIG mode with two GPU instances -- and
``<generation>.expected.json`` says what nvtopy must read of it. Read through
``--remote``'s path (:func:`parse_exposition`, then the model) and through ``--prometheus``'s
(:class:`PrometheusFleet` against the fake Prometheus of ``tests/prometheus_fixtures.py``),
field by field; and every generation to the same figures, alone or mixed in one fleet.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.model import GpuState
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.sources.remote.fleet import PrometheusFleet
from nvtopy.sources.remote.hostscrape import HostGpus
from nvtopy.sources.remote.prometheus import PrometheusClient
from nvtopy.sources.remote.prometheus_accounting import account, queries

from ...prometheus_fixtures import (
    DATA_S,
    FakePrometheus,
    Series,
    prometheus,
    requires_prometheus,
    scrape_config,
    served_expositions,
    targets_up,
    wait,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "dcgm-exporter"
GENERATIONS = ("3.3", "4.8", "4.9")
NOW = 1_795_000_000.0
_MIG_FIGURES = (
    "gpu_instance_id",
    "profile",
    "memory_total_bytes",
)
_MIG_USAGE = (
    "memory_used_bytes",
    "memory_free_bytes",
    "graphics_active_percent",
    "sm_active_percent",
    "sm_occupancy_percent",
    "tensor_active_percent",
    "dram_active_percent",
)


def capture(generation: str) -> str:
    return (DATA / f"{generation}.metrics").read_text(encoding="utf-8")


def expected(generation: str) -> dict[str, Any]:
    return json.loads((DATA / f"{generation}.expected.json").read_text(encoding="utf-8"))


def figures(gpu: GpuState) -> dict[str, Any]:
    """What expected.json says of a GPU, read off the model (the keys of the expected files)."""
    static, sample = gpu.static, gpu.sample
    said: dict[str, Any] = {"index": static.host_index}
    for key in ("uuid", "name", "bus_id", "memory_total_bytes", "mig_mode"):
        said[key] = getattr(static, key)
    for key in (
        "memory_used_bytes",
        "memory_free_bytes",
        "memory_reserved_bytes",
        "utilization_gpu_percent",
        "utilization_memory_percent",
        "encoder_percent",
        "decoder_percent",
        "clock_sm_mhz",
        "clock_mem_mhz",
        "temperature_c",
        "power_draw_w",
        "energy_mj",
        "pcie_replay_counter",
        "remapped_rows_corrected",
        "remapped_rows_uncorrected",
        "remapped_rows_failure",
        "graphics_active_percent",
        "sm_active_percent",
        "sm_occupancy_percent",
        "tensor_active_percent",
        "dram_active_percent",
        "gpm_pcie_tx_bytes_per_s",
        "gpm_pcie_rx_bytes_per_s",
    ):
        said[key] = getattr(sample, key)
    said["last_xid"] = gpu.health.last_xid
    usage = {u.index: u for u in sample.mig_usage or ()}
    said["mig_instances"] = [
        {
            "index": mig.index,
            **{key: getattr(mig, key) for key in _MIG_FIGURES},
            **{key: getattr(usage.get(mig.index), key, None) for key in _MIG_USAGE},
        }
        for mig in static.mig_instances
    ]
    return said


def assert_reads_as(gpus: list[GpuState], want: dict[str, Any], what: str) -> None:
    """Each GPU's figures as ``want`` says, field by field (floats to 1e-9: the units are converted)."""
    assert [g.static.host_index for g in gpus] == [g["index"] for g in want["gpus"]], what
    for gpu, wanted in zip(gpus, want["gpus"], strict=True):
        got = figures(gpu)
        assert set(got) == set(wanted), (what, set(got) ^ set(wanted))
        for key, value in wanted.items():
            if key == "mig_instances":
                assert len(got[key]) == len(value), (what, gpu.static.host_index, key)
                for mine, theirs in zip(got[key], value, strict=True):
                    for name, figure in theirs.items():
                        assert mine[name] == pytest.approx(figure, rel=1e-9), (what, key, name, mine[name], figure)
                continue
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=1e-9), (what, gpu.static.host_index, key, got[key])
            else:
                assert got[key] == value, (what, gpu.static.host_index, key, got[key], value)
                assert isinstance(got[key], bool) == isinstance(value, bool), (what, key, got[key])


def remote_read(text: str, url: str = "http://10.0.0.7:9400/metrics") -> tuple[Any, list[GpuState]]:
    """``--remote``'s reading of one exposition: the scrape and its GPUs in the model."""
    scrape = parse_exposition(text, url)
    return scrape, HostGpus().gpus(scrape, 0, NOW)


@pytest.mark.parametrize("generation", GENERATIONS)
def test_remote_reads_each_generation_as_expected(generation):
    scrape, gpus = remote_read(capture(generation))
    want = expected(generation)
    assert scrape.hostname == want["hostname"], "the host label, Hostname or hostname"
    assert scrape.driver_version == want["driver_version"], "the driver label, either spelling"
    assert scrape.note is None
    assert_reads_as(gpus, want, f"--remote {generation}")


def test_every_generation_reads_to_the_same_figures():
    """A clock in Hz is not 1,980,000,000 MHz, a ratio not 0.87 %: the three captures of one machine read alike."""
    read = {generation: [figures(g) for g in remote_read(capture(generation))[1]] for generation in GENERATIONS}
    for generation in ("4.8", "4.9"):
        assert_reads_as(remote_read(capture(generation))[1], {"gpus": read["4.8"]}, f"4.8 vs {generation}")
    for mine, theirs in zip(read["3.3"], read["4.8"], strict=True):  # 3.3 has no FB_RESERVED row
        assert {k: v for k, v in mine.items() if k != "memory_reserved_bytes"} == {
            k: v for k, v in theirs.items() if k != "memory_reserved_bytes"
        }
    assert read["4.9"][0]["clock_sm_mhz"] == 1980 and read["4.9"][0]["utilization_gpu_percent"] == 87


def test_the_captures_are_what_each_generation_names():
    """The goldens themselves: 4.9's names, units and labels in 4.9's capture only (a check on the data)."""
    legacy, new = capture("4.8"), capture("4.9")
    assert 'Hostname="' in capture("3.3") and 'hostname="' not in capture("3.3")
    assert 'hostname="' in legacy and 'DCGM_FI_DRIVER_VERSION="' in legacy
    assert 'DCGM_FI_SYSTEM_DRIVER_VERSION="' in new and "DCGM_FI_DEV_SM_CLOCK{" not in new
    assert re.search(r"^DCGM_FI_DEV_SM_CLOCK_HERTZ\{gpu=\"0\".*\} 1980000000$", new, re.MULTILINE)
    assert "# TYPE DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL counter" in new
    assert 'GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",hostname=' in new, "dcgm-exporter's label order"


def test_a_4_9_counter_typed_counter_or_gauge_reads_the_same():
    """prometheus-client's parser names a counter X's sample X_total (4.9's X_TOTAL too): read either way."""
    text = capture("4.9")
    as_gauges = text.replace("counter\n", "gauge\n")
    assert as_gauges != text
    assert_reads_as(remote_read(as_gauges)[1], expected("4.9"), "4.9 counters typed gauge")


def test_the_uuid_label_of_the_old_namespace_is_read():
    """dcgm-exporter's ``--use-old-namespace`` writes ``uuid``."""
    _, gpus = remote_read(capture("4.9").replace("UUID=", "uuid="))
    assert [g.static.uuid for g in gpus] == [g["uuid"] for g in expected("4.9")["gpus"]]


# ----------------------------------------------------------------- through a Prometheus server (the fake)

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')


def stored(text: str, instance: str, timestamp: float) -> list[Series]:
    """What Prometheus stores of one scrape of a golden capture: each sample under the name it is exposed with
    (prometheus-client's parser would rename the counters; Prometheus does not), with ``instance`` and ``job``."""
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            assert line.startswith("#"), line
            continue
        name, labels, value = match.groups()
        found.append(
            Series(
                {"__name__": name, **dict(_LABEL.findall(labels)), "instance": instance, "job": "dcgm"},
                float(value),
                timestamp,
            )
        )
    return found


@pytest.fixture
def fake():
    with FakePrometheus() as server:
        server.now = NOW
        yield server


@pytest.mark.parametrize("generation", GENERATIONS)
def test_the_fleet_reads_each_generation_as_expected(fake, generation):
    fake.set_series(stored(capture(generation), "10.0.0.7:9400", NOW - 1))
    snapshot = PrometheusFleet(fake.url, timeout=5.0).read_once()
    want = expected(generation)
    assert {g.static.host for g in snapshot.gpus} == {want["hostname"]}
    assert snapshot.host.driver_version == want["driver_version"]
    assert_reads_as(list(snapshot.gpus), want, f"--prometheus {generation}")


def test_a_fleet_in_the_middle_of_an_upgrade_shows_every_gpu_once_with_the_same_figures(fake):
    """Three hosts, one per generation (Hostname, hostname, 4.9's names): each GPU once, the same figures."""
    series = []
    for n, generation in enumerate(GENERATIONS):
        text = capture(generation).replace("gpu-node-07", f"gpu-node-{n}")
        series += stored(text, f"10.0.0.{n}:9400", NOW - 1)
    fake.set_series(series)
    fleet = PrometheusFleet(fake.url, timeout=5.0)
    snapshot = fleet.read_once()
    assert "Hostname" not in fake.queries[-1] and "hostname" not in fake.queries[-1], (
        "one host name an instance: the answer leaves both spellings out"
    )
    hosts = [g.static.host for g in snapshot.gpus]
    assert hosts == ["gpu-node-0", "gpu-node-0", "gpu-node-1", "gpu-node-1", "gpu-node-2", "gpu-node-2"]
    assert snapshot.host.driver_version == "570.172.08"
    for n, generation in enumerate(GENERATIONS):
        mine = [g for g in snapshot.gpus if g.static.host == f"gpu-node-{n}"]
        assert_reads_as(mine, expected(generation), f"mixed fleet, {generation}")


def test_two_generations_behind_one_instance_stay_two_hosts(fake):
    """A federating target with a 4.8 and a 4.9 host: the host label (either spelling) tells them apart."""
    series = stored(capture("4.8").replace("gpu-node-07", "left"), "10.0.9.9:9400", NOW - 1)
    series += stored(capture("4.9").replace("gpu-node-07", "right"), "10.0.9.9:9400", NOW - 1)
    fake.set_series(series)
    snapshot = PrometheusFleet(fake.url, timeout=5.0).read_once()
    assert "hostname" in fake.queries[-1] and "Hostname" in fake.queries[-1]
    assert [g.static.host for g in snapshot.gpus] == ["left", "left", "right", "right"]
    for host, generation in (("left", "4.8"), ("right", "4.9")):
        assert_reads_as([g for g in snapshot.gpus if g.static.host == host], expected(generation), host)


def test_a_4_9_host_is_refreshed_with_its_timed_groups_kept(fake):
    """Later refreshes ask for the timed groups due only: the 4.9 counters (energy, replays, rows) keep their values."""
    fake.set_series(stored(capture("4.9"), "10.0.0.7:9400", NOW - 1))
    fleet = PrometheusFleet(fake.url, timeout=5.0)
    want = expected("4.9")
    for step in range(5):
        fake.now = NOW + step
        fake.set_series(stored(capture("4.9"), "10.0.0.7:9400", NOW + step - 1))
        snapshot = fleet.poll_once()
        assert_reads_as(list(snapshot.gpus), want, f"refresh {step}")


# ----------------------------------------------------------------- through a real Prometheus


def _per_host(gpus: list[GpuState]) -> dict[str, list[GpuState]]:
    hosts: dict[str, list[GpuState]] = {}
    for gpu in gpus:
        hosts.setdefault(gpu.static.host or "", []).append(gpu)
    return hosts


@requires_prometheus
@pytest.mark.real_server
def test_a_4_8_and_a_4_9_host_through_a_real_prometheus_read_alike(tmp_path):
    """Two hosts, one serving the 4.8 capture, the other the 4.9 one, scraped by a real Prometheus every second.

    ``--prometheus`` shows every GPU once with the figures each capture must read to (so the same on both);
    ``--remote`` over both URLs too; ``report --prometheus`` gives both hosts the same figures.
    """
    names = {"4.8": "gpu-node-48", "4.9": "gpu-node-49"}
    uuid = expected("4.9")["gpus"][0]["uuid"]
    # One process on GPU 0 (nvtopy's series, beside dcgm-exporter's): the report's rows are per held GPU.
    process = (
        'nvtopy_process_gpu_memory_bytes{{gpu="0",UUID="{}",pid="4242",type="C",user="alice",hostname="{}"}} 1e9\n'
    )
    bodies = [
        (capture(g).replace("gpu-node-07", name) + process.format(uuid, name)).encode() for g, name in names.items()
    ]
    logs: list[Path] = []
    with (
        served_expositions(bodies) as targets,
        prometheus(tmp_path, scrape_config(targets, job="dcgm"), targets, logs) as server,
    ):
        wait("both exporters scraped", DATA_S, lambda: targets_up(server, job="dcgm"), logs)
        every = "count(DCGM_FI_DEV_FB_USED or DCGM_FI_DEV_FB_USED_BYTES)"  # a whole GPU and two GPU instances a host
        wait("both hosts' GPUs in Prometheus", DATA_S, lambda: server.values(every) == [6.0], logs)
        snapshot = PrometheusFleet(server.url, timeout=10.0).read_once()
        hosts = _per_host(list(snapshot.gpus))
        assert list(hosts) == list(names.values()), [(g.static.host, g.note) for g in snapshot.gpus]
        for generation, name in names.items():
            assert_reads_as(hosts[name], expected(generation), f"--prometheus, {generation}")
        assert [figures(g) for g in hosts["gpu-node-48"]] == [figures(g) for g in hosts["gpu-node-49"]]
        assert snapshot.host.driver_version == "570.172.08"

        remote = RemoteHosts(targets, interval=5.0, timeout=5.0)
        try:
            scraped = _per_host(list(remote.poll_once().gpus))
        finally:
            remote.stop()
        assert list(scraped) == list(names.values()), [(g.static.host, g.note) for g in scraped.get("", [])]
        for generation, name in names.items():
            assert_reads_as(scraped[name], expected(generation), f"--remote, {generation}")

        history = "count_over_time(up[10s])"  # scrapes of each target in the last 10 s
        wait("a few seconds of history", DATA_S, lambda: [v >= 9 for v in server.values(history)] == [True] * 2, logs)
        end = time.time()
        report = account(PrometheusClient(server.url, timeout=10.0), by=("host",), start=end - 8, end=end, step=1.0)
        # The report's own PromQL, asked of the server at one instant: each host's GPU 0 in the legacy unit.
        for figure, value in (
            ("energy", 8716204113.0),
            ("utilization", 87.0),
            ("power", 412.537),
            ("sm_active", 0.8825),
        ):
            said = {s["metric"]["hostname"]: float(s["value"][1]) for s in server.query(queries(5.0)[figure])}
            assert said == pytest.approx(dict.fromkeys(names.values(), value), rel=1e-9), figure
    rows = {row.key[0]: row for row in report.rows}
    assert sorted(rows) == sorted(names.values()), report
    left, right = rows["gpu-node-48"], rows["gpu-node-49"]
    assert left.gpus == right.gpus == 1, "GPU 0; the MIG GPU has GPU instances' series only"
    assert left.held_gpu_hours > 0 and left.busy_gpu_hours == pytest.approx(left.held_gpu_hours * 0.8825)
    for figure in ("held_gpu_hours", "busy_gpu_hours", "idle_held_gpu_hours", "energy_kwh", "peak_memory_bytes"):
        assert getattr(left, figure) == pytest.approx(getattr(right, figure), rel=1e-6, abs=1e-12), figure
