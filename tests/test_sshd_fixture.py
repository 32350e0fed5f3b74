"""The real-sshd lab of ``tests/sshd.py``, observed through the real ``ssh -F CONFIG ALIAS COMMAND``.

Each behaviour does what the ``nvtopy --ssh`` tests rely on it to do, every alias
gets its own environment, and closing the lab leaves no process behind. Skipped
(saying why) where sshd, ssh or ssh-keygen is missing or sshd cannot run here.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import sshd
from .builders import run_nvtopy
from .conftest import ROOT
from .sshd import (
    FLOOD,
    HANG,
    JUNK,
    JUNK_LINE_BYTES,
    NOTHING_INSTALLED,
    SshLab,
    _system_path,
    alive,
    nvtopy_shim,
    requires_sshd,
    run_remote_command,
    running_ssh_lab,
)
from .waiting import until

pytestmark = [requires_sshd, pytest.mark.real_server]
ssh_lab = sshd.ssh_lab  # the fixture, here by its name

DEADLINE_S = 30.0


def wait_for(what: str, check, deadline_s: float = DEADLINE_S):
    """:func:`tests.waiting.until` with the lab's deadline, ``what`` first (it reads first at every call here)."""
    return until(check, deadline_s, what)


def start(lab: SshLab, alias: str, command: str, out: Path) -> subprocess.Popen[bytes]:
    """``ssh ALIAS COMMAND`` in the background, its output to the file ``out`` (never a pipe left unread)."""
    with out.open("wb") as sink:
        return subprocess.Popen(
            lab.ssh_command(alias, command), stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )


def tail(path: Path, size: int) -> bytes:
    with path.open("rb") as file:
        file.seek(max(0, path.stat().st_size - size))
        return file.read()


def stop_client(client: subprocess.Popen[bytes]) -> None:
    client.kill()
    client.wait(timeout=DEADLINE_S)


def test_a_host_runs_the_command_it_is_sent(ssh_lab: SshLab):
    ssh_lab.add_host("gpu-a", run_remote_command())
    result = ssh_lab.ssh("gpu-a", "echo hi; echo $NVTOPY_TEST_HOST; exit 3")
    assert (result.stdout, result.returncode) == ("hi\ngpu-a\n", 3), result.stderr


def test_each_alias_has_its_own_environment(ssh_lab: SshLab):
    ssh_lab.add_host("gpu-a", env={"GREETING": "from a", "EMPTY": ""})
    ssh_lab.add_host("gpu-b", env={"GREETING": "it's b; $(not run)"})
    assert ssh_lab.ssh("gpu-a", 'echo "$GREETING|$EMPTY|$NVTOPY_TEST_HOST"').stdout == "from a||gpu-a\n"
    assert ssh_lab.ssh("gpu-b", 'echo "$GREETING|$NVTOPY_TEST_HOST"').stdout == "it's b; $(not run)|gpu-b\n"


def test_a_host_finds_what_its_path_dirs_hold_and_nothing_else(ssh_lab: SshLab, tmp_path: Path):
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'fake nvidia-smi' \"$@\"\n", encoding="utf-8")
    smi.chmod(0o755)
    ssh_lab.add_host("smi-only", path_dirs=[fake])
    ssh_lab.add_host("smi-by-behaviour", run_remote_command([fake]))
    ssh_lab.add_host("bare", NOTHING_INSTALLED)
    for alias in ("smi-only", "smi-by-behaviour"):
        result = ssh_lab.ssh(alias, "nvidia-smi -L; command -v nvtopy || echo no nvtopy")
        assert result.stdout == "fake nvidia-smi -L\nno nvtopy\n", (alias, result.stderr)
    # The machine's own nvidia-smi (on a GPU machine) is hidden too: only what a test puts there is found.
    bare = ssh_lab.ssh("bare", "command -v nvidia-smi; command -v nvtopy; nvidia-smi -L")
    assert bare.stdout == ""
    assert bare.returncode == 127, bare.stderr
    assert "nvidia-smi" in bare.stderr and "not found" in bare.stderr


def test_a_machines_own_nvidia_smi_and_nvtopy_are_hidden_from_the_hosts(tmp_path: Path):
    system = tmp_path / "usr-bin"
    system.mkdir()
    for name in ("nvidia-smi", "nvidia-debugdump", "nvtopy", "cat", "sh"):
        (system / name).write_text("#!/bin/sh\n", encoding="utf-8")
    path = Path(_system_path((str(system),)))
    assert path != system
    assert sorted(p.name for p in path.iterdir()) == ["cat", "sh"]
    assert (path / "cat").resolve() == system / "cat"
    (system / "nvidia-smi").unlink()
    (system / "nvidia-debugdump").unlink()
    (system / "nvtopy").unlink()
    assert _system_path((str(system), str(system))) == str(system), "nothing to hide: the directory itself"


