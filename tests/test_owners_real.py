"""Owners of real processes in real cgroups, end to end (issue 11, "Tests and figures").

Where the tests run as root with a writable cgroup hierarchy, a real ``sleep``
is put in a new cgroup shaped like a Slurm step and another in one shaped like a
Docker scope, both under ``<hierarchy>/nvtopy-test-<random>/``:

- cgroup v2 (the ``cgroup2`` mount: ``/sys/fs/cgroup`` or, on a hybrid host,
  ``/sys/fs/cgroup/unified``): ``system.slice/slurmstepd.scope/job_4242/step_0/user/task_0``
  and ``system.slice/docker-<64 hex>.scope`` (systemd driver);
- cgroup v1 (the ``pids`` hierarchy, else ``name=systemd``, ``devices`` or
  ``freezer``): ``slurm/uid_0/job_4242/step_0`` and ``docker/<64 hex>`` (cgroupfs
  driver). The other v1 lines of the process keep the test runner's own
  cgroups, as on a hybrid host where one hierarchy holds the job: the most
  specific line must win. The ``memory`` and ``cpu`` controllers are left
  alone so the sleeps stay under whatever limits the runner has.

Then the resolver (:class:`nvtopy.backends.owners.OwnerResolver`) must name the
job and the container from ``/proc``, and, through ``../shared/fake-nvml``
reporting the two pids as GPU processes (``FAKE_NVML_PIDS``), so must
``nvtopy --once --json`` (an ``owner`` object per process) and the exporter
(``container``/``slurm_job`` labels on ``nvtopy_process_*``).

Skipped with the reason elsewhere: not Linux, not root, no such hierarchy, or
one that refuses a new cgroup or a process move (a delegated or read-only
cgroupfs). Every cgroup made is removed afterwards, on failure too: the sleeps
are killed and reaped, leftovers moved back to the hierarchy's root, then the
directories removed deepest first.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nvtopy.backends.owners import OwnerResolver
from nvtopy.model import OwnerKind

from .conftest import needs_fake_nvml

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cgroups are Linux only")

JOB = "4242"
STEP = "0"
JOB_NAME = "owner-e2e-train"
CONTAINER_NAME = "owner-e2e-web"
V1_HIERARCHIES = ("pids", "name=systemd", "devices", "freezer")  # never memory/cpu: keep the runner's limits
OWNER_KEYS = {"kind", "id", "name", "namespace", "pod", "container", "job", "step", "cgroup"}


@dataclass
class Mount:
    """One cgroup hierarchy as /proc/self/mountinfo describes it."""

    version: str  # "v2" or "v1"
    point: Path  # where it is mounted
    root: str  # the path of the mount's root inside the hierarchy (not "/" under a cgroup namespace or bind mount)


def find_mount(version: str) -> Mount | None:
    """The cgroup v2 mount, or a v1 mount of one of :data:`V1_HIERARCHIES`; ``None`` when there is none."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    v1: dict[str, Mount] = {}
    for line in lines:
        before, sep, after = line.partition(" - ")
        if not sep:
            continue
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = fields[3], fields[4].replace("\\040", " ")
        fstype, super_options = tail[0], tail[2].split(",")
        if fstype == "cgroup2" and version == "v2":
            return Mount("v2", Path(point), root)
        if fstype == "cgroup" and version == "v1":
            for name in V1_HIERARCHIES:
                if name in super_options and name not in v1:
                    v1[name] = Mount("v1", Path(point), root)
    return next((v1[name] for name in V1_HIERARCHIES if name in v1), None)


@dataclass
class Placed:
    """The two sleeps and their cgroups."""

    mount: Mount
    base: Path  # <mount>/nvtopy-test-<random>
    slurm_pid: int
    docker_pid: int
    container_id: str
    slurm_cgroup: str  # the paths /proc/<pid>/cgroup shows
    docker_cgroup: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)


