"""MIG in every output: the JSON contract, replay, CSV/JSONL rows, the exporter and what --remote reads back."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.commands.log import groups_for
from nvtopy.formats.contract import gpm_value, gpu_to_dict, snapshot_to_dict
from nvtopy.formats.dcgm import MIB, gpu_instance_profile
from nvtopy.formats.dcgm_naming import LEGACY
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.formats.writers import DEFAULT_GPU_FIELDS, GPU_FIELDS, MIG_FIELDS, CsvWriter, JsonlWriter
from nvtopy.model import (
    MIG_GPM_FIELDS,
    GpuSample,
    GpuState,
    GpuStatic,
    MigInstance,
    MigUsage,
    Reason,
    Snapshot,
    freeze,
)
from nvtopy.sources.collector import Collector
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.sources.replay import load_recording
from nvtopy.textsafe import escape_text, unescape_text

from ..builders import LatestSource as _Source
from ..builders import gpu_process, gpu_sample, gpu_state, gpu_static
from ..builders import snapshot_of as _snapshot

MIG_FAULTS = ["mig=3@1", "mig=7@2", "mig=pending@3"]
HOSTILE = "\x1b]0;pwned\x07 \udcff tab\there \\x41 \u202e"
MIG_KEYS = [
    "index",
    "uuid",
    "gpu_instance_id",
    "compute_instance_id",
    "label",
    "profile",
    "memory_total_bytes",
    "memory_used_bytes",
    "memory_free_bytes",
    "sm_count",
    "slices",
    "copy_engines",
    "encoders",
    "decoders",
    "jpeg_decoders",
    "ofa",
    "graphics_active_percent",
    "sm_active_percent",
    "sm_occupancy_percent",
    "tensor_active_percent",
    "dram_active_percent",
    "process_count",
    "pids",
    "unavailable",
]


@pytest.fixture
def mig_snapshot(sim) -> Snapshot:
    """Four simulated H100s: GPU 1 with 3 MIG devices, GPU 2 with 7, GPU 3 waiting for a reset to turn MIG on."""
    backend = sim(gpus=4, faults=parse_fault_specs(MIG_FAULTS, gpus=4))
    return Collector(backend).collect()


def _two_cis_in_one_gi() -> GpuState:
    """A GPU instance split into two compute instances (``1c.3g.40gb`` each), plus a second GPU instance."""
    instances = (
        MigInstance(0, "MIG-aaaa", 1, 0, "1c.3g.40gb", 40 << 30, sm_count=20),
        MigInstance(1, "MIG-bbbb", 1, 1, "1c.3g.40gb", 40 << 30, sm_count=20),
        MigInstance(2, "MIG-cccc", 2, 0, "3g.40gb", 40 << 30, sm_count=60),
    )
    static = gpu_static(0, bare=True, uuid="GPU-1", name="NVIDIA H100", bus_id="00000000:1B:00.0", mig_mode=True,
                        mig_mode_pending=True, mig_instances=instances)  # fmt: skip
    usage = (MigUsage(0, 5 << 30, 35 << 30), MigUsage(1, 5 << 30, 35 << 30), MigUsage(2, 1 << 30, 39 << 30))
    sample = gpu_sample(1.0, bare=True, memory_used_bytes=11 << 30, memory_free_bytes=69 << 30, mig_usage=usage)
    process = gpu_process(0, 77, bare=True, gpu_uuid="GPU-1", gpu_instance_id=1, compute_instance_id=1)
    return gpu_state(0, process, static=static, sample=sample)


# ---------------------------------------------------------------- JSON


def test_json_mig_devices_are_objects_with_their_processes(mig_snapshot):
    data = json.loads(json.dumps(snapshot_to_dict(mig_snapshot)))
    plain, three, seven, pending = data["gpus"]
    assert (plain["mig_mode"], plain["mig_mode_pending"], plain["mig_devices"]) == (False, False, [])
    assert (pending["mig_mode"], pending["mig_mode_pending"], pending["mig_devices"]) == (False, True, [])
    assert three["mig_mode"] is True and len(three["mig_devices"]) == 3 and len(seven["mig_devices"]) == 7
    state = mig_snapshot.gpus[1]
    for device, mig in zip(three["mig_devices"], state.mig, strict=True):
        assert list(device) == MIG_KEYS
        instance = mig.instance
        assert device["index"] == instance.index and device["uuid"] == instance.uuid
        assert (device["gpu_instance_id"], device["compute_instance_id"]) == (instance.gpu_instance_id, 0)
        assert device["label"] == f"1/{instance.gpu_instance_id}/0" == mig.label
        assert device["profile"] == instance.profile and device["sm_count"] == instance.sm_count
        assert device["memory_total_bytes"] == instance.memory_total_bytes
        assert device["memory_used_bytes"] == mig.memory_used_bytes
        assert device["memory_used_bytes"] + device["memory_free_bytes"] == device["memory_total_bytes"]
        assert device["pids"] == [p.pid for p in mig.processes] and device["process_count"] == len(mig.processes)
        assert device["unavailable"] == {}
    assert sum(d["process_count"] for d in three["mig_devices"]) == len(three["processes"])
    for proc in three["processes"]:
        assert proc["gpu_instance_id"] in {d["gpu_instance_id"] for d in three["mig_devices"]}
        assert proc["compute_instance_id"] == 0
        assert proc["instance_label"] == f"1/{proc['gpu_instance_id']}/0"
        assert proc["sm_percent"] is None and proc["unavailable"]["sm_percent"] == "not_supported"
    assert three["utilization_gpu_percent"] is None
    assert three["unavailable"]["utilization_gpu_percent"] == "not_supported"
    for proc in plain["processes"]:
        assert (proc["gpu_instance_id"], proc["compute_instance_id"], proc["instance_label"]) == (None, None, None)


def test_json_unavailable_values_are_null_with_a_reason():
    instance = MigInstance(
        0,
        "MIG-x",
        1,
        0,
        "3g.40gb",
        sm_count=None,
        unavailable=freeze({"sm_count": Reason.NOT_SUPPORTED, "memory_total_bytes": Reason.NO_PERMISSION}),
    )
    usage = MigUsage(0, None, 7 << 30, unavailable=freeze({"memory_used_bytes": Reason.NO_PERMISSION}))
    static = GpuStatic(0, mig_mode=True, mig_instances=(instance,))
    device = gpu_to_dict(GpuState(static, GpuSample(1.0, mig_usage=(usage,))))["mig_devices"][0]
    assert device["sm_count"] is None and device["memory_used_bytes"] is None and device["slices"] is None
    assert device["memory_total_bytes"] is None, "no size configured, and used + free is not known"
    assert device["unavailable"] == {
        "sm_count": "not_supported",
        "memory_total_bytes": "no_permission",
        "memory_used_bytes": "no_permission",
    }
    # The GPU's per-instance readings are missing (the GPU was lost): each device says so.
    lost = GpuSample(1.0, lost=True, unavailable=freeze({"mig_usage": Reason.LOST}))
    device = gpu_to_dict(GpuState(static, lost))["mig_devices"][0]
    assert (device["memory_used_bytes"], device["memory_free_bytes"]) == (None, None)
    assert device["unavailable"]["memory_used_bytes"] == device["unavailable"]["memory_free_bytes"] == "lost"
    # Not read at all (a log that did not ask for them): not available.
    device = gpu_to_dict(GpuState(static, GpuSample(1.0)))["mig_devices"][0]
    assert device["unavailable"]["memory_free_bytes"] == "not_available"
    # A size not configured but known from the driver's used + free: written, no reason left.
    known = MigUsage(0, 1 << 30, 3 << 30)
    device = gpu_to_dict(GpuState(static, GpuSample(1.0, mig_usage=(known,))))["mig_devices"][0]
    assert device["memory_total_bytes"] == 4 << 30 and "memory_total_bytes" not in device["unavailable"]


def test_json_without_processes_has_no_process_count():
    device = gpu_to_dict(_two_cis_in_one_gi(), processes=False)["mig_devices"][0]
    assert "process_count" not in device and "pids" not in device
    device = gpu_to_dict(_two_cis_in_one_gi())["mig_devices"][1]
    assert device["pids"] == [77] and device["label"] == "0/1/1"


def test_json_escapes_hostile_uuid_and_profile():
    instance = MigInstance(0, f"MIG-{HOSTILE}", 1, 0, f"3g{HOSTILE}")
    data = json.loads(json.dumps(gpu_to_dict(GpuState(GpuStatic(0, mig_instances=(instance,)), GpuSample(1.0)))))
    device = data["mig_devices"][0]
    assert "\x1b" not in device["uuid"] + device["profile"]
    assert unescape_text(device["uuid"]) == instance.uuid and unescape_text(device["profile"]) == instance.profile
    (device["uuid"] + device["profile"]).encode("utf-8")  # strict: valid UTF-8


# ---------------------------------------------------------------- replay


def _record(tmp_path, *snapshots: Snapshot):
    path = tmp_path / "mig.jsonl"
    with path.open("w", encoding="utf-8") as out:
        writer = JsonlWriter(out, None, processes=True)
        for snapshot in snapshots:
            writer.write(snapshot)
    return path


def test_replay_round_trip(tmp_path, mig_snapshot):
    two_cis = _snapshot(_two_cis_in_one_gi())
    loaded = load_recording(str(_record(tmp_path, mig_snapshot, two_cis)))
    assert loaded.stopped is None and len(loaded.snapshots) == 2
    for recorded, replayed in zip((mig_snapshot, two_cis), loaded.snapshots, strict=True):
        for before, after in zip(recorded.gpus, replayed.gpus, strict=True):
            assert after.static.mig_instances == before.static.mig_instances
            assert after.static.mig_mode == before.static.mig_mode
            assert after.static.mig_mode_pending == before.static.mig_mode_pending
            # The instances' GPM figures are recorded to two decimals (the JSON contract's rounding).
            assert (after.sample.mig_usage or ()) == tuple(
                dataclasses.replace(u, **{k: gpm_value(k, getattr(u, k)) for k in MIG_GPM_FIELDS})
                for u in before.sample.mig_usage or ()
            )
            assert [(p.pid, p.gpu_instance_id, p.compute_instance_id) for p in after.processes] == [
                (p.pid, p.gpu_instance_id, p.compute_instance_id) for p in before.processes
            ]
            assert [(m.label, [p.pid for p in m.processes]) for m in after.mig] == [
                (m.label, [p.pid for p in m.processes]) for m in before.mig
            ]
        again = snapshot_to_dict(replayed)
        first = snapshot_to_dict(recorded)
        assert [g["mig_devices"] for g in again["gpus"]] == [g["mig_devices"] for g in first["gpus"]]


def test_replay_keeps_a_missing_reading_and_its_reason(tmp_path):
    static = GpuStatic(0, mig_mode=True, mig_instances=(MigInstance(0, "MIG-a", 1, 0, "7g.80gb"),))
    lost = GpuState(static, GpuSample(1.0, lost=True, unavailable=freeze({"mig_usage": Reason.LOST})))
    replayed = load_recording(str(_record(tmp_path, _snapshot(lost)))).snapshots[0].gpus[0]
    assert replayed.sample.mig_usage is None and replayed.sample.unavailable["mig_usage"] is Reason.LOST
    assert replayed.mig[0].why("memory_used_bytes") is Reason.NOT_AVAILABLE
    assert gpu_to_dict(replayed)["mig_devices"] == gpu_to_dict(lost)["mig_devices"]


def test_replay_reads_the_old_list_of_uuids(tmp_path, mig_snapshot):
    line = json.loads(json.dumps(snapshot_to_dict(mig_snapshot)))
    uuids = [d["uuid"] for d in line["gpus"][1]["mig_devices"]]
    line["gpus"][1]["mig_devices"] = uuids
    for gpu in line["gpus"]:
        gpu.pop("mig_mode_pending")
        for proc in gpu["processes"]:
            for key in ("gpu_instance_id", "compute_instance_id", "instance_label"):
                proc.pop(key)
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    loaded = load_recording(str(path))
    assert loaded.stopped is None
    gpu = loaded.snapshots[0].gpus[1]
    assert gpu.static.mig_devices == tuple(uuids)
    assert [m.index for m in gpu.static.mig_instances] == [0, 1, 2]
    assert gpu.static.mig_instances[0].gpu_instance_id is None and gpu.sample.mig_usage is None
    assert gpu.static.mig_mode_pending is None
    device = gpu_to_dict(gpu)["mig_devices"][0]
    assert device["uuid"] == uuids[0] and device["label"] == "1/?/?" and device["memory_used_bytes"] is None


def _damaged(tmp_path, mig_snapshot, change) -> str | None:
    line = json.loads(json.dumps(snapshot_to_dict(mig_snapshot)))
    change(line["gpus"][1])
    path = tmp_path / "damaged.jsonl"
    good = json.dumps(snapshot_to_dict(mig_snapshot))
    path.write_text(good + "\n" + json.dumps(line) + "\n" + good + "\n", encoding="utf-8")
    loaded = load_recording(str(path))
    assert len(loaded.snapshots) == 1, "read up to the damage"
    return loaded.stopped


def _set_device(key, value):
    return lambda gpu: gpu["mig_devices"][0].update({key: value})


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda gpu: gpu.update(mig_devices="MIG-a"), "mig_devices is not a list"),
        (lambda gpu: gpu.update(mig_devices=[5]), "neither an object nor a UUID"),
        (lambda gpu: gpu.update(mig_devices=[{}] * 65), "more than 64 MIG devices"),
        (lambda gpu: gpu["mig_devices"].append(gpu["mig_devices"][0]), "two MIG devices with one index"),
        (_set_device("index", -1), "MIG device index"),
        (_set_device("index", "0"), "MIG device index"),
        (_set_device("uuid", 7), "MIG device uuid is not text"),
        (_set_device("profile", ["3g"]), "MIG device profile is not text"),
        (_set_device("sm_count", 1.5), "MIG device sm_count is not a whole number"),
        (_set_device("memory_used_bytes", "1"), "MIG device memory_used_bytes is not a whole number"),
        (_set_device("unavailable", {"sm_count": "broken"}), "ValueError"),
        (lambda gpu: gpu["processes"][0].update(gpu_instance_id="1"), "gpu_instance_id is not a whole number"),
    ],
)
def test_damaged_mig_devices_stop_the_replay_there(tmp_path, mig_snapshot, change, why):
    stopped = _damaged(tmp_path, mig_snapshot, change)
    assert stopped is not None and stopped.startswith("line 2: not an nvtopy snapshot") and why in stopped


def test_replay_treats_an_absurd_size_as_no_reading(tmp_path, mig_snapshot):
    def change(gpu):
        gpu["mig_devices"][0]["memory_total_bytes"] = 10**30

    line = json.loads(json.dumps(snapshot_to_dict(mig_snapshot)))
    change(line["gpus"][1])
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    loaded = load_recording(str(path))
    assert loaded.stopped is None
    assert loaded.snapshots[0].gpus[1].static.mig_instances[0].memory_total_bytes is None


def test_replay_gives_hostile_text_back(tmp_path):
    instance = MigInstance(0, f"MIG-{HOSTILE}", 1, 0, f"3g{HOSTILE}")
    state = GpuState(GpuStatic(0, mig_mode=True, mig_instances=(instance,)), GpuSample(1.0))
    path = _record(tmp_path, _snapshot(state))
    assert "\x1b" not in path.read_text(encoding="utf-8")
    replayed = load_recording(str(path)).snapshots[0].gpus[0].static.mig_instances[0]
    assert (replayed.uuid, replayed.profile) == (instance.uuid, instance.profile)


# ---------------------------------------------------------------- CSV and JSONL


def _csv(snapshot: Snapshot, fields, processes: bool = False) -> list[dict[str, str]]:
    out = io.StringIO()
    CsvWriter(out, list(fields), processes, header=True).write(snapshot)
    text = out.getvalue()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(text.splitlines()) == len(rows) + 1
    return rows


def test_csv_default_fields_are_unchanged_by_mig(mig_snapshot):
    rows = _csv(mig_snapshot, DEFAULT_GPU_FIELDS)
    assert [r["index"] for r in rows] == ["0", "1", "2", "3"], "no row per device without a mig_* field"
    assert list(rows[0]) == list(DEFAULT_GPU_FIELDS)
    assert not set(MIG_FIELDS) & set(DEFAULT_GPU_FIELDS)
    assert set(MIG_FIELDS) <= set(GPU_FIELDS)


def test_csv_rows_per_mig_device(mig_snapshot):
    fields = ["timestamp", "index", "uuid", "memory_used_bytes", "temperature_c", "mig_devices", *MIG_FIELDS]
    rows = _csv(mig_snapshot, fields)
    assert [r["index"] for r in rows] == ["0", "1", "1", "1", "1", "2", *["2"] * 7, "3"]
    gpu_row, devices = rows[1], rows[2:5]
    state = mig_snapshot.gpus[1]
    assert gpu_row["mig_index"] == "" and gpu_row["memory_used_bytes"] == str(state.sample.memory_used_bytes)
    assert gpu_row["mig_devices"].split(";") == list(state.static.mig_devices)
    for row, mig in zip(devices, state.mig, strict=True):
        instance = mig.instance
        assert row["timestamp"] == gpu_row["timestamp"] and row["uuid"] == state.static.uuid, "identity repeated"
        assert row["memory_used_bytes"] == row["temperature_c"] == row["mig_devices"] == "", "GPU-wide: empty"
        assert row["mig_index"] == str(instance.index) and row["mig_uuid"] == instance.uuid
        assert row["mig_gpu_instance_id"] == str(instance.gpu_instance_id)
        assert row["mig_compute_instance_id"] == "0" and row["mig_label"] == mig.label
        assert row["mig_profile"] == instance.profile and row["mig_sm_count"] == str(instance.sm_count)
        assert row["mig_memory_used_bytes"] == str(mig.memory_used_bytes)
        assert row["mig_memory_total_bytes"] == str(instance.memory_total_bytes)
    assert rows[-1]["mig_index"] == "", "MIG pending, no device yet: the GPU's row only"


def test_csv_unavailable_device_values_are_empty_cells():
    instance = MigInstance(0, "MIG-x", 1, 0, "3g.40gb", unavailable=freeze({"sm_count": Reason.NOT_SUPPORTED}))
    state = GpuState(GpuStatic(0, mig_mode=True, mig_instances=(instance,)), GpuSample(1.0))
    rows = _csv(_snapshot(state), ["index", "mig_index", "mig_sm_count", "mig_memory_used_bytes"])
    assert rows[1] == {"index": "0", "mig_index": "0", "mig_sm_count": "", "mig_memory_used_bytes": ""}


def test_csv_process_rows_name_their_instance(mig_snapshot):
    fields = ["gpu_index", "pid", "gpu_instance_id", "compute_instance_id", "instance_label"]
    rows = _csv(mig_snapshot, fields, processes=True)
    by_pid = {p.pid: p for p in mig_snapshot.processes}
    for row in rows:
        proc = by_pid[int(row["pid"])]
        if proc.gpu_instance_id is None:
            assert row["gpu_instance_id"] == row["instance_label"] == ""
        else:
            assert row["gpu_instance_id"] == str(proc.gpu_instance_id)
            assert row["instance_label"] == proc.instance_label
    assert any(row["instance_label"] for row in rows) and any(not row["instance_label"] for row in rows)


def test_csv_escapes_hostile_device_text():
    instance = MigInstance(0, f"MIG-{HOSTILE};x", 1, 0, f"3g{HOSTILE}")
    state = GpuState(GpuStatic(0, mig_mode=True, mig_instances=(instance,)), GpuSample(1.0))
    rows = _csv(_snapshot(state), ["index", "mig_devices", "mig_uuid", "mig_profile"])
    assert unescape_text(rows[1]["mig_uuid"]) == instance.uuid
    assert unescape_text(rows[1]["mig_profile"]) == instance.profile
    assert [unescape_text(m) for m in rows[0]["mig_devices"].split(";")] == [instance.uuid]


def test_jsonl_fields_keep_the_devices_whole(mig_snapshot):
    out = io.StringIO()
    JsonlWriter(out, ["index", "mig_profile"], processes=False).write(mig_snapshot)
    gpu = json.loads(out.getvalue())["gpus"][1]
    assert set(gpu) == {"index", "mig_devices", "unavailable"}
    assert [d["profile"] for d in gpu["mig_devices"]] == [m.profile for m in mig_snapshot.gpus[1].static.mig_instances]
    assert "pids" not in gpu["mig_devices"][0], "no process list was read"
    out = io.StringIO()
    JsonlWriter(out, ["index", "temperature_c"], processes=False).write(mig_snapshot)
    assert "mig_devices" not in json.loads(out.getvalue())["gpus"][1]


def test_log_asks_the_driver_for_instance_memory_only_when_written():
    assert "mig" in groups_for("csv", ["index", "mig_memory_used_bytes"], False)
    assert "mig" in groups_for("jsonl", ["index", "mig_profile"], False)
    assert "mig" in groups_for("jsonl", ["index", "mig_devices"], False)
    assert "mig" not in groups_for("csv", ["index", "memory_used_bytes"], False)


def test_cli_log_rows_per_instance():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvtopy",
            "log",
            "--demo",
            "--demo-fault",
            "mig=3@1",
            "--count",
            "1",
            "--fields",
            "index,memory_used_bytes,mig_index,mig_label,mig_profile,mig_memory_used_bytes",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    devices = [r for r in rows if r["mig_index"]]
    assert [r["mig_label"] for r in devices] == ["1/1/0", "1/2/0", "1/3/0"]
    assert all(
        r["index"] == "1" and r["memory_used_bytes"] == "" and int(r["mig_memory_used_bytes"]) > 0 for r in devices
    )


# ---------------------------------------------------------------- exporter


def _exposition(snapshot: Snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(_Source(snapshot)))
    return generate_latest(registry).decode("utf-8")


def _samples(text: str, name: str, **labels: str) -> list:
    return [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def test_exporter_gpu_instance_series_with_dcgm_labels(mig_snapshot):
    text = _exposition(mig_snapshot)
    state = mig_snapshot.gpus[1]
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL"):
        found = _samples(text, name, gpu="1")
        parent = [s for s in found if "GPU_I_ID" not in s.labels]
        assert len(parent) == 1 and set(parent[0].labels) == set(LEGACY.gpu_labels), "the GPU's series as it was"
        instances = [s for s in found if "GPU_I_ID" in s.labels]
        assert [s.labels["GPU_I_ID"] for s in instances] == ["1", "2", "3"]
        for sample, mig in zip(instances, state.mig, strict=True):
            assert set(sample.labels) == {*LEGACY.gpu_labels, "GPU_I_PROFILE", "GPU_I_ID"}
            assert sample.labels["GPU_I_PROFILE"] == mig.instance.profile
            assert {k: sample.labels[k] for k in LEGACY.gpu_labels} == parent[0].labels
    used = _samples(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="2")[0].value
    assert used == state.mig[1].memory_used_bytes / MIB, "MiB, as dcgm-exporter"
    free = _samples(text, "DCGM_FI_DEV_FB_FREE", gpu="1", GPU_I_ID="2")[0].value
    assert free == state.mig[1].usage.memory_free_bytes / MIB
    assert len(_samples(text, "DCGM_FI_DEV_FB_USED", gpu="2")) == 8
    assert len(_samples(text, "DCGM_FI_DEV_FB_USED", gpu="0")) == len(_samples(text, "DCGM_FI_DEV_FB_USED", gpu="3"))
    assert all("GPU_I_ID" not in s.labels for s in _samples(text, "DCGM_FI_DEV_GPU_TEMP")), "the parent's own"
    assert _samples(text, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == [], "not reported under MIG: left out"


def test_exporter_nvtopy_mig_series(mig_snapshot):
    text = _exposition(mig_snapshot)
    assert _samples(text, "nvtopy_gpu_mig_mode", gpu="1")[0].value == 1
    assert _samples(text, "nvtopy_gpu_mig_mode", gpu="3")[0].value == 0
    assert _samples(text, "nvtopy_gpu_mig_mode_pending", gpu="3")[0].value == 1
    state = mig_snapshot.gpus[1]
    infos = _samples(text, "nvtopy_mig_device_info", gpu="1")
    assert [s.labels["mig_uuid"] for s in infos] == list(state.static.mig_devices)
    for info, mig in zip(infos, state.mig, strict=True):
        labels = {"gpu": "1", "mig_device": str(mig.instance.index), "GPU_I_ID": str(mig.instance.gpu_instance_id)}
        assert info.labels["compute_instance_id"] == "0" and info.labels["mig_profile"] == mig.instance.profile
        assert _samples(text, "nvtopy_mig_device_sm_count", **labels)[0].value == mig.instance.sm_count
        assert _samples(text, "nvtopy_mig_device_memory_used_bytes", **labels)[0].value == mig.memory_used_bytes
        assert _samples(text, "nvtopy_mig_device_memory_total_bytes", **labels)[0].value == mig.memory_total_bytes
        assert _samples(text, "nvtopy_mig_device_processes", **labels)[0].value == len(mig.processes)
    for proc in state.processes:
        (sample,) = _samples(text, "nvtopy_process_gpu_memory_bytes", pid=str(proc.pid))
        assert sample.labels["GPU_I_ID"] == str(proc.gpu_instance_id)
        assert sample.labels["compute_instance_id"] == "0"
    for proc in mig_snapshot.gpus[0].processes:
        (sample,) = _samples(text, "nvtopy_process_gpu_memory_bytes", pid=str(proc.pid), gpu="0")
        assert "GPU_I_ID" not in sample.labels, "a whole GPU's process: labels as before"


def test_exporter_one_series_per_gpu_instance():
    text = _exposition(_snapshot(_two_cis_in_one_gi()))
    instances = [s for s in _samples(text, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in s.labels]
    assert [(s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"]) for s in instances] == [
        ("1", "3g.40gb"),
        ("2", "3g.40gb"),
    ]
    assert instances[0].value == 5 * 1024
    infos = _samples(text, "nvtopy_mig_device_info")
    assert [(s.labels["GPU_I_ID"], s.labels["compute_instance_id"], s.labels["mig_profile"]) for s in infos] == [
        ("1", "0", "1c.3g.40gb"),
        ("1", "1", "1c.3g.40gb"),
        ("2", "0", "3g.40gb"),
    ]
    assert [s.value for s in _samples(text, "nvtopy_mig_device_processes")] == [0, 1, 0]


@pytest.mark.parametrize(
    ("profile", "gpu_instance"),
    [("3g.40gb", "3g.40gb"), ("1c.3g.40gb", "3g.40gb"), ("1g.10gb+me", "1g.10gb+me"), ("c.x", "c.x"), (None, None)],
)
def test_gpu_instance_profile(profile, gpu_instance):
    assert gpu_instance_profile(profile) == gpu_instance


def test_exporter_leaves_out_a_lost_gpus_instances():
    state = _two_cis_in_one_gi()
    lost = dataclasses.replace(state, sample=GpuSample(1.0, lost=True))
    text = _exposition(_snapshot(lost))
    assert _samples(text, "DCGM_FI_DEV_FB_USED") == [] and _samples(text, "nvtopy_mig_device_info") == []


def test_exporter_escapes_hostile_profile_and_uuid():
    instance = MigInstance(0, f'MIG-{HOSTILE}"}} 1\nevil 2', 1, 0, f'3g{HOSTILE}"\n')
    static = GpuStatic(0, uuid="GPU-1", mig_mode=True, mig_instances=(instance,))
    state = GpuState(static, GpuSample(1.0, mig_usage=(MigUsage(0, MIB, MIB),)))
    text = _exposition(_snapshot(state))
    text.encode("utf-8")
    assert "\x1b" not in text and "\nevil" not in text
    (fb,) = [s for s in _samples(text, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in s.labels]
    assert fb.labels["GPU_I_PROFILE"] == escape_text(instance.profile)
    (info,) = _samples(text, "nvtopy_mig_device_info")
    assert unescape_text(info.labels["mig_uuid"]) == instance.uuid
    assert unescape_text(info.labels["mig_profile"]) == instance.profile


# ---------------------------------------------------------------- --remote reads it back


def test_remote_reads_nvtopys_mig_series(mig_snapshot):
    scrape = parse_exposition(_exposition(mig_snapshot), "http://node:9400/metrics")
    shown = RemoteHosts(["node:9400"])._snapshot([scrape])
    for remote, local in zip(shown.gpus, mig_snapshot.gpus, strict=True):
        assert remote.static.mig_mode == local.static.mig_mode
        assert remote.static.mig_mode_pending == local.static.mig_mode_pending
        assert remote.sample.memory_used_bytes == pytest.approx(local.sample.memory_used_bytes, abs=1)
        assert [
            (m.label, m.instance.uuid, m.instance.profile, m.instance.sm_count, m.memory_used_bytes) for m in remote.mig
        ] == [
            (m.label, m.instance.uuid, m.instance.profile, m.instance.sm_count, m.memory_used_bytes) for m in local.mig
        ]
        assert [m.memory_total_bytes for m in remote.mig] == [m.memory_total_bytes for m in local.mig]
        assert sorted((m.label, sorted(p.pid for p in m.processes)) for m in remote.mig) == sorted(
            (m.label, sorted(p.pid for p in m.processes)) for m in local.mig
        )
        assert {(p.pid, p.gpu_instance_id, p.compute_instance_id) for p in remote.processes} == {
            (p.pid, p.gpu_instance_id, p.compute_instance_id) for p in local.processes
        }


_A100 = 'gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",Hostname="n1"'


def _gi(gi: str) -> str:
    """dcgm-exporter's labels of GPU 0's GPU instance ``gi``."""
    return f'{{{_A100},GPU_I_PROFILE="3g.20gb",GPU_I_ID="{gi}"}}'


# What dcgm-exporter (default "flex" mode) answers for a MIG GPU (0) and a whole one (1).
DCGM_MIG = (
    "\n".join(
        [
            "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
            f"DCGM_FI_DEV_GPU_TEMP{_gi('1')} 33",
            f"DCGM_FI_DEV_GPU_TEMP{_gi('2')} 33",
            "# TYPE DCGM_FI_DEV_FB_USED gauge",
            f"DCGM_FI_DEV_FB_USED{_gi('1')} 100",
            f"DCGM_FI_DEV_FB_USED{_gi('2')} 200",
            'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",device="nvidia1",Hostname="n1"} 3000',
            "# TYPE DCGM_FI_DEV_FB_FREE gauge",
            f"DCGM_FI_DEV_FB_FREE{_gi('1')} 19900",
            f"DCGM_FI_DEV_FB_FREE{_gi('2')} 19800",
            f"DCGM_FI_DEV_FB_FREE{_gi('99999999999999999999')} 1",  # an instance no GPU has: not read
        ]
    )
    + "\n"
)


def test_remote_reads_dcgm_exporters_mig_gpu():
    """dcgm-exporter exports a MIG GPU's instances only: the GPU shows them, its temperature, no memory figure."""
    scrape = parse_exposition(DCGM_MIG, "http://n1:9400/metrics")
    (static0, values0, _), (static1, values1, _) = scrape.gpus
    assert values0["temperature_c"] == 33, "the parent's value, as its instances' series repeat it"
    assert "memory_used_bytes" not in values0, "an instance's memory is never the GPU's"
    assert values1["memory_used_bytes"] == 3000 * MIB and static1.mig_instances == ()
    assert static0.mig_mode is True
    assert [(m.index, m.gpu_instance_id, m.profile) for m in static0.mig_instances] == [
        (0, 1, "3g.20gb"),
        (1, 2, "3g.20gb"),
    ]
    not_said = dict.fromkeys(MIG_GPM_FIELDS, Reason.NOT_AVAILABLE)  # no profiling series: the real work is N/A
    assert values0["mig_usage"] == (
        MigUsage(0, 100 * MIB, 19900 * MIB, unavailable=not_said),
        MigUsage(1, 200 * MIB, 19800 * MIB, unavailable=not_said),
    )
    shown = RemoteHosts(["n1:9400"])._snapshot([scrape])
    assert [(m.label, m.memory_used_bytes, m.memory_total_bytes) for m in shown.gpus[0].mig] == [
        ("0/1/?", 100 * MIB, 20000 * MIB),
        ("0/2/?", 200 * MIB, 20000 * MIB),
    ]


def test_remote_bounds_what_a_host_claims_of_mig():
    lines = ["# TYPE DCGM_FI_DEV_FB_USED gauge"]
    lines += [f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g",GPU_I_ID="{i}"}} 1' for i in range(500)]
    lines.append("# TYPE nvtopy_mig_device_info gauge")
    lines += [
        f'nvtopy_mig_device_info{{gpu="0",UUID="GPU-a",mig_device="{i}",GPU_I_ID="1",mig_uuid="MIG-{i}"}} 1'
        for i in (*range(70), 10**30)
    ]
    lines.append(
        f'nvtopy_mig_device_info{{gpu="0",UUID="GPU-a",mig_device="3",GPU_I_ID="1",mig_uuid="{"x" * 5000}"}} 1'
    )
    scrape = parse_exposition("\n".join(lines) + "\n", "http://n1:9400/metrics")
    (static, values, _) = scrape.gpus[0]
    assert len(static.mig_instances) == 64 and len(values["mig_usage"]) == 64
    assert all(len(m.uuid or "") <= 256 for m in static.mig_instances)
