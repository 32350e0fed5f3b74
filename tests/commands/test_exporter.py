"""The Prometheus exporter: scraped over real HTTP, parsed, checked against the snapshot it renders.

Expected values are computed here from the snapshot's own fields with dcgm-exporter's
units (MiB, W, mJ, NVML's clock-event bits), not through :mod:`nvtopy.formats.dcgm`, so a
wrong attribute or unit in the metric table fails these tests.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import threading
import time
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.backends.simulated.catalog import Workload
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.commands.exporter.command import EXPORTER_GROUPS, parse_listen
from nvtopy.commands.exporter.server import serve
from nvtopy.errors import NvtopyError, UsageError
from nvtopy.formats.dcgm import FIELDS
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller
from nvtopy.textsafe import unescape_text

from ..builders import NVTOPY
from ..prometheus_fixtures import shutdown_server
from ..waiting import until

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
PROCESS_LABELS = {"gpu", "UUID", "pid", "type", "user", "command", "Hostname"} | {
    "owner_kind",
    "container",
    "pod",
    "namespace",
    "slurm_job",
}
PROCESS_METRICS = {
    "nvtopy_process_gpu_memory_bytes": "gpu_memory_bytes",
    "nvtopy_process_sm_utilization_percent": "sm_percent",
    "nvtopy_process_memory_utilization_percent": "memory_percent",
    "nvtopy_process_cpu_percent": "cpu_percent",
    "nvtopy_process_host_memory_bytes": "host_memory_bytes",
}
# NVML's nvmlClocksEventReason* bits (nvml.h), written out here on purpose.
NVML_THROTTLE_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def _flag(value: bool | None) -> float | None:
    return None if value is None else (1.0 if value else 0.0)


def _last_xid(gpu: Any) -> int | None:
    """The last Xid; 0 when none came; left out when events are not watched (0 would be a claim)."""
    xids = [event.xid for event in gpu.health.events if event.xid is not None]
    if xids:
        return xids[-1]
    return None if gpu.health.events_note is not None and not gpu.health.xid_counts else 0


def _mask(reasons: tuple[str, ...] | None) -> float | None:
    if reasons is None:
        return None
    mask = 0
    for reason in reasons:
        mask |= NVML_THROTTLE_BITS[reason]
    return float(mask)


def _ratio(percent: float | None) -> float | None:
    """DCGM's profiling fields are ratios from 0 to 1; GPM gives percentages."""
    return None if percent is None else percent / 100


# dcgm name -> its value in dcgm-exporter's unit, from a GpuState (None: not available).
EXPECTED: dict[str, Callable[[Any], float | None]] = {
    "DCGM_FI_DEV_GPU_UTIL": lambda g: g.sample.utilization_gpu_percent,
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda g: g.sample.utilization_memory_percent,
    "DCGM_FI_DEV_ENC_UTIL": lambda g: g.sample.encoder_percent,
    "DCGM_FI_DEV_DEC_UTIL": lambda g: g.sample.decoder_percent,
    "DCGM_FI_DEV_FB_USED": lambda g: _mib(g.sample.memory_used_bytes),
    "DCGM_FI_DEV_FB_FREE": lambda g: _mib(g.sample.memory_free_bytes),
    "DCGM_FI_DEV_FB_RESERVED": lambda g: _mib(g.sample.memory_reserved_bytes),
    "DCGM_FI_DEV_FB_TOTAL": lambda g: _mib(g.static.memory_total_bytes),
    "DCGM_FI_DEV_GPU_TEMP": lambda g: g.sample.temperature_c,
    "DCGM_FI_DEV_SLOWDOWN_TEMP": lambda g: g.static.temperature_slowdown_c,
    "DCGM_FI_DEV_FAN_SPEED": lambda g: g.sample.fan_percent,
    "DCGM_FI_DEV_POWER_USAGE": lambda g: g.sample.power_draw_w,
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": lambda g: g.sample.power_limit_w,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda g: g.sample.energy_mj,
    "DCGM_FI_DEV_SM_CLOCK": lambda g: g.sample.clock_sm_mhz,
    "DCGM_FI_DEV_MEM_CLOCK": lambda g: g.sample.clock_mem_mhz,
    "DCGM_FI_DEV_PSTATE": lambda g: g.sample.pstate,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": lambda g: _mask(g.sample.throttle_reasons),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda g: g.sample.ecc_corrected_volatile,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda g: g.sample.ecc_uncorrected_volatile,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": lambda g: g.sample.ecc_corrected_aggregate,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": lambda g: g.sample.ecc_uncorrected_aggregate,
    # Health (dcgm_fields.h ids 230, 202, 393-396, 390-392, 235-238).
    "DCGM_FI_DEV_XID_ERRORS": _last_xid,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda g: g.sample.pcie_replay_counter,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda g: g.sample.remapped_rows_corrected,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda g: g.sample.remapped_rows_uncorrected,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda g: _flag(g.sample.remapped_rows_failure),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda g: _flag(g.sample.remapped_rows_pending),
    "DCGM_FI_DEV_RETIRED_SBE": lambda g: g.sample.retired_pages_sbe,
    "DCGM_FI_DEV_RETIRED_DBE": lambda g: g.sample.retired_pages_dbe,
    "DCGM_FI_DEV_RETIRED_PENDING": lambda g: _flag(g.sample.retired_pages_pending),
    "DCGM_FI_DEV_PCIE_LINK_GEN": lambda g: g.sample.pcie_link_gen,
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": lambda g: g.sample.pcie_link_width,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": lambda g: g.static.pcie_link_gen_max,
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": lambda g: g.static.pcie_link_width_max,
    # Profiling (dcgm_fields.h ids 1001-1012), from GPM: ratios 0-1, rates in bytes per second.
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda g: _ratio(g.sample.graphics_active_percent),
    "DCGM_FI_PROF_SM_ACTIVE": lambda g: _ratio(g.sample.sm_active_percent),
    "DCGM_FI_PROF_SM_OCCUPANCY": lambda g: _ratio(g.sample.sm_occupancy_percent),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda g: _ratio(g.sample.tensor_active_percent),
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda g: _ratio(g.sample.dram_active_percent),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": lambda g: _ratio(g.sample.fp64_active_percent),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": lambda g: _ratio(g.sample.fp32_active_percent),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": lambda g: _ratio(g.sample.fp16_active_percent),
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda g: g.sample.gpm_pcie_tx_bytes_per_s,
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda g: g.sample.gpm_pcie_rx_bytes_per_s,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": lambda g: g.sample.gpm_nvlink_tx_bytes_per_s,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": lambda g: g.sample.gpm_nvlink_rx_bytes_per_s,
}
REQUIRED = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_PSTATE",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
)
ECC_NAMES = tuple(name for name in EXPECTED if name.startswith("DCGM_FI_DEV_ECC_"))
COUNTER_NAMES = ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", *ECC_NAMES)

