"""``nvtopy doctor``: check what goes wrong in practice on a GPU machine, and say how to fix it.

Each check is a pure function over facts (:mod:`nvtopy.backends.diagnose`
gathers them; nothing here imports pynvml or psutil) that returns findings:
an ``id``, a status (``ok``, ``warn``, ``fail``, ``skip``), a title, a detail
and a fix. The checks, in the order printed:

1. ``driver``: the NVIDIA driver answers; kernel module, NVML library and the
   version NVML reports agree (LibRmVersionMismatch: upgraded without reboot);
   no driver, driver not loaded, no permission; a driver that does not answer
   within ``--timeout`` seconds. ``gpus``: the driver sees GPUs, none is lost.
2. ``persistence-mode``: off means a slow first call after every idle spell.
3. ``cuda-visible-devices``: given by index without
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` on a machine whose GPUs differ (CUDA's
   default order then differs from nvidia-smi's); empty, or cut short.
4. ``python-bindings``: the PyPI ``pynvml`` beside ``nvidia-ml-py`` (the old one
   shadows NVIDIA's module).
5. ``pid-namespace``: in a container without the host's PID namespace GPU
   processes cannot be named.
6. ``proc-hidepid``: ``/proc`` mounted with ``hidepid`` hides other users' processes.
7. ``mig``: MIG enabled with no instance (CUDA sees no device there).
8. ``memory-health``: remapping failed (FAIL), a reset is pending (WARN).
9. ``pcie-link``: a link narrower than its maximum (always), or slower while
   busy; a slower generation at idle is power saving, and said to be.
10. ``xid-events`` and ``accounting``: whether Xid errors can be watched, and
    the accounting mode (not permitted, off, unsupported).

Exit status: 1 when any finding is FAIL, else 0 (WARN alone exits 0), so
``nvtopy doctor || alert`` pages only for what is broken; 2 for a usage error.

Why the driver work runs on a daemon thread with a deadline: when a GPU is in
trouble, ``nvmlInit`` or any call may block for minutes (nvidia-smi hangs too).
Doctor must still answer, and "the driver did not answer within N s" is the
most useful finding it can give then.
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..._version import __version__
from ...backends.diagnose import (
    BackendFacts,
    GpuFacts,
    HostFacts,
    PythonBindings,
    gather_backend_facts,
    host_facts,
    run_with_timeout,
)
from ...backends.open import backend_opener as spec_opener
from ...health.verdict import BUSY_UTILIZATION, RETIRED_PAGES_LIMIT
from ...model import GpuStatic, Reason
from ...textsafe import escape_text, safe_text
from .. import options
from ..options import DEFAULT_TIMEOUT

__all__ = [
    "DEFAULT_TIMEOUT",
    "DoctorFinding",
    "Status",
    "build_parser",
    "check_accounting",
    "check_cuda_visible_devices",
    "check_driver",
    "check_gpus",
    "check_memory_health",
    "check_mig",
    "check_pcie_link",
    "check_persistence",
    "check_pid_namespace",
    "check_proc_hidepid",
    "check_python_bindings",
    "check_xid_events",
    "diagnose",
    "exit_code",
    "main",
    "render_json",
    "render_text",
    "run",
]

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    """A finding's status, worst last but ``skip`` (a check that could not be made). Values appear in JSON."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class DoctorFinding:
    """One thing doctor found: what (``title``), why it matters (``detail``), what to do (``fix``).

    Text is kept as written, outside text (GPU names, driver messages,
    environment values) included: each output escapes it where it writes.
    ``gpus``: the GPUs it is about (empty: the whole machine).
    """

    id: str
    status: Status
    title: str
    detail: str | None = None
    fix: str | None = None
    gpus: tuple[int, ...] = ()


# --------------------------------------------------------------------- wording helpers


def _gpu_list(indices: Sequence[int]) -> str:
    return f"GPU {indices[0]}" if len(indices) == 1 else "GPUs " + ", ".join(str(i) for i in indices)


def _gpu_label(static: GpuStatic) -> str:
    return f"GPU {static.index} ({static.name})" if static.name else f"GPU {static.index}"


# --------------------------------------------------------------------- 1. the driver


_INIT_FAILURES: Mapping[str, tuple[str, str]] = {
    "import": (
        "NVIDIA's Python bindings cannot be used",
        "pip install nvidia-ml-py (and pip uninstall pynvml if it is installed)",
    ),
    "library-not-found": (
        "No NVIDIA driver: the library libnvidia-ml.so.1 is not found",
        "install the NVIDIA driver (e.g. apt install nvidia-driver-550, or NVIDIA's installer); in a container, "
        "start it with the NVIDIA Container Toolkit (docker run --gpus all); nvtopy --demo shows simulated GPUs",
    ),
    "driver-not-loaded": (
        "The NVIDIA kernel module is not loaded",
        "sudo modprobe nvidia; if that fails, read 'sudo dmesg | grep -i nvidia' (Secure Boot refuses unsigned "
        "modules; a kernel update needs the module rebuilt: dkms status)",
    ),
    "version-mismatch": (
        "Driver/library version mismatch: the NVIDIA driver was updated without reloading the kernel module",
        "reboot, or stop every GPU program and reload the modules: "
        "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia",
    ),
    "no-permission": (
        "No permission to open the NVIDIA driver (/dev/nvidia*)",
        "run as a user allowed to open /dev/nvidia* (often the 'video' group), or pass the devices into the container",
    ),
    "other": ("NVML cannot start", "run nvidia-smi to see whether the driver works; read 'sudo dmesg | grep -i nvrm'"),
}

