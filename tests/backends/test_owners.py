"""The owner resolver (``nvtopy.backends.host.owners``) on fixture ``/proc`` and runtime trees.

The cgroup lines follow the runtimes' documented formats (cgroups(7); cluster
notes section 1): 64-hex container ids, pod UIDs with ``-`` (cgroupfs driver) or
``_`` (systemd driver), Slurm's v1 and v2 trees. Names come from Docker's
``config.v2.json`` and the kubelet's log layout (section 2).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
from pathlib import Path

import pytest

from nvtopy.backends.host import owners
from nvtopy.backends.host.owners import MAX_NAME, MAX_PATH, OwnerResolver, ResolvedOwner, parse_cgroup
from nvtopy.model import OwnerKind, ProcessOwner


def _hex64(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


DOCKER_ID = "47335b04ebb4aefdc353dda62ddd38e5e1e00fc1372f0c8d0138417f0ccb9e6c"
DIND_ID = _hex64("dind-inner")
CONTAINERD_ID = _hex64("containerd")
CRIO_ID = _hex64("crio")
SHIM_ID = _hex64("dockershim")
PODMAN_ID = _hex64("podman")
POD_UID = "48d25824-cbe2-4fdc-9928-5bb49e05473d"
POD_UID_ = POD_UID.replace("-", "_")
CRIO_POD = "b312a30a-d345-42c8-a659-32a04d5fd529"
CRIO_POD_ = CRIO_POD.replace("-", "_")

# A whole cgroup v1 file, as on a host with the cgroupfs driver: one line per hierarchy.
V1_CONTROLLERS = (
    "12:hugetlb:{p}\n11:memory:{p}\n10:devices:{p}\n9:pids:{p}\n8:perf_event:{p}\n7:net_cls,net_prio:{p}\n"
    "6:cpuset:{p}\n5:freezer:{p}\n4:cpu,cpuacct:{p}\n3:blkio:{p}\n2:rdma:/\n1:name=systemd:{p}\n"
)


def v1(path: str, systemd: str | None = None, unified: str | None = None) -> str:
    text = V1_CONTROLLERS.format(p=path)
    if systemd is not None:
        text = text.replace(f"1:name=systemd:{path}", f"1:name=systemd:{systemd}")
    if unified is not None:
        text += f"0::{unified}\n"
    return text


# --- parse_cgroup: one row per runtime x driver -----------------------------------------------------

K8S = OwnerKind.KUBERNETES
CASES = [
    # Docker
    (
        "docker-systemd-v2",
        f"0::/system.slice/docker-{DOCKER_ID}.scope\n",
        {"kind": OwnerKind.DOCKER, "id": DOCKER_ID, "container_id": DOCKER_ID},
        DOCKER_ID[:12],
    ),
    (
        "docker-cgroupfs-v1",
        v1(f"/docker/{DOCKER_ID}"),
        {"kind": OwnerKind.DOCKER, "id": DOCKER_ID, "cgroup": f"/docker/{DOCKER_ID}"},
        DOCKER_ID[:12],
    ),
    (
        "docker-systemd-v1",
        v1(f"/system.slice/docker-{DOCKER_ID}.scope"),
        {"kind": OwnerKind.DOCKER, "id": DOCKER_ID},
        DOCKER_ID[:12],
    ),
    (
        "docker-in-docker-innermost",
        f"0::/docker/{DOCKER_ID}/docker/{DIND_ID}\n",
        {"kind": OwnerKind.DOCKER, "id": DIND_ID},
        DIND_ID[:12],
    ),
    (
        "docker-systemd-subcgroup",
        f"0::/system.slice/docker-{DOCKER_ID}.scope/init\n",
        {"kind": OwnerKind.DOCKER, "id": DOCKER_ID},
        DOCKER_ID[:12],
    ),
    # Kubernetes, systemd driver
    (
        "k8s-containerd-systemd-burstable",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID_}.slice/"
        f"cri-containerd-{CONTAINERD_ID}.scope\n",
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        f"pod {POD_UID[:8]}",
    ),
    (
        "k8s-containerd-systemd-besteffort",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_UID_}.slice/"
        f"cri-containerd-{CONTAINERD_ID}.scope\n",
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        None,
    ),
    (
        "k8s-containerd-systemd-guaranteed",
        f"0::/kubepods.slice/kubepods-pod{POD_UID_}.slice/cri-containerd-{CONTAINERD_ID}.scope\n",
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        None,
    ),
    (
        "k8s-crio-systemd",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{CRIO_POD_}.slice/crio-{CRIO_ID}.scope\n",
        {"kind": K8S, "id": CRIO_POD, "container_id": CRIO_ID},
        None,
    ),
    (
        "k8s-crio-conmon-is-no-container",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{CRIO_POD_}.slice/"
        f"crio-conmon-{CRIO_ID}.scope\n",
        {"kind": K8S, "id": CRIO_POD, "container_id": None},
        None,
    ),
    (
        "k8s-dockershim-systemd-v1",
        v1(f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID_}.slice/docker-{SHIM_ID}.scope"),
        {"kind": K8S, "id": POD_UID, "container_id": SHIM_ID},
        None,
    ),
    (
        "k8s-kubelet-cgroup-root-prefix",
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{POD_UID_}.slice/cri-containerd-{CONTAINERD_ID}.scope\n",
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        None,
    ),
    (
        "k8s-pod-cgroup-only",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID_}.slice\n",
        {"kind": K8S, "id": POD_UID, "container_id": None},
        None,
    ),
    # Kubernetes, cgroupfs driver
    (
        "k8s-cgroupfs-burstable",
        f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}\n",
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        None,
    ),
    (
        "k8s-cgroupfs-besteffort-v1",
        v1(f"/kubepods/besteffort/pod{POD_UID}/{CONTAINERD_ID}"),
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        None,
    ),
    (
        "k8s-cgroupfs-guaranteed",
        f"0::/kubepods/pod{POD_UID}/{CONTAINERD_ID}\n",
        {"kind": K8S, "id": POD_UID, "container_id": CONTAINERD_ID},
        None,
    ),
    # Podman
    (
        "podman-rootful",
        f"0::/machine.slice/libpod-{PODMAN_ID}.scope\n",
        {"kind": OwnerKind.PODMAN, "id": PODMAN_ID, "container_id": PODMAN_ID, "uid": None},
        PODMAN_ID[:12],
    ),
    (
        "podman-rootless",
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{PODMAN_ID}.scope\n",
        {"kind": OwnerKind.PODMAN, "id": PODMAN_ID, "uid": 1000},
        None,
    ),
    (
        "podman-rootless-container-subcgroup",
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{PODMAN_ID}.scope/container\n",
        {"kind": OwnerKind.PODMAN, "id": PODMAN_ID, "uid": 1000},
        None,
    ),
    (
        "podman-cgroupfs",
        f"0::/libpod_parent/libpod-{PODMAN_ID}\n",
        {"kind": OwnerKind.PODMAN, "id": PODMAN_ID},
        None,
    ),
    (
        "podman-conmon-is-no-container",
        f"0::/machine.slice/libpod-conmon-{PODMAN_ID}.scope\n",
        {"kind": OwnerKind.CGROUP, "cgroup": f"/machine.slice/libpod-conmon-{PODMAN_ID}.scope"},
        f"/machine.slice/libpod-conmon-{PODMAN_ID}.scope",
    ),
    # Slurm v1 (the devices/memory hierarchies hold the job; name=systemd says slurmd)
    (
        "slurm-v1-interactive",
        v1("/slurm/uid_2101171/job_280678/step_interactive/task_0", systemd="/system.slice/slurmd.service"),
        {"kind": OwnerKind.SLURM, "id": "280678", "job": "280678", "step": "interactive", "uid": 2101171},
        "slurm 280678.interactive",
    ),
    (
        "slurm-v1-batch",
        "10:devices:/slurm/uid_1000/job_42/step_batch\n4:memory:/slurm/uid_1000/job_42/step_batch\n",
        {"kind": OwnerKind.SLURM, "job": "42", "step": "batch", "uid": 1000},
        "slurm 42.batch",
    ),
    (
        "slurm-v1-numbered-step",
        "10:devices:/slurm/uid_1000/job_42/step_3/task_1\n",
        {"kind": OwnerKind.SLURM, "job": "42", "step": "3"},
        "slurm 42.3",
    ),
    (
        "slurm-v1-job-only",
        "10:devices:/slurm/uid_1000/job_42\n",
        {"kind": OwnerKind.SLURM, "job": "42", "step": None},
        "slurm 42",
    ),
    (
        "slurm-v1-multi-slurmd",
        "10:devices:/slurm_node07/uid_1000/job_42/step_0\n",
        {"kind": OwnerKind.SLURM, "job": "42", "step": "0"},
        "slurm 42.0",
    ),
    (
        "slurm-v1-hybrid-unified-says-service",
        v1(
            "/slurm/uid_1000/job_9/step_0/task_0",
            systemd="/system.slice/slurmd.service",
            unified="/system.slice/slurmd.service",
        ),
        {"kind": OwnerKind.SLURM, "job": "9", "step": "0"},
        "slurm 9.0",
    ),
    # Slurm v2
    (
        "slurm-v2-step-task",
        "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n",
        {"kind": OwnerKind.SLURM, "id": "1392969", "job": "1392969", "step": "0", "uid": None},
        "slurm 1392969.0",
    ),
    (
        "slurm-v2-batch",
        "0::/system.slice/slurmstepd.scope/job_1392969/step_batch/user/task_0\n",
        {"kind": OwnerKind.SLURM, "job": "1392969", "step": "batch"},
        "slurm 1392969.batch",
    ),
    (
        "slurm-v2-extern",
        "0::/system.slice/slurmstepd.scope/job_7/step_extern/user/task_special\n",
        {"kind": OwnerKind.SLURM, "job": "7", "step": "extern"},
        "slurm 7.extern",
    ),
    (
        "slurm-v2-interactive",
        "0::/system.slice/slurmstepd.scope/job_7/step_interactive/user/task_0\n",
        {"kind": OwnerKind.SLURM, "job": "7", "step": "interactive"},
        "slurm 7.interactive",
    ),
    (
        "slurm-v2-stepd-slurm",
        "0::/system.slice/slurmstepd.scope/job_7/step_0/slurm\n",
        {"kind": OwnerKind.SLURM, "job": "7", "step": "0"},
        "slurm 7.0",
    ),
    (
        "slurm-v2-multi-slurmd",
        "0::/system.slice/node07_slurmstepd.scope/job_7/step_1/user/task_0\n",
        {"kind": OwnerKind.SLURM, "job": "7", "step": "1"},
        "slurm 7.1",
    ),
    (
        "slurm-v2-stepd-system-is-no-job",
        "0::/system.slice/slurmstepd.scope/system\n",
        {"kind": OwnerKind.CGROUP, "cgroup": "/system.slice/slurmstepd.scope/system"},
        "/system.slice/slurmstepd.scope/system",
    ),
    # systemd services and sessions
    (
        "systemd-service",
        "0::/system.slice/nvidia-persistenced.service\n",
        {"kind": OwnerKind.SYSTEMD_SERVICE, "id": "nvidia-persistenced.service", "name": "nvidia-persistenced"},
        "nvidia-persistenced",
    ),
    (
        "systemd-service-nested-slice",
        "0::/system.slice/system-getty.slice/getty@tty1.service\n",
        {"kind": OwnerKind.SYSTEMD_SERVICE, "name": "getty@tty1"},
        "getty@tty1",
    ),
    (
        "systemd-service-subcgroup-v1",
        v1("/system.slice/ollama.service"),
        {"kind": OwnerKind.SYSTEMD_SERVICE, "name": "ollama", "uid": None},
        "ollama",
    ),
    (
        "user-session",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        {"kind": OwnerKind.USER_SESSION, "id": "3", "uid": 1000},
        "session 3",
    ),
    (
        "user-session-v1",
        v1("/user.slice/user-1000.slice/session-c12.scope"),
        {"kind": OwnerKind.USER_SESSION, "id": "c12", "uid": 1000},
        "session c12",
    ),
    (
        "user-service",
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n",
        {"kind": OwnerKind.SYSTEMD_SERVICE, "name": "jupyter", "uid": 1000},
        "jupyter",
    ),
    (
        "user-manager-app-scope",
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope\n",
        {"kind": OwnerKind.USER_SESSION, "id": None, "uid": 1000},
        "user 1000",
    ),
    # anything else
    ("unknown-path", "0::/init.scope\n", {"kind": OwnerKind.CGROUP, "cgroup": "/init.scope"}, "/init.scope"),
    ("root-v2", "0::/\n", {"kind": OwnerKind.HOST}, "host"),
    ("root-v1", v1("/"), {"kind": OwnerKind.HOST}, "host"),
    ("empty", "", {"kind": OwnerKind.HOST}, "host"),
    ("cgroup-namespace-root", "0::/..\n", {"kind": OwnerKind.HOST}, "host"),
]


@pytest.mark.parametrize(("text", "fields", "label"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup(text: str, fields: dict, label: str | None) -> None:
    owner = parse_cgroup(text)
    assert isinstance(owner, ProcessOwner)
    for name, value in fields.items():
        assert getattr(owner, name) == value, name
    if label is not None:
        assert owner.label == label
    if owner.kind is not OwnerKind.HOST:
        assert owner.cgroup and owner.cgroup.startswith("/")


def test_pod_uid_is_written_with_dashes_whatever_the_driver() -> None:
    systemd = parse_cgroup(f"0::/kubepods.slice/kubepods-pod{POD_UID_}.slice/cri-containerd-{CONTAINERD_ID}.scope")
    cgroupfs = parse_cgroup(f"0::/kubepods/pod{POD_UID}/{CONTAINERD_ID}")
    assert systemd.id == cgroupfs.id == POD_UID
    assert systemd.container_id == cgroupfs.container_id == CONTAINERD_ID


def test_short_or_uppercase_ids_are_not_containers() -> None:
    assert parse_cgroup("0::/system.slice/docker-abc123.scope").kind is OwnerKind.CGROUP
    assert parse_cgroup(f"0::/docker/{DOCKER_ID.upper()}").kind is OwnerKind.CGROUP
    assert parse_cgroup(f"0::/docker/{DOCKER_ID}0").kind is OwnerKind.CGROUP


def test_parse_cgroup_tolerates_odd_input() -> None:
    assert parse_cgroup(None).kind is OwnerKind.HOST
    assert parse_cgroup("   \n\n").kind is OwnerKind.HOST
    # A bare path (not in the file's format) is still read; other junk is kept raw.
    assert parse_cgroup(f"/docker/{DOCKER_ID}").id == DOCKER_ID
    junk = parse_cgroup("not a cgroup file")
    assert junk.kind is OwnerKind.CGROUP and junk.cgroup == "not a cgroup file"
    # A path with ':' in it (the third field is taken whole).
    assert parse_cgroup("0::/odd:name/x").cgroup == "/odd:name/x"


def test_long_path_is_cut() -> None:
    owner = parse_cgroup("0::/" + "a" * 20_000)
    assert owner.kind is OwnerKind.CGROUP
    assert owner.cgroup is not None and len(owner.cgroup) == MAX_PATH


def test_labels_of_named_owners() -> None:
    assert ProcessOwner(OwnerKind.KUBERNETES, id=POD_UID, namespace="ml", pod="train-0").label == "ml/train-0"
    assert ProcessOwner(OwnerKind.DOCKER, id=DOCKER_ID, name="web-1").label == "web-1"
    assert ProcessOwner(OwnerKind.SLURM).label == "slurm"
    assert ProcessOwner(OwnerKind.USER_SESSION).label == "session"
    assert ProcessOwner(OwnerKind.CGROUP).label == "cgroup"
    assert str(OwnerKind.SYSTEMD_SERVICE) == "systemd-service"


FRAGMENTS = [
    "0::",
    "1:name=systemd:",
    "10:devices:",
    ":",
    "/",
    "\n",
    "\0",
    "docker-",
    ".scope",
    "kubepods",
    "-pod",
    "pod",
    POD_UID,
    POD_UID_,
    DOCKER_ID,
    DOCKER_ID[:30],
    "slurm",
    "uid_",
    "job_",
    "step_",
    "slurmstepd.scope",
    "user-",
    "user@",
    ".slice",
    ".service",
    "session-",
    "libpod-",
    "crio-",
    "123",
    "_",
    "\udcff",
    "\x1b[31m",
    "é",
    " ",
]


def test_parse_cgroup_never_raises_on_random_text() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        if rng.random() < 0.5:
            text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30)))
        else:
            text = "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 200)))
        owner = parse_cgroup(text)
        assert isinstance(owner, ProcessOwner)
        assert isinstance(owner.label, str)
        assert owner.cgroup is None or len(owner.cgroup) <= MAX_PATH


# --- the resolver on fixture trees -----------------------------------------------------------------


class Tree:
    """A fixture /proc, Docker root and kubelet log root under tmp_path."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.docker = root / "docker"
        self.logs = root / "log"
        for path in (self.proc, self.docker, self.logs):
            path.mkdir()

    def resolver(self, **kwargs) -> OwnerResolver:
        return OwnerResolver(
            proc_root=str(self.proc), docker_root=str(self.docker), kubelet_log_root=str(self.logs), **kwargs
        )

    def process(
        self,
        pid: int,
        cgroup: str | None,
        environ: dict[str, str] | bytes | None = None,
        nspid: tuple[int, ...] | None = None,
    ) -> Path:
        base = self.proc / str(pid)
        base.mkdir()
        if cgroup is not None:
            (base / "cgroup").write_text(cgroup)
        if isinstance(environ, dict):
            environ = b"".join(f"{k}={v}".encode("utf-8", "surrogateescape") + b"\0" for k, v in environ.items())
        if environ is not None:
            (base / "environ").write_bytes(environ)
        ns = "\t".join(str(n) for n in (nspid or (pid,)))
        (base / "status").write_text(
            f"Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\n"
            f"PPid:\t1\nTracerPid:\t0\nNStgid:\t{ns}\nNSpid:\t{ns}\nNSpgid:\t{ns}\nNSsid:\t{ns}\n"
        )
        return base

    def docker_config(self, cid: str, content: str | dict) -> None:
        folder = self.docker / "containers" / cid
        folder.mkdir(parents=True)
        text = content if isinstance(content, str) else json.dumps(content)
        (folder / "config.v2.json").write_text(text, encoding="utf-8", errors="surrogateescape")

    def kubelet_pod(self, namespace: str, pod: str, uid: str, containers: dict[str, str]) -> None:
        """Write /var/log/pods/<ns>_<pod>_<uid>/<container>/0.log and the /var/log/containers symlinks."""
        pod_dir = self.logs / "pods" / f"{namespace}_{pod}_{uid}"
        (self.logs / "containers").mkdir(exist_ok=True)
        for container, cid in containers.items():
            (pod_dir / container).mkdir(parents=True)
            target = pod_dir / container / "0.log"
            target.write_text("")
            if cid:
                (self.logs / "containers" / f"{pod}_{namespace}_{container}-{cid}.log").symlink_to(target)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def docker_config(name: str, labels: dict[str, str] | None = None) -> dict:
    """The parts of a real config.v2.json the resolver reads, among the ones around them."""
    return {
        "StreamConfig": {},
        "State": {"Running": True, "Pid": 4242, "StartedAt": "2025-01-01T00:00:00Z"},
        "ID": DOCKER_ID,
        "Created": "2025-01-01T00:00:00Z",
        "Path": "python",
        "Args": ["train.py"],
        "Config": {
            "Hostname": DOCKER_ID[:12],
            "Env": ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"],
            "Image": "pytorch/pytorch:latest",
            "Labels": labels or {},
        },
        "Image": "sha256:" + _hex64("image"),
        "LogPath": f"/var/lib/docker/containers/{DOCKER_ID}/{DOCKER_ID}-json.log",
        "Name": name,
        "Driver": "overlay2",
    }


