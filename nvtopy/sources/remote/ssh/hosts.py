"""``nvtopy --ssh HOSTS``: the GPUs of machines reached over SSH, as one fleet in the monitor.

Each host has one long-lived ssh session (:mod:`.streams`) whose far side
streams snapshots: ``nvtopy serve-stdio`` (every column, health verdicts
included, in the JSON contract ``record`` writes; :mod:`nvtopy.formats.stream`)
or, where nvtopy is not installed, nvidia-smi's query loop
(:mod:`nvtopy.formats.nvidia_smi_csv`: fewer columns, and the host says which
are missing). At each refresh this source takes every host's newest value,
decodes only what is new since the last refresh (a host that sent ten lines
since costs one decode) and shows every GPU with its host, as ``--remote`` and
``--prometheus`` do: the host on every GPU and process row, ``b`` grouping by
host, the history charts of each remote GPU kept here across refreshes.

Every host has a state, shown where its GPUs would be: waiting to connect,
connecting (for how long), live, stale (its GPUs' last identity, with how old
their values are), lost (why, in ssh's or the far side's words, and when it is
asked again). A host never holds up the others: this thread never waits on a
host (the I/O thread does, against deadlines), and ``stop()`` ends every ssh
within half a second.

Read-only, as the other fleet views: the processes belong to other machines.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Hashable, Sequence
from typing import Any

from ....formats.contract_decoder import Placement, RecordedGpu, SnapshotDecoder
from ....formats.nvidia_smi_csv import SmiCycle
from ....health.verdict import HealthInputs, assess
from ....interval import STALE_INTERVALS
from ....model import (
    GpuSample,
    GpuState,
    GpuStatic,
    HistoryBuffer,
    HostInfo,
    Snapshot,
    fast_constructor,
)
from ...base import SnapshotSource
from ...gc_policy import paused_gc
from ...timeline import Timeline
from ..exporters import host_names
from .command import remote_script, ssh_argv
from .session import Latest, Mode, Session, State
from .streams import FLOOD_BYTES, FLOOD_LINES, SshStreams
from .targets import SshTarget

__all__ = ["SshHosts"]

_NEW_STATE = fast_constructor(GpuState)  # 512 GPUs a refresh: the dataclass __init__ is a cost
SMI_MISSING_SHOWN = 4  # of what a host read with nvidia-smi cannot show, the first few (the README lists all)


@dataclasses.dataclass
class _Shown:
    """What was last built of one host: from which of its values, and the GPU lines."""

    sequence: int
    gpus: list[GpuState]
    identities: list[GpuStatic]


class SshHosts(SnapshotSource):
    """A snapshot source for the monitor: every host's GPUs, over one ssh session each."""

    thread_name = "nvtopy-ssh"
    signal_refusal = "read-only: processes on other hosts cannot be signalled from here"
    waiting_for = "the hosts"

    def __init__(
        self,
        targets: Sequence[SshTarget],
        interval: float = 1.0,
        *,
        program: str = "ssh",
        config_file: str | None = None,
        options: Sequence[str] = (),
        remote_nvtopy: str | None = None,
        connect_timeout: float = 10.0,
        max_connecting: int = 32,
        silent_after: float | None = None,
        flood_bytes: int = FLOOD_BYTES,
        flood_lines: int = FLOOD_LINES,
    ) -> None:
        super().__init__(interval)
        self.targets = list(targets)

        def argv_for(target: SshTarget) -> list[str]:
            return ssh_argv(
                target, program=program, config_file=config_file, options=options, connect_timeout=connect_timeout
            )

        self.streams = SshStreams(
            self.targets,
            argv_for,
            remote_script(interval, remote_nvtopy),
            interval,
            connect_timeout=connect_timeout,
            max_connecting=max_connecting,
            silent_after=silent_after,
            flood_bytes=flood_bytes,
            flood_lines=flood_lines,
        )
        self._history: dict[Hashable, HistoryBuffer] = {}
        self._timelines: dict[Hashable, Timeline] = {}
        self._shown: dict[int, _Shown] = {}  # host position -> what was last built of it
        # host position -> its decoder: a host's lines in order, what repeats between them not checked again
        self._decoders: dict[int, SnapshotDecoder] = {}
        self._reported: list[str | None] = [None] * len(self.targets)
        self._sequence = 0
        self._once = False  # read_once: a one-shot read
        self._streams_started = False

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> SshHosts:
        self._start_streams()
        super().start()
        return self

    def _start_streams(self) -> None:
        if not self._streams_started:
            self._streams_started = True
            self.streams.start()

    def stop(self, timeout: float | None = 2.0) -> None:
        """Stop at once: every ssh is ended (stdin closed, SIGTERM, SIGKILL after 0.3 s)."""
        self._stopping = True
        self.streams.stop()
        super().stop(timeout)

    def status_line(self) -> str:
        live = sum(1 for s in self.streams.sessions if s.status.state is State.LIVE and s.latest is not None)
        state = "⏸ " if self._paused else ""
        return f"{state}SSH {live}/{len(self.targets)} hosts ⟳ {self._interval:g}s"

    def _run(self) -> None:
        self._run_periodic(self.poll_once)

    def read_once(self, deadline: float | None = None) -> Snapshot:
        """``--once``: connect to every host, wait until each has sent a first snapshot, failed, or the deadline."""
        self._start_streams()
        self._once = True  # its lines say why a host is lost, not when it would be asked again: it is not
        end = time.monotonic() + (deadline if deadline is not None else self.streams.connect_timeout + 2.0)
        try:
            while time.monotonic() < end:
                if all(_settled(s) for s in self.streams.sessions):
                    break
                time.sleep(0.02)
            return self.poll_once()
        finally:
            self.streams.stop()

    # ----------------------------------------------------------------- snapshots

    def poll_once(self) -> Snapshot:
        """Every host's newest value as GPU lines (decoding only what is new), published."""
        self.streams.catch_up()  # every line read so far parsed: each host's newest value
        now = time.time()
        clock = time.monotonic()
        sessions = self.streams.sessions
        for session in sessions:
            if session.hostname is not None:
                self._reported[session.position] = session.hostname
        names = host_names(self.targets, self._reported)
        gpus: list[GpuState] = []
        # No collection while the refresh builds tens of thousands of objects (none in a cycle), and until the
        # snapshot they replace is let go (published): a collection counts objects made less objects freed, so a
        # refresh that replaces as many as it makes sets off none, and no collection walks them all again.
        with paused_gc():
            for session, name in zip(sessions, names, strict=True):
                gpus.extend(self._host_lines(session, name, len(gpus), now, clock))
            self._sequence += 1
            host = HostInfo(
                hostname=names[0] if len(names) == 1 else f"{len(names)} hosts",
                driver_version=None,
                cuda_driver_version=None,
                backend="ssh",
            )
            snapshot = Snapshot(
                timestamp=now, host=host, gpus=tuple(gpus), sequence=self._sequence, interval=self._interval
            )
            if not self._stopping:
                self._publish(snapshot)
        return snapshot

    def _host_lines(self, session: Session, name: str, first: int, now: float, clock: float) -> list[GpuState]:
        status = session.status
        latest = session.latest
        shown = self._shown.get(session.position)
        if latest is not None and status.state is State.LIVE:
            age = clock - latest.received
            if shown is None or shown.sequence != latest.sequence:
                # the patch that made this value of the one shown: the decoder starts from that one's parts
                patch = latest.patch if shown is not None and latest.sequence == shown.sequence + 1 else None
                try:
                    built = self._build(session, name, latest, first, now, patch=patch)
                except _UnreadableError as exc:
                    self.streams.drop(session, str(exc))
                    return [_line(first, name, f"lost: {exc}", now, lost=True)]
                shown = self._shown[session.position] = built
            elif shown.gpus and (shown.gpus[0].index != first or shown.gpus[0].static.host != name):
                shown.gpus = [_moved(gpu, first + n, name) for n, gpu in enumerate(shown.gpus)]
            limit = STALE_INTERVALS * self._interval
            if age > limit:
                note = f"stale: no snapshot for {age:.0f} s"
                return [
                    GpuState(dataclasses.replace(s, index=first + n, host=name), GpuSample(now), note=note)
                    for n, s in enumerate(shown.identities)
                ] or [_line(first, name, note, now)]
            return list(shown.gpus)
        words = status.words(clock, retrying=not self._once)
        if status.state is State.LIVE:  # connected, the first snapshot not here yet
            words = "connected, waiting for the first snapshot"
        lost = status.state is State.LOST
        return [_line(first, name, words, now, lost=lost)]

    def _build(self, session: Session, name: str, latest: Latest, first: int, now: float, *, patch: Any) -> _Shown:
        if latest.mode is Mode.NVTOPY:
            taken = now - max(0.0, time.monotonic() - latest.received)  # when it came, on this clock
            gpus = self._from_stream(session, name, latest.payload, first, taken, patch=patch)
            note = None
        else:
            gpus, note = self._from_smi(session, name, latest.payload, first, now)
        identities = [g.static for g in gpus if g.note is None]
        if note is not None:
            gpus.append(_line(first + len(gpus), name, note, now))
        return _Shown(latest.sequence, gpus, identities)

    def _from_stream(
        self, session: Session, name: str, data: dict[str, Any], first: int, taken: float, *, patch: Any = None
    ) -> list[GpuState]:
        """The far snapshot's GPUs as lines of this fleet, dated ``taken`` (when they came, on this clock).

        Why re-dated: the far host's clock may be minutes off; its values are as fresh as their arrival,
        and the views judge staleness and draw the charts on this machine's clock. The decoder builds
        each GPU in its place (index here, host, date) at once: copying 500 GPUs and their processes
        afterwards would cost a third of a refresh.
        """
        position = session.position

        def state(gpu: RecordedGpu) -> GpuState:
            static = gpu.static
            history, timeline = self._kept((position, static.host_index), static, gpu.sample)
            # GpuState's fields in order: static, sample, processes, why none, history, note, hint, health, charts
            return _NEW_STATE(
                static,
                gpu.sample,
                gpu.processes,
                gpu.processes_unavailable,
                history.history(),
                None,
                None,
                gpu.health,
                timeline,
            )

        decoder = self._decoders.get(position)
        if decoder is None:
            decoder = self._decoders[position] = SnapshotDecoder()
        try:
            snapshot = decoder.decode(data, state, place=Placement(first, name, taken), patch=patch)
        except (KeyError, ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as exc:
            raise _UnreadableError(f"sent a line that is no snapshot ({type(exc).__name__})") from None
        return list(snapshot.gpus)

    def _from_smi(
        self, session: Session, name: str, cycle: SmiCycle, first: int, now: float
    ) -> tuple[list[GpuState], str | None]:
        """nvidia-smi's cycle as GPU lines: judged here by the same rules as a local GPU, on what it says."""
        if cycle.error and not cycle.gpus:
            raise _UnreadableError(f"nvidia-smi: {cycle.error}")
        gpus: list[GpuState] = []
        for far_static, sample in cycle.gpus:
            index = first + len(gpus)
            static = dataclasses.replace(far_static, index=index, host=name, host_index=far_static.index)
            processes = tuple(
                dataclasses.replace(p, gpu_index=index, host=name) for p in cycle.processes.get(far_static.index, ())
            )
            history, timeline = self._kept((session.position, far_static.index), static, sample)
            health = assess(static, sample, HealthInputs(now=now))  # ECC, remapped rows, throttling, heat
            gpus.append(
                GpuState(
                    static,
                    sample,
                    processes,
                    cycle.processes_unavailable,
                    history.history(),
                    health=health,
                    timeline=timeline,
                )
            )
        missing = list(cycle.missing)
        said = ", ".join(missing[:SMI_MISSING_SHOWN])
        if len(missing) > SMI_MISSING_SHOWN:
            said += f" and {len(missing) - SMI_MISSING_SHOWN} more"
        note = f"read with nvidia-smi ({cycle.mode} query; nvtopy is not installed there)" + (
            f": no {said}" if said else ""
        )
        return gpus, note

    def _kept(self, key: Hashable, static: GpuStatic, sample: GpuSample) -> tuple[HistoryBuffer, Timeline]:
        history = self._history.get(key)
        if history is None:
            history = self._history[key] = HistoryBuffer()
        history.append(static, sample)
        timeline = self._timelines.get(key)
        if timeline is None:
            timeline = self._timelines[key] = Timeline()
        timeline.record(static, sample)
        return history, timeline


class _UnreadableError(Exception):
    """A host's newest value cannot be shown: one safe line saying why (the host is dropped and asked again)."""


def _settled(session: Session) -> bool:
    """For ``--once``: the host has a first value to show, or has failed."""
    state = session.status.state
    return state is State.LOST or (state is State.LIVE and session.latest is not None)


def _line(index: int, host: str, note: str, now: float, *, lost: bool = False) -> GpuState:
    """A host's one line where it has no GPUs to show: its state in words."""
    return GpuState(GpuStatic(index=index, host=host), GpuSample(now, lost=lost), note=note)


def _moved(gpu: GpuState, index: int, host: str) -> GpuState:
    """The same GPU line at another position, or under another name (a host before it came or went)."""
    static = dataclasses.replace(gpu.static, index=index, host=host)
    processes = tuple(dataclasses.replace(p, gpu_index=index, host=host) for p in gpu.processes)
    return dataclasses.replace(gpu, static=static, processes=processes)