_STUCK_FIX = (
    "look for Xid errors (sudo dmesg | grep -i xid); nvidia-smi probably hangs too; stop the GPU's programs and "
    "reset it (sudo nvidia-smi -r -i N), or reboot the node"
)


def _library_version(facts: BackendFacts) -> str | None:
    """The NVML library's own version: its file name's, else NVML's version without the CUDA major (12.550.54.15)."""
    if facts.library_version:
        return facts.library_version
    nvml_version = facts.host.nvml_version if facts.host is not None else None
    if nvml_version and nvml_version.count(".") >= 2:
        return nvml_version.split(".", 1)[1]
    return None


def check_driver(facts: BackendFacts, *, finished: bool = True, timeout_s: float = DEFAULT_TIMEOUT) -> DoctorFinding:
    """Check 1: the driver answers, and its kernel module, library and reported version agree."""
    if not finished:
        return DoctorFinding(
            "driver",
            Status.FAIL,
            f"{facts.waiting_for[:1].upper()}{facts.waiting_for[1:]} did not answer within {timeout_s:g} s",
            f"Stuck while {facts.stage}: the call has not returned. A driver in this state blocks every program "
            "that asks it, monitors included.",
            _STUCK_FIX,
        )
    if facts.init is not None and facts.init.error is not None:
        title, fix = _INIT_FAILURES.get(facts.init.error, _INIT_FAILURES["other"])
        detail = facts.init.message
        if detail and facts.init.error != "import":
            detail = f"NVML: {detail}"
        if facts.init.error == "version-mismatch":
            versions = [f"kernel module {facts.kernel_version}"] if facts.kernel_version else []
            versions += [f"library {facts.library_version}"] if facts.library_version else []
            if versions:
                detail = f"{detail}: {', '.join(versions)}" if detail else ", ".join(versions)
        return DoctorFinding("driver", Status.FAIL, title, detail, fix)
    if facts.open_error is not None:
        return DoctorFinding(
            "driver",
            Status.FAIL,
            "The GPUs cannot be read",
            facts.open_error,
            _INIT_FAILURES["other"][1],
        )
    host = facts.host
    driver = host.driver_version if host is not None else None
    if facts.kind != "nvml":
        return DoctorFinding("driver", Status.OK, f"Simulated driver {driver or 'of unknown version'} answers")
    library = _library_version(facts)
    versions = {
        name: version
        for name, version in (("kernel module", facts.kernel_version), ("library", library), ("driver", driver))
        if version
    }
    if len(set(versions.values())) > 1:
        said = ", ".join(f"{name} {version}" for name, version in versions.items())
        return DoctorFinding(
            "driver",
            Status.FAIL,
            "Driver/library version mismatch",
            f"The versions differ: {said}. The driver was updated (or a container brings its own library) and the "
            "running kernel module is another version.",
            _INIT_FAILURES["version-mismatch"][1] + "; in a container, do not install a driver library in the image",
        )
    detail = (
        "The kernel module and the library agree."
        if "kernel module" in versions
        else "The kernel module's version is unknown here (no /proc/driver/nvidia/version)."
    )
    return DoctorFinding("driver", Status.OK, f"NVIDIA driver {driver or 'of unknown version'} answers", detail)


def check_gpus(facts: BackendFacts, gpus: Sequence[GpuFacts] | None = None) -> list[DoctorFinding]:
    """The driver sees GPUs, and each can be opened and answers (lost: FAIL; no permission: WARN)."""
    if facts.device_count is None:
        return [DoctorFinding("gpus", Status.SKIP, "GPUs not counted: the driver did not get that far")]
    if facts.device_count == 0:
        simulated = facts.kind != "nvml"
        return [
            DoctorFinding(
                "gpus",
                Status.WARN,
                "The simulation has no GPU" if simulated else "The driver sees no GPU",
                None if simulated else "NVML works but counts no device.",
                None
                if simulated
                else "check 'lspci | grep -i nvidia' and 'sudo dmesg | grep -i nvrm'; in a container, start it "
                "with --gpus all (NVIDIA Container Toolkit)",
            )
        ]
    gpus = facts.gpus if gpus is None else gpus
    findings: list[DoctorFinding] = []
    lost = [g.static.index for g in gpus if g.sample.lost or Reason.LOST in g.static.unavailable.values()]
    denied = [
        g.static.index
        for g in gpus
        if g.static.index not in lost and g.static.unavailable.get("uuid") is Reason.NO_PERMISSION
    ]
    if lost:
        findings.append(
            DoctorFinding(
                "gpus",
                Status.FAIL,
                f"{_gpu_list(lost)} lost: the GPU stopped answering",
                "A lost GPU has usually fallen off the bus (Xid 79).",
                "read 'sudo dmesg | grep -i xid'; reboot the node; if it recurs, reseat or replace the board",
                tuple(lost),
            )
        )
    if denied:
        findings.append(
            DoctorFinding(
                "gpus",
                Status.WARN,
                f"{_gpu_list(denied)} cannot be opened (no permission)",
                "The GPU is not this process's: a container, a Slurm job or a cgroup hands out only some GPUs.",
                "run where the GPU is allocated to you, or as a user allowed to open its /dev/nvidia* device",
                tuple(denied),
            )
        )
    if not findings:
        count = facts.device_count
        findings.append(DoctorFinding("gpus", Status.OK, f"{count} GPU{'s' if count != 1 else ''} answer"))
    return findings


