"""The facts ``nvtopy doctor`` judges: read from the driver, the Python environment and ``/proc``.

Why a module of its own, in the backend layer: these are reads of the outside
world (NVML through nvidia-ml-py, ``importlib.metadata``, ``/proc``), and the
command that judges them (:mod:`nvtopy.commands.doctor.checks`) must stay free of
pynvml and psutil. Everything here returns plain data; nothing here decides
what is wrong.

Two kinds of facts, gathered differently:

- :func:`host_facts`: the environment (CUDA_VISIBLE_DEVICES, installed
  distributions, the PID namespace, how ``/proc`` is mounted). File and
  environment reads only: it cannot hang, so it runs on the caller's thread.
- :func:`gather_backend_facts`: everything that asks the driver. A driver in
  a bad state can block in ``nvmlInit`` or in any later call for minutes, so
  :func:`run_with_timeout` runs it on a daemon thread and the caller reports
  whatever was gathered before the deadline, with the stage that was stuck
  (:attr:`BackendFacts.stage`). That is why :class:`BackendFacts` is filled in
  place, step by step, instead of being returned at the end.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..boundedfile import FileRefusedError, open_regular, read_bounded
from ..errors import BackendUnavailableError
from ..model import SAMPLE_GROUPS, GpuSample, GpuStatic, HostInfo, Reason, sample_from_fields
from .base import Backend
from .host.processes import in_foreign_pid_namespace

__all__ = [
    "ACCOUNTING_STATES",
    "DOCTOR_GROUPS",
    "BackendFacts",
    "DriverInit",
    "GpuFacts",
    "HostFacts",
    "PythonBindings",
    "container_runtime",
    "gather_backend_facts",
    "host_facts",
    "kernel_module_version",
    "loaded_library_version",
    "parse_proc_mount_options",
    "probe_nvml_init",
    "python_bindings",
    "run_with_timeout",
]

# The sample groups doctor reads: persistence mode, memory health (ECC errors included: the monitor's memory
# rules judge them too), the PCIe link and whether the GPU is busy.
DOCTOR_GROUPS: tuple[str, ...] = ("modes", "utilization", "ecc", "remapped_rows", "retired_pages", "pcie_link")

# What nvmlDeviceGetAccountingMode said, in words the judge knows.
ACCOUNTING_STATES = ("enabled", "disabled", "not_supported", "no_permission", "lost", "unknown")

_PROC_VERSION = "/proc/driver/nvidia/version"
MAX_HASHED_BYTES = 64 << 20  # a file of the Python bindings checked against its RECORD (pynvml.py: 200 KiB)


# --------------------------------------------------------------------- the driver


@dataclass(frozen=True, slots=True)
class DriverInit:
    """How ``nvmlInit`` went when doctor called it itself, before anything else.

    ``error`` is ``None`` when it succeeded, else one of ``"import"`` (no usable
    pynvml module), ``"library-not-found"``, ``"driver-not-loaded"``,
    ``"version-mismatch"`` (LibRmVersionMismatch), ``"no-permission"``, ``"other"``.
    """

    error: str | None = None
    message: str | None = None  # the error as the bindings worded it (outside text)


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One GPU as doctor saw it: its static fields, one reading of :data:`DOCTOR_GROUPS`, accounting.

    ``unread``: groups this backend cannot read at all (it has no reader for them):
    their fields are ``None`` with no reason, and the judge says "not reported".
    ``accounting``: one of :data:`ACCOUNTING_STATES`, or ``None`` when not asked.
    """

    static: GpuStatic
    sample: GpuSample
    accounting: str | None = None
    unread: tuple[str, ...] = ()


@dataclass
class BackendFacts:
    """What the driver said, filled in place by :func:`gather_backend_facts` (see the module docstring).

    Read it from another thread only once the gathering finished or its deadline
    passed; lists are only appended to, so a reader at the deadline sees whole entries.
    """

    kind: str  # "nvml" or "simulated"
    waiting_for: str = "the NVIDIA driver"  # what a stuck call waits for, in words
    stage: str = "starting"  # what the gathering is doing now: where it was stuck, if it was
    init: DriverInit | None = None  # NVML only: doctor's own nvmlInit
    open_error: str | None = None  # the backend could not be opened (BackendUnavailableError), one line
    kernel_version: str | None = None  # NVML only: /proc/driver/nvidia/version
    library_version: str | None = None  # NVML only: from the loaded libnvidia-ml.so.<version>
    host: HostInfo | None = None
    device_count: int | None = None
    gpus: list[GpuFacts] = field(default_factory=list)
    event_notes: dict[int | None, str] | None = None  # Backend.open_events().notes; None: not asked yet
    done: bool = False


