"""Who owns a process: a container, a Kubernetes pod, a Slurm job, a systemd service or a session.

Read from files only -- never a ``docker``/``kubectl``/``crictl``/``scontrol``
subprocess -- so naming an owner costs a few small reads, once per process:

- ``/proc/<pid>/cgroup``: the owner's kind and ids (:func:`parse_cgroup`, cgroup
  v1 and v2, systemd and cgroupfs drivers; layouts in the module's regexes and
  ``docs`` of :func:`parse_cgroup`);
- Docker's ``<docker_root>/containers/<id>/config.v2.json``: container name and
  compose project (root-only on most hosts: unreadable -> no name);
- the kubelet's log layout: ``<log>/containers/<pod>_<ns>_<container>-<id>.log``
  and ``<log>/pods/<ns>_<pod>_<uid>/<container>/``: namespace, pod and container
  names (Kubernetes names cannot contain ``_``);
- ``/proc/<pid>/environ``: ``SLURM_JOB_NAME`` (trusted only when its
  ``SLURM_JOB_ID`` matches the job of the cgroup path; ``SLURM_JOB_ID`` names a job
  by itself only where the cgroup names no other owner) and ``CUDA_VISIBLE_DEVICES``;
  readable for the process's own user or root only;
- ``/proc/<pid>/status``: ``NSpid``, the pid as the process's own PID namespace
  (its container) sees it.

Why cached per (pid, create time): a process's cgroup and names do not change in
practice while it lives (a move between cgroups is rare and not worth a read per
refresh), and pids are reused, so the create time is part of the key.

Every read is bounded in size and every failure gives ``None`` fields, never an
exception. Names are kept as data (escaping is the views' job) but cut to
:data:`MAX_NAME`.
"""

from __future__ import annotations

import functools
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import replace

from ...boundedfile import FileRefusedError, read_bounded
from ...jsondecode import JsonRefusedError, decode_json
from ...model import OwnerKind, ProcessOwner
from ...records import dataclass

__all__ = ["OwnerResolver", "ResolvedOwner", "parse_cgroup"]

MAX_NAME = 256
"""Longest name, id or environment value kept (characters); longer ones are cut."""
MAX_PATH = 1024
"""Longest raw cgroup path kept (characters)."""
PROC_READ_LIMIT = 64 * 1024
"""Bytes read from ``/proc/<pid>/cgroup`` and ``status``."""
ENVIRON_READ_LIMIT = 256 * 1024
"""Bytes read from ``/proc/<pid>/environ``: Slurm and module environments pass 64 KiB."""
DOCKER_CONFIG_READ_LIMIT = 1024 * 1024
"""Bytes read from a ``config.v2.json`` (it embeds the container's env, mounts and labels)."""
MAX_LINES = 64
"""cgroup lines looked at (v1 has one per hierarchy, about a dozen)."""
MAX_DIR_ENTRIES = 100_000
"""Entries scanned in one kubelet log directory."""
CACHE_SIZE = 8192
"""Processes remembered by an :class:`OwnerResolver` (oldest dropped first)."""


class _Pattern:
    """A regex compiled at its first use, and tried only on a text that holds ``needs`` (a literal every match has).

    Why: compiling the thirteen patterns below was most of this module's import (about 4 % of
    ``nvtopy --once``), and a host's processes need two or three of them (a session's
    ``/user.slice/...``); the literal, checked in C, says which can match at all.
    """

    __slots__ = ("_compiled", "needs", "source")

    def __init__(self, source: str, needs: str) -> None:
        self.source, self.needs = source, needs
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.source)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled.search(text) if self.needs in text else None

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text) if self.needs in text else None

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text) if self.needs in text else None

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text) if self.needs in text else iter(())


_HEX64 = r"[0-9a-f]{64}"
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"