# --------------------------------------------------------------------- 2. persistence mode


def check_persistence(gpus: Sequence[GpuFacts]) -> DoctorFinding:
    """Check 2: persistence mode off on a GPU means its state is torn down whenever no program holds it."""
    off = [g.static.index for g in gpus if g.sample.persistence_mode is False]
    on = [g.static.index for g in gpus if g.sample.persistence_mode is True]
    if off:
        return DoctorFinding(
            "persistence-mode",
            Status.WARN,
            f"Persistence mode is off on {_gpu_list(off)}",
            "The driver tears the GPU's state down when the last program exits and rebuilds it at the next "
            "start: the first NVML or CUDA call then takes seconds (slow nvidia-smi, slow job starts).",
            "sudo nvidia-smi -pm 1 (until reboot), or enable the daemon: "
            "sudo systemctl enable --now nvidia-persistenced",
            tuple(off),
        )
    if not on:
        return DoctorFinding("persistence-mode", Status.SKIP, "Persistence mode not reported (Linux only)")
    return DoctorFinding("persistence-mode", Status.OK, f"Persistence mode is on ({_gpu_list(on)})", gpus=tuple(on))


# --------------------------------------------------------------------- 3. CUDA_VISIBLE_DEVICES


def _gpus_differ(statics: Sequence[GpuStatic]) -> bool:
    names = {s.name for s in statics if s.name is not None}
    memories = {s.memory_total_bytes for s in statics if s.memory_total_bytes is not None}
    return len(names) > 1 or len(memories) > 1


def check_cuda_visible_devices(
    value: str | None, order: str | None, statics: Sequence[GpuStatic] | None
) -> DoctorFinding:
    """Check 3: CUDA_VISIBLE_DEVICES by index means CUDA's order, which differs from nvidia-smi's on mixed GPUs.

    CUDA numbers devices fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``;
    nvidia-smi, NVML and nvtopy number them by PCI bus. On identical GPUs the two
    agree; on mixed ones ``CUDA_VISIBLE_DEVICES=0`` may be nvidia-smi's GPU 1.
    ``statics``: the GPUs (``None``: unknown, the driver did not answer).
    """
    key = "cuda-visible-devices"
    pci_order = (order or "").strip().upper() == "PCI_BUS_ID"
    differ = statics is not None and _gpus_differ(statics)
    order_fix = "export CUDA_DEVICE_ORDER=PCI_BUS_ID, or select GPUs by UUID (nvidia-smi -L lists them)"
    if value is None:
        if differ and not pci_order:
            return DoctorFinding(
                key,
                Status.OK,
                "CUDA_VISIBLE_DEVICES is not set: CUDA programs see every GPU",
                "The GPUs differ: CUDA numbers them fastest first, nvidia-smi and nvtopy by PCI bus, so "
                "cuda:0 may not be nvidia-smi's GPU 0.",
                order_fix,
            )
        return DoctorFinding(key, Status.OK, "CUDA_VISIBLE_DEVICES is not set: CUDA programs see every GPU")
    shown = value if len(value) <= 80 else value[:79] + "…"
    if not value.strip():
        return DoctorFinding(
            key,
            Status.WARN,
            "CUDA_VISIBLE_DEVICES is set but empty: CUDA programs see no GPU",
            None,
            "unset CUDA_VISIBLE_DEVICES, or name the GPUs it should expose",
        )
    tokens = [t.strip() for t in value.split(",")]
    by_uuid = tokens[0].upper().startswith(("GPU-", "MIG-"))
    if statics:
        from ...selection import parse_cuda_visible_devices

        visible = parse_cuda_visible_devices(value, statics, {"CUDA_DEVICE_ORDER": order or ""})
        if not visible.devices:
            return DoctorFinding(
                key,
                Status.WARN,
                f"CUDA_VISIBLE_DEVICES={shown} exposes no GPU",
                "Its first entry names no GPU here, or an entry repeats a device: CUDA then exposes none.",
                "name each GPU once, by index or UUID (nvidia-smi -L)",
            )
        if len(visible.devices) < len(tokens):
            return DoctorFinding(
                key,
                Status.WARN,
                f"CUDA_VISIBLE_DEVICES={shown} names {len(tokens)} devices; CUDA sees only {len(visible.devices)}",
                "CUDA stops at the first entry that names no GPU (out of range, unknown UUID, another kind): "
                "the entries after it are ignored.",
                "remove the invalid entry",
            )
    if by_uuid:
        return DoctorFinding(key, Status.OK, f"CUDA_VISIBLE_DEVICES={shown} selects GPUs by UUID, whatever the order")
    if pci_order:
        return DoctorFinding(
            key,
            Status.OK,
            f"CUDA_VISIBLE_DEVICES={shown} with CUDA_DEVICE_ORDER=PCI_BUS_ID: the same numbers as nvidia-smi",
        )
    if statics is None:
        return DoctorFinding(
            key,
            Status.SKIP,
            f"CUDA_VISIBLE_DEVICES={shown} selects by index; whether the GPUs differ is unknown",
            "The driver did not say which GPUs there are.",
            order_fix,
        )
    if differ:
        kinds = sorted({s.name for s in statics if s.name is not None})
        return DoctorFinding(
            key,
            Status.WARN,
            f"CUDA_VISIBLE_DEVICES={shown} selects by index, and CUDA numbers these GPUs in another order",
            f"The GPUs differ ({'; '.join(kinds) or 'in memory size'}): without CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA "
            "numbers them fastest first, so index 0 may not be nvidia-smi's (or nvtopy's) GPU 0.",
            order_fix,
        )
    return DoctorFinding(
        key,
        Status.OK,
        f"CUDA_VISIBLE_DEVICES={shown} selects by index; the GPUs are alike, so CUDA's order is nvidia-smi's",
    )


