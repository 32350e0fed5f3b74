"""The forked runner (tests/cli_runner.py) gives what a spawn gives: argv, env, cwd, stdin, exit, output, timeout.

Each test runs a probe module written to a temporary directory (``python -m probe`` finds it there, as the
working directory is first on a -m run's path) through the fork server and, where it says so, through a real
``python -m probe`` too (spawned by :func:`run_command`, as ``NVTOPY_TEST_SPAWN=1`` and a second thread's run
are): the two must agree.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from . import cli_runner
from .cli_runner import run_command, run_module, run_nvtopy, spawn_nvtopy, startup_key
from .waiting import until

PROBE = """\
import atexit, json, os, sys, threading, time

def facts():
    return {
        "argv": sys.argv,
        "env": os.environ.get("PROBE_VALUE"),
        "cwd": os.getcwd(),
        "path0": sys.path[0],
        "path": sys.path,
        "modules_named_tests": [m for m in sys.modules if m == "tests" or m.startswith("tests.")],
        "stdin": sys.stdin.read(),
        "stdin_seekable": sys.stdin.seekable(),
        "stdout_line_buffered": sys.stdout.line_buffering,
        "stderr_line_buffered": sys.stderr.line_buffering,
        "stdout_write_through": sys.stdout.write_through,
        "encoding": sys.stdout.encoding,
        "tz": time.strftime("%Z", time.localtime(0)),
        "same_stdout": sys.stdout is sys.__stdout__,
        "name": __name__,
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    }

mode = sys.argv[1]
if mode == "facts":
    print(json.dumps(facts()))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
elif mode == "raise":
    raise ValueError("probe failed")
elif mode == "signal":
    os.kill(os.getpid(), int(sys.argv[2]))
elif mode == "hang":
    print(os.getpid(), flush=True)
    time.sleep(120)
elif mode == "exit-work":
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
    print("main done")
    sys.exit(0)  # SystemExit: the interpreter still joins the thread, runs atexit, then flushes
elif mode == "global":
    os.environ["PROBE_LEAK"] = "1"
    print(os.environ.get("PROBE_LEAK_SEEN", "clean"), os.getpid())
