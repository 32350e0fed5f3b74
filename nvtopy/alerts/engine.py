"""The local alert engine: successive snapshots in, the alerts that fired or cleared out.

Why an engine of its own over snapshots: ``nvtopy watch`` and the TUI both alert on one
machine, from the same immutable snapshots every view reads, and must agree on what fired
and when; the fleet's Prometheus evaluates the same :mod:`.catalog` rules as PromQL. The
engine is pure (no clock, no thread, no I/O): time is the snapshots' own
(:attr:`~nvtopy.model.Snapshot.timestamp`), so a test feeds snapshots with the times it
wants and gets the same events every time.

What each rule reads -- the health layer's conclusions, never re-derived here:

- ``gpu-xid``: new Xid events, from the GPU's per-Xid counts since nvtopy started
  (``GpuHealth.xid_counts``: they only grow, whatever the bounded timeline shows); an
  instance per GPU and Xid, firing for the rule's ``window_s`` after the Xid last came, at
  that Xid's own severity (:func:`~.catalog.xid_severity`) with its meaning and action.
- ``gpu-remap-pending``, ``gpu-remap-failed``: the sample's remapping flags (the same
  readings the health findings ``remap-pending`` / ``remap-failure`` come from).
- ``gpu-not-responding``: ``GpuHealth.responding`` (the sources' stall tracking); its value,
  ``stalled_seconds``.
- ``gpu-lost``: the sample's ``lost``.
- ``gpu-idle-held``: a process's ``idle_seconds`` (:mod:`nvtopy.health.realwork`) of at
  least ``idle_minutes``.
- ``gpu-suspected-hang``: ``GpuHealth.suspected_hang_seconds`` (set once the health layer's
  hang has lasted its ``hang_seconds``).
- ``gpu-temperature-near-slowdown``: the temperature against *that GPU's*
  ``temperature_slowdown_c`` less ``margin_c``; a GPU whose threshold is unknown never fires.
- ``gpu-power-capped``: the clock-event reasons ``sw_power_cap`` or
  ``hw_power_brake_slowdown`` (the fleet rule's bits 0x4 and 0x80).
- ``gpu-health-worse``: the health verdict's rank at least ``verdict_rank``.
- ``gpu-free``: :func:`gpu_free` -- no process and under ``memory_mib`` MiB used.
- ``process-ended``: a process of the previous snapshot that is not in this one, on a GPU
  whose process list was read both times. A one-shot: it fires and is done (no "cleared",
  never in :meth:`AlertEngine.firing`).
- ``host-unreachable``: a fleet view's line that says why its host cannot be read (a line with a
  ``note``, marked lost). Such a line -- and one for a host still connecting, or stale -- is no
  GPU's reading: no GPU or process rule is evaluated on it, so its GPUs' alerts are unknown
  (missing), never "gpu-lost" and never cleared by it.

Hysteresis, per instance (a rule and its subject: a GPU, a GPU's Xid, a process): the
condition must hold ``for_s`` before the alert fires; a firing alert clears once the
condition has been clear for ``clear_s``; an instance fires again at the earliest
``cooldown_s`` after it last fired. A condition that cannot be told -- a reading N/A, the
GPU lost or not responding for a rule on its readings, the GPU missing from the snapshot --
is neither met nor clear: it starts no clock, stops both, and leaves a firing alert firing
(unknown is never "back to 0"). A process that is gone is clear (its alert clears after
``clear_s``); so is a subject out of the rule's scope.

Memory: state per instance seen, dropped once the instance is quiet (not firing, no clock
running, past its cooldown) and no longer seen; Xid counts per GPU and Xid number (bounded by
the health layer's cap of distinct numbers).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..health.xid import describe_xid
from ..model import GpuProcess, GpuState, ProcessOwner, Snapshot
from ..textsafe import excerpt
from .catalog import AlertRule, AlertSeverity, Subject, ValueUnit, format_value, xid_severity
from .events import AlertEvent, Transition
from .settings import ANY, AlertSettings, RuleSettings

__all__ = ["COMMAND_CHARS", "AlertEngine", "gpu_free", "gpu_key"]

MIB = 1 << 20
COMMAND_CHARS = 120
"""A command line is cut to this many characters in an alert's words ("cut short", as the catalog says)."""
REASON_CHARS = 160
"""Why a host cannot be read, cut to this many characters in an alert's words (``{reason}``)."""
POWER_CAP_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})
UNKNOWN = "N/A"  # a placeholder whose value is not known