# --------------------------------------------------------------------- 4. Python bindings


_BINDINGS_FIX = "pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py"


def check_python_bindings(bindings: PythonBindings) -> DoctorFinding:
    """Check 4: the PyPI ``pynvml`` beside NVIDIA's ``nvidia-ml-py``: the old one shadows the official module.

    Old ``pynvml`` releases install a ``pynvml/`` package (Python prefers it to
    ``pynvml.py``) or overwrite ``pynvml.py``; newer ones are a deprecated shim.
    Uninstalling ``pynvml`` may delete the shared file: hence the reinstall in the fix.
    """
    key = "python-bindings"
    official = bindings.versions.get("nvidia-ml-py")
    other = bindings.versions.get("pynvml")
    if official and other:
        if bindings.provider == "pynvml":
            return DoctorFinding(
                key,
                Status.FAIL,
                f"The PyPI package pynvml {other} shadows NVIDIA's bindings (nvidia-ml-py {official})",
                f"'import pynvml' loads the old copy ({bindings.module_path}), which lacks or mis-declares newer "
                "NVML calls (process lists, memory v2, events).",
                _BINDINGS_FIX,
            )
        shares = "pynvml" in bindings.ships_module
        return DoctorFinding(
            key,
            Status.WARN,
            f"Both pynvml {other} and nvidia-ml-py {official} are installed",
            "NVIDIA's module is the one imported now, but pynvml installs the same module name: reinstalling it "
            "overwrites NVIDIA's, uninstalling it may delete it."
            if shares
            else "The PyPI package pynvml is deprecated (it warns on import) and not needed beside nvidia-ml-py.",
            _BINDINGS_FIX,
        )
    if other:
        if bindings.provider == "pynvml" or "pynvml" in bindings.ships_module:
            return DoctorFinding(
                key,
                Status.WARN,
                f"The pynvml module comes from the unofficial PyPI package pynvml {other}, not nvidia-ml-py",
                "It is an old copy of NVIDIA's bindings: newer NVML calls are missing or wrong.",
                _BINDINGS_FIX,
            )
        return DoctorFinding(
            key,
            Status.FAIL,
            f"pynvml {other} is installed without nvidia-ml-py: there is no pynvml module",
            None,
            "pip install nvidia-ml-py",
        )
    if not official:
        if bindings.module_path:
            return DoctorFinding(
                key,
                Status.WARN,
                "The pynvml module is installed by no known package",
                f"It is {bindings.module_path}.",
                "pip install nvidia-ml-py",
            )
        return DoctorFinding(
            key, Status.FAIL, "nvidia-ml-py is not installed: nvtopy cannot read GPUs", None, "pip install nvidia-ml-py"
        )
    return DoctorFinding(key, Status.OK, f"NVIDIA's bindings nvidia-ml-py {official} provide the pynvml module")


# --------------------------------------------------------------------- 5. PID namespace


def check_pid_namespace(foreign: bool, container: str | None) -> DoctorFinding:
    """Check 5: in a PID namespace of its own, nvtopy cannot name NVML's (host) pids."""
    key = "pid-namespace"
    if foreign:
        where = f"a {container} container" if container else "a container"
        return DoctorFinding(
            key,
            Status.WARN,
            f"nvtopy runs in {where} without the host's PID namespace: GPU processes cannot be named",
            "NVML reports the host's pids, which mean nothing here: GPU processes show no user or command and "
            "cannot be signalled (nvtopy maps a pid only where it can prove which local process it is).",
            "docker run --pid=host ... (Kubernetes: hostPID: true), or run nvtopy on the host",
        )
    if container:
        return DoctorFinding(
            key, Status.OK, f"In a {container} container sharing the host's PID namespace: GPU processes can be named"
        )
    return DoctorFinding(key, Status.OK, "In the host's PID namespace: GPU processes can be named")


# --------------------------------------------------------------------- 6. /proc hidepid


def check_proc_hidepid(
    proc_options: Mapping[str, str] | None, euid: int | None, groups: Iterable[int] = ()
) -> DoctorFinding:
    """Check 6: ``/proc`` mounted with ``hidepid`` hides other users' processes (root and ``gid=`` see all)."""
    key = "proc-hidepid"
    if proc_options is None:
        return DoctorFinding(key, Status.SKIP, "/proc's mount options cannot be read")
    hidepid = proc_options.get("hidepid")
    if hidepid in (None, "", "0", "off"):
        return DoctorFinding(key, Status.OK, "/proc shows every user's processes (no hidepid)")
    gid = proc_options.get("gid")
    if euid == 0:
        return DoctorFinding(
            key, Status.OK, f"/proc is mounted with hidepid={hidepid}; as root, nvtopy sees every process"
        )
    if gid is not None and gid.isdigit() and int(gid) in set(groups):
        return DoctorFinding(
            key, Status.OK, f"/proc is mounted with hidepid={hidepid}; group {gid} (yours) sees every process"
        )
    return DoctorFinding(
        key,
        Status.WARN,
        f"/proc is mounted with hidepid={hidepid}: other users' processes are hidden",
        "Other users' GPU processes show no user, command or CPU, and cannot be told from processes that exited.",
        "run nvtopy as root (sudo), or join the group named by /proc's gid= option "
        "(mount -o remount,hidepid=2,gid=GROUP /proc)",
    )


