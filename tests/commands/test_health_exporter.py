"""GPU health on the wire: the exporter's series, parsed back with prometheus-client's parser, and ``--remote``.

Expected values come from the hand-built snapshot of :mod:`tests.formats.test_health_formats`
and dcgm-exporter's units written out here (1/0 flags, the last Xid, 0 when none),
not from :mod:`nvtopy.formats.dcgm`, so a wrong attribute or unit in the tables
fails here. A scrape must never wait on the driver: it renders ``source.latest``
and nothing else, so a GPU whose driver call hangs does not stop the answers.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.commands.exporter.server import serve
from nvtopy.formats.dcgm import BY_NAME
from nvtopy.formats.dcgm_naming import LEGACY
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.formats.prometheus.series import NVTOPY_BY_NAME
from nvtopy.model import GpuEvent, GpuHealth, Severity, Snapshot
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.textsafe import unescape_text

from ..formats.test_health_formats import FAILING, GIB, LINKS, NOW, PEER, READINGS, STALLED, UNWATCHED, health_snapshot
from ..prometheus_fixtures import shutdown_server
from .test_exporter import Scrape, _free_port, _running, _stop, _wait_for_metrics, http_get

LINK_LABELS = {"gpu", "UUID", "Hostname", "link"}


class LatestOnly:
    """A snapshot source that has ``latest`` and nothing else: a scrape touching more would fail here."""

    def __init__(self, snapshot: Snapshot | None) -> None:
        self.latest = snapshot

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the scrape path read source.{name}: only `latest` may be read")


def exposition(snapshot: Snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(LatestOnly(snapshot)))
    return generate_latest(registry).decode("utf-8")


@pytest.fixture(scope="module")
def scrape() -> Scrape:
    return Scrape(exposition(health_snapshot()))


# --------------------------------------------------------------------------- dcgm-exporter's names


# dcgm name -> the value expected for GPU 0 (failing) of the hand-built snapshot, in dcgm-exporter's unit.
DCGM_HEALTH = {
    "DCGM_FI_DEV_XID_ERRORS": 119,  # the last Xid
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 4711,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 3,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": 1,
    "DCGM_FI_DEV_RETIRED_SBE": 2,
    "DCGM_FI_DEV_RETIRED_DBE": 1,
    "DCGM_FI_DEV_RETIRED_PENDING": 0,  # False is a reading: 0, not left out
    "DCGM_FI_DEV_PCIE_LINK_GEN": 3,
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": 8,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5,
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 16,
}


def test_dcgm_health_series_in_dcgms_units(scrape):
    for name, expected in DCGM_HEALTH.items():
        assert scrape.value(name, gpu="0") == expected, name
        (sample,) = scrape.samples(name, gpu="0")
        attributes = {"err_code", "err_msg"} if name == "DCGM_FI_DEV_XID_ERRORS" else set()  # dcgm-exporter's
        assert set(sample.labels) == set(LEGACY.gpu_labels) | attributes, name
        assert f"# TYPE {name} gauge" in scrape.text, "dcgm's exact name, typed gauge like its other counters"


def test_last_xid_is_zero_when_none_came_and_left_out_when_not_watched(scrape):
    assert scrape.value("DCGM_FI_DEV_XID_ERRORS", gpu="3") == 0, "events watched, no Xid: 0"
    assert scrape.samples("DCGM_FI_DEV_XID_ERRORS", gpu="2") == [], "events not watched: unknown, not 0"


def test_unknown_readings_are_left_out_never_zero(scrape):
    for name in DCGM_HEALTH:
        assert scrape.samples(name, gpu="2") == [], name
    for name in ("nvtopy_nvlink_rx_bytes_per_second", "nvtopy_gpu_idle_held_bytes", "nvtopy_gpu_stalled_seconds"):
        assert scrape.samples(name, gpu="2") == [], name
    assert [s.labels["link"] for s in scrape.samples("nvtopy_nvlink_link_rx_bytes_per_second", gpu="0")] == ["0", "2"]


def test_nvlink_bandwidth_total_is_not_exported(scrape):
    """Its unit and type are disputed (dcgm.py says why): NVLink throughput is under nvtopy's names."""
    assert not [name for name in scrape.families if name.startswith("DCGM_FI_DEV_NVLINK")]


