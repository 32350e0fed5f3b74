"""Owners on the data path and in the machine-readable outputs (issue 11).

The psutil join resolves each new process's owner once through an injectable
:class:`~nvtopy.backends.host.owners.OwnerResolver` (fixture ``/proc`` trees here);
the collector carries it into :class:`~nvtopy.model.GpuProcess`; ``--json``,
``log`` CSV/JSONL, ``record`` + replay and the exporter write it, every name
escaped, and read it back unescaped.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import unicodedata
from pathlib import Path

import pytest

from nvtopy.backends.host.owners import OwnerResolver
from nvtopy.backends.host.processes import PsutilInspector
from nvtopy.formats.contract import dumps, snapshot_to_dict
from nvtopy.formats.prometheus.collect import SnapshotCollector, pod_labels
from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.formats.prometheus.series import OWNER_LABELS
from nvtopy.formats.writers import DEFAULT_PROCESS_FIELDS, OWNER_FIELDS, PROCESS_FIELDS, CsvWriter, JsonlWriter
from nvtopy.model import GpuProcess, HostInfo, OwnerKind, ProcessOwner, ProcessType, Snapshot
from nvtopy.sources.collector import Collector
from nvtopy.sources.remote.exporters import _process as remote_process
from nvtopy.sources.replay import load_recording
from nvtopy.textsafe import unescape_text

from ..builders import LatestSource as _Source
from ..builders import run_nvtopy

DOCKER_ID = "47335b04ebb4aefdc353dda62ddd38e5e1e00fc1372f0c8d0138417f0ccb9e6c"
POD_UID = "48d25824-cbe2-4fdc-9928-5bb49e05473d"
CID = "a" * 64
HOSTILE = "\x1b]0;pwned\x07 <b>[red]markup[/red]</b> \udcff tab\there \\x41 \u202e"


def _visible(text: str) -> None:
    """No control or format characters, valid UTF-8: what every output must be."""
    text.encode("utf-8")
    bad = [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs") and c != "\n"]
    assert not bad, f"unescaped characters {bad!r} in output"


def _proc_tree(root: Path, pid: int, *, cgroup: str | None, environ: bytes | None, status: str | None) -> None:
    base = root / "proc" / str(pid)
    base.mkdir(parents=True)
    for name, data in (("cgroup", cgroup), ("status", status)):
        if data is not None:
            (base / name).write_text(data)
    if environ is not None:
        (base / "environ").write_bytes(environ)


def _resolver(root: Path) -> OwnerResolver:
    return OwnerResolver(
        proc_root=str(root / "proc"), docker_root=str(root / "docker"), kubelet_log_root=str(root / "log")
    )


# ---------------------------------------------------------------- the psutil join


def test_the_join_resolves_each_process_once_and_fills_the_rows(tmp_path, sleeper, sim):
    _proc_tree(
        tmp_path,
        sleeper,
        cgroup=f"0::/system.slice/docker-{DOCKER_ID}.scope\n",
        environ=b"PATH=/bin\0CUDA_VISIBLE_DEVICES=GPU-1,2\0",
        status=f"Name:\tpython\nNSpid:\t{sleeper}\t7\n",
    )
    config = tmp_path / "docker" / "containers" / DOCKER_ID
    config.mkdir(parents=True)
    labels = {"com.docker.compose.project": "inference"}
    (config / "config.v2.json").write_text(json.dumps({"Name": "/vllm-1", "Config": {"Labels": labels}}))
    backend = sim(gpus=1, real_pids=[sleeper], processes_per_gpu=0)
    resolver = _resolver(tmp_path)
    backend._inspector.resolver = resolver
    calls = []
    original = resolver._resolve
    resolver._resolve = lambda pid, *given: calls.append(pid) or original(pid, *given)  # type: ignore[method-assign]
    collector = Collector(backend)
    for _ in range(4):
        (row,) = collector.collect().gpus[0].processes
    assert calls == [sleeper], "the owner is read once per process, not per refresh"
    reads = resolver.reads
    collector.collect()
    assert resolver.reads == reads, "no file read for a known process"
    assert row.owner is not None and row.owner.kind is OwnerKind.DOCKER
    assert (row.owner.name, row.owner.project, row.owner.container_id) == ("vllm-1", "inference", DOCKER_ID)
    assert row.ns_pid == 7
    assert row.cuda_visible_devices == "GPU-1,2"


def test_the_resolver_cache_follows_the_live_processes(tmp_path, sleeper):
    _proc_tree(tmp_path, sleeper, cgroup="0::/system.slice/ollama.service\n", environ=None, status=None)
    resolver = _resolver(tmp_path)
    inspector = PsutilInspector(resolver=resolver)
    first = inspector.inspect([sleeper])[sleeper]
    assert first is not None and first.owner is not None and first.owner.label == "ollama"
    assert len(resolver) == 1
    reads = resolver.reads
    # The entry dropped and opened again (as after a pid check): the same (pid, create time) is not read again.
    del inspector._entries[sleeper]
    second = inspector.inspect([sleeper])[sleeper]
    assert second is not None and second.owner == first.owner
    assert resolver.reads == reads
    # A process no longer asked about is forgotten by both caches.
    assert inspector.inspect([]) == {}
    assert len(resolver) == 0


def test_unreadable_files_give_no_owner_never_an_exception(tmp_path, sleeper):
    inspector = PsutilInspector(resolver=_resolver(tmp_path))  # no /proc tree at all
    info = inspector.inspect([sleeper])[sleeper]
    assert info is not None and info.command
    assert (info.owner, info.ns_pid, info.cuda_visible_devices) == (None, None, None)
    # A directory where the file should be, and an environment that is not one.
    base = tmp_path / "proc2" / str(sleeper)
    (base / "cgroup").mkdir(parents=True)
    (base / "environ").write_bytes(b"\xff\xfe\0\0===\0")
    (base / "status").write_text("NSpid:\tnot a pid\n")
    info = PsutilInspector(resolver=OwnerResolver(proc_root=str(tmp_path / "proc2"))).inspect([sleeper])[sleeper]
    assert info is not None and (info.owner, info.ns_pid, info.cuda_visible_devices) == (None, None, None)


def test_a_failing_resolver_costs_the_owner_not_the_row(sleeper):
    class Broken(OwnerResolver):
        def resolve(self, pid, create_time, **given):
            raise RuntimeError("boom")

    info = PsutilInspector(resolver=Broken()).inspect([sleeper])[sleeper]
    assert info is not None and info.owner is None and info.command


# ---------------------------------------------------------------- the simulated backend

ALL_KINDS = {"docker", "kubernetes", "podman", "slurm", "systemd-service", "user-session", "host"}


def _owners_of_demo() -> list[tuple]:
    result = run_nvtopy("--demo", "--once", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return [
        (proc["pid"], proc["owner"] and tuple(sorted(proc["owner"].items())), proc["ns_pid"])
        for gpu in data["gpus"]
        for proc in gpu["processes"]
    ]


def test_the_demo_shows_every_owner_kind_the_same_each_run():
    first = _owners_of_demo()
    kinds = {dict(owner)["kind"] for _, owner, _ in first if owner}
    assert kinds == ALL_KINDS
    assert _owners_of_demo() == first
    owners = [dict(owner) for _, owner, _ in first]
    k8s = next(o for o in owners if o["kind"] == "kubernetes")
    assert k8s["namespace"] and k8s["pod"] and k8s["container"] and k8s["id"]
    slurm = next(o for o in owners if o["kind"] == "slurm")
    assert slurm["job"] and slurm["step"] and slurm["name"]
    docker = next(o for o in owners if o["kind"] == "docker")
    assert docker["name"] and docker["container_id"]
    assert any(o["project"] for o in owners if o["kind"] == "docker")
    assert any(ns_pid for _, _, ns_pid in first)


def test_simulated_owners_follow_the_seed(sim):
    def owners(seed: int) -> list:
        return [p.owner for p in Collector(sim(seed=seed)).collect().processes]

    assert owners(3) == owners(3)
    assert owners(3) != owners(4)


# ---------------------------------------------------------------- the outputs, with hostile names

OWNERS = (
    ProcessOwner(
        kind=OwnerKind.KUBERNETES,
        id=POD_UID,
        name=HOSTILE,
        namespace="ns" + HOSTILE,
        pod=HOSTILE,
        container="c" + HOSTILE,
        container_id=CID,
        cgroup="/kubepods/pod" + POD_UID + "/" + CID,
    ),
    ProcessOwner(kind=OwnerKind.SLURM, id="4242", name=HOSTILE, job="4242", step="0", uid=1000, cgroup="/x" + HOSTILE),
    ProcessOwner(
        kind=OwnerKind.DOCKER, id=DOCKER_ID, name=HOSTILE, container=HOSTILE, container_id=DOCKER_ID, project=HOSTILE
    ),
    None,
)


@pytest.fixture
def hostile(sim) -> Snapshot:
    """A simulated snapshot whose processes have hostile owners (and one has none)."""
    snapshot = Collector(sim(gpus=2, seed=1, processes_per_gpu=3, steady=True)).collect()
    gpus = []
    count = 0
    for gpu in snapshot.gpus:
        procs = []
        for proc in gpu.processes:
            procs.append(
                dataclasses.replace(
                    proc, owner=OWNERS[count % len(OWNERS)], ns_pid=count + 1, cuda_visible_devices=f"{count}{HOSTILE}"
                )
            )
            count += 1
        gpus.append(dataclasses.replace(gpu, processes=tuple(procs)))
    assert count >= len(OWNERS)
    return dataclasses.replace(snapshot, gpus=tuple(gpus))


def _unescaped_owner(data: dict | None) -> ProcessOwner | None:
    if data is None:
        return None
    fields = {k: unescape_text(v) if isinstance(v, str) else v for k, v in data.items() if k != "kind"}
    return ProcessOwner(kind=OwnerKind(data["kind"]), **fields)


def test_json_has_an_escaped_owner_object(hostile):
    text = dumps(hostile)
    _visible(text)
    data = json.loads(text)
    procs = [p for gpu in data["gpus"] for p in gpu["processes"]]
    for proc, row in zip(procs, hostile.processes, strict=True):
        assert _unescaped_owner(proc["owner"]) == row.owner
        assert proc["ns_pid"] == row.ns_pid
        assert unescape_text(proc["cuda_visible_devices"]) == row.cuda_visible_devices
        if proc["owner"] is not None:
            assert set(proc["owner"]) >= {"kind", "id", "name", "namespace", "pod", "container", "job", "step"}
            assert "cgroup" in proc["owner"]


def test_csv_process_rows_have_the_owner_columns(hostile):
    assert set(OWNER_FIELDS) <= set(PROCESS_FIELDS)
    assert {"ns_pid", "cuda_visible_devices"} <= set(PROCESS_FIELDS)
    assert "owner_name" in DEFAULT_PROCESS_FIELDS
    out = io.StringIO()
    CsvWriter(out, list(PROCESS_FIELDS), processes=True, header=True).write(hostile)
    _visible(out.getvalue())
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(rows) == len(hostile.processes)
    for row, proc in zip(rows, hostile.processes, strict=True):
        owner = proc.owner
        if owner is None:
            assert all(row[name] == "" for name in OWNER_FIELDS)
            continue
        assert row["owner_kind"] == owner.kind.value
        assert unescape_text(row["owner_name"]) == owner.label
        for name in ("namespace", "pod", "container", "job", "step"):
            assert unescape_text(row[f"owner_{name}"]) == (getattr(owner, name) or "")
        assert int(row["ns_pid"]) == proc.ns_pid
        assert unescape_text(row["cuda_visible_devices"]) == proc.cuda_visible_devices


def test_jsonl_process_lines_carry_the_owner(hostile):
    out = io.StringIO()
    JsonlWriter(out, None, processes=True).write(hostile)
    _visible(out.getvalue())
    data = json.loads(out.getvalue())
    procs = [p for gpu in data["gpus"] for p in gpu["processes"]]
    assert [_unescaped_owner(p["owner"]) for p in procs] == [p.owner for p in hostile.processes]


def test_record_and_replay_give_the_owners_back(hostile, tmp_path):
    path = tmp_path / "owners.jsonl"
    line = json.dumps(snapshot_to_dict(hostile), ensure_ascii=False)
    path.write_text(line + "\n", encoding="utf-8")
    (replayed,) = load_recording(str(path)).snapshots
    for back, proc in zip(replayed.processes, hostile.processes, strict=True):
        assert back.owner == proc.owner
        assert back.ns_pid == proc.ns_pid
        assert back.cuda_visible_devices == proc.cuda_visible_devices
    assert json.loads(dumps(replayed, indent=None))["gpus"] == json.loads(line)["gpus"]


def test_replay_reads_an_owner_kind_it_does_not_know_as_a_cgroup(hostile, tmp_path):
    data = snapshot_to_dict(hostile)
    data["gpus"][0]["processes"][0]["owner"]["kind"] = "lxc"
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")
    (replayed,) = load_recording(str(path)).snapshots
    assert replayed.processes[0].owner is not None and replayed.processes[0].owner.kind is OwnerKind.CGROUP


def _exposition(snapshot: Snapshot) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(_Source(snapshot)))
    return generate_latest(registry).decode("utf-8")


def test_exporter_process_labels_name_the_owner_and_parse_back(hostile):
    from prometheus_client.parser import text_string_to_metric_families

    text = _exposition(hostile)
    _visible(text)
    series = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "nvtopy_process_gpu_memory_bytes"
    ]
    by_pid = {(int(s.labels["gpu"]), int(s.labels["pid"])): s.labels for s in series}
    for proc in hostile.processes:
        labels = by_pid[(proc.gpu_index, proc.pid)]
        assert set(OWNER_LABELS) <= set(labels)
        owner = proc.owner
        if owner is None:
            assert all(labels[name] == "" for name in OWNER_LABELS)
            continue
        assert labels["owner_kind"] == owner.kind.value
        assert unescape_text(labels["container"]) == (owner.container or "")
        assert unescape_text(labels["pod"]) == (owner.pod or "")
        assert unescape_text(labels["namespace"]) == (owner.namespace or "")
        assert labels["slurm_job"] == (owner.job or "")
    scrape = parse_exposition(text, "http://node-1:9400/metrics")
    rows = {(index, row["pid"]): row for index, found in scrape.processes.items() for row in found}
    for proc in hostile.processes:
        back = remote_process(rows[(proc.gpu_index, proc.pid)], proc.gpu_index, proc.gpu_uuid, 0.0)
        if proc.owner is None:
            assert back.owner is None
            continue
        assert back.owner is not None and back.owner.kind is proc.owner.kind
        assert (back.owner.container, back.owner.pod, back.owner.namespace) == (
            proc.owner.container,
            proc.owner.pod,
            proc.owner.namespace,
        )
        if proc.owner.kind is OwnerKind.SLURM:
            assert back.owner.job == proc.owner.job  # the step is no label (one series per job is enough)
        if proc.owner.kind is OwnerKind.KUBERNETES:
            assert back.owner.label == proc.owner.label


def test_labels_of_another_exporter_still_name_an_owner():
    text = (
        "# TYPE nvtopy_process_gpu_memory_bytes gauge\n"
        'nvtopy_process_gpu_memory_bytes{gpu="0",pid="12",type="C",pod="web-0",namespace="prod"} 1024\n'
        'nvtopy_process_gpu_memory_bytes{gpu="0",pid="13",type="C",slurm_job="77"} 1024\n'
        'nvtopy_process_gpu_memory_bytes{gpu="0",pid="14",type="C",owner_kind="\\x1b"} 1024\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5\n'
    )
    scrape = parse_exposition(text, "http://h:9400/metrics")
    owners = {row["pid"]: row["owner"] for row in scrape.processes[0]}
    assert owners[12].kind is OwnerKind.KUBERNETES and owners[12].label == "prod/web-0"
    assert owners[13].kind is OwnerKind.SLURM and owners[13].label == "slurm 77"
    assert owners[14] is None


# ---------------------------------------------------------------- dcgm-exporter's pod labels on device series


def _pod(name: str, container: str | None = "main") -> ProcessOwner:
    return ProcessOwner(kind=OwnerKind.KUBERNETES, id=POD_UID, name=name, namespace="ml", pod=name, container=container)


def _with_owners(snapshot: Snapshot, per_gpu: list[list[ProcessOwner | None]]) -> Snapshot:
    gpus = []
    for gpu, owners in zip(snapshot.gpus, per_gpu, strict=True):
        procs = tuple(dataclasses.replace(p, owner=owners[i % len(owners)]) for i, p in enumerate(gpu.processes))
        gpus.append(dataclasses.replace(gpu, processes=procs))
    return dataclasses.replace(snapshot, gpus=tuple(gpus))


def test_device_series_get_pod_labels_only_when_one_pod_holds_the_gpu(sim):
    from prometheus_client.parser import text_string_to_metric_families

    snapshot = Collector(sim(gpus=4, seed=1, processes_per_gpu=2, steady=True)).collect()
    assert all(len(gpu.processes) == 2 for gpu in snapshot.gpus)
    snapshot = _with_owners(
        snapshot,
        [
            [_pod("train-0")],  # one pod, one container: pod, namespace and container
            [_pod("train-1", "a"), _pod("train-1", "b")],  # one pod, two containers: no container label
            [_pod("train-2"), _pod("train-3")],  # two pods: none
            [_pod("train-4"), None],  # a process outside any known pod: none
        ],
    )
    assert pod_labels(snapshot.gpus[0]) == {"pod": "train-0", "namespace": "ml", "container": "main"}
    text = _exposition(snapshot)
    util = {
        s.labels["gpu"]: s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL"
    }
    assert (util["0"]["pod"], util["0"]["namespace"], util["0"]["container"]) == ("train-0", "ml", "main")
    assert (util["1"]["pod"], util["1"]["namespace"]) == ("train-1", "ml") and "container" not in util["1"]
    assert not {"pod", "namespace", "container"} & set(util["2"])
    assert not {"pod", "namespace", "container"} & set(util["3"])
    hostile = _with_owners(snapshot, [[_pod(HOSTILE)], [None], [None], [None]])
    text = _exposition(hostile)
    _visible(text)
    (sample,) = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL" and "pod" in s.labels
    ]
    assert unescape_text(sample.labels["pod"]) == HOSTILE
    # --remote still reads the GPU (the extra labels are not part of its identity).
    assert [static.index for static, _, _ in parse_exposition(text, "http://h:9400/").gpus] == [0, 1, 2, 3]


def test_rows_without_an_owner_keep_the_defaults():
    proc = GpuProcess(0, None, 1, ProcessType.COMPUTE, None)
    assert (proc.owner, proc.ns_pid, proc.cuda_visible_devices) == (None, None, None)
    assert json.loads(dumps(Snapshot(0.0, HostInfo("h", None, None), ()), indent=None))["gpus"] == []
