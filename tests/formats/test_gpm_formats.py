"""The real work (NVML's GPM) in every output: JSON, CSV/JSONL, the exporter, --remote and replay.

Expected values are computed here from the snapshot's own fields with DCGM's units
(ratio = percent / 100, bytes per second as they are), not through
:mod:`nvtopy.formats.dcgm`, so a wrong attribute or scale in the table fails here.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.commands.log import groups_for
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.formats.writers import DEFAULT_GPU_FIELDS, GPU_FIELDS, MIG_FIELDS, CsvWriter, JsonlWriter
from nvtopy.model import GPM_FIELDS, GPM_PERCENT_FIELDS, GPM_RATE_FIELDS, MIG_GPM_FIELDS, Reason, Snapshot
from nvtopy.sources.collector import Collector
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.sources.replay import load_recording

from ..builders import run_nvtopy

A100 = "A100-SXM4-80GB"

# dcgm-exporter's name -> (the model's field, ratio?): written out here on purpose (cluster notes, section 6).
PROF = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("graphics_active_percent", True),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_percent", True),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_percent", True),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_percent", True),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_percent", True),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("fp64_active_percent", True),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("fp32_active_percent", True),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("fp16_active_percent", True),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gpm_pcie_tx_bytes_per_s", False),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gpm_pcie_rx_bytes_per_s", False),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("gpm_nvlink_tx_bytes_per_s", False),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("gpm_nvlink_rx_bytes_per_s", False),
}
# dcgm-exporter's help texts (etc/dcp-metrics-included.csv), verbatim.
DCGM_HELP = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned.",
    "DCGM_FI_PROF_SM_OCCUPANCY": "The ratio of number of warps resident on an SM.",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "Ratio of cycles the tensor (HMMA) pipe is active.",
    "DCGM_FI_PROF_DRAM_ACTIVE": "Ratio of cycles the device memory interface is active sending or receiving data.",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": "Ratio of cycles the fp64 pipes are active.",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": "Ratio of cycles the fp32 pipes are active.",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": "Ratio of cycles the fp16 pipes are active.",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "The rate of data transmitted over the PCIe bus - including both protocol headers "
    "and data payloads - in bytes per second.",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "The rate of data received over the PCIe bus - including both protocol headers "
    "and data payloads - in bytes per second.",
}
# What a GPU instance's series carry of its own activity (MIG_GPM_FIELDS).
INSTANCE_PROF = {name: field for name, (field, _) in PROF.items() if field in MIG_GPM_FIELDS}


def _snapshot(sim, *, model: str = "H100 80GB HBM3", faults: list[str] | None = None, gpus: int = 4) -> Snapshot:
    backend = sim(gpus=gpus, model=model, faults=parse_fault_specs(faults or [], gpus=gpus))
    return Collector(backend).collect()


def _exposition(snapshot: Snapshot) -> str:
    class Latest:
        latest = snapshot

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(Latest()))
    return generate_latest(registry).decode("utf-8")


def _families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _metric(value: float, ratio: bool) -> float:
    return value / 100 if ratio else value


# ---------------------------------------------------------------- JSON


def test_json_has_every_gpm_field_on_each_gpu(sim):
    data = json.loads(json.dumps(snapshot_to_dict(_snapshot(sim))))
    for gpu in data["gpus"]:
        for name in GPM_PERCENT_FIELDS:
            value = gpu[name]
            assert isinstance(value, float) and 0 <= value <= 100, (name, value)
            assert value == round(value, 2), "two decimals"
        for name in GPM_RATE_FIELDS:
            assert isinstance(gpu[name], int) and gpu[name] >= 0, "whole bytes per second"
        assert not set(GPM_FIELDS) & set(gpu["unavailable"])
        assert gpu["sm_active_percent"] <= gpu["graphics_active_percent"] + 0.01


def test_json_gpm_is_null_with_its_reason_before_hopper(sim):
    data = json.loads(json.dumps(snapshot_to_dict(_snapshot(sim, model=A100))))
    for gpu in data["gpus"]:
        for name in GPM_FIELDS:
            assert gpu[name] is None, name
            assert gpu["unavailable"][name] == "not_supported", name
        assert gpu["utilization_gpu_percent"] is not None, "only GPM is missing"


def test_json_mig_devices_carry_their_own_gpm(sim):
    snapshot = _snapshot(sim, faults=["mig=3@1"])
    data = json.loads(json.dumps(snapshot_to_dict(snapshot)))
    devices = data["gpus"][1]["mig_devices"]
    assert len(devices) == 3
    for device, mig in zip(devices, snapshot.gpus[1].mig, strict=True):
        for name in MIG_GPM_FIELDS:
            assert device[name] == round(getattr(mig.usage, name), 2), name
        assert device["unavailable"] == {}
    busy = [d for d in devices if d["process_count"]]
    idle = [d for d in devices if not d["process_count"]]
    assert busy and all(d["sm_active_percent"] > 0 for d in busy), "an instance running jobs computes"
    assert all(d["sm_active_percent"] == 0 for d in idle), "an idle instance: 0, measured"
    assert "sm_active_percent" not in data["gpus"][0]["mig_devices"], "no MIG on GPU 0: no devices"


def test_json_mig_devices_before_hopper_say_why(sim):
    data = json.loads(json.dumps(snapshot_to_dict(_snapshot(sim, model=A100, faults=["mig=3@1"]))))
    for device in data["gpus"][1]["mig_devices"]:
        for name in MIG_GPM_FIELDS:
            assert device[name] is None and device["unavailable"][name] == "not_supported", name
        assert device["memory_used_bytes"] is not None


def test_stuck_gpu_is_busy_yet_computes_almost_nothing(sim):
    gpu = json.loads(json.dumps(snapshot_to_dict(_snapshot(sim, faults=["stuck@2"]))))["gpus"][2]
    assert gpu["utilization_gpu_percent"] == 100
    assert gpu["sm_active_percent"] < 5, "a spinning collective: ~3 % of SMs active"


# ---------------------------------------------------------------- CSV and JSONL


def test_csv_fields_and_defaults():
    assert set(GPM_FIELDS) <= set(GPU_FIELDS)
    assert {f"mig_{name}" for name in MIG_GPM_FIELDS} <= set(MIG_FIELDS) <= set(GPU_FIELDS)
    # The default list grows at its end (as health did): what was there keeps its place.
    assert DEFAULT_GPU_FIELDS[-3:] == ("sm_active_percent", "tensor_active_percent", "dram_active_percent")
    assert DEFAULT_GPU_FIELDS[:5] == ("timestamp", "index", "name", "bus_id", "utilization_gpu_percent")
    assert "gpm" in groups_for("csv", list(DEFAULT_GPU_FIELDS), False)
    assert groups_for("csv", ["index", "fp64_active_percent"], False) == {"gpm"}
    assert groups_for("csv", ["index", "mig_sm_active_percent"], False) == {"mig", "gpm"}
    assert "gpm" not in groups_for("csv", ["index", "temperature_c"], False), "only what is written is read"


def _csv_rows(snapshot: Snapshot, fields: list[str]) -> list[dict[str, str]]:
    out = io.StringIO()
    CsvWriter(out, fields, processes=False, header=True).write(snapshot)
    return list(csv.DictReader(io.StringIO(out.getvalue())))


def test_csv_cells_are_the_json_values(sim):
    snapshot = _snapshot(sim)
    rows = _csv_rows(snapshot, ["index", *GPM_FIELDS])
    data = snapshot_to_dict(snapshot, processes=False)
    for row, gpu in zip(rows, data["gpus"], strict=True):
        for name in GPM_PERCENT_FIELDS:
            assert float(row[name]) == gpu[name], name
        for name in GPM_RATE_FIELDS:
            assert row[name] == str(gpu[name]), "a plain whole number, never 1.2e+09"


def test_csv_cells_are_empty_before_hopper(sim):
    for row in _csv_rows(_snapshot(sim, model=A100), list(DEFAULT_GPU_FIELDS)):
        assert row["sm_active_percent"] == row["tensor_active_percent"] == row["dram_active_percent"] == ""
        assert row["utilization_gpu_percent"] != ""


def test_csv_mig_rows_have_the_instances_gpm(sim):
    snapshot = _snapshot(sim, faults=["mig=3@1"])
    rows = _csv_rows(snapshot, ["index", "sm_active_percent", "mig_index", "mig_sm_active_percent"])
    gpu_row, *mig_rows = [r for r in rows if r["index"] == "1"]
    assert gpu_row["mig_index"] == "" and gpu_row["mig_sm_active_percent"] == ""
    assert [r["mig_index"] for r in mig_rows] == ["0", "1", "2"]
    for row, mig in zip(mig_rows, snapshot.gpus[1].mig, strict=True):
        assert row["sm_active_percent"] == "", "a device's row leaves the GPU's columns empty"
        assert float(row["mig_sm_active_percent"]) == round(mig.usage.sm_active_percent, 2)


def test_jsonl_fields_keep_the_gpm_fields_asked_for(sim):
    out = io.StringIO()
    JsonlWriter(out, ["index", "sm_active_percent", "gpm_pcie_rx_bytes_per_s"], processes=False).write(_snapshot(sim))
    gpu = json.loads(out.getvalue())["gpus"][0]
    assert set(gpu) >= {"index", "sm_active_percent", "gpm_pcie_rx_bytes_per_s"}
    assert "tensor_active_percent" not in gpu


def test_log_appending_to_an_older_file_keeps_its_columns(tmp_path):
    """A logger restarted after an upgrade goes on with its file's header, not the grown default list."""
    path = tmp_path / "gpus.csv"
    old = [f for f in DEFAULT_GPU_FIELDS if f not in GPM_FIELDS]
    path.write_text(",".join(old) + "\n", encoding="utf-8")
    done = run_nvtopy("log", "--demo", "--count", "1", "--output", str(path), timeout=60)
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert rows[0] == old and len(rows) == 5
    assert all(len(row) == len(old) for row in rows), "every row matches the file's header"
    fresh = tmp_path / "new.csv"
    done = run_nvtopy("log", "--demo", "--count", "1", "--output", str(fresh), timeout=60)
    assert done.returncode == 0, done.stderr
    header, first, *_ = csv.reader(io.StringIO(fresh.read_text(encoding="utf-8")))
    assert header == list(DEFAULT_GPU_FIELDS)
    assert 0 <= float(first[header.index("sm_active_percent")]) <= 100, "a new file: the GPM defaults, filled"