def test_nvmls_pcie_and_nvlink_throughput_never_pass_for_profiling_fields(scrape):
    """DCGM_FI_PROF_{PCIE,NVLINK}_* come from GPM only (none here): NVML's throughput keeps nvtopy's names."""
    assert scrape.samples("nvtopy_pcie_rx_bytes_per_second"), "NVML's PCIe throughput is exported"
    for name in scrape.families:
        if name.startswith(("DCGM_FI_PROF_PCIE", "DCGM_FI_PROF_NVLINK")):
            assert scrape.samples(name) == [], name


# --------------------------------------------------------------------------- nvtopy's names


def test_verdict_responding_and_stall(scrape):
    assert [scrape.value("nvtopy_gpu_health", gpu=str(i)) for i in range(4)] == [2, 2, 0, 0]
    assert [scrape.value("nvtopy_gpu_responding", gpu=str(i)) for i in range(4)] == [1, 0, 1, 1]
    assert scrape.value("nvtopy_gpu_stalled_seconds", gpu="1") == STALLED.stalled_seconds
    assert [s.labels["gpu"] for s in scrape.samples("nvtopy_gpu_stalled_seconds")] == ["1"]
    assert scrape.value("nvtopy_gpu_idle_held_bytes", gpu="0") == 20 * GIB
    assert scrape.value("nvtopy_gpu_suspected_hang_seconds", gpu="0") == FAILING.suspected_hang_seconds
    (sample,) = scrape.samples("nvtopy_gpu_health", gpu="0")
    assert set(sample.labels) == set(LEGACY.gpu_labels)


def test_a_stuck_gpu_keeps_its_last_values(scrape):
    assert scrape.value("DCGM_FI_DEV_GPU_TEMP", gpu="1") == 71
    assert scrape.value("DCGM_FI_DEV_PCIE_LINK_GEN", gpu="1") == 5


def test_xid_events_are_a_counter_per_xid(scrape):
    family = scrape.families["nvtopy_xid_events"]
    assert family.type == "counter"
    counts = {s.labels["xid"]: s.value for s in family.samples if s.labels["gpu"] == "0"}
    assert counts == {"13": 1, "79": 2, "119": 1}
    assert all(s.name == "nvtopy_xid_events_total" for s in family.samples)
    assert {s.labels["gpu"] for s in family.samples} == {"0"}, "no Xid, no series"
    assert set(family.samples[0].labels) == {*LEGACY.gpu_labels, "xid"}


def test_xid_counter_only_grows_across_snapshots():
    snapshot = health_snapshot()
    first = Scrape(exposition(snapshot))
    more = dataclasses.replace(FAILING, xid_counts=((13, 1), (79, 3), (119, 1), (48, 1)))
    gpus = (dataclasses.replace(snapshot.gpus[0], health=more), *snapshot.gpus[1:])
    second = Scrape(exposition(dataclasses.replace(snapshot, gpus=gpus)))
    before = {s.labels["xid"]: s.value for s in first.samples("nvtopy_xid_events", gpu="0")}
    after = {s.labels["xid"]: s.value for s in second.samples("nvtopy_xid_events", gpu="0")}
    assert all(after[xid] >= count for xid, count in before.items())
    assert after["79"] == 3 and after["48"] == 1


def test_pcie_and_nvlink_throughput_in_bytes_per_second(scrape):
    assert scrape.value("nvtopy_pcie_rx_bytes_per_second", gpu="0") == 1_000_000
    assert scrape.value("nvtopy_pcie_tx_bytes_per_second", gpu="0") == 2_000_000
    assert scrape.value("nvtopy_nvlink_rx_bytes_per_second", gpu="0") == READINGS["nvlink_rx_bytes_per_s"]
    assert scrape.value("nvtopy_nvlink_tx_bytes_per_second", gpu="0") == READINGS["nvlink_tx_bytes_per_s"]


