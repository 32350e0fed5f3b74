"""The simulated backend: deterministic GPUs for ``--demo``, tests, screenshots and benchmarks.

Why a real backend and not a mock: it goes through the same interface, poller,
join and views as NVML, so everything above the backend is exercised exactly
as on hardware. Every value is a pure function of (seed, GPU, simulated time),
so a frozen clock gives byte-identical output (SVG snapshot tests), and a
running clock gives GPUs whose jobs start, ramp up, run and exit.

It can also:

- report real pids (``real_pids``) as GPU processes, so the psutil join and the
  kill path run against real processes;
- inject every fault the NVML backend handles (see :mod:`.sim_faults`), also
  while running (``faults`` is mutable; :meth:`set_lost`, :meth:`simulate_pid_reuse`),
  including a slow driver (``slow=SECONDS``): opening the backend and every read
  then take that long in real time, as NVML calls into a driver in a bad state do;
- report GPU health (:mod:`.sim_health`): remapped rows or retired pages per
  board, the PCIe link and its replays, NVLinks, throttling, Xid events through
  :meth:`open_events`, a driver call hung on one GPU, idle-held memory, a stuck
  (deadlocked) GPU -- healthy by default, faulty as ``--demo-fault`` says.

Threads: the collector reads each GPU on a thread of its own. Per-GPU state
(schedules, caches, energy) is keyed by GPU and built under that GPU's lock, so
a read of another GPU (or a host-wide look at every GPU's jobs) never sees a
half-built schedule; the call counters have a lock of their own. A hung or slow
call sleeps holding no lock: the other GPUs answer at once.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ...model import (
    GPM_FIELDS,
    MIG_GPM_FIELDS,
    SAMPLE_GROUPS,
    STATIC_FIELDS,
    GpuStatic,
    HostInfo,
    HostProcess,
    HostUsage,
    MigInstance,
    MigUsage,
    OwnerKind,
    ProcessDetails,
    ProcessOwner,
    ProcessRelative,
    ProcessType,
    RawGpuProcess,
    Reason,
    decode_throttle_reasons,
    freeze,
)
from ..base import Backend, EventStream, ProcessReading, Reading, SignalOutcome
from ..host.processes import (
    PsutilInspector,
    current_username,
    process_start_time,
    read_process_details,
    running_not_zombie,
)
from ..host.signals import send_signal_checked, signal_name
from .catalog import (
    DISPLAY_OWNER,
    GRAPHICS_WORKLOADS,
    OWNER_KINDS,
    PLATFORM_STATIC_UNSUPPORTED,
    PLATFORM_UNSUPPORTED,
    USERS,
    WORKLOADS,
    GpuModel,
    Workload,
    find_model,
    sim_owner,
)
from .faults import SimFaults
from .gpm import absurd_gpm_values, gpm_supported, gpm_values, mig_gpm_values
from .health import (
    SimEventStream,
    capped_sm_clock,
    health_static,
    nvlink_values,
    pcie_link_values,
    remapped_rows_values,
    retired_pages_values,
    throttle_temperature,
)
from .mig import MIG_PENDING, instance_of, mig_instances, mig_usage

__all__ = ["SimulatedBackend"]

MIB = 1024 * 1024
GIB = 1024 * MIB
# Bus numbers of a DGX H100's eight GPUs; more GPUs continue the pattern.
_BUS_NUMBERS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_IDENTITY_FIELDS = ("uuid", "name", "bus_id", "serial")  # a lost GPU's driver still knows these
# Jobs the idle-held and stuck faults add: pids above the schedules' (2000-99999), one range per kind.
_IDLE_HELD_PIDS = 100_000
_STUCK_PIDS = 400_000
_PIDS_PER_GPU = 1000
_IDLE_HELD_MIN_BYTES = 4 * 1024**3
# A stuck GPU reports 100 % busy but heats, draws (under 20 % of its limit), and moves data like one this busy.
_STUCK_WORK_PERCENT = 12.0


@dataclass(slots=True)
class _Job:
    """One simulated GPU process: a workload instance on one GPU for a span of time."""

    pid: int
    gpu: int
    workload: Workload
    user: str
    uid: int
    start: float
    end: float
    memory_fraction: float
    intensity: float
    cpu_percent: float
    rss: int
    phase: float
    vanished: bool = False  # NVML lists it, the host no longer has it
    real: bool = False  # a real host process (psutil answers for it)
    owner: ProcessOwner | None = None  # its container, pod, Slurm job, service or session
    ns_pid: int | None = None
    cuda_visible_devices: str | None = None
    fixed_bytes: int | None = None  # GPU memory it holds whatever the others want (idle-held)
    parents: tuple[ProcessRelative, ...] | None = None  # its ancestors (made when first asked: _parents)

    def alive(self, now: float) -> bool:
        return self.start <= now < self.end

    def ramp(self, now: float) -> float:
        """Jobs load their weights first: memory and utilisation ramp up over ~20 s."""
        return min(1.0, 0.15 + max(0.0, now - self.start) / 20.0)


class SimulatedBackend(Backend):
    """Simulated GPUs. Deterministic for a given ``seed`` and sequence of clock readings."""

    kind = "simulated"

    def __init__(
        self,
        gpus: int = 4,
        model: str | GpuModel = "H100 80GB HBM3",
        seed: int = 0,
        *,
        clock: Callable[[], float] = time.time,
        faults: SimFaults | None = None,
        real_pids: Sequence[int] = (),
        processes_per_gpu: int = 3,
        lifetime_scale: float = 1.0,
        hostname: str = "demo-node",
        viewer: str | None = None,
        driver_version: str | None = None,
        cuda_driver_version: str | None = None,
        workloads: Sequence[Workload] | None = None,
        steady: bool = False,
    ) -> None:
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        self.model = model if isinstance(model, GpuModel) else find_model(model)
        self.seed = seed
        self.faults = faults or SimFaults()
        self._clock = clock
        self._gpus = gpus
        self._t0 = clock()
        self._viewer = viewer or current_username() or "user"
        self._viewer_uid = os.getuid() if viewer is None and hasattr(os, "getuid") else 1000
        self._root = self._viewer_uid == 0 and viewer is None
        self._slots = max(0, processes_per_gpu)
        self._lifetime_scale = max(0.01, lifetime_scale)
        self._hostname = hostname
        # The model's own driver unless one is given (an old board runs an old driver; CUDA None: "Not Found").
        self._driver = driver_version or self.model.driver[0]
        self._cuda = cuda_driver_version or (self.model.driver[1] if driver_version is None else None)
        self._workloads = tuple(workloads) if workloads else None
        self._steady = steady  # every slot always busy: exact process counts for benchmarks
        self._counts: collections.Counter[str] = collections.Counter()
        self._schedules: dict[tuple[int, int], list[_Job]] = {}
        self._killed: set[tuple[int, float]] = set()  # (pid, start) of jobs ended by a signal
        self._replaced: dict[tuple[int, float], _Job] = {}  # jobs whose pid was reused (tests)
        self._energy: dict[int, tuple[float, float]] = {}  # gpu -> (time, millijoules)
        self._memory_override: dict[int, int] = {}  # real pid -> bytes it "uses" (tests, API demos)
        self._jobs_cache: dict[int, tuple[float, list[_Job]]] = {}
        self._fault_jobs: dict[tuple[str, int], _Job] = {}  # (fault, gpu) -> the job an idle-held/stuck fault adds
        self._gpu_locks = [threading.Lock() for _ in range(gpus)]  # guards that GPU's schedules and caches
        self._counts_lock = threading.Lock()
        self._inspector = PsutilInspector(clock=clock)
        self._real_jobs = [self._real_job(k, pid) for k, pid in enumerate(real_pids)] if gpus else []
        self._real_pids = {job.pid for job in self._real_jobs}
        self._opened_monotonic = time.monotonic()  # the hang fault's time base: real seconds since opening
        self._driver_call()  # opening the backend: nvmlInit

    def _driver_call(self, index: int | None = None, *, hang_only: bool = False) -> None:
        """What a driver call costs with the ``slow`` and ``hang`` faults: real seconds (the UI must not wait).

        Sleeps holding no lock, so calls on other GPUs answer meanwhile.
        ``hang_only``: calls the ``slow`` fault never slowed (host facts, the GPU count).
        """
        seconds = 0.0 if hang_only else self.faults.latency(index)
        if self.faults.hang:
            seconds += self.faults.hang_seconds(index, time.monotonic() - self._opened_monotonic)
        if seconds > 0:
            time.sleep(seconds)

    def _count(self, *names: str) -> None:
        """Count driver calls; GPUs are read on several threads, and ``+=`` on a Counter is not atomic."""
        with self._counts_lock:
            for name in names:
                self._counts[name] += 1

    def _lost(self, index: int, now: float) -> bool:
        """GPU ``index`` fell off the bus: the ``lost`` fault, or an Xid 79 already happened."""
        return self.faults.is_lost(index) or (bool(self.faults.xids) and self.faults.lost_by_xid(index, now - self._t0))

    # ----------------------------------------------------------------- identity

    def host_info(self) -> HostInfo:
        self._driver_call(hang_only=True)
        return HostInfo(
            hostname=self._hostname,
            driver_version=self._driver,
            cuda_driver_version=self._cuda,
            nvml_version=f"12.{self._driver}",
            backend=self.kind,
            user=self._viewer,
            pid_namespace_foreign=self.faults.foreign,
        )

    def host_usage(self) -> HostUsage:
        """A made-up host, deterministic in the seed and the simulated time (the demo's pictures never move)."""
        t = self.now() - self._t0
        rng = random.Random(f"host/{self.seed}")
        cpus = rng.choice((32, 64, 128))
        busy = 20 + 15 * math.sin(t / 40) + 5 * rng.random()
        total = cpus * 8 * 2**30
        return HostUsage(
            cpu_busy_percent=busy,
            cpu_count=cpus,
            load_1m=cpus * busy / 100,
            load_5m=cpus * (busy + 3) / 100,
            load_15m=cpus * 0.25,
            ram_total_bytes=total,
            ram_used_bytes=int(total * (0.4 + 0.1 * math.sin(t / 60))),
            swap_total_bytes=8 * 2**30,
            swap_used_bytes=int(0.1 * 2**30 * rng.random()),
        )

    def device_count(self) -> int:
        self._driver_call(hang_only=True)
        return self._gpus

    def call_counts(self) -> dict[str, int]:
        with self._counts_lock:
            return dict(self._counts)

    def now(self) -> float:
        return self._clock()

    def _uuid(self, index: int) -> str:
        rng = random.Random(f"uuid/{self.seed}/{index}")
        return "GPU-" + str(uuidlib.UUID(int=rng.getrandbits(128), version=4))

    def _bus_id(self, index: int) -> str:
        if index < len(_BUS_NUMBERS) and self._gpus <= len(_BUS_NUMBERS):
            bus = _BUS_NUMBERS[index]
        else:
            bus = 0x10 + index * max(1, 0xE0 // max(self._gpus, 1))
        domain = index // 256  # more than 256 GPUs need more domains
        return f"{domain:08X}:{bus % 256:02X}:00.0"

    def _platform_groups(self, index: int) -> frozenset[str]:
        """The sample groups NVML answers NotSupported on GPU ``index``'s platform (a vGPU guest, an old board)."""
        groups = PLATFORM_UNSUPPORTED.get(self.model.platform or "", frozenset())
        return groups | PLATFORM_UNSUPPORTED["vgpu"] if index in self.faults.vgpu else groups

    def _no_framebuffer(self, index: int) -> bool:
        """Unified memory: NVML reports no framebuffer memory on GPU ``index`` (GB10, or the no-fb-memory fault)."""
        return not self.model.framebuffer or index in self.faults.no_fb_memory

    def read_static(self, index: int) -> GpuStatic:
        self._driver_call(index)
        self._count("static")
        model = self.model
        if index in self.faults.no_permission:
            return GpuStatic(index=index, unavailable=freeze(dict.fromkeys(STATIC_FIELDS, Reason.NO_PERMISSION)))
        values: dict[str, object] = {
            "uuid": self._uuid(index),
            "name": model.name,
            "bus_id": self._bus_id(index),
            # One serial per board: GPUs sharing a board share it (nothing may be keyed on it).
            "serial": f"{1650922000000 + self.seed * 1000 + index // self.model.board_gpus}",
            "memory_total_bytes": model.memory_mib * MIB,
            "power_default_limit_w": float(model.power_limit_w),
            "power_min_limit_w": float(model.power_min_w),
            "power_max_limit_w": float(model.power_max_w),
            "temperature_slowdown_c": model.slowdown_c,
            "temperature_shutdown_c": model.shutdown_c,
            "clock_sm_max_mhz": model.sm_max_mhz,
            "clock_mem_max_mhz": model.mem_max_mhz,
            "compute_capability": model.compute_capability,
            "driver_model": "WDDM" if self.faults.wddm else None,  # NVML answers it on Windows only
            "virtualization_mode": "vgpu" if index in self.faults.vgpu or model.platform == "vgpu" else "none",
            "mig_mode": False if model.mig else None,
            "mig_mode_pending": False if model.mig else None,
            "fan_count": model.fans if model.fans else None,
            **health_static(model),
        }
        layout = self._mig_layout(index)
        if layout is not None:
            values["mig_mode"] = layout != MIG_PENDING
            values["mig_mode_pending"] = True
        reasons: dict[str, Reason] = {}
        if not model.mig:
            reasons["mig_mode"] = reasons["mig_mode_pending"] = Reason.NOT_SUPPORTED
        if not model.fans:
            reasons["fan_count"] = Reason.NOT_SUPPORTED
        if self._no_framebuffer(index):
            reasons["memory_total_bytes"] = Reason.NOT_SUPPORTED
        if not self.faults.wddm:
            reasons["driver_model"] = Reason.NOT_SUPPORTED
        static_groups = PLATFORM_STATIC_UNSUPPORTED.get(model.platform or "", frozenset())
        if index in self.faults.vgpu:
            static_groups |= PLATFORM_STATIC_UNSUPPORTED["vgpu"]
        reasons.update(dict.fromkeys(static_groups, Reason.NOT_SUPPORTED))
        if self._lost(index, self._clock()):
            for name in list(values):
                if name not in _IDENTITY_FIELDS:
                    values.pop(name)
                    reasons[name] = Reason.LOST
        for name in reasons:
            values.pop(name, None)
        instances = self._instances(index) if "uuid" in values and "mig_mode" not in reasons else ()
        return GpuStatic(index=index, mig_instances=instances, unavailable=freeze(reasons), **values)  # type: ignore[arg-type]

    def _mig_layout(self, index: int) -> int | str | None:
        """GPU ``index``'s ``mig=`` setting: an instance count, "pending", or None (MIG off)."""
        return self.faults.on_gpu(self.faults.mig, index) if self.model.mig else None

    def _instances(self, index: int) -> tuple[MigInstance, ...]:
        """The MIG instances of GPU ``index`` (none when MIG is off or only pending)."""
        layout = self._mig_layout(index)
        if not isinstance(layout, int):
            return ()
        return mig_instances(self.model, index, layout, self.seed)

    # ----------------------------------------------------------------- jobs

    def _real_job(self, k: int, pid: int) -> _Job:
        rng = random.Random(f"real/{self.seed}/{pid}")
        start = process_start_time(pid)
        if start is None:  # gone already, or not ours to read: as if it started with the simulation
            start = self._t0
        return _Job(
            pid=pid,
            gpu=k % self._gpus,
            workload=WORKLOADS[0],
            user="",
            uid=-1,
            start=start,
            end=math.inf,
            memory_fraction=rng.uniform(0.05, 0.2),
            intensity=rng.uniform(0.2, 0.5),
            cpu_percent=0.0,
            rss=0,
            phase=rng.uniform(0, 2 * math.pi),
            real=True,
        )

    def _new_job(self, gpu: int, slot: int, serial: int, start: float) -> _Job:
        rng = random.Random(f"job/{self.seed}/{gpu}/{slot}/{serial}")
        if self._workloads is not None:  # chosen by the caller: in order, one per slot
            workload = self._workloads[(gpu * self._slots + slot + serial) % len(self._workloads)]
        else:
            pool = WORKLOADS + (GRAPHICS_WORKLOADS if self.model.graphics else ())
            workload = pool[0] if slot == 0 and serial == 0 else rng.choice(pool)
            if self.model.graphics and slot == self._slots - 1 and serial == 0:
                workload = GRAPHICS_WORKLOADS[0]  # a display server on boards that drive displays
        users = (self._viewer, self._viewer, *USERS)
        user = users[rng.randrange(len(users))]
        uid = self._viewer_uid if user == self._viewer else 1001 + USERS.index(user)
        low, high = workload.lifetime_s
        lifetime = rng.uniform(low, high) * (3.0 if slot == 0 else 1.0) * self._lifetime_scale
        pid = rng.randrange(2000, 99999)
        while pid in self._real_pids:
            pid += 1
        # Every owner kind in turn across the GPUs' slots (so one screen shows them all), names from the seed.
        owner_rng = random.Random(f"owner/{self.seed}/{gpu}/{slot}/{serial}")
        if workload is GRAPHICS_WORKLOADS[0]:
            owner, ns_pid, visible = DISPLAY_OWNER, None, None
        else:
            kind = OWNER_KINDS[(slot * max(1, self._gpus) + gpu + serial) % len(OWNER_KINDS)]
            owner, ns_pid, visible = sim_owner(kind, owner_rng, uid=uid, gpu=gpu)
        return _Job(
            pid=pid,
            gpu=gpu,
            workload=workload,
            user=user,
            uid=uid,
            start=start,
            end=start + lifetime,
            memory_fraction=rng.uniform(*workload.memory_fraction) * (1.0 if slot == 0 else 0.25) * self._load(gpu),
            intensity=rng.uniform(*workload.intensity) * (1.0 if slot == 0 else 0.5) * self._load(gpu),
            cpu_percent=rng.uniform(*workload.cpu_percent),
            rss=int(rng.uniform(*workload.host_memory_gib) * GIB),
            phase=rng.uniform(0, 2 * math.pi),
            vanished=self.faults.vanished and rng.random() < 0.3,
            owner=owner,
            ns_pid=ns_pid,
            cuda_visible_devices=visible,
        )

    def _load(self, gpu: int) -> float:
        """How busy a GPU's jobs are (0.3..1): real nodes mix saturated and half-idle GPUs."""
        draw: float = random.Random(f"load/{self.seed}/{gpu}").random() ** 0.5  # float ** float is typed Any
        return 0.3 + 0.7 * draw

    def _schedule(self, gpu: int, slot: int, now: float) -> list[_Job]:
        """Jobs of one slot up to ``now`` (generated lazily; only recent ones kept)."""
        jobs = self._schedules.get((gpu, slot))
        if jobs is None:
            rng = random.Random(f"slot/{self.seed}/{gpu}/{slot}")
            first = self._new_job(gpu, slot, 0, self._t0)
            age = rng.uniform(0.1, 0.8) * (first.end - first.start)  # already running for a while
            first.start -= age
            first.end -= age
            if not self._steady and rng.random() < (0.2 if slot == 0 else 0.4):  # some start empty: idle GPUs
                gap = rng.uniform(5, 60) * self._lifetime_scale
                first.start, first.end = self._t0 + gap, self._t0 + gap + (first.end - first.start)
            jobs = self._schedules[(gpu, slot)] = [first]
        serial = len(jobs)
        while jobs[-1].end <= now:
            rng = random.Random(f"gap/{self.seed}/{gpu}/{slot}/{serial}")
            gap = 0.0 if self._steady else rng.uniform(3, 45) * self._lifetime_scale
            jobs.append(self._new_job(gpu, slot, serial, jobs[-1].end + gap))
            serial += 1
        if len(jobs) > 4:
            del jobs[:-4]
        return jobs

    def _jobs(self, gpu: int, now: float) -> list[_Job]:
        """The jobs alive on ``gpu`` at ``now`` (signalled jobs have ended).

        One collection asks several times within microseconds (sample, processes,
        host facts): the simulated jobs are reused for 10 ms of simulated time,
        which no job lifetime comes close to (a signal or a pid reuse clears
        them). Real processes are checked every time.
        """
        with self._gpu_locks[gpu]:
            cached = self._jobs_cache.get(gpu)
            if cached is not None and 0.0 <= now - cached[0] < 0.01:
                simulated = cached[1]
            else:
                simulated = []
                for slot in range(self._slots):
                    for job in self._schedule(gpu, slot, now):
                        job = self._replaced.get((job.pid, job.start), job)
                        if job.alive(now) and (job.pid, job.start) not in self._killed:
                            simulated.append(job)
                for job in self._fault_jobs_of(gpu):
                    job = self._replaced.get((job.pid, job.start), job)
                    if job.alive(now) and (job.pid, job.start) not in self._killed:
                        simulated.append(job)
                self._jobs_cache[gpu] = (now, simulated)
        # A real pid is listed while it runs: NVML stops listing a process once it exits (a zombie has).
        real = [
            job
            for job in self._real_jobs
            if job.gpu == gpu and (job.pid, job.start) not in self._killed and running_not_zombie(job.pid)
        ]
        return simulated + real if real else simulated

    def _fault_jobs_of(self, gpu: int) -> list[_Job]:
        """The jobs the idle-held and stuck faults add to ``gpu`` (made once, kept while the fault is on)."""
        jobs = []
        for fault, on in (("idle-held", self.faults.idle_held), ("stuck", self.faults.stuck)):
            if gpu in on:
                job = self._fault_jobs.get((fault, gpu))
                if job is None:
                    job = self._fault_jobs[(fault, gpu)] = self._fault_job(fault, gpu)
                jobs.append(job)
        return jobs

    def _fault_job(self, fault: str, gpu: int) -> _Job:
        """A long-lived job: a forgotten notebook holding memory (idle-held), a deadlocked torchrun rank (stuck).

        Both started hours before the clock's start and never end by themselves:
        the health rules judge them by how long they have been idle or stuck.
        """
        rng = random.Random(f"{fault}/{self.seed}/{gpu}")
        users = (self._viewer, *USERS)
        user = users[rng.randrange(len(users))]
        uid = self._viewer_uid if user == self._viewer else 1001 + USERS.index(user)
        total = self.model.memory_mib * MIB
        fixed = None
        if fault == "idle-held":
            workload = WORKLOADS[4]  # a notebook kernel
            base, kind = _IDLE_HELD_PIDS, OwnerKind.USER_SESSION
            start = self._t0 - rng.uniform(3, 20) * 3600
            fixed = max(_IDLE_HELD_MIN_BYTES, int(rng.uniform(0.1, 0.3) * total)) // MIB * MIB
            memory_fraction, intensity, cpu = 0.0, 0.0, rng.uniform(0.1, 1.0)
        else:
            workload = WORKLOADS[1]  # torch.distributed.run: a collective that waits for a rank forever
            base, kind = _STUCK_PIDS, OwnerKind.SLURM
            start = self._t0 - rng.uniform(1, 6) * 3600
            memory_fraction, intensity, cpu = rng.uniform(0.5, 0.7), 1.0, rng.uniform(98, 101)
        pid = base + gpu * _PIDS_PER_GPU + rng.randrange(_PIDS_PER_GPU)
        while pid in self._real_pids:
            pid += 1
        owner, ns_pid, visible = sim_owner(kind, random.Random(f"{fault}-owner/{self.seed}/{gpu}"), uid=uid, gpu=gpu)
        return _Job(
            pid=pid,
            gpu=gpu,
            workload=workload,
            user=user,
            uid=uid,
            start=start,
            end=math.inf,
            memory_fraction=memory_fraction,
            intensity=intensity,
            cpu_percent=cpu,
            rss=int(rng.uniform(*workload.host_memory_gib) * GIB),
            phase=rng.uniform(0, 2 * math.pi),
            owner=owner,
            ns_pid=ns_pid,
            cuda_visible_devices=visible,
            fixed_bytes=fixed,
        )

    def _find_job(self, pid: int, now: float) -> _Job | None:
        for gpu in range(self._gpus):
            for job in self._jobs(gpu, now):
                if job.pid == pid:
                    return job
        return None

    # ----------------------------------------------------------------- dynamic values

    def _utilization(self, gpu: int, now: float, jobs: list[_Job]) -> float:
        if gpu in self.faults.stuck:
            return 100.0  # kernels "running": a deadlocked collective spins
        phi = 1.3 * gpu + 0.4 + self.seed
        compute = [j for j in jobs if j.workload.kind != "G"]
        if not compute:
            return 1.0 + 1.0 * (1 + math.sin(now / 7.0 + phi)) if jobs else 0.0
        demand = min(1.0, sum(j.intensity * j.ramp(now) for j in compute))
        wobble = 7 * math.sin(2 * math.pi * now / 47 + phi) + 4 * math.sin(2 * math.pi * now / 11.3 + 1.7 * phi)
        return max(0.0, min(100.0, 92 * demand + wobble))

    def _memory(self, gpu: int, now: float, jobs: list[_Job]) -> dict[int, int]:
        """Bytes per job (keyed by ``id``); the sum never exceeds what the GPU (or each MIG instance) has."""
        instances = self._instances(gpu)
        if not instances:
            return self._share_memory(now, jobs, self.model.memory_mib * MIB)
        found: dict[int, int] = {}
        for instance in instances:
            mine = [j for j in jobs if instance_of(j.pid, instances) is instance]
            found.update(self._share_memory(now, mine, instance.memory_total_bytes or 0, whole=False))
        return found

    def _mig_used(self, gpu: int, now: float, jobs: list[_Job]) -> dict[int, int]:
        """Bytes the processes of each MIG instance hold, by MIG device index."""
        instances = self._instances(gpu)
        memory = self._memory(gpu, now, jobs)
        used: dict[int, int] = {}
        for job in jobs:
            instance = instance_of(job.pid, instances)
            if instance is not None:
                used[instance.index] = used.get(instance.index, 0) + memory[id(job)]
        return used

    def _share_memory(self, now: float, jobs: list[_Job], total: int, *, whole: bool = True) -> dict[int, int]:
        """Bytes per job within ``total`` (a GPU, or a MIG instance: ``whole=False`` keeps no GPU reserve)."""
        usable = total - total // 150 - 256 * MIB if whole else total - 64 * MIB
        fixed = {id(j): self._memory_override[j.pid] for j in jobs if j.pid in self._memory_override}
        fixed.update({id(j): j.fixed_bytes for j in jobs if j.fixed_bytes is not None and id(j) not in fixed})
        share = 1.0 if whole else 2.0  # a job on a slice fills more of it: it was sized for the slice
        wanted = {
            id(j): min(1.0, j.memory_fraction * share) * total * j.ramp(now) * (1 + 0.02 * math.sin(now / 13 + j.phase))
            for j in jobs
            if id(j) not in fixed
        }
        room = max(0, usable - sum(fixed.values()))
        scale = min(1.0, room / sum(wanted.values())) if wanted else 1.0
        return {**{key: int(want * scale) // MIB * MIB for key, want in wanted.items()}, **fixed}

    def read_sample(self, index: int, groups: Collection[str]) -> Reading:
        self._driver_call(index)
        reading = Reading()
        self._count(*groups)
        now = self._clock()
        if index in self.faults.no_permission or self._lost(index, now):
            reason = Reason.NO_PERMISSION if index in self.faults.no_permission else Reason.LOST
            reading.lost = reason is Reason.LOST
            for group in groups:
                for name in SAMPLE_GROUPS[group]:
                    reading.unavailable[name] = reason
            return reading
        model = self.model
        jobs = self._jobs(index, now)
        util = self._utilization(index, now, jobs)
        work = _STUCK_WORK_PERCENT if index in self.faults.stuck else util  # what it really computes
        phi = 1.3 * index + self.seed
        total = model.memory_mib * MIB
        hot = index in self.faults.hot
        throttle = self.faults.on_gpu(self.faults.throttle, index)
        temperature = 31 + (model.slowdown_c - 43) * work / 100 + 2 * math.sin(now / 60 + phi)
        if hot:
            temperature = model.slowdown_c + 2 + math.sin(now / 9)
        if throttle is not None:
            temperature = throttle_temperature(model, throttle, temperature)
        limit = float(model.power_limit_w)
        power = limit * (0.09 + 0.82 * work / 100) * (1 + 0.015 * math.sin(now / 3.1 + phi))
        values = reading.values
        instances = self._instances(index)
        unsupported = self._platform_groups(index)
        if self._no_framebuffer(index):
            unsupported |= {"memory"}
        for group in groups:
            if instances and group in ("utilization", "codec"):  # not reported under MIG, as on real GPUs
                for name in SAMPLE_GROUPS[group]:
                    reading.unavailable[name] = Reason.NOT_SUPPORTED
                continue
            if group in unsupported or self.faults.is_unsupported(index, group):
                for name in SAMPLE_GROUPS[group]:
                    reading.unavailable[name] = Reason.NOT_SUPPORTED
                continue
            if group == "memory":
                reserved = total // 150
                used = sum(self._memory(index, now, jobs).values())
                if not jobs:
                    used = 0
                if instances:  # the parent's used memory is its instances' (each holds the driver's context)
                    used = sum(u.memory_used_bytes or 0 for u in mig_usage(instances, self._mig_used(index, now, jobs)))
                values["memory_used_bytes"] = used
                values["memory_reserved_bytes"] = reserved
                values["memory_free_bytes"] = total - reserved - used
            elif group == "mig":
                values["mig_usage"] = self._mig_usage(index, now, jobs, instances, phi) if instances else ()
            elif group == "gpm":
                if not gpm_supported(model):
                    for name in SAMPLE_GROUPS["gpm"]:
                        reading.unavailable[name] = Reason.NOT_SUPPORTED
                    continue
                memory_util = work * 0.55 + 5 * math.sin(now / 5 + phi) if util else 0.0
                rx = (work * 1.9 + 3) * MIB * (1 + 0.2 * math.sin(now / 2 + phi))
                tx = (work * 0.7 + 1) * MIB * (1 + 0.2 * math.cos(now / 2 + phi))
                link = float(model.nvlinks) * work / 100 * 0.2 * 25e9 if model.nvlinks else 0.0
                values.update(
                    gpm_values(
                        util=util,
                        memory_util=memory_util,
                        decoder=100 * min(1.0, sum(j.workload.decoder for j in jobs)),
                        tensor_share=self._tensor_share(index),
                        stuck=index in self.faults.stuck,
                        now=now,
                        phase=phi,
                        pcie_rx=rx,
                        pcie_tx=tx,
                        nvlink_rx=link,
                        nvlink_tx=link * 0.97,
                    )
                )
                absurd = self.faults.on_gpu(self.faults.gpm_absurd, index)
                if absurd is not None:
                    values.update(absurd_gpm_values(absurd, GPM_FIELDS))
            elif group == "utilization":
                values["utilization_gpu_percent"] = round(util)
                values["utilization_memory_percent"] = round(work * 0.55 + 5 * math.sin(now / 5 + phi)) if util else 0
            elif group == "codec":
                values["encoder_percent"] = round(100 * min(1.0, sum(j.workload.encoder for j in jobs)))
                values["decoder_percent"] = round(100 * min(1.0, sum(j.workload.decoder for j in jobs)))
            elif group == "temperature":
                values["temperature_c"] = round(temperature)
            elif group == "fan":
                if model.fans:
                    values["fan_percent"] = round(30 + 0.55 * work)
                else:
                    reading.unavailable["fan_percent"] = Reason.NOT_SUPPORTED
            elif group == "power":
                values["power_draw_w"] = round(min(power, limit), 2)
            elif group == "power_limit":
                values["power_limit_w"] = limit
            elif group == "energy":
                values["energy_mj"] = self._energy_at(index, now, power)
            elif group == "pstate":
                values["pstate"] = 0 if jobs else 8
            elif group == "clocks":
                values["clock_sm_mhz"] = model.sm_max_mhz if util >= 5 else model.sm_idle_mhz
                if hot:
                    values["clock_sm_mhz"] = int(model.sm_max_mhz * 0.6)
                if throttle is not None:
                    values["clock_sm_mhz"] = capped_sm_clock(model, throttle, values["clock_sm_mhz"])
                values["clock_mem_mhz"] = model.mem_max_mhz if jobs else model.mem_idle_mhz
            elif group == "ecc":
                if not model.ecc:
                    for name in SAMPLE_GROUPS["ecc"]:
                        reading.unavailable[name] = Reason.NOT_SUPPORTED
                    continue
                corrected = (self.seed + index * 7) % 3
                uncorrected = 3 if index in self.faults.ecc_errors else 0
                values.update(
                    ecc_mode=True,
                    ecc_corrected_volatile=corrected,
                    ecc_uncorrected_volatile=uncorrected,
                    ecc_corrected_aggregate=corrected + 12 * index,
                    ecc_uncorrected_aggregate=uncorrected,
                )
            elif group == "throttle":
                reasons: list[str] = []
                if util < 5:
                    reasons.append("gpu_idle")
                if power >= 0.9 * limit:
                    reasons.append("sw_power_cap")
                if hot:
                    reasons += ["sw_thermal_slowdown", "hw_thermal_slowdown"]
                values["throttle_reasons"] = tuple(reasons) if throttle is None else decode_throttle_reasons(throttle)
            elif group == "pcie":
                values["pcie_rx_bytes_per_s"] = int((work * 1.9 + 3) * MIB * (1 + 0.2 * math.sin(now / 2 + phi)))
                values["pcie_tx_bytes_per_s"] = int((work * 0.7 + 1) * MIB * (1 + 0.2 * math.cos(now / 2 + phi)))
            elif group == "modes":
                values["persistence_mode"] = model.ecc  # datacenter boards run persistence mode
                values["compute_mode"] = "Default"
            else:
                found = self._health_values(group, index, now=now, util=util, work=work, phi=phi) or {}
                values.update(found)
                for name in SAMPLE_GROUPS[group]:
                    if name not in found:  # the board lacks it (no row remapping before Ampere, ...)
                        reading.unavailable[name] = Reason.NOT_SUPPORTED
        return reading

    def _tensor_share(self, gpu: int) -> float:
        """The share of SM time GPU ``gpu``'s jobs spend on tensor pipes (0.1-0.6, fixed per GPU)."""
        return 0.1 + 0.5 * random.Random(f"tensor/{self.seed}/{gpu}").random()

    def _mig_usage(
        self, gpu: int, now: float, jobs: list[_Job], instances: tuple[MigInstance, ...], phase: float
    ) -> tuple[MigUsage, ...]:
        """Each instance's memory and, on Hopper and newer, its own GPM activity."""
        usage = mig_usage(instances, self._mig_used(gpu, now, jobs))
        busy = {instance.index for j in jobs if (instance := instance_of(j.pid, instances)) is not None}
        by_index = {m.index: m for m in instances}
        if not gpm_supported(self.model):
            reasons = freeze(dict.fromkeys(MIG_GPM_FIELDS, Reason.NOT_SUPPORTED))
            return tuple(dataclasses.replace(u, unavailable=reasons) for u in usage)
        share = self._tensor_share(gpu)
        absurd = self.faults.on_gpu(self.faults.gpm_absurd, gpu)
        return tuple(
            dataclasses.replace(
                u,
                **(
                    mig_gpm_values(by_index[u.index], busy=u.index in busy, tensor_share=share, now=now, phase=phase)
                    if absurd is None
                    else absurd_gpm_values(absurd, MIG_GPM_FIELDS)
                ),
            )
            for u in usage
        )

    def _health_values(
        self, group: str, index: int, *, now: float, util: float, work: float, phi: float
    ) -> dict[str, object] | None:
        """A health group's values (see :mod:`.sim_health`); None: the board (or the simulation) lacks it."""
        model, faults = self.model, self.faults
        if group == "remapped_rows":
            return remapped_rows_values(model, faults, index)
        if group == "retired_pages":
            return retired_pages_values(model, faults, index)
        if group == "pcie_link":
            return pcie_link_values(model, faults, index, util, now - self._t0)
        if group == "nvlink":
            return nvlink_values(
                model, faults, index, gpus=self._gpus, now=now, work_percent=work, phase=phi, bus_id=self._bus_id
            )
        return None  # a group the simulation does not know (yet): NotSupported, as an older driver says

    def _energy_at(self, gpu: int, now: float, power_w: float) -> int:
        """Total energy in mJ: monotonic, the integral of the power readings (trapezoid)."""
        previous = self._energy.get(gpu)
        if previous is None:
            uptime = 3 * 86400 + 3600 * gpu  # as if the driver loaded a few days ago
            energy = power_w * 0.35 * uptime * 1000
        else:
            last_t, last_e = previous
            energy = last_e + max(0.0, now - last_t) * power_w * 1000
        self._energy[gpu] = (now, energy)
        return int(energy)

    # ----------------------------------------------------------------- processes

    def read_processes(self, index: int, utilization: bool = True) -> ProcessReading:
        self._driver_call(index)
        self._count("processes")
        faults = self.faults
        now = self._clock()
        if index in faults.no_permission:
            return ProcessReading(unavailable=Reason.NO_PERMISSION)
        if self._lost(index, now):
            return ProcessReading(unavailable=Reason.LOST, lost=True)
        if faults.is_unsupported(index, "processes"):
            return ProcessReading(unavailable=Reason.NOT_SUPPORTED)
        jobs = self._jobs(index, now)
        memory = self._memory(index, now, jobs)
        util = self._utilization(index, now, jobs)
        stuck = index in faults.stuck
        instances = self._instances(index)
        util_supported = (
            not faults.is_unsupported(index, "process_utilization")
            and "process_utilization" not in self._platform_groups(index)
            and not instances
        )
        memory_na = faults.no_process_memory or faults.wddm  # WDDM and WSL2 drivers report no per-process memory
        if jobs and utilization:
            self._count("process_utilization")
        demand = sum(j.intensity * j.ramp(now) for j in jobs if j.workload.kind != "G") or 1.0
        processes = []
        for job in jobs:
            sm = mem_util = enc = dec = None
            instance = instance_of(job.pid, instances)
            if util_supported:
                share = 0.0 if job.workload.kind == "G" else job.intensity * job.ramp(now) / demand
                if stuck:  # every rank spins in the collective: each looks fully busy (an idle-held one stays idle)
                    share = 0.0 if job.workload.kind == "G" or job.fixed_bytes is not None else 1.0
                sm = round(util * share)
                mem_util = 0 if stuck else round(util * share * 0.5)
                enc = round(100 * job.workload.encoder)
                dec = round(100 * job.workload.decoder)
            processes.append(
                RawGpuProcess(
                    pid=job.pid,
                    type=ProcessType(job.workload.kind),
                    gpu_memory_bytes=None if memory_na else memory[id(job)],
                    sm_percent=sm,
                    memory_percent=mem_util,
                    encoder_percent=enc,
                    decoder_percent=dec,
                    gpu_instance_id=None if instance is None else instance.gpu_instance_id,
                    compute_instance_id=None if instance is None else instance.compute_instance_id,
                )
            )
        return ProcessReading(processes=processes)

    def pids_are_foreign(self) -> bool:
        return self.faults.foreign

    def open_events(self) -> EventStream:
        """The ``xid=`` faults' events, each delivered once when the clock reaches it (:class:`SimEventStream`)."""
        return SimEventStream(clock=self._clock, opened_at=self._t0, faults=self.faults, gpus=self._gpus)

    def inspect_processes(self, pids: Collection[int]) -> dict[int, HostProcess | None]:
        self._driver_call()
        now = self._clock()
        real = [pid for pid in pids if pid in self._real_pids]
        result: dict[int, HostProcess | None] = dict(self._inspector.inspect(real)) if real else {}
        wanted = {pid for pid in pids if pid not in self._real_pids}
        if not wanted:
            return result
        by_pid: dict[int, _Job] = {}
        for gpu in range(self._gpus):
            for running in self._jobs(gpu, now):
                if running.pid in wanted:
                    by_pid.setdefault(running.pid, running)
        for pid in wanted:
            job = by_pid.get(pid)
            if job is None or job.vanished:
                result[pid] = None
                continue
            result[pid] = self._host_process(job, now)
        return result

    def _host_process(self, job: _Job, now: float) -> HostProcess:
        denied = self.faults.access_denied and job.user != self._viewer
        cpu = max(0.0, job.cpu_percent * job.ramp(now) * (1 + 0.1 * math.sin(now / 4 + job.phase)))
        reasons = {"user": Reason.NO_PERMISSION, "command": Reason.NO_PERMISSION} if denied else {}
        parents = self._parents(job)
        return HostProcess(
            pid=job.pid,
            user=None if denied else job.user,
            uid=job.uid,
            name=None if denied else job.workload.command.split()[0].rsplit("/", 1)[-1],
            command=None if denied else job.workload.command,
            cpu_percent=round(cpu, 1),
            host_memory_bytes=int(job.rss * job.ramp(now)),
            create_time=job.start,
            unavailable=freeze(reasons),
            owner=job.owner,
            ns_pid=job.ns_pid,
            cuda_visible_devices=None if denied else job.cuda_visible_devices,
            ppid=parents[0].pid if parents else 1,
            parents=parents,
        )

    # ----------------------------------------------------------------- parents and details

    def _parents(self, job: _Job) -> tuple[ProcessRelative, ...]:
        """A simulated process's ancestors (nearest first, pid 1 not included), as its owner would have them.

        A pure function of the seed and the job, made once per job: a container's
        process runs under its containerd shim (conmon for podman), a Slurm step under
        slurmstepd, a session's under bash and sshd, a notebook kernel under
        jupyter-lab, a service's under systemd (none here), a display server under gdm;
        the ranks of the stuck fault share one torchrun launcher, and every session one
        sshd daemon. Other ancestors take the pids just below their process's.
        """
        if job.parents is not None:
            return job.parents
        owner = job.owner
        user = job.user

        def near(step: int, name: str, who: str | None = user) -> ProcessRelative:
            return ProcessRelative(job.pid - step, name, who)

        kind = None if owner is None else owner.kind
        chain: tuple[ProcessRelative, ...]
        if job.real:
            chain = ()
        elif owner is DISPLAY_OWNER:
            chain = (near(1, "gdm-x-session"), near(2, "gdm-session-wor", "root"))
        elif kind in (OwnerKind.KUBERNETES, OwnerKind.DOCKER):
            chain = (near(1, "containerd-shim", "root"),)
        elif kind is OwnerKind.PODMAN:
            chain = (near(1, "conmon"),)
        elif kind is OwnerKind.SLURM:
            step = f"{owner.job}.{owner.step}" if owner is not None else "?"
            chain = (near(1, f"slurmstepd: [{step}]", "root"),)
            if job is self._fault_jobs.get(("stuck", job.gpu)):  # every stuck rank: one launcher, one step
                launcher = random.Random(f"launcher/{self.seed}")
                first = self._fault_jobs.get(("stuck", min(self.faults.stuck)))
                chain = (
                    ProcessRelative(_STUCK_PIDS - 2 - launcher.randrange(100), "torchrun", (first or job).user),
                    ProcessRelative(_STUCK_PIDS - 1, "slurmstepd: [stuck.0]", "root"),
                )
        elif kind is OwnerKind.USER_SESSION:
            sshd = ProcessRelative(800 + random.Random(f"sshd/{self.seed}").randrange(99), "sshd", "root")
            chain = (near(1, "bash"), near(2, "sshd"), sshd)
            if job.workload is WORKLOADS[4]:  # a notebook kernel
                chain = (near(1, "jupyter-lab"), near(2, "bash"), near(3, "sshd"), sshd)
        elif kind is OwnerKind.HOST:
            chain = (near(1, "bash"), near(2, "tmux: server"))
        else:  # a service: systemd (pid 1) is its parent
            chain = ()
        job.parents = chain
        return chain

    def process_details(self, pid: int, create_time: float | None) -> ProcessDetails | None:
        """A real pid's details from psutil; a simulated one's made up, deterministic (see :meth:`_parents`).

        Another user's working directory, executable and environment are unreadable with the
        ``access-denied`` fault, as they are on a real host for anyone but root.
        """
        self._driver_call(hang_only=True)  # host facts: only the hang fault holds them up
        if self.faults.foreign:
            return None
        if pid in self._real_pids:
            return read_process_details(pid, create_time)
        now = self._clock()
        job = self._find_job(pid, now)
        if job is None or job.vanished or create_time is None or abs(job.start - create_time) > 1e-3:
            return None
        return self._details(job, now)

    def _details(self, job: _Job, now: float) -> ProcessDetails:
        rng = random.Random(f"details/{self.seed}/{job.pid}/{job.start}")
        argv = tuple(job.workload.command.split())
        head = argv[0]
        exe = head if head.startswith("/") else "/usr/bin/python3.11" if head == "python" else f"/usr/bin/{head}"
        owner = job.owner
        kind = None if owner is None else owner.kind
        if kind in (OwnerKind.KUBERNETES, OwnerKind.DOCKER, OwnerKind.PODMAN):
            cwd = "/workspace"
        elif kind is OwnerKind.SLURM:
            cwd = f"/scratch/{job.user}/{owner.name if owner is not None and owner.name else 'job'}"
        elif kind is OwnerKind.SYSTEMD_SERVICE:
            cwd = "/"
        elif job.workload is WORKLOADS[4]:
            cwd = f"/home/{job.user}/notebooks"
        else:
            cwd = f"/home/{job.user}/projects/{head.rsplit('/', 1)[-1]}"
        children: list[ProcessRelative] = []
        if job.workload.kind != "G" and job.workload.command.startswith(("python", "/opt/conda/bin/python")):
            workers = rng.randrange(0, 5)  # DataLoader workers: plain host processes
            children = [ProcessRelative(job.pid + 1 + k, "pt_data_worker", job.user) for k in range(workers)]
        for gpu in range(self._gpus):  # GPU processes started by this one (none in the schedules, but real pids)
            for other in self._jobs(gpu, now):
                mine = other.pid != job.pid and self._parents(other)[:1]
                if mine and mine[0].pid == job.pid:
                    children.append(ProcessRelative(other.pid, other.workload.command.split()[0], other.user))
        denied = self.faults.access_denied and job.user != self._viewer and not self._root
        hidden = ("exe", "cwd", "cuda_visible_devices") if denied else ()
        parents = (*self._parents(job), ProcessRelative(1, "systemd", "root"))
        return ProcessDetails(
            pid=job.pid,
            create_time=job.start,
            cmdline=argv,
            exe=None if denied else exe,
            cwd=None if denied else cwd,
            user=job.user,
            uid=job.uid,
            status="running" if job.intensity > 0 else "sleeping",
            threads=rng.randrange(8, 96),
            parents=parents,
            children=tuple(sorted(children, key=lambda child: child.pid)),
            children_count=len(children),
            cuda_visible_devices=None if denied else job.cuda_visible_devices,
            environ_readable=not denied,
            unavailable=freeze(dict.fromkeys(hidden, Reason.NO_PERMISSION)),
        )

    # ----------------------------------------------------------------- acting on processes

    def send_signal(self, pid: int, create_time: float | None, signum: int) -> SignalOutcome:
        if self.faults.foreign:
            return SignalOutcome(False, f"pid {pid} belongs to another PID namespace (container); nothing sent")
        if pid in self._real_pids:
            return send_signal_checked(pid, create_time, signum)
        now = self._clock()
        job = self._find_job(pid, now)
        name = signal_name(signum)
        if job is None or job.vanished:
            return SignalOutcome(False, f"pid {pid} has already exited; nothing sent")
        if create_time is None or abs(job.start - create_time) > 1e-3:
            return SignalOutcome(
                False,
                f"pid {pid} now belongs to another process ({job.workload.command.split()[0]}); "
                "the one you chose has exited; nothing sent",
            )
        if job.user != self._viewer and not self._root:
            return SignalOutcome(False, f"not permitted to send {name} to pid {pid} (owned by {job.user})")
        self._killed.add((job.pid, job.start))
        self._jobs_cache.clear()
        return SignalOutcome(True, f"sent {name} to pid {pid} ({job.workload.command.split()[0]})")

    # ----------------------------------------------------------------- fault controls

    def set_lost(self, index: int, lost: bool = True) -> None:
        """Make GPU ``index`` fall off the bus (or come back)."""
        if lost:
            self.faults.lost.add(index)
        else:
            self.faults.lost.discard(index)

    def set_process_memory(self, pid: int, size: int | None) -> None:
        """Make the real process ``pid`` use exactly ``size`` bytes of GPU memory (None: simulated again).

        Lets tests and demos of the Python API change "this process's" memory
        during a tracked call; the GPU's used memory follows.
        """
        if pid not in self._real_pids:
            raise ValueError(f"pid {pid} is not one of the real pids this simulation reports")
        if size is None:
            self._memory_override.pop(pid, None)
        else:
            self._memory_override[pid] = int(size)

    def simulate_pid_reuse(self, pid: int) -> float | None:
        """End the simulated process ``pid`` and start another one under the same pid (tests).

        Returns the new process's create time, or None if no such simulated process.
        """
        now = self._clock()
        job = self._find_job(pid, now)
        if job is None or job.real:
            return None
        newer = _Job(**{slot: getattr(job, slot) for slot in _Job.__slots__})
        newer.start = now if now > job.start else job.start + 1.0
        newer.workload = WORKLOADS[4]
        self._replaced[(job.pid, job.start)] = newer
        self._jobs_cache.clear()
        return newer.start
