"""Doctor's checks of this machine's setup, not of a GPU: what makes CUDA or nvtopy see the wrong thing.

``CUDA_VISIBLE_DEVICES`` by index on mixed GPUs, the PyPI ``pynvml`` shadowing
NVIDIA's bindings, a PID namespace of its own (processes cannot be named),
``/proc`` mounted with ``hidepid``. Each a pure function of facts
:func:`nvtopy.backends.diagnose.host_facts` read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ...backends.diagnose import PythonBindings
from ...model import GpuStatic
from .findings import DoctorFinding, Status

__all__ = ["check_cuda_visible_devices", "check_pid_namespace", "check_proc_hidepid", "check_python_bindings"]


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