def test_a_host_added_again_changes_its_behaviour_from_the_next_login(ssh_lab: SshLab):
    ssh_lab.add_host("flaky", "echo first\n")
    assert ssh_lab.ssh("flaky", "x").stdout == "first\n"
    ssh_lab.add_host("flaky", HANG)
    with pytest.raises(subprocess.TimeoutExpired):
        ssh_lab.ssh("flaky", "echo hi", timeout=1.0)
    ssh_lab.add_wrong_key_host("flaky")
    assert "Permission denied" in ssh_lab.ssh("flaky", "x").stderr


def test_an_executable_file_is_a_behaviour_too(ssh_lab: SshLab, tmp_path: Path):
    script = tmp_path / "behaviour"
    script.write_text('#!/bin/sh\necho "sent: $SSH_ORIGINAL_COMMAND"\n', encoding="utf-8")
    script.chmod(0o755)
    ssh_lab.add_host("scripted", script)
    assert ssh_lab.ssh("scripted", "nvtopy serve-stdio").stdout == "sent: nvtopy serve-stdio\n"


def test_the_nvtopy_shim_runs_this_checkout_with_its_extra_args(ssh_lab: SshLab, tmp_path: Path):
    bin_dir = tmp_path / "bin"
    nvtopy_shim(bin_dir, "--demo", "--demo-gpus", "2", "--demo-seed", "3")
    ssh_lab.add_host("gpu-a", path_dirs=[bin_dir])
    remote = ssh_lab.ssh("gpu-a", "nvtopy --once --json", timeout=60)
    assert remote.returncode == 0, remote.stderr
    local = run_nvtopy("--once", "--json", "--demo", "--demo-gpus", "2", "--demo-seed", "3")
    names = [[gpu["uuid"], gpu["name"]] for gpu in json.loads(local.stdout)["gpus"]]
    assert [[gpu["uuid"], gpu["name"]] for gpu in json.loads(remote.stdout)["gpus"]] == names
    assert len(names) == 2


def test_a_hung_host_logs_in_and_then_says_nothing_forever(ssh_lab: SshLab, tmp_path: Path):
    ssh_lab.add_host("hung", HANG)
    out = tmp_path / "out"
    client = start(ssh_lab, "hung", "nvtopy serve-stdio", out)
    try:
        wait_for("the hung host's command running", lambda: ssh_lab.remote_pids("hung"))
        with pytest.raises(subprocess.TimeoutExpired):
            client.wait(timeout=1.0)  # logged in, and neither an answer nor an end
        assert out.read_bytes() == b""
    finally:
        stop_client(client)
    with pytest.raises(subprocess.TimeoutExpired):
        ssh_lab.ssh("hung", "echo hi", timeout=1.0)


def test_a_junk_host_sends_binary_escapes_and_a_10_mb_line_then_hangs(ssh_lab: SshLab, tmp_path: Path):
    ssh_lab.add_host("junk", JUNK)
    out = tmp_path / "out"
    client = start(ssh_lab, "junk", "nvtopy serve-stdio", out)
    try:
        wait_for("the 10 MB line", lambda: out.stat().st_size > JUNK_LINE_BYTES)
        wait_for("the end of the 10 MB line", lambda: tail(out, 2) == b"A\n")
        assert client.poll() is None, "a junk host never ends its session"
    finally:
        stop_client(client)
    data = out.read_bytes()
    assert data.startswith(b"\x00\x01\x02\x7f\x80\xfe\xff binary\n")
    assert b"\x1b[2J" in data and b"\x1b]0;owned\x07" in data and b"\x9b" in data
    assert max(len(line) for line in data.split(b"\n")) == JUNK_LINE_BYTES


def test_a_flooding_host_writes_lines_until_the_client_goes(ssh_lab: SshLab, tmp_path: Path):
    ssh_lab.add_host("flood", FLOOD)
    out = tmp_path / "out"
    client = start(ssh_lab, "flood", "nvtopy serve-stdio", out)
    try:
        wait_for("a few MB of flood", lambda: out.stat().st_size > 4 * 1024 * 1024)
    finally:
        stop_client(client)
    lines = out.read_bytes().split(b"\n")[:-1]
    assert len(lines) > 10_000 and set(lines) == {b"flood " * 13 + b"flood"}
    # Without the client the flooding command ends (sshd closes its output): no host floods into nobody.
    wait_for("the flood's end", lambda: not ssh_lab.remote_pids("flood"))


