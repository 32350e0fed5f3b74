"""A real OpenSSH server on loopback serving several test "hosts", for the ``nvtopy --ssh`` tests.

``nvtopy --ssh`` runs the system's ``ssh`` once per host; its tests need a real
``sshd`` on the other end (Debian's ``openssh-server``; ``.ci/run`` installs it as
root), not a mock of one: authentication failures, refused ports, hung and flooding
hosts are what the monitor must survive, and only a real server produces them as a
user meets them. Reuse :class:`SshLab` (the :func:`ssh_lab` fixture, or
:func:`running_ssh_lab` for a module of its own) rather than starting servers.

One ``sshd`` runs as the current user (root or not) on a free port of
127.0.0.1, with a throwaway host key and a throwaway user key made here by
``ssh-keygen``; nothing of the machine's own ssh configuration is read or changed
(as root, Debian's sshd needs its privilege separation directory ``/run/sshd``,
which is made if missing). Each "host" is a ``Host`` alias in :attr:`SshLab.config`
(an ``ssh_config`` for ``ssh -F``: OpenSSH reads ``~/.ssh`` from the passwd home,
not ``$HOME``, so the product takes ``-F FILE`` and the tests pass this one). Every
alias points at the same server and sends ``NVTOPY_TEST_HOST=<alias>`` (``SetEnv``,
let through by ``AcceptEnv``); the server's ``ForceCommand`` is a dispatcher that
runs that alias's *behaviour*, a sh script body, with the command the client sent
in ``$SSH_ORIGINAL_COMMAND``. Ready-made behaviours: :func:`run_remote_command`
(the host runs what it is sent, with the given directories first on its PATH: a
shim ``nvtopy`` from :func:`nvtopy_shim` or a fake ``nvidia-smi``),
:data:`NOTHING_INSTALLED`, :data:`HANG`, :data:`JUNK` and :data:`FLOOD`; and two
aliases that never reach a behaviour, :meth:`SshLab.add_wrong_key_host` and
:meth:`SshLab.add_refused_host`.

Every host's PATH ends in ``/usr/bin:/bin``, less any ``nvidia-*`` and ``nvtopy*``
there (on a GPU machine, a directory of links to the rest): a host has neither
unless the test puts one on it (``path_dirs=[Path("/usr/bin")]`` for the real ones).

Every wait has a deadline. Without ``sshd``, ``ssh`` or ``ssh-keygen``, or where
the server cannot start or let the test's key in, a test using the lab skips and
says why (the server log's last lines). sshd runs under a keeper process (a child
subreaper): at the end, or when the test process dies, it stops every process of
the lab, the server, the per-connection servers it forked and everything the
behaviours started, even after their client went away (without a terminal, sshd
leaves a command running when its client is killed). :meth:`SshLab.remote_pids`
lists what the hosts are running meanwhile.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SBIN = os.pathsep.join(["/usr/sbin", "/usr/local/sbin", "/sbin"])
SSHD = shutil.which("sshd", path=os.pathsep.join([os.environ.get("PATH", ""), _SBIN]))
SSH = shutil.which("ssh")
SSH_KEYGEN = shutil.which("ssh-keygen")
requires_sshd = pytest.mark.skipif(
    SSHD is None or SSH is None or SSH_KEYGEN is None,
    reason="sshd, ssh or ssh-keygen is missing (Debian: apt-get install openssh-server; .ci/run installs it as "
    "root): this test needs a real OpenSSH server on loopback",
)

STARTUP_S = 30.0  # sshd listening and the first login through (a cold start on a busy CI runner)
STOP_S = 10.0  # every process of the lab gone after SIGTERM, then SIGKILL
CONNECT_TIMEOUT_S = 10  # the client's ConnectTimeout (a -o of the caller's wins over it)

# The names an alias may have: a Host pattern without wildcards, a file name in the lab, a value for SetEnv.
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROBE = "lab-probe"  # the alias the lab logs in through to know it is ready (reserved)

# ----------------------------------------------------------------------------- behaviours


def run_remote_command(path_dirs: Sequence[Path] = ()) -> str:
    """The host runs the command it was sent (``sh -c "$SSH_ORIGINAL_COMMAND"``), ``path_dirs`` first on PATH."""
    prefix = "".join(f"{shlex.quote(str(d))}:" for d in path_dirs)
    return f'PATH={prefix}"$PATH"\nexport PATH\nexec sh -c "$SSH_ORIGINAL_COMMAND"\n'


# A host with neither nvtopy nor nvidia-smi (the lab's PATH has none): the command it is sent fails as it would there.
NOTHING_INSTALLED = run_remote_command()
# Logs in, then never prints and never exits (a hung driver, a stuck NFS home).
HANG = "exec sleep 100000\n"
# Binary bytes, terminal escape sequences (clear screen, a title, colours, an 8-bit CSI), a 10 MB line, then a hang.
JUNK = (
    r"printf '\000\001\002\177\200\376\377 binary\n'" "\n"
    r"printf '\033[2J\033[H\033]0;owned\007\033[31mred\033[0m\r\233 31m csi8\033P dcs \033\\\n'" "\n"
    "head -c 10485760 /dev/zero | tr '\\000' 'A'\n"
    "printf '\\n'\n"
    "exec sleep 100000\n"
)  # fmt: skip
JUNK_LINE_BYTES = 10 * 1024 * 1024
# Lines, forever, as fast as the host can write them.
FLOOD = "exec yes 'flood flood flood flood flood flood flood flood flood flood flood flood flood flood'\n"


def nvtopy_shim(directory: Path, *extra_args: str) -> Path:
    """An executable ``nvtopy`` in ``directory`` running this checkout's CLI: ``python -m nvtopy "$@" EXTRA_ARGS``.

    The tests' own interpreter (this checkout's venv) with this checkout first on
    its path, so a "host" runs the code under test: for example ``nvtopy_shim(d,
    "--demo", "--demo-gpus", "2", "--demo-seed", "3")`` and ``path_dirs=[d]``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "nvtopy"
    args = " ".join(shlex.quote(a) for a in extra_args)
    shim.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH={shlex.quote(str(ROOT))}\n"
        "export PYTHONPATH\n"
        f'exec {shlex.quote(sys.executable)} -m nvtopy "$@" {args}\n',
        encoding="utf-8",
    )
    shim.chmod(0o755)
    return shim