# Kubernetes. systemd driver: kubepods[-<qos>]-pod<uid with _>.slice (a kubelet cgroup root may prefix
# "kubelet-"); cgroupfs driver: /kubepods[/<qos>]/pod<uid>. Guaranteed pods sit directly under kubepods.
_K8S_SYSTEMD = _Pattern(
    rf"kubepods(?:-burstable|-besteffort)?-pod(?P<uid>{_UID})\.slice(?:/(?P<rest>[^/]+))?", "kubepods"
)
_K8S_CGROUPFS = _Pattern(
    rf"(?:^|/)kubepods(?:/burstable|/besteffort)?/pod(?P<uid>{_UID})(?:/(?P<rest>[^/]+))?", "kubepods"
)
# A pod's container cgroup: cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope (dockershim), or
# the bare id (cgroupfs). crio-conmon-<id>.scope (CRI-O's monitor) and the pod's own cgroup are not a container.
_K8S_CONTAINER = _Pattern(rf"(?:(?:cri-containerd|crio|docker)-)?(?P<id>{_HEX64})(?:\.scope)?", "")  # any text
# Podman: libpod-<id>.scope (systemd, rootful and rootless) or libpod-<id> (cgroupfs); libpod-conmon-<id> is not.
_PODMAN = _Pattern(rf"(?:^|/)libpod-(?P<id>{_HEX64})(?:\.scope)?(?:/|$)", "libpod-")
# Docker: docker-<id>.scope (systemd driver) or /docker/<id> (cgroupfs; Docker in Docker nests: the last wins).
_DOCKER_SYSTEMD = _Pattern(rf"(?:^|/)docker-(?P<id>{_HEX64})\.scope(?:/|$)", "docker-")
_DOCKER_CGROUPFS = _Pattern(rf"(?:^|/)docker/(?P<id>{_HEX64})(?=/|$)", "docker/")
# Slurm v1: /slurm[_<node>]/uid_U/job_J[/step_S[/task_T]]; v2: [<node>_]slurmstepd.scope/job_J[/step_S[/user/task_T]].
_SLURM_V1 = _Pattern(
    r"(?:^|/)slurm[^/]{0,256}/uid_(?P<uid>\d{1,10})/job_(?P<job>\d{1,20})(?:/step_(?P<step>[^/]{1,64}))?", "slurm"
)
_SLURM_V2 = _Pattern(
    r"(?:^|/)(?:[^/]{0,256}_)?slurmstepd\.scope/job_(?P<job>\d{1,20})(?:/step_(?P<step>[^/]{1,64}))?",
    "slurmstepd.scope/job_",
)
# systemd. A service may sit in nested slices (system-getty.slice/getty@tty1.service) and have sub-cgroups.
_SYSTEM_SERVICE = _Pattern(r"^/system\.slice/(?:[^/]+\.slice/)*(?P<unit>[^/]+)\.service(?:/|$)", "/system.slice/")
_USER = _Pattern(r"^/user\.slice/(?:[^/]+\.slice/)*user-(?P<uid>\d{1,10})\.slice(?:/(?P<rest>.*))?$", "/user.slice/")
_SESSION = _Pattern(r"^session-(?P<id>[^/]{1,64})\.scope(?:/|$)", "session-")
_USER_MANAGER = _Pattern(r"^user@(?P<uid>\d{1,10})\.service(?:/(?P<rest>.*))?$", "user@")
_UNIT_SERVICE = _Pattern(r"(?:^|/)(?P<unit>[^/]+)\.service(?:/|$)", ".service")

# The order in which v1 hierarchies are tried when several lines name an owner of equal rank.
_V1_PREFERENCE = ("name=systemd", "devices", "memory", "pids", "cpu", "cpuacct", "cpuset", "freezer")
# How specific each kind is: on a hybrid v1 host the unified line may say slurmd.service while the devices line
# holds the Slurm job; the most specific answer wins.
_RANK = {
    OwnerKind.KUBERNETES: 4,
    OwnerKind.DOCKER: 4,
    OwnerKind.PODMAN: 4,
    OwnerKind.SLURM: 4,
    OwnerKind.SYSTEMD_SERVICE: 2,
    OwnerKind.USER_SESSION: 2,
    OwnerKind.CGROUP: 1,
    OwnerKind.HOST: 0,
}

_HOST = ProcessOwner(kind=OwnerKind.HOST, cgroup="/")