# ---------------------------------------------------------------- exporter


def test_exporter_names_units_help_and_types(sim):
    snapshot = _snapshot(sim)
    text = _exposition(snapshot)
    families = _families(text)
    for name, (field, ratio) in PROF.items():
        assert families[name].type == "gauge", name
        assert f"# TYPE {name} gauge" in text
        if name in DCGM_HELP:
            assert families[name].documentation == DCGM_HELP[name], name
        for gpu in snapshot.gpus:
            (sample,) = [s for s in families[name].samples if s.labels["gpu"] == str(gpu.index)]
            assert sample.value == _metric(getattr(gpu.sample, field), ratio), name
            assert {"Hostname", "gpu", "UUID", "modelName", "pci_bus_id", "device"} <= set(sample.labels)
            assert "GPU_I_ID" not in sample.labels
            if ratio:
                assert 0 <= sample.value <= 1, (name, sample.value)
    # bytes/s, not MiB/s: an NVLink-connected H100 moves gigabytes per second.
    assert families["DCGM_FI_PROF_NVLINK_RX_BYTES"].samples[0].value > 1e9
    assert "decoder_active_percent" not in text


def test_exporter_leaves_gpm_out_when_not_measured(sim):
    families = _families(_exposition(_snapshot(sim, model=A100, faults=["mig=3@1"])))
    for name in PROF:
        assert families.get(name) is None or families[name].samples == [], f"{name}: absent, never 0"
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples, "everything else is still exported"
    assert [s for s in families["DCGM_FI_DEV_FB_USED"].samples if "GPU_I_ID" in s.labels], "instances' memory too"