# ----------------------------------------------------------------------------- processes, from /proc


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in ticks) of ``pid``, or None where it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces and parentheses
    return int(fields[1]), fields[0], int(fields[19])


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (an orphan nobody reaps is dead for the tests' purpose)."""
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _environ_has(pid: int, entries: Sequence[bytes]) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False
    return all(entry in environ for entry in entries)


def _same(pid: int, started: int) -> bool:
    """``pid`` is alive and still the process found then (same start time: never a reused pid)."""
    stat = _stat(pid)
    return stat is not None and stat[2] == started and stat[1] != "Z"


def _kill(pids: Mapping[int, int], signum: int) -> None:
    for pid, started in pids.items():
        if _same(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


# ----------------------------------------------------------------------------- the lab


class SshLab:
    """A running ``sshd`` on 127.0.0.1 and the ``ssh_config`` whose aliases are its "hosts".

    Made by :func:`running_ssh_lab` (or the :func:`ssh_lab` fixture); hosts are added
    at any time, the server keeps running (each login reads its alias's script then).

    Attributes: :attr:`config` (for ``ssh -F``), :attr:`port`, :attr:`user`,
    :attr:`pid` (the listening sshd), :attr:`log` (sshd's log), :attr:`root` (the
    lab's directory), :attr:`login_seconds` (how long the readiness login took).
    """

    def __init__(self, root: Path, port: int, user: str, token: str) -> None:
        self.root = root
        self.port = port
        self.user = user
        self.token = token  # in every remote command's environment (NVTOPY_TEST_LAB): how teardown finds them
        self.config = root / "ssh_config"
        self.log = root / "sshd.log"
        self.pid = 0
        self.login_seconds = 0.0
        self.process: subprocess.Popen[bytes] | None = None
        self.key = root / "user_key"
        self.wrong_key = root / "wrong_key"
        self.hosts_dir = root / "hosts"
        self._blocks: dict[str, str] = {}
        self._closed_port: socket.socket | None = None

    # ---- hosts

    def add_host(
        self,
        alias: str,
        behaviour: str | Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        path_dirs: Sequence[Path] = (),
    ) -> str:
        """Serve ``alias``: its ``behaviour`` runs (with ``env`` set, ``path_dirs`` first on PATH) on each login.

        ``behaviour``: a sh script body (the command sent is ``$SSH_ORIGINAL_COMMAND``),
        an executable file (run with the same environment), or None for
        :func:`run_remote_command`. Returns ``alias`` (for ``ssh -F lab.config ALIAS``).
        Adding an alias again replaces it from its next login on (a host that goes from
        live to hung, or back).
        """
        self._check_alias(alias)
        return self._serve(alias, behaviour, env=env, path_dirs=path_dirs)

    def add_wrong_key_host(self, alias: str) -> str:
        """An alias that logs in with a key the server does not accept: ``Permission denied (publickey)``."""
        self._check_alias(alias)
        self._set_block(alias, port=self.port, key=self.wrong_key)
        return alias

    def add_refused_host(self, alias: str) -> str:
        """An alias pointing at a loopback port nothing listens on (held bound here): ``Connection refused``."""
        self._check_alias(alias)
        if self._closed_port is None:
            self._closed_port = socket.socket()
            self._closed_port.bind(("127.0.0.1", 0))  # bound, never listening: the kernel refuses, nobody takes it
        self._set_block(alias, port=self._closed_port.getsockname()[1], key=self.key)
        return alias

    # ---- using it

    def ssh_command(self, alias: str, command: str, *options: str) -> list[str]:
        """``ssh -F CONFIG [OPTIONS] ALIAS COMMAND``: the command line the monitor's own resembles."""
        assert SSH is not None
        return [SSH, "-F", str(self.config), *options, alias, command]

    def ssh(self, alias: str, command: str, *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``alias`` to its end (``timeout`` bounds a hang: TimeoutExpired), output as text."""
        return subprocess.run(
            self.ssh_command(alias, command),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def remote_pids(self, alias: str | None = None) -> list[int]:
        """The live processes the lab's hosts (or ``alias``'s only) are running for their logins, now."""
        entries = [f"NVTOPY_TEST_LAB={self.token}".encode()]
        if alias is not None:
            entries.append(f"NVTOPY_TEST_HOST={alias}".encode())
        return sorted(pid for pid in _pids() if _environ_has(pid, entries) and alive(pid))

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` of sshd's log (and of what it printed before it could log)."""
        text = ""
        for path in (self.root / "sshd.out", self.log):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    def close(self) -> None:
        """Stop the server and every process of the lab (SIGTERM, then SIGKILL), within :data:`STOP_S`.

        The keeper (:data:`_KEEPER`) does it: every process of the lab is its
        descendant or, orphaned, its child. Anything with the lab's mark left after
        it (a keeper killed outright) is stopped here.
        """
        process, self.process = self.process, None
        if self._closed_port is not None:
            self._closed_port.close()
            self._closed_port = None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_S + 5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_S)
        end = time.monotonic() + STOP_S
        signum = signal.SIGTERM
        found: dict[int, int] = {}
        while True:
            for pid in self.remote_pids():
                stat = _stat(pid)
                if stat is not None:
                    found.setdefault(pid, stat[2])
            left = {pid: started for pid, started in found.items() if _same(pid, started)}
            if not left:
                return
            if time.monotonic() > end:
                raise RuntimeError(f"ssh lab: processes still running after {STOP_S:.0f} s: {sorted(left)}")
            _kill(left, signum)
            if time.monotonic() > end - STOP_S / 2:
                signum = signal.SIGKILL
            time.sleep(0.05)

    # ---- inside

    def _check_alias(self, alias: str) -> None:
        if not _ALIAS.fullmatch(alias) or alias == _PROBE:
            raise ValueError(f"not a usable test host alias: {alias!r}")

    def _serve(
        self, alias: str, behaviour: str | Path | None, *, env: Mapping[str, str] | None, path_dirs: Sequence[Path]
    ) -> str:
        if behaviour is None:
            behaviour = run_remote_command()
        body = f"exec {shlex.quote(str(behaviour))}\n" if isinstance(behaviour, Path) else behaviour
        lines = ["# generated by tests/sshd.py: the behaviour of test host " + alias]
        path = "".join(f"{shlex.quote(str(d))}:" for d in path_dirs) + _system_path()
        lines += [f"PATH={path}", "export PATH"]
        for name, value in (env or {}).items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"not an environment variable name: {name!r}")
            lines.append(f"{name}={shlex.quote(value)}\nexport {name}")
        _write_atomically(self.hosts_dir / f"{alias}.sh", "\n".join(lines) + "\n" + body)
        self._set_block(alias, port=self.port, key=self.key)
        return alias

    def _set_block(self, alias: str, *, port: int, key: Path) -> None:
        self._blocks[alias] = (
            f"Host {alias}\n"
            "  HostName 127.0.0.1\n"
            f"  Port {port}\n"
            f"  User {self.user}\n"
            f'  IdentityFile "{key}"\n'
            "  IdentitiesOnly yes\n"
            f"  SetEnv NVTOPY_TEST_HOST={alias} NVTOPY_TEST_LAB={self.token}\n"
        )
        common = (
            "Host *\n"
            "  UserKnownHostsFile /dev/null\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking no\n"
            "  UpdateHostKeys no\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR\n"
            "  IdentityAgent none\n"
            "  ControlMaster no\n"
            "  ControlPath none\n"
            "  ForwardAgent no\n"
            "  ForwardX11 no\n"
            f"  ConnectTimeout {CONNECT_TIMEOUT_S}\n"
        )
        text = "# generated by tests/sshd.py: the test hosts of one SshLab\n" + "".join(self._blocks.values()) + common
        _write_atomically(self.config, text)


