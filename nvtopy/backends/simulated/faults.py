"""Faults the simulated backend can inject: every failure the NVML backend must survive.

Spec syntax (``--demo-fault``, repeatable): ``NAME[=ARG][@GPUS]``, GPUS being
``1``, ``0,2``, ``1-3`` or ``all`` (the default). Examples::

    lost@1                      GPU 1 fell off the bus (dynamic queries: GpuIsLost)
    no-permission@2             opening GPU 2 is denied (cgroups)
    unsupported=fan+power@0     NotSupported for those field groups on GPU 0
    unsupported=processes       process lists NotSupported everywhere
    no-process-memory           per-process memory reported as N/A (MIG, WDDM)
    access-denied               processes of other users: user/command unreadable
    vanished                    some listed pids do not exist on the host (not visible here)
    foreign                     pids from another PID namespace (container)
    ecc@3                       uncorrected ECC errors on GPU 3
    hot@0                       GPU 0 runs above its slowdown temperature
    slow=3                      every backend call takes 3 s (a slow or stuck driver)
    slow=0.5@1                  calls on GPU 1 take 0.5 s

GPU health (the scenarios of fake-nvml's FAKE_NVML_* knobs, same semantics)::

    xid=N[:AFTER_S]             an Xid N event AFTER_S seconds (default 0) of the backend's clock
                                after it opened, delivered once to each open_events() stream (also to
                                a stream opened later); repeatable. xid=79 (fallen off the bus) also
                                makes its GPU lost from then on (FAKE_NVML_XID + FAKE_NVML_XID_LOSES)
    xid=79:30@1                 GPU 1 falls off the bus 30 s after the backend opened
    remapped=CORR/UNC/PENDING/FAILURE   remapped-row counts, pending and failure flags (0 or 1)
    remapped=0/3/1/0@2          GPU 2: 3 rows remapped for uncorrectable errors, a remap pending
    retired=SBE/DBE/PENDING     pages retired for single-bit / double-bit errors, pending flag (0 or 1)
    pcie-downgrade=GEN/WIDTH    the current PCIe link is GEN/WIDTH whatever the load (clamped to the
                                board's maximum, which stays as it is)
    pcie-replay=COUNT[+]        the PCIe replay counter is COUNT; with '+' it also grows by 1 per second
                                of the backend's clock since it opened
    throttle=MASK               the clock-event reasons are exactly MASK (hex, 0x optional; NVML's bits)
                                and the SM clock is capped: HW slowdown (0x8), HW thermal (0x40), power
                                brake (0x80) 45 % of max, SW thermal (0x20) 70 %, SW power cap (0x4)
                                85 %, sync boost (0x10) 95 %, idle (0x1) the idle clock; SW thermal
                                raises the temperature to at least the max operating temperature (the
                                slowdown threshold minus 2), HW thermal to at least the slowdown one
    nvlink-down=LINK[/LINK...]  these NVLinks (0-17) are inactive and carry nothing; a link the board
                                lacks is an error when the model is known (parse_fault_specs(model=))
    nvlink-errors=N             every NVLink of those GPUs has counted N errors
    events-unsupported          open_events() says "Xid events not supported on this GPU" for those
                                GPUs (and delivers none of their Xids)
    hang=SECONDS[:AFTER_S]@GPUS from AFTER_S real seconds (default 0) after the backend opened, every read
                                of those GPUs (read_static, read_sample, read_processes) blocks SECONDS
                                real seconds, then answers: one GPU's driver call is stuck, the others
                                answer at once (FAKE_NVML_HANG). Without @GPUS (or @all): every call,
                                also host facts, and opening the backend when AFTER_S is 0
    idle-held                   one more process on each of those GPUs holds >= 4 GiB at 0 % SM, for its
                                whole life, started hours before the clock's start (a forgotten notebook)
    stuck                       the GPU looks busy and computes nothing (a deadlocked collective): 100 %
                                utilisation, under 25 % of its power limit, SM clock at max, its compute
                                processes at 100 % SM; a long-lived job (torchrun) is always among them
    gpm-absurd=VALUE            every GPM figure of those GPUs (Hopper and newer; their MIG instances too) is
                                a value no GPU gives, as from a buggy driver or a corrupt sample pair
                                (FAKE_NVML_GPM_ABSURD): nan, inf, -inf, huge (1e308), neg (-42) or over (250;
                                the rates are in MiB/s, as NVML gives them, so 250 MiB/s is a real rate)

Platforms (not faults: machines whose NVML answers less, as the captures of real ones show)::

    no-fb-memory                unified memory (GB10 / DGX Spark): NVML reports no framebuffer memory at all
                                (total, used, free NotSupported); the processes' memory is still reported
    wddm                        a Windows (WDDM) or WSL2 host: per-process memory N/A, as those drivers say
    vgpu                        a vGPU guest: temperature, fan, power and its limits, ECC, throttle reasons,
                                PCIe link, NVLink, GPM and per-process utilisation NotSupported (the host owns them)

``--demo-model`` GB10, GRID P4-1Q and GTX 680 bring their platform with them.

MIG (not a fault, a configuration; here so that one spec syntax drives the simulation)::

    mig=N                       MIG mode on with N instances (0-7) in the usual layout: 1 = 7g, 2 = 3g+3g,
                                3 = 3g+2g+2g, 4 = 2g+2g+2g+1g, ..., 7 = seven 1g (MIG-capable models only:
                                A100, H100, H200, GH200, GB200). Utilisation and per-process utilisation are then
                                NotSupported, as on real GPUs
    mig=pending                 MIG mode off, switched on by an admin: it takes effect at the next GPU reset

Every health fault takes ``@GPUS`` (default: every GPU). The health readings
(remapped, retired) are reported with these values even on a model that lacks
the feature (as fake-nvml does), so any ``--demo-model`` can show them.

A GPU the simulation lacks, an ``=ARG`` or ``@GPUS`` a fault cannot use, are errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ...errors import UsageError, unknown_name
from ...model import SAMPLE_GROUPS

if TYPE_CHECKING:
    from .catalog import GpuModel

__all__ = ["FAULT_NAMES", "GPM_ABSURD_VALUES", "Hang", "SimFaults", "XidFault", "parse_fault_specs"]

# Groups that can be made NotSupported: the sample groups plus the process queries.
UNSUPPORTABLE = frozenset(SAMPLE_GROUPS) | {"processes", "process_utilization"}
ALL = None  # "every GPU"
XID_FALLEN_OFF_THE_BUS = 79
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class XidFault:
    """One ``xid=N[:AFTER_S]`` spec: Xid ``xid`` on ``gpus`` (None: every GPU) ``after_s`` after opening."""

    xid: int
    after_s: float = 0.0
    gpus: tuple[int, ...] | None = None

    def on(self, index: int) -> bool:
        return self.gpus is None or index in self.gpus


@dataclass(frozen=True, slots=True)
class Hang:
    """One ``hang=SECONDS[:AFTER_S]`` spec: calls block ``seconds`` from ``after_s`` real seconds after opening."""

    seconds: float
    after_s: float = 0.0


@dataclass
class SimFaults:
    """Mutable on purpose: tests and the demo flip faults while the backend runs.

    Per-GPU mappings are keyed by GPU index, or by ``None`` (:data:`ALL`) for
    every GPU; a GPU's own entry wins over the ``None`` one (:meth:`on_gpu`).
    """

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
    # GPU health (see the module docstring). Values as the NVML calls give them.
    xids: list[XidFault] = field(default_factory=list)
    remapped: dict[int | None, tuple[int, int, bool, bool]] = field(default_factory=dict)  # corr, unc, pending, fail
    retired: dict[int | None, tuple[int, int, bool]] = field(default_factory=dict)  # sbe, dbe, pending
    pcie_downgrade: dict[int | None, tuple[int, int]] = field(default_factory=dict)  # gen, width
    pcie_replay: dict[int | None, tuple[int, bool]] = field(default_factory=dict)  # count, grows 1/s
    throttle: dict[int | None, int] = field(default_factory=dict)  # NVML clock-event mask
    nvlink_down: dict[int | None, frozenset[int]] = field(default_factory=dict)
    nvlink_errors: dict[int | None, int] = field(default_factory=dict)
    events_unsupported: set[int | None] = field(default_factory=set)
    # Key None: every call, also those bound to no GPU (opening the backend); else reads of that GPU.
    hang: dict[int | None, list[Hang]] = field(default_factory=dict)
    idle_held: set[int] = field(default_factory=set)
    stuck: set[int] = field(default_factory=set)
    mig: dict[int | None, int | str] = field(default_factory=dict)  # instance count, or "pending"
    gpm_absurd: dict[int | None, float] = field(default_factory=dict)  # the value every GPM metric gives
    no_fb_memory: set[int] = field(default_factory=set)  # platforms (see the module docstring)
    wddm: bool = False
    vgpu: set[int] = field(default_factory=set)

    def latency(self, index: int | None = None) -> float:
        """Seconds a backend call on GPU ``index`` (None: bound to no GPU) takes."""
        every = self.slow.get(ALL, 0.0)
        return every if index is None else max(every, self.slow.get(index, 0.0))

    def hang_seconds(self, index: int | None, since_open_s: float) -> float:
        """Real seconds a call on GPU ``index`` (None: bound to no GPU) blocks, ``since_open_s`` after opening."""
        hangs = list(self.hang.get(ALL, ()))
        if index is not None:
            hangs += self.hang.get(index, ())
        return max((h.seconds for h in hangs if since_open_s >= h.after_s), default=0.0)

    def is_unsupported(self, index: int, group: str) -> bool:
        return group in self.unsupported.get(index, ()) or group in self.unsupported.get(ALL, ())

    def is_lost(self, index: int) -> bool:
        return self.lost_all or index in self.lost

    def lost_by_xid(self, index: int, since_open_s: float) -> bool:
        """True once an Xid 79 on GPU ``index`` has happened (``since_open_s``: the backend's clock since open)."""
        return any(x.xid == XID_FALLEN_OFF_THE_BUS and x.on(index) and since_open_s >= x.after_s for x in self.xids)

    def events_supported(self, index: int) -> bool:
        return ALL not in self.events_unsupported and index not in self.events_unsupported

    @staticmethod
    def on_gpu(mapping: Mapping[int | None, _V], index: int) -> _V | None:
        """GPU ``index``'s entry of a per-GPU fault mapping: its own, else every GPU's, else None."""
        if index in mapping:
            return mapping[index]
        return mapping.get(ALL)


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
    "xid",
    "remapped",
    "retired",
    "pcie-downgrade",
    "pcie-replay",
    "throttle",
    "nvlink-down",
    "nvlink-errors",
    "events-unsupported",
    "hang",
    "idle-held",
    "stuck",
    "mig",
    "gpm-absurd",
    "no-fb-memory",
    "wddm",
    "vgpu",
)
_HEALTH_WITH_ARG = frozenset(
    {
        "xid",
        "remapped",
        "retired",
        "pcie-downgrade",
        "pcie-replay",
        "throttle",
        "nvlink-down",
        "nvlink-errors",
        "hang",
        "mig",
        "gpm-absurd",
    }
)
_PER_GPU = frozenset({"lost", "no-permission", "unsupported", "ecc", "hot", "slow", "events-unsupported"}) | (
    _HEALTH_WITH_ARG | {"idle-held", "stuck", "no-fb-memory", "vgpu"}
)
_WITH_ARG = frozenset({"unsupported", "slow"}) | _HEALTH_WITH_ARG
MAX_GPUS = 256  # as many as --demo-gpus allows
MAX_SLOW_SECONDS = 3600.0
MAX_AFTER_SECONDS = 365 * 86400.0  # a delay beyond a year of simulated time is a typo
MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
_MAX_COUNT = 2**32 - 1  # NVML's counters are unsigned int
# gpm-absurd's values: FAKE_NVML_GPM_ABSURD's names and numbers.
GPM_ABSURD_VALUES: dict[str, float] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "huge": 1e308,
    "neg": -42.0,
    "over": 250.0,
}
_HELP = {
    "xid": "give the Xid number, and optionally ':' and the seconds after opening (e.g. xid=79 or xid=48:30)",
    "remapped": "give CORR/UNC/PENDING/FAILURE: two counts and two flags 0 or 1 (e.g. remapped=0/3/1/0)",
    "retired": "give SBE/DBE/PENDING: two page counts and a flag 0 or 1 (e.g. retired=2/1/1)",
    "pcie-downgrade": (
        f"give GEN/WIDTH: a PCIe generation 1-6 and a width of {', '.join(map(str, PCIE_WIDTHS))} "
        "(e.g. pcie-downgrade=3/8)"
    ),
    "pcie-replay": "give the replay count, with '+' to make it grow by 1 per second (e.g. pcie-replay=100+)",
    "throttle": "give the clock-event mask in hex (e.g. throttle=0x8 for HW slowdown, 0x40 for HW thermal)",
    "nvlink-down": f"give link numbers 0-{MAX_NVLINKS - 1} joined with '/' (e.g. nvlink-down=0/3)",
    "nvlink-errors": "give the error count of each link (e.g. nvlink-errors=12)",
    "mig": "give the number of MIG instances, 0-7, or 'pending' (e.g. mig=3@1 or mig=pending@0)",
    "gpm-absurd": f"give the value every GPM figure takes: {', '.join(GPM_ABSURD_VALUES)} (e.g. gpm-absurd=nan@1)",
    "hang": (
        f"give the seconds each call blocks, more than 0 and at most {MAX_SLOW_SECONDS:g}, and optionally ':' "
        "and the real seconds after opening it starts (e.g. hang=30 or hang=5:10@1)"
    ),
}


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