def _cut(text: str | None, limit: int = MAX_NAME) -> str | None:
    """``text`` cut to ``limit`` characters; empty -> ``None``."""
    if not text:
        return None
    return text[:limit]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def parse_cgroup(text: str | None) -> ProcessOwner:
    """The owner named by the content of a ``/proc/<pid>/cgroup`` file. Never raises.

    Both cgroup versions: v2 is one ``0::<path>`` line; v1 is one
    ``<id>:<controllers>:<path>`` line per hierarchy (with a ``0::`` line too on
    hybrid hosts). Every line is parsed and the most specific owner wins (a
    container, pod or job over a service or session over a raw path), ties going
    to the unified line, then ``name=systemd``, ``devices``, ``memory``, ...

    Recognised (systemd and cgroupfs drivers): Kubernetes pods of every QoS class
    with containerd, CRI-O or dockershim containers; Docker (Docker in Docker:
    the innermost); Podman, rootful and rootless; Slurm cgroup v1 and v2 steps;
    systemd services (system and per-user) and login sessions. Anything else is
    kind ``cgroup`` with the raw path; ``/`` or nothing is kind ``host``.
    """
    return _parse_cgroup_text(text or "")


@functools.lru_cache(maxsize=256)
def _parse_cgroup_text(text: str) -> ProcessOwner:
    """:func:`parse_cgroup`, remembered by the file's text: a job's processes share their cgroup file (64
    processes of one container: one parse, not 64), and the owner is immutable."""
    try:
        return _parse_cgroup(text)
    except Exception:  # noqa: BLE001 -- a monitor must show the row whatever the file says
        return ProcessOwner(kind=OwnerKind.CGROUP, cgroup=_cut(text, MAX_PATH))


def _parse_cgroup(text: str) -> ProcessOwner:
    candidates: list[tuple[int, str]] = []  # (preference, path): lower preference first on a tie
    for line in text[:PROC_READ_LIMIT].splitlines()[:MAX_LINES]:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy.strip() == "0" and not controllers:
            preference = 0  # the unified (v2) hierarchy
        else:
            names = controllers.split(",")
            preference = next(
                (1 + i for i, name in enumerate(_V1_PREFERENCE) if name in names), 1 + len(_V1_PREFERENCE)
            )
        candidates.append((preference, path.strip()))
    if not candidates:
        stripped = text.strip()
        # Not in the file's format: a bare path (as some tools print it) is still worth a look.
        if stripped.startswith("/") and "\n" not in stripped:
            candidates.append((0, stripped))
        else:
            return _HOST if not stripped else ProcessOwner(kind=OwnerKind.CGROUP, cgroup=_cut(stripped, MAX_PATH))
    best: ProcessOwner | None = None
    best_key: tuple[int, int] | None = None
    for preference, path in sorted(candidates, key=lambda c: c[0]):
        owner = parse_cgroup_path(path)
        key = (-_RANK[owner.kind], preference)
        if best_key is None or key < best_key:
            best, best_key = owner, key
    assert best is not None
    return best