def test_per_link_state_throughput_and_errors(scrape):
    active = scrape.samples("nvtopy_nvlink_link_active", gpu="0")
    assert [(s.labels["link"], s.value) for s in active] == [("0", 1), ("1", 0), ("2", 1)]
    assert set(active[0].labels) == LINK_LABELS | {"remote"}
    assert active[0].labels["remote"] != PEER and unescape_text(active[0].labels["remote"]) == PEER
    assert active[1].labels["remote"] == ""
    rx = {s.labels["link"]: s.value for s in scrape.samples("nvtopy_nvlink_link_rx_bytes_per_second", gpu="0")}
    assert rx == {"0": LINKS[0].rx_bytes_per_s, "2": LINKS[2].rx_bytes_per_s}
    tx = scrape.samples("nvtopy_nvlink_link_tx_bytes_per_second", gpu="0")
    assert set(tx[0].labels) == LINK_LABELS
    errors = scrape.families["nvtopy_nvlink_link_errors"]
    assert errors.type == "counter"
    assert {s.labels["link"]: s.value for s in errors.samples if s.labels["gpu"] == "0"} == {"0": 0, "1": 17, "2": 2}
    assert scrape.samples("nvtopy_nvlink_link_active", gpu="3") == [], "a board without NVLink has no link series"


def test_process_idle_held_seconds(scrape):
    samples = scrape.samples("nvtopy_process_idle_held_seconds")
    assert [(s.labels["pid"], s.value) for s in samples] == [("101", 754.5)]
    assert samples[0].labels["gpu"] == "0" and samples[0].labels["command"] == "python train.py"


def test_a_lost_gpu_keeps_its_health_series():
    snapshot = health_snapshot()
    gone = dataclasses.replace(
        snapshot.gpus[0],
        sample=dataclasses.replace(snapshot.gpus[0].sample, lost=True),
        health=dataclasses.replace(FAILING, events=(*FAILING.events, GpuEvent(NOW, 0, "xid", 79))),
    )
    scrape = Scrape(exposition(dataclasses.replace(snapshot, gpus=(gone, *snapshot.gpus[1:]))))
    assert scrape.value("nvtopy_gpu_lost", gpu="0") == 1
    assert scrape.value("nvtopy_gpu_health", gpu="0") == 2, "a GPU that fell off the bus is the one to alert on"
    assert len(scrape.samples("nvtopy_xid_events", gpu="0")) == 3
    assert [s for s in scrape.dcgm_samples() if s.labels["gpu"] == "0"] == [], "no stale dcgm values"
    assert scrape.samples("nvtopy_nvlink_link_active", gpu="0") == []


# --------------------------------------------------------------------------- never waiting on the driver


def test_scrapes_answer_while_a_driver_call_hangs():
    """A GPU whose driver call hangs (the poller's thread is stuck): scrapes keep answering at once."""
    stuck = threading.Event()
    source = LatestOnly(health_snapshot())

    def hung_poll() -> None:  # what a poll stuck in the driver looks like: it never returns
        stuck.wait(30)

    poller = threading.Thread(target=hung_poll, daemon=True)
    poller.start()
    server, _ = serve(source, "127.0.0.1", 0)
    try:
        for _ in range(3):
            started = time.monotonic()
            status, _, body = http_get(f"http://127.0.0.1:{server.server_address[1]}/metrics")
            assert status == 200 and time.monotonic() - started < 2.0
            assert Scrape(body).value("nvtopy_gpu_responding", gpu="1") == 0
    finally:
        stuck.set()
        shutdown_server(server)


