"""Every host's ssh process on one thread: started, read, timed, dropped and asked again.

Why one thread for all hosts, with a selector, rather than a thread per host: a
host list of 256 must not cost 256 threads, and one host that floods or hangs
must cost the others nothing. Each host's output is a non-blocking pipe; the
thread waits on all of them at once (``selectors``) and on its own timers, so
every wait has a deadline:

- a host that has not begun its stream ``connect_timeout`` seconds after ssh
  started is dropped ("no answer within 10 s");
- a live host silent for :func:`silent_after_default` seconds is dropped (ssh's own
  keep-alives notice a dead network too; this notices a far side that hangs);
- a host that sends more than :data:`FLOOD_BYTES` or :data:`FLOOD_LINES` in
  :data:`FLOOD_WINDOW` seconds, or a line over :data:`~.session.MAX_LINE`
  bytes (:data:`MAX_TEXT_LINE` before the stream begins, and in nvidia-smi's CSV), is dropped;
- a dropped host is asked again after a backoff that doubles from 1 s up to
  :data:`MAX_BACKOFF` (with a little jitter, so 200 hosts do not reconnect in
  step); a host that was live a minute starts again from 1 s;
- at most ``max_connecting`` hosts connect at once (forks and handshakes come
  in waves, not all together).

The thread cuts each host's output into lines as it comes (every bound above is counted as read) but parses a
host's stream lines in one batch with every other host's, when a refresh asks for the hosts' values
(:meth:`SshStreams.catch_up`; :data:`PARSE_AFTER` says why, and the bounds on what waits); its timers are looked
at when a deadline is due or a host's state changed, not at every wake-up.

Only this thread starts ssh processes, and each is started in its own process
group (a Ctrl-C in the terminal is the monitor's, not ssh's) and, where
``setpriv`` exists, with the parent-death signal set: if the monitor is killed
outright (SIGKILL, a crash), the kernel ends its ssh processes too. On
:meth:`SshStreams.stop`, and at interpreter exit, every ssh is closed: its stdin
(the far nvtopy ends on that EOF), SIGTERM to its group, SIGKILL to what is left
after :data:`STOP_GRACE` seconds; every child is reaped.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import random
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from ....errors import UsageError
from ....formats.nvidia_smi_csv import SmiCycleReader
from ....formats.stream import StreamError, StreamFailure, StreamHello, StreamReader, read_line
from .session import MAX_LINE, MAX_PREAMBLE_LINES, Mode, Session, State
from .targets import SshTarget

__all__ = ["SshStreams", "silent_after_default"]

READ_CHUNK = 1 << 16
CHUNKS_PER_WAKE = 64  # 4 MiB of one host at one wake-up at most
MAX_TEXT_LINE = 64 << 10  # a line before the stream begins, or of nvidia-smi's CSV: words, never megabytes
FLOOD_WINDOW = 2.0
# In FLOOD_WINDOW: a healthy host sends a snapshot line a second (tens of KiB for 8 GPUs, about 1 MiB for 64 GPUs
# with thousands of processes); every line is parsed here (a patch needs the one before it), so a flood costs this
# thread the parsing of at most this many bytes before it is cut off.
FLOOD_BYTES = 32 << 20
FLOOD_LINES = 20_000  # in FLOOD_WINDOW: nvidia-smi's loop prints a line per GPU and process a cycle
MAX_BACKOFF = 60.0
LONG_BACKOFF = 30.0  # after a host said plainly that it cannot serve (no nvtopy, no nvidia-smi, no driver)
STEADY_AFTER = 60.0  # live this long: the next drop reconnects at once, as a first one does
STOP_GRACE = 0.3
COALESCE = 0.1
"""Seconds the thread pauses after reading hosts' output (a quarter of the interval at most), so that the next
wake-up reads several hosts' lines: 64 hosts sending a line a second woke it 60 times a second, each a context
switch and a pass of the loop (measured at 64 hosts: 16 ms of its CPU a second, 7 ms with 0.05 s, 6 with 0.1 s)."""
PARSE_AFTER = 1.5
"""Intervals a stream line may wait, read but not parsed, for a refresh to ask for the hosts' values
(:meth:`SshStreams.catch_up`, which has them parsed in one batch). Why lines wait at all: parsed as they came, a
few hosts' lines after each pause, the parsing ran on caches gone cold in the pause: at 64 hosts x 8 GPUs, 9-11 ms
of this thread's CPU a second, against 6 ms for the same lines parsed in one batch a second (4 ms back to back)."""
ASKED_WITHIN = 2.0
"""Intervals since a refresh last asked (:meth:`SshStreams.catch_up`) within which lines wait for the next: where
none asks (``--once`` waiting for first snapshots, a caller watching :attr:`Session.latest`), lines are parsed at
each wake-up, as they come."""
PENDING_BYTES = 256 << 10  # a host's lines read but not parsed, at most: a host with larger lines is parsed as read
CATCH_UP_WAIT = 0.1  # the longest a refresh waits for the lines read to be parsed (a flood read at that moment)
MAX_WAIT = 0.5  # the longest the thread sleeps without looking at its timers
TIMER_STEP = 0.1  # how soon it looks again for a host due to reconnect but held back by ``max_connecting``
_PDEATHSIG = ("setpriv", "--pdeathsig", "TERM", "--")