def _cgroup_path(mount: Mount, directory: Path) -> str:
    """The path /proc/<pid>/cgroup shows for a cgroup directory under ``mount``."""
    relative = directory.relative_to(mount.point).as_posix()
    return "/" + "/".join(part for part in (mount.root.strip("/"), relative) if part)


def _lines_for(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cgroup").read_text().splitlines()


def _shows(pid: int, mount: Mount, path: str) -> bool:
    """Whether /proc/<pid>/cgroup puts ``pid`` at ``path`` in ``mount``'s hierarchy."""
    for line in _lines_for(pid):
        hierarchy, controllers, where = [*line.split(":", 2), "", ""][:3]
        if where != path:
            continue
        if mount.version == "v2" and hierarchy == "0" and controllers == "":
            return True
        if mount.version == "v1" and controllers:
            return True
    return False


def _cleanup(placed_dirs: list[Path], procs: list[subprocess.Popen], mount: Mount) -> list[str]:
    """Kill and reap the sleeps, empty and remove every directory made (deepest first). Returns what failed."""
    problems: list[str] = []
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            problems.append(f"pid {proc.pid} did not exit")
    ours = {str(proc.pid) for proc in procs}
    for directory in sorted(placed_dirs, key=lambda p: len(p.parts), reverse=True):
        deadline = time.monotonic() + 5
        while directory.exists():
            try:
                directory.rmdir()
                break
            except OSError as error:
                if error.errno not in (errno.EBUSY, errno.ENOTEMPTY) or time.monotonic() > deadline:
                    problems.append(f"rmdir {directory}: {error}")
                    break
                # A process of ours still inside (a zombie is gone from cgroup.procs once reaped): move it out.
                try:
                    left = (directory / "cgroup.procs").read_text().split()
                except OSError:
                    left = []
                for pid in left:
                    if pid in ours:
                        with contextlib.suppress(OSError):
                            (mount.point / "cgroup.procs").write_text(pid)
                time.sleep(0.05)
    return problems


@pytest.fixture(scope="module", params=["v2", "v1"])
def placed(request):
    """Two ``sleep 600`` processes in new Slurm-step and Docker-scope cgroups of one hierarchy."""
    if os.geteuid() != 0:
        pytest.skip("needs root: making cgroups and moving processes into them")
    mount = find_mount(request.param)
    if mount is None:
        wanted = "a cgroup2 mount" if request.param == "v2" else f"a cgroup v1 mount of {'/'.join(V1_HIERARCHIES)}"
        pytest.skip(f"no {wanted} in /proc/self/mountinfo")
    base = mount.point / f"nvtopy-test-{secrets.token_hex(4)}"
    container_id = secrets.token_hex(32)
    if mount.version == "v2":
        slurm_dir = base / "system.slice" / "slurmstepd.scope" / f"job_{JOB}" / f"step_{STEP}" / "user" / "task_0"
        docker_dir = base / "system.slice" / f"docker-{container_id}.scope"
    else:
        slurm_dir = base / "slurm" / "uid_0" / f"job_{JOB}" / f"step_{STEP}"
        docker_dir = base / "docker" / container_id
    dirs: list[Path] = []
    procs: list[subprocess.Popen] = []
    try:
        for leaf in (slurm_dir, docker_dir):
            for directory in reversed([leaf, *leaf.parents]):
                if (directory == base or base in directory.parents) and not directory.exists():
                    try:
                        directory.mkdir()
                    except OSError as error:
                        pytest.skip(f"cannot make a cgroup under {mount.point} ({mount.version}): {error}")
                    dirs.append(directory)
        slurm_env = {
            **os.environ,
            "SLURM_JOB_ID": JOB,
            "SLURM_JOB_NAME": JOB_NAME,
            "SLURM_STEP_ID": STEP,
            "CUDA_VISIBLE_DEVICES": "1",
        }
        docker_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
        for env, directory in ((slurm_env, slurm_dir), (docker_env, docker_dir)):
            proc = subprocess.Popen(["sleep", "600"], env=env, stdin=subprocess.DEVNULL)
            procs.append(proc)
            try:
                (directory / "cgroup.procs").write_text(str(proc.pid))
            except OSError as error:
                pytest.skip(f"cannot move a process into {directory} ({mount.version}): {error}")
        slurm_path, docker_path = _cgroup_path(mount, slurm_dir), _cgroup_path(mount, docker_dir)
        assert _shows(procs[0].pid, mount, slurm_path), _lines_for(procs[0].pid)
        assert _shows(procs[1].pid, mount, docker_path), _lines_for(procs[1].pid)
        yield Placed(mount, base, procs[0].pid, procs[1].pid, container_id, slurm_path, docker_path, procs, dirs)
    finally:
        problems = _cleanup(dirs, procs, mount)
        assert not problems, f"cleanup of {base}: {problems}"


def _create_time(pid: int) -> float:
    import psutil

    return psutil.Process(pid).create_time()


# --- (1) the resolver on /proc ----------------------------------------------------------------------


def test_resolver_names_the_slurm_step(placed):
    resolved = OwnerResolver().resolve(placed.slurm_pid, _create_time(placed.slurm_pid))
    owner = resolved.owner
    assert owner is not None, f"/proc/{placed.slurm_pid}/cgroup unreadable"
    assert owner.kind is OwnerKind.SLURM, (owner, _lines_for(placed.slurm_pid))
    assert (owner.id, owner.job, owner.step) == (JOB, JOB, STEP)
    assert owner.cgroup == placed.slurm_cgroup
    assert owner.name == JOB_NAME, "SLURM_JOB_NAME is read from environ when its SLURM_JOB_ID matches the path"
    if placed.mount.version == "v1":
        assert owner.uid == 0
    assert resolved.environ_readable and resolved.cuda_visible_devices == "1"


def test_resolver_names_the_docker_container(placed, tmp_path):
    cid = placed.container_id
    owner = OwnerResolver(docker_root=str(tmp_path)).resolve(placed.docker_pid, _create_time(placed.docker_pid)).owner
    assert owner is not None
    assert owner.kind is OwnerKind.DOCKER, (owner, _lines_for(placed.docker_pid))
    assert (owner.id, owner.container_id, owner.cgroup) == (cid, cid, placed.docker_cgroup)
    assert owner.name is None and owner.job is None, "no config.v2.json: no name"
    assert owner.label == cid[:12]

    # With the runtime's files readable (a fixture docker root): the container's name and compose project.
    config = tmp_path / "containers" / cid / "config.v2.json"
    config.parent.mkdir(parents=True)
    config.write_text(
        json.dumps({"Name": f"/{CONTAINER_NAME}", "Config": {"Labels": {"com.docker.compose.project": "e2e"}}})
    )
    named = OwnerResolver(docker_root=str(tmp_path)).resolve(placed.docker_pid, _create_time(placed.docker_pid)).owner
    assert named is not None and named.kind is OwnerKind.DOCKER
    assert (named.name, named.container, named.project, named.container_id) == (
        CONTAINER_NAME,
        CONTAINER_NAME,
        "e2e",
        cid,
    )


def test_resolver_reads_once_per_process(placed):
    resolver = OwnerResolver()
    key = (placed.slurm_pid, _create_time(placed.slurm_pid))
    first = resolver.resolve(*key)
    reads = resolver.reads
    assert resolver.resolve(*key) is first and resolver.reads == reads, "a known process costs no reads"


# --- (2) end to end through the fake driver -------------------------------------------------------------


def _env(fake_lib: str, placed: Placed) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FAKE_NVML_", "SLURM_")) and k != "CUDA_VISIBLE_DEVICES"
    }
    env.update(
        LD_LIBRARY_PATH=fake_lib,
        FAKE_NVML_GPUS="2",
        FAKE_NVML_PIDS=f"{placed.slurm_pid},{placed.docker_pid}",  # pid k goes to GPU k mod 2
    )
    return env