# Never through a proxy from the environment: these servers are on loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str, str]:
    """(status, content type, body) of a GET; HTTP errors are returned, not raised."""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode("utf-8", "replace")


@functools.lru_cache(maxsize=16)
def _families(text: str) -> tuple[Any, ...]:
    """Every metric family of ``text``, in order, as prometheus_client's parser reads it.

    Cached by text: the parser (pure Python, a character at a time) is most of the CPU time of a test that
    scrapes an unchanged snapshot 90 times, and the same text always parses the same.
    """
    return tuple(text_string_to_metric_families(text))


@dataclass
class Scrape:
    text: str

    def __post_init__(self) -> None:
        self.families: dict[str, Any] = {}
        for family in _families(self.text):
            assert family.name not in self.families, f"family {family.name} exposed twice"
            self.families[family.name] = family

    def samples(self, name: str, **labels: str) -> list[Any]:
        family = self.families.get(name)
        if family is None:
            return []
        return [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        found = self.samples(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0].value

    def dcgm_samples(self) -> list[Any]:
        return [s for f in self.families.values() for s in f.samples if s.name.startswith("DCGM_FI_")]


@dataclass
class Exporter:
    backend: Any
    poller: Poller
    server: Any

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def scrape(self) -> Scrape:
        status, content_type, body = http_get(self.url)
        assert status == 200, body
        assert content_type.startswith("text/plain"), content_type
        return Scrape(body)


@pytest.fixture
def exporter(sim) -> Iterator[Callable[..., Exporter]]:
    """A factory: an exporter over a simulated backend, one snapshot taken, no poller thread."""
    servers = []
    pollers: list[Poller] = []

    def make(*, poll: bool = True, faults: list[str] | None = None, **kwargs: Any) -> Exporter:
        if faults is not None:
            kwargs["faults"] = parse_fault_specs(faults)
        backend = sim(**kwargs)
        # isolate=False: the snapshot is read on this thread with no deadline, so every GPU is in it however loaded
        # the machine (a GPU read past the 0.8 s share on a busy CI left one GPU's series out). No test here hangs a
        # GPU (a stuck GPU under the exporter: test_exporter_readiness.py, test_exporter_readiness_fake_nvml.py).
        poller = Poller(
            backend, interval=1.0, groups=EXPORTER_GROUPS, collector=Collector(backend, history=1), isolate=False
        )
        pollers.append(poller)
        if poll:
            poller.poll_once()
        server, thread = serve(poller, "127.0.0.1", 0)
        servers.append(server)
        assert thread.is_alive()
        return Exporter(backend, poller, server)

    yield make
    for server in servers:
        shutdown_server(server)
    for poller in pollers:  # their collectors' GPU worker threads end (a later test counts nvtopy threads)
        if poller.collector is not None:
            poller.collector.close()


# ---------------------------------------------------------------- GPU metrics


def test_table_is_covered_here():
    # A field added to the dcgm table must get an independent expectation above.
    assert {field.name for field in FIELDS} == set(EXPECTED)


def test_every_dcgm_metric_matches_the_snapshot(exporter):
    ex = exporter()
    snapshot = ex.poller.latest
    scrape = ex.scrape()
    assert len(snapshot.gpus) == 4
    for gpu in snapshot.gpus:
        index = str(gpu.index)
        for name, expected_of in EXPECTED.items():
            expected = expected_of(gpu)
            found = scrape.samples(name, gpu=index)
            if expected is None:
                assert found == [], f"{name} for GPU {index} should be left out"
                continue
            assert len(found) == 1, f"{name} for GPU {index}: {len(found)} samples"
            sample = found[0]
            assert sample.name == name
            assert sample.value == float(expected), name
            assert sample.labels == {
                "gpu": index,
                "UUID": gpu.static.uuid,
                "pci_bus_id": gpu.static.bus_id,
                "device": f"nvidia{gpu.index}",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": "demo-node",
                "DCGM_FI_DRIVER_VERSION": "550.54.15",
            }
            assert sample.labels["UUID"].startswith("GPU-")
        for name in REQUIRED:
            assert len(scrape.samples(name, gpu=index)) == 1, f"{name} missing for GPU {index}"
    # Nothing beyond the table, nothing for GPUs that do not exist.
    assert {s.name for s in scrape.dcgm_samples()} <= set(EXPECTED)
    assert {s.labels["gpu"] for s in scrape.dcgm_samples()} == {"0", "1", "2", "3"}


def test_units_are_dcgms(exporter):
    ex = exporter()
    scrape = ex.scrape()
    gpu = ex.poller.latest.gpus[0]
    # 80 GB board: FB_TOTAL in MiB is the catalog's 81559, not bytes.
    assert scrape.value("DCGM_FI_DEV_FB_TOTAL", gpu="0") == 81559
    used, free = scrape.value("DCGM_FI_DEV_FB_USED", gpu="0"), scrape.value("DCGM_FI_DEV_FB_FREE", gpu="0")
    reserved = scrape.value("DCGM_FI_DEV_FB_RESERVED", gpu="0")
    assert used + free + reserved == pytest.approx(81559)
    assert used == gpu.sample.memory_used_bytes / MIB
    # Power in W (an H100 draws tens to hundreds of W, not mW), energy in mJ.
    power = scrape.value("DCGM_FI_DEV_POWER_USAGE", gpu="0")
    assert 0 < power <= 700
    assert power == gpu.sample.power_draw_w
    assert scrape.value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == gpu.sample.energy_mj
    assert 0 <= scrape.value("DCGM_FI_DEV_GPU_UTIL", gpu="0") <= 100
    assert scrape.value("DCGM_FI_DEV_POWER_MGMT_LIMIT", gpu="0") == 700


def test_energy_advances_between_scrapes(exporter, clock):
    ex = exporter()
    first = ex.scrape().value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0")
    clock.advance(10.0)
    ex.poller.poll_once(slow=True)
    second = ex.scrape().value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0")
    watts = ex.poller.latest.gpus[0].sample.power_draw_w
    # 10 s at tens of W or more: thousands of mJ, never a unit off by 1000.
    assert second > first
    assert second - first == pytest.approx(10.0 * watts * 1000, rel=0.2)


def test_throttle_reasons_bitmask(exporter):
    ex = exporter(faults=["hot@0"])
    scrape = ex.scrape()
    masks = {}
    for gpu in ex.poller.latest.gpus:
        mask = int(scrape.value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu=str(gpu.index)))
        names = {name for name, bit in NVML_THROTTLE_BITS.items() if mask & bit}
        assert names == set(gpu.sample.throttle_reasons)
        assert mask & ~sum(NVML_THROTTLE_BITS.values()) == 0
        masks[gpu.index] = mask
    # hot@0: both thermal slowdowns on GPU 0 (0x20 | 0x40), never on a cool GPU.
    assert masks[0] & 0x60 == 0x60
    assert all(mask & 0x60 == 0 for index, mask in masks.items() if index != 0)