def test_exporter_gpu_instances_have_their_own_gpm(sim):
    snapshot = _snapshot(sim, faults=["mig=3@1"])
    families = _families(_exposition(snapshot))
    migs = {str(m.instance.gpu_instance_id): m for m in snapshot.gpus[1].mig}
    for name, (field, _) in PROF.items():
        instance_samples = [s for s in families[name].samples if "GPU_I_ID" in s.labels]
        if name not in INSTANCE_PROF:
            assert instance_samples == [], f"{name}: GPM measures no such thing per instance"
            continue
        assert sorted(s.labels["GPU_I_ID"] for s in instance_samples) == sorted(migs)
        for sample in instance_samples:
            mig = migs[sample.labels["GPU_I_ID"]]
            assert sample.labels["gpu"] == "1" and sample.labels["UUID"] == snapshot.gpus[1].static.uuid
            assert sample.labels["GPU_I_PROFILE"] == mig.instance.profile
            assert sample.value == getattr(mig.usage, field) / 100
            assert 0 <= sample.value <= 1


def test_stuck_gpu_in_the_exporter(sim):
    families = _families(_exposition(_snapshot(sim, faults=["stuck@2"])))

    def value(name: str) -> float:
        (sample,) = [s for s in families[name].samples if s.labels["gpu"] == "2"]
        return sample.value

    assert value("DCGM_FI_DEV_GPU_UTIL") == 100 and value("DCGM_FI_PROF_SM_ACTIVE") < 0.05