"""


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


def _spawned(
    probe_dir: Path, *args: str, env: dict[str, str], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command([sys.executable, "-m", "probe"], *args, cwd=probe_dir, env=env, input=input, timeout=60)


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "PYTHONUNBUFFERED"])
def test_a_run_gets_its_arguments_environment_directory_and_stdin_as_a_spawn_does(probe_dir, unbuffered):
    env = {**os.environ, "PROBE_VALUE": "from the test", "TZ": "PRB-3", "PYTHONUNBUFFERED": unbuffered}
    forked = run_module("probe", "facts", "3", env=env, cwd=probe_dir, input="line one\nline two\n")
    spawned = _spawned(probe_dir, "facts", "3", env=env, input="line one\nline two\n")
    assert (forked.returncode, forked.stderr) == (3, "to stderr\n")
    facts = json.loads(forked.stdout)
    assert facts["argv"] == [str(probe_dir / "probe.py"), "facts", "3"]
    assert facts["env"] == "from the test" and facts["tz"] == "PRB"
    assert facts["cwd"] == facts["path0"] == str(probe_dir)
    assert facts["stdin"] == "line one\nline two\n" and facts["fds"] == [0, 1, 2, 3]  # 3: the listing's own
    assert (forked.returncode, forked.stdout, forked.stderr) == (spawned.returncode, spawned.stdout, spawned.stderr)


def test_a_run_without_input_reads_this_process_stdin_as_a_spawn_does(probe_dir):
    forked = run_module("probe", "facts", "0", env=dict(os.environ), cwd=probe_dir)
    spawned = _spawned(probe_dir, "facts", "0", env=dict(os.environ))
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == json.loads(spawned.stdout)


def test_a_variable_read_at_start_up_gets_a_server_started_with_it(probe_dir):
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    assert startup_key(env) != startup_key(os.environ)
    forked = run_module("probe", "facts", "0", env=env, cwd=probe_dir)
    assert (
        json.loads(forked.stdout)["encoding"]
        == json.loads(_spawned(probe_dir, "facts", "0", env=env).stdout)["encoding"]
    )
    plain = run_module("probe", "facts", "0", env=dict(os.environ), cwd=probe_dir)
    assert json.loads(plain.stdout)["encoding"] == "utf-8" != json.loads(forked.stdout)["encoding"]


def test_an_uncaught_exception_is_a_traceback_and_exit_1(probe_dir):
    forked = run_module("probe", "raise", cwd=probe_dir)
    assert forked.returncode == 1
    assert forked.stderr.startswith("Traceback") and forked.stderr.endswith("ValueError: probe failed\n")


def test_a_run_killed_by_a_signal_exits_minus_the_signal(probe_dir):
    assert run_module("probe", "signal", str(int(signal.SIGTERM)), cwd=probe_dir).returncode == -signal.SIGTERM


def test_the_interpreter_ends_as_a_spawned_one_does(probe_dir):
    """Threads joined, atexit handlers run, then stdout flushed: the order of a real exit."""
    forked = run_module("probe", "exit-work", cwd=probe_dir)
    assert (forked.returncode, forked.stdout) == (0, "main done\nthread finished\natexit ran\n")


def test_each_run_is_a_process_of_its_own(probe_dir):
    first = run_module("probe", "global", cwd=probe_dir).stdout.split()
    second = run_module("probe", "global", cwd=probe_dir).stdout.split()
    assert first[0] == second[0] == "clean"
    assert len({first[1], second[1], str(os.getpid())}) == 3


def test_a_run_past_its_timeout_is_killed_and_raises(probe_dir):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_module("probe", "hang", cwd=probe_dir, timeout=1)
    assert time.monotonic() - started < 30, "the run was waited for, not killed"
    pid = int(str(raised.value.output).split()[0])
    assert not Path(f"/proc/{pid}").exists(), "the run outlived its timeout"
    assert run_module("probe", "facts", "0", cwd=probe_dir).returncode == 0, "the server serves on"


def test_nvtopy_forked_and_spawned_agree_on_an_error():
    forked = run_nvtopy("--demo", "--once", "--gpus", "9")
    spawned = spawn_nvtopy("--demo", "--once", "--gpus", "9")
    assert spawned.args == [sys.executable, "-m", "nvtopy", "--demo", "--once", "--gpus", "9"] == forked.args
    assert (forked.returncode, forked.stdout, forked.stderr) == (2, "", spawned.stderr)
    assert spawned.returncode == 2


def test_nvtopy_test_spawn_spawns_every_run_with_all_it_was_given(monkeypatch, tmp_path):
    """``NVTOPY_TEST_SPAWN=1``: no fork server asked, and the spawn gets the run's env, cwd, stdin and timeout."""

    def no_fork(*args, **kwargs):
        raise AssertionError("forked under NVTOPY_TEST_SPAWN=1")

    spawned: list[tuple[tuple[str, ...], dict[str, object]]] = []

    def spawn(cmd, *args, **kwargs):
        spawned.append(((*cmd, *args), kwargs))
        return subprocess.CompletedProcess([*cmd, *args], 0, "out", "")

    monkeypatch.setattr(cli_runner, "run_module", no_fork)
    monkeypatch.setenv("NVTOPY_TEST_SPAWN", "1")
    real = run_nvtopy("--demo", "--once", "--gpus", "9")
    assert (real.returncode, real.stdout) == (2, "") and "--gpus" in real.stderr, real.stderr
    monkeypatch.setattr(cli_runner, "run_command", spawn)
    env = {"PROBE_VALUE": "1"}
    assert run_nvtopy("--once", env=env, timeout=7, cwd=tmp_path, input="in").stdout == "out"
    assert spawned == [
        ((sys.executable, "-m", "nvtopy", "--once"), {"env": env, "timeout": 7, "cwd": tmp_path, "input": "in"})
    ]


