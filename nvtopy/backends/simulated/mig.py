"""MIG on simulated GPUs: the layouts an admin makes on an A100/H100, and what NVML reports of them.

Why layouts and not free-form profiles: a real GPU takes only certain
combinations (7 compute slices, 8 memory slices), and users recognise them.
``--demo-fault mig=N@GPUS`` picks the usual layout of N instances; ``mig=pending``
is a GPU whose MIG mode was switched on and waits for a reset (no instance yet).

What the simulation reports, as the driver does (and as ../shared/fake-nvml does):
utilisation, codec and per-process utilisation are NotSupported on a MIG-enabled
GPU; each instance has its own memory; processes carry their GPU and compute
instance ids; temperature, power and clocks stay the parent's.
"""

from __future__ import annotations

import random
import re
import uuid as uuidlib

from ...model import MigInstance, MigUsage
from .catalog import GpuModel

__all__ = ["LAYOUTS", "MIG_PENDING", "instance_of", "mig_instances", "mig_usage", "profile_name"]

MIB = 1024 * 1024
MIG_PENDING = "pending"  # the mig= value of a GPU whose MIG mode changes at the next reset
# Compute slices of each instance, per instance count: the layouts nvidia-smi users make most.
LAYOUTS: dict[int, tuple[int, ...]] = {
    1: (7,),
    2: (3, 3),
    3: (3, 2, 2),
    4: (2, 2, 2, 1),
    5: (2, 2, 1, 1, 1),
    6: (2, 1, 1, 1, 1, 1),
    7: (1, 1, 1, 1, 1, 1, 1),
}
_MEMORY_EIGHTHS = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8}  # a profile's share of the memory, in eighths
_HOPPER_SMS = {1: 16, 2: 32, 3: 60, 4: 64, 7: 132}
_CONTEXT_BYTES = 32 * MIB  # what an instance holds with no process: the driver's context


def _nominal_gb(model: GpuModel) -> float:
    """The size in the board's name ("80GB"), which profile names divide; else its memory in GiB.

    A superchip's name counts its CPU's memory too ("GH200 480GB" has 96 GB of HBM): a size past the
    GPU's own memory is not the GPU's, and its profiles divide the GPU's memory (3g.48gb).
    """
    match = re.search(r"(\d+)GB", model.name)
    own = model.memory_mib / 1024
    return float(match[1]) if match and float(match[1]) <= own * 1.1 else own


def profile_name(model: GpuModel, slices: int) -> str:
    """``3g.40gb`` on an 80 GB board, ``3g.20gb`` on a 40 GB one: slices and the memory share, as NVML names it."""
    return f"{slices}g.{round(_nominal_gb(model) * _MEMORY_EIGHTHS[slices] / 8)}gb"


def _sm_count(model: GpuModel, slices: int) -> int:
    major = int(model.compute_capability.split(".")[0])
    if major == 9:
        return _HOPPER_SMS[slices]
    return (18 if major >= 10 else 14) * slices


def mig_instances(model: GpuModel, gpu: int, count: int, seed: int) -> tuple[MigInstance, ...]:
    """The ``count`` instances (0-7) of GPU ``gpu``: GPU instances 1..n, one compute instance each."""
    instances = []
    for k, slices in enumerate(LAYOUTS.get(count, ())):
        rng = random.Random(f"mig/{seed}/{gpu}/{k}")
        memory = (model.memory_mib * _MEMORY_EIGHTHS[slices] // 8 - 256) // 128 * 128 * MIB
        instances.append(
            MigInstance(
                index=k,
                uuid="MIG-" + str(uuidlib.UUID(int=rng.getrandbits(128), version=4)),
                gpu_instance_id=k + 1,
                compute_instance_id=0,
                profile=profile_name(model, slices),
                memory_total_bytes=memory,
                sm_count=_sm_count(model, slices),
                slices=slices,
                copy_engines=slices,
                encoders=0,
                decoders=max(1, slices * 5 // 7),
                jpeg_decoders=1 if slices >= 1 else 0,
                ofa=1 if slices == 7 else 0,
            )
        )
    return tuple(instances)


def instance_of(pid: int, instances: tuple[MigInstance, ...]) -> MigInstance | None:
    """The instance a simulated process runs on: fixed by its pid, so it never moves."""
    return instances[pid % len(instances)] if instances else None


def mig_usage(instances: tuple[MigInstance, ...], used_by_instance: dict[int, int]) -> tuple[MigUsage, ...]:
    """Each instance's memory: its processes' bytes plus the driver's context, within the instance."""
    usage = []
    for instance in instances:
        total = instance.memory_total_bytes or 0
        used = min(total, _CONTEXT_BYTES + used_by_instance.get(instance.index, 0))
        usage.append(MigUsage(instance.index, used, total - used))
    return tuple(usage)