def test_docker_name_and_compose_project(tree: Tree) -> None:
    tree.process(100, f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    tree.docker_config(
        DOCKER_ID,
        docker_config("/web-1", {"com.docker.compose.project": "shop", "com.docker.compose.service": "web"}),
    )
    owner = tree.resolver().resolve(100, 1.0).owner
    assert owner is not None
    assert (owner.kind, owner.id, owner.name, owner.container, owner.project) == (
        OwnerKind.DOCKER,
        DOCKER_ID,
        "web-1",
        "web-1",
        "shop",
    )
    assert owner.label == "web-1"


def test_docker_without_labels_cgroupfs_v1(tree: Tree) -> None:
    tree.process(100, v1(f"/docker/{DOCKER_ID}"))
    tree.docker_config(DOCKER_ID, docker_config("/trainer"))
    owner = tree.resolver().resolve(100, 1.0).owner
    assert owner is not None and owner.name == "trainer" and owner.project is None


@pytest.mark.parametrize(
    "content",
    [
        None,  # no such file (not root, or another data root)
        "{not json",
        "[1, 2]",
        json.dumps({"Name": 7, "Config": "x"}),
        json.dumps({"Config": {"Labels": ["a"]}}),
        "\udcff\udcfe",
    ],
    ids=["missing", "malformed", "not-an-object", "wrong-types", "labels-not-a-map", "not-utf8"],
)
def test_docker_unreadable_config_gives_no_name(tree: Tree, content: str | None) -> None:
    tree.process(100, f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    if content is not None:
        tree.docker_config(DOCKER_ID, content)
    owner = tree.resolver().resolve(100, 1.0).owner
    assert owner is not None and owner.kind is OwnerKind.DOCKER and owner.id == DOCKER_ID
    assert owner.name is None and owner.project is None
    assert owner.label == DOCKER_ID[:12]


def test_docker_config_that_is_a_directory(tree: Tree) -> None:
    tree.process(100, f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    (tree.docker / "containers" / DOCKER_ID / "config.v2.json").mkdir(parents=True)
    owner = tree.resolver().resolve(100, 1.0).owner
    assert owner is not None and owner.name is None


K8S_CGROUPS = {
    "containerd-systemd": f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID_}.slice/"
    f"cri-containerd-{CONTAINERD_ID}.scope\n",
    "containerd-cgroupfs": f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}\n",
    "guaranteed-cgroupfs-v1": v1(f"/kubepods/pod{POD_UID}/{CONTAINERD_ID}"),
}


@pytest.mark.parametrize("cgroup", list(K8S_CGROUPS.values()), ids=list(K8S_CGROUPS))
def test_kubernetes_names_from_the_kubelet_logs(tree: Tree, cgroup: str) -> None:
    tree.kubelet_pod("ml-team", "trainer-7f9c", POD_UID, {"sidecar": _hex64("sidecar"), "worker": CONTAINERD_ID})
    tree.kubelet_pod("default", "other", CRIO_POD, {"worker": CRIO_ID})
    tree.process(200, cgroup)
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None
    assert (owner.kind, owner.id, owner.container_id) == (OwnerKind.KUBERNETES, POD_UID, CONTAINERD_ID)
    assert (owner.namespace, owner.pod, owner.container, owner.name) == (
        "ml-team",
        "trainer-7f9c",
        "worker",
        "trainer-7f9c",
    )
    assert owner.label == "ml-team/trainer-7f9c"


def test_kubernetes_pod_dir_only_names_a_lone_container(tree: Tree) -> None:
    tree.kubelet_pod("ml", "solo", POD_UID, {"main": ""})  # no /var/log/containers link
    tree.process(200, K8S_CGROUPS["containerd-systemd"])
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None and (owner.namespace, owner.pod, owner.container) == ("ml", "solo", "main")


def test_kubernetes_pod_dir_with_two_containers_names_the_pod_only(tree: Tree) -> None:
    tree.kubelet_pod("ml", "duo", POD_UID, {"a": "", "b": ""})
    tree.process(200, K8S_CGROUPS["containerd-cgroupfs"])
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None and (owner.namespace, owner.pod, owner.container) == ("ml", "duo", None)


def test_kubernetes_pod_cgroup_without_container_id(tree: Tree) -> None:
    tree.kubelet_pod("ml", "solo", POD_UID, {"main": CONTAINERD_ID})
    tree.process(200, f"0::/kubepods.slice/kubepods-pod{POD_UID_}.slice\n")
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None and (owner.namespace, owner.pod, owner.container) == ("ml", "solo", None)


def test_kubernetes_without_logs_keeps_the_ids(tree: Tree) -> None:
    tree.process(200, K8S_CGROUPS["containerd-systemd"])
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None and owner.id == POD_UID and owner.container_id == CONTAINERD_ID
    assert (owner.namespace, owner.pod, owner.container) == (None, None, None)
    assert owner.label == f"pod {POD_UID[:8]}"


def test_kubernetes_malformed_log_names_are_ignored(tree: Tree) -> None:
    (tree.logs / "containers").mkdir()
    (tree.logs / "containers" / f"a_b_c_d-{CONTAINERD_ID}.log").write_text("")
    (tree.logs / "containers" / f"-{CONTAINERD_ID}.log.bak").write_text("")
    (tree.logs / "pods" / f"x_y_z_{POD_UID}").mkdir(parents=True)
    tree.process(200, K8S_CGROUPS["containerd-systemd"])
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None and (owner.namespace, owner.pod, owner.container) == (None, None, None)


SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n"
SLURM_ENV = {
    "HOME": "/home/ada",
    "SLURM_JOB_ID": "1392969",
    "SLURM_JOB_NAME": "llama-finetune",
    "SLURM_STEP_ID": "0",
    "CUDA_VISIBLE_DEVICES": "0,1",
}


def test_slurm_job_name_from_the_environment(tree: Tree) -> None:
    tree.process(300, SLURM_V2, SLURM_ENV)
    found = tree.resolver().resolve(300, 1.0)
    assert found.owner is not None
    assert (found.owner.kind, found.owner.job, found.owner.step, found.owner.name) == (
        OwnerKind.SLURM,
        "1392969",
        "0",
        "llama-finetune",
    )
    assert found.owner.label == "slurm 1392969.0"
    assert found.cuda_visible_devices == "0,1"
    assert found.environ_readable


def test_slurm_name_needs_a_matching_job_id(tree: Tree) -> None:
    tree.process(300, SLURM_V2, {**SLURM_ENV, "SLURM_JOB_ID": "5"})
    owner = tree.resolver().resolve(300, 1.0).owner
    assert owner is not None and owner.job == "1392969" and owner.name is None


def test_slurm_without_slurm_environment(tree: Tree) -> None:
    tree.process(300, SLURM_V2, {"HOME": "/root", "CUDA_VISIBLE_DEVICES": "GPU-8a3b2c1d-0000-1111-2222-333344445555"})
    found = tree.resolver().resolve(300, 1.0)
    assert found.owner is not None and found.owner.name is None
    assert found.cuda_visible_devices == "GPU-8a3b2c1d-0000-1111-2222-333344445555"


def test_slurm_job_from_the_environment_alone(tree: Tree) -> None:
    """proctrack/linuxproc: no Slurm cgroup, the task stays in slurmd.service; the environment names the job."""
    tree.process(300, "0::/system.slice/slurmd.service\n", {**SLURM_ENV, "SLURM_STEP_ID": "batch"})
    owner = tree.resolver().resolve(300, 1.0).owner
    assert owner is not None
    assert (owner.kind, owner.job, owner.step, owner.name, owner.cgroup) == (
        OwnerKind.SLURM,
        "1392969",
        "batch",
        "llama-finetune",
        "/system.slice/slurmd.service",
    )


@pytest.mark.parametrize(
    ("cgroup", "kind"),
    [
        ("0::/user.slice/user-1000.slice/session-3.scope\n", OwnerKind.USER_SESSION),  # a login session
        ("0::/user.slice/user-1000.slice\n", OwnerKind.USER_SESSION),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n", OwnerKind.SYSTEMD_SERVICE),
        # A user can create a unit of their own named slurmd.service: not slurmd's.
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/slurmd.service\n", OwnerKind.SYSTEMD_SERVICE),
        ("0::/system.slice/jupyterhub.service\n", OwnerKind.SYSTEMD_SERVICE),
        ("0::/system.slice/slurmdbd.service\n", OwnerKind.SYSTEMD_SERVICE),
        ("11:devices:/user.slice/user-1000.slice/session-3.scope\n0::/\n", OwnerKind.USER_SESSION),  # hybrid v1
        (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{PODMAN_ID}.scope\n", OwnerKind.PODMAN),
        (f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}\n", OwnerKind.KUBERNETES),
    ],
)
def test_slurm_environment_never_overrides_a_cgroup_that_proves_another_owner(
    tree: Tree, cgroup: str, kind: OwnerKind
) -> None:
    """Anyone can export SLURM_JOB_ID: from a login session it would bill the job and put them in its group kill."""
    tree.process(300, cgroup, SLURM_ENV)
    owner = tree.resolver().resolve(300, 1.0).owner
    assert owner is not None and owner.kind is kind, owner
    assert owner.job is None and owner.name != SLURM_ENV["SLURM_JOB_NAME"]


@pytest.mark.parametrize(
    "cgroup",
    [
        "0::/system.slice/slurmd.service\n",  # proctrack/linuxproc under systemd
        "0::/system.slice/slurmd@node7.service\n",  # one of several slurmd on a node
        "0::/\n",  # the root cgroup: no systemd, no Slurm cgroup plugin
        "0::/opt-batch/task-7\n",  # a layout nvtopy does not know: it names no owner
    ],
)
def test_slurm_environment_names_the_job_where_the_cgroup_says_nothing(tree: Tree, cgroup: str) -> None:
    tree.process(300, cgroup, SLURM_ENV)
    owner = tree.resolver().resolve(300, 1.0).owner
    assert owner is not None and owner.kind is OwnerKind.SLURM
    assert (owner.job, owner.step, owner.name) == ("1392969", "0", "llama-finetune")


def test_slurm_environment_never_overrides_a_container(tree: Tree) -> None:
    tree.process(300, f"0::/system.slice/docker-{DOCKER_ID}.scope\n", SLURM_ENV)
    owner = tree.resolver().resolve(300, 1.0).owner
    assert owner is not None and owner.kind is OwnerKind.DOCKER


def test_non_numeric_slurm_job_id_is_ignored(tree: Tree) -> None:
    tree.process(300, "0::/user.slice/user-1000.slice/session-3.scope\n", {"SLURM_JOB_ID": "12; rm -rf /"})
    owner = tree.resolver().resolve(300, 1.0).owner
    assert owner is not None and owner.kind is OwnerKind.USER_SESSION


def test_environ_absent_or_unreadable(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    tree.process(300, SLURM_V2, SLURM_ENV)
    tree.process(301, SLURM_V2)  # no environ file at all
    real_read = owners.read_bounded

    def guarded_read(path, *args, **kwargs):
        if str(path).endswith(os.path.join("300", "environ")):
            raise owners.FileRefusedError("cannot read it (Permission denied)")
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(owners, "read_bounded", guarded_read)
    resolver = tree.resolver()
    for pid in (300, 301):
        found = resolver.resolve(pid, 1.0)
        assert found.owner is not None and found.owner.job == "1392969" and found.owner.name is None
        assert found.cuda_visible_devices is None and not found.environ_readable


def test_environ_with_odd_bytes(tree: Tree) -> None:
    environ = b"SLURM_JOB_ID=1392969\0SLURM_JOB_NAME=caf\xe9\xff\0NOEQUALS\0=\0CUDA_VISIBLE_DEVICES=\0trailing"
    tree.process(300, SLURM_V2, environ)
    found = tree.resolver().resolve(300, 1.0)
    assert found.owner is not None and found.owner.name == "caf\udce9\udcff"
    assert found.cuda_visible_devices is None  # set but empty: no GPUs is "" -- kept as None, like unset
    assert found.environ_readable


@pytest.mark.parametrize(
    ("nspid", "expected"),
    [((4242,), None), ((4242, 7), 7), ((4242, 900, 1), 1)],
    ids=["host", "container", "nested"],
)
def test_nspid(tree: Tree, nspid: tuple[int, ...], expected: int | None) -> None:
    tree.process(4242, f"0::/system.slice/docker-{DOCKER_ID}.scope\n", nspid=nspid)
    assert tree.resolver().resolve(4242, 1.0).ns_pid == expected


@pytest.mark.parametrize(
    "status",
    ["Name:\tx\n", "NSpid:\n", "NSpid:\t12\tx\n", "NSpid:\t12\t\u0663\n", ""],
    ids=["old-kernel", "empty", "garbage", "non-ascii-digit", "empty-file"],
)
def test_nspid_missing_or_malformed(tree: Tree, status: str) -> None:
    base = tree.process(4242, "0::/\n")
    (base / "status").write_text(status)
    assert tree.resolver().resolve(4242, 1.0).ns_pid is None


def test_vanished_process_gives_no_owner(tree: Tree) -> None:
    found = tree.resolver().resolve(999, 1.0)
    assert found == ResolvedOwner(owner=None)


def test_host_process(tree: Tree) -> None:
    tree.process(1, "0::/\n", {"PATH": "/bin"})
    found = tree.resolver().resolve(1, 1.0)
    assert found.owner is not None and found.owner.kind is OwnerKind.HOST and found.owner.label == "host"


HOSTILE = "\x1b]0;pwned\x07[bold red]<script>alert(1)</script>\u202e\r\n" + "x" * 10_000


def test_hostile_docker_name_is_kept_as_data_but_cut(tree: Tree) -> None:
    tree.process(100, f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    tree.docker_config(DOCKER_ID, docker_config("/" + HOSTILE, {"com.docker.compose.project": HOSTILE}))
    owner = tree.resolver().resolve(100, 1.0).owner
    assert owner is not None and owner.name is not None and owner.project is not None
    assert owner.name == HOSTILE[:MAX_NAME] and owner.project == HOSTILE[:MAX_NAME]
    assert owner.label == HOSTILE[:MAX_NAME]


def test_hostile_slurm_job_name_is_kept_as_data_but_cut(tree: Tree) -> None:
    tree.process(
        300, SLURM_V2, {**SLURM_ENV, "SLURM_JOB_NAME": HOSTILE.replace("\0", ""), "CUDA_VISIBLE_DEVICES": HOSTILE}
    )
    found = tree.resolver().resolve(300, 1.0)
    assert found.owner is not None and found.owner.name == HOSTILE[:MAX_NAME]
    assert found.cuda_visible_devices == HOSTILE[:MAX_PATH]


def test_hostile_kubelet_names_are_kept_as_data(tree: Tree) -> None:
    pod = "\x1b[31m[red]<b>pod\u202e"
    tree.kubelet_pod("ns\x07", pod, POD_UID, {"c\x1b": CONTAINERD_ID})
    tree.process(200, K8S_CGROUPS["containerd-systemd"])
    owner = tree.resolver().resolve(200, 1.0).owner
    assert owner is not None and (owner.namespace, owner.pod, owner.container) == ("ns\x07", pod, "c\x1b")


def test_hostile_service_name_in_the_path_is_cut(tree: Tree) -> None:
    unit = "\x1b[2J" + "s" * 200  # a path component is at most 255 bytes
    owner = parse_cgroup(f"0::/system.slice/{unit}.service\n")
    assert owner.kind is OwnerKind.SYSTEMD_SERVICE and owner.name == unit
    owner = parse_cgroup(f"0::/system.slice/{'s' * 300}.service\n")
    assert owner.name is not None and len(owner.name) == MAX_NAME


def test_oversized_files_are_read_bounded(tree: Tree) -> None:
    base = tree.process(300, SLURM_V2)
    # The matching line first, then megabytes: only the first PROC_READ_LIMIT bytes are read.
    (base / "cgroup").write_text(SLURM_V2 + ("9:memory:/x\n" * 500_000))
    (base / "environ").write_bytes(b"A=" + b"a" * (4 * 1024 * 1024) + b"\0SLURM_JOB_ID=1392969\0SLURM_JOB_NAME=late\0")
    found = tree.resolver().resolve(300, 1.0)
    assert found.owner is not None and found.owner.job == "1392969"
    assert found.owner.name is None  # past the environ bound


def test_random_files_never_raise(tree: Tree) -> None:
    rng = random.Random(7)
    resolver = tree.resolver()
    for pid in range(1000, 1150):
        cgroup = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 12))).replace("\0", "")
        base = tree.process(pid, cgroup.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        for name in ("environ", "status"):
            (base / name).write_bytes(rng.randbytes(rng.randint(0, 300)))
        if DOCKER_ID in cgroup:
            config = tree.docker / "containers" / DOCKER_ID / "config.v2.json"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_bytes(rng.randbytes(rng.randint(0, 300)))
        found = resolver.resolve(pid, 1.0)
        assert isinstance(found, ResolvedOwner) and found.owner is not None
        assert isinstance(found.owner.label, str)


# --- the cache -------------------------------------------------------------------------------------


def test_a_known_process_costs_no_read(tree: Tree) -> None:
    tree.process(300, SLURM_V2, SLURM_ENV, nspid=(300, 12))
    resolver = tree.resolver()
    first = resolver.resolve(300, 1700000000.25)
    reads = resolver.reads
    assert reads >= 3
    # Files gone: a second resolve that read anything would lose the names.
    for path in (tree.proc / "300").iterdir():
        path.unlink()
    for _ in range(5):
        assert resolver.resolve(300, 1700000000.25) is first
    assert resolver.reads == reads
    assert first.owner is not None and first.owner.name == "llama-finetune" and first.ns_pid == 12


def test_a_reused_pid_is_read_again(tree: Tree) -> None:
    tree.process(300, SLURM_V2, SLURM_ENV)
    resolver = tree.resolver()
    assert resolver.resolve(300, 1.0).owner.kind is OwnerKind.SLURM  # type: ignore[union-attr]
    (tree.proc / "300" / "cgroup").write_text(f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    reads = resolver.reads
    again = resolver.resolve(300, 2.0)  # same pid, new create time: a new process
    assert resolver.reads > reads
    assert again.owner is not None and again.owner.kind is OwnerKind.DOCKER
    assert resolver.resolve(300, 1.0).owner.kind is OwnerKind.SLURM  # type: ignore[union-attr]


def test_the_docker_and_kubelet_files_are_read_once(tree: Tree) -> None:
    tree.process(100, f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    tree.docker_config(DOCKER_ID, docker_config("/web-1"))
    tree.kubelet_pod("ml", "p", POD_UID, {"c": CONTAINERD_ID})
    tree.process(200, K8S_CGROUPS["containerd-systemd"])
    resolver = tree.resolver()
    docker, pod = resolver.resolve(100, 1.0), resolver.resolve(200, 1.0)
    reads = resolver.reads
    for _ in range(3):
        assert resolver.resolve(100, 1.0) is docker and resolver.resolve(200, 1.0) is pod
    assert resolver.reads == reads


def test_no_create_time_is_never_cached(tree: Tree) -> None:
    tree.process(300, SLURM_V2)
    resolver = tree.resolver()
    resolver.resolve(300, None)
    reads = resolver.reads
    resolver.resolve(300, None)
    assert resolver.reads > reads and len(resolver) == 0


def test_forget_and_the_size_bound(tree: Tree) -> None:
    for pid in range(10, 16):
        tree.process(pid, "0::/\n")
    resolver = tree.resolver(cache_size=4)
    for pid in range(10, 16):
        resolver.resolve(pid, 1.0)
    assert len(resolver) == 4  # the oldest two dropped
    resolver.resolve(12, 1.0)  # recently used: kept by the next drop
    resolver.forget([(12, 1.0), (15, 1.0), (99, 1.0)])
    assert len(resolver) == 2
    reads = resolver.reads
    resolver.resolve(12, 1.0)
    resolver.resolve(15, 1.0)
    assert resolver.reads == reads


def test_the_module_reads_files_only() -> None:
    """No subprocess, no network: the resolver costs file reads only."""
    source = Path(owners.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "json", "os", "re", "collections", "dataclasses", "functools"}


# --- the patterns: compiled at first use, tried only where their literal is ------------------------


def _patterns() -> dict[str, owners._Pattern]:
    return {name: value for name, value in vars(owners).items() if isinstance(value, owners._Pattern)}


def test_every_pattern_is_lazy_and_names_a_literal_of_its_own() -> None:
    patterns = _patterns()
    assert len(patterns) == 13, "a pattern compiled at import is back"
    for name, pattern in patterns.items():
        assert pattern.needs.replace(".", r"\.") in pattern.source, f"{name}: {pattern.needs!r} is not in it"


def test_a_pattern_answers_as_its_regex_on_any_text() -> None:
    """The literal is only a shortcut: on every case above and on random paths, what the regex itself finds."""
    rng = random.Random(5)
    texts = [case[1] for case in CASES] + [
        "/" + "/".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 12))) for _ in range(1500)
    ]
    texts += [text.rstrip("\n").partition("::")[2] for text in texts]
    for pattern in _patterns().values():
        for text in texts:
            for method in ("search", "match", "fullmatch"):
                mine, real = getattr(pattern, method)(text), getattr(pattern.compiled, method)(text)
                assert (mine and mine.span()) == (real and real.span()), (pattern.source, method, text)
            assert [m.span() for m in pattern.finditer(text)] == [m.span() for m in pattern.compiled.finditer(text)]


def test_a_session_compiles_only_the_patterns_it_needs(monkeypatch) -> None:
    """A host's usual process (a login session) compiles two of the thirteen patterns, not all of them."""
    for pattern in _patterns().values():
        monkeypatch.setattr(pattern, "_compiled", None)
    owner = parse_cgroup("0::/user.slice/user-1000.slice/session-37771.scope\n")  # a text no other test parses
    assert owner.kind is OwnerKind.USER_SESSION and owner.id == "37771"
    compiled = sorted(name for name, pattern in _patterns().items() if pattern._compiled is not None)
    assert compiled == ["_SESSION", "_USER"]