# --------------------------------------------------------------------- 7. MIG


def check_mig(gpus: Sequence[GpuFacts]) -> list[DoctorFinding]:
    """Check 7: MIG enabled with no GPU instance: CUDA sees no device on that GPU."""
    findings = [
        DoctorFinding(
            "mig",
            Status.FAIL,
            f"{_gpu_label(g.static)}: MIG is enabled but has no GPU instance",
            "CUDA sees no device on a MIG GPU without instances (or none is visible to this process): "
            "programs fail with 'no CUDA-capable device'.",
            f"create instances: sudo nvidia-smi mig -i {g.static.index} -cgi PROFILES -C (profiles: nvidia-smi mig "
            f"-lgip), or turn MIG off: sudo nvidia-smi -i {g.static.index} -mig 0",
            (g.static.index,),
        )
        for g in gpus
        if g.static.mig_mode is True and not g.static.mig_devices
    ]
    if findings:
        return findings
    mig = [g for g in gpus if g.static.mig_mode is True]
    if mig:
        parts = ", ".join(f"GPU {g.static.index}: {len(g.static.mig_devices)}" for g in mig)
        return [
            DoctorFinding(
                "mig", Status.OK, f"MIG instances in place ({parts})", gpus=tuple(g.static.index for g in mig)
            )
        ]
    return [DoctorFinding("mig", Status.OK, "MIG is off (or not supported) on every GPU")]


# --------------------------------------------------------------------- 8. memory health


def check_memory_health(gpus: Sequence[GpuFacts]) -> list[DoctorFinding]:
    """Check 8: row remapping failed (FAIL: replace the board); a reset pending for remapped rows or retired pages.

    The same rules as the monitor's verdict (:mod:`nvtopy.health.verdict`): a
    pending remap takes effect at the next GPU reset, running work is unaffected.
    """
    key = "memory-health"
    findings: list[DoctorFinding] = []
    known = 0
    for gpu in gpus:
        sample, index, label = gpu.sample, gpu.static.index, _gpu_label(gpu.static)
        fields = (sample.remapped_rows_failure, sample.remapped_rows_pending, sample.retired_pages_pending)
        known += any(value is not None for value in fields)
        if sample.remapped_rows_failure:
            findings.append(
                DoctorFinding(
                    key,
                    Status.FAIL,
                    f"{label}: row remapping failed",
                    "A memory bank ran out of spare rows for uncorrectable errors: "
                    "the board meets NVIDIA's RMA criteria.",
                    "drain the node; run NVIDIA's field diagnostic and replace the board (RMA)",
                    (index,),
                )
            )
        retired = (sample.retired_pages_sbe or 0) + (sample.retired_pages_dbe or 0)
        if retired >= RETIRED_PAGES_LIMIT:
            findings.append(
                DoctorFinding(
                    key,
                    Status.FAIL,
                    f"{label}: {retired} pages retired, the limit is reached",
                    None,
                    "drain the node; replace the board (RMA)",
                    (index,),
                )
            )
        if sample.remapped_rows_pending:
            findings.append(
                DoctorFinding(
                    key,
                    Status.WARN,
                    f"{label}: reset pending, rows were remapped",
                    "The remapping takes effect at the next GPU reset; running work is unaffected.",
                    f"when the GPU is idle: sudo nvidia-smi -r -i {index} (or reboot)",
                    (index,),
                )
            )
        if sample.retired_pages_pending:
            findings.append(
                DoctorFinding(
                    key,
                    Status.WARN,
                    f"{label}: reset pending, pages wait to be retired",
                    "Retirement takes effect when the driver reloads or the GPU resets.",
                    f"when the GPU is idle: sudo nvidia-smi -r -i {index}, or reload the driver",
                    (index,),
                )
            )
    if findings:
        return findings
    if not known:
        return [
            DoctorFinding(
                key,
                Status.SKIP,
                "Row remapping and page retirement not reported",
                "Row remapping exists from Ampere on, page retirement up to Turing (with ECC on).",
            )
        ]
    return [DoctorFinding(key, Status.OK, "No memory repair pending and no remapping failure")]


# --------------------------------------------------------------------- 9. PCIe link


