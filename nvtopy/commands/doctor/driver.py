"""Doctor's checks of the driver: it answers, its parts agree, and it sees GPUs that answer.

The first checks printed, and the ones a broken machine fails: no driver, a
kernel module not loaded, a library newer than the running module (an upgrade
without a reboot), no permission, a driver stuck past ``--timeout``; then GPUs
lost or not this process's to open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...backends.diagnose import BackendFacts, GpuFacts
from ...model import Reason
from ..options import DEFAULT_TIMEOUT
from .findings import DoctorFinding, Status, gpu_list

__all__ = ["check_driver", "check_gpus"]


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
    reported: dict[str, str] = {
        name: version
        for name, version in (("kernel module", facts.kernel_version), ("library", library), ("driver", driver))
        if version
    }
    if len(set(reported.values())) > 1:
        said = ", ".join(f"{name} {version}" for name, version in reported.items())
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
        if "kernel module" in reported
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
                f"{gpu_list(lost)} lost: the GPU stopped answering",
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
                f"{gpu_list(denied)} cannot be opened (no permission)",
                "The GPU is not this process's: a container, a Slurm job or a cgroup hands out only some GPUs.",
                "run where the GPU is allocated to you, or as a user allowed to open its /dev/nvidia* device",
                tuple(denied),
            )
        )
    if not findings:
        count = facts.device_count
        findings.append(DoctorFinding("gpus", Status.OK, f"{count} GPU{'s' if count != 1 else ''} answer"))
    return findings
