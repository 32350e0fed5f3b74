"""What the simulated backend simulates: GPU models and the workloads that run on them.

Figures are the vendors' published specifications (memory, default power limit,
boost clocks, thresholds close to what NVML reports on those boards), so the
demo and the screenshots look like a real machine rather than round numbers.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ...errors import UsageError, unknown_name
from ...model import OwnerKind, ProcessOwner

__all__ = [
    "MODELS",
    "OWNER_KINDS",
    "PLATFORM_STATIC_UNSUPPORTED",
    "PLATFORM_UNSUPPORTED",
    "WORKLOADS",
    "GpuModel",
    "Workload",
    "find_model",
    "sim_owner",
]


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_mib: int
    power_limit_w: float
    power_min_w: float
    power_max_w: float
    slowdown_c: int
    shutdown_c: int
    sm_max_mhz: int
    mem_max_mhz: int
    compute_capability: str
    fans: int  # 0: passively cooled (SXM): NVML says fan NotSupported
    ecc: bool  # GeForce boards: ECC NotSupported
    mig: bool
    graphics: bool  # boards with a display engine also run graphics (G) processes
    sm_idle_mhz: int = 345
    mem_idle_mhz: int = 405
    # The PCIe link the board and its slot reach (it trains down to gen 1 at idle and back up under load).
    pcie_gen_max: int = 4
    pcie_width_max: int = 16
    # NVLinks: SXM boards have them (to NVSwitches on HGX A100/H100/H200, to peer GPUs on a DGX-1 V100),
    # PCIe boards none. Each link carries 25 GB/s per direction on NVLink 2 to 4.
    nvlinks: int = 0
    nvlink_version: int = 0
    nvswitch: bool = False  # links reach NVSwitches (else peer GPUs)
    # Platforms (see PLATFORM_UNSUPPORTED): what NVML cannot say on this machine, on purpose.
    framebuffer: bool = True  # False: unified memory (GB10 / DGX Spark): nvmlDeviceGetMemoryInfo is NotSupported
    board_gpus: int = 1  # GPUs per board: they share its serial number (GB200: two GPUs on one board)
    platform: str | None = None  # "vgpu" (a vGPU guest) or "old" (an old board and driver): fields NVML lacks there
    driver: tuple[str, str | None] = ("550.54.15", "12.4")  # driver and CUDA version; CUDA None: "Not Found"

    @property
    def row_remapping(self) -> bool:
        """Row remapping replaced page retirement with Ampere (8.0), on boards with ECC memory."""
        return self.ecc and int(self.compute_capability.split(".")[0]) >= 8

    @property
    def page_retirement(self) -> bool:
        """Dynamic page retirement: ECC boards before Ampere (Kepler to Turing)."""
        return self.ecc and not self.row_remapping


# fmt: off
MODELS: tuple[GpuModel, ...] = (
    GpuModel("NVIDIA H100 80GB HBM3", 81559, 700, 200, 700, 87, 92, 1980, 2619, "9.0", 0, True, True, False,
             pcie_gen_max=5, nvlinks=18, nvlink_version=4, nvswitch=True),
    GpuModel("NVIDIA H100 PCIe", 81559, 350, 200, 350, 85, 90, 1755, 1593, "9.0", 0, True, True, False,
             pcie_gen_max=5),
    GpuModel("NVIDIA H200", 143771, 700, 200, 700, 87, 92, 1980, 3201, "9.0", 0, True, True, False,
             pcie_gen_max=5, nvlinks=18, nvlink_version=4, nvswitch=True),
    GpuModel("NVIDIA A100-SXM4-80GB", 81920, 400, 100, 400, 89, 92, 1410, 1593, "8.0", 0, True, True, False,
             pcie_gen_max=4, nvlinks=12, nvlink_version=3, nvswitch=True),
    GpuModel("NVIDIA A100-SXM4-40GB", 40960, 400, 100, 400, 89, 92, 1410, 1215, "8.0", 0, True, True, False,
             pcie_gen_max=4, nvlinks=12, nvlink_version=3, nvswitch=True),
    GpuModel("NVIDIA L4", 23034, 72, 40, 72, 88, 93, 2040, 6251, "8.9", 0, True, False, True,
             pcie_gen_max=4),
    GpuModel("NVIDIA GeForce RTX 4090", 24564, 450, 150, 600, 90, 95, 3105, 10501, "8.9", 1, False, False, True,
             pcie_gen_max=4),
    GpuModel("Tesla V100-SXM2-32GB", 32768, 300, 150, 300, 86, 90, 1530, 877, "7.0", 0, True, False, False,
             pcie_gen_max=3, nvlinks=6, nvlink_version=2),
    GpuModel("Tesla T4", 15360, 70, 60, 70, 88, 96, 1590, 5001, "7.5", 0, True, False, True,
             pcie_gen_max=3),
    # Grace Hopper superchip: the GPU reaches its CPU over NVLink-C2C; NVML reports a vestigial PCIe Gen4 x1 link.
    GpuModel("NVIDIA GH200 480GB", 97871, 700, 100, 900, 87, 92, 1980, 2619, "9.0", 0, True, True, False,
             pcie_gen_max=4, pcie_width_max=1, driver=("550.127.05", "12.4")),
    # Grace Blackwell: two GPUs on each board, sharing its serial number.
    GpuModel("NVIDIA GB200", 189471, 1200, 200, 1200, 87, 92, 2062, 3996, "10.0", 0, True, True, False,
             pcie_gen_max=5, nvlinks=18, nvlink_version=5, nvswitch=True, board_gpus=2,
             driver=("580.173.02", "13.0")),
    # DGX Spark: CPU and GPU share LPDDR5X; NVML reports no framebuffer memory at all (nvtop#449, nvitop#195).
    GpuModel("NVIDIA GB10", 122502, 140, 5, 140, 90, 95, 3003, 4266, "12.1", 0, False, False, True,
             pcie_gen_max=5, pcie_width_max=1, framebuffer=False, driver=("580.95.05", "13.0")),
    GpuModel("NVIDIA GeForce RTX 5090", 32607, 575, 400, 600, 90, 95, 3090, 14001, "12.0", 2, False, False, True,
             pcie_gen_max=5, driver=("570.124.06", "12.8")),
    # A vGPU guest (Windows VM, GRID P4 with a 1 GiB profile): the host owns sensors, power, ECC and links.
    GpuModel("GRID P4-1Q", 1024, 75, 75, 75, 91, 94, 1531, 3003, "6.1", 0, False, False, True,
             pcie_gen_max=3, platform="vgpu", driver=("513.46", "11.6")),
    # Kepler GeForce on the last driver that supports it: no power, utilisation or throttle readings.
    GpuModel("NVIDIA GeForce GTX 680", 2048, 195, 150, 195, 97, 102, 1058, 3004, "3.0", 1, False, False, True,
             pcie_gen_max=3, platform="old", driver=("470.256.02", "11.4")),
)
# fmt: on

# Sample groups and static fields NVML answers NotSupported on a platform (GpuModel.platform, or the
# --demo-fault of the same name): what the captures of such machines show as N/A.
PLATFORM_UNSUPPORTED: dict[str, frozenset[str]] = {
    "vgpu": frozenset(
        {
            "temperature",
            "fan",
            "power",
            "power_limit",
            "energy",
            "ecc",
            "throttle",
            "pcie_link",
            "remapped_rows",
            "retired_pages",
            "nvlink",
            "gpm",
            "process_utilization",
        }
    ),
    "old": frozenset(
        {"power", "power_limit", "utilization", "energy", "throttle", "gpm", "process_utilization", "codec"}
    ),
}
PLATFORM_STATIC_UNSUPPORTED: dict[str, frozenset[str]] = {
    "vgpu": frozenset(
        {
            "power_default_limit_w",
            "power_min_limit_w",
            "power_max_limit_w",
            "temperature_slowdown_c",
            "temperature_shutdown_c",
            "pcie_link_gen_max",
            "pcie_link_width_max",
            "nvlink_count",
        }
    ),
    "old": frozenset({"power_default_limit_w", "power_min_limit_w", "power_max_limit_w"}),
}


def _word_start(needle: str, name: str) -> bool:
    """Whether ``needle`` starts a word of ``name`` ("H200" in "NVIDIA H200", not in "NVIDIA GH200 480GB")."""
    return re.search(rf"(?:^|[\s-]){re.escape(needle)}", name) is not None


def find_model(name: str) -> GpuModel:
    """The catalog model named ``name``: its full name, or a part of exactly one name (case-insensitive).

    A part that several names contain ("A100", "H100") is an error naming them:
    picking the first one would silently show another board than asked for.
    """
    needle = " ".join(name.split()).lower()
    for model in MODELS:
        if model.name.lower() == needle:
            return model
    matches = [model for model in MODELS if needle and needle in model.name.lower()]
    if len(matches) == 1:
        return matches[0]
    starting = [model for model in matches if _word_start(needle, model.name.lower())]
    if len(starting) == 1:  # "H200" is the H200, though "GH200" contains it too
        return starting[0]
    if matches:
        raise UsageError(
            f"--demo-model: {name!r} matches several models ({', '.join(m.name for m in matches)}): "
            "give more of the name"
        )
    raise unknown_name("--demo-model", "GPU model", name, [m.name for m in MODELS])


@dataclass(frozen=True, slots=True)
class Workload:
    """A kind of GPU job: its command line, how much of the GPU it takes, how long it lives."""

    command: str
    memory_fraction: tuple[float, float]  # of the GPU's memory, min..max
    intensity: tuple[float, float]  # share of SM time it asks for, 0..1
    lifetime_s: tuple[float, float]
    kind: str = "C"  # C, G or C+G
    cpu_percent: tuple[float, float] = (80.0, 105.0)
    host_memory_gib: tuple[float, float] = (4.0, 24.0)
    encoder: float = 0.0
    decoder: float = 0.0


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "python train.py --config configs/llama3-8b.yaml --micro-batch-size 4",
        (0.55, 0.88),
        (0.75, 0.98),
        (600, 3600),
        host_memory_gib=(18, 40),
    ),
    Workload(
        "/opt/conda/bin/python -m torch.distributed.run --nproc_per_node=8 pretrain_gpt.py --tp 2",
        (0.6, 0.9),
        (0.8, 1.0),
        (900, 3600),
        cpu_percent=(95, 180),
        host_memory_gib=(24, 64),
    ),
    Workload(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.9 --port 8000",
        (0.85, 0.9),
        (0.1, 0.7),
        (900, 3600),
        cpu_percent=(20, 60),
    ),
    Workload(
        "python finetune_lora.py --model mistralai/Mistral-7B-v0.3 --lr 2e-4 --epochs 3",
        (0.3, 0.6),
        (0.6, 0.9),
        (300, 1800),
    ),
    Workload(
        "python -m ipykernel_launcher -f /run/user/1000/jupyter/runtime/kernel-7f3c.json",
        (0.02, 0.2),
        (0.0, 0.25),
        (120, 1200),
        cpu_percent=(0, 15),
        host_memory_gib=(1, 6),
    ),
    Workload(
        "python eval_harness.py --tasks mmlu,gsm8k,hellaswag --batch-size auto",
        (0.2, 0.5),
        (0.4, 0.8),
        (120, 900),
    ),
    Workload(
        "tritonserver --model-repository=/models --http-port 8000",
        (0.15, 0.4),
        (0.1, 0.5),
        (900, 3600),
        cpu_percent=(10, 40),
    ),
    Workload(
        "ffmpeg -hwaccel cuda -i talk.mp4 -c:v h264_nvenc -preset p5 talk-720p.mp4",
        (0.01, 0.03),
        (0.05, 0.2),
        (30, 240),
        cpu_percent=(40, 90),
        host_memory_gib=(0.2, 1),
        encoder=0.55,
        decoder=0.35,
    ),
)

GRAPHICS_WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "/usr/lib/xorg/Xorg vt1 -displayfd 3 -auth /run/user/1000/gdm/Xauthority",
        (0.005, 0.01),
        (0.0, 0.03),
        (86400, 86400),
        kind="G",
        cpu_percent=(0.5, 3),
        host_memory_gib=(0.1, 0.3),
    ),
    Workload(
        "blender -b scene.blend -E CYCLES -a -- --cycles-device OPTIX",
        (0.1, 0.3),
        (0.5, 0.9),
        (120, 900),
        kind="C+G",
        host_memory_gib=(2, 8),
    ),
)

USERS: tuple[str, ...] = ("alice", "bob", "carol", "dmitri", "zhang")


# --- who owns the simulated processes ------------------------------------------------------------
# Owners of every kind nvtopy recognises (nvtopy.backends.host.owners), with the cgroup paths those runtimes
# write, so --demo and the screenshots show containers, pods, Slurm jobs, services and sessions.

OWNER_KINDS: tuple[OwnerKind, ...] = (
    OwnerKind.KUBERNETES,
    OwnerKind.SLURM,
    OwnerKind.DOCKER,
    OwnerKind.SYSTEMD_SERVICE,
    OwnerKind.PODMAN,
    OwnerKind.USER_SESSION,
    OwnerKind.HOST,
)
_K8S_NAMESPACES = ("ml-research", "inference", "default")
_K8S_APPS = ("trainer", "vllm", "triton", "notebook")
_DOCKER_NAMES = (("inference", "vllm"), ("inference", "triton"), ("bench", "runner"), (None, "jupyter"))
_SLURM_JOB_NAMES = ("llama-pretrain", "sweep-lr", "eval-mmlu", "lora-ft")
_SERVICES = ("ollama", "tritonserver", "comfyui")
_HEX = "0123456789abcdef"
_POD_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def _hex(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(_HEX) for _ in range(length))


def sim_owner(
    kind: OwnerKind, rng: random.Random, *, uid: int, gpu: int
) -> tuple[ProcessOwner, int | None, str | None]:
    """A simulated process's (owner, pid in its own namespace, CUDA_VISIBLE_DEVICES): a pure function of ``rng``."""
    if kind is OwnerKind.KUBERNETES:
        app = rng.choice(_K8S_APPS)
        namespace = rng.choice(_K8S_NAMESPACES)
        pod = f"{app}-{_hex(rng, 9)}-{''.join(rng.choice(_POD_CHARS) for _ in range(5))}"
        pod_uid = f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"
        cid = _hex(rng, 64)
        qos = rng.choice(("", "-burstable", "-besteffort"))
        slice_qos = f"/kubepods{qos}.slice" if qos else ""
        cgroup = (
            f"/kubepods.slice{slice_qos}/kubepods{qos}-pod{pod_uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope"
        )
        owner = ProcessOwner(
            kind=kind,
            id=pod_uid,
            name=pod,
            namespace=namespace,
            pod=pod,
            container=app,
            container_id=cid,
            cgroup=cgroup,
        )
        return owner, rng.randrange(1, 64), None
    if kind is OwnerKind.SLURM:
        job = str(rng.randrange(100_000, 999_999))
        step = rng.choice(("0", "batch", "1"))
        owner = ProcessOwner(
            kind=kind,
            id=job,
            name=rng.choice(_SLURM_JOB_NAMES),
            job=job,
            step=step,
            uid=uid,
            cgroup=f"/system.slice/slurmstepd.scope/job_{job}/step_{step}/user/task_0",
        )
        return owner, None, str(gpu)  # Slurm sets CUDA_VISIBLE_DEVICES to the job's GPUs
    if kind in (OwnerKind.DOCKER, OwnerKind.PODMAN):
        project, name = rng.choice(_DOCKER_NAMES)
        cid = _hex(rng, 64)
        if kind is OwnerKind.DOCKER:
            name = f"{project}-{name}-1" if project else name
            cgroup = f"/system.slice/docker-{cid}.scope"
            owner_uid = None
        else:
            project = None
            cgroup = f"/user.slice/user-{uid}.slice/user@{uid}.service/user.slice/libpod-{cid}.scope"
            owner_uid = uid
        owner = ProcessOwner(
            kind=kind,
            id=cid,
            name=name,
            container=name,
            container_id=cid,
            project=project,
            uid=owner_uid,
            cgroup=cgroup,
        )
        return owner, rng.randrange(1, 64), "0" if rng.random() < 0.5 else None
    if kind is OwnerKind.SYSTEMD_SERVICE:
        unit = rng.choice(_SERVICES)
        owner = ProcessOwner(kind=kind, id=f"{unit}.service", name=unit, cgroup=f"/system.slice/{unit}.service")
        return owner, None, None
    if kind is OwnerKind.USER_SESSION:
        session = str(rng.randrange(1, 400))
        owner = ProcessOwner(
            kind=kind, id=session, uid=uid, cgroup=f"/user.slice/user-{uid}.slice/session-{session}.scope"
        )
        return owner, None, f"{gpu}" if rng.random() < 0.5 else None
    return ProcessOwner(kind=OwnerKind.HOST, cgroup="/"), None, None


DISPLAY_OWNER = ProcessOwner(
    kind=OwnerKind.SYSTEMD_SERVICE, id="gdm.service", name="gdm", cgroup="/system.slice/gdm.service"
)
"""The owner of a display server (the graphics workloads' first)."""