def silent_after_default(interval: float) -> float:
    """Seconds without a byte after which a live host is dropped: ten intervals, at least 15 s."""
    return max(15.0, 10 * interval)


def _hint(said: str) -> str:
    """What to do about the commonest ssh failures, after what ssh said."""
    if "Permission denied" in said:
        return f"{said} -- nvtopy never asks for a password: load a key into the agent or ssh-copy-id this host"
    if "Host key verification failed" in said:
        return f"{said} -- connect once with ssh to check and accept its host key"
    return said


class SshStreams:
    """The hosts' sessions (:attr:`sessions`, in the order given) and the thread that runs them."""

    def __init__(
        self,
        targets: Sequence[SshTarget],
        argv_for: Callable[[SshTarget], list[str]],
        script: str,
        interval: float,
        *,
        connect_timeout: float = 10.0,
        max_connecting: int = 32,
        silent_after: float | None = None,
        pdeathsig: bool = True,
        flood_bytes: int = FLOOD_BYTES,
        flood_lines: int = FLOOD_LINES,
    ) -> None:
        """``silent_after``: seconds without a byte before a live host is dropped (None: the default).

        The default is :func:`silent_after_default`. ``flood_bytes``, ``flood_lines``: what a host may
        send in :data:`FLOOD_WINDOW` (the tests' floods use less: a flood is counted as fast as this
        thread reads it, which on a starved machine is slower than the flood's own pace).
        """
        self.sessions = [Session(target, position) for position, target in enumerate(targets)]
        self._argv_for = argv_for
        self._script = script.encode()
        self.interval = interval
        self.connect_timeout = connect_timeout
        self.max_connecting = max_connecting
        self.silent_after = silent_after_default(interval) if silent_after is None else silent_after
        self.flood_bytes = flood_bytes
        self.flood_lines = flood_lines
        self._prefix = _PDEATHSIG if pdeathsig and sys.platform == "linux" and shutil.which("setpriv") else ()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = False
        self._catch_up: collections.deque[threading.Event] = collections.deque()  # refreshes waiting for the parse
        self._parse_at: float | None = None  # when lines read but not parsed must be parsed, unless a refresh asks
        self._asked_at = -float("inf")  # when a refresh last asked for every line parsed (catch_up)
        self._recheck = False  # set by this thread when a host's state changed: its timers looked at next pass
        self._woken = threading.Event()  # set by _wake: a coalescing pause ends at once
        self._coalesce = min(COALESCE, interval / 4)
        self._thread: threading.Thread | None = None
        self._ending: list[tuple[float, subprocess.Popen[bytes]]] = []  # killed, not yet reaped
        self._random = random.Random()
        _allow_descriptors(2 * len(self.sessions) + 64)

    # ----------------------------------------------------------------- control (any thread)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvtopy-ssh-io", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self, timeout: float = 1.0) -> None:
        """End every session (stdin closed, SIGTERM, SIGKILL after :data:`STOP_GRACE`) and the thread."""
        self._stopping = True
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            self._close_all()  # never started, or ended: nothing else touches the processes now
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def catch_up(self, timeout: float = CATCH_UP_WAIT) -> None:
        """Have every line read so far parsed (each host's newest value published) before a refresh takes them.

        Returns when done, or after ``timeout`` seconds (the thread reading a flood: the refresh shows what was
        parsed); at once where the thread does not run.
        """
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread() or self._stopping:
            return
        done = threading.Event()
        self._asked_at = time.monotonic()
        self._catch_up.append(done)
        self._wake()
        done.wait(timeout)

    def drop(self, session: Session, reason: str) -> None:
        """The source found the host's stream wrong (a line that is no snapshot): drop it, ask again later."""
        session.failure = reason
        self._wake()

    def children(self) -> list[int]:
        """The pids of the ssh processes now running (for tests and ``doctor``-like checks)."""
        return [s.process.pid for s in self.sessions if s.process is not None]

    def _wake(self) -> None:
        self._woken.set()
        with contextlib.suppress(OSError):  # full (already woken) or closed (stopped)
            os.write(self._wake_w, b"x")

    # ----------------------------------------------------------------- the thread

    def _run(self) -> None:
        """Wait on every host's output and the timers; the timers are looked at when the nearest deadline is due
        (at most :data:`MAX_WAIT` apart), after a host's state changed here (a host live, dropped, ended: the
        deadlines and the hosts that may connect change with it), and at once when woken from outside (a host
        dropped by the source, a stop) -- not at every wake-up: 64 hosts wake this thread 10 times a second,
        and each look is a pass over every host."""
        next_check = 0.0
        try:
            while not self._stopping:
                now = time.monotonic()
                if now >= next_check or self._recheck:
                    self._recheck = False
                    self._start_due(now)
                    next_check = now + self._check_timers(now)
                hosts_read = False
                for key, _ in self._selector.select(max(0.0, next_check - now)):
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            os.read(self._wake_r, 4096)
                        next_check = 0.0
                    else:
                        self._read(key.data)
                        hosts_read = True
                if self._catch_up or (self._parse_at is not None and time.monotonic() >= self._parse_at):
                    self._parse_all()
                    while self._catch_up:  # no line was read since the parse: this thread is the only reader
                        self._catch_up.popleft().set()
                if hosts_read and not self._woken.is_set():
                    self._woken.wait(self._coalesce)  # let other hosts' lines gather: one wake-up reads many
                self._woken.clear()
        finally:
            self._close_all()
            while self._catch_up:  # a refresh waiting: nothing more comes
                self._catch_up.popleft().set()

    def _parse_all(self) -> None:
        """Every host's lines read but not parsed, parsed in one batch (see :data:`PARSE_AFTER`)."""
        self._parse_at = None
        for session in self.sessions:
            if session.pending:
                self._parse_pending(session)

    def _parse_pending(self, session: Session) -> bool:
        """The host's lines read but not parsed, parsed in order; False when one of them dropped the host."""
        pending = session.pending
        if not pending:
            return True
        process = session.process
        session.pending, session.pending_bytes = [], 0
        for line, received in pending:
            self._stream_line(session, line, received)
            if session.process is not process:
                return False
        return True

    def _start_due(self, now: float) -> None:
        connecting = sum(1 for s in self.sessions if s.status.state is State.CONNECTING)
        for session in self.sessions:
            if connecting >= self.max_connecting:
                break
            status = session.status
            if status.state is State.WAITING or (
                status.state is State.LOST and status.retry_at is not None and status.retry_at <= now
            ):
                self._spawn(session, now)
                connecting += 1

    def _spawn(self, session: Session, now: float) -> None:
        argv = [*self._prefix, *self._argv_for(session.target)]
        attempts = session.status.attempts + 1
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            self._lost(session, f"could not run {argv[len(self._prefix)]}: {why.lower()}", now, LONG_BACKOFF, attempts)
            return
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(self._script)  # a few KiB: the pipe takes it whole, no wait
            process.stdin.flush()
        except OSError:
            pass  # ssh ended already: its output says why
        os.set_blocking(process.stdout.fileno(), False)
        self._selector.register(process.stdout, selectors.EVENT_READ, session)
        session.process = process
        session.buffer.clear()
        session.pending, session.pending_bytes = [], 0
        session.said.clear()
        session.preamble_lines = 0
        session.mode = None
        session.smi_reader = None
        session.stream = None
        session.failure = None
        session.window_start, session.window_bytes, session.window_lines = now, 0, 0
        session.last_data = now
        session.set_status(State.CONNECTING, attempts=attempts, mode=None)

    def _check_timers(self, now: float) -> float:
        """Drop the hosts past a deadline, reap ended processes; how long the thread may wait now."""
        wait = MAX_WAIT
        silent = self.silent_after
        for session in self.sessions:
            status = session.status
            if session.failure is not None and session.process is not None:
                self._lost(session, session.failure, now)
                continue
            if status.state is State.CONNECTING and session.process is not None:
                left = status.since + self.connect_timeout - now
                if left <= 0:
                    said = session.said_reason()
                    reason = f"no answer within {self.connect_timeout:g} s" + (f" ({said})" if said else "")
                    self._lost(session, reason, now)
                    continue
                wait = min(wait, left)
            elif status.state is State.LIVE and session.process is not None:
                left = session.last_data + silent - now
                if left <= 0:
                    self._lost(session, f"silent for {silent:g} s", now)
                    continue
                wait = min(wait, left)
            elif status.state is State.LOST and status.retry_at is not None:
                left = status.retry_at - now
                wait = min(wait, left if left > 0 else TIMER_STEP)  # due, held back: a connection's end rechecks
        still = []
        for killed_at, process in self._ending:
            if process.poll() is None:
                if now - killed_at > STOP_GRACE:
                    _signal_group(process, signal.SIGKILL)
                still.append((killed_at, process))
        self._ending = still
        if still:
            wait = min(wait, 0.05)
        return max(0.0, wait)

    def _read(self, session: Session) -> None:
        """What the host's pipe holds now, :data:`READ_CHUNK` at a time, at most :data:`CHUNKS_PER_WAKE` chunks.

        Why more than one read: the thread pauses between wake-ups (:data:`COALESCE`), so a host with
        large lines (64 GPUs, thousands of processes: a megabyte a second) must be read whole at each,
        and a flood must still be counted at its own pace; the bound keeps one host from holding the
        thread while the others wait.
        """
        process = session.process
        for _ in range(CHUNKS_PER_WAKE):
            if session.process is not process or not self._read_chunk(session) or self._stopping:
                return

    def _read_chunk(self, session: Session) -> bool:
        """One read of the host's pipe, its lines handled; False when the pipe was empty or the host is dropped."""
        process = session.process
        if process is None or process.stdout is None:
            return False
        try:
            data = os.read(process.stdout.fileno(), READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            self._ended(session, now)
            return False
        session.last_data = now
        if now - session.window_start > FLOOD_WINDOW:
            session.window_start, session.window_bytes, session.window_lines = now, 0, 0
        session.window_bytes += len(data)
        if session.window_bytes > self.flood_bytes:
            said = f"{self.flood_bytes >> 20} MiB" if self.flood_bytes >= 1 << 20 else f"{self.flood_bytes} bytes"
            self._lost(session, f"sent more than {said} in {FLOOD_WINDOW:g} s (flooding)", now)
            return False
        buffer = session.buffer
        start = len(buffer)
        buffer += data
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            start = 0
            session.window_lines += 1
            if session.window_lines > self.flood_lines:
                self._lost(session, f"sent more than {self.flood_lines} lines in {FLOOD_WINDOW:g} s (flooding)", now)
                return False
            self._line(session, line, now)
            if session.process is not process:  # the line dropped it
                return False
        if session.mode is Mode.NVTOPY and len(buffer) > MAX_LINE:
            self._lost(session, f"sent a line longer than {MAX_LINE >> 20} MiB (not nvtopy's stream)", now)
            return False
        if session.mode is not Mode.NVTOPY and len(buffer) > MAX_TEXT_LINE:  # ssh's words, a banner, CSV: short
            what = (
                "nvidia-smi's output" if session.mode is Mode.NVIDIA_SMI else "nvtopy's stream nor nvidia-smi's output"
            )
            self._lost(session, f"not {what} (a line of over {MAX_TEXT_LINE >> 10} KiB)", now, LONG_BACKOFF)
            return False
        return True

    def _line(self, session: Session, line: bytes, now: float) -> None:
        line = line.rstrip(b"\r")
        if session.mode is Mode.NVTOPY:
            if line.startswith(b"{"):
                self._pend(session, line, now)
            elif line.strip():
                self._stray(session, line, now)
            return
        if session.mode is Mode.NVIDIA_SMI:
            cycle = session.smi_reader.feed(line[:MAX_LINE].decode("utf-8", errors="replace"))
            if cycle is not None:
                session.publish(cycle, now)
            return
        if line.startswith(b"{"):
            try:
                said = read_line(line)
            except StreamError:
                said = None
            if isinstance(said, StreamHello):
                session.mode = Mode.NVTOPY
                session.stream = StreamReader()
                session.hostname = said.hostname
                session.far_version = said.version
                self._live(session, now)
                return
            if isinstance(said, StreamFailure):
                self._lost(session, said.message, now, LONG_BACKOFF)
                return
        elif line.startswith(b"#nvtopy-smi"):
            session.mode = Mode.NVIDIA_SMI
            session.smi_reader = SmiCycleReader()
            session.smi_reader.feed(line.decode("utf-8", errors="replace"))
            self._live(session, now)
            return
        self._stray(session, line, now)

    def _pend(self, session: Session, line: bytes, now: float) -> None:
        """A line of the far nvtopy's stream, kept to be parsed with the others' (see :data:`PARSE_AFTER`,
        :data:`ASKED_WITHIN`); the host's first snapshot, and a host's lines past :data:`PENDING_BYTES`, parsed at
        once."""
        session.pending.append((line, now))
        session.pending_bytes += len(line)
        if session.latest is None or session.pending_bytes > PENDING_BYTES:
            self._parse_pending(session)
        elif self._parse_at is None:  # no refresh asking: parsed at the end of this wake-up's reads
            asked = now - self._asked_at <= ASKED_WITHIN * self.interval
            self._parse_at = now + PARSE_AFTER * self.interval if asked else now

    def _stream_line(self, session: Session, line: bytes, received: float) -> None:
        """A line of the far nvtopy's stream (read at ``received``): every one parsed here, in order (a patch needs
        the one before it); the snapshot it makes is the host's newest value, decoded into GPUs only when a refresh
        takes it. A wrong line drops the host now (its backoff counted from now, not from when the line came)."""
        try:
            said = session.stream.read(line)
        except StreamError as exc:
            self._lost(session, f"sent a line that is no snapshot ({exc})", time.monotonic())
            return
        if isinstance(said, dict):
            session.publish(said, received, session.stream.patch)
        elif isinstance(said, StreamFailure):
            self._lost(session, said.message, time.monotonic(), LONG_BACKOFF)
        else:
            self._lost(session, "began its stream again", time.monotonic())

    def _stray(self, session: Session, line: bytes, now: float) -> None:
        """A line that is not the stream's: kept (briefly) as what the host said; too many of them is garbage."""
        if not self._parse_pending(session):  # the lines before it first, in order
            return
        session.preamble_lines += 1
        session.remember(line)
        if session.preamble_lines > MAX_PREAMBLE_LINES:
            said = session.said_reason() or "unreadable bytes"
            self._lost(session, f"not nvtopy's stream nor nvidia-smi's output (it said: {said})", now, LONG_BACKOFF)

    def _live(self, session: Session, now: float) -> None:
        self._recheck = True  # its deadline is now the silence's, and one more host may connect
        session.live_since = now
        session.set_status(State.LIVE, mode=session.mode, attempts=session.status.attempts)

    def _ended(self, session: Session, now: float) -> None:
        """The host's output ended: ssh exited, or is about to."""
        process = session.process
        code = None if process is None else process.poll()
        said = session.said_reason()
        backoff = None
        if said:
            reason = _hint(said)
            if reason != said:  # a key to load, a host key to accept: the user's to fix, not a second's wait
                backoff = LONG_BACKOFF
        elif session.mode is not None:
            reason = "the session ended"
        else:
            reason = "ssh ended without a word" + ("" if code is None else f" (exit {code})")
        self._lost(session, reason, now, backoff)

    def _lost(
        self,
        session: Session,
        reason: str,
        now: float,
        backoff: float | None = None,
        attempts: int | None = None,
    ) -> None:
        """Drop the host: its ssh closed and ended, the reason said, the next try scheduled.

        The lines it sent before are parsed first, in order: its newest value published, or (one of them
        wrong) the reason that line gives.
        """
        if not self._parse_pending(session):
            return
        self._recheck = True  # its retry and its ssh's end to time, and one more host may connect
        self._close(session)
        tries = session.status.attempts if attempts is None else attempts
        if session.live_since is not None and now - session.live_since >= STEADY_AFTER:
            tries = 1  # it had been fine a good while: ask again at once, as after a first drop
        session.live_since = None
        if backoff is None:
            backoff = min(MAX_BACKOFF, 2.0 ** max(0, tries - 1))
        delay = backoff * self._random.uniform(0.9, 1.1)
        session.set_status(State.LOST, reason=reason, retry_at=now + delay, attempts=tries, mode=session.mode)

    def _close(self, session: Session) -> None:
        session.buffer = bytearray()  # a flood's 16 MiB let go now, not at the next connection
        session.pending, session.pending_bytes = [], 0
        process, session.process = session.process, None
        if process is None:
            return
        if process.stdout is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(process.stdout)
        _end(process)
        if process.poll() is None:
            self._ending.append((time.monotonic(), process))

    def _close_all(self) -> None:
        for session in self.sessions:
            self._close(session)
        deadline = time.monotonic() + STOP_GRACE
        for _, process in self._ending:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
        for _, process in self._ending:
            if process.poll() is None:
                _signal_group(process, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.2)
        self._ending = []


def _end(process: subprocess.Popen[bytes]) -> None:
    """Ask a session's ssh to end: its stdin closed (the far nvtopy's cue), SIGTERM to its group; pipes closed."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signum)  # its own group (start_new_session): ssh and a ProxyCommand it started


def _allow_descriptors(needed: int) -> None:
    """Raise the soft limit on open files to ``needed`` where the hard limit allows; a usage error where not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < needed:
        hosts = (needed - 64) // 2
        raise UsageError(f"--ssh: {hosts} hosts need {needed} open files; the limit is {soft} (ulimit -n)")