def gpu_free(gpu: GpuState, memory_mib: float) -> bool | None:
    """Whether ``gpu`` is free: no process, and under ``memory_mib`` MiB of its memory used (the gpu-free rule).

    None: cannot tell (its process list or memory N/A, the GPU lost or not responding): never taken for free.
    """
    if _readings_unknown(gpu) or gpu.processes_unavailable is not None:
        return None
    if gpu.processes:
        return False
    used = gpu.sample.memory_used_bytes
    if used is None:
        return None
    return used < memory_mib * MIB


def gpu_key(gpu: GpuState, hostname: str) -> str:
    """A GPU's name in alert keys: ``host/GPU-uuid`` (``host/index-N`` when its UUID is unknown)."""
    static = gpu.static
    host = static.host or hostname
    ident = static.uuid if static.uuid else f"index-{_gpu_number(gpu)}"
    return f"{host}/{ident}"


def _gpu_number(gpu: GpuState) -> int:
    """The GPU's index on its own host (a remote GPU's host index)."""
    static = gpu.static
    return static.host_index if static.host is not None and static.host_index is not None else static.index


def _readings_unknown(gpu: GpuState) -> bool:
    """The GPU's readings say nothing now: it is lost, or a driver call on it is stuck (the sample is stale)."""
    return gpu.sample.lost or not gpu.health.responding


@dataclass(slots=True)
class _Instance:
    """One rule instance as this snapshot found it: whether its condition holds (None: unknown), and its words."""

    settings: RuleSettings
    key: str
    met: bool | None
    host: str
    fills: dict[str, str]
    value: float | None = None
    severity: AlertSeverity | None = None  # None: the rule's own
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int | None = None
    user: str | None = None
    xid: int | None = None
    gone_means_clear: bool = False  # a process (or an Xid): missing from a snapshot is clear, not unknown


@dataclass(slots=True)
class _State:
    """One instance's hysteresis: when its condition began to hold or to be clear, whether it fires."""

    last: _Instance
    met: bool | None = None  # the condition at the last snapshot (None: unknown, or the subject missing)
    firing: bool = False
    pending_since: float | None = None
    clear_since: float | None = None
    fired_at: float | None = None


@dataclass(slots=True)
class _XidSeen:
    count: int
    arrived: float


@dataclass(slots=True)
class _GpuProcesses:
    rows: dict[tuple[int, float | None], GpuProcess] = field(default_factory=dict)