@needs_fake_nvml
def test_json_owner_of_each_gpu_process(fake_lib, placed):
    result = subprocess.run(
        [sys.executable, "-m", "nvtopy", "--once", "--json"],
        capture_output=True,
        text=True,
        env=_env(fake_lib, placed),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    by_pid = {p["pid"]: (g["index"], p) for g in data["gpus"] for p in g["processes"]}
    assert set(by_pid) == {placed.slurm_pid, placed.docker_pid}
    assert by_pid[placed.slurm_pid][0] == 0 and by_pid[placed.docker_pid][0] == 1
    if not any("owner" in proc for _, proc in by_pid.values()):
        pytest.skip("owners not wired yet: no 'owner' key in --json processes")

    slurm = by_pid[placed.slurm_pid][1]["owner"]
    docker = by_pid[placed.docker_pid][1]["owner"]
    for owner in (slurm, docker):
        assert isinstance(owner, dict) and set(owner) >= OWNER_KEYS, owner
    assert slurm["kind"] == "slurm", slurm
    assert (slurm["id"], slurm["job"], slurm["step"]) == (JOB, JOB, STEP)
    assert slurm["name"] == JOB_NAME and slurm["cgroup"] == placed.slurm_cgroup
    assert slurm["container"] is None and slurm["pod"] is None and slurm["namespace"] is None

    cid = placed.container_id
    assert docker["kind"] == "docker", docker
    assert docker["id"] == cid and docker["cgroup"] == placed.docker_cgroup
    assert docker.get("container_id", cid) == cid
    assert docker["job"] is None and docker["step"] is None and docker["pod"] is None


@needs_fake_nvml
def test_exporter_labels_each_process(fake_lib, placed):
    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}"],
        env=_env(fake_lib, placed),
        stderr=subprocess.PIPE,
        text=True,
    )
    wanted = {placed.slurm_pid, placed.docker_pid}
    try:
        deadline = time.monotonic() + 20
        samples = []
        while time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                families = {f.name: f for f in text_string_to_metric_families(text)}
                family = families.get("nvtopy_process_gpu_memory_bytes")
                samples = family.samples if family else []
                if {int(s.labels["pid"]) for s in samples} == wanted:
                    break
            except OSError:
                pass
            assert proc.poll() is None, f"the exporter exited: {proc.stderr.read() if proc.stderr else ''}"
            time.sleep(0.1)
        by_pid = {int(s.labels["pid"]): s.labels for s in samples}
        assert set(by_pid) == wanted, f"process series: {sorted(by_pid)}"
        owner_labels = {"container", "pod", "namespace", "slurm_job"}
        if not any(owner_labels & set(labels) for labels in by_pid.values()):
            pytest.skip("owners not wired yet: no container/pod/namespace/slurm_job labels on nvtopy_process_*")

        slurm, docker = by_pid[placed.slurm_pid], by_pid[placed.docker_pid]
        for labels in (slurm, docker):
            assert owner_labels <= set(labels), labels
        assert slurm["slurm_job"] == JOB, slurm
        assert slurm.get("owner_kind", "slurm") == "slurm" and docker.get("owner_kind", "docker") == "docker"
        assert (slurm["container"], slurm["pod"], slurm["namespace"]) == ("", "", ""), slurm
        cid = placed.container_id
        # No config.v2.json names this container (a random id; the exporter reads /var/lib/docker), so the label
        # must still tell it: its id, full or short as `docker ps` shows it. An empty label would lose it.
        assert docker["container"] in (cid, cid[:12]), docker
        assert (docker["slurm_job"], docker["pod"], docker["namespace"]) == ("", "", ""), docker
        # Every process series carries the same owner labels as the memory one.
        for family in families.values():
            if family.name.startswith("nvtopy_process_"):
                for sample in family.samples:
                    pid = int(sample.labels["pid"])
                    if pid in by_pid:
                        for key in owner_labels:
                            assert sample.labels.get(key) == by_pid[pid][key], (family.name, sample.labels)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