def kernel_module_version(path: str = _PROC_VERSION) -> str | None:
    """The loaded kernel module's version from ``/proc/driver/nvidia/version``; ``None`` where absent.

    The line reads ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ...``
    (``... Open Kernel Module for x86_64  550.54.15 ...`` for the open modules).
    """
    text = _read(path, 4096)
    if text is None:
        return None
    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)*)(?:\s|$)", text)
    return match.group(1) if match else None


def loaded_library_version(maps_path: str = "/proc/self/maps") -> str | None:
    """The version in the file name of the ``libnvidia-ml.so`` this process loaded (``550.54.15``).

    The driver installs ``libnvidia-ml.so.<version>`` behind the ``.so.1`` link, and
    ``/proc/self/maps`` names the file itself: this is the library's version even
    when ``nvmlInit`` refused to start (LibRmVersionMismatch). ``None`` when no such
    file is mapped, or its name carries no version.
    """
    try:
        with open_regular(maps_path) as maps:
            for raw in maps:
                match = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)*)\s*$", raw.decode("utf-8", "replace"))
                if match:
                    return match.group(1)
    except (FileRefusedError, OSError):
        pass
    return None


def probe_nvml_init(nvml: Any) -> DriverInit:
    """Call ``nvmlInit`` once and say how it went (the caller shuts down after a success).

    Why doctor does this itself rather than reading the backend's error: each
    failure has its own fix, and the bindings' exception classes tell them apart
    exactly where a sentence would have to be parsed.
    """
    checks = (
        ("NVMLError_LibraryNotFound", "library-not-found"),
        ("NVMLError_DriverNotLoaded", "driver-not-loaded"),
        ("NVMLError_LibRmVersionMismatch", "version-mismatch"),
        ("NVMLError_NoPermission", "no-permission"),
    )
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        for name, kind in checks:
            cls = getattr(nvml, name, None)
            if cls is not None and isinstance(exc, cls):
                return DriverInit(kind, str(exc))
        return DriverInit("other", str(exc))
    except OSError as exc:  # a broken library file
        return DriverInit("library-not-found", str(exc))
    return DriverInit()


