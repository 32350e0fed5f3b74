"""What nvtopy exports beyond dcgm-exporter's names, and the labels of each series: one table for writer and reader.

nvtopy's own GPU series (:data:`NVTOPY_FIELDS`, under dcgm's GPU labels): the health
verdict (``nvtopy_gpu_health``: 0 OK, 1 WARN, 2 FAIL), whether the driver answers
(``nvtopy_gpu_responding``), PCIe and NVLink throughput in bytes per second;
``nvtopy_gpu_mig_mode`` and ``nvtopy_gpu_mig_mode_pending`` (1/0) say whether MIG is on
now and after the next reset. Per NVLink its state, throughput and errors (labels
:data:`LINK_LABELS`); per MIG device (compute instance) ``nvtopy_mig_device_info`` and its
memory, SM count and process count (labels :func:`mig_device_labels`); per process
``nvtopy_process_*`` (labels :func:`process_labels`, fields :data:`PROCESS_FIELDS`). The host
label of these is the naming's (``Hostname``, or ``hostname`` in dcgm-exporter 4.9's naming:
:mod:`nvtopy.formats.dcgm_naming`), as on the GPU's series they join with.

Why a module of its own: :mod:`~nvtopy.formats.prometheus.collect` writes these series and
:mod:`~nvtopy.formats.prometheus.parse` reads them back; a name or unit changed in one
place changes for both. dcgm-exporter's names and units are :mod:`nvtopy.formats.dcgm`'s
(and, per naming generation, :mod:`nvtopy.formats.dcgm_naming`'s).
"""

from __future__ import annotations

from ...model import Severity
from ...ranges import BYTES, BYTES_PER_S, SECONDS
from ..dcgm import BY_NAME, MIG_LABELS, DcgmField, ranged
from ..dcgm_naming import Naming

__all__ = [
    "ALL_BY_NAME",
    "COMMAND_LABEL_MAX",
    "LINK_SERIES",
    "MIG_DEVICE_SERIES",
    "NVTOPY_BY_NAME",
    "NVTOPY_FIELDS",
    "OWNER_LABELS",
    "POD_LABELS",
    "PROCESS_FIELDS",
    "link_labels",
    "mig_device_labels",
    "mig_info_labels",
    "process_labels",
]


_SEVERITY_BY_RANK = {severity.rank: severity for severity in Severity}


def _float(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


NVTOPY_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        "nvtopy_gpu_health",
        "The GPU's health verdict: 0 OK, 1 WARN, 2 FAIL (nvtopy's findings; see --once or the JSON for why).",
        "health.verdict",
        lambda verdict: float(verdict.rank),  # type: ignore[attr-defined]
        ranged((0, 2), lambda v: _SEVERITY_BY_RANK[round(v)], whole=True),
        when_lost=True,
    ),
    DcgmField(
        "nvtopy_gpu_responding",
        "1 while the GPU's driver calls answer; 0 when one has been outstanding too long (a hung GPU or driver).",
        "health.responding",
        lambda value: 1.0 if value else 0.0,
        ranged((0, 1), bool, whole=True),
        when_lost=True,
    ),
    DcgmField(
        "nvtopy_gpu_stalled_seconds",
        "How long the outstanding driver call of a GPU that does not respond has run (seconds).",
        "health.stalled_seconds",
        _float,
        ranged(SECONDS, float),
        when_lost=True,
    ),
    DcgmField(
        "nvtopy_gpu_idle_held_bytes",
        "GPU memory held by processes that compute nothing, for long (bytes).",
        "health.idle_held_bytes",
        _float,
        ranged(BYTES, round),
    ),
    DcgmField(
        "nvtopy_gpu_suspected_hang_seconds",
        "How long the GPU has looked busy with its SMs idle (without GPM: at low power), "
        "as in a deadlocked collective (seconds).",
        "health.suspected_hang_seconds",
        _float,
        ranged(SECONDS, float),
    ),
    DcgmField(
        "nvtopy_pcie_rx_bytes_per_second",
        "PCIe receive throughput, NVML's 20 ms sample (bytes/s; not DCGM_FI_PROF_PCIE_RX_BYTES, see docs).",
        "pcie_rx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_pcie_tx_bytes_per_second",
        "PCIe transmit throughput, NVML's 20 ms sample (bytes/s; not DCGM_FI_PROF_PCIE_TX_BYTES, see docs).",
        "pcie_tx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_nvlink_rx_bytes_per_second",
        "NVLink receive throughput, data payload, all links (bytes/s).",
        "nvlink_rx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_nvlink_tx_bytes_per_second",
        "NVLink transmit throughput, data payload, all links (bytes/s).",
        "nvlink_tx_bytes_per_s",
        _float,
        ranged(BYTES_PER_S, round),
    ),
    DcgmField(
        "nvtopy_gpu_mig_mode",
        "1 when MIG mode is on, 0 when off (absent: the GPU has no MIG).",
        "static.mig_mode",
        lambda value: 1.0 if value else 0.0,
        ranged((0, 1), bool, whole=True),
    ),
    DcgmField(
        "nvtopy_gpu_mig_mode_pending",
        "MIG mode after the next GPU reset: 1 on, 0 off (differs from nvtopy_gpu_mig_mode until the reset).",
        "static.mig_mode_pending",
        lambda value: 1.0 if value else 0.0,
        ranged((0, 1), bool, whole=True),
    ),
)
NVTOPY_BY_NAME = {field.name: field for field in NVTOPY_FIELDS}
# Every GPU series a reader knows, dcgm-exporter's and nvtopy's, by name.
ALL_BY_NAME = {**BY_NAME, **NVTOPY_BY_NAME}