def check_pcie_link(gpus: Sequence[GpuFacts]) -> list[DoctorFinding]:
    """Check 9: a PCIe link narrower than its maximum, or slower while the GPU is busy.

    Links train down to a lower generation at idle to save power: that is
    normal, and said to be (an OK finding), so nobody reseats a healthy board.
    A narrower link does not recover at load: always a WARN.
    """
    key = "pcie-link"
    findings: list[DoctorFinding] = []
    known = 0
    fix = (
        "reseat the board; check that the slot is x16 electrically, the riser and the BIOS PCIe settings "
        "(nvidia-smi -q -d PCIE shows the link)"
    )
    for gpu in gpus:
        static, sample, index = gpu.static, gpu.sample, gpu.static.index
        gen, width = sample.pcie_link_gen, sample.pcie_link_width
        gen_max, width_max = static.pcie_link_gen_max, static.pcie_link_width_max
        if None in (gen, gen_max) and None in (width, width_max):
            continue
        known += 1
        label = _gpu_label(static)
        util = sample.utilization_gpu_percent
        narrow = width is not None and width_max is not None and width < width_max
        slower = gen is not None and gen_max is not None and gen < gen_max
        busy = util is not None and util >= BUSY_UTILIZATION
        link = f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"
        best = f"Gen{gen_max if gen_max is not None else '?'} x{width_max if width_max is not None else '?'}"
        if narrow or (slower and busy):
            why = f"busy at {util} %" if slower and busy else "the width does not change with load"
            findings.append(
                DoctorFinding(
                    key,
                    Status.WARN,
                    f"{label}: PCIe link {link}, the GPU can do {best}",
                    f"A downgraded link ({why}) cuts host-GPU bandwidth: data loading and copies slow down.",
                    fix,
                    (index,),
                )
            )
        elif slower:
            state = f"while idle ({util} %)" if util is not None else "(load unknown)"
            findings.append(
                DoctorFinding(
                    key,
                    Status.OK,
                    f"{label}: PCIe Gen{gen} {state}, the GPU can do Gen{gen_max}",
                    "Links train down to a lower generation at idle to save power: this is normal. "
                    "It is a problem only if it stays low under load.",
                    None,
                    (index,),
                )
            )
    if findings:
        return findings
    if not known:
        return [DoctorFinding(key, Status.SKIP, "PCIe link generation and width not reported")]
    return [DoctorFinding(key, Status.OK, "PCIe links at their maximum width and generation")]


# --------------------------------------------------------------------- 10. events and accounting


def check_xid_events(notes: Mapping[int | None, str] | None, device_count: int | None = None) -> DoctorFinding:
    """Check 10a: whether Xid errors can be watched (the backend's event stream says why not, per GPU or for all)."""
    key = "xid-events"
    if notes is None:
        return DoctorFinding(key, Status.SKIP, "Xid events not checked: the driver did not get that far")
    if device_count == 0:
        return DoctorFinding(key, Status.SKIP, "Xid events not checked: no GPU")
    if not notes:
        return DoctorFinding(key, Status.OK, "Xid events can be watched on every GPU")
    every = notes.get(None)
    per_gpu = sorted((index, note) for index, note in notes.items() if index is not None)
    if every is not None:
        title, said = "Xid events cannot be watched", every
    else:
        title = f"Xid events cannot be watched on {_gpu_list([index for index, _ in per_gpu])}"
        said = "; ".join(f"GPU {index}: {note}" for index, note in per_gpu)
    return DoctorFinding(
        key,
        Status.WARN,
        title,
        f"{said}. Xid errors (the first sign of a failing GPU) are not seen as they happen; the kernel log still "
        "has them.",
        _events_fix(said),
        tuple(index for index, _ in per_gpu),
    )


def _events_fix(notes: str) -> str:
    """The fix for events that cannot be watched, by why: nothing to change where the GPU cannot report them."""
    watch = "watch the kernel log instead (sudo dmesg -w | grep -i xid)"
    lowered = notes.lower()
    if "permission" in lowered:
        return f"run nvtopy as root, or {watch}"
    if "not supported" in lowered:
        return f"nothing to change on this GPU or driver: {watch}"
    return watch


def check_accounting(gpus: Sequence[GpuFacts], foreign_pids: bool = False) -> DoctorFinding:
    """Check 10b: the accounting mode: not permitted (WARN), off (WARN in a container, where nvtopy matches
    host pids by their accounting start time; else the default, OK), not supported (SKIP)."""
    key = "accounting"
    states: dict[str, list[int]] = {}
    for gpu in gpus:
        if gpu.accounting is not None:
            states.setdefault(gpu.accounting, []).append(gpu.static.index)
    if not states:
        return DoctorFinding(key, Status.SKIP, "Accounting mode not reported by this backend")
    enable = "sudo nvidia-smi -am 1 (on the host; until reboot)"
    if "no_permission" in states:
        gpus_ = states["no_permission"]
        return DoctorFinding(
            key,
            Status.WARN,
            f"Accounting mode cannot be read on {_gpu_list(gpus_)}: no permission",
            "Per-process accounting (GPU time, peak memory, start times) is not available to this user.",
            "run nvtopy as root",
            tuple(gpus_),
        )
    if "disabled" in states:
        gpus_ = states["disabled"]
        if foreign_pids:
            return DoctorFinding(
                key,
                Status.WARN,
                f"Accounting is off on {_gpu_list(gpus_)}",
                "In a container nvtopy matches host pids to local processes by their accounting start time; "
                "without it fewer GPU processes can be named.",
                enable,
                tuple(gpus_),
            )
        return DoctorFinding(
            key,
            Status.OK,
            f"Accounting is off on {_gpu_list(gpus_)} (the default)",
            "Turn it on to keep per-process GPU time and peak memory, also after a process ends.",
            enable,
            tuple(gpus_),
        )
    if set(states) <= {"not_supported", "lost", "unknown"}:
        return DoctorFinding(key, Status.SKIP, "Accounting is not supported on these GPUs")
    return DoctorFinding(key, Status.OK, f"Accounting is on ({_gpu_list(states.get('enabled', []))})")


