"""``--ssh``'s transport, through a stand-in ``ssh`` (:mod:`.fake_ssh`): every host's state, deadline and bound.

The real sshd's tests (tests/end_to_end/test_ssh_real_sshd.py) show the same paths through OpenSSH; these
show what only a double can make happen on demand: silence, junk, a flood, a line without end, 256 hosts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nvtopy.alerts.engine import AlertEngine
from nvtopy.alerts.settings import alert_settings
from nvtopy.model import Snapshot
from nvtopy.sources.remote.ssh import streams
from nvtopy.sources.remote.ssh.hosts import SshHosts
from nvtopy.sources.remote.ssh.session import Session, State, Status
from nvtopy.sources.remote.ssh.streams import MAX_WAIT, TIMER_STEP
from nvtopy.sources.remote.ssh.targets import expand

from ....waiting import until
from . import fake_ssh


def hosts(tmp_path: Path, names: str, **options: object) -> SshHosts:
    program = fake_ssh.install(tmp_path)
    settings: dict[str, object] = {"connect_timeout": 5.0, **options}
    return SshHosts(expand(names.split(","), {}), 0.25, program=str(program), **settings)  # type: ignore[arg-type]


def lines_of(snapshot: Snapshot) -> dict[str, list[str | None]]:
    """Each host's lines: its GPUs' names, or its note."""
    out: dict[str, list[str | None]] = {}
    for gpu in snapshot.gpus:
        out.setdefault(gpu.static.host or "", []).append(gpu.note or gpu.static.name)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_each_host_is_read_or_says_why_and_none_holds_up_the_others(tmp_path: Path):
    source = hosts(tmp_path, "gpu-a,hang,denied,junk,gpu-b")
    source.streams.start()
    try:
        until(lambda: all(source.streams.sessions[n].latest for n in (0, 4)), what="both live hosts' snapshots")
        until(lambda: source.streams.sessions[3].status.state is State.LOST, what="the junk host dropped")
        snapshot = source.poll_once()
    finally:
        source.stop()
    shown = lines_of(snapshot)
    assert shown["gpu-a"] == ["NVIDIA H100 80GB HBM3"] * 2 and shown["gpu-b"] == ["NVIDIA H100 80GB HBM3"] * 2
    assert shown["hang"][0] in ("connecting", "connecting (1 s)")
    denied = shown["denied"][0] or ""
    assert denied.startswith("lost: me@denied: Permission denied (publickey). -- nvtopy never asks for a password")
    assert "reconnecting in" in denied
    junk = shown["junk"][0] or ""
    assert junk.startswith("lost: not nvtopy's stream nor nvidia-smi's output (it said: ") and "binary data" in junk
    # Every GPU and process carries its host, and its index there; the fleet's indices are one run.
    assert [gpu.index for gpu in snapshot.gpus] == list(range(len(snapshot.gpus)))
    firsts = [gpu for gpu in snapshot.gpus if gpu.static.host == "gpu-b"]
    assert [gpu.static.host_index for gpu in firsts] == [0, 1]
    assert all(p.host == "gpu-b" and p.gpu_index == firsts[0].index for p in firsts[0].processes)
    assert firsts[0].processes and firsts[0].history.timestamps and firsts[0].timeline is not None
    assert source.status_line() == "SSH 2/5 hosts ⟳ 0.25s"


def lost_status(session: Session) -> Status | None:
    """The host's status if it is lost, read once (a lost host is asked again after its backoff, 1 s at first, and
    is then connecting with no reason: a test reading ``status.reason`` later could see that instead)."""
    status = session.status
    return status if status.state is State.LOST else None


def test_a_host_that_never_begins_its_stream_is_dropped_at_the_deadline_and_asked_again(tmp_path: Path):
    source = hosts(tmp_path, "hang", connect_timeout=1.0)
    source.streams.start()
    try:
        session = source.streams.sessions[0]
        first = until(lambda: session.process and session.process.pid)
        lost = until(lambda: lost_status(session), 4.0, "dropped after its 1 s")
        assert lost.reason == "no answer within 1 s"
        until(lambda: not alive(first), 2.0, "its ssh ended")  # type: ignore[arg-type]
        until(lambda: session.status.attempts == 2 and session.process is not None, 4.0, "asked again")
    finally:
        source.stop()


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("flood", "sent more than 2000 lines in 2 s (flooding)"),
        ("bigflood", "sent more than 4 MiB in 2 s (flooding)"),
        ("longline", "sent a line longer than 16 MiB (not nvtopy's stream)"),
    ],
)
def test_a_flooding_host_is_dropped_and_costs_the_others_nothing(tmp_path: Path, host: str, reason: str):
    """Flood bounds a tenth of the defaults': a flood is counted as fast as the I/O thread reads it, and on a machine
    starved of CPU (a loaded CI runner) that is slower than the default bounds need (both the same rule)."""
    bounds = {} if host == "longline" else {"flood_bytes": 4 << 20, "flood_lines": 2000}  # (a line: 16 MiB first)
    source = hosts(tmp_path, f"{host},gpu-a", **bounds)
    source.streams.start()
    try:
        flood, other = source.streams.sessions
        lost = until(lambda: lost_status(flood), 10.0, f"{host} dropped")
        assert lost.reason == reason
        assert not flood.buffer  # its bytes are let go with it
        count = until(lambda: other.latest and other.latest.sequence)
        until(lambda: other.latest and other.latest.sequence > count, 3.0, "the other host still streaming")  # type: ignore[operator]
    finally:
        source.stop()


def test_a_silent_host_goes_stale_then_is_dropped(tmp_path: Path):
    source = hosts(tmp_path, "once,gpu-a", silent_after=2.0)
    source.streams.start()
    try:
        once = source.streams.sessions[0]
        until(lambda: once.latest is not None, what="its one snapshot")
        snapshot = source.poll_once()
        assert lines_of(snapshot)["once"] == ["NVIDIA H100 80GB HBM3"] * 2
        until(lambda: time.monotonic() - once.latest.received > 0.8, what="three intervals")  # type: ignore[union-attr]
        stale = lines_of(source.poll_once())["once"]
        assert len(stale) == 2 and all(note and note.startswith("stale: no snapshot for ") for note in stale)
        lost = until(lambda: lost_status(once), 4.0, "dropped after 2 s of silence")
        assert lost.reason == "silent for 2 s"
    finally:
        source.stop()


def test_a_session_that_ends_is_reconnected_with_a_backoff(tmp_path: Path):
    source = hosts(tmp_path, "exits")
    source.streams.start()
    try:
        session = source.streams.sessions[0]
        lost = until(lambda: lost_status(session), what="the session's end")
        assert lost.reason == "the session ended"
        assert lost.retry_at is not None and 0.8 <= lost.retry_at - lost.since <= 1.2  # the first retry: 1 s
        second = until(
            lambda: session.status.attempts == 2 and session.status.state is State.LOST and session.status,
            3.0,
            "reconnected, and ended again",
        )
        assert second.retry_at is not None and 1.7 <= second.retry_at - second.since <= 2.3  # type: ignore[attr-defined]
    finally:
        source.stop()


@pytest.mark.timing  # a bound on the clock (quit within 0.5 s): run apart from the loaded pass
def test_stop_ends_every_ssh_at_once(tmp_path: Path):
    source = hosts(tmp_path, "hang,gpu-a,hang2,gpu-b")
    source.start()
    until(lambda: len(source.streams.children()) == 4, what="four ssh processes")
    until(lambda: source.latest is not None and "SSH 2/4" in source.status_line(), what="two hosts live")
    children = source.streams.children()
    began = time.monotonic()
    source.stop()
    took = time.monotonic() - began
    assert took < 0.5, f"stop took {took:.2f} s"
    assert not [pid for pid in children if alive(pid)]


@pytest.mark.timing  # a bound on the clock (quit within 0.5 s): run apart from the loaded pass
def test_256_hosts_cost_one_thread_and_two_descriptors_each(tmp_path: Path):
    # Threads counted by who they are, not how many: an earlier test's thread ending meanwhile must not count.
    threads_before = set(threading.enumerate())
    fds_before = len(os.listdir("/proc/self/fd"))
    source = hosts(tmp_path, ",".join(f"hang{n}" for n in range(256)), max_connecting=256)
    source.streams.start()
    try:
        until(lambda: len(source.streams.children()) == 256, 30.0, "256 ssh processes")
        started = set(threading.enumerate()) - threads_before
        assert len(started) == 1, started  # the one I/O thread
        assert len(os.listdir("/proc/self/fd")) - fds_before <= 2 * 256 + 8
    finally:
        began = time.monotonic()
        source.stop()
        took = time.monotonic() - began
    assert took < 2.0, f"stopping 256 sessions took {took:.2f} s"
    assert not set(threading.enumerate()) - threads_before  # the I/O thread has ended


def test_hosts_connect_in_waves_of_at_most_max_connecting(tmp_path: Path):
    source = hosts(tmp_path, ",".join(f"hang{n}" for n in range(40)), max_connecting=8)
    source.streams.start()
    try:
        until(lambda: len(source.streams.children()) == 8, what="the first wave")
        time.sleep(0.3)  # a window in which a ninth would have started: there must be none (not a wait for luck)
        states = [s.status.state for s in source.streams.sessions]
        assert states.count(State.CONNECTING) == 8 and states.count(State.WAITING) == 32
    finally:
        source.stop()


def counted_looks(source: SshHosts) -> list[float]:
    """When the I/O thread looks at its timers (each look a pass over every host): the list fills as it runs."""
    looks: list[float] = []
    check = source.streams._check_timers

    def counting(now: float) -> float:
        looks.append(now)
        return check(now)

    source.streams._check_timers = counting  # type: ignore[method-assign]
    return looks


def test_streaming_hosts_wake_the_thread_without_a_look_at_every_hosts_timers(tmp_path: Path):
    """Four hosts, a line each 0.2 s, wake the thread every pause (0.0625 s here); its timers are looked at when a
    deadline is due (at most :data:`MAX_WAIT` apart) or a host's state changed, none of which happens here. A
    loaded machine only wakes the thread less often: the bound cannot be tripped by load."""
    source = hosts(tmp_path, "gpu-a,gpu-b,gpu-c,gpu-d")
    looks = counted_looks(source)
    source.streams.start()
    try:
        sessions = source.streams.sessions
        until(lambda: all(s.latest and s.latest.sequence >= 2 for s in sessions), what="every host streaming")

        def sent() -> int:
            return sum(s.latest.sequence for s in sessions if s.latest)

        began, first, before = time.monotonic(), len(looks), sent()
        until(lambda: time.monotonic() - began >= 1.5, what="1.5 s")  # a window: (a wait for time, not for luck)
        window = time.monotonic() - began
        assert all(s.status.state is State.LIVE for s in sessions)
        assert sent() - before >= 8  # the hosts did stream (and wake the thread) in the window
        assert len(looks) - first <= window / MAX_WAIT + 2, f"{len(looks) - first} looks in {window:.2f} s"
    finally:
        source.stop()


def test_a_host_due_again_while_others_take_every_connection_slot_does_not_spin_the_thread(tmp_path: Path):
    """``exits`` ends and is due again after 1 s, but ``hang`` holds the one slot until its 4 s deadline: the
    thread looks again every :data:`TIMER_STEP` (not in a loop), and ``exits`` is asked again once the slot is free."""
    source = hosts(tmp_path, "exits,hang", max_connecting=1, connect_timeout=4.0)
    looks = counted_looks(source)
    source.streams.start()
    try:
        exits, hang = source.streams.sessions
        lost = until(lambda: exits.status.state is State.LOST and exits.status, what="exits ended")
        retry_at = lost.retry_at  # type: ignore[attr-defined]
        until(lambda: time.monotonic() > retry_at + 1.0, what="a second past its retry")
        assert hang.status.state is State.CONNECTING and exits.status.state is State.LOST  # held back
        held = [now for now in looks if retry_at <= now <= retry_at + 1.0]
        assert len(held) <= 3 / TIMER_STEP, f"{len(held)} looks in the second it was held back"
        # Asked again: its second attempt (counted as its ssh starts). Not "and its process is alive": that one
        # exits at once, a window a loaded machine's polls can miss.
        until(lambda: exits.status.attempts >= 2, 8.0, "asked again once hang lost")
        assert hang.status.state is State.LOST
    finally:
        source.stop()


def test_a_refresh_takes_each_hosts_newest_line_though_lines_wait_to_be_parsed_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Stream lines are parsed in batches (a cold cache's cost once, not every pause): the first snapshot at once,
    the others when a refresh asks (``catch_up``) -- here the only batch -- so it shows the newest line read."""
    monkeypatch.setattr(streams, "PARSE_AFTER", 1000.0)  # no batch but the refresh's
    monkeypatch.setattr(streams, "ASKED_WITHIN", 1000.0)  # (one refresh: lines wait for the next)
    source = hosts(tmp_path, "gpu-a")  # a line each 0.2 s
    source.streams.start()
    try:
        session = source.streams.sessions[0]
        first = until(lambda: session.latest, what="its first snapshot")
        source.poll_once()
        first = session.latest
        until(lambda: time.monotonic() - first.received >= 1.0, what="a second of lines")  # type: ignore[attr-defined]
        assert session.latest is first  # read, kept for the refresh
        source.poll_once()
        assert session.latest.sequence >= 2 and session.latest.received > first.received  # type: ignore[attr-defined]
    finally:
        source.stop()


