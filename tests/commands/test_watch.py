"""``nvtopy watch`` as users run it: a real subprocess on the simulated backend (and the fake libnvidia-ml).

A line per alert that fires, as the fault is injected; exit code 0 on SIGTERM and SIGINT;
``--once-free N`` printing indices for a script; ``--timeout`` giving up in one line; a bad
``[alerts]`` entry one line and exit code 2. Each wait polls for its condition within a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from nvtopy.alerts.catalog import AlertSeverity
from nvtopy.alerts.engine import AlertEngine
from nvtopy.alerts.events import AlertEvent, Transition
from nvtopy.commands.watch import event_line, json_line, watch_loop
from nvtopy.model import GpuSample

from ..builders import NOW, NVTOPY, fake_nvml_env, gpu_state, host_info, run_nvtopy, snapshot_of
from ..conftest import needs_fake_nvml

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 30.0


class Running:
    """A watch subprocess whose stdout lines are read on a thread, so a test can wait for one with a deadline."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        environ = dict(os.environ if env is None else env)
        environ["PYTHONFAULTHANDLER"] = "1"  # a watch that does not end is made to say where each thread stands
        self.proc = subprocess.Popen(
            [*NVTOPY, "watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.errors: list[str] = []  # stderr, read as it comes: a full pipe would hold the watch up
        threading.Thread(target=self._read, daemon=True).start()
        self._stderr = threading.Thread(target=self._read_errors, daemon=True)
        self._stderr.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line)

    def wait_for(self, text: str, timeout: float = DEADLINE_S) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line with {text!r} within {timeout} s; seen {self.seen}")
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None:
                    self._stderr.join(5)
                    raise AssertionError(f"watch ended: {''.join(self.errors)}") from None
                continue
            self.seen.append(line)
            if text in line:
                return line

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # faulthandler: every thread's stack on stderr
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            self._stderr.join(5)
            raise AssertionError(
                f"watch did not end within 15 s of the signal; it said: {''.join(self.errors)[-6000:]}"
            ) from None
        self._stderr.join(5)
        return code, "".join(self.errors)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for one in started:
        one.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_line_when_a_fault_comes_and_exit_0_on_a_signal(running, signum):
    watch = Running("--demo", "--demo-fault", "xid=79:2@1", "--interval", "0.2")
    running.append(watch)
    line = watch.wait_for("gpu-xid")
    assert " FIRING critical gpu-xid: Xid 79 on GPU 1 of demo-node: GPU has fallen off the bus -- reboot" in line
    assert not any("gpu-xid" in seen for seen in watch.seen[:-1]), "once"
    code, err = watch.stop(signum)
    assert code == 0 and "Traceback" not in err and err == "", err


def test_json_lines_are_alert_events(running):
    watch = Running("--demo", "--demo-fault", "lost@2", "--interval", "0.2", "--json")
    running.append(watch)
    record = json.loads(watch.wait_for('"rule":"gpu-lost"'))
    assert (record["transition"], record["gpu"], record["severity"], record["host"]) == (
        "firing",
        2,
        "critical",
        "demo-node",
    )
    assert record["summary"] == "GPU 2 of demo-node fell off the bus" and record["key"].startswith(
        "gpu-lost/demo-node/"
    )
    assert watch.stop()[0] == 0


def test_once_free_prints_the_free_gpus_indices():
    result = run_nvtopy("watch", "--demo", "--demo-procs", "0", "--once-free", "2", timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "0,1\n", "")
    picked = run_nvtopy("watch", "--demo", "--demo-procs", "0", "--once-free", "--gpus", "2,3", timeout=60)
    assert (picked.returncode, picked.stdout) == (0, "2\n"), "N defaults to 1, the lowest selected"


def test_once_free_follows_the_gpu_free_rules_scope_in_the_config(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[alerts.gpu-free]\ngpus = [3]\n")
    result = run_nvtopy("watch", "--demo", "--demo-procs", "0", "--once-free", "--config", str(config))
    assert (result.returncode, result.stdout) == (0, "3\n"), result.stderr


def test_once_free_gives_up_after_its_timeout_in_one_line():
    started = time.monotonic()
    result = run_nvtopy("watch", "--demo", "--demo-steady", "--once-free", "2", "--timeout", "1", "--interval", "0.2")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == "nvtopy: error: --once-free: gave up after 1 s: 0 of the 2 GPUs asked for were free\n"
    assert time.monotonic() - started < 60, "a bound on a hang, not a measurement"


def test_once_free_stopped_by_a_signal_prints_no_gpu_and_says_so(running):
    watch = Running("--demo", "--demo-steady", "--once-free", "--interval", "0.2")
    running.append(watch)
    deadline = time.monotonic() + DEADLINE_S  # the GPUs are polled: the watch is past its start
    while watch.proc.poll() is None and time.monotonic() < deadline and not _polling(watch.proc.pid):
        time.sleep(0.05)
    code, err = watch.stop(signal.SIGTERM)
    assert code == 1 and watch.seen == [] and watch.lines.empty(), "a script gets no GPU, and knows"
    assert err.endswith("--once-free: stopped by a signal: 0 of the 1 GPUs asked for were free\n"), err


def _polling(pid: int) -> bool:
    """The watch has threads besides its main one (the event watcher): it has opened the GPUs."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--for", "3"), "--for goes with --once-free"),
        (("--timeout", "3"), "--timeout goes with --once-free"),
        (("--once-free", "0"), "number of GPUs 0 is not between 1 and 256"),
        (("--once-free", "--json"), "--json does not go with --once-free"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args, said):
    result = run_nvtopy("watch", "--demo", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and said in result.stderr, result.stderr


def test_a_bad_alerts_entry_is_one_line_naming_its_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[alerts.gpu-fre]\nfor = 3\n")
    result = run_nvtopy("watch", "--demo", "--config", str(config))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "nvtopy: error: alerts.gpu-fre: unknown rule 'gpu-fre'; did you mean 'gpu-free'? (known: gpu-xid, "
        "gpu-remap-pending, gpu-remap-failed, gpu-not-responding, gpu-lost, gpu-idle-held, gpu-suspected-hang, "
        "gpu-temperature-near-slowdown, gpu-power-capped, gpu-health-worse, gpu-free, process-ended, "
        "host-unreachable)\n"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[alerts]\nchannels = "bell"\n', "'alerts.channels': must be an array"),
        ("[alerts.gpu-free]\nmemory_mib = nan\n", "alerts.gpu-free.memory_mib"),
        ("interval = 0\n", "'interval'"),
    ],
)
def test_a_config_file_it_cannot_read_whole_stops_watch_in_one_line(tmp_path, text, said):
    """The monitor warns and takes the defaults; an alerting service must not start on them."""
    config = tmp_path / "config.toml"
    config.write_text(text)
    result = run_nvtopy("watch", "--demo", "--config", str(config))
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert said in result.stderr and "does not start" in result.stderr and "using defaults" not in result.stderr


# ---------------------------------------------------------------------------------------- in process


def hostile_event() -> AlertEvent:
    return AlertEvent(
        rule_id="process-ended",
        alert="NvtopyProcessEnded",
        title="process ended",
        severity=AlertSeverity.WARNING,
        transition=Transition.FIRING,
        key="process-ended/node/GPU-0/42",
        at=NOW,
        host="node",
        summary="Process 42 (evil \x1b]0;pwned\x07 \u202eboom) on GPU 0 of node ended",
        action="Look at its output.",
    )


def test_outside_text_is_escaped_for_the_terminal():
    line = event_line(hostile_event())
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line and "\n" not in line
    assert "evil \\e]0;pwned\\x07 \\u202eboom" in line and line.endswith(" -- Look at its output.")
    record = json_line(hostile_event())
    assert record.isascii() and "\n" not in record
    assert json.loads(record)["summary"] == hostile_event().summary, "JSON keeps the text, escaped its own way"


def test_the_notify_hook_gets_every_event_and_a_failing_one_is_said_once(capsys):
    lost = gpu_state(0, sample=GpuSample(NOW, lost=True))
    snapshots = iter([snapshot_of(lost, timestamp=NOW + t, host=host_info()) for t in range(3)])
    got: list[AlertEvent] = []

    def notify(event: AlertEvent) -> None:
        got.append(event)
        raise RuntimeError("the webhook is down")

    from nvtopy.commands.watch import _Notifier

    stop = threading.Event()
    notifier = _Notifier(notify)
    found = watch_loop(lambda: next(snapshots), AlertEngine(), 0.01, stop, notifier, until=lambda e: bool(e.firing()))
    assert found and [e.rule_id for e in got] == ["gpu-lost"]
    notifier(got[0])
    assert capsys.readouterr().err.count("notifications failed: RuntimeError: the webhook is down") == 1


def test_the_loop_ends_at_its_deadline_and_on_stop():
    lost = gpu_state(0, sample=GpuSample(NOW, lost=True))
    stop = threading.Event()
    ticks = iter(range(1000))
    calls = []

    def poll():
        calls.append(1)
        return snapshot_of(lost, timestamp=NOW + len(calls), host=host_info())

    assert not watch_loop(poll, AlertEngine(), 0.01, stop, lambda e: None, deadline=5, clock=lambda: next(ticks))
    assert len(calls) == 6, "polls at clock 0 to 5: the sixth finds the deadline reached"
    stop.set()
    assert not watch_loop(poll, AlertEngine(), 0.01, stop, lambda e: None) and len(calls) == 6, "stopped: no poll"


# ------------------------------------------------------------------------------------- fake-nvml


@needs_fake_nvml
def test_an_xid_from_the_fake_driver_is_a_line(running, fake_lib):
    env = fake_nvml_env(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_XID="1:48@3", FAKE_NVML_PROCS_PER_GPU="1")
    watch = Running("--interval", "0.2", env={**os.environ, **env})
    running.append(watch)
    line = watch.wait_for("gpu-xid")
    assert "FIRING critical gpu-xid: Xid 48 on GPU 1 of " in line and "double-bit ECC error" in line
    assert watch.stop()[0] == 0


def test_run_hands_every_event_to_notify_and_a_sigterm_ends_it_with_0(capsys):
    from nvtopy.commands import watch

    parser = watch.build_parser("watch")
    args = parser.parse_args(["--demo", "--demo-fault", "lost@1", "--interval", "0.1"])
    got: list[AlertEvent] = []

    def notify(event: AlertEvent) -> None:
        got.append(event)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler watch installed sets its stop event

    before = signal.getsignal(signal.SIGTERM)
    assert watch.run("watch", args, notify=notify) == 0
    assert [(e.rule_id, e.gpu_index) for e in got] == [("gpu-lost", 1)]
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "FIRING critical gpu-lost: GPU 1 of demo-node fell off the bus" in out
    assert signal.getsignal(signal.SIGTERM) is before, "the handler it replaced is back"


# ---------------------------------------------------------------------------------------- the channels


def test_an_alert_reaches_a_configured_command_channel(running, tmp_path):
    """The config's channels get each alert (a real script run by the command channel), besides the line."""
    seen = tmp_path / "seen.jsonl"
    script = tmp_path / "on-alert.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s %s\\n" "$NVTOPY_ALERT_RULE" "$NVTOPY_ALERT_TRANSITION" >> {seen}\n')
    script.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(f'[alerts]\nchannels = ["command:{script}"]\n')
    watch = Running("--demo", "--demo-fault", "lost@2", "--interval", "0.2", "--config", str(config))
    running.append(watch)
    watch.wait_for("gpu-lost")
    deadline = time.monotonic() + DEADLINE_S
    while "gpu-lost firing" not in (seen.read_text() if seen.exists() else ""):
        assert time.monotonic() < deadline, f"the command channel never ran; {watch.seen}"
        time.sleep(0.05)
    code, err = watch.stop()
    assert code == 0 and err == "", err


def test_a_bad_channel_is_one_line_and_exit_2_without_its_secret(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[alerts]\nchannels = ["bell", "bogus://s3cr3t-token@example.invalid/x"]\n')
    result = run_nvtopy("watch", "--demo", "--config", str(config))
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "channels entry 2" in result.stderr and "s3cr3t" not in result.stderr, result.stderr


def test_print_config_shows_channels_without_their_secrets(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[alerts]\nchannels = ["bell", "json://user:s3cr3t@127.0.0.1:9/hook"]\n')
    result = run_nvtopy("--print-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("channels = "))
    assert '"bell"' in line and "127.0.0.1" in line and "s3cr3t" not in result.stdout, line


@pytest.mark.parametrize(
    ("configured", "environ", "expected"),
    [
        (None, {"DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus"}, ("desktop",)),
        (None, {}, ()),  # a server: no desktop to notify, the line on stdout is the alert
        ((), {"DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus"}, ()),  # channels = [] turns them off
        (("bell",), {}, ("bell",)),
    ],
)
def test_with_no_channels_set_watch_notifies_the_desktop_where_there_is_one(configured, environ, expected):
    from nvtopy.commands.watch import _channels

    assert _channels(configured, environ) == expected