class AlertEngine:
    """Evaluates every enabled local rule on successive snapshots (see the module docstring).

    Not thread-safe: one thread feeds it (``nvtopy watch``'s loop, the TUI's snapshot handler).
    """

    def __init__(self, settings: AlertSettings | None = None) -> None:
        self.settings = settings if settings is not None else AlertSettings()
        self._states: dict[str, _State] = {}
        self._xids: dict[str, dict[int, _XidSeen]] = {}  # gpu key -> xid -> last count and arrival
        self._processes: dict[str, _GpuProcesses] = {}  # gpu key -> its processes at the last readable list
        self._now: float | None = None
        self._enabled = {s.id: s for s in self.settings.rules if s.enabled}

    # ------------------------------------------------------------------ public

    def observe(self, snapshot: Snapshot) -> list[AlertEvent]:
        """Fold in one snapshot; the transitions it caused, in rule order (FIRING and CLEARED events).

        A snapshot whose time is not a finite number is ignored; one older than the last is taken
        as at the last one's time (a clock that went back neither fires nor clears anything early).
        """
        stamp = snapshot.timestamp
        if not isinstance(stamp, int | float) or not math.isfinite(stamp):
            return []
        now = stamp if self._now is None else max(stamp, self._now)
        self._now = now
        host = snapshot.host.hostname
        user = snapshot.host.user
        found: dict[str, _Instance] = {}
        ended: list[AlertEvent] = []
        for gpu in snapshot.gpus:
            if gpu.note:  # a fleet view's line for a host it cannot read (or not yet): no GPU's reading
                instance = self._host_instance(gpu, host)
                if instance is not None:
                    found.setdefault(instance.key, instance)  # a host's first such line: one alert a host
                continue
            key = gpu_key(gpu, host)
            for instance in self._gpu_instances(gpu, key, now):
                found[instance.key] = instance
            ended += self._ended(gpu, key, user, now)
        events: list[AlertEvent] = []
        for key, instance in found.items():
            event = self._step(key, instance, instance.met, now)
            if event is not None:
                events.append(event)
        for key in [k for k in self._states if k not in found]:
            state = self._states[key]
            event = self._step(key, state.last, False if state.last.gone_means_clear else None, now)
            if event is not None:
                events.append(event)
        self._forget(found, now)
        order = {s.id: n for n, s in enumerate(self.settings.rules)}
        events += ended
        events.sort(key=lambda e: order.get(e.rule_id, len(order)))  # stable: within a rule, as found
        return events

    def firing(self) -> tuple[AlertEvent, ...]:
        """What fires now: each firing instance's FIRING event (its words as last seen), in rule order."""
        order = {s.id: n for n, s in enumerate(self.settings.rules)}
        out = [
            self._event(state.last, Transition.FIRING, state.fired_at or 0.0)
            for state in self._states.values()
            if state.firing
        ]
        out.sort(key=lambda e: (order.get(e.rule_id, len(order)), e.key))
        return tuple(out)

    def firing_keys(self, rule_id: str) -> tuple[str, ...]:
        """The keys of ``rule_id``'s firing instances (``gpu-free/host/GPU-...``), sorted."""
        return tuple(sorted(k for k, s in self._states.items() if s.firing and s.last.settings.id == rule_id))

    def firing_gpus(self, rule_id: str, *, holding: bool = False) -> tuple[int, ...]:
        """The indices of the GPUs ``rule_id`` fires on now, ascending.

        ``holding``: only those whose condition held at the last snapshot too -- a firing alert
        survives a reading gone N/A (a free GPU that was then lost still fires "free" until it is
        known to be taken), which is right for an alert and wrong for ``--once-free``'s answer.
        """
        return tuple(
            sorted(
                {
                    s.last.gpu_index
                    for s in self._states.values()
                    if s.firing
                    and s.last.settings.id == rule_id
                    and s.last.gpu_index is not None
                    and (s.met is True or not holding)
                }
            )
        )

    # ------------------------------------------------------------------ hysteresis

    def _step(self, key: str, instance: _Instance, met: bool | None, now: float) -> AlertEvent | None:
        state = self._states.get(key)
        if state is None:
            if not met:
                return None  # nothing to remember: neither pending nor firing
            state = self._states[key] = _State(instance)
        state.last = instance
        state.met = met
        rule = instance.settings.rule
        if met is None:  # unknown: no clock runs, a firing alert stays firing
            state.pending_since = None
            state.clear_since = None
            return None
        if met:
            state.clear_since = None
            if state.firing:
                return None
            if state.pending_since is None:
                state.pending_since = now
            held = now - state.pending_since >= rule.for_s
            cooled = state.fired_at is None or now - state.fired_at >= rule.cooldown_s
            if held and cooled:
                state.firing = True
                state.fired_at = now
                return self._event(instance, Transition.FIRING, now)
            return None
        state.pending_since = None
        if not state.firing:
            return None
        if state.clear_since is None:
            state.clear_since = now
        if now - state.clear_since >= rule.clear_s:
            state.firing = False
            state.clear_since = None
            return self._event(instance, Transition.CLEARED, now)
        return None

    def _forget(self, found: dict[str, _Instance], now: float) -> None:
        """Drop quiet instances no longer seen (bounded memory with process churn)."""
        for key in [k for k, s in self._states.items() if k not in found and self._quiet(s, now)]:
            del self._states[key]

    @staticmethod
    def _quiet(state: _State, now: float) -> bool:
        cooled = state.fired_at is None or now - state.fired_at >= state.last.settings.rule.cooldown_s
        return not state.firing and state.pending_since is None and cooled

    def _event(self, instance: _Instance, transition: Transition, at: float) -> AlertEvent:
        rule = instance.settings.rule
        fills = dict(instance.fills)
        fills["value"] = _value_words(rule, instance.value)
        return AlertEvent(
            rule_id=rule.id,
            alert=rule.alert,
            title=rule.title,
            severity=instance.severity or rule.severity,
            transition=transition,
            key=instance.key,
            at=at,
            host=instance.host,
            summary=rule.render(rule.summary, fills),
            description=rule.render(rule.description, fills),
            action=rule.render(rule.action, fills),
            gpu_index=instance.gpu_index,
            gpu_uuid=instance.gpu_uuid,
            pid=instance.pid,
            user=instance.user,
            xid=instance.xid,
            value=_value_for_people(rule, instance.value),
        )

    # ------------------------------------------------------------------ the rules

    def _gpu_instances(self, gpu: GpuState, key: str, now: float) -> Iterable[_Instance]:
        """Every enabled rule's instances on ``gpu`` (its processes' included)."""
        enabled = self._enabled
        fills = _gpu_fills(gpu, key)
        host = fills["host"]
        unknown = _readings_unknown(gpu)
        sample, health = gpu.sample, gpu.health

        def make(rule_id: str, met: bool | None, value: float | None = None) -> _Instance:
            settings = enabled[rule_id]
            return _Instance(
                settings,
                f"{rule_id}/{key}",
                met if _gpu_in_scope(settings, gpu) else (False if met is not None else None),
                host,
                fills,
                value=value,
                gpu_index=_gpu_number(gpu),
                gpu_uuid=gpu.static.uuid,
            )

        checks: dict[str, Callable[[], _Instance]] = {
            "gpu-remap-pending": lambda: make("gpu-remap-pending", None if unknown else sample.remapped_rows_pending),
            "gpu-remap-failed": lambda: make("gpu-remap-failed", None if unknown else sample.remapped_rows_failure),
            "gpu-not-responding": lambda: make("gpu-not-responding", not health.responding, health.stalled_seconds),
            "gpu-lost": lambda: make("gpu-lost", sample.lost),
            "gpu-suspected-hang": lambda: make(
                "gpu-suspected-hang",
                None if unknown else health.suspected_hang_seconds is not None,
                health.suspected_hang_seconds,
            ),
            "gpu-temperature-near-slowdown": lambda: _temperature(make, enabled, gpu, unknown),
            "gpu-power-capped": lambda: make(
                "gpu-power-capped",
                None
                if unknown or sample.throttle_reasons is None
                else bool(POWER_CAP_REASONS.intersection(sample.throttle_reasons)),
            ),
            "gpu-health-worse": lambda: make(
                "gpu-health-worse",
                health.verdict.rank >= enabled["gpu-health-worse"].rule.threshold("verdict_rank"),
                float(health.verdict.rank),
            ),
            "gpu-free": lambda: make("gpu-free", gpu_free(gpu, enabled["gpu-free"].rule.threshold("memory_mib")), None),
        }
        for rule_id, check in checks.items():
            if rule_id in enabled:
                yield check()
        if "gpu-xid" in enabled:
            yield from self._xid_instances(gpu, key, fills, host, now)
        elif gpu.health.xid_counts:
            self._xid_arrivals(gpu, key, now)  # counted anyway: enabling the rule later fires on new Xids only
        if "gpu-idle-held" in enabled:
            yield from self._idle_held(gpu, key)

    def _host_instance(self, gpu: GpuState, hostname: str) -> _Instance | None:
        """host-unreachable on a fleet view's line that says why its host cannot be read (None: not that line).

        Why not gpu-lost: such a line is marked lost (nothing of the host can be shown) but stands for a host
        that ssh, its exporter or the server did not answer -- "GPU 3 fell off the bus: drain the node and
        reboot it" would send someone to reboot a machine that may be fine. Its GPUs' own alerts are neither
        met nor clear while it cannot be read (their lines are missing: a firing one stays firing). A host
        connecting, or stale, is not lost: no alert until the fleet view gives up on it.
        """
        settings = self._enabled.get("host-unreachable")
        if settings is None or not gpu.sample.lost or gpu.note is None:
            return None
        host = gpu.static.host or hostname
        reason = excerpt(" ".join(gpu.note.split()), REASON_CHARS)  # one line, made visible, cut short
        # gone_means_clear: no such line for the host any more: it is read again (or no longer in the view)
        fills = {"host": host, "reason": reason}
        return _Instance(settings, f"host-unreachable/{host}", True, host, fills, gone_means_clear=True)

    def _xid_arrivals(self, gpu: GpuState, key: str, now: float) -> dict[int, _XidSeen]:
        """Per Xid of ``gpu``: its count and when it last came (a grown count: its newest event, else now)."""
        seen = self._xids.setdefault(key, {})
        newest: dict[int, float] = {}
        for event in gpu.health.events:
            if event.xid is not None and math.isfinite(event.timestamp):
                newest[event.xid] = max(event.timestamp, newest.get(event.xid, event.timestamp))
        for xid, count in gpu.health.xid_counts:
            known = seen.get(xid)
            if known is None or count > known.count:
                arrived = min(newest.get(xid, now), now)
                seen[xid] = _XidSeen(count, arrived if known is None else max(arrived, known.arrived))
            elif count < known.count:  # the source started over: its counts too
                known.count = count
        return seen

    def _xid_instances(
        self, gpu: GpuState, key: str, fills: dict[str, str], host: str, now: float
    ) -> Iterable[_Instance]:
        settings = self._enabled["gpu-xid"]
        window = settings.rule.threshold("window_s")
        in_scope = _gpu_in_scope(settings, gpu)
        for xid, seen in self._xid_arrivals(gpu, key, now).items():
            recent = now - seen.arrived <= window
            state = self._states.get(f"gpu-xid/{key}/{xid}")
            if not recent and (state is None or not state.firing):
                continue  # an old Xid: nothing to say (and its quiet state is forgotten)
            info = describe_xid(xid)
            yield _Instance(
                settings,
                f"gpu-xid/{key}/{xid}",
                recent and in_scope,
                host,
                {**fills, "xid": str(xid), "xid_meaning": info.meaning, "xid_action": info.action},
                value=float(xid),
                severity=xid_severity(xid),
                gpu_index=_gpu_number(gpu),
                gpu_uuid=gpu.static.uuid,
                xid=xid,
                gone_means_clear=True,
            )

    def _idle_held(self, gpu: GpuState, key: str) -> Iterable[_Instance]:
        settings = self._enabled["gpu-idle-held"]
        limit = settings.rule.threshold("idle_minutes") * 60
        unknown = _readings_unknown(gpu)
        for process in gpu.processes:
            idle = process.idle_seconds
            if unknown:
                met: bool | None = None
            elif idle is None:
                met = None if process.gpu_memory_bytes is None else False  # its memory N/A: cannot tell
            else:
                met = idle >= limit
            if met is not None and not _process_in_scope(settings, gpu, process, None):
                met = False
            yield self._process_instance(settings, gpu, key, process, met=met, value=idle)

    def _ended(self, gpu: GpuState, key: str, me: str | None, now: float) -> list[AlertEvent]:
        """process-ended: the processes of the last readable list that this one lacks (a one-shot each)."""
        if gpu.processes_unavailable is not None or _readings_unknown(gpu):
            return []  # cannot tell who ended: the last readable list stays the reference
        rows = {(p.pid, p.create_time): p for p in gpu.processes}
        previous = self._processes.get(key)
        self._processes[key] = _GpuProcesses(rows)
        settings = self._enabled.get("process-ended")
        if previous is None or settings is None:
            return []
        events = []
        for ident, process in previous.rows.items():
            if ident in rows or not _process_in_scope(settings, gpu, process, me):
                continue
            instance = self._process_instance(settings, gpu, key, process, met=True, value=None)
            events.append(self._event(instance, Transition.FIRING, now))
        return events

    @staticmethod
    def _process_instance(
        settings: RuleSettings, gpu: GpuState, key: str, process: GpuProcess, *, met: bool | None, value: float | None
    ) -> _Instance:
        fills = _gpu_fills(gpu, key)
        host = fills["host"]
        command = process.command or process.name or UNKNOWN
        if len(command) > COMMAND_CHARS:
            command = command[: COMMAND_CHARS - 1] + "…"
        return _Instance(
            settings,
            f"{settings.id}/{key}/{process.pid}",
            met,
            host,
            {**fills, "pid": str(process.pid), "user": process.user or UNKNOWN, "command": command},
            value=value,
            gpu_index=_gpu_number(gpu),
            gpu_uuid=gpu.static.uuid,
            pid=process.pid,
            user=process.user,
            gone_means_clear=True,
        )