def parse_cgroup_path(path: str) -> ProcessOwner:
    """The owner named by one cgroup path (the part after the second ``:`` of a cgroup line)."""
    raw = _cut(path, MAX_PATH)
    if not path or path == "/" or set(path) <= {"/", "."}:
        return _HOST
    match = _K8S_SYSTEMD.search(path) or _K8S_CGROUPFS.search(path)
    if match:
        uid = match["uid"].replace("_", "-")
        container = _K8S_CONTAINER.fullmatch(match["rest"] or "")
        return ProcessOwner(
            kind=OwnerKind.KUBERNETES, id=uid, container_id=container["id"] if container else None, cgroup=raw
        )
    matches = list(_PODMAN.finditer(path))
    if matches:
        return ProcessOwner(
            kind=OwnerKind.PODMAN,
            id=matches[-1]["id"],
            container_id=matches[-1]["id"],
            uid=_user_uid(path),
            cgroup=raw,
        )
    matches = list(_DOCKER_SYSTEMD.finditer(path)) + list(_DOCKER_CGROUPFS.finditer(path))
    if matches:
        last = max(matches, key=lambda m: m.start())
        return ProcessOwner(kind=OwnerKind.DOCKER, id=last["id"], container_id=last["id"], cgroup=raw)
    match = _SLURM_V1.search(path)
    if match:
        return ProcessOwner(
            kind=OwnerKind.SLURM,
            id=match["job"],
            job=match["job"],
            step=match["step"],
            uid=_int(match["uid"]),
            cgroup=raw,
        )
    match = _SLURM_V2.search(path)
    if match:
        return ProcessOwner(kind=OwnerKind.SLURM, id=match["job"], job=match["job"], step=match["step"], cgroup=raw)
    match = _SYSTEM_SERVICE.match(path)
    if match:
        return _service(match["unit"], None, raw)
    match = _USER.match(path)
    if match:
        uid = _int(match["uid"])
        rest = match["rest"] or ""
        session = _SESSION.match(rest)
        if session:
            return ProcessOwner(kind=OwnerKind.USER_SESSION, id=_cut(session["id"]), uid=uid, cgroup=raw)
        manager = _USER_MANAGER.match(rest)
        if manager:
            units = list(_UNIT_SERVICE.finditer(manager["rest"] or ""))
            if units:  # a user service (systemctl --user): user@1000.service/app.slice/foo.service
                return _service(units[-1]["unit"], uid, raw)
        return ProcessOwner(kind=OwnerKind.USER_SESSION, uid=uid, cgroup=raw)
    return ProcessOwner(kind=OwnerKind.CGROUP, cgroup=raw)


def _user_uid(path: str) -> int | None:
    match = _USER.match(path)
    return _int(match["uid"]) if match else None


def _service(unit: str, uid: int | None, raw: str | None) -> ProcessOwner:
    return ProcessOwner(
        kind=OwnerKind.SYSTEMD_SERVICE, id=_cut(unit + ".service"), name=_cut(unit), uid=uid, cgroup=raw
    )


@dataclass(frozen=True, slots=True)
class ResolvedOwner:
    """A process's owner plus the per-process facts read with it.

    ``owner`` is ``None`` only when ``/proc/<pid>/cgroup`` could not be read (the
    process exited, or a hardened ``/proc``).
    """

    owner: ProcessOwner | None
    ns_pid: int | None = None  # the pid inside the process's own PID namespace, when it differs (NSpid)
    cuda_visible_devices: str | None = None  # from its environment; None: unset or unreadable
    environ_readable: bool = False  # False: environ unreadable (another user's process) -- not "unset"