def test_counters_keep_dcgms_exact_names(exporter):
    ex = exporter()
    text = ex.scrape().text
    lines = text.splitlines()
    for name in COUNTER_NAMES:
        assert f"# TYPE {name} gauge" in lines
        assert sum(line.startswith(name + "{") for line in lines) == 4, name
    samples = [line for line in lines if line.startswith("DCGM_FI_")]
    assert samples
    assert not [line for line in samples if "_total" in line.split("{")[0]]
    assert "_created" not in text


def test_info_and_age(exporter):
    ex = exporter()
    scrape = ex.scrape()
    info = scrape.samples("nvtopy_exporter_info")
    assert len(info) == 1 and info[0].value == 1
    assert info[0].labels["backend"] == "simulated"
    assert info[0].labels["version"]
    assert scrape.value("nvtopy_snapshot_age_seconds") == 0
    assert [scrape.value("nvtopy_gpu_lost", gpu=str(i)) for i in range(4)] == [0, 0, 0, 0]


def test_before_the_first_snapshot_only_info(exporter):
    ex = exporter(poll=False)
    scrape = ex.scrape()
    assert scrape.dcgm_samples() == []
    assert scrape.samples("nvtopy_gpu_lost") == []
    assert scrape.samples("nvtopy_exporter_info")[0].labels["backend"] == "none"
    ex.poller.poll_once()
    assert len(ex.scrape().samples("DCGM_FI_DEV_GPU_UTIL")) == 4