def test_a_run_interrupted_in_the_test_is_ended_and_the_next_run_gets_a_fresh_server(probe_dir):
    """pytest-timeout's alarm (or Ctrl-C) raising while a run is under way: no run left behind, no late reply."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    def interrupt_once_it_runs() -> None:
        deadline = time.monotonic() + 30
        while not _running_in(probe_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_module("probe", "hang", cwd=probe_dir, timeout=60)
    finally:
        signal.signal(signal.SIGALRM, previous)
    deadline = time.monotonic() + 10
    while _running_in(probe_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running_in(probe_dir) == [], "the interrupted run still runs"
    done = run_module("probe", "facts", "5", cwd=probe_dir)
    assert (done.returncode, done.stderr) == (5, "to stderr\n"), "a reply owed to the interrupted run came instead"


def _interrupted_hang_is_ended(probe_dir, monkeypatch, owner, name: str, patched) -> None:
    """With a server ready, ``owner.name`` patched (where the interrupt lands) for one hanging run: it raises the
    interrupt, the run is then ended, and a fresh server runs the next."""
    assert run_module("probe", "facts", "0", cwd=probe_dir).returncode == 0  # a server ready, before the patch
    monkeypatch.setattr(owner, name, patched)
    with pytest.raises(KeyboardInterrupt):
        run_module("probe", "hang", cwd=probe_dir, timeout=60)
    monkeypatch.undo()
    until(lambda: _running_in(probe_dir) == [], 10, "the interrupted run to end")
    assert run_module("probe", "facts", "5", cwd=probe_dir).returncode == 5, "a fresh server runs the next"


def test_a_run_whose_pid_reply_the_interrupt_took_is_still_ended(probe_dir, monkeypatch):
    """The interrupt lands after the server's pid reply was read and before it was returned: the pid is lost with
    it, and the run (under the server, which serves one at a time) is ended all the same."""
    real_receive = cli_runner._Zygote.receive
    calls = []

    def receive(self, deadline):
        calls.append(deadline)
        if len(calls) == 1:
            real_receive(self, deadline)  # the pid's reply, read ...
            raise KeyboardInterrupt  # ... and lost
        raise TimeoutError  # no second reply comes: the run hangs (at once here, not after _discard's 5 s)

    _interrupted_hang_is_ended(probe_dir, monkeypatch, cli_runner._Zygote, "receive", receive)


def test_a_run_interrupted_as_its_request_is_sent_is_still_ended(probe_dir, monkeypatch):
    """The interrupt lands as the request's send returns (the main thread waiting for the GIL while the server
    forks the run: seen once in CI): the run is ended and the server discarded, not left hanging under it."""
    real_send = cli_runner.socket.send_fds

    def send_fds(*args, **kwargs):
        real_send(*args, **kwargs)
        until(lambda: _running_in(probe_dir) != [], 30, "the run to start")
        raise KeyboardInterrupt

    _interrupted_hang_is_ended(probe_dir, monkeypatch, cli_runner.socket, "send_fds", send_fds)


# The first run's hang in the two-threads test ends at this timeout: the second run (a spawn, 0.03-0.05 s on the
# 2-core machine under load 7) must end before it. It was 10 s, a worker held for the whole of it.
HANG_S = 3.0


def test_two_runs_at_once_from_threads_both_run(probe_dir):
    """A test may run nvtopy from two threads at once: the second does not wait for the first to end.

    Proven by the order the two end in: the second ends while the first still hangs (its timeout ends it,
    ``HANG_S`` after it started); a second run that waited for the server could only end after the first's
    TimeoutExpired. The server is started by a run before, so the first's timeout counts its hang alone.
    """
    assert run_module("probe", "facts", "0", cwd=probe_dir).returncode == 0  # this environment's server, ready
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        hanging = pool.submit(run_module, "probe", "hang", cwd=probe_dir, timeout=HANG_S)
        until(lambda: _running_in(probe_dir), 10, "the first run to start")  # it has the server now
        quick = pool.submit(run_module, "probe", "facts", "0", cwd=probe_dir, timeout=60)
        assert quick.result(timeout=60).returncode == 0
        assert not hanging.done(), "the second run waited for the first"
        with pytest.raises(subprocess.TimeoutExpired):
            hanging.result()


def _running_in(directory: Path) -> list[int]:
    """The live processes (not zombies) whose working directory is ``directory``: the probe's runs."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