class OwnerResolver:
    """Resolves and caches the owner of processes, by (pid, create time).

    Every root is injectable so tests run on fixture trees. ``reads`` counts the
    files and directories opened, for tests and benchmarks.
    """

    def __init__(
        self,
        proc_root: str = "/proc",
        docker_root: str = "/var/lib/docker",
        kubelet_log_root: str = "/var/log",
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.proc_root = proc_root
        self.docker_root = docker_root
        self.kubelet_log_root = kubelet_log_root
        self.cache_size = max(1, cache_size)
        self.reads = 0
        self._cache: OrderedDict[tuple[int, float], ResolvedOwner] = OrderedDict()

    # --- the cache -------------------------------------------------------------------------------

    def resolve(
        self, pid: int, create_time: float | None, *, status: bytes | None = None, again: bool = False
    ) -> ResolvedOwner:
        """The owner of ``pid``; read once per (pid, create time), then from the cache.

        Without a create time a reused pid cannot be told apart, so nothing is cached. ``status``:
        ``/proc/<pid>/status`` as the caller has just read it under ``/proc`` (the inspector's first
        sight), taken instead of reading it again where this resolver reads ``/proc`` too. ``again``: read it
        afresh and replace what is cached (a process first seen in the middle of its exec, before the kernel
        had set its new environment, where the Slurm job and ``CUDA_VISIBLE_DEVICES`` are read).
        """
        if status is not None and self.proc_root != "/proc":
            status = None
        if create_time is None:
            return self._resolve(pid, status)
        key = (pid, create_time)
        found = None if again else self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        found = self._resolve(pid, status)
        self._cache[key] = found
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return found

    def forget(self, keep: Iterable[tuple[int, float | None]]) -> None:
        """Drop every cached process not in ``keep`` ((pid, create time) pairs): call once per refresh."""
        alive = set(keep)
        for key in [key for key in self._cache if key not in alive]:
            del self._cache[key]

    def __len__(self) -> int:
        return len(self._cache)

    # --- one process -----------------------------------------------------------------------------

    def _resolve(self, pid: int, status: bytes | None = None) -> ResolvedOwner:
        try:
            return self._resolve_unguarded(pid, status)
        except Exception:  # noqa: BLE001 -- a bad file must cost the names, never the refresh
            return ResolvedOwner(owner=None)

    def _resolve_unguarded(self, pid: int, given_status: bytes | None = None) -> ResolvedOwner:
        base = os.path.join(self.proc_root, str(int(pid)))
        text = self._read_text(os.path.join(base, "cgroup"), PROC_READ_LIMIT)
        owner = parse_cgroup(text) if text is not None else None
        env = self._read_environ(os.path.join(base, "environ"))
        if given_status is None:
            status = self._read_text(os.path.join(base, "status"), PROC_READ_LIMIT)
        else:  # as _read_text would give it: its first PROC_READ_LIMIT bytes, decoded the same way
            status = given_status[:PROC_READ_LIMIT].decode("utf-8", "surrogateescape")
        if owner is not None:
            if owner.kind is OwnerKind.DOCKER and owner.container_id:
                owner = self._name_docker(owner)
            elif owner.kind is OwnerKind.KUBERNETES:
                owner = self._name_kubernetes(owner)
            owner = _with_slurm_env(owner, env)
        return ResolvedOwner(
            owner=owner,
            ns_pid=_ns_pid(status),
            cuda_visible_devices=_cut(env.get("CUDA_VISIBLE_DEVICES"), MAX_PATH) if env is not None else None,
            environ_readable=env is not None,
        )

    # --- bounded reads ---------------------------------------------------------------------------

    def _read_bytes(self, path: str, limit: int) -> bytes | None:
        """The first ``limit`` bytes of a regular file (a runtime's config replaced by a FIFO is never waited on)."""
        self.reads += 1
        try:
            return read_bounded(path, limit, cut=True)
        except FileRefusedError:
            return None

    def _read_text(self, path: str, limit: int) -> str | None:
        data = self._read_bytes(path, limit)
        return None if data is None else data.decode("utf-8", "surrogateescape")

    def _read_environ(self, path: str) -> dict[str, str] | None:
        data = self._read_bytes(path, ENVIRON_READ_LIMIT)
        if data is None:
            return None
        env: dict[str, str] = {}
        for entry in data.split(b"\0"):
            name, sep, value = entry.partition(b"=")
            if sep and name in (b"SLURM_JOB_ID", b"SLURM_JOB_NAME", b"SLURM_STEP_ID", b"CUDA_VISIBLE_DEVICES"):
                env[name.decode("ascii")] = value.decode("utf-8", "surrogateescape")
        return env

    def _list_dir(self, path: str) -> Iterable[str]:
        self.reads += 1
        try:
            with os.scandir(path) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_DIR_ENTRIES:
                        return
                    yield entry.name
        except (OSError, ValueError):
            return

    # --- names from the runtimes' files ----------------------------------------------------------

    def _name_docker(self, owner: ProcessOwner) -> ProcessOwner:
        assert owner.container_id is not None
        path = os.path.join(self.docker_root, "containers", owner.container_id, "config.v2.json")
        data = self._read_bytes(path, DOCKER_CONFIG_READ_LIMIT)
        if not data:
            return owner
        try:
            config = decode_json(data.decode("utf-8", "surrogateescape"))
        except JsonRefusedError:  # cut at the limit, nested too deeply, not JSON
            return owner
        if not isinstance(config, dict):
            return owner
        name = config.get("Name")
        name = _cut(name.lstrip("/")) if isinstance(name, str) else None
        labels = config.get("Config")
        labels = labels.get("Labels") if isinstance(labels, dict) else None
        project = labels.get("com.docker.compose.project") if isinstance(labels, dict) else None
        project = _cut(project) if isinstance(project, str) else None
        return replace(owner, name=name, container=name, project=project)

    def _name_kubernetes(self, owner: ProcessOwner) -> ProcessOwner:
        namespace = pod = container = None
        uid = owner.id
        cid = owner.container_id
        if cid:
            # <pod>_<namespace>_<container>-<container id>.log: the cgroup's container id joins it to the pod.
            suffix = f"-{cid}.log"
            for name in self._list_dir(os.path.join(self.kubelet_log_root, "containers")):
                if name.endswith(suffix):
                    parts = name[: -len(suffix)].split("_")
                    if len(parts) == 3 and all(parts):
                        pod, namespace, container = parts
                    break
        if uid and (namespace is None or container is None):
            # <namespace>_<pod>_<uid>/<container>/: the pod's names; the container's only when it has one.
            suffix = f"_{uid}"
            for name in self._list_dir(os.path.join(self.kubelet_log_root, "pods")):
                if name.endswith(suffix):
                    parts = name[: -len(suffix)].split("_")
                    if len(parts) == 2 and all(parts):
                        namespace, pod = parts
                        if container is None and cid:
                            subdirs = list(self._list_dir(os.path.join(self.kubelet_log_root, "pods", name)))
                            if len(subdirs) == 1:
                                container = subdirs[0]
                    break
        pod = _cut(pod)
        return replace(owner, name=pod, namespace=_cut(namespace), pod=pod, container=_cut(container))


def _with_slurm_env(owner: ProcessOwner, env: dict[str, str] | None) -> ProcessOwner:
    """Add the job name from the environment, when its job id matches the cgroup's.

    Without a Slurm cgroup (``proctrack/linuxproc``: tasks stay in ``slurmd.service``, or
    in the root cgroup without systemd) a process whose environment holds a numeric
    ``SLURM_JOB_ID`` is taken as that job's, its step from ``SLURM_STEP_ID`` -- but only
    where the cgroup says nothing of the owner (:func:`_cgroup_leaves_owner_open`). Why:
    any user can set the variable, and a cgroup that proves another owner (a login
    session, a user or system service, a container) must not be overridden by it: their
    GPU use would be billed to the job, and ``b`` + ``K`` on the job would signal them.
    """
    if not env:
        return owner
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id.isascii() or not job_id.isdigit() or len(job_id) > 20:
        return owner
    name = _cut(env.get("SLURM_JOB_NAME"))
    if owner.kind is OwnerKind.SLURM:
        return replace(owner, name=name) if owner.job == job_id else owner
    if _cgroup_leaves_owner_open(owner):
        given = env.get("SLURM_STEP_ID", "").strip()
        step = given if given and len(given) <= 64 and "/" not in given else None
        return ProcessOwner(kind=OwnerKind.SLURM, id=job_id, name=name, job=job_id, step=step, cgroup=owner.cgroup)
    return owner


def _cgroup_leaves_owner_open(owner: ProcessOwner) -> bool:
    """Whether a cgroup says nothing of who owns the process, so its environment may name a Slurm job.

    The root cgroup and a path of no layout nvtopy knows name no owner (only root places a
    process there). ``slurmd``'s own system service is where ``proctrack/linuxproc`` leaves a
    job's tasks: it names Slurm itself, not another owner. Everything else proves an owner:
    a session, any other service (a user's own ``slurmd.service`` under ``user@<uid>.service``
    included: a user can create that), a container or a pod.
    """
    if owner.kind in (OwnerKind.HOST, OwnerKind.CGROUP):
        return True
    if owner.kind is OwnerKind.SYSTEMD_SERVICE and owner.uid is None and owner.name:
        return owner.name == "slurmd" or owner.name.startswith(("slurmd@", "slurmd-"))
    return False


def _ns_pid(status: str | None) -> int | None:
    """The pid inside the process's innermost PID namespace, from ``NSpid:`` -- ``None`` when there is one level."""
    if not status:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            numbers = line[len("NSpid:") :].split()
            if len(numbers) < 2:
                return None
            return _int(numbers[-1]) if numbers[-1].isascii() and numbers[-1].isdigit() else None
    return None