# ---------------------------------------------------------------- unavailable values


def test_unsupported_power_is_left_out_not_zero(exporter):
    ex = exporter(faults=["unsupported=power@0"])
    scrape = ex.scrape()
    assert ex.poller.latest.gpus[0].sample.power_draw_w is None
    assert scrape.samples("DCGM_FI_DEV_POWER_USAGE", gpu="0") == []
    assert scrape.value("DCGM_FI_DEV_POWER_USAGE", gpu="1") > 0
    # Only power is missing on GPU 0.
    assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL", gpu="0")) == 1
    assert len(scrape.samples("DCGM_FI_DEV_POWER_MGMT_LIMIT", gpu="0")) == 1


def test_passively_cooled_gpu_has_no_fan_metric(exporter):
    scrape = exporter().scrape()  # H100 SXM: no fans
    assert scrape.samples("DCGM_FI_DEV_FAN_SPEED") == []
    assert len(scrape.samples("DCGM_FI_DEV_GPU_TEMP")) == 4


def test_geforce_has_fan_but_no_ecc(exporter):
    ex = exporter(model="RTX 4090", gpus=2)
    scrape = ex.scrape()
    assert {s.labels["modelName"] for s in scrape.dcgm_samples()} == {"NVIDIA GeForce RTX 4090"}
    for name in ECC_NAMES:
        assert scrape.samples(name) == [], name
    assert len(scrape.samples("DCGM_FI_DEV_FAN_SPEED")) == 2
    assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL")) == 2


def test_lost_gpu_reports_lost_and_nothing_else(exporter):
    ex = exporter(faults=["lost@1"])
    scrape = ex.scrape()
    assert ex.poller.latest.gpus[1].lost
    lost = scrape.samples("nvtopy_gpu_lost", gpu="1")
    assert len(lost) == 1 and lost[0].value == 1
    assert lost[0].labels["UUID"] == ex.poller.latest.gpus[1].static.uuid  # still identifiable
    assert [s for s in scrape.dcgm_samples() if s.labels["gpu"] == "1"] == []
    assert scrape.samples("nvtopy_process_gpu_memory_bytes", gpu="1") == []
    for index in ("0", "2", "3"):
        assert scrape.value("nvtopy_gpu_lost", gpu=index) == 0
        for name in REQUIRED:
            assert len(scrape.samples(name, gpu=index)) == 1, (name, index)


def test_gpu_lost_while_running_drops_its_metrics(exporter, clock):
    # Its static fields were read while it was healthy: FB_TOTAL or SLOWDOWN_TEMP must not linger.
    ex = exporter()
    assert len(ex.scrape().samples("DCGM_FI_DEV_FB_TOTAL", gpu="1")) == 1
    ex.backend.set_lost(1)
    clock.advance(1.0)
    ex.poller.poll_once()
    scrape = ex.scrape()
    assert ex.poller.latest.gpus[1].static.memory_total_bytes is not None
    assert scrape.value("nvtopy_gpu_lost", gpu="1") == 1
    assert [s for s in scrape.dcgm_samples() if s.labels["gpu"] == "1"] == []
    assert scrape.samples("nvtopy_process_gpu_memory_bytes", gpu="1") == []
    assert len(scrape.samples("DCGM_FI_DEV_FB_TOTAL")) == 3


def test_lost_gpu_comes_back(exporter):
    ex = exporter(faults=["lost@1"])
    ex.backend.set_lost(1, False)
    ex.poller.poll_once(slow=True)
    scrape = ex.scrape()
    assert scrape.value("nvtopy_gpu_lost", gpu="1") == 0
    assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL", gpu="1")) == 1


# ---------------------------------------------------------------- processes


def _process_series(scrape: Scrape, pid: int) -> list[Any]:
    return [s for name in PROCESS_METRICS for s in scrape.samples(name, pid=str(pid))]


def test_process_metrics_match_the_snapshot(exporter):
    ex = exporter()
    scrape = ex.scrape()
    procs = [p for gpu in ex.poller.latest.gpus for p in gpu.processes]
    assert procs
    for name, attribute in PROCESS_METRICS.items():
        expected = [p for p in procs if getattr(p, attribute) is not None]
        assert len(scrape.samples(name)) == len(expected), name
        for proc in expected:
            (sample,) = scrape.samples(name, pid=str(proc.pid), gpu=str(proc.gpu_index))
            assert set(sample.labels) == PROCESS_LABELS
            assert sample.labels["user"] == proc.user
            assert sample.labels["command"] == proc.command
            assert sample.labels["UUID"] == proc.gpu_uuid
            assert sample.labels["Hostname"] == "demo-node"
            assert sample.value == float(getattr(proc, attribute))
    assert any(s.labels["user"] == "alice" for s in scrape.samples("nvtopy_process_gpu_memory_bytes"))


