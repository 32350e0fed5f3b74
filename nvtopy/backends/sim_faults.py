"""Faults the simulated backend can inject: every failure the NVML backend must survive.

Spec syntax (``--demo-fault``, repeatable): ``NAME[=ARG][@GPUS]``, GPUS being
``1``, ``0,2``, ``1-3`` or ``all`` (the default). Examples::

    lost@1                      GPU 1 fell off the bus (dynamic queries: GpuIsLost)
    no-permission@2             opening GPU 2 is denied (cgroups)
    unsupported=fan+power@0     NotSupported for those field groups on GPU 0
    unsupported=processes       process lists NotSupported everywhere
    no-process-memory           per-process memory reported as N/A (MIG, WDDM)
    access-denied               processes of other users: user/command unreadable
    vanished                    some listed pids no longer exist on the host
    foreign                     pids from another PID namespace (container)
    ecc@3                       uncorrected ECC errors on GPU 3
    hot@0                       GPU 0 runs above its slowdown temperature
    slow=3                      every backend call takes 3 s (a slow or stuck driver)
    slow=0.5@1                  calls on GPU 1 take 0.5 s

A GPU the simulation lacks, an ``=ARG`` or ``@GPUS`` a fault cannot use, are errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import UsageError
from ..model import SAMPLE_GROUPS

__all__ = ["FAULT_NAMES", "SimFaults", "parse_fault_specs"]

# Groups that can be made NotSupported: the sample groups plus the process queries.
UNSUPPORTABLE = frozenset(SAMPLE_GROUPS) | {"processes", "process_utilization"}
ALL = None  # "every GPU"


@dataclass
class SimFaults:
    """Mutable on purpose: tests and the demo flip faults while the backend runs."""

    unsupported: dict[int | None, set[str]] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    lost_all: bool = False
    no_permission: set[int] = field(default_factory=set)
    no_process_memory: bool = False
    access_denied: bool = False
    vanished: bool = False
    foreign: bool = False
    ecc_errors: set[int] = field(default_factory=set)
    hot: set[int] = field(default_factory=set)
    # Seconds every backend call takes (a slow or stuck driver), per GPU; key None: every call,
    # also those bound to no GPU (opening the backend, host facts, the host's processes).
    slow: dict[int | None, float] = field(default_factory=dict)

    def latency(self, index: int | None = None) -> float:
        """Seconds a backend call on GPU ``index`` (None: bound to no GPU) takes."""
        every = self.slow.get(ALL, 0.0)
        return every if index is None else max(every, self.slow.get(index, 0.0))

    def is_unsupported(self, index: int, group: str) -> bool:
        return group in self.unsupported.get(index, ()) or group in self.unsupported.get(ALL, ())

    def is_lost(self, index: int) -> bool:
        return self.lost_all or index in self.lost


FAULT_NAMES = (
    "lost",
    "no-permission",
    "unsupported",
    "no-process-memory",
    "access-denied",
    "vanished",
    "foreign",
    "ecc",
    "hot",
    "slow",
)
_PER_GPU = frozenset({"lost", "no-permission", "unsupported", "ecc", "hot", "slow"})
_WITH_ARG = frozenset({"unsupported", "slow"})
MAX_GPUS = 256  # as many as --demo-gpus allows
MAX_SLOW_SECONDS = 3600.0


def _gpu_number(text: str, spec: str, gpus: int | None) -> int:
    try:
        number = int(text)
    except ValueError:
        raise UsageError(f"--demo-fault {spec!r}: bad GPU list (use 1, 0,2, 1-3 or all)") from None
    limit = MAX_GPUS if gpus is None else gpus
    if not 0 <= number < limit:
        if gpus is None:
            raise UsageError(f"--demo-fault {spec!r}: GPU {text} out of range (0-{MAX_GPUS - 1})")
        have = "no GPUs" if gpus == 0 else f"{gpus} GPU{'s' if gpus != 1 else ''}: 0-{gpus - 1}"
        raise UsageError(f"--demo-fault {spec!r}: no GPU {text} (the simulation has {have})")
    return number


def _parse_gpus(text: str, spec: str, gpus: int | None = None) -> list[int] | None:
    """The GPU indices of ``@GPUS`` (None: every GPU); each must exist when ``gpus`` (the count) is known."""
    if text.lower() == "all":
        return None
    result: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low_text, dash, high_text = part.partition("-")
        low = _gpu_number(low_text.strip(), spec, gpus)
        high = _gpu_number(high_text.strip(), spec, gpus) if dash else low
        if high < low:
            raise UsageError(f"--demo-fault {spec!r}: empty GPU range {part!r} (write it low-high, e.g. 1-3)")
        result.extend(range(low, high + 1))
    return result


def _slow_seconds(arg: str, spec: str) -> float:
    try:
        seconds = float(arg)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_SLOW_SECONDS:  # NaN fails this too
        raise UsageError(
            f"--demo-fault {spec!r}: give the seconds each backend call takes after '=', "
            f"more than 0 and at most {MAX_SLOW_SECONDS:g} (e.g. slow=3)"
        )
    return seconds


def parse_fault_specs(specs: Iterable[str], gpus: int | None = None) -> SimFaults:
    """Parse ``--demo-fault`` values; a bad one raises :class:`UsageError` naming it.

    ``gpus``: how many GPUs the simulation has, when known: a GPU it lacks is an
    error then (``lost@99`` on 4 GPUs would otherwise inject nothing, silently).
    Nothing is ignored silently either: an ``=ARG`` or ``@GPUS`` a fault cannot
    use is an error.
    """
    faults = SimFaults()
    every_gpu = range(MAX_GPUS if gpus is None else gpus)
    for spec in specs:
        body, at, gpu_text = spec.partition("@")
        name, equals, arg = body.partition("=")
        name = name.strip().lower()
        if name not in FAULT_NAMES:
            raise UsageError(f"--demo-fault: unknown fault {name!r} (known: {', '.join(FAULT_NAMES)})")
        if at and not gpu_text.strip():
            raise UsageError(f"--demo-fault {spec!r}: name the GPUs after '@' (1, 0,2, 1-3 or all)")
        selected = _parse_gpus(gpu_text.strip(), spec, gpus) if at else None
        if selected is not None and name not in _PER_GPU:
            raise UsageError(f"--demo-fault {spec!r}: {name} applies to every GPU (no '@GPUS')")
        if equals and name not in _WITH_ARG:
            raise UsageError(f"--demo-fault {spec!r}: {name} takes no '=' argument")
        if name == "unsupported":
            groups = {g.strip() for g in arg.split("+") if g.strip()}
            unknown = groups - UNSUPPORTABLE
            if not groups or unknown:
                raise UsageError(
                    f"--demo-fault {spec!r}: name field groups after '=' "
                    f"(one or more of {', '.join(sorted(UNSUPPORTABLE))}, joined with '+')"
                )
            for gpu in selected if selected is not None else [ALL]:
                faults.unsupported.setdefault(gpu, set()).update(groups)
        elif name == "slow":
            seconds = _slow_seconds(arg.strip(), spec)
            for gpu in selected if selected is not None else [ALL]:
                faults.slow[gpu] = seconds
        elif name == "lost":
            if selected is None:
                faults.lost_all = True
            else:
                faults.lost.update(selected)
        elif name in ("no-permission", "ecc", "hot"):
            target = {"no-permission": faults.no_permission, "ecc": faults.ecc_errors, "hot": faults.hot}[name]
            target.update(selected if selected is not None else every_gpu)
        else:
            setattr(faults, name.replace("-", "_"), True)
    return faults
