"""A stand-in for the ``ssh`` program, for the transport's own tests (the real sshd's tests are beside them).

Why a double at all: the transport's deadlines, bounds and cleanup are about what
comes out of an ``ssh`` process -- nothing, junk, a flood, a stream that stops --
and 256 hosts of them; a real sshd serves the end-to-end tests. The double takes
ssh's command line as nvtopy builds it, and acts by the host's name:

- ``hang*``: never says a word; ``denied*``: ssh's "Permission denied (publickey)." and exit 255;
- ``junk*``: 300 kB of binary, then silence; ``flood*``: a hello, a snapshot, then (empty) patches as fast as a
  pipe takes them; ``bigflood*``: whole snapshot lines as fast;
- ``longline*``: a hello, then one line without end; ``once*``: a hello, one snapshot, then silence;
- ``exits*``: a hello and two snapshots, then the session ends;
- anything else: the remote command run by ``sh`` (reading the script on stdin, as ``sh -s`` does on a real
  host), with ``FAKE_HOST`` set to the host and, first on PATH: for ``smi*``, only nvidia-smi (the fake of
  ``tests/data/nvidia-smi``); for ``real*``, this checkout's own nvtopy (``serve-stdio`` on simulated GPUs
  named after the host); for ``none*``, neither; else a far ``nvtopy`` that sends prepared lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nvtopy.backends.open import open_backend, simulated_spec
from nvtopy.formats.stream import StreamWriter
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import CADENCE, MONITOR_GROUPS

SCRIPT = r"""#!/bin/sh
for a; do last=$a; done
for a; do case $a in --) shift; break;; esac; shift; done
host=$1
export FAKE_HOST="$host"
cd "@HOME@" || exit 1  # a session starts in the home directory, never in this checkout (python3 -m nvtopy)
hello='{"nvtopy_stream": 1, "version": "0", "hostname": "'"$host"'", "interval_s": 1}'
case "$host" in
  hang*) exec sleep 100000;;
  denied*) echo "me@$host: Permission denied (publickey)." >&2; exit 255;;
  junk*) head -c 300000 /dev/urandom; exec sleep 100000;;
  flood*) echo "$hello"; cat "@LINE@"; exec yes '{"nvtopy_stream": 1, "patch": {}}';;
  bigflood*) echo "$hello"; exec yes "$(cat "@LINE@")";;
  longline*) echo "$hello"; head -c 40000000 /dev/zero | tr '\0' a; exec sleep 100000;;
  once*) echo "$hello"; cat "@LINE@"; exec sleep 100000;;
  exits*) echo "$hello"; cat "@LINE@"; cat "@LINE@"; exit 0;;
  smi*) PATH="@BIN@-smi:/usr/bin:/bin" exec sh -c "$last";;
  real*) PATH="@BIN@-real:/usr/bin:/bin" exec sh -c "$last";;
  none*) PATH="@BIN@-none:/usr/bin:/bin" exec sh -c "$last";;
esac
PATH="@BIN@:/usr/bin:/bin" exec sh -c "$last"
"""

# A far nvtopy that streams a prepared snapshot line: the hello with its host's name, then the line each period.
FAR_NVTOPY = r"""#!/bin/sh
case "$*" in *--help*) exit 0;; esac
echo '{"nvtopy_stream": 1, "version": "0", "hostname": "'"$FAKE_HOST"'", "interval_s": 1}'
while :; do for line in "@LINES@"/line*.json; do cat "$line" || exit 1; sleep @PERIOD@; done; done
"""


# This checkout's nvtopy on a "host": serve-stdio on two simulated GPUs, named after the host.
REAL_NVTOPY = r"""#!/bin/sh
exec "@PYTHON@" -m nvtopy "$@" --demo --demo-gpus 2 --demo-hostname "$FAKE_HOST"
"""
FAKE_NVIDIA_SMI = Path(__file__).resolve().parents[3] / "data" / "nvidia-smi" / "fake-nvidia-smi"


def snapshot_lines(gpus: int = 2, processes: int | None = None, seed: int = 1, count: int = 1) -> list[str]:
    """``count`` consecutive snapshot lines of ``serve-stdio``'s stream (the first whole, then patches: sent in a
    loop, they begin again with a whole one) of simulated GPUs, 1 s apart.

    Each reads the groups the live poller would at that second (:data:`~nvtopy.sources.poller.CADENCE`: NVLink
    every 5 s, clocks every 2 s, ...), so consecutive lines differ as a far ``serve-stdio``'s do.
    """
    now = [1_795_000_000.0]
    backend = open_backend(simulated_spec(gpus=gpus, processes_per_gpu=processes, seed=seed, clock=lambda: now[0]))
    collector = Collector(backend, timeline=False)
    collector.collect(MONITOR_GROUPS)
    writer = StreamWriter(whole_every=count)  # serve-stdio's lines: the first whole, then patches
    lines = []
    for second in range(1, count + 1):
        now[0] += 1.0
        due = {g for g in MONITOR_GROUPS if CADENCE[g] == 0 or second % round(CADENCE[g]) == 0}
        snapshot = collector.collect(due, process_utilization=second % 2 == 0)
        lines.append(writer.snapshot(snapshot))
    return lines


def snapshot_line(gpus: int = 2, processes: int | None = None, seed: int = 1) -> str:
    """One whole snapshot line (``nvtopy record``'s) of simulated GPUs."""
    return snapshot_lines(gpus, processes, seed)[0]


def install(
    tmp_path: Path, *, gpus: int = 2, processes: int | None = None, period: float = 0.2, lines: int = 1
) -> Path:
    """Write the double (``ssh``), a far ``nvtopy`` in its ``bin`` and the lines it sends in turn; the double's path.

    ``processes``: the simulator's process slots per GPU (None: its default, a few busy per GPU).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "lines"
    folder.mkdir(exist_ok=True)
    for n, text in enumerate(snapshot_lines(gpus, processes, count=lines)):
        (folder / f"line{n:03d}.json").write_text(text)
    line = folder / "line000.json"
    ssh = tmp_path / "ssh"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    ssh.write_text(SCRIPT.replace("@BIN@", str(bin_dir)).replace("@LINE@", str(line)).replace("@HOME@", str(home)))
    ssh.chmod(0o755)
    far = bin_dir / "nvtopy"
    far.write_text(FAR_NVTOPY.replace("@LINES@", str(folder)).replace("@PERIOD@", f"{period:g}"))
    far.chmod(0o755)
    for kind in ("smi", "real", "none"):
        (tmp_path / f"bin-{kind}").mkdir(exist_ok=True)
    smi = tmp_path / "bin-smi" / "nvidia-smi"
    if not smi.is_symlink():
        smi.symlink_to(FAKE_NVIDIA_SMI)
    real = tmp_path / "bin-real" / "nvtopy"
    real.write_text(REAL_NVTOPY.replace("@PYTHON@", sys.executable))
    real.chmod(0o755)
    return ssh


if __name__ == "__main__":  # print a line, to look at
    json.dump(json.loads(snapshot_line()), sys.stdout, indent=1)