# ---------------------------------------------------------------- --remote


def test_remote_reads_the_real_work_back(sim):
    snapshot = _snapshot(sim, faults=["mig=3@1"])
    scrape = parse_exposition(_exposition(snapshot), "http://node7:9400/metrics")
    shown = RemoteHosts(["node7:9400"])._snapshot([scrape])
    for before, after in zip(snapshot.gpus, shown.gpus, strict=True):
        for name, (field, _) in PROF.items():
            assert getattr(after.sample, field) == pytest.approx(getattr(before.sample, field), rel=1e-12), name
            assert field not in after.sample.unavailable
        assert after.sample.decoder_active_percent is None, "not exported: N/A"
        assert after.sample.unavailable["decoder_active_percent"] is Reason.NOT_AVAILABLE
        for mig_before, mig_after in zip(before.mig, after.mig, strict=True):
            for field in MIG_GPM_FIELDS:
                assert getattr(mig_after.usage, field) == pytest.approx(getattr(mig_before.usage, field), abs=1e-9)
    assert shown.gpus[1].history.sm_active_percent[-1] == pytest.approx(snapshot.gpus[1].sample.sm_active_percent)


def test_remote_host_without_gpm_shows_not_available(sim):
    scrape = parse_exposition(_exposition(_snapshot(sim, model=A100, gpus=1)), "http://a100:9400/metrics")
    (gpu,) = RemoteHosts(["a100:9400"])._snapshot([scrape]).gpus
    for field in GPM_FIELDS:
        assert getattr(gpu.sample, field) is None
        assert gpu.sample.unavailable[field] is Reason.NOT_AVAILABLE


HOSTILE = "\n".join(
    [
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} 1.5',  # a ratio above 1
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a"} NaN',
        'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-a"} -0.01',
        'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-a"} +Inf',
        'DCGM_FI_PROF_PCIE_RX_BYTES{gpu="0",UUID="GPU-a"} 1e300',
        'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-a"} -5',
        'DCGM_FI_PROF_SM_OCCUPANCY{gpu="0",UUID="GPU-a"} 0.25',  # the one sane value
        'DCGM_FI_PROF_NVLINK_RX_BYTES{gpu="0",UUID="GPU-a"} 1048576',
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"} 7',
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"} 0.5',
    ]
)


def test_remote_values_out_of_range_are_na_out_of_range_never_shown():
    scrape = parse_exposition(HOSTILE + "\n", "http://evil:9400/metrics")
    (gpu,) = RemoteHosts(["evil:9400"])._snapshot([scrape]).gpus
    sample = gpu.sample
    for field in (
        "sm_active_percent",
        "graphics_active_percent",
        "tensor_active_percent",
        "dram_active_percent",
        "gpm_pcie_rx_bytes_per_s",
        "gpm_pcie_tx_bytes_per_s",
    ):
        assert getattr(sample, field) is None and sample.unavailable[field] is Reason.OUT_OF_RANGE, field
    assert sample.sm_occupancy_percent == 25.0 and sample.gpm_nvlink_rx_bytes_per_s == 1048576.0
    (usage,) = sample.mig_usage
    assert usage.sm_active_percent is None and usage.unavailable["sm_active_percent"] is Reason.OUT_OF_RANGE
    assert usage.graphics_active_percent == 50.0
    assert sample.graphics_active_percent is None, "an instance's value never passes for the GPU's"


def test_remote_reads_dcgm_exporters_profiling_of_a_mig_gpu_as_the_instances():
    """dcgm-exporter exports a MIG GPU's instances only: their activity is theirs, not the GPU's."""
    text = (
        "\n".join(
            [
                'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"} 40',
                'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"} 0.25',
                'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="2",GPU_I_PROFILE="3g.40gb"} 0.75',
                'DCGM_FI_PROF_PCIE_RX_BYTES{gpu="0",UUID="GPU-a",GPU_I_ID="2",GPU_I_PROFILE="3g.40gb"} 1000',
            ]
        )
        + "\n"
    )
    (_, values, _), *_ = parse_exposition(text, "http://dgx:9400/metrics").gpus
    assert "tensor_active_percent" not in values, "the GPU's own tensor activity is not known"
    assert values["temperature_c"] == 40
    assert values["gpm_pcie_rx_bytes_per_s"] == 1000, "what GPM does not measure per instance is the GPU's"
    assert [u.tensor_active_percent for u in values["mig_usage"]] == [25.0, 75.0]


