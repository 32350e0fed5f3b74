"""The command channel with real scripts: the event in the environment and on stdin, failures, a deadline."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from nvtopy.errors import UsageError
from nvtopy.notify import Dispatcher, parse_channels
from nvtopy.notify.channel import ChannelError
from nvtopy.notify.command import ENV_VALUE_LIMIT, CommandChannel

from .helpers import DEADLINE_S, Problems, make_event, wait_for

pytestmark = pytest.mark.timeout(90)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "hook.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_script_gets_the_event_in_its_environment_and_as_json_on_stdin(tmp_path):
    hook = script(tmp_path, f"env -0 > {tmp_path}/env\ncat > {tmp_path}/stdin\n")
    (channel,) = parse_channels([f"command:{hook} --flag"])
    event = make_event(5, user="bob", pid=4242, summary="GPU 1 fell off the bus\nsecond line")
    channel.send(event, time.monotonic() + DEADLINE_S)
    pairs = (item.partition("=") for item in (tmp_path / "env").read_text().split("\0") if item)
    env = {name.removeprefix("NVTOPY_ALERT_"): value for name, _, value in pairs if name.startswith("NVTOPY_ALERT_")}
    assert len(env) == 19
    assert env["RULE"] == "gpu-xid" and env["NAME"] == "GpuXid" and env["TRANSITION"] == "firing"
    assert env["SEVERITY"] == "critical" and env["GPU"] == "1" and env["HOST"] == "host-a" and env["XID"] == "79"
    assert env["PID"] == "4242" and env["USER"] == "bob" and env["UUID"] == "GPU-1234"
    assert env["SUMMARY"] == "GPU 1 fell off the bus\nsecond line"
    assert env["HEADLINE"] == "FIRING critical: Xid 79 on GPU 1" and env["EPOCH"] == "1700000005.000"
    assert json.loads((tmp_path / "stdin").read_text()) == event.to_json()


def test_missing_values_are_empty_and_nul_is_removed(tmp_path):
    hook = script(
        tmp_path, f'printf "%s|%s|%s" "$NVTOPY_ALERT_PID" "$NVTOPY_ALERT_USER" "$NVTOPY_ALERT_VALUE" > {tmp_path}/out\n'
    )
    CommandChannel([str(hook)]).send(make_event(0, pid=None, user=None, value="a\0b"), time.monotonic() + DEADLINE_S)
    assert (tmp_path / "out").read_text() == "||ab"


def test_text_from_outside_reaches_the_environment_as_its_bytes_or_escaped(tmp_path):
    hook = script(
        tmp_path,
        f'printf "%s" "$NVTOPY_ALERT_USER" > {tmp_path}/user\nprintf "%s" "$NVTOPY_ALERT_VALUE" > {tmp_path}/value\n',
    )
    undecodable = b"caf\xe9".decode("utf-8", "surrogateescape")  # a Latin-1 user name, as the OS hands it over
    CommandChannel([str(hook)]).send(make_event(0, user=undecodable, value="x\ud800y"), time.monotonic() + DEADLINE_S)
    assert (tmp_path / "user").read_bytes() == b"caf\xe9"
    assert (tmp_path / "value").read_text() == "x\\xed\\xa0\\x80y"  # escape_text's form


def test_no_shell_runs_the_words_of_an_event(tmp_path):
    hook = script(tmp_path, f'echo "$NVTOPY_ALERT_SUMMARY" > {tmp_path}/out\n')
    CommandChannel([str(hook)]).send(
        make_event(0, summary=f"$(touch {tmp_path}/pwned); `touch {tmp_path}/pwned`"), time.monotonic() + DEADLINE_S
    )
    assert (tmp_path / "out").exists() and not (tmp_path / "pwned").exists()


def test_a_failing_script_is_reported_once_with_the_end_of_its_output(tmp_path):
    hook = script(tmp_path, 'echo "cannot reach the pager" >&2\nexit 3\n')
    problems = Problems()
    channel = CommandChannel([str(hook)])
    dispatcher = Dispatcher([channel], problems)
    try:
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: dispatcher.stats()[0].failed == 3, "three failed runs")
        wait_for(lambda: problems.items, "the report")
        assert problems.about(channel.name) == [
            "failed: hook.sh exited 3: cannot reach the pager (not reported again until it works)"
        ]
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_a_program_that_does_not_exist_is_a_failure(tmp_path):
    with pytest.raises(ChannelError, match="nothing-here could not start: No such file or directory"):
        CommandChannel([str(tmp_path / "nothing-here")]).send(make_event(0), time.monotonic() + DEADLINE_S)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie waiting for a reaper (the container's init may be slow to reap) is gone too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return all(_gone(int(entry)) for entry in os.listdir("/proc") if entry.isdigit() and _pgid(int(entry)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def test_a_hanging_command_is_killed_at_its_deadline_with_its_whole_group(tmp_path):
    # The script starts a child of its own, records both pids, then waits for ever.
    hook = script(
        tmp_path, f"sleep 300 &\necho $$ $! > {tmp_path}/pids.tmp\nmv {tmp_path}/pids.tmp {tmp_path}/pids\nwait\n"
    )
    problems = Problems()
    channel = CommandChannel([str(hook)])
    dispatcher = Dispatcher([channel], problems, send_timeout=1.0)
    try:
        dispatcher.send(make_event(0))
        pids = wait_for(lambda: (tmp_path / "pids").exists() and (tmp_path / "pids").read_text().split(), "the pids")
        shell, child = (int(pid) for pid in pids)
        assert _pgid(child) == shell  # the script leads its own group, the child is in it
        wait_for(lambda: problems.items, "the deadline report")
        assert problems.about(channel.name) == [
            "failed: hook.sh ran past its deadline and was killed (not reported again until it works)"
        ]
        wait_for(lambda: _gone(shell) and _gone(child) and _group_gone(shell), "the whole process group to be gone")
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_a_command_that_ignores_its_stdin_still_runs(tmp_path):
    hook = script(tmp_path, f"touch {tmp_path}/ran\n")
    CommandChannel([str(hook)]).send(make_event(0, summary="x" * 200_000), time.monotonic() + DEADLINE_S)
    assert (tmp_path / "ran").exists()


def test_a_huge_value_is_cut_in_the_environment_and_whole_on_stdin(tmp_path):
    """One environment string may be 128 kB at most (Linux): a longer one would stop the command starting."""
    hook = script(tmp_path, f'printf "%s" "$NVTOPY_ALERT_SUMMARY" > {tmp_path}/env\ncat > {tmp_path}/stdin\n')
    event = make_event(0, summary="x" * 200_000)
    CommandChannel([str(hook)]).send(event, time.monotonic() + DEADLINE_S)
    assert (tmp_path / "env").read_text() == "x" * (ENV_VALUE_LIMIT - 1) + "…"
    assert json.loads((tmp_path / "stdin").read_text())["summary"] == "x" * 200_000


def test_the_name_and_description_show_the_program_and_not_its_arguments():
    channel = CommandChannel(["/usr/bin/curl", "-H", "Authorization: Bearer Sup3rS3cret", "https://x"])
    for text in (channel.name, channel.description, repr(channel)):
        assert "Sup3rS3cret" not in text
    assert channel.name == "command:curl"
    assert channel.description == "command /usr/bin/curl with 3 arguments (not shown)"


def test_two_commands_get_two_names():
    first, second = parse_channels([f"command:{sys.executable} a", f"command:{sys.executable} b"])
    assert first.name != second.name


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("command:", "[alerts] channels entry 1: 'command:' needs a program to run"),
        ("command:   ", "[alerts] channels entry 1: 'command:' needs a program to run"),
        ("command:curl 'Sup3rS3cret", "[alerts] channels entry 1: the command's words cannot be split"),
    ],
)
def test_a_bad_command_entry_is_a_usage_error(entry, message):
    with pytest.raises(UsageError) as caught:
        parse_channels([entry])
    assert str(caught.value).startswith(message) and "Sup3rS3cret" not in str(caught.value)
