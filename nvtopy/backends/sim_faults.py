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
)


def _parse_gpus(text: str, spec: str) -> list[int] | None:
    if text in ("", "all"):
        return None
    result: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                result.extend(range(low, high + 1))
            else:
                result.append(int(part))
        except ValueError:
            raise UsageError(f"--demo-fault {spec!r}: bad GPU list {text!r} (use 1, 0,2, 1-3 or all)") from None
    return result


def parse_fault_specs(specs: Iterable[str]) -> SimFaults:
    """Parse ``--demo-fault`` values; a bad one raises :class:`UsageError` naming it."""
    faults = SimFaults()
    for spec in specs:
        body, _, gpu_text = spec.partition("@")
        name, _, arg = body.partition("=")
        name = name.strip().lower()
        gpus = _parse_gpus(gpu_text.strip(), spec)
        if name not in FAULT_NAMES:
            raise UsageError(f"--demo-fault: unknown fault {name!r} (known: {', '.join(FAULT_NAMES)})")
        if name == "unsupported":
            groups = {g.strip() for g in arg.split("+") if g.strip()}
            unknown = groups - UNSUPPORTABLE
            if not groups or unknown:
                raise UsageError(
                    f"--demo-fault {spec!r}: name field groups after '=' "
                    f"(one or more of {', '.join(sorted(UNSUPPORTABLE))}, joined with '+')"
                )
            for gpu in gpus if gpus is not None else [ALL]:
                faults.unsupported.setdefault(gpu, set()).update(groups)
        elif name == "lost":
            if gpus is None:
                faults.lost_all = True
            else:
                faults.lost.update(gpus)
        elif name in ("no-permission", "ecc", "hot"):
            target = {"no-permission": faults.no_permission, "ecc": faults.ecc_errors, "hot": faults.hot}[name]
            target.update(gpus if gpus is not None else range(64))
        else:
            setattr(faults, name.replace("-", "_"), True)
    return faults
