"""What ``--ssh`` runs: ssh's command line, and the far side's script under the shells a host may have."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nvtopy.formats.stream import read_line
from nvtopy.sources.remote.ssh.command import NOTHING_INSTALLED, REMOTE_COMMAND, remote_script, ssh_argv
from nvtopy.sources.remote.ssh.targets import parse_target

FAKE_NVIDIA_SMI = Path(__file__).resolve().parents[3] / "data" / "nvidia-smi" / "fake-nvidia-smi"
SHELLS = [shell for shell in ("sh", "dash", "bash") if shutil.which(shell)]


def test_ssh_never_prompts_and_never_reads_the_host_as_an_option():
    argv = ssh_argv(parse_target("alice@gpu1:2222"), config_file="/tmp/lab.config", options=["ProxyJump=bastion"])
    assert argv[0] == "ssh" and "-T" in argv
    assert argv[argv.index("BatchMode=yes") - 1] == "-o"  # never a password or host-key prompt
    assert argv[-5:-3] == ["-p", "2222"]
    assert argv[-3:] == ["--", "alice@gpu1", REMOTE_COMMAND]
    assert argv[argv.index("-F") + 1] == "/tmp/lab.config"
    assert argv[argv.index("ProxyJump=bastion") - 1] == "-o"


def _host(tmp_path: Path, programs: dict[str, str]) -> dict[str, str]:
    """A 'host': a PATH of only the given programs (sh scripts) and the basic tools, a home without nvtopy."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in programs.items():
        path = bin_dir / name
        path.write_text(body)
        path.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home)}


def _run(shell: str, env: dict[str, str], until: bytes, cwd: Path) -> list[bytes]:
    """The script as ``shell -s`` runs it on a host (read from stdin, kept open); its lines up to ``until``."""
    process = subprocess.Popen(
        [shell, "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(remote_script(0.2).encode())
    process.stdin.flush()  # and left open, as ssh's is
    lines: list[bytes] = []
    try:
        for line in iter(process.stdout.readline, b""):
            lines.append(line)
            if until in line or len(lines) > 200:
                break
    finally:
        process.kill()
        process.wait(10)
    return lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shell", SHELLS)
def test_an_nvtopy_too_old_for_serve_stdio_falls_through_to_nvidia_smi(tmp_path: Path, shell: str):
    # The old nvtopy reads its stdin first (as serve-stdio does): the script must not be left there for it to eat.
    old = "#!/bin/sh\ntimeout 0.3 cat >/dev/null\necho \"nvtopy: error: invalid choice: 'serve-stdio'\"\nexit 2\n"
    env = _host(tmp_path, {"nvtopy": old, "nvidia-smi": f'#!/bin/sh\nexec "{FAKE_NVIDIA_SMI}" "$@"\n'})
    lines = _run(shell, env, b"#nvtopy-smi end", tmp_path)
    assert any(b"invalid choice" in line for line in lines)
    assert lines[-1].startswith(b"#nvtopy-smi end"), lines[-3:]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shell", SHELLS)
def test_an_nvtopy_with_serve_stdio_is_run_and_its_end_is_the_scripts(tmp_path: Path, shell: str):
    hello = '{"nvtopy_stream": 1, "version": "9", "hostname": "h", "interval_s": 1}'
    new = f"#!/bin/sh\necho '{hello}'\nexit 0\n"
    env = _host(tmp_path, {"nvtopy": new, "nvidia-smi": f'#!/bin/sh\nexec "{FAKE_NVIDIA_SMI}" "$@"\n'})
    process = subprocess.run(
        [shell, "-s"], input=remote_script(1.0).encode(), capture_output=True, env=env, cwd=tmp_path, timeout=30
    )
    assert process.returncode == 0 and process.stdout.count(b"\n") == 1  # its status; no nvidia-smi after it
    assert read_line(process.stdout.strip()).hostname == "h"  # type: ignore[union-attr]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shell", SHELLS)
def test_neither_installed_is_one_stream_line_saying_so(tmp_path: Path, shell: str):
    env = _host(tmp_path, {})
    env["PATH"] = f"{tmp_path / 'bin'}:{tmp_path / 'nothing'}"  # not even /usr/bin: no python3, no nvidia-smi
    sh = shutil.which(shell)
    assert sh is not None
    process = subprocess.run(
        [sh, "-s"], input=remote_script(1.0).encode(), capture_output=True, env=env, cwd=tmp_path, timeout=30
    )
    assert process.returncode == 127
    said = read_line(process.stdout.strip().splitlines()[-1])
    assert said.message == NOTHING_INSTALLED  # type: ignore[union-attr]
    assert os.path.exists(tmp_path / "home")
