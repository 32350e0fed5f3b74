"""Every doctor check, in the order printed, over the facts gathered (:func:`diagnose`).

The checks, each in the module of its kind:

1. ``driver``: the NVIDIA driver answers; kernel module, NVML library and the
   version NVML reports agree (LibRmVersionMismatch: upgraded without reboot);
   no driver, driver not loaded, no permission; a driver that does not answer
   within ``--timeout`` seconds. ``gpus``: the driver sees GPUs, none is lost
   (:mod:`.driver`).
2. ``persistence-mode``: off means a slow first call after every idle spell (:mod:`.gpus`).
3. ``cuda-visible-devices``: given by index without
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` on a machine whose GPUs differ (CUDA's
   default order then differs from nvidia-smi's); empty, or cut short (:mod:`.environment`).
4. ``python-bindings``: the PyPI ``pynvml`` beside ``nvidia-ml-py`` (the old one
   shadows NVIDIA's module) (:mod:`.environment`).
5. ``pid-namespace``: in a container without the host's PID namespace GPU
   processes cannot be named (:mod:`.environment`).
6. ``proc-hidepid``: ``/proc`` mounted with ``hidepid`` hides other users' processes (:mod:`.environment`).
7. ``mig``: MIG enabled with no instance (CUDA sees no device there) (:mod:`.gpus`).
8. ``memory-health``: the monitor's memory rules: remapping failed or the page
   retirement limit reached (FAIL); a reset pending, uncorrectable ECC errors (WARN) (:mod:`.gpus`).
9. ``pcie-link``: the monitor's link rule: narrower than its maximum (always), or
   slower while busy; a slower generation at idle is power saving, and said to be (:mod:`.gpus`).
10. ``xid-events`` and ``accounting``: whether Xid errors can be watched, and
    the accounting mode (not permitted, off, unsupported) (:mod:`.gpus`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...backends.diagnose import BackendFacts, HostFacts
from ..options import DEFAULT_TIMEOUT
from .driver import check_driver, check_gpus
from .environment import check_cuda_visible_devices, check_pid_namespace, check_proc_hidepid, check_python_bindings
from .findings import DoctorFinding, Status, gpu_list
from .gpus import (
    check_accounting,
    check_memory_health,
    check_mig,
    check_pcie_link,
    check_persistence,
    check_xid_events,
)

__all__ = ["diagnose"]


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
                    f"Only {gpu_list(read)} read before {facts.waiting_for} got stuck: the GPU checks cover "
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