# --------------------------------------------------------------------- all checks


def diagnose(
    facts: BackendFacts,
    host: HostFacts,
    *,
    finished: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT,
    selected: Sequence[int] | None = None,
) -> list[DoctorFinding]:
    """Every check, in order, over what was gathered.

    ``finished=False``: the driver was still busy at the deadline. The GPUs read
    before it got stuck are still checked; what needs every GPU (whether they
    differ, the event stream) is skipped. ``selected``: the GPU indices the
    per-GPU checks look at (``--gpus``); ``None``: all.
    """
    gpus = [g for g in list(facts.gpus) if selected is None or g.static.index in selected]
    complete = finished and facts.device_count is not None
    statics = [g.static for g in facts.gpus] if complete else None
    foreign = facts.host.pid_namespace_foreign if facts.host is not None else host.foreign_pid_namespace
    findings = [check_driver(facts, finished=finished, timeout_s=timeout_s)]
    if complete:
        findings += check_gpus(facts, gpus)
    else:
        findings += [f for f in check_gpus(facts, gpus) if f.status in (Status.FAIL, Status.WARN)] if gpus else []
        if facts.gpus and not finished:
            read = [g.static.index for g in facts.gpus]
            findings.append(
                DoctorFinding(
                    "gpus",
                    Status.SKIP,
                    f"Only {_gpu_list(read)} read before {facts.waiting_for} got stuck: the GPU checks cover "
                    f"{'it' if len(read) == 1 else 'them'} alone",
                    gpus=tuple(read),
                )
            )
        else:
            findings.append(_not_reached("gpus", "GPUs", finished, facts))
    findings.append(
        check_persistence(gpus) if gpus else _not_reached("persistence-mode", "Persistence mode", finished, facts)
    )
    findings.append(check_cuda_visible_devices(host.cuda_visible_devices, host.cuda_device_order, statics))
    findings.append(check_python_bindings(host.bindings))
    findings.append(check_pid_namespace(foreign, host.container))
    findings.append(check_proc_hidepid(host.proc_options, host.euid, host.groups))
    if gpus:
        findings += check_mig(gpus)
        findings += check_memory_health(gpus)
        findings += check_pcie_link(gpus)
    else:
        for key, what in (("mig", "MIG"), ("memory-health", "Memory health"), ("pcie-link", "PCIe link")):
            findings.append(_not_reached(key, what, finished, facts))
    if facts.event_notes is not None:
        findings.append(check_xid_events(facts.event_notes, facts.device_count))
    else:
        findings.append(_not_reached("xid-events", "Xid events", finished, facts))
    findings.append(
        check_accounting(gpus, foreign) if gpus else _not_reached("accounting", "Accounting", finished, facts)
    )
    return findings


def _not_reached(key: str, what: str, finished: bool, facts: BackendFacts) -> DoctorFinding:
    """A check the driver's answers did not reach: why, in words."""
    if not finished:
        why = f"{facts.waiting_for} did not answer"
    elif facts.device_count == 0:
        why = "no GPU"
    else:
        why = "the driver cannot be used"
    return DoctorFinding(key, Status.SKIP, f"{what} not checked: {why}")


def exit_code(findings: Iterable[DoctorFinding]) -> int:
    """1 when any finding is FAIL, else 0 (WARN alone is no failure)."""
    return 1 if any(f.status is Status.FAIL for f in findings) else 0


def _counts(findings: Sequence[DoctorFinding]) -> dict[str, int]:
    return {status.value: sum(1 for f in findings if f.status is status) for status in Status}


# --------------------------------------------------------------------- output


_RESET = "\x1b[0m"
_COLORS = {Status.OK: "\x1b[32m", Status.WARN: "\x1b[33m", Status.FAIL: "\x1b[1;31m", Status.SKIP: "\x1b[2m"}