def _accounting_mode(nvml: Any, index: int) -> str:
    """``nvmlDeviceGetAccountingMode`` of GPU ``index``, in :data:`ACCOUNTING_STATES` words."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mode = nvml.nvmlDeviceGetAccountingMode(handle)
    except nvml.NVMLError as exc:
        if isinstance(exc, nvml.NVMLError_NoPermission):
            return "no_permission"
        if isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)):
            return "not_supported"
        if isinstance(exc, nvml.NVMLError_GpuIsLost):
            return "lost"
        return "unknown"
    except AttributeError:  # bindings too old to have the function
        return "not_supported"
    return "enabled" if int(mode) == int(getattr(nvml, "NVML_FEATURE_ENABLED", 1)) else "disabled"


def _backend_accounting(backend: Backend, index: int) -> str | None:
    """What a non-NVML backend says of accounting: its ``accounting_mode(index)``, where it has one.

    The simulation may model accounting (a state of :data:`ACCOUNTING_STATES`);
    a backend without the method is not asked (``None``: the judge skips the check).
    """
    method = getattr(backend, "accounting_mode", None)
    if method is None:
        return None
    state = method(index)
    return state if state in ACCOUNTING_STATES else ("unknown" if state is not None else None)


def _read_gpu(backend: Backend, index: int) -> GpuFacts:
    """One GPU's static fields and one reading of :data:`DOCTOR_GROUPS`, group by group.

    One group at a time, so a backend that lacks a reader for one (an older
    backend, a newer group) loses that group only.
    """
    static = backend.read_static(index)
    values: dict[str, Any] = {}
    reasons: dict[str, Reason] = {}
    lost = False
    unread: list[str] = []
    for group in DOCTOR_GROUPS:
        try:
            reading = backend.read_sample(index, (group,))
        except (KeyError, NotImplementedError):
            unread.append(group)
            continue
        lost = lost or reading.lost
        values.update({k: v for k, v in reading.values.items() if k in SAMPLE_GROUPS[group]})
        reasons.update({k: v for k, v in reading.unavailable.items() if k in SAMPLE_GROUPS[group]})
    sample = sample_from_fields(backend.now(), lost, values, reasons)
    return GpuFacts(static=static, sample=sample, unread=tuple(unread))


def gather_backend_facts(
    facts: BackendFacts,
    opener: Callable[[], Backend],
    *,
    nvml: Any | None = None,
    nvml_loader: Callable[[], Any] | None = None,
) -> BackendFacts:
    """Ask the driver everything doctor needs, writing into ``facts`` as it goes (see the module docstring).

    ``opener`` opens the backend (``options.backend_opener``'s function). For
    NVML (``facts.kind == "nvml"``) doctor first calls ``nvmlInit`` itself
    (:func:`probe_nvml_init`) with ``nvml`` (default: the installed bindings, via
    ``nvml_loader``), and asks each GPU's accounting mode directly: the backend
    has no call for it. The backend is opened without an exit hook and closed
    here, so a gathering abandoned at its deadline leaves nothing that would
    block the process's exit.
    """
    is_nvml = facts.kind == "nvml"
    if is_nvml:
        facts.stage = "loading the NVIDIA library"
        if nvml is None:
            try:
                if nvml_loader is None:
                    from .nvml.backend import import_pynvml

                    nvml_loader = import_pynvml
                nvml = nvml_loader()
            except BackendUnavailableError as exc:
                facts.init = DriverInit("import", str(exc))
                facts.done = True
                return facts
        facts.kernel_version = kernel_module_version()
        facts.stage = "initialising NVML (nvmlInit)"
        facts.init = probe_nvml_init(nvml)
        facts.library_version = loaded_library_version()
        if facts.init.error is not None:
            facts.done = True
            return facts
    try:
        facts.stage = "opening the backend"
        try:
            backend = opener()
        except BackendUnavailableError as exc:
            facts.open_error = str(exc)
            facts.done = True
            return facts
        try:
            facts.stage = "reading the driver version"
            facts.host = backend.host_info()
            facts.stage = "counting GPUs"
            facts.device_count = backend.device_count()
            for index in range(facts.device_count):
                facts.stage = f"reading GPU {index}"
                gpu = _read_gpu(backend, index)
                facts.stage = f"reading GPU {index}'s accounting mode"
                accounting = _accounting_mode(nvml, index) if is_nvml else _backend_accounting(backend, index)
                facts.gpus.append(
                    GpuFacts(static=gpu.static, sample=gpu.sample, accounting=accounting, unread=gpu.unread)
                )
            facts.stage = "registering for Xid events"
            stream = backend.open_events()
            facts.event_notes = dict(stream.notes)
            stream.close()
            facts.stage = "closing the backend"
        finally:
            backend.close()
    finally:
        if is_nvml and nvml is not None:
            with contextlib.suppress(Exception):  # best effort: doctor's own nvmlInit, balanced
                nvml.nvmlShutdown()
    facts.stage = "done"
    facts.done = True
    return facts


def run_with_timeout(work: Callable[[], object], timeout_s: float, name: str = "nvtopy-doctor") -> bool:
    """Run ``work()`` on a daemon thread; True when it finished within ``timeout_s``.

    Why a daemon thread: a call stuck in the driver cannot be interrupted, only
    abandoned; a daemon thread does not hold up the process's exit. An exception
    ``work`` raised (a bug) is raised here, on the caller's thread.
    """
    errors: list[BaseException] = []
    finished = threading.Event()

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller's thread, raised there
            errors.append(exc)
        finally:
            finished.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    done = finished.wait(timeout_s)
    if errors:
        raise errors[0]
    return done


# --------------------------------------------------------------------- the host


@dataclass(frozen=True, slots=True)
class PythonBindings:
    """Which distributions provide the ``pynvml`` module, and whose file Python imports.

    ``versions``: distribution name -> version, for ``nvidia-ml-py`` (NVIDIA's
    bindings) and ``pynvml`` (the unofficial package of that name) where installed.
    ``ships_module``: the distributions whose files include the module
    (``pynvml.py`` or the ``pynvml/`` package). ``provider``: the distribution that
    owns the file ``import pynvml`` would load, ``None`` when unknown or absent;
    ``module_path``: that file.
    """

    versions: Mapping[str, str] = field(default_factory=dict)
    ships_module: tuple[str, ...] = ()
    provider: str | None = None
    module_path: str | None = None


_DISTRIBUTIONS = ("nvidia-ml-py", "pynvml")


def _record_hash(entry: Any) -> str | None:
    digest = getattr(entry, "hash", None)
    return digest.value if digest is not None and getattr(digest, "mode", None) == "sha256" else None


def _file_hash(path: str) -> str | None:
    """The file's sha256 as a wheel RECORD writes it (urlsafe base64, no padding)."""
    try:
        data = read_bounded(path, MAX_HASHED_BYTES)
    except FileRefusedError:  # gone, a FIFO, or larger than any file of the bindings
        return None
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def python_bindings(
    distribution: Callable[[str], Any] = importlib.metadata.distribution,
    find_spec: Callable[[str], Any] = importlib.util.find_spec,
) -> PythonBindings:
    """Read which of ``nvidia-ml-py`` and ``pynvml`` are installed, and which one ``import pynvml`` gets.

    Without importing anything: the module's file comes from ``find_spec``, its
    owner from each distribution's RECORD (the file listed; when both list it,
    the one whose recorded hash matches the file on disk wrote it last).
    Old ``pynvml`` releases install a ``pynvml/`` package, which Python prefers
    over NVIDIA's ``pynvml.py`` in the same folder: that is the shadowing.
    """
    versions: dict[str, str] = {}
    owners: dict[str, Any] = {}  # distribution -> its RECORD entry of the module file
    ships: list[str] = []
    try:
        spec = find_spec("pynvml")
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None) if spec is not None else None
    origin_path = os.path.realpath(origin) if origin else None
    for name in _DISTRIBUTIONS:
        try:
            dist = distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        versions[name] = dist.version
        for entry in dist.files or ():
            text = str(entry).replace("\\", "/")
            if text == "pynvml.py" or text.startswith("pynvml/"):
                if name not in ships:
                    ships.append(name)
                if origin_path is not None:
                    with contextlib.suppress(OSError, ValueError):
                        if os.path.realpath(str(dist.locate_file(entry))) == origin_path:
                            owners[name] = entry
    provider: str | None = None
    if len(owners) == 1:
        provider = next(iter(owners))
    elif len(owners) > 1 and origin_path is not None:
        on_disk = _file_hash(origin_path)
        matching = [name for name, entry in owners.items() if on_disk is not None and _record_hash(entry) == on_disk]
        provider = matching[0] if len(matching) == 1 else None
    return PythonBindings(versions=versions, ships_module=tuple(ships), provider=provider, module_path=origin)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """The environment doctor judges, read without the driver (see :func:`host_facts`)."""

    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    bindings: PythonBindings = field(default_factory=PythonBindings)
    foreign_pid_namespace: bool = False  # not the initial PID namespace: NVML pids are not ours
    container: str | None = None  # "docker", "podman", "kubernetes", "containerd", "lxc", "container"; None: none seen
    proc_options: Mapping[str, str] | None = None  # /proc's mount options; None: unreadable
    euid: int | None = None
    groups: tuple[int, ...] = ()