def test_a_wrong_key_is_refused_by_the_server(ssh_lab: SshLab):
    ssh_lab.add_wrong_key_host("locked")
    result = ssh_lab.ssh("locked", "echo hi")
    assert (result.stdout, result.returncode) == ("", 255)
    assert "Permission denied (publickey)" in result.stderr
    assert "Failed publickey" in ssh_lab.log_tail(), "the server saw the key and refused it"


def test_a_closed_port_refuses_the_connection(ssh_lab: SshLab):
    ssh_lab.add_refused_host("down")
    result = ssh_lab.ssh("down", "echo hi", timeout=10)
    assert (result.stdout, result.returncode) == ("", 255)
    assert "Connection refused" in result.stderr


def test_an_unknown_alias_reaches_no_behaviour(ssh_lab: SshLab):
    ssh_lab.add_host("known")
    # The same server, an alias the lab never served (a -o on the command line wins over the config's SetEnv).
    other = subprocess.run(
        ssh_lab.ssh_command("known", "echo hi", "-o", "SetEnv=NVTOPY_TEST_HOST=never-added"),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert (other.stdout, other.returncode) == ("", 97)
    assert "no test host never-added" in other.stderr


def test_bad_aliases_are_refused():
    lab = SshLab(Path("/nonexistent"), 1, "nobody", "0")
    for alias in ("", "has space", "*", "a/b", "-o", "lab-probe", "x" * 65):
        with pytest.raises(ValueError, match="alias"):
            lab.add_wrong_key_host(alias)
    with pytest.raises(ValueError, match="environment variable"):
        lab._serve("ok", "true", env={"A B": "x"}, path_dirs=())


def test_closing_the_lab_stops_the_server_and_every_remote_process(tmp_path: Path):
    with running_ssh_lab(tmp_path / "lab") as lab:
        lab.add_host("hung", 'echo "$$"\n' + HANG)
        client = start(lab, "hung", "x", tmp_path / "out")
        remote = int(wait_for("the hung host's pid", lambda: (tmp_path / "out").read_text().strip()))
        assert alive(remote) and lab.remote_pids("hung") == [remote]
        stop_client(client)  # the client goes; sshd leaves the command running (no terminal, no SIGHUP)
        assert alive(remote)
        server = lab.pid
        assert alive(server)
    assert not alive(server)
    assert not alive(remote)
    assert lab.remote_pids() == []


def test_one_login_takes_under_a_few_seconds(ssh_lab: SshLab):
    ssh_lab.add_host("fast")
    times = []
    for _ in range(5):
        started = time.monotonic()
        assert ssh_lab.ssh("fast", "true").returncode == 0
        times.append(time.monotonic() - started)
    print(f"one ssh login + command: median {statistics.median(times):.3f} s, max {max(times):.3f} s")
    assert statistics.median(times) < 5.0, times


def test_a_killed_test_process_takes_its_lab_with_it(tmp_path: Path):
    """The keeper stops sshd and every remote process when the process that started the lab dies (SIGKILL)."""
    script = (
        "import subprocess, sys, time\n"
        "from pathlib import Path\n"
        "from tests.sshd import HANG, running_ssh_lab\n"
        f"with running_ssh_lab(Path({str(tmp_path / 'lab')!r})) as lab:\n"
        "    lab.add_host('hung', HANG)\n"
        "    subprocess.Popen(lab.ssh_command('hung', 'x'), stdin=subprocess.DEVNULL)\n"
        "    end = time.monotonic() + 30\n"
        "    while not lab.remote_pids('hung') and time.monotonic() < end:\n"
        "        time.sleep(0.05)\n"
        "    print(lab.pid, *lab.remote_pids('hung'), flush=True)\n"
        "    time.sleep(100)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert owner.stdout is not None
        pids = [int(pid) for pid in owner.stdout.readline().split()]  # bounded by the test's timeout
        assert len(pids) == 2 and all(alive(pid) for pid in pids), pids
    finally:
        owner.kill()
        owner.wait(timeout=DEADLINE_S)
    wait_for("the lab's sshd and remote command stopped", lambda: not any(alive(pid) for pid in pids))


def test_where_sshd_cannot_run_the_lab_skips_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    skipped = pytest.skip.Exception
    config = sshd._sshd_config
    monkeypatch.setattr(sshd, "_sshd_config", lambda *args: config(*args) + "NoSuchOption yes\n")  # sshd exits
    said = r"sshd did not start .*\(exited\): .*Bad configuration option: NoSuchOption"
    with pytest.raises(skipped, match=said), running_ssh_lab(tmp_path / "lab"):
        pass
    monkeypatch.setattr(sshd, "SSHD", None)
    with pytest.raises(skipped, match="sshd, ssh or ssh-keygen is missing"), running_ssh_lab(tmp_path / "other"):
        pass