# ---------------------------------------------------------------- replay


def _record(path, *snapshots: Snapshot):
    with path.open("w", encoding="utf-8") as out:
        writer = JsonlWriter(out, None, processes=True)
        for snapshot in snapshots:
            writer.write(snapshot)
    return load_recording(str(path))


def _as_recorded(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    return round(value) if name in GPM_RATE_FIELDS else round(value, 2)


def test_replay_round_trip(tmp_path, sim, clock):
    backend = sim(gpus=2, faults=parse_fault_specs(["mig=3@1"], gpus=2))
    collector = Collector(backend)
    recorded = []
    for _ in range(3):
        clock.advance(1)
        recorded.append(collector.collect())
    loaded = _record(tmp_path / "run.jsonl", *recorded)
    assert loaded.stopped is None and len(loaded.snapshots) == 3
    for before, after in zip(recorded, loaded.snapshots, strict=True):
        for gpu_before, gpu_after in zip(before.gpus, after.gpus, strict=True):
            for name in GPM_FIELDS:
                assert getattr(gpu_after.sample, name) == _as_recorded(name, getattr(gpu_before.sample, name)), name
            for mig_before, mig_after in zip(gpu_before.mig, gpu_after.mig, strict=True):
                for name in MIG_GPM_FIELDS:
                    assert getattr(mig_after.usage, name) == round(getattr(mig_before.usage, name), 2), name
    history = loaded.snapshots[-1].gpus[0].history.sm_active_percent
    assert list(history) == [round(s.gpus[0].sample.sm_active_percent, 2) for s in recorded], "the chart too"
    again = json.loads(json.dumps(snapshot_to_dict(loaded.snapshots[-1])))
    first = json.loads(json.dumps(snapshot_to_dict(recorded[-1])))
    for gpu_again, gpu_first in zip(again["gpus"], first["gpus"], strict=True):
        assert {k: gpu_again[k] for k in GPM_FIELDS} == {k: gpu_first[k] for k in GPM_FIELDS}


def test_replay_keeps_why_gpm_is_missing(tmp_path, sim):
    loaded = _record(tmp_path / "a100.jsonl", _snapshot(sim, model=A100, faults=["mig=3@1"]))
    gpu = loaded.snapshots[0].gpus[1]
    for name in GPM_FIELDS:
        assert getattr(gpu.sample, name) is None and gpu.sample.unavailable[name] is Reason.NOT_SUPPORTED
    for mig in gpu.mig:
        assert mig.usage is not None and mig.usage.memory_used_bytes is not None
        for name in MIG_GPM_FIELDS:
            assert getattr(mig.usage, name) is None and mig.usage.unavailable[name] is Reason.NOT_SUPPORTED


def test_replay_of_an_older_recording_without_gpm(tmp_path, sim):
    data = snapshot_to_dict(_snapshot(sim, faults=["mig=3@1"]))
    for gpu in data["gpus"]:
        for name in GPM_FIELDS:
            del gpu[name]
        for device in gpu["mig_devices"]:
            for name in MIG_GPM_FIELDS:
                del device[name]
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")
    loaded = load_recording(str(path))
    assert loaded.stopped is None
    gpu = loaded.snapshots[0].gpus[1]
    assert all(getattr(gpu.sample, name) is None for name in GPM_FIELDS)
    assert all(m.usage.sm_active_percent is None and m.usage.memory_used_bytes is not None for m in gpu.mig)


@pytest.mark.parametrize("bad", ['"busy"', "[1]", "{}"])
def test_replay_gpm_of_the_wrong_type_is_damage(tmp_path, sim, bad):
    line = json.dumps(snapshot_to_dict(_snapshot(sim, gpus=1)))
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n" + line.replace('"sm_active_percent":', f'"sm_active_percent":{bad},"x":') + "\n")
    loaded = load_recording(str(path))
    assert len(loaded.snapshots) == 1 and loaded.stopped is not None


def test_replay_gpm_not_finite_reads_as_na(tmp_path, sim):
    data = snapshot_to_dict(_snapshot(sim, gpus=1))
    data["gpus"][0]["sm_active_percent"] = 1e400  # json writes Infinity
    path = tmp_path / "inf.jsonl"
    path.write_text(json.dumps(data) + "\n")
    loaded = load_recording(str(path))
    assert loaded.stopped is None
    assert loaded.snapshots[0].gpus[0].sample.sm_active_percent is None
    assert not math.isnan(loaded.snapshots[0].gpus[0].sample.tensor_active_percent)