def parse_proc_mount_options(mountinfo: str | None, mounts: str | None = None) -> dict[str, str] | None:
    """The options of the ``proc`` file system mounted on ``/proc`` (``{"hidepid": "2", "gid": "10", ...}``).

    From ``/proc/self/mountinfo`` (per-superblock options follow the `` - proc proc``
    separator); else from ``/proc/mounts``. The last mount on ``/proc`` wins (it is
    the one on top). ``None`` when neither names one.
    """
    found: dict[str, str] | None = None
    for line in (mountinfo or "").splitlines():
        left, sep, right = line.partition(" - ")
        parts, tail = left.split(), right.split()
        if not sep or len(parts) < 5 or len(tail) < 3 or parts[4] != "/proc" or tail[0] != "proc":
            continue
        found = _options(f"{parts[5] if len(parts) > 5 else ''},{tail[2]}")
    if found is None:
        for line in (mounts or "").splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "/proc" and parts[2] == "proc":
                found = _options(parts[3])
    return found


def _options(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key:
            options[key] = value
    return options


def _read(path: str, limit: int = 1 << 20) -> str | None:
    """The first ``limit`` bytes of a (``/proc``) file as text; None where it cannot be read."""
    try:
        return read_bounded(path, limit, cut=True).decode("utf-8", "replace")
    except FileRefusedError:
        return None


def container_runtime(environ: Mapping[str, str] | None = None) -> str | None:
    """The container this process seems to run in, by the marks runtimes leave; ``None`` when none is seen.

    Used for wording only: whether NVML's pids can be resolved is decided by the
    PID namespace (:func:`~nvtopy.backends.host.processes.in_foreign_pid_namespace`), not by this.
    """
    environ = os.environ if environ is None else environ
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    cgroup = _read("/proc/1/cgroup", 65536) or ""
    for mark, name in (
        ("kubepods", "kubernetes"),
        ("docker", "docker"),
        ("libpod", "podman"),
        ("containerd", "containerd"),
        ("lxc", "lxc"),
    ):
        if mark in cgroup:
            return name
    runtime = environ.get("container")
    return (runtime.strip() or "container") if runtime is not None else None


def host_facts(environ: Mapping[str, str] | None = None) -> HostFacts:
    """Read the environment: CUDA variables, Python bindings, PID namespace, container marks, /proc's options."""
    environ = os.environ if environ is None else environ
    getgroups: Callable[[], Sequence[int]] = getattr(os, "getgroups", lambda: ())
    geteuid: Callable[[], int] | None = getattr(os, "geteuid", None)
    return HostFacts(
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        cuda_device_order=environ.get("CUDA_DEVICE_ORDER"),
        bindings=python_bindings(),
        foreign_pid_namespace=in_foreign_pid_namespace(),
        container=container_runtime(environ),
        proc_options=parse_proc_mount_options(_read("/proc/self/mountinfo"), _read("/proc/mounts")),
        euid=geteuid() if geteuid is not None else None,
        groups=tuple(getgroups()),
    )