def test_signalled_process_disappears_from_the_next_scrape(exporter, clock):
    ex = exporter(steady=True)
    procs = [p for gpu in ex.poller.latest.gpus for p in gpu.processes]
    victim = next(p for p in procs if p.user == "alice")
    survivors = {p.pid for p in procs if p.pid != victim.pid}
    assert len(_process_series(ex.scrape(), victim.pid)) >= 3
    outcome = ex.backend.send_signal(victim.pid, victim.create_time, signal.SIGTERM)
    assert outcome.ok, outcome.message
    clock.advance(1.0)
    ex.poller.poll_once()
    scrape = ex.scrape()
    assert _process_series(scrape, victim.pid) == []
    listed = {int(s.labels["pid"]) for s in scrape.samples("nvtopy_process_gpu_memory_bytes")}
    assert victim.pid not in listed
    assert survivors & listed  # the others are still reported


HOSTILE_COMMAND = (
    "python -c \"print('hi')\" C:\\temp\\x.py --sep=\\n\nrm -rf ~\x1b[31mred\x1b[0m\x07bell\x00nul\ttab\r\x9bcsi\x7f"
)
# escape_text's escapes (the rule of files and the wire): each control character as \xNN of its UTF-8
# bytes; quotes and backslashes that cannot be read as an escape stay as they are.
HOSTILE_LABEL = (
    "python -c \"print('hi')\" C:\\temp\\x.py --sep=\\n\\x0arm -rf ~\\x1b[31mred\\x1b[0m\\x07bell"
    "\\x00nul\\x09tab\\x0d\\xc2\\x9bcsi\\x7f"
)


def _workload(command: str) -> Workload:
    return Workload(command, (0.1, 0.2), (0.2, 0.4), (5000, 9000))


def test_hostile_command_still_parses(exporter):
    ex = exporter(steady=True, workloads=[_workload(HOSTILE_COMMAND)])
    scrape = ex.scrape()
    procs = [p for gpu in ex.poller.latest.gpus for p in gpu.processes]
    assert procs and all(p.command == HOSTILE_COMMAND for p in procs)
    samples = scrape.samples("nvtopy_process_gpu_memory_bytes")
    assert len(samples) == len(procs)  # no line broken in two, none lost
    assert {s.labels["command"] for s in samples} == {HOSTILE_LABEL}
    assert unescape_text(HOSTILE_LABEL) == HOSTILE_COMMAND
    raw_controls = {c for c in scrape.text if unicodedata.category(c) == "Cc" and c != "\n"}
    assert raw_controls == set()
    # Every line is a comment, a sample, or empty: a newline in a label would start a garbage line.
    for line in scrape.text.splitlines():
        assert line == "" or line.startswith("#") or line.split("{")[0].split(" ")[0].isidentifier(), line


def test_non_utf8_command_does_not_break_the_scrape(exporter):
    # Linux argv that is not UTF-8 reaches Python as lone surrogates (surrogateescape).
    ex = exporter(steady=True, workloads=[_workload("python r\udcffsum\udce9.py")])
    scrape = ex.scrape()
    commands = {s.labels["command"] for s in scrape.samples("nvtopy_process_gpu_memory_bytes")}
    assert commands == {"python r\\xffsum\\xe9.py"}  # the bytes, as escape_text writes them
    assert unescape_text("python r\\xffsum\\xe9.py") == "python r\udcffsum\udce9.py"
    assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL")) == 4


def test_long_command_is_cut(exporter):
    ex = exporter(steady=True, workloads=[_workload("python " + "x" * 400)])
    commands = {s.labels["command"] for s in ex.scrape().samples("nvtopy_process_gpu_memory_bytes")}
    assert len(commands) == 1
    (command,) = commands
    assert len(command) == 120
    assert command == ("python " + "x" * 400)[:119] + "…"


# ---------------------------------------------------------------- cost of scrapes


def test_scrapes_make_no_backend_calls(exporter):
    ex = exporter()
    before, polls = ex.backend.call_counts(), ex.poller.polls
    assert sum(before.values()) > 0
    for _ in range(50):
        assert len(ex.scrape().samples("DCGM_FI_DEV_GPU_UTIL")) == 4
    errors: list[BaseException] = []

    def burst() -> None:
        try:
            for _ in range(5):
                ex.scrape()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=burst) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert ex.backend.call_counts() == before
    assert ex.poller.polls == polls


# ---------------------------------------------------------------- malformed requests