def use_color(stream: IO[str], no_color: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Colour only on a terminal, and neither with ``--no-color`` nor with NO_COLOR set (no-color.org) nor on a
    dumb terminal (``TERM=dumb``: :func:`~nvtopy.render.terminal.color_allowed`)."""
    from ...render.terminal import color_allowed

    if no_color or not color_allowed(os.environ if environ is None else environ):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def render_text(findings: Sequence[DoctorFinding], facts: BackendFacts, out: IO[str], *, color: bool = False) -> None:
    """The findings as a readable list: status, id and title; then the detail and the fix, indented.

    Every text goes through :func:`~nvtopy.textsafe.safe_text`: a GPU name or a
    driver message cannot move the cursor or retitle the terminal.
    """
    host = facts.host
    head = "nvtopy doctor"
    if host is not None:
        head += f"  {safe_text(host.hostname)}  driver {safe_text(host.driver_version or 'unknown')}"
    if facts.device_count is not None:
        head += f"  {facts.device_count} GPU{'s' if facts.device_count != 1 else ''}"
    if facts.kind != "nvml":
        head += f"  [{safe_text(facts.kind)}]"
    lines = [head, ""]
    width = max((len(f.id) for f in findings), default=0)
    for finding in findings:
        word = finding.status.value.upper()
        shown = f"{_COLORS[finding.status]}{word:<4}{_RESET}" if color else f"{word:<4}"
        lines.append(f"{shown}  {finding.id:<{width}}  {safe_text(finding.title)}")
        indent = " " * (6 + width + 2)
        if finding.detail:
            lines.append(f"{indent}{safe_text(finding.detail)}")
        if finding.fix and finding.status is not Status.SKIP:
            label = "tip" if finding.status is Status.OK else "fix"  # an OK finding's fix is advice
            lines.append(f"{indent}{label}: {safe_text(finding.fix)}")
    counts = _counts(findings)
    verdict = "FAIL" if counts["fail"] else "WARN" if counts["warn"] else "OK"
    summary = (
        f"{verdict}: {counts['fail']} fail, {counts['warn']} warn, {counts['ok']} ok, {counts['skip']} skipped"
        f" (exit {exit_code(findings)})"
    )
    lines += ["", f"{_COLORS[Status(verdict.lower())]}{summary}{_RESET}" if color else summary]
    out.write("\n".join(lines) + "\n")


def finding_to_dict(finding: DoctorFinding) -> dict[str, Any]:
    """One finding in JSON: every text escaped once (:func:`~nvtopy.textsafe.escape_text`), as the contract does."""
    return {
        "id": finding.id,
        "status": finding.status.value,
        "title": escape_text(finding.title),
        "detail": escape_text(finding.detail),
        "fix": escape_text(finding.fix),
        "gpus": list(finding.gpus),
    }


def render_json(findings: Sequence[DoctorFinding], facts: BackendFacts) -> str:
    """The findings as one JSON document (UTF-8 text, every outside string escaped)."""
    import json

    host = facts.host
    counts = _counts(findings)
    data = {
        "nvtopy_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "hostname": escape_text(host.hostname) if host is not None else None,
        "backend": facts.kind,
        "driver_version": escape_text(host.driver_version) if host is not None else None,
        "gpu_count": facts.device_count,
        "status": "fail" if counts["fail"] else "warn" if counts["warn"] else "ok",
        "exit_code": exit_code(findings),
        "counts": counts,
        "findings": [finding_to_dict(f) for f in findings],
    }
    return json.dumps(data, indent=2, ensure_ascii=False)


def _write_utf8(text: str) -> None:
    """JSON is UTF-8 (RFC 8259) whatever the locale's encoding (as ``--once --json`` writes it)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8"))


# --------------------------------------------------------------------- the command


def build_parser(command: str = "doctor") -> argparse.ArgumentParser:
    """``nvtopy doctor [--json] [--no-color] [--timeout S] [--demo ...] [--gpus LIST] [--against-nvidia-smi [F]]``."""
    parser = options.command_parser(
        command,
        "Check the NVIDIA driver, the GPUs and this machine for what goes wrong in practice; "
        "print each finding with its fix. Exit status 1 when a check FAILs, 0 otherwise (WARN included).",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes (also: NO_COLOR=1)")
    options.add_timeout_option(parser, "give up on a driver that has not answered after this long: a FAIL finding")
    options.add_gpu_options(parser)
    parser.add_argument(
        "--against-nvidia-smi",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="instead of the checks: compare nvtopy's figures with nvidia-smi's, field by field (FILE: a saved "
        "'nvidia-smi -q -x' or '-q' capture; without it nvidia-smi -q -x is run, within --timeout). Moving values "
        "within a stated tolerance, static ones exactly; exit 1 on a disagreement, 2 on a file that is no capture",
    )
    return parser


# The fact gatherers, replaceable in tests (a hanging driver, a fixed environment).
Gather = Callable[[BackendFacts, Callable[[], Any]], object]


def run(
    command: str,
    args: argparse.Namespace,
    *,
    gather: Gather | None = None,
    host: HostFacts | None = None,
) -> int:
    """Gather the facts (the driver's on a daemon thread, at most ``--timeout`` s), judge, print; 1 on any FAIL."""
    if getattr(args, "against_nvidia_smi", None) is not None:
        from . import against_smi

        return against_smi.run(args, _write_utf8)
    spec = options.backend_spec(args, close_at_exit=False)  # usage errors now, before any driver call
    opener = spec_opener(spec)
    host = host if host is not None else host_facts()
    facts = BackendFacts(kind=spec.kind, waiting_for=spec.waiting_for)
    work = gather if gather is not None else gather_backend_facts
    finished = run_with_timeout(lambda: work(facts, opener), args.timeout)
    selected: list[int] | None = None
    if finished and (args.gpus is not None or args.only_visible) and facts.gpus:
        from ...selection import select_gpus

        selection = select_gpus([g.static for g in facts.gpus], args.gpus, args.only_visible)
        for warning in selection.warnings:
            options.warn_user(warning)
        selected = list(selection.indices)
    findings = diagnose(facts, host, finished=finished, timeout_s=args.timeout, selected=selected)
    if args.json:
        _write_utf8(render_json(findings, facts) + "\n")
    else:
        render_text(findings, facts, sys.stdout, color=use_color(sys.stdout, args.no_color))
    return exit_code(findings)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nvtopy.commands.doctor.command ...``: the command on its own, under the CLI's error policy."""
    from ..dispatch import guarded

    parser = build_parser("doctor")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return guarded(lambda: run("doctor", args))


if __name__ == "__main__":
    sys.exit(main())