def link_labels(naming: Naming) -> tuple[str, ...]:
    """The labels of a per-NVLink series: the GPU's identity (gpu, UUID, the naming's host label), then ``link``.

    Labelled as the nvtopy_process_* series are, not with every dcgm label: an HGX node has 144 links
    and four series each, and the model, bus id and driver are one join away on the GPU's series
    (``on(gpu, Hostname)``). ``remote`` (the peer's PCI bus id) labels the state series too.
    """
    return ("gpu", "UUID", naming.host_label, "link")


# Per NVLink: (metric, help, NvLink attribute, counter?), labelled with link_labels.
LINK_SERIES: tuple[tuple[str, str, str, bool], ...] = (
    ("nvtopy_nvlink_link_active", "1 when the NVLink is active, 0 when not (label remote: its peer).", "active", False),
    (
        "nvtopy_nvlink_link_rx_bytes_per_second",
        "NVLink receive throughput, data payload (bytes/s).",
        "rx_bytes_per_s",
        False,
    ),
    (
        "nvtopy_nvlink_link_tx_bytes_per_second",
        "NVLink transmit throughput, data payload (bytes/s).",
        "tx_bytes_per_s",
        False,
    ),
    ("nvtopy_nvlink_link_errors", "NVLink CRC, replay and recovery errors since driver load.", "errors", True),
)


def mig_device_labels(naming: Naming) -> tuple[str, ...]:
    """The labels of a MIG device's (a compute instance's) series: the GPU's identity, as a link's, then which device.

    NVML's MIG device index, dcgm-exporter's GPU instance labels (for joins with its FB series) and
    the compute instance.
    """
    return ("gpu", "UUID", naming.host_label, "mig_device", *MIG_LABELS, "compute_instance_id")


def mig_info_labels(naming: Naming) -> tuple[str, ...]:
    """``nvtopy_mig_device_info``'s: a MIG device's, then its UUID (what CUDA_VISIBLE_DEVICES takes) and profile."""
    return (*mig_device_labels(naming), "mig_uuid", "mig_profile")


# (metric, help, MigState attribute): unknown values are left out.
MIG_DEVICE_SERIES: tuple[tuple[str, str, str], ...] = (
    ("nvtopy_mig_device_memory_used_bytes", "GPU memory used in the MIG device's GPU instance (bytes).", "used"),
    ("nvtopy_mig_device_memory_total_bytes", "GPU memory of the MIG device (bytes).", "total"),
    ("nvtopy_mig_device_sm_count", "Streaming multiprocessors the MIG device computes with.", "sm_count"),
    ("nvtopy_mig_device_processes", "Processes running on the MIG device.", "processes"),
)

# Who owns the process (empty where it has none of them): its container, Kubernetes pod and namespace, Slurm job,
# and the owner's kind (docker, kubernetes, podman, slurm, systemd-service, user-session, cgroup, host).
OWNER_LABELS = ("owner_kind", "container", "pod", "namespace", "slurm_job")


def process_labels(naming: Naming) -> tuple[str, ...]:
    """The labels of a process's series: its GPU, pid, type, user, command, the naming's host label, its owner."""
    return ("gpu", "UUID", "pid", "type", "user", "command", naming.host_label, *OWNER_LABELS)


# dcgm-exporter's labels of a GPU that a Kubernetes pod holds, after its GPU labels (its rendermetrics template).
POD_LABELS = ("pod", "namespace", "container")

COMMAND_LABEL_MAX = 120  # characters of a command line kept in its process's label (cut before escaping)

# nvtopy's per-process series (nvtopy_process_<name>) -> the GpuProcess field each carries: what the exporter
# writes, and what a reader of the series fills.
PROCESS_FIELDS: dict[str, str] = {
    "gpu_memory_bytes": "gpu_memory_bytes",
    "sm_utilization_percent": "sm_percent",
    "memory_utilization_percent": "memory_percent",
    "cpu_percent": "cpu_percent",
    "host_memory_bytes": "host_memory_bytes",
    "start_time_seconds": "create_time",
    "idle_held_seconds": "idle_seconds",
}
