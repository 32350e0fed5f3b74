"""The host's CPU, load, memory and swap: read off the UI thread, each figure N/A on its own, in every output."""

from __future__ import annotations

import io
import json
import math
import os

import psutil
import pytest

from nvtopy.backends.host import processes as hostmod
from nvtopy.backends.host.processes import HostUsageReader
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.contract_decoder import host_usage_from_dict, snapshot_from_dict
from nvtopy.model import HostUsage, Reason
from nvtopy.render.header import host_usage_parts, plain, width_of
from nvtopy.render.text import render_snapshot
from nvtopy.sources.collector import Collector


def test_the_reader_measures_cpu_since_its_last_reading_and_says_na_when_no_tick_passed(monkeypatch) -> None:
    ticks = iter([(100.0, 400.0), (100.0, 400.0), (130.0, 500.0)])  # (busy, total) seconds
    monkeypatch.setattr(hostmod, "_cpu_ticks", lambda: next(ticks))
    reader = HostUsageReader()
    first = reader.read()
    assert first.cpu_busy_percent is None, "no tick went by: N/A, never 0 %"
    assert first.unavailable["cpu_busy_percent"] is Reason.NOT_AVAILABLE
    assert reader.read().cpu_busy_percent == pytest.approx(30.0)


def test_each_figure_fails_on_its_own(monkeypatch) -> None:
    def denied():
        raise psutil.AccessDenied()

    def missing():
        raise OSError("no /proc/loadavg")

    monkeypatch.setattr(hostmod.os, "getloadavg", missing)
    monkeypatch.setattr(hostmod, "read_meminfo", lambda: None)  # memory and swap from psutil, whose swap is denied
    monkeypatch.setattr(psutil, "swap_memory", denied)
    usage = HostUsageReader().read()
    assert usage.load_1m is usage.load_5m is usage.load_15m is None
    assert usage.unavailable["load_15m"] is Reason.NOT_AVAILABLE
    assert usage.swap_used_bytes is None and usage.unavailable["swap_total_bytes"] is Reason.NO_PERMISSION
    assert usage.ram_total_bytes == psutil.virtual_memory().total, "memory still read"
    line = plain(host_usage_parts(usage, 200))
    assert "load N/A N/A N/A" in line and "swap N/A" in line and "MEM " in line and "GiB" in line


def test_absurd_figures_are_na_out_of_range_never_shown() -> None:
    usage = HostUsage(
        cpu_busy_percent=math.nan, load_1m=-1.0, load_5m=math.inf, ram_total_bytes=2**70, ram_used_bytes=1
    )
    assert usage.cpu_busy_percent is usage.load_1m is usage.load_5m is usage.ram_total_bytes is None
    assert usage.unavailable["load_5m"] is Reason.OUT_OF_RANGE
    assert "CPU N/A" in plain(host_usage_parts(usage, 120))


@pytest.mark.parametrize("width", [40, 80, 100, 120, 200])
def test_the_host_line_fits_every_width_and_bars_grow(width) -> None:
    usage = HostUsage(
        cpu_busy_percent=42.0, cpu_count=64, load_1m=20.5, load_5m=18.0, load_15m=9.25,
        ram_total_bytes=512 * 2**30, ram_used_bytes=400 * 2**30, swap_total_bytes=8 * 2**30, swap_used_bytes=2**30,
    )  # fmt: skip
    pieces = host_usage_parts(usage, width)
    line = plain(pieces)
    assert width_of(pieces) <= width
    assert "CPU 42%" in line and "MEM 400.0/512.0GiB" in line
    assert ("load 20.50 18.00 9.25" in line) is (width >= 80), "narrow: the load goes before memory"
    if width >= 100:
        assert "█" in line and "swap 1.0/8.0GiB" in line
    assert "…" not in line


def test_a_source_without_the_figures_says_so() -> None:
    assert plain(host_usage_parts(None, 80)) == "host CPU, load, memory, swap: N/A (not in this source's data)"


def test_the_poller_thread_reads_it_with_the_gpus_and_once_text_and_json_carry_it(sim) -> None:
    collector = Collector(sim(gpus=2, seed=1))
    snapshot = collector.collect()
    usage = snapshot.host_usage
    assert usage is not None and usage.cpu_count and usage.ram_total_bytes
    out = io.StringIO()
    render_snapshot(snapshot, out, color=False)
    last = out.getvalue().splitlines()[-1]  # last: the tables keep their lines for scripts that read by position
    assert last.startswith(" CPU ") and "load " in last and "MEM " in last and "█" not in last
    data = json.loads(json.dumps(snapshot_to_dict(snapshot)))
    assert data["host_usage"]["cpu_count"] == usage.cpu_count
    assert data["host_usage"]["unavailable"] == {}
    for key in ("hostname", "driver_version", "gpus", "sequence"):  # added, never renamed
        assert key in data
    replayed = snapshot_from_dict(data)
    assert replayed.host_usage == usage, "a recording replays the host line"
    del data["host_usage"]
    assert snapshot_from_dict(data).host_usage is None, "an older recording: N/A"


def test_a_recorded_host_usage_that_lies_is_na_with_a_reason() -> None:
    usage = host_usage_from_dict(
        {"cpu_busy_percent": "lots", "load_1m": 1e400, "ram_total_bytes": 10, "ram_used_bytes": True,
         "unavailable": {"swap_used_bytes": "no_permission", "cpu_count": "\x1b[31m"}}
    )  # fmt: skip
    assert usage is not None
    assert usage.cpu_busy_percent is None and usage.unavailable["cpu_busy_percent"] is Reason.UNKNOWN
    assert usage.load_1m is None and usage.unavailable["load_1m"] is Reason.OUT_OF_RANGE
    assert usage.ram_used_bytes is None and usage.ram_total_bytes == 10
    assert usage.unavailable["swap_used_bytes"] is Reason.NO_PERMISSION
    assert usage.unavailable["cpu_count"] is Reason.UNKNOWN
    assert host_usage_from_dict("junk") is None


@pytest.mark.skipif(not hasattr(os, "getloadavg"), reason="no load average on this system")
def test_the_real_host_is_read() -> None:
    usage = HostUsageReader().read()
    assert usage.ram_total_bytes and usage.load_1m is not None