def _raw(port: int, payload: bytes, *, timeout: float = 5.0) -> bytes:
    """Send ``payload`` and read until the server closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(payload)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
        chunks = []
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def _status(response: bytes) -> int:
    """The status of a response; a request without an HTTP version gets an HTTP/0.9 answer (a bare page)."""
    if response.startswith(b"HTTP/1."):
        return int(response.split(b" ", 2)[1])
    found = re.search(rb"Error code: (\d{3})", response)
    assert found, response[:200]
    return int(found.group(1))


def test_malformed_requests_do_not_break_it(exporter):
    ex = exporter()
    port = ex.port
    # Binary garbage (a TLS ClientHello, then noise): an HTTP error, not a crash.
    garbage = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n"
    response = _raw(port, garbage)
    assert response == b"" or 400 <= _status(response) < 500
    # A method nobody uses.
    assert _status(_raw(port, b"BREW /metrics HTTP/1.0\r\n\r\n")) in (200, 400, 405, 501)
    # A request line of 100 kB.
    assert 400 <= _status(_raw(port, b"GET /" + b"a" * 100_000 + b" HTTP/1.0\r\n\r\n")) < 500
    # Half a request, then gone.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: loc")
    # Another path.
    status, _, _ = http_get(f"http://127.0.0.1:{port}/nope")
    assert status in (200, 404)
    # A client that stalls mid-request does not hold up the others.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stalled:
        stalled.sendall(b"GET /metrics HTTP/1.1\r\n")
        assert len(ex.scrape().samples("DCGM_FI_DEV_GPU_UTIL")) == 4
    scrape = ex.scrape()
    assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL")) == 4
    assert len(scrape.samples("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")) == 4


def test_serve_on_a_taken_port_is_a_one_line_error(exporter):
    ex = exporter()
    with pytest.raises(NvtopyError, match=f"cannot listen on 127.0.0.1:{ex.port}") as info:
        serve(ex.poller, "127.0.0.1", ex.port)
    assert "\n" not in str(info.value)
    assert not isinstance(info.value, UsageError)


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_serves_on_ipv6_loopback(exporter):
    ex = exporter(gpus=1)
    server, _ = serve(ex.poller, *parse_listen("[::1]:0"))
    try:
        status, _, body = http_get(f"http://[::1]:{server.server_address[1]}/metrics")
        assert status == 200
        assert len(Scrape(body).samples("DCGM_FI_DEV_GPU_UTIL")) == 1
    finally:
        shutdown_server(server)


# ---------------------------------------------------------------- --listen


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9400", ("127.0.0.1", 9400)),
        ("9400", ("127.0.0.1", 9400)),
        (":9400", ("0.0.0.0", 9400)),
        ("[::1]:9400", ("::1", 9400)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("localhost:0", ("localhost", 0)),
        (" 10.1.2.3:65535 ", ("10.1.2.3", 65535)),
    ],
)
def test_parse_listen(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    "text", ["host:port:x", "127.0.0.1:99999", "127.0.0.1:abc", "[::1]9400", "[::1:9400", "nope", "", "1.2.3.4:-1"]
)
def test_parse_listen_errors(text):
    with pytest.raises(UsageError) as info:
        parse_listen(text)
    assert "--listen" in str(info.value)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- the CLI


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _cli(*args: str) -> list[str]:
    return [*NVTOPY, "exporter", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NVTOPY_DEBUG"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONFAULTHANDLER"] = "1"  # an exporter that does not stop is made to say where each thread stands
    return env


@contextlib.contextmanager
def _running(*args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        _cli(*args), cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def _wait_for_metrics(
    proc: subprocess.Popen[str], port: int, timeout: float = 15.0, marker: str = "DCGM_FI_DEV_GPU_UTIL{"
) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"exporter exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            status, _, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        except OSError:
            status, body = 0, ""
        if status == 200 and marker in body:
            return Scrape(body)
        if time.monotonic() > deadline:
            pytest.fail(f"no metrics on port {port} after {timeout} s")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER): every thread's stack on stderr
        try:
            _, stderr = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate(timeout=5)
        raise AssertionError(f"the exporter did not stop within 5 s of SIGTERM; it said: {stderr[-6000:]}") from None
    assert time.monotonic() - started < 5
    return proc.returncode, stderr


def test_cli_serves_and_stops_on_sigterm():
    port = _free_port()
    with _running("--demo", "--listen", f"127.0.0.1:{port}", "--interval", "0.2") as proc:
        scrape = _wait_for_metrics(proc, port)
        assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL")) == 4
        assert scrape.samples("nvtopy_exporter_info")[0].labels["backend"] == "simulated"
        code, stderr = _stop(proc)
    assert code == 0, stderr
    assert f"serving http://127.0.0.1:{port}/metrics" in stderr
    assert "warning" not in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "naming"),
    [
        ((), "dcgm-legacy"),
        (("--names", "dcgm-4.9"), "dcgm-4.9"),
        (("--config", "{config}"), "dcgm-4.9"),
        (("--config", "{config}", "--names", "dcgm-legacy"), "dcgm-legacy"),
    ],
    ids=["default", "flag", "config-file", "flag-over-file"],
)
def test_cli_names_from_the_flag_or_the_config_file(tmp_path, args, naming):
    """``--names``, else ``[exporter] names``, else dcgm-legacy: the series, their labels and the first line say so."""
    config = tmp_path / "config.toml"
    config.write_text('[exporter]\nnames = "dcgm-4.9"\n', encoding="utf-8")
    given = [arg.format(config=config) for arg in args]
    port = _free_port()
    utilisation = "DCGM_FI_DEV_GPU_UTIL_RATIO" if naming == "dcgm-4.9" else "DCGM_FI_DEV_GPU_UTIL"
    with _running("--demo", "--listen", f"127.0.0.1:{port}", "--interval", "0.2", *given) as proc:
        scrape = _wait_for_metrics(proc, port, marker=utilisation + "{")
        samples = scrape.samples(utilisation)
        host = "hostname" if naming == "dcgm-4.9" else "Hostname"
        assert len(samples) == 4 and all(s.labels[host] == "demo-node" for s in samples)
        assert all(0 <= s.value <= (1 if naming == "dcgm-4.9" else 100) for s in samples)
        other = "DCGM_FI_DEV_GPU_UTIL" if naming == "dcgm-4.9" else "DCGM_FI_DEV_GPU_UTIL_RATIO"
        assert scrape.samples(other) == [], "one naming at a time"
        code, stderr = _stop(proc)
    assert code == 0 and f"serving http://127.0.0.1:{port}/metrics, {naming} names" in stderr, stderr


def test_cli_sigterm_right_after_the_port_opens_is_a_clean_stop():
    # The port answers before the main loop is reached: a stop then must still exit 0.
    port = _free_port()
    with _running("--demo", "--listen", f"127.0.0.1:{port}") as proc:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.002)
        code, stderr = _stop(proc)
    assert code == 0, stderr


def test_cli_port_taken_is_one_line_and_exit_1():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            _cli("--demo", "--listen", f"127.0.0.1:{port}"),
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvtopy: error:")
    assert str(port) in lines[0]
    assert result.stdout == ""


def test_cli_bad_listen_is_a_usage_error():
    result = subprocess.run(
        _cli("--demo", "--listen", "nope"), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvtopy: error:") and "--listen" in lines[0]


def test_cli_every_interface_warns():
    port = _free_port("0.0.0.0")
    with _running("--demo", "--demo-gpus", "1", "--listen", f"0.0.0.0:{port}") as proc:
        scrape = _wait_for_metrics(proc, port)
        assert len(scrape.samples("DCGM_FI_DEV_GPU_UTIL")) == 1
        code, stderr = _stop(proc)
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("nvtopy: warning:")]
    assert len(warnings) == 1, stderr
    assert "0.0.0.0" in warnings[0] and "anyone" in warnings[0]


# ---------------------------------------------------------------- connections that send nothing: bounded threads


def _connections(port: int, count: int, payload: bytes = b"") -> list[socket.socket]:
    """``count`` connections to the exporter; every other one sends ``payload`` (e.g. half a request)."""
    made = []
    deadline = time.monotonic() + 30
    for i in range(count):
        assert time.monotonic() < deadline, f"only {i} of {count} connections made in 30 s"
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        if payload and i % 2:
            conn.sendall(payload)
        made.append(conn)
    return made


def _timed_scrape(ex: Exporter) -> float:
    started = time.monotonic()
    assert len(ex.scrape().samples("DCGM_FI_DEV_GPU_UTIL")) == 4
    return time.monotonic() - started


def test_half_open_connections_leave_no_threads_behind(exporter):
    from nvtopy.commands.exporter.server import WORKERS

    ex = exporter()
    workers = [t for t in threading.enumerate() if t.name.startswith("nvtopy-exporter-")]
    assert len(workers) >= WORKERS
    threads = threading.active_count()
    conns = _connections(ex.port, 500, b"GET /metrics HTTP/1.1\r\nHost: exp")
    try:
        time.sleep(0.2)
        assert threading.active_count() <= threads + 2, "no thread per connection"
    finally:
        for conn in conns:
            conn.close()
    time.sleep(0.2)
    assert threading.active_count() <= threads + 2
    assert _timed_scrape(ex) < 0.5


@pytest.mark.timing  # a scrape within 1 s beside 200 idle connections is a wall-clock bound: apart from the main pass
def test_idle_connections_do_not_delay_a_scrape(exporter):
    ex = exporter()
    threads = threading.active_count()
    conns = _connections(ex.port, 200)
    try:
        for _ in range(3):
            assert _timed_scrape(ex) < 1.0
        assert threading.active_count() <= threads + 2
    finally:
        for conn in conns:
            conn.close()


@pytest.mark.timing  # closed within 0.9-3.5 s and a scrape within 0.5 s are wall-clock bounds: apart from the main pass
def test_a_slow_client_is_closed_at_the_deadline(exporter, monkeypatch):
    from nvtopy.commands.exporter import server as exporter_module

    monkeypatch.setattr(exporter_module, "REQUEST_DEADLINE", 1.0)
    ex = exporter()
    with socket.create_connection(("127.0.0.1", ex.port), timeout=5) as slow:
        started = time.monotonic()
        closed = False
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x":  # one byte every 0.1 s: never a whole request
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        if not closed:
            with contextlib.suppress(ConnectionResetError):
                assert slow.recv(100) == b"", "closed without an answer"
        assert 0.9 <= time.monotonic() - started < 3.5
        assert _timed_scrape(ex) < 0.5


@pytest.mark.timing  # 1.2 s without a wake is a wall-clock span: apart from the main pass
def test_an_idle_dispatcher_does_not_wake(exporter, monkeypatch):
    """Nothing is due between a connection's bytes and its deadline (shutdown wakes it): one select, no timeout.

    socketserver's 0.5 s poll woke the dispatcher twice a second, all day, for nothing.
    """
    import selectors
    from types import SimpleNamespace

    from nvtopy.commands.exporter import server as exporter_module

    timeouts: list[float | None] = []

    class Counting(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
        def select(self, timeout: float | None = None) -> Any:
            timeouts.append(timeout)
            return super().select(timeout)

    counting = SimpleNamespace(**{name: getattr(selectors, name) for name in dir(selectors) if name.isupper()})
    counting.DefaultSelector, counting.BaseSelector = Counting, selectors.BaseSelector
    monkeypatch.setattr(exporter_module, "selectors", counting)
    ex = exporter()
    _timed_scrape(ex)  # a request read and handed over: the loop runs
    seen = len(timeouts)
    time.sleep(1.2)  # what is measured: that nothing happens in this span
    assert len(timeouts) == seen, f"an idle dispatcher woke {len(timeouts) - seen} times"
    assert timeouts[-1] is None, "it waits for a connection without a timeout"


@pytest.mark.timing  # a scrape within 0.5 s is a wall-clock bound: run apart from the loaded main pass
def test_past_the_pending_limit_the_oldest_connection_is_closed(exporter, monkeypatch):
    from nvtopy.commands.exporter import server as exporter_module

    monkeypatch.setattr(exporter_module, "MAX_PENDING", 10)
    ex = exporter()
    conns = _connections(ex.port, 30)
    try:
        assert _timed_scrape(ex) < 0.5

        def closed() -> int:
            count = 0
            for conn in conns:
                conn.settimeout(0.05)
                try:
                    count += conn.recv(1) == b""
                except TimeoutError:
                    pass
                except ConnectionResetError:
                    count += 1
            return count

        # The oldest 20 closed (polled: a close is seen once the server has made it, not after a fixed sleep).
        until(lambda: closed() >= 20, 10.0, "the 20 oldest connections closed")
        assert closed() <= 21, "the 10 newest wait on (the scrape took one place)"
    finally:
        for conn in conns:
            conn.close()


def test_a_failing_scrape_is_a_500_and_one_log_line_not_a_traceback(capfd, caplog):
    """wsgiref prints the app's traceback to stderr; the exporter logs one line and keeps serving."""
    import urllib.error
    import urllib.request

    class Broken:
        @property
        def latest(self):
            raise RuntimeError("broken \x1b]0;title\x07 source")

    server, _thread = serve(Broken(), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(url, timeout=5)
        assert failed.value.code == 500
    finally:
        server.shutdown()
        server.server_close()
    err = capfd.readouterr().err
    assert "Traceback" not in err
    messages = [r.getMessage() for r in caplog.records if "exporter request failed" in r.getMessage()]
    assert messages and "\x1b" not in messages[0] and "RuntimeError" in messages[0]


def test_the_server_is_module_level_classes_and_its_source_a_protocol():
    """The server was a 200-line class defined inside a function (and so was its request handler):
    untyped, unreachable for a reader or a checker. Each class is at module level; what is served is typed."""
    import ast
    import inspect

    from nvtopy.commands.exporter import app, command, server

    for module in (server, app, command):
        tree = ast.parse(inspect.getsource(module))
        for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            inner = [n.name for n in ast.walk(function) if isinstance(n, ast.ClassDef)]
            assert inner == [], f"{module.__name__}.{function.name} defines classes {inner}"
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.arg == "source":
                assert ast.unparse(node.annotation) not in ("Any", "object"), f"{module.__name__}: source is typed"
    assert inspect.signature(server.serve).parameters["source"].annotation == "SnapshotHolder"
    assert issubclass(server.MetricsServer, server.WSGIServer)


def test_a_shutdown_before_the_serving_thread_has_run_waits_for_it_and_leaves_no_traceback(monkeypatch, sim):
    """A stop right after the port opened, before the serving thread's first step (a loaded machine): ``shutdown``
    waits for that thread, so the socket is closed only after it has let go of it (it once registered the closed
    socket and died with a traceback)."""
    from nvtopy.commands.exporter.server import MetricsServer

    gate = threading.Event()
    served = MetricsServer.serve_forever

    def late_serve_forever(self, poll_interval=None):
        gate.wait(10)  # the thread scheduled late
        served(self, poll_interval)

    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: errors.append(hook.exc_value))
    monkeypatch.setattr(MetricsServer, "serve_forever", late_serve_forever)
    backend = sim(gpus=1)
    collector = Collector(backend, history=1)
    try:
        poller = Poller(backend, interval=60, groups=EXPORTER_GROUPS, collector=collector)
        server, thread = serve(poller, "127.0.0.1", 0)
        threading.Timer(0.2, gate.set).start()
        server.shutdown()  # returns once the thread has run and stopped
        assert gate.is_set(), "shutdown returned before the serving thread had run"
        server.server_close()
        thread.join(5)
        assert not thread.is_alive() and errors == []
    finally:
        gate.set()
        collector.close()
