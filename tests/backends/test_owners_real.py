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

Beside them, one ``sleep`` for each other kind: a containerd burstable pod
(v2 ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<64 hex>.scope``,
v1 cgroupfs ``kubepods/burstable/pod<uid>/<64 hex>``) and Podman (v2 rootless
``user.slice/user-1000.slice/user@1000.service/user.slice/libpod-<64 hex>.scope``, v1 rootful
``machine.slice/libpod-<64 hex>.scope``), under the same parent; a systemd service
``system.slice/nvtopy-test-<random>.service`` and a login session
``user.slice/user-0.slice/session-<random digits>.scope`` at the hierarchy's root, since systemd puts them
there and the parser anchors them there (new leaves; ``system.slice``, ``user.slice``, ``user-0.slice``
made, and then removed, only where absent). Each is checked through the resolver, ``--once --json``
(kind, id, cgroup), ``nvtopy log --processes`` (``owner_kind``, ``owner_name``), the exporter's labels and
the real TUI at 200x50 in tmux (its OWNER column). No runtime file names them (random ids; the CLI reads
Docker's and the kubelet's files under /var only), so names are left to the fixture-tree tests.

Then the resolver (:class:`nvtopy.backends.host.owners.OwnerResolver`) must name the
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
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nvtopy.backends.host.owners import OwnerResolver
from nvtopy.model import OwnerKind

