"""The one backend factory: which backend, with which settings, opened in one place.

Why one: the CLI (``--demo*`` options) and the Python API (``nvtopy.configure``,
``NVTOPY_BACKEND``) both ask for "NVML" or "simulated GPUs with these settings".
Each describes that as a :class:`BackendSpec` and opens it with :func:`open_backend`,
so the simulation's defaults (4 GPUs of an H100, 3 process slots, jobs that live a
quarter of their catalog lifetime) are written here and nowhere else.

Two steps, because opening NVML is as slow as the driver: building a spec
(:func:`nvml_spec`, :func:`simulated_spec`) checks every setting at once -- an
unknown or ambiguous model, a bad fault, a fault on a GPU the simulation lacks --
and touches no driver; :func:`open_backend` (or the function :func:`backend_opener`
returns, which the monitor calls on its poller thread) then opens it.

Importing this module is cheap: NVML and the simulation are imported when opened.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..records import dataclass
from .base import driver_in_words

if TYPE_CHECKING:
    from .base import Backend
    from .simulated.catalog import GpuModel
    from .simulated.faults import SimFaults

__all__ = [
    "BACKEND_NAMES",
    "DEMO_GPUS",
    "DEMO_LIFETIME_SCALE",
    "DEMO_MODEL",
    "DEMO_PROCESSES",
    "DEMO_SEED",
    "BackendSpec",
    "backend_kind",
    "backend_opener",
    "nvml_spec",
    "open_backend",
    "simulated_spec",
]

# The simulation's defaults, for the CLI and the API alike.
DEMO_GPUS = 4
DEMO_MODEL = "H100 80GB HBM3"
DEMO_SEED = 0
DEMO_PROCESSES = 3  # process slots per GPU
DEMO_LIFETIME_SCALE = 0.25  # jobs come and go within minutes, so a demo shows it

NVML = "nvml"
SIMULATED = "simulated"
# The names a user may give a backend (configure("sim"), NVTOPY_BACKEND=demo), by kind.
BACKEND_NAMES: Mapping[str, str] = MappingProxyType(
    {"nvml": NVML, "simulated": SIMULATED, "sim": SIMULATED, "demo": SIMULATED}
)


@dataclass(frozen=True)
class BackendSpec:
    """Which backend to open, with which settings; checked when built, opened by :func:`open_backend`.

    Build one with :func:`nvml_spec` or :func:`simulated_spec` (they check the
    settings and fill in the defaults). ``kind`` is ``"nvml"`` or ``"simulated"``;
    the other fields but ``close_at_exit`` only apply to the simulation.
    """

    kind: str = NVML
    close_at_exit: bool = True  # NVML: shut down at interpreter exit (False: the owner closes it, or nobody)
    gpus: int = DEMO_GPUS
    model: GpuModel | str = DEMO_MODEL
    seed: int = DEMO_SEED
    faults: SimFaults | None = None
    processes_per_gpu: int = DEMO_PROCESSES
    steady: bool = False  # every process slot always busy (exact counts, for benchmarks)
    lifetime_scale: float = DEMO_LIFETIME_SCALE
    real_pids: tuple[int, ...] = ()  # real processes shown as GPU processes of the simulation
    clock: Callable[[], float] | None = None  # None: the wall clock
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # further simulation keywords

    @property
    def waiting_for(self) -> str:
        """What a slow start waits for, in words (the monitor's status line)."""
        return driver_in_words(self.kind)


def backend_kind(name: str) -> str | None:
    """``"nvml"`` or ``"simulated"`` for a backend's name or alias (``sim``, ``demo``); ``None`` if unknown."""
    return BACKEND_NAMES.get(name)


def nvml_spec(*, close_at_exit: bool = True) -> BackendSpec:
    """The real GPUs, read through NVML."""
    return BackendSpec(NVML, close_at_exit=close_at_exit)


def simulated_spec(
    gpus: int | None = None,
    model: GpuModel | str | None = None,
    seed: int | None = None,
    *,
    faults: SimFaults | Iterable[str] | None = None,
    processes_per_gpu: int | None = None,
    steady: bool = False,
    lifetime_scale: float | None = None,
    real_pids: Iterable[int] = (),
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> BackendSpec:
    """Simulated GPUs; ``None`` means the default. Raises :class:`~nvtopy.errors.UsageError` now for a bad setting.

    ``model``: a catalog name or an unambiguous part of one. ``faults``: ``--demo-fault``
    specs (``["lost@1"]``, checked against ``gpus``) or a ready
    :class:`~nvtopy.backends.simulated.faults.SimFaults`. ``options``: further keywords of
    :class:`~nvtopy.backends.simulated.backend.SimulatedBackend` (``viewer``, ``hostname``, ...).
    """
    from .simulated.catalog import find_model
    from .simulated.faults import SimFaults, parse_fault_specs

    count = DEMO_GPUS if gpus is None else gpus
    chosen = DEMO_MODEL if model is None else model
    board = find_model(chosen) if isinstance(chosen, str) else chosen
    if isinstance(faults, SimFaults):
        parsed = faults
    else:
        parsed = parse_fault_specs(() if faults is None else list(faults), count, model=board)
    return BackendSpec(
        SIMULATED,
        gpus=count,
        model=board,
        seed=DEMO_SEED if seed is None else seed,
        faults=parsed,
        processes_per_gpu=DEMO_PROCESSES if processes_per_gpu is None else processes_per_gpu,
        steady=steady,
        lifetime_scale=DEMO_LIFETIME_SCALE if lifetime_scale is None else lifetime_scale,
        real_pids=tuple(real_pids),
        clock=clock,
        options=MappingProxyType(dict(options)),
    )


def open_backend(spec: BackendSpec) -> Backend:
    """Open the backend ``spec`` describes (NVML: ``nvmlInit``, as slow as the driver)."""
    if spec.kind == SIMULATED:
        from .simulated import backend as simulated

        settings: dict[str, Any] = {
            "gpus": spec.gpus,
            "model": spec.model,
            "seed": spec.seed,
            "faults": spec.faults,
            "processes_per_gpu": spec.processes_per_gpu,
            "steady": spec.steady,
            "lifetime_scale": spec.lifetime_scale,
        }
        if spec.real_pids:
            settings["real_pids"] = list(spec.real_pids)
        if spec.clock is not None:
            settings["clock"] = spec.clock
        settings.update(spec.options)
        return simulated.SimulatedBackend(**settings)
    if spec.kind != NVML:
        raise ValueError(f"unknown backend kind {spec.kind!r}")
    from .nvml.backend import NvmlBackend

    return NvmlBackend(close_at_exit=spec.close_at_exit)


def backend_opener(spec: BackendSpec) -> Callable[[], Backend]:
    """A function that opens ``spec``'s backend when called (the monitor calls it on its poller thread)."""
    return functools.partial(open_backend, spec)