def test_with_no_refresh_asking_lines_are_parsed_as_they_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``--once`` waiting for first snapshots, a caller watching ``latest``: no batch to wait for."""
    monkeypatch.setattr(streams, "PARSE_AFTER", 1000.0)  # a batch would never come
    monkeypatch.setattr(streams, "PENDING_BYTES", 1 << 30)  # nor the bound's parse
    source = hosts(tmp_path, "gpu-a")
    source.streams.start()
    try:
        session = source.streams.sessions[0]
        until(lambda: session.latest and session.latest.sequence >= 3, what="lines parsed as they came")
    finally:
        source.stop()


def test_a_hosts_lines_past_the_pending_bound_are_parsed_as_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """What waits to be parsed is bounded (:data:`PENDING_BYTES` a host): past it, lines are parsed as they come,
    with no refresh asking and no batch due."""
    monkeypatch.setattr(streams, "PARSE_AFTER", 1000.0)
    monkeypatch.setattr(streams, "ASKED_WITHIN", 1000.0)
    monkeypatch.setattr(streams, "PENDING_BYTES", 1)  # every line is past it
    source = hosts(tmp_path, "gpu-a")
    source.streams.start()
    try:
        session = source.streams.sessions[0]
        until(lambda: session.latest, what="its first snapshot")
        source.poll_once()  # a refresh asked: lines would wait for the next
        until(lambda: session.latest and session.latest.sequence >= 3, what="lines parsed as read")
    finally:
        source.stop()


def test_a_host_that_ends_has_the_lines_it_sent_parsed_before_it_is_dropped(tmp_path: Path):
    source = hosts(tmp_path, "exits")  # a hello, two snapshots, the end
    source.streams.start()
    try:
        session = source.streams.sessions[0]
        until(lambda: session.status.state is State.LOST, what="the session's end")
        assert session.status.reason == "the session ended"
        assert session.latest is not None and session.latest.sequence == 2
    finally:
        source.stop()


@pytest.mark.skipif(sys.platform != "linux" or not Path("/usr/bin/setpriv").exists(), reason="needs setpriv (Linux)")
def test_a_killed_monitor_leaves_no_ssh_behind(tmp_path: Path):
    program = fake_ssh.install(tmp_path)
    code = textwrap.dedent(
        f"""
        import sys, time
        from nvtopy.sources.remote.ssh.hosts import SshHosts
        from nvtopy.sources.remote.ssh.targets import expand
        source = SshHosts(expand(["hang1", "hang2", "gpu-a"], {{}}), 0.25, program={str(program)!r})
        source.start()
        while len(source.streams.children()) < 3:
            time.sleep(0.02)
        print(*source.streams.children(), flush=True)
        time.sleep(60)
        """
    )
    monitor = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert monitor.stdout is not None
        children = [int(pid) for pid in monitor.stdout.readline().split()]
        assert len(children) == 3 and all(alive(pid) for pid in children)
        monitor.send_signal(signal.SIGKILL)  # no atexit, no finally: the kernel's parent-death signal only
        monitor.wait(5)
        until(lambda: not [pid for pid in children if alive(pid)], 5.0, "the ssh processes ended")
    finally:
        monitor.kill()
        monitor.wait(5)


def test_the_alert_engine_says_a_host_is_unreachable_never_that_its_gpus_fell_off(tmp_path: Path):
    """What the monitor's alerts make of these lines: a denied host is host-unreachable; one connecting, nothing."""
    engine = AlertEngine(alert_settings({"host-unreachable": {"for": 0}}))
    source = hosts(tmp_path, "gpu-a,hang,denied")
    source.streams.start()
    try:
        until(lambda: source.streams.sessions[0].latest, what="the live host's snapshot")
        until(lambda: source.streams.sessions[2].status.state is State.LOST, what="the denied host dropped")
        snapshot = source.poll_once()
    finally:
        source.stop()
    assert [gpu.sample.lost for gpu in snapshot.gpus if gpu.static.host == "denied"] == [True]
    said = engine.observe(snapshot)
    assert [(e.rule_id, e.host) for e in said] == [("host-unreachable", "denied")]
    assert said[0].summary.startswith("denied cannot be read: lost: me@denied: Permission denied (publickey).")