class _BadArgError(ValueError):
    """An ``=ARG`` that does not parse: turned into a UsageError naming the spec and the syntax."""


def _count(text: str, high: int = _MAX_COUNT) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()):  # no sign, no spaces inside, no "1e3"
        raise _BadArgError(text)
    value = int(text)
    if value > high:
        raise _BadArgError(text)
    return value


def _flag(text: str) -> bool:
    text = text.strip()
    if text not in ("0", "1"):
        raise _BadArgError(text)
    return text == "1"


def _seconds(text: str, low_exclusive: bool, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _BadArgError(text) from None
    if not math.isfinite(value) or value < 0 or (low_exclusive and value == 0) or value > high:
        raise _BadArgError(text)
    return value


def _fields(arg: str, count: int) -> list[str]:
    parts = arg.split("/")
    if len(parts) != count:
        raise _BadArgError(arg)
    return parts


def _store(mapping: dict[int | None, _V], selected: list[int] | None, value: _V) -> None:
    for gpu in selected if selected is not None else [ALL]:
        mapping[gpu] = value


def _parse_health(
    name: str, arg: str, faults: SimFaults, *, selected: list[int] | None, model: GpuModel | None, spec: str
) -> None:
    """Record one health fault's ``=ARG`` for ``selected`` GPUs (None: every GPU); raise _BadArgError if bad."""
    if name == "xid":
        number, colon, after = arg.partition(":")
        xid = _count(number, 65535)
        if xid == 0:
            raise _BadArgError(number)
        faults.xids.append(
            XidFault(
                xid=xid,
                after_s=_seconds(after, False, MAX_AFTER_SECONDS) if colon else 0.0,
                gpus=None if selected is None else tuple(selected),
            )
        )
    elif name == "remapped":
        corr, unc, pending, failure = _fields(arg, 4)
        _store(faults.remapped, selected, (_count(corr), _count(unc), _flag(pending), _flag(failure)))
    elif name == "retired":
        sbe, dbe, pending = _fields(arg, 3)
        _store(faults.retired, selected, (_count(sbe), _count(dbe), _flag(pending)))
    elif name == "pcie-downgrade":
        gen_text, width_text = _fields(arg, 2)
        gen, width = _count(gen_text, 6), _count(width_text, 32)
        if gen < 1 or width not in PCIE_WIDTHS:
            raise _BadArgError(arg)
        _store(faults.pcie_downgrade, selected, (gen, width))
    elif name == "pcie-replay":
        grows = arg.endswith("+")
        _store(faults.pcie_replay, selected, (_count(arg[:-1] if grows else arg), grows))
    elif name == "throttle":
        digits = arg[2:] if arg[:2].lower() == "0x" else arg
        if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits) or len(digits) > 16:
            raise _BadArgError(arg)
        _store(faults.throttle, selected, int(digits, 16))
    elif name == "nvlink-down":
        links = frozenset(_count(part, MAX_NVLINKS - 1) for part in arg.split("/"))
        if model is not None:
            missing = sorted(link for link in links if link >= model.nvlinks)
            if missing:
                has = f"links 0-{model.nvlinks - 1}" if model.nvlinks else "no NVLink"
                raise UsageError(f"--demo-fault {spec!r}: no NVLink {missing[0]} (the {model.name} has {has})")
        for gpu in selected if selected is not None else [ALL]:
            faults.nvlink_down[gpu] = faults.nvlink_down.get(gpu, frozenset()) | links
    elif name == "nvlink-errors":
        _store(faults.nvlink_errors, selected, _count(arg))
    elif name == "mig":
        if model is not None and not model.mig:
            raise UsageError(
                f"--demo-fault {spec!r}: the {model.name} has no MIG (A100, H100, H200, GH200 and GB200 do)"
            )
        value: int | str = arg.lower() if arg.lower() == "pending" else _count(arg, 7)
        _store(faults.mig, selected, value)
    elif name == "gpm-absurd":
        if arg.lower() not in GPM_ABSURD_VALUES:
            raise _BadArgError(arg)
        _store(faults.gpm_absurd, selected, GPM_ABSURD_VALUES[arg.lower()])
    elif name == "hang":
        seconds, colon, after = arg.partition(":")
        hang = Hang(
            seconds=_seconds(seconds, True, MAX_SLOW_SECONDS),
            after_s=_seconds(after, False, MAX_AFTER_SECONDS) if colon else 0.0,
        )
        for gpu in selected if selected is not None else [ALL]:
            faults.hang.setdefault(gpu, []).append(hang)