def test_exporter_with_a_hung_simulated_gpu_keeps_answering():
    """End to end: ``--demo-fault hang`` blocks every read of GPU 1; GPU 0 stays live, GPU 1 says it is stuck."""
    port = _free_port()
    args = ("--demo", "--demo-gpus", "2", "--demo-fault", "hang=60:1@1", "--timeout", "1", "--interval", "0.3")
    with _running(*args, "--listen", f"127.0.0.1:{port}") as proc:
        _wait_for_metrics(proc, port)
        deadline = time.monotonic() + 20
        while True:
            started = time.monotonic()
            status, _, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            assert status == 200 and time.monotonic() - started < 2.0, "a scrape never waits on the hung GPU"
            scrape = Scrape(body)
            if scrape.samples("nvtopy_gpu_responding", gpu="1") and not scrape.value("nvtopy_gpu_responding", gpu="1"):
                break
            assert time.monotonic() < deadline, "GPU 1 never reported as not responding"
            time.sleep(0.2)
        assert scrape.value("nvtopy_gpu_responding", gpu="0") == 1
        assert scrape.value("nvtopy_gpu_health", gpu="1") >= 1
        assert scrape.value("nvtopy_gpu_stalled_seconds", gpu="1") >= 1
        assert len(scrape.samples("DCGM_FI_DEV_GPU_TEMP", gpu="1")) == 1, "its last values stay"
        code, stderr = _stop(proc)
    assert code == 0, stderr


# --------------------------------------------------------------------------- read back: --remote


def remote_gpus(text: str, hosts: RemoteHosts | None = None):
    hosts = hosts or RemoteHosts(["node7:9400"])
    scrape = parse_exposition(text, hosts.urls[0])
    return hosts, hosts._snapshot([scrape]).gpus


def test_remote_reads_nvtopys_health_back():
    _, gpus = remote_gpus(exposition(health_snapshot()))
    failing, stalled, unwatched, quiet = (gpu.health for gpu in gpus)
    assert failing.verdict is Severity.FAIL and failing.responding
    assert failing.last_xid == 119 and failing.xid_counts == ((13, 1), (79, 2), (119, 1))
    assert failing.idle_held_bytes == 20 * GIB and failing.suspected_hang_seconds == 95.5
    assert (stalled.verdict, stalled.responding, stalled.stalled_seconds) == (Severity.FAIL, False, 12.75)
    assert unwatched.verdict is Severity.OK and unwatched.last_xid is None
    assert quiet.last_xid is None and quiet.events == ()
    assert gpus[0].sample.pcie_replay_counter == 4711 and gpus[0].sample.remapped_rows_failure is True
    assert gpus[0].sample.retired_pages_pending is False
    assert gpus[0].static.pcie_link_gen_max == 5 and gpus[0].sample.pcie_link_width == 8
    assert gpus[0].sample.nvlink_rx_bytes_per_s == READINGS["nvlink_rx_bytes_per_s"]
    assert gpus[0].sample.pcie_tx_bytes_per_s == 2_000_000
    assert [p.idle_seconds for p in gpus[0].processes] == [754.5, None, None]


def test_remote_dates_the_last_xid_when_first_seen():
    hosts, first = remote_gpus(exposition(health_snapshot()))
    (event,) = first[0].health.events
    assert (event.xid, event.gpu_index, event.kind) == (119, first[0].index, "xid")
    time.sleep(0.01)
    _, again = remote_gpus(exposition(health_snapshot()), hosts)
    assert again[0].health.events[0].timestamp == event.timestamp, "the same Xid keeps its date"
    snapshot = health_snapshot()
    newer = dataclasses.replace(FAILING, events=(*FAILING.events, GpuEvent(NOW, 0, "xid", 48)))
    changed = dataclasses.replace(
        snapshot, gpus=(dataclasses.replace(snapshot.gpus[0], health=newer), *snapshot.gpus[1:])
    )
    _, later = remote_gpus(exposition(changed), hosts)
    assert later[0].health.last_xid == 48 and later[0].health.events[0].timestamp > event.timestamp