# ---------------------------------------------------------------------- words and scope


def _temperature(
    make: Callable[..., _Instance], enabled: dict[str, RuleSettings], gpu: GpuState, unknown: bool
) -> _Instance:
    """gpu-temperature-near-slowdown: against this GPU's own slowdown threshold; none known: never fires."""
    rule_id = "gpu-temperature-near-slowdown"
    temperature, slowdown = gpu.sample.temperature_c, gpu.static.temperature_slowdown_c
    value = None if temperature is None else float(temperature)
    if unknown or temperature is None or not slowdown:  # no threshold known: never fires, never guesses
        return make(rule_id, None, value)
    margin = enabled[rule_id].rule.threshold("margin_c")
    return make(rule_id, temperature >= slowdown - margin, value)


def _gpu_fills(gpu: GpuState, key: str) -> dict[str, str]:
    static = gpu.static
    return {
        "host": key.rsplit("/", 1)[0],
        "gpu": str(_gpu_number(gpu)),
        "model": static.name or UNKNOWN,
        "uuid": static.uuid or UNKNOWN,
    }


def _value_words(rule: AlertRule, value: float | None) -> str:
    """``{value}`` in a template: :func:`~.catalog.format_value`'s words, ``N/A`` when unknown."""
    return UNKNOWN if value is None else format_value(rule.value_unit, value)