def parse_fault_specs(specs: Iterable[str], gpus: int | None = None, model: GpuModel | None = None) -> SimFaults:
    """Parse ``--demo-fault`` values; a bad one raises :class:`UsageError` naming it.

    ``gpus``: how many GPUs the simulation has, when known: a GPU it lacks is an
    error then (``lost@99`` on 4 GPUs would otherwise inject nothing, silently).
    ``model``: the simulated board, when known: an NVLink it lacks is an error
    then (``nvlink-down=5`` on a PCIe board). Nothing is ignored silently either:
    an ``=ARG`` or ``@GPUS`` a fault cannot use is an error.
    """
    faults = SimFaults()
    every_gpu = range(MAX_GPUS if gpus is None else gpus)
    for spec in specs:
        body, at, gpu_text = spec.partition("@")
        name, equals, arg = body.partition("=")
        name = name.strip().lower()
        arg = arg.strip()
        if name not in FAULT_NAMES:
            raise unknown_name("--demo-fault", "fault", name, FAULT_NAMES)
        if at and not gpu_text.strip():
            raise UsageError(f"--demo-fault {spec!r}: name the GPUs after '@' (1, 0,2, 1-3 or all)")
        selected = _parse_gpus(gpu_text.strip(), spec, gpus) if at else None
        if selected is not None and name not in _PER_GPU:
            raise UsageError(f"--demo-fault {spec!r}: {name} applies to every GPU (no '@GPUS')")
        if equals and name not in _WITH_ARG:
            raise UsageError(f"--demo-fault {spec!r}: {name} takes no '=' argument")
        if name in _HEALTH_WITH_ARG:
            if not arg:
                raise UsageError(f"--demo-fault {spec!r}: {_HELP[name]}")
            try:
                _parse_health(name, arg, faults, selected=selected, model=model, spec=spec)
            except _BadArgError:
                raise UsageError(f"--demo-fault {spec!r}: {_HELP[name]}") from None
        elif name == "unsupported":
            groups = {g.strip() for g in arg.split("+") if g.strip()}
            unknown = sorted(groups - UNSUPPORTABLE)
            if unknown:
                raise unknown_name(f"--demo-fault {spec!r}", "field group", unknown[0], sorted(UNSUPPORTABLE))
            if not groups:
                raise UsageError(
                    f"--demo-fault {spec!r}: name field groups after '=' "
                    f"(one or more of {', '.join(sorted(UNSUPPORTABLE))}, joined with '+')"
                )
            for gpu in selected if selected is not None else [ALL]:
                faults.unsupported.setdefault(gpu, set()).update(groups)
        elif name == "slow":
            seconds = _slow_seconds(arg, spec)
            for gpu in selected if selected is not None else [ALL]:
                faults.slow[gpu] = seconds
        elif name == "lost":
            if selected is None:
                faults.lost_all = True
            else:
                faults.lost.update(selected)
        elif name == "events-unsupported":
            faults.events_unsupported.update(selected if selected is not None else [ALL])
        elif name in ("no-permission", "ecc", "hot", "idle-held", "stuck", "no-fb-memory", "vgpu"):
            target = {
                "no-fb-memory": faults.no_fb_memory,
                "vgpu": faults.vgpu,
                "no-permission": faults.no_permission,
                "ecc": faults.ecc_errors,
                "hot": faults.hot,
                "idle-held": faults.idle_held,
                "stuck": faults.stuck,
            }[name]
            target.update(selected if selected is not None else every_gpu)
        else:
            setattr(faults, name.replace("-", "_"), True)
    return faults