def _write_atomically(path: Path, text: str) -> None:
    """A login (or the monitor's ssh) reading the file as it changes reads the old text or the new, never half."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def _sshd_config(lab: SshLab, version: tuple[int, int]) -> str:
    lines = [
        "# generated by tests/sshd.py: a throwaway sshd for the tests",
        f"Port {lab.port}",
        "ListenAddress 127.0.0.1",
        f'HostKey "{lab.root / "host_key"}"',
        f'PidFile "{lab.root / "sshd.pid"}"',
        f'AuthorizedKeysFile "{lab.root / "authorized_keys"}"',
        "AuthorizedPrincipalsFile none",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        "StrictModes no",
        "PrintMotd no",
        "PrintLastLog no",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitUserEnvironment no",
        "AcceptEnv NVTOPY_*",
        "LogLevel VERBOSE",
        "LoginGraceTime 30",
        # 64+ hosts log in at once: the default (10:30:100) drops unauthenticated connections past 10.
        "MaxStartups 1024",
        "MaxSessions 64",
        f"ForceCommand /bin/sh {shlex.quote(str(lab.root / 'dispatch.sh'))}",
    ]
    if version >= (8, 7):
        # The command runs through the user's login shell; bash sources ~/.bashrc under sshd at SHLVL < 2 (root's
        # here runs pyenv: 3 processes, 0.3 s a login). A test host's behaviour is the test's, not the machine's.
        lines.append("SetEnv SHLVL=1")
    if version >= (9, 8):
        # From 9.8 sshd refuses for a while an address whose logins failed: every test host is 127.0.0.1.
        lines.append("PerSourcePenalties no")
    return "\n".join(lines) + "\n"


_DISPATCH = """\
#!/bin/sh
# generated by tests/sshd.py: run the behaviour of the alias the client named (SetEnv NVTOPY_TEST_HOST)
case "${NVTOPY_TEST_HOST-}" in
    '' | *[!A-Za-z0-9._-]*) echo "ssh lab: no test host named in NVTOPY_TEST_HOST" >&2; exit 97 ;;