def _value_for_people(rule: AlertRule, value: float | None) -> str | None:
    """:attr:`AlertEvent.value`: the figure with its unit ("87 °C", "31m 0s"); None for a rule without one."""
    if rule.value_unit is ValueUnit.NONE or rule.subject is Subject.XID:
        return None
    if rule.id == "gpu-health-worse" and value is not None:
        return {0: "OK", 1: "WARN", 2: "FAIL"}.get(int(value), format_value(rule.value_unit, value))
    words = _value_words(rule, value)
    return f"{words} °C" if rule.value_unit is ValueUnit.CELSIUS and words != UNKNOWN else words


def _matches(patterns: Sequence[str], *names: str | None) -> bool:
    return any(
        pattern == ANY or any(name is not None and fnmatch.fnmatchcase(name, pattern) for name in names)
        for pattern in patterns
    )


def _owner_names(owner: ProcessOwner | None) -> tuple[str | None, ...]:
    """What an ``owners`` entry may name: the OWNER column's label, or the owner's name, id, pod, job, unit."""
    if owner is None:
        return ()
    pod = f"{owner.namespace}/{owner.pod}" if owner.namespace and owner.pod else owner.pod
    return (owner.label, owner.name, owner.id, pod, owner.container, owner.job, owner.project, owner.kind.value)


