"""What ``nvtopy --ssh`` runs: the local ``ssh`` command line, and the script the far side runs.

**The ssh command line.** The system's OpenSSH client, so the user's
``~/.ssh/config`` (aliases, ``ProxyJump``, ``User``), agent, keys and
``known_hosts`` work exactly as at their prompt. nvtopy adds only what a
monitor needs: ``BatchMode=yes`` (never a password or host-key prompt inside
the TUI: a host that would ask is a host that says why), a connect timeout,
keep-alives (a dead network is noticed by ssh too), no terminal (``-T``: a
pseudo-terminal would mangle the stream), no X11 or agent forwarding, and
``--`` before the host (:class:`~.targets.SshTarget` never begins with ``-``
either). ``--ssh-config`` (``-F``) and ``--ssh-option`` (``-o``) pass through.

**The far side's script.** The remote command is ``exec sh -s``: a POSIX shell
that reads its script from the session's standard input. Why not the script
itself as the command: ssh hands the command to the user's *login* shell, which
may be fish or tcsh, whose quoting differs from sh's; ``exec sh -s`` means the
same in all of them, and the script then runs in ``sh`` whatever the login
shell is. The stdin that carried the script stays open afterwards, and the far
``nvtopy serve-stdio`` ends when it reaches EOF: when this monitor's ssh goes
away, so does the far process (a dropped network ends it by SIGPIPE at its next
line).

The script tries, in order: the ``nvtopy`` the config names
(``[ssh] remote_nvtopy``), ``nvtopy`` on the PATH of a non-interactive shell,
``~/.local/bin/nvtopy`` (pip's ``--user`` place, often not on that PATH) and
``python3 -m nvtopy``; an nvtopy too old for ``serve-stdio`` is passed over
(:func:`remote_script`). Then ``nvidia-smi``'s query loop
(:func:`~nvtopy.formats.nvidia_smi_csv.loop_command`), and where neither
exists one stream line saying so (:func:`~nvtopy.formats.stream.error_line`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ....formats.nvidia_smi_csv import loop_command
from ....formats.stream import error_line
from .targets import SshTarget

__all__ = ["NOTHING_INSTALLED", "REMOTE_COMMAND", "remote_script", "ssh_argv"]

REMOTE_COMMAND = "exec sh -s"
NOTHING_INSTALLED = "neither nvtopy nor nvidia-smi found (on the PATH of a non-interactive ssh session)"
KEEPALIVE_S = 5  # ssh's own probe of a silent connection; 3 missed: ssh ends, the host is lost


def ssh_argv(
    target: SshTarget,
    *,
    program: str = "ssh",
    config_file: str | None = None,
    options: Sequence[str] = (),
    connect_timeout: float = 10.0,
) -> list[str]:
    """The local command line that opens ``target``'s stream (the script goes to its stdin)."""
    argv = [
        program,
        "-T",
        "-x",
        "-a",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={max(1, round(connect_timeout))}",
        "-o",
        f"ServerAliveInterval={KEEPALIVE_S}",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "LogLevel=ERROR",
    ]
    if config_file is not None:
        argv += ["-F", config_file]
    for option in options:
        argv += ["-o", option]
    return [*argv, *target.ssh_arguments(), REMOTE_COMMAND]


def remote_script(interval: float, remote_nvtopy: str | None = None) -> str:
    """The POSIX sh script the far side runs: nvtopy's stream if it can, else nvidia-smi's loop, else why not.

    An nvtopy found is run at once, not asked first whether it has ``serve-stdio`` (that question
    costs a Python start, a few tenths of a second before the host shows): one too old for it
    ends with argparse's status 2 before saying anything of the stream, and the script goes on
    to the next way. ``python3 -m nvtopy`` is tried only where ``python3`` imports a
    ``serve-stdio``, so a python3 without nvtopy is passed over.
    """
    serve = f"serve-stdio --interval {interval:g}"
    candidates = [shlex.quote(remote_nvtopy)] if remote_nvtopy else []
    candidates += ["nvtopy", '"$HOME/.local/bin/nvtopy"']
    # In braces: the shell reads the whole script before it runs any of it, so a program started here
    # (bash as sh reads a script from a pipe a byte at a time) finds nothing of it left on stdin.
    lines = ["{", "exec 2>&1"]  # the far side's complaints travel in the stream, where the monitor can quote them
    for command in candidates:
        lines.append(
            f"if command -v {command} >/dev/null 2>&1; then {command} {serve}; s=$?; [ $s = 2 ] || exit $s; fi"
        )
    lines.append(
        f"if python3 -c 'import nvtopy.commands.serve_stdio' >/dev/null 2>&1; then exec python3 -m nvtopy {serve}; fi"
    )
    lines.append("if command -v nvidia-smi >/dev/null 2>&1; then")
    lines.append(loop_command(interval))
    lines.append("fi")
    lines.append(f"printf '%s\\n' {shlex.quote(error_line(NOTHING_INSTALLED).rstrip())}")
    lines.append("exit 127")
    lines.append("}")
    return "\n".join(lines) + "\n"