esac
script=HOSTS/$NVTOPY_TEST_HOST.sh
if [ ! -f "$script" ]; then
    echo "ssh lab: no test host $NVTOPY_TEST_HOST" >&2
    exit 97
fi
exec /bin/sh "$script"
"""


# The parent of sshd: a child subreaper (Linux), so that every process of the lab, orphaned (a per-connection
# sshd once the listener is gone, a command once its session is gone: sshd leaves commands without a terminal
# running), becomes its child, is stopped and is reaped here (an init that reaps nothing would keep zombies).
# SIGTERM, or the death of the test process that started it: stop sshd, then every child, SIGKILL after a while.
# argv: the test process's pid, then sshd's command line.
_KEEPER = """\
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: the tests' process died
class Stop(Exception):
    pass
def stop(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stop
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
code = 0
try:
    if os.getppid() != int(sys.argv[1]):
        raise Stop
    server = os.fork()
    if server == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            os.execv(sys.argv[2], sys.argv[2:])
        except OSError as exc:
            print(f"cannot run {sys.argv[2]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == server:
            code = os.waitstatus_to_exitcode(status)
            break
except (Stop, ChildProcessError):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
end = time.monotonic() + 10
signum = signal.SIGTERM
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        break
    me = str(os.getpid())
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[1] == me:
            try:
                os.kill(int(name), signum)
            except OSError:
                pass
    if time.monotonic() > end - 5:
        signum = signal.SIGKILL
    if time.monotonic() > end:
        break
    time.sleep(0.02)
sys.exit(max(code, 0))
"""


def _keygen(path: Path) -> None:
    assert SSH_KEYGEN is not None
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "nvtopy-test", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


_HIDDEN = ("nvidia-", "nvtopy")  # what no test host has unless the test puts it on its PATH


@functools.cache
def _system_path(system: tuple[str, ...] = ("/usr/bin", "/bin")) -> str:
    """The end of every host's PATH: /usr/bin and /bin, or where they hold an nvidia-* or nvtopy*, links to the rest.

    The links (a thousand, a second on a loaded machine) are made once per test process, in a
    directory removed at its exit; a machine without a driver (CI) has none to hide and needs none.
    """
    directories: list[Path] = []
    for directory in map(Path, system):
        if directory.is_dir() and all(directory.resolve() != d.resolve() for d in directories):
            directories.append(directory)
    names = {d: sorted(os.listdir(d)) for d in directories}
    if not any(name.startswith(_HIDDEN) for listed in names.values() for name in listed):
        return ":".join(str(d) for d in directories)
    target = Path(tempfile.mkdtemp(prefix="nvtopy-ssh-lab-bin-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    for directory, listed in names.items():
        for name in listed:
            if not name.startswith(_HIDDEN) and not (target / name).is_symlink():
                (target / name).symlink_to(directory / name)
    return shlex.quote(str(target))


@functools.cache
def _sshd_version() -> tuple[int, int]:
    """This sshd's OpenSSH version (major, minor), for the options it knows; (0, 0) where it does not say."""
    assert SSHD is not None
    result = subprocess.run([SSHD, "-V"], capture_output=True, text=True, timeout=30, check=False)
    found = re.search(r"OpenSSH_(\d+)\.(\d+)", result.stdout + result.stderr)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def running_ssh_lab(root: Path) -> Iterator[SshLab]:
    """An :class:`SshLab` in the empty directory ``root``, ready (one login went through); stopped afterwards.

    Skips the test (``pytest.skip``, saying why) where sshd, ssh or ssh-keygen is
    missing, where sshd does not start or where the test's key does not log in.
    """
    if SSHD is None or SSH is None or SSH_KEYGEN is None:
        pytest.skip("sshd, ssh or ssh-keygen is missing (Debian: apt-get install openssh-server)")
    if re.search(r"[\s\"'%\\]", str(root)):
        raise ValueError(f"the lab's directory must be a plain path (sshd_config quoting, % tokens): {root}")
    user = pwd.getpwuid(os.getuid()).pw_name
    lab = SshLab(root, 0, user, secrets.token_hex(8))
    root.mkdir(parents=True, exist_ok=True)
    lab.hosts_dir.mkdir()
    for key in (root / "host_key", lab.key, lab.wrong_key):
        _keygen(key)
    (root / "authorized_keys").write_bytes(lab.key.with_suffix(".pub").read_bytes())
    (root / "dispatch.sh").write_text(_DISPATCH.replace("HOSTS", shlex.quote(str(lab.hosts_dir))), encoding="utf-8")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # Debian's sshd refuses to start as root without it
    try:
        _start(lab)
        lab._serve(_PROBE, None, env=None, path_dirs=())
        started = time.monotonic()
        result = lab.ssh(_PROBE, "true", timeout=STARTUP_S)
        lab.login_seconds = time.monotonic() - started
        if result.returncode != 0:
            reason = (result.stderr.strip().splitlines() or ["no message"])[-1]
            pytest.skip(f"sshd on 127.0.0.1:{lab.port} does not let the test's key in: {reason}; sshd log: "
                        f"{lab.log_tail(1)}")  # fmt: skip
        yield lab
    finally:
        lab.close()


def _start(lab: SshLab) -> None:
    """Start sshd on a free port (another, where one taken meanwhile fails it); return once it listens."""
    assert SSHD is not None
    version = _sshd_version()
    for _ in range(3):
        lab.port, lab.pid = _free_port(), 0
        config = lab.root / "sshd_config"
        config.write_text(_sshd_config(lab, version), encoding="utf-8")
        lab.log.unlink(missing_ok=True)
        pid_file = lab.root / "sshd.pid"
        pid_file.unlink(missing_ok=True)
        with (lab.root / "sshd.out").open("wb") as out:
            lab.process = subprocess.Popen(
                [sys.executable, "-c", _KEEPER, str(os.getpid()), SSHD, "-D", "-f", str(config), "-E", str(lab.log)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=lab.root,
            )
        end = time.monotonic() + STARTUP_S
        while time.monotonic() < end and lab.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                lab.pid = int(pid_file.read_text())  # written once sshd listens
            if lab.pid and _listening(lab.port):
                return
            time.sleep(0.02)
        how = "exited" if lab.process.poll() is not None else f"not serving after {STARTUP_S:.0f} s"
        lab.close()
        if "Address already in use" not in lab.log_tail(5):
            break
    said = " / ".join(lab.log_tail(2).splitlines()) or "no log"  # the option or file it names, then why it stopped
    pytest.skip(f"sshd did not start on 127.0.0.1:{lab.port} ({how}): {said}")


@pytest.fixture
def ssh_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """A ready :class:`SshLab` for one test, with no host yet: ``ssh_lab.add_host(...)``, ``-F ssh_lab.config``.

    Import it into a test module by its name (``ssh_lab = sshd.ssh_lab``). A module wanting one
    lab for all its tests makes a module-scoped fixture of :func:`running_ssh_lab`
    (``tests/conftest.py`` then keeps those tests on one xdist worker).
    """
    with running_ssh_lab(tmp_path_factory.mktemp("ssh-lab")) as lab:
        yield lab