def _gpu_matches(patterns: Sequence[str], gpu: GpuState) -> bool:
    static = gpu.static
    for pattern in patterns:
        if pattern.isdigit():
            if int(pattern) == _gpu_number(gpu):
                return True
        elif static.uuid and static.uuid.lower().startswith((pattern.lower(), f"gpu-{pattern.lower()}")):
            return True
    return False


def _gpu_in_scope(settings: RuleSettings, gpu: GpuState) -> bool:
    """A GPU rule's scope: its GPUs; with users or owners, while one of the GPU's processes matches them."""
    if settings.gpus is not None and not _gpu_matches(settings.gpus, gpu):
        return False
    if settings.users is not None and not any(_matches(settings.users, p.user) for p in gpu.processes):
        return False
    return settings.owners is None or any(_matches(settings.owners, *_owner_names(p.owner)) for p in gpu.processes)


def _process_in_scope(settings: RuleSettings, gpu: GpuState, process: GpuProcess, me: str | None) -> bool:
    """A process rule's scope: its GPU, its user (process-ended: only ``me`` unless users is set), its owner."""
    if settings.gpus is not None and not _gpu_matches(settings.gpus, gpu):
        return False
    users = settings.users
    if users is None and settings.id == "process-ended":
        users = (me,) if me else ()  # the current user only; unknown: nobody (never everyone's)
    if users is not None and not _matches(users, process.user):
        return False
    return settings.owners is None or _matches(settings.owners, *_owner_names(process.owner))