_DCGM_GPU = 'gpu="{i}",UUID="GPU-{i}",pci_bus_id="00000000:1{i}:00.0",device="nvidia{i}",modelName="H100",Hostname="n"'
# As dcgm-exporter writes it: its types, no nvtopy series, NVLink bandwidth total in its own unit.
DCGM_EXPORTER = "".join(
    f"# TYPE {name} {kind}\n" + "".join(f"{name}{{{_DCGM_GPU.format(i=i)}}} {value}\n" for i, value in values)
    for name, kind, values in (
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", ((0, 5), (1, 5))),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", ((0, 48), (1, 0))),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", ((0, 7),)),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", ((0, 1),)),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", ((0, 88),)),
    )
)


def test_remote_reads_a_dcgm_exporters_last_xid():
    _, gpus = remote_gpus(DCGM_EXPORTER)
    assert gpus[0].health.last_xid == 48 and gpus[0].health.verdict is Severity.OK, "dcgm-exporter has no verdict"
    assert gpus[1].health.last_xid is None and gpus[1].health.events == ()
    assert gpus[0].sample.remapped_rows_corrected == 7, "a counter renamed *_total by the parser is still read"
    assert gpus[0].sample.remapped_rows_failure is True
    assert gpus[0].sample.nvlink_rx_bytes_per_s is None, "bandwidth total's unit is unknown: not read"


def _line(name: str, value: str, **labels: str) -> str:
    label_text = ",".join(f'{k}="{v}"' for k, v in {"gpu": "0", "UUID": "GPU-a", **labels}.items())
    return f"{name}{{{label_text}}} {value}\n"


@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN", "-1", "1e308", "3", "0.5"])
def test_remote_health_values_out_of_range_are_not_available(value):
    text = "".join(
        _line(name, value)
        for name in (
            "nvtopy_gpu_health",
            "nvtopy_gpu_responding",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "DCGM_FI_DEV_PCIE_LINK_GEN",
        )
    )
    scrape = parse_exposition(text, "http://weird:9400/metrics")
    said = scrape.health.get(0, {})
    values = scrape.gpus[0][1]
    if value == "3":  # a whole number: fine for an Xid and a link generation, not for a verdict or a flag
        assert said == {"verdict": None, "responding": None, "last_xid": 3} and values["pcie_link_gen"] == 3
        assert values["remapped_rows_failure"] is None
        return
    assert all(v is None for v in said.values()), said
    assert values["remapped_rows_failure"] is None and values["pcie_link_gen"] is None
    _, gpus = remote_gpus(text)
    assert gpus[0].health.verdict is Severity.OK and gpus[0].health.responding, "unknown reads as nothing said"


def test_remote_xid_counts_are_bounded_and_checked():
    lines = [_line("DCGM_FI_DEV_GPU_UTIL", "1")]
    lines += [_line("nvtopy_xid_events_total", "1", xid=str(n)) for n in range(1, 1000)]
    lines += [_line("nvtopy_xid_events_total", "2", xid=bad) for bad in ("", "x", "-1", "9" * 40)]
    lines += [_line("nvtopy_xid_events_total", bad, xid="5000") for bad in ("NaN", "-1", "0.5")]
    scrape = parse_exposition("".join(lines), "http://weird:9400/metrics")
    counts = scrape.health[0]["xid_counts"]
    assert len(counts) == 256 and set(counts.values()) == {1}
    assert 5000 not in counts


def test_tables_are_covered():
    """Every health name this file expects is in the tables, and nvtopy's own are never dcgm names."""
    assert set(DCGM_HEALTH) <= set(BY_NAME)
    assert all(name.startswith("nvtopy_") for name in NVTOPY_BY_NAME)
    assert not set(NVTOPY_BY_NAME) & set(BY_NAME)


def test_parse_of_a_full_exposition_has_no_duplicate_families(scrape):
    names = [family.name for family in text_string_to_metric_families(scrape.text)]
    assert len(names) == len(set(names))


def test_default_health_is_ok_everywhere():
    assert GpuHealth() == GpuHealth(verdict=Severity.OK) and UNWATCHED.verdict is Severity.OK