from ..builders import run_nvtopy
from ..conftest import needs_fake_nvml
from ..waiting import exec_shown

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
class Other:
    """One more placed process: the owner its cgroup must give."""

    kind: str  # OwnerKind value
    pid: int
    cgroup: str  # the path /proc/<pid>/cgroup shows
    id: str  # the owner's id
    label: str  # what OWNER and the CSV's owner_name show (no runtime files are read: no names)
    container_id: str | None = None


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
    others: dict[str, Other] = field(default_factory=dict)  # the other kinds, by OwnerKind value

    @property
    def everyone(self) -> dict[int, Other]:
        """Every placed process, by pid: the Slurm and Docker ones too."""
        found = {
            self.slurm_pid: Other("slurm", self.slurm_pid, self.slurm_cgroup, JOB, f"slurm {JOB}.{STEP}"),
            self.docker_pid: Other(
                "docker", self.docker_pid, self.docker_cgroup, self.container_id, self.container_id[:12]
            ),
        }
        found.update({other.pid: other for other in self.others.values()})
        return found


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
    """``sleep 600`` processes in new cgroups of one hierarchy, one per owner kind.

    Slurm, Docker, Kubernetes and Podman under ``<hierarchy>/nvtopy-test-<random>/``; a systemd service
    (``system.slice/nvtopy-test-<random>.service``) and a login session
    (``user.slice/user-0.slice/session-<random digits>.scope``) must sit at the hierarchy's root (the parser
    anchors them there, as systemd puts them), so only there: a new leaf each, and ``system.slice``,
    ``user.slice`` and ``user-0.slice`` made only when absent (then removed too). Left out where the
    mount's root is not ``/`` (a cgroup namespace or bind mount) or the leaf already exists.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root: making cgroups and moving processes into them")
    mount = find_mount(request.param)
    if mount is None:
        wanted = "a cgroup2 mount" if request.param == "v2" else f"a cgroup v1 mount of {'/'.join(V1_HIERARCHIES)}"
        pytest.skip(f"no {wanted} in /proc/self/mountinfo")
    token = secrets.token_hex(4)
    base = mount.point / f"nvtopy-test-{token}"
    container_id = secrets.token_hex(32)
    k8s_cid, podman_cid = secrets.token_hex(32), secrets.token_hex(32)
    pod_uid = str(uuid.uuid4())
    session = f"9{secrets.randbelow(10**8):08d}"
    service = f"nvtopy-test-{token}"
    if mount.version == "v2":
        slurm_dir = base / "system.slice" / "slurmstepd.scope" / f"job_{JOB}" / f"step_{STEP}" / "user" / "task_0"
        docker_dir = base / "system.slice" / f"docker-{container_id}.scope"
        pod_slice = f"kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice"
        k8s_dir = base / "kubepods.slice" / "kubepods-burstable.slice" / pod_slice / f"cri-containerd-{k8s_cid}.scope"
        user_manager = base / "user.slice" / "user-1000.slice" / "user@1000.service"
        podman_dir = user_manager / "user.slice" / f"libpod-{podman_cid}.scope"
    else:
        slurm_dir = base / "slurm" / "uid_0" / f"job_{JOB}" / f"step_{STEP}"
        docker_dir = base / "docker" / container_id
        k8s_dir = base / "kubepods" / "burstable" / f"pod{pod_uid}" / k8s_cid
        podman_dir = base / "machine.slice" / f"libpod-{podman_cid}.scope"
    # kind, directory, owner id, label, container id
    others = [
        ("kubernetes", k8s_dir, pod_uid, f"pod {pod_uid[:8]}", k8s_cid),
        ("podman", podman_dir, podman_cid, podman_cid[:12], podman_cid),
    ]
    service_dir = mount.point / "system.slice" / f"{service}.service"
    session_dir = mount.point / "user.slice" / "user-0.slice" / f"session-{session}.scope"
    if mount.root == "/" and not service_dir.exists() and not session_dir.exists():
        others += [
            ("systemd-service", service_dir, f"{service}.service", service, None),
            ("user-session", session_dir, session, f"session {session}", None),
        ]
    dirs: list[Path] = []
    procs: list[subprocess.Popen] = []
    try:
        for leaf in (slurm_dir, docker_dir, *(other[1] for other in others)):
            for directory in reversed([leaf, *leaf.parents]):
                if mount.point in directory.parents and not directory.exists():
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
        plain_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
        leaves = [(slurm_env, slurm_dir), (plain_env, docker_dir), *((plain_env, other[1]) for other in others)]
        for env, directory in leaves:
            proc = subprocess.Popen(["sleep", "600"], env=env, stdin=subprocess.DEVNULL)
            procs.append(proc)
            exec_shown(proc.pid, environ=True)  # the owner is read once, its SLURM_JOB_NAME from the environment
            try:
                (directory / "cgroup.procs").write_text(str(proc.pid))
            except OSError as error:
                pytest.skip(f"cannot move a process into {directory} ({mount.version}): {error}")
        slurm_path, docker_path = _cgroup_path(mount, slurm_dir), _cgroup_path(mount, docker_dir)
        assert _shows(procs[0].pid, mount, slurm_path), _lines_for(procs[0].pid)
        assert _shows(procs[1].pid, mount, docker_path), _lines_for(procs[1].pid)
        placed_others: dict[str, Other] = {}
        for proc, (kind, directory, owner_id, label, cid) in zip(procs[2:], others, strict=True):
            path = _cgroup_path(mount, directory)
            assert _shows(proc.pid, mount, path), _lines_for(proc.pid)
            placed_others[kind] = Other(kind, proc.pid, path, owner_id, label, cid)
        yield Placed(
            mount, base, procs[0].pid, procs[1].pid, container_id, slurm_path, docker_path, procs, dirs, placed_others
        )
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
        # pid k goes to GPU k mod 2: Slurm's to GPU 0, Docker's to GPU 1, then the others.
        FAKE_NVML_PIDS=",".join(str(pid) for pid in placed.everyone),
    )
    return env


@needs_fake_nvml
def test_json_owner_of_each_gpu_process(fake_lib, placed):
    result = run_nvtopy("--once", "--json", env=_env(fake_lib, placed), timeout=60)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    by_pid = {p["pid"]: (g["index"], p) for g in data["gpus"] for p in g["processes"]}
    assert set(by_pid) == set(placed.everyone)
    assert by_pid[placed.slurm_pid][0] == 0 and by_pid[placed.docker_pid][0] == 1
    # Every process carries its owner: a missing key is a regression, never a skip.
    assert all("owner" in proc for _, proc in by_pid.values()), by_pid

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
    wanted = set(placed.everyone)
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
        for other in placed.others.values():
            labels = by_pid[other.pid]
            assert labels["owner_kind"] == other.kind, labels
            # No runtime file names these containers (random ids): the short id tells them, as for Docker.
            container = other.container_id[:12] if other.container_id else ""
            assert (labels["container"], labels["slurm_job"], labels["namespace"]) == (container, "", ""), labels
            assert labels["pod"] == "", ("no kubelet log names a pod of a random uid", labels)
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


# --- (3) every other kind: Kubernetes, Podman, a systemd service, a login session ---------------------------
#
# The CLI reads the kubelet's log layout under /var/log only (OwnerResolver's default root, not settable from
# the command line), and writing a fake pod's files there would touch the host: so end to end a pod is told by
# its uid and container id, and naming it from the log layout is left to the fixture-tree tests.


def _need(placed: Placed, kind: str) -> Other:
    other = placed.others.get(kind)
    if other is None:
        pytest.skip(f"no {kind} cgroup here: the hierarchy's root is not / or the unit already exists")
    return other


@pytest.mark.parametrize("kind", ["kubernetes", "podman", "systemd-service", "user-session"])
def test_resolver_names_every_other_kind(placed, kind, tmp_path):
    other = _need(placed, kind)
    resolver = OwnerResolver(docker_root=str(tmp_path), kubelet_log_root=str(tmp_path))
    owner = resolver.resolve(other.pid, _create_time(other.pid)).owner
    assert owner is not None
    assert owner.kind.value == kind, (owner, _lines_for(other.pid))
    assert (owner.id, owner.container_id, owner.cgroup) == (other.id, other.container_id, other.cgroup), owner
    assert owner.label == other.label
    assert owner.job is None and owner.step is None
    # (A rootless Podman's uid comes from user.slice at the hierarchy's root only; this one sits under the
    # test's own parent, so its uid is not asserted.)
    if kind == "user-session":
        assert owner.uid == 0
    if kind == "systemd-service":
        assert owner.name == other.label


def _run_cli(args: list[str], fake_lib: str, placed: Placed) -> str:
    result = run_nvtopy(*args, env=_env(fake_lib, placed), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_fake_nvml
def test_json_owner_of_every_kind(fake_lib, placed):
    data = json.loads(_run_cli(["--once", "--json"], fake_lib, placed))
    by_pid = {p["pid"]: p for g in data["gpus"] for p in g["processes"]}
    assert set(by_pid) == set(placed.everyone)
    for pid, want in placed.everyone.items():
        owner = by_pid[pid].get("owner")
        assert isinstance(owner, dict) and set(owner) >= OWNER_KEYS, (want.kind, owner)
        assert (owner["kind"], owner["id"], owner["cgroup"]) == (want.kind, want.id, want.cgroup), owner
        if want.container_id:
            assert owner.get("container_id", want.container_id) == want.container_id, owner
        if want.kind not in ("slurm", "docker"):
            assert owner["job"] is None and owner["step"] is None and owner["namespace"] is None, owner
            assert owner["pod"] is None, ("no kubelet log names a pod of a random uid", owner)


@needs_fake_nvml
def test_log_csv_owner_of_every_kind(fake_lib, placed):
    import csv
    import io

    # owner_name is a default column; owner_kind is asked for (as are the other owner_* columns).
    args = ["log", "--processes", "--count", "1", "--fields", "pid,owner_kind,owner_name"]
    rows = list(csv.DictReader(io.StringIO(_run_cli(args, fake_lib, placed))))
    assert rows and {"pid", "owner_kind", "owner_name"} <= set(rows[0]), rows[:1]
    by_pid = {int(row["pid"]): row for row in rows if row.get("pid")}
    assert set(by_pid) == set(placed.everyone), sorted(by_pid)
    for pid, want in placed.everyone.items():
        row = by_pid[pid]
        assert (row["owner_kind"], row["owner_name"]) == (want.kind, want.label), row


def _tmux(socket_name: str, *args: str) -> str:
    result = subprocess.run(["tmux", "-L", socket_name, *args], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


@needs_fake_nvml
def test_tui_owner_column_of_every_kind(fake_lib, placed):
    """The real TUI at 200x50 in tmux: each process's row shows its owner's label, whole, and q quits it."""
    if shutil.which("tmux") is None:
        pytest.skip("no tmux")
    env = _env(fake_lib, placed)
    env.pop("NVTOPY_DEBUG", None)
    socket_name = f"nvtopy-test-{secrets.token_hex(4)}"
    passed = {k: v for k, v in env.items() if k in ("LD_LIBRARY_PATH", "PATH", "HOME") or k.startswith("FAKE_NVML_")}
    # env -i: nothing else from the test's environment (pytest's COLUMNS/LINES would shrink the screen to 80x24).
    argv = ["env", "-i", *(f"{k}={v}" for k, v in passed.items()), "TERM=xterm-256color", sys.executable]
    argv += ["-m", "nvtopy"]
    command = shlex.join(argv)
    _tmux(socket_name, "-f", os.devnull, "new-session", "-d", "-x", "200", "-y", "50", "-c", str(Path.cwd()), command)
    screen = ""
    try:
        deadline = time.monotonic() + 30
        want = placed.everyone
        while time.monotonic() < deadline:
            screen = _tmux(socket_name, "capture-pane", "-p", "-t", "0")
            width = max((len(line) for line in screen.splitlines()), default=0)
            rows = {pid: _row_of(screen, pid) for pid in want}
            if all(row is not None and _shows_label(row, want[pid].label) for pid, row in rows.items()):
                break
            time.sleep(0.2)
        assert "OWNER" in screen, screen
        assert width > 120, f"the screen is {width} columns wide, not 200:\n{screen}"
        header = next(line for line in screen.splitlines() if "OWNER" in line and "PID" in line)
        column = header.index("OWNER")
        for pid, other in want.items():
            row = _row_of(screen, pid)
            assert row is not None, (pid, screen)
            assert _shows_label(row, other.label), (other.kind, other.label, row)
            assert row[column:].startswith(other.label), ("not in the OWNER column", other.kind, header, row)
        _tmux(socket_name, "send-keys", "-t", "0", "q")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if subprocess.run(["tmux", "-L", socket_name, "has-session"], capture_output=True).returncode != 0:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the TUI did not quit on q within 10 s")
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True, timeout=10)


def _row_of(screen: str, pid: int) -> str | None:
    """The screen line of the process table holding ``pid`` as a word.

    Only lines below the table's header: a chart's axis (``500M┤``) above it can hold the same digits.
    """
    pattern = re.compile(rf"(?<![0-9]){pid}(?![0-9])")
    lines = screen.splitlines()
    start = next((i for i, line in enumerate(lines) if "OWNER" in line and "PID" in line), len(lines))
    for line in lines[start + 1 :]:
        if pattern.search(line):
            return line
    return None


def _shows_label(row: str, label: str) -> bool:
    """``label`` whole in ``row``, as a cell of its own: at 200 columns OWNER is wide enough for every one here."""
    return re.search(rf"(?:^|\s){re.escape(label)}(?:\s|$)", row) is not None
