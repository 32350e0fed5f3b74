"""One rule for every reading: outside its physical range a value is N/A "out of range" -- never clamped, never 0.

A driver (or a corrupt GPM sample pair) can give NaN, an infinity, 1e308, a
negative or 250 %; a recording or another host can say anything. Before, NaN
showed as 0 % and raised a false suspected hang, an infinity killed ``nvtopy log``
and ``--once --json`` with an OverflowError, and a negative or a 100.4 % was
clamped. Here: the rule on the model itself (:mod:`nvtopy.ranges`), then each
way in -- the NVML backend (a fake ``pynvml``), the simulation's ``gpm-absurd``
fault, a recording, a peer's exposition -- and each way out: JSON null, a blank
CSV cell, no exporter sample, N/A on screen, health rules that do not guess.
The same on the real nvidia-ml-py path is in ``test_fake_nvml_gpm.py``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from nvtopy.accounting.ledger import observations, observations_from_record
from nvtopy.backends.simulated import faults as sim_faults
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.errors import UsageError
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.contract_decoder import snapshot_from_dict
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.formats.writers import CsvWriter
from nvtopy.health.realwork import SUSPECTED_HANG
from nvtopy.model import (
    GPM_FIELDS,
    GPM_PERCENT_FIELDS,
    GPM_RATE_FIELDS,
    MIG_GPM_FIELDS,
    GpuProcess,
    GpuSample,
    GpuState,
    GpuStatic,
    MigUsage,
    NvLink,
    ProcessType,
    Reason,
    Snapshot,
)
from nvtopy.ranges import FIELD_RANGES, within
from nvtopy.render.cells import ACTIVITY_WORDS
from nvtopy.render.gpu import compact_line, panel_lines
from nvtopy.render.health import gpu_health_lines
from nvtopy.sources.collector import Collector
from nvtopy.sources.remote.hostscrape import HostGpus

from ..builders import run_nvtopy
from ..fake_pynvml import FakeGpu, FakeMig, FakeNvml, FakeProcess, FakeSample, now_us

H100 = "H100 80GB HBM3"
NVTOPY = [sys.executable, "-m", "nvtopy"]
# What no percentage can be: FAKE_NVML_GPM_ABSURD's values, and just past each end.
ABSURD = (math.nan, math.inf, -math.inf, 1e308, -42.0, 250.0, 100.4, -0.1)
# FAKE_NVML_GPM_ABSURD's names (../shared/fake-nvml/README.md), which the gpm-absurd fault takes too.
ABSURD_KINDS = ("nan", "inf", "-inf", "huge", "neg", "over")


def _snapshot(sim, faults: list[str], gpus: int = 3, model: str = H100) -> Snapshot:
    return Collector(sim(gpus=gpus, model=model, faults=parse_fault_specs(faults, gpus=gpus))).collect()


# ----------------------------------------------------------------- the rule, on the model


def _numeric_fields(cls: type) -> set[str]:
    return {
        name
        for name, spec in cls.__dataclass_fields__.items()  # type: ignore[attr-defined]
        if spec.type in ("int | None", "float | None")
    }


@pytest.mark.parametrize(
    ("cls", "not_readings"),
    [
        (GpuStatic, {"host_index"}),  # an index on another host: a name, not a reading
        (GpuSample, set()),
        (MigUsage, set()),
        (NvLink, set()),
        (GpuProcess, {"uid", "ppid", "ns_pid", "host_pid", "gpu_instance_id", "compute_instance_id"}),  # ids
    ],
)
def test_every_reading_of_the_model_has_a_range(cls, not_readings):
    """A reading added without a range would let NaN and 1e308 through again: it must be named here or there."""
    missing = _numeric_fields(cls) - not_readings - set(FIELD_RANGES)
    assert not missing, f"{cls.__name__}: no range in nvtopy.ranges.FIELD_RANGES for {sorted(missing)}"


@pytest.mark.parametrize("value", ABSURD, ids=repr)
def test_a_percentage_outside_0_to_100_is_none_out_of_range(value):
    sample = GpuSample(
        0.0,
        sm_active_percent=value,
        utilization_gpu_percent=value,
        tensor_active_percent=26.0,
        unavailable={"fan_percent": Reason.NOT_SUPPORTED},
    )
    for name in ("sm_active_percent", "utilization_gpu_percent"):
        assert getattr(sample, name) is None and sample.why(name) is Reason.OUT_OF_RANGE, name
    assert sample.tensor_active_percent == 26.0 and sample.why("tensor_active_percent") is None
    assert sample.why("fan_percent") is Reason.NOT_SUPPORTED, "a reason already given stays"
    assert dataclasses.replace(sample, timestamp=1.0).unavailable == sample.unavailable, "replace keeps it"


@pytest.mark.parametrize(
    ("cls", "name", "bad", "good"),
    [
        (GpuSample, "power_draw_w", (math.inf, -1.0, 1e308, 4_294_967.295), (0.0, 700.5, 2700.0)),
        (GpuSample, "temperature_c", (2**32 - 1, -300, math.nan), (-40, 0, 95)),
        (GpuSample, "memory_used_bytes", (-1, 2**64, 10**400), (0, 80 << 30, 2**64 - 1)),
        (GpuSample, "gpm_pcie_rx_bytes_per_s", (-0.1, math.inf, 1e308), (0.0, 250.0 * 2**20)),
        (GpuSample, "pstate", (16, 32, -1), (0, 15)),
        (GpuStatic, "power_max_limit_w", (math.nan, -5.0, 1e30), (700.0,)),
        (MigUsage, "sm_active_percent", (math.nan, 250.0, -0.1), (0.0, 100.0)),
        (GpuProcess, "sm_percent", (101, 2**32 - 1, -1), (0, 100)),
        (GpuProcess, "cpu_percent", (math.inf, -0.5), (0.0, 1600.0)),
        (GpuProcess, "create_time", (math.nan, math.inf, -1.0), (1_700_000_000.0,)),
    ],
)
def test_each_reading_keeps_what_fits_and_refuses_what_does_not(cls, name, bad, good):
    def made(value: object) -> object:
        if cls is GpuSample:
            return GpuSample(0.0, **{name: value})
        if cls is GpuStatic:
            return GpuStatic(0, **{name: value})
        if cls is MigUsage:
            return MigUsage(0, **{name: value})
        return GpuProcess(0, None, 1, ProcessType.COMPUTE, None, **{name: value})

    for value in good:
        assert getattr(made(value), name) == value and within(name, value), (name, value)
    for value in bad:
        item = made(value)
        assert getattr(item, name) is None and item.unavailable[name] is Reason.OUT_OF_RANGE, (name, value)
        assert not within(name, value)


def test_an_nvlink_outside_its_range_is_none():
    link = NvLink(0, active=True, rx_bytes_per_s=-5, tx_bytes_per_s=2**60, errors=3)
    assert (link.rx_bytes_per_s, link.tx_bytes_per_s, link.errors) == (None, None, 3)


# ----------------------------------------------------------------- from the NVML driver (a fake pynvml)


def _h100(**fields) -> FakeNvml:
    gpm = {1: 97.0, 2: 52.5, 3: 20.0, 5: 26.0, 10: 31.0, 11: 2.0, 12: 18.0, 13: 6.0, 20: 100.0, 21: 250.0, 30: 10.0}
    fields.setdefault("gpm_metrics", gpm)
    return FakeNvml([FakeGpu(0, name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpm=True, **fields)])


def _measuring(make_backend, fake: FakeNvml):
    """A backend whose GPM readings wait for a measurable pair (as ``--once``), so each collect has figures."""
    backend = make_backend(fake)
    backend.one_shot = True
    return backend


def test_driver_numbers_no_gpu_has_are_na_never_shown(make_backend):
    """Unsigned garbage from the driver (2**32 - 1) is out of range wherever it lands: 4.3 MW, 4e9 degrees."""
    fake = _h100(util_gpu=2**32 - 1, temperature=2**32 - 1, power_usage_mw=2**32 - 1, fan=2**32 - 1)
    sample = Collector(_measuring(make_backend, fake)).collect().gpus[0].sample
    for name in ("utilization_gpu_percent", "temperature_c", "power_draw_w", "fan_percent"):
        assert getattr(sample, name) is None and sample.why(name) is Reason.OUT_OF_RANGE, name
    assert sample.memory_used_bytes == 10 << 30, "the rest is read as usual"


def test_nan_sm_activity_on_a_busy_gpu_raises_no_suspected_hang(make_backend, clock):
    """NaN read as 0 % SM active made a busy GPU drawing 650 W look hung after 5 min: N/A is unknown, not 0."""
    fake = _h100(util_gpu=100, power_usage_mw=650_000, power_limit_mw=700_000)
    fake.gpus[0].gpm_metrics[2] = math.nan
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 4 << 30)]
    backend = _measuring(make_backend, fake)
    backend.now = clock  # the readings' time: the manual clock (NVML's backend dates them by the wall clock)
    collector = Collector(backend)
    states = []
    for _ in range(3):
        states.append(collector.collect().gpus[0])
        clock.advance(200)  # 400 s in all: past the 5 min a hang needs
    for state in states:
        assert state.health.suspected_hang_seconds is None
        assert "suspected-hang" not in [f.code for f in state.health.findings]
        assert all(SUSPECTED_HANG not in p.flags for p in state.processes)
    sample = states[-1].sample
    assert sample.sm_active_percent is None and sample.why("sm_active_percent") is Reason.OUT_OF_RANGE
    assert sample.utilization_gpu_percent == 100


def test_a_process_with_garbage_utilization_only_is_na_not_idle(make_backend):
    """Some drivers give samples past 100 %: one among good ones is skipped; alone, it is N/A -- not 0 % (idle)."""
    fake = _h100()
    me, parent = os.getpid(), os.getppid()
    fake.gpus[0].compute_procs = [FakeProcess(me, 1 << 30), FakeProcess(parent, 1 << 30)]
    fake.gpus[0].samples = [
        FakeSample(me, sm=250, mem=5, timestamp_us=now_us(-0.05)),  # garbage, and all there is of it
        FakeSample(parent, sm=40, mem=9, timestamp_us=now_us(-0.3)),
        FakeSample(parent, sm=4_000_000_000, mem=7, timestamp_us=now_us(-0.1)),  # garbage: the good one stays
    ]
    rows = {p.pid: p for p in Collector(_measuring(make_backend, fake)).collect().gpus[0].processes}
    assert rows[me].sm_percent is None and rows[me].unavailable["sm_percent"] is Reason.OUT_OF_RANGE
    assert rows[me].memory_percent == 5, "the sample's other figure is within its range"
    assert (rows[parent].sm_percent, rows[parent].memory_percent) == (40, 9)


def test_a_mig_instances_absurd_gpm_is_na_and_its_neighbours_keep_theirs(make_backend):
    fake = _h100(
        mig_mode=(1, 1),
        mig_slots=[FakeMig("MIG-aaaa", "3g.40gb", 1, 0), FakeMig("MIG-bbbb", "3g.40gb", 2, 0)],
        gpm_mig={1: {1: math.inf, 2: math.inf, 3: 1.0, 5: -1.0, 10: 250.0}, 2: {1: 80.0, 2: 60.0, 3: 30.0, 5: 40.0}},
    )
    first, second = Collector(_measuring(make_backend, fake)).collect().gpus[0].sample.mig_usage
    for name in ("graphics_active_percent", "sm_active_percent", "tensor_active_percent", "dram_active_percent"):
        assert getattr(first, name) is None and first.unavailable[name] is Reason.OUT_OF_RANGE, name
    assert first.sm_occupancy_percent == 1.0
    assert (second.sm_active_percent, second.tensor_active_percent) == (60.0, 40.0)


# ----------------------------------------------------------------- the simulation's gpm-absurd fault


def test_gpm_absurd_parses_as_fake_nvml_names_its_values():
    faults = parse_fault_specs(["gpm-absurd=huge@1", "gpm-absurd=NaN@2"], gpus=4)
    assert faults.gpm_absurd[1] == 1e308 and math.isnan(faults.gpm_absurd[2])
    assert tuple(sim_faults.GPM_ABSURD_VALUES) == ABSURD_KINDS
    assert parse_fault_specs(["gpm-absurd=neg"]).gpm_absurd == {None: -42.0}, "every GPU by default"
    for spec in ("gpm-absurd", "gpm-absurd=3", "gpm-absurd=nan@7"):
        with pytest.raises(UsageError, match="gpm-absurd"):
            parse_fault_specs([spec], gpus=4)


@pytest.mark.parametrize("kind", ABSURD_KINDS)
def test_gpm_absurd_makes_that_gpus_figures_na(sim, kind):
    snapshot = _snapshot(sim, [f"gpm-absurd={kind}@1", "mig=2@2", f"gpm-absurd={kind}@2"])
    healthy, absurd, mig = (gpu.sample for gpu in snapshot.gpus)
    rates_real = kind == "over"  # 250 MiB/s is a rate a bus carries
    for name in GPM_FIELDS:
        assert getattr(healthy, name) is not None, name
        if name in GPM_RATE_FIELDS and rates_real:
            assert getattr(absurd, name) == 250.0 * 2**20
            continue
        assert getattr(absurd, name) is None and absurd.why(name) is Reason.OUT_OF_RANGE, name
    for usage in mig.mig_usage:
        assert all(usage.unavailable[name] is Reason.OUT_OF_RANGE for name in MIG_GPM_FIELDS), usage


def test_gpm_absurd_before_hopper_is_still_not_supported(sim):
    snapshot = _snapshot(sim, ["gpm-absurd=nan"], gpus=1, model="A100-SXM4-80GB")
    assert snapshot.gpus[0].sample.why("sm_active_percent") is Reason.NOT_SUPPORTED


# ----------------------------------------------------------------- every way out: JSON, CSV, exporter, screen


def test_json_is_null_with_the_reason_csv_blank_and_the_exporter_leaves_the_sample_out(sim):
    snapshot = _snapshot(sim, ["gpm-absurd=inf@1"], gpus=2)
    data = json.loads(json.dumps(snapshot_to_dict(snapshot), allow_nan=False))  # no NaN or Infinity written
    good, bad = data["gpus"]
    for name in GPM_PERCENT_FIELDS:
        assert isinstance(good[name], float) and bad[name] is None and bad["unavailable"][name] == "out_of_range"

    out = io.StringIO()
    CsvWriter(out, ["index", *GPM_FIELDS], processes=False, header=True).write(snapshot)
    good_row, bad_row = csv.DictReader(io.StringIO(out.getvalue()))
    assert all(bad_row[name] == "" for name in GPM_FIELDS) and good_row["sm_active_percent"] != ""

    class Latest:
        latest = snapshot

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(Latest()))
    text = generate_latest(registry).decode()
    sm_lines = [line for line in text.splitlines() if line.startswith("DCGM_FI_PROF_SM_ACTIVE{")]
    assert len(sm_lines) == 1 and 'gpu="0"' in sm_lines[0], "GPU 1 has no sample: absent, never 0 or +Inf"
    assert "Inf" not in text and "NaN" not in text


def test_the_views_draw_na_out_of_range_never_nan_nor_the_figure():
    """The panel, the compact line and the health screen drew "nan%", "TNS 250%" and "DRAM -1%"."""
    static = GpuStatic(0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 << 30)
    sample = GpuSample(
        1.0,
        utilization_gpu_percent=100,
        memory_used_bytes=40 << 30,
        power_draw_w=650.0,
        power_limit_w=700.0,
        graphics_active_percent=100.0,
        sm_active_percent=math.nan,
        tensor_active_percent=250.0,
        dram_active_percent=-1.0,
    )
    state = GpuState(static, sample)
    panel = [line.plain for line in panel_lines(state, 80)]
    assert "SM  N/A (out of range)" in panel[2], panel
    real_work = next(line.plain for line in gpu_health_lines(state) if "Real work" in line.plain)
    assert real_work.split("Real work")[1].strip() == "N/A (out of range)"
    drawn = "\n".join([*panel, real_work, compact_line(state, 100).plain])
    for figure in ("nan", "inf", "250%", "-1%"):
        assert figure not in drawn, figure
    assert ACTIVITY_WORDS not in drawn, "an unknown SM activity is not 'little work'"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_nvtopy(*args, timeout=120)


DEMO = ("--demo", "--demo-model", H100, "--demo-gpus", "2", "--demo-fault", "gpm-absurd=inf@1")


def test_once_json_and_text_survive_an_infinite_figure():
    result = _run(*DEMO, "--once", "--json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    good, bad = json.loads(result.stdout)["gpus"]
    assert bad["sm_active_percent"] is None and bad["unavailable"]["sm_active_percent"] == "out_of_range"
    assert good["sm_active_percent"] is not None
    text = _run(*DEMO, "--once")
    assert text.returncode == 0 and "GPU 1: SM, tensor and DRAM activity N/A: out of range" in text.stdout


@pytest.mark.parametrize("kind", ["inf", "huge", "nan"])
def test_log_keeps_writing_whatever_the_driver_says(kind):
    """An OverflowError used to end a running log after its first row: the data after it was lost."""
    fields = "index,sm_active_percent,gpm_pcie_rx_bytes_per_s,utilization_gpu_percent"
    args = ("--demo", "--demo-model", H100, "--demo-gpus", "2", "--demo-fault", f"gpm-absurd={kind}@1")
    result = _run("log", *args, "--count", "3", "--interval", "0.1", "--fields", fields)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 6, result.stdout
    for row in rows:
        if row["index"] == "1":
            assert row["sm_active_percent"] == row["gpm_pcie_rx_bytes_per_s"] == "" and row["utilization_gpu_percent"]


# ----------------------------------------------------------------- from a recording and from a peer


def _recorded_line(sim) -> dict:
    """One recorded line with a figure of every kind no GPU gives (json writes NaN and Infinity; 1e400 reads as inf)."""
    data = snapshot_to_dict(_snapshot(sim, [], gpus=1))
    gpu = data["gpus"][0]
    gpu.update(
        sm_active_percent=math.nan,
        tensor_active_percent=250.0,
        dram_active_percent=-0.1,
        utilization_gpu_percent=101,
        power_draw_w=math.inf,
        temperature_c=10**30,
    )
    text = json.dumps(data).replace('"temperature_c": 1000000000000000000000000000000', '"temperature_c": 1e400')
    return json.loads(text)


def test_replay_reads_a_recorded_absurd_figure_as_na_out_of_range(sim):
    data = _recorded_line(sim)
    sample = snapshot_from_dict(data).gpus[0].sample
    for name in (
        "tensor_active_percent",
        "dram_active_percent",
        "utilization_gpu_percent",
        "sm_active_percent",
        "power_draw_w",
        "temperature_c",
    ):
        assert getattr(sample, name) is None and sample.why(name) == "out_of_range", name
    assert sample.memory_used_bytes is not None
    assert observations_from_record(data) == list(observations(snapshot_from_dict(data))), "report reads the same"
    assert observations_from_record(data)[0].activity_percent is None, "not 250 % busy"


def test_a_peers_out_of_range_process_values_say_so():
    gpu = 'gpu="0",UUID="GPU-0",Hostname="peer"'
    labels = f'{gpu},pid="100",type="C",user="u",command="c"'
    text = (
        f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}} 10\n"
        f"DCGM_FI_PROF_SM_ACTIVE{{{gpu}}} NaN\n"
        f"nvtopy_process_sm_utilization_percent{{{labels}}} 250\n"
        f"nvtopy_process_cpu_percent{{{labels}}} +Inf\n"
        f"nvtopy_process_start_time_seconds{{{labels}}} -1\n"
        f"nvtopy_process_gpu_memory_bytes{{{labels}}} 1048576\n"
    )
    (state,) = HostGpus().gpus(parse_exposition(text, "http://peer:9400/metrics"), 0, 1_800_000_000.0)
    (process,) = state.processes
    for name in ("sm_percent", "cpu_percent", "create_time", "running_seconds"):
        assert getattr(process, name) is None and process.unavailable.get(name) == "out_of_range", name
    assert state.sample.sm_active_percent is None and state.sample.why("sm_active_percent") == "out_of_range"
    assert process.gpu_memory_bytes == 1048576 and "gpu_memory_bytes" not in process.unavailable
    assert "memory_percent" not in process.unavailable, "a series not said is no claim"


@pytest.mark.parametrize(
    "value", [0x7FFFFFFFFFFFFFF0, 0x7FFFFFFFFFFFFFF3, 2**64 - 1], ids=["blank", "no-perm", "nvml-na"]
)
def test_a_counter_at_a_sentinel_is_na_never_a_figure(value):
    """DCGM's int64 blanks and NVML's "not available" are no counts: energy read at one is not 2.56 billion kWh,
    whether it comes from the driver, a recording or an exporter."""
    sample = GpuSample(0.0, energy_mj=value, ecc_uncorrected_volatile=value)
    for name in ("energy_mj", "ecc_uncorrected_volatile"):
        assert getattr(sample, name) is None and sample.why(name) is Reason.OUT_OF_RANGE, name
    gpu = 'gpu="0",UUID="GPU-0",Hostname="peer"'
    text = f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}} 10\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{gpu}}} {value}\n"
    (state,) = HostGpus().gpus(parse_exposition(text, "http://peer:9400/metrics"), 0, 1_800_000_000.0)
    assert state.sample.energy_mj is None and state.sample.why("energy_mj") == "out_of_range"
    assert GpuSample(0.0, energy_mj=0x7FFFFFFFFFFFFFEF).energy_mj == 0x7FFFFFFFFFFFFFEF, "the last count below"
